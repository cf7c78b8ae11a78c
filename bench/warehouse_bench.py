"""Benchmark: Warehouse.write throughput (rows/s) into a fresh DuckDB file.

The records are the bundled example objects resolved through the catalog
(every framework, several states), spread over distinct workloads that each
go through a status history (Initializing, Running, a scale change,
Completed or Failed, then deletion for some), in batches as the Kafka writer
writes them.  Resolution is not timed; what is timed is Warehouse.write:
validation, Arrow columns, dedup, states, intervals, offsets, commit.

Four figures, one JSON line, in rows/s (wall clock) and rows per CPU-second (the machine is shared):
- ``texts``: records with their JSON text already in hand, parsed as strict JSON (as the Kafka
  writer hands them to ``Warehouse``): the writer alone;
- ``messages``: the Kafka writer's whole path from the messages' bytes (``check_messages``: parse
  with orjson, check, then write), without a broker;
- ``dicts``: records given as dicts (JSON-encoded by write, as in the demo);
- ``replay``: the ``texts`` batches again (all duplicates, nothing written).
The process collects garbage as the services do (``collect_garbage_rarely``).

With ``--history`` (``make bench`` runs both): the writer's cost per batch as the history grows.
A history of N states (30,000, then 10,000,000) is seeded in SQL (``seed_history``: states,
intervals, transitions, the keyed current state of the live workloads and the keys of the
deleted ones, as the writer would have left them; the same live set of 2,000 workloads at both
sizes, the rest deleted), then the same stream of batches of 300 real records (the resolved
examples) with their transitions is written through ``Warehouse.write`` as the Kafka writer
writes them: status changes, scale changes, new workloads and deletions.  Printed side by side:
median and p90 milliseconds per batch at each size, and their ratio (issue 14: <= 1.3).
"""

from __future__ import annotations

import argparse
import json
from collections import namedtuple
import os
import tempfile
import time


from workloadmap.catalog import Catalog
from workloadmap.catalog.registry import bundled_examples
from workloadmap.running import collect_garbage_rarely
from workloadmap.warehouse.consuming import WRITER_THREADS, check_messages
from workloadmap.warehouse.writing import Warehouse


# What the Kafka writer reads of a consumer record.
Message = namedtuple("Message", "topic partition offset key value")

STEPS = ("Initializing", "Running", "Running", "Running", "Completed", "Failed", "Deleted")


def resolved_examples() -> list[dict]:
    catalog = Catalog.builtin()
    return [catalog.resolve(d).to_dict() for d in bundled_examples()]


def history(n: int, per_workload: int = 8) -> list[dict]:
    """n records: n / per_workload workloads, each a sequence of states over time."""
    base = resolved_examples()
    out = []
    workloads = max(1, n // per_workload)
    for w in range(workloads):
        src = base[w % len(base)]
        uid = f"00000000-0000-4000-8000-{w:012d}"
        for k in range(per_workload):
            if len(out) >= n:
                break
            rec = dict(src)
            total = dict(src["total"])
            if k == 3:  # a scale change while running
                total["pods"] = total.get("pods", 0) + 1
            deleted = k == per_workload - 1 and w % 3 == 0
            status = "Deleted" if deleted else STEPS[min(k, 3)] if k < 4 else ("Completed" if w % 5 else "Failed")
            minute = w % 10_000 + k * 7
            rec.update(uid=uid, name=f"{src['name']}-{w}", resourceVersion=str(1000 + k), status=status,
                       total=total, cluster=f"cluster-{w % 3}",
                       observedAt=f"2025-06-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00Z",
                       eventType="DELETED" if deleted else ("ADDED" if k == 0 else "MODIFIED"), deleted=deleted)
            out.append(rec)
    # Interleave workloads as a stream would (each workload stays in order).
    out.sort(key=lambda r: r["observedAt"])
    return out


def timed_write(path: str, batches: list[list[dict]], texts: list[list[str]] | None,
                checkpoint: list | None = None) -> tuple[float, float, int]:
    """Wall and CPU seconds to write the batches of dicts (their texts given: as the Kafka writer
    hands them, parsed as strict JSON), and the states inserted.  The writer's own checkpoints
    (every 32MB of WAL, ~12,000 rows) are in the rows/s; with `checkpoint`, the seconds of a
    CHECKPOINT after them (what WAL is left) are appended to it."""
    with Warehouse(path) as wh:
        wh.conn.execute(f"SET threads = {WRITER_THREADS}")  # as the Kafka writer runs it
        start, start_cpu = time.perf_counter(), time.process_time()
        inserted = 0
        for i, batch in enumerate(batches):
            res = wh.write(batch, offsets={("workloadmap.workloads.v1", 0): (i + 1) * len(batch)},
                           texts=texts[i] if texts else None, texts_are_json=texts is not None)
            inserted += res.inserted
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        if checkpoint is not None:
            t0 = time.perf_counter()
            wh.conn.execute("CHECKPOINT")
            checkpoint.append(time.perf_counter() - t0)
        return elapsed, cpu, inserted


def timed_messages(path: str, batches: list[list[Message]]) -> tuple[float, float, int]:
    """The Kafka writer's whole path from the messages' bytes (parse, check, write), without a broker."""
    with Warehouse(path) as wh:
        wh.conn.execute(f"SET threads = {WRITER_THREADS}")  # as the Kafka writer runs it
        start, start_cpu = time.perf_counter(), time.process_time()
        inserted = 0
        for batch in batches:
            rows, texts, transitions, dead, offsets, texts_are_json = check_messages(batch)
            assert not dead
            inserted += wh.write_checked(rows, texts, transitions, offsets, texts_are_json=texts_are_json).inserted
        return time.perf_counter() - start, time.process_time() - start_cpu, inserted


LIVE = 2000  # live workloads, the same at every history size
STATES_PER_WORKLOAD = 20
SEED_T0 = 1_735_689_600  # 2025-01-01T00:00:00Z; one state every 3 s after it


def _uid(w: int) -> str:
    return f"00000000-0000-4000-8000-{w:012d}"


def seed_history(path: str, rows: int, live: int = LIVE, k: int = STATES_PER_WORKLOAD) -> int:
    """A warehouse holding `rows` states as the writer would have written them; returns the workloads.

    Workload w has states j = 0..k-1 at SEED_T0 + 3 (w k + j) seconds; the last `live` workloads are
    live (their last state open in workload_current), the others end with a deletion.
    """
    workloads = rows // k
    with Warehouse(path) as wh:
        c = wh.cursor()
        c.execute("SET TimeZone = 'UTC'")
        first_live = workloads - live
        base = f"""SELECT range AS i, range // {k} AS w, range % {k} AS j, to_timestamp({SEED_T0} + 3 * range) AS t,
                          range // {k} < {first_live} AND range % {k} = {k} - 1 AS deleted
                   FROM range({workloads * k})"""
        status = ("CASE WHEN deleted THEN 'Deleted' WHEN j = 0 THEN 'Initializing' "
                  "WHEN j % 3 = 0 THEN 'Degraded' ELSE 'Running' END")
        c.execute(f"""INSERT INTO state_history
            SELECT i + 1, 'cluster-' || (w % 3), printf('00000000-0000-4000-8000-%012d', w), 'batch/v1', 'Job',
                   'ns-' || (w % 50), 'job-' || w, 'job', 'Kubernetes', (1000 + j)::VARCHAR, (1000 + j)::VARCHAR,
                   1, 'built-in', to_timestamp({SEED_T0} + 3 * w * {k}), t,
                   CASE WHEN j = 0 THEN 'ADDED' WHEN deleted THEN 'DELETED' ELSE 'MODIFIED' END, deleted,
                   {status}, NULL, CASE WHEN deleted THEN 0 ELSE 1 END, CASE WHEN deleted THEN 0 ELSE 8 END,
                   CASE WHEN deleted THEN 0 ELSE 16 END, CASE WHEN deleted THEN 0 ELSE 68719476736 END,
                   CASE WHEN deleted THEN MAP {{}}::MAP(VARCHAR, DOUBLE) ELSE MAP {{'nvidia.com/gpu': 8.0}} END,
                   json_object('uid', printf('00000000-0000-4000-8000-%012d', w), 'status', {status})
            FROM ({base})""")
        # One interval per state (each one changes status), closed by the next; the Deleted ones
        # stay open in interval_history, the live workloads' last ones are in workload_current.
        c.execute(f"""INSERT INTO interval_history (cluster, uid, api_version, kind, namespace, name, definition,
                framework, status, valid_from, valid_to, pods, gpus, cpu, memory, gpu_resources, from_seq)
            SELECT cluster, uid, api_version, kind, namespace, name, definition, framework, status, observed_at,
                   lead(observed_at) OVER (PARTITION BY cluster, uid ORDER BY seq), pods, gpus, cpu, memory,
                   gpu_resources, seq
            FROM state_history
            QUALIFY NOT ((seq - 1) // {k} >= {first_live} AND (seq - 1) % {k} = {k} - 1)""")
        c.execute(f"""INSERT INTO workload_current BY NAME
            SELECT cluster, uid, seq, observed_at, version_key, api_version, kind, namespace, name, definition,
                   framework, status, observed_at AS valid_from, pods, gpus, cpu, memory, gpu_resources,
                   seq AS from_seq
            FROM state_history WHERE (seq - 1) // {k} >= {first_live} AND (seq - 1) % {k} = {k} - 1""")
        c.execute("INSERT INTO deleted_workloads SELECT md5_number_lower(cluster || '/' || uid) "
                  "FROM state_history WHERE deleted")
        c.execute("""INSERT INTO transitions
            SELECT cluster, uid, namespace, name, kind, framework, definition,
                   lag(status) OVER (PARTITION BY cluster, uid ORDER BY seq), status, observed_at, gpus, 3.0
            FROM state_history""")
        c.execute("CHECKPOINT")
    with Warehouse(path) as wh:  # the daily rollup as the writer keeps it (warehouse/rolling.py)
        wh.roll_up()
    return workloads


def stream(workloads: int, batches: int, size: int = 300, live: int = LIVE) -> list[tuple[list[dict], list[dict]]]:
    """Batches of records (and their transitions) continuing a seeded history of `workloads`."""
    base = resolved_examples()
    live_set = list(range(workloads - live, workloads))
    nxt = workloads
    t = SEED_T0 + 3 * workloads * STATES_PER_WORKLOAD
    statuses = ("Running", "Degraded", "Running", "Running")
    out = []
    for b in range(batches):
        recs, trans = [], []
        for i in range(size):
            t += 1
            rec_i = b * size + i
            if i < 2:  # a new workload
                w, status, deleted, event = nxt, "Initializing", False, "ADDED"
                live_set.append(w)
                nxt += 1
            elif i < 4:  # a deletion
                w, status, deleted, event = live_set.pop(0), "Deleted", True, "DELETED"
            else:
                w = live_set[(rec_i * 7) % len(live_set)]
                status, deleted, event = statuses[rec_i % len(statuses)], False, "MODIFIED"
            src = base[w % len(base)]
            total = dict(src["total"])
            if rec_i % 5 == 0:
                total["pods"] = total.get("pods", 0) + 1  # a scale change
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
            rec = dict(src, uid=_uid(w), name=f"{src['name']}-{w}", cluster=f"cluster-{w % 3}",
                       resourceVersion=str(100_000 + rec_i), status=status, total=total, observedAt=at,
                       eventType=event, deleted=deleted)
            recs.append(rec)
            trans.append({"cluster": rec["cluster"], "uid": rec["uid"], "namespace": rec.get("namespace"),
                          "name": rec["name"], "kind": rec["kind"], "framework": rec.get("framework"),
                          "definition": rec.get("definition"), "from": "Running", "to": status, "at": at,
                          "gpus": total.get("gpu"), "previousDurationSeconds": 60.0})
        out.append((recs, trans))
    return out


def batch_cost(rows: int, batches: int = 40, warmup: int = 5) -> dict:
    """Milliseconds per batch of 300 records written after a seeded history of `rows` states."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "history.duckdb")
        t0 = time.perf_counter()
        workloads = seed_history(path, rows)
        seeded_s = time.perf_counter() - t0
        work = stream(workloads, warmup + batches)
        texts = [[json.dumps(r, separators=(",", ":")) for r in recs] for recs, _ in work]
        times, cpu = [], []
        with Warehouse(path) as wh:
            wh.conn.execute(f"SET threads = {WRITER_THREADS}")  # as the Kafka writer runs it
            for i, (recs, trans) in enumerate(work):
                start, start_cpu = time.perf_counter(), time.process_time()
                res = wh.write(recs, trans, {("workloadmap.workloads.v1", 0): i + 1}, texts=texts[i])
                if i >= warmup:
                    times.append(time.perf_counter() - start)
                    cpu.append(time.process_time() - start_cpu)
                assert res.inserted == len(recs) and res.transitions_inserted == len(trans)
            live = wh.cursor().execute("SELECT count(*) FROM workload_current").fetchone()[0]
        times.sort()
        cpu.sort()
        return {"history_rows": workloads * STATES_PER_WORKLOAD, "seed_s": round(seeded_s, 1), "live": live,
                "median_ms": round(1000 * times[len(times) // 2], 1),
                "p90_ms": round(1000 * times[int(len(times) * 0.9)], 1),
                "cpu_median_ms": round(1000 * cpu[len(cpu) // 2], 1),
                "rows_per_cpu_s": round(300 / cpu[len(cpu) // 2])}


def history_main(sizes: list[int], batches: int) -> None:
    collect_garbage_rarely()  # as `workloadmap run warehouse` does
    results = [batch_cost(n, batches) for n in sizes]
    small, large = results[0], results[-1]
    print(json.dumps({
        "bench": "warehouse.batch_vs_history", "batch": 300, "batches": batches,
        "by_history": results,
        "median_ratio": round(large["median_ms"] / small["median_ms"], 2),
        "p90_ratio": round(large["p90_ms"] / small["p90_ms"], 2),
        "cpu_median_ratio": round(large["cpu_median_ms"] / small["cpu_median_ms"], 2),
        "target_ratio": 1.3, "cpus": os.cpu_count(),
    }))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--history", type=int, nargs="*", metavar="ROWS",
                    help="instead: cost per batch of 300 after seeded histories (default 30000 10000000)")
    ap.add_argument("--history-batches", type=int, default=40)
    args = ap.parse_args()
    if args.history is not None:
        history_main(args.history or [30_000, 10_000_000], args.history_batches)
        return
    recs = history(args.records)
    batches = [recs[i:i + args.batch] for i in range(0, len(recs), args.batch)]
    texts = [[json.dumps(r, separators=(",", ":")) for r in b] for b in batches]
    messages = [[Message("workloadmap.workloads.v1", 0, i * args.batch + j, None, t.encode()) for j, t in enumerate(b)]
                for i, b in enumerate(texts)]
    collect_garbage_rarely()  # as `workloadmap run warehouse` does
    with tempfile.TemporaryDirectory() as tmp:
        t_dicts, c_dicts, n1 = timed_write(os.path.join(tmp, "dicts.duckdb"), batches, None)
        t_msgs, c_msgs, n4 = timed_messages(os.path.join(tmp, "messages.duckdb"), messages)
        path = os.path.join(tmp, "texts.duckdb")
        checkpoint = []
        t_texts, c_texts, n2 = timed_write(path, batches, texts, checkpoint)
        t_replay, c_replay, n3 = timed_write(path, batches, texts)
        size = os.path.getsize(path)
    n = len(recs)
    print(json.dumps({
        "bench": "warehouse.write", "records": n, "batch": args.batch,
        "texts_rows_per_s": round(n / t_texts), "messages_rows_per_s": round(n / t_msgs),
        "dicts_rows_per_s": round(n / t_dicts), "replay_rows_per_s": round(n / t_replay),
        "rows_per_cpu_s": {"texts": round(n / c_texts), "messages": round(n / c_msgs), "dicts": round(n / c_dicts),
                           "replay": round(n / c_replay)},
        "checkpoint_s": round(checkpoint[0], 2),
        "texts_with_checkpoint_rows_per_s": round(n / (t_texts + checkpoint[0])),
        "target_rows_per_s": 50_000, "inserted": n2, "replay_inserted": n3,
        "file_mb": round(size / 2**20, 1), "cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
    }))
    assert n1 == n2 == n4 == len(recs) and n3 == 0


if __name__ == "__main__":
    main()
