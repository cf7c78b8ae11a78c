"""Benchmark: the warehouse writer alone on the pod stream (issue 25): its CPU per raw event, per batch.

What it measures is the writer's share of the pod pipeline without the broker, the worker or the
other processes on the cores: the messages the writer reads (workload, transition, pod and node
records) are made once, in this process, by the processors from the pod stream of
``bench/pipeline_bench.py --stream pods`` (``Fleet``: a simulated fleet's workloads, owners, pods
and nodes), then written as the Kafka writer writes them, ``check_messages`` then
``Warehouse.write_checked``, in batches of --batch messages each (one DuckDB thread, the garbage
collector as the services run it).  Timed: the process CPU of those two calls, over the whole
stream, for each batch size, on a new file each time.

Printed, one JSON line per batch size: CPU microseconds per raw event (the pipeline's unit: a raw
event makes 0.6 messages here), milliseconds per batch; then one line with the fixed cost per batch
and the cost per message, from a straight line through the smallest and the largest batch size.
Why several sizes: a batch's statements cost the same whatever its size, so the writer's CPU per
event falls with the batch size, and the pipeline's batch sizes follow the rate and the gathering
(warehouse/consuming.py).

``--minutes N`` measures the writer's memory within one life instead (issue 30: the soak's writer
grew within each life): the same messages replayed round after round into one file, each round
with fresh uids and node names (as bench/soak.py replays its fleet), each round later in time than
the last as a live stream goes on (``--replay-times``: at the same instants every round, as the soak
replays them), so pods and workloads keep
starting, ending and being deleted and nodes keep coming and going, in batches of the first --batch
size (as fast as the writer goes, faster than the soak's 2,000 events/s: a minute here is several
of the soak's).  Printed each minute, one JSON line: the process RSS, DuckDB's memory by tag
(``duckdb_memory()``), its buffer pool (``database_size``), the rows of the keyed tables and the
writer's own Python state, the raw events written and the CPU per raw event in that minute.
``--memory-limit`` sets the writer's DuckDB memory_limit as ``workloadmap run warehouse`` does.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter, namedtuple
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_bench import Fleet  # noqa: E402  (the pod stream of the pipeline bench)
from workloadmap.catalog import records  # noqa: E402
from workloadmap.ingest.publishing import event_key  # noqa: E402
from workloadmap.processors.processing import MemoryStates, Processor  # noqa: E402
from workloadmap.running import collect_garbage_rarely  # noqa: E402
from workloadmap.warehouse.consuming import WRITER_THREADS, allocation_topics, check_messages  # noqa: E402
from workloadmap.warehouse.writing import Warehouse  # noqa: E402

PARTITIONS = 3
Message = namedtuple("Message", "topic partition offset key value")   # what kafka-python hands the writer
_TOPICS = (("records", records.WORKLOADS_TOPIC), ("transitions", records.TRANSITIONS_TOPIC),
           ("pods", records.PODS_TOPIC), ("nodes", records.NODES_TOPIC))


def closing_events(events: list[dict]) -> list[dict]:
    """DELETED events ending what `events` leave alive, pods first and nodes last (a round of the
    sustained run then leaves nothing alive, as a round of bench/soak.py does)."""
    last = {}
    for event in events:
        last[(event["cluster"], event["object"]["metadata"]["uid"])] = event
    order = {"Pod": 0, "Node": 2}
    out = []
    for event in sorted(last.values(), key=lambda e: order.get(e["object"]["kind"], 1)):
        if event["type"] == "DELETED":
            continue
        obj = copy.deepcopy(event["object"])
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        obj["metadata"]["deletionTimestamp"] = event["observedAt"]
        out.append({**event, "type": "DELETED", "object": obj})
    return out


def writer_messages(events: int, closing: bool = False) -> tuple[int, list[Message]]:
    """The raw events of the pod stream and the messages the processors make of them, per partition in
    order with their offsets, interleaved batch by batch as a worker's transactions publish them;
    with `closing`, the stream ends everything it left alive."""
    fleet = Fleet(events)
    stream_events = fleet.events + (closing_events(fleet.events) if closing else [])
    raw = [(event_key(e), records.encode(e)) for e in stream_events]
    stream = [(key, value, records.RAW_TOPIC, hash(key) % PARTITIONS, i) for i, (key, value) in enumerate(raw)]
    processor, states, offsets, out = Processor(), {}, Counter(), []
    for start in range(0, len(stream), 1000):
        outputs = processor.process_batch(stream[start:start + 1000],
                                          lambda p: states.setdefault(p, MemoryStates()))
        for partition, produced in outputs.items():
            for field, topic in _TOPICS:
                for key, value in getattr(produced, field):
                    out.append(Message(topic, partition, offsets[(topic, partition)], key, value))
                    offsets[(topic, partition)] += 1
    return len(raw), out


def writing(messages: list[Message], batch: int) -> tuple[float, int]:
    """CPU seconds to write `messages` in batches of `batch` into a new file, and the batches."""
    with tempfile.TemporaryDirectory() as tmp, Warehouse(Path(tmp) / "writer.duckdb") as wh:
        wh.conn.execute(f"SET threads = {WRITER_THREADS}")
        began, batches = time.process_time(), 0
        for start in range(0, len(messages), batch):
            pods, nodes = [], []
            rows, texts, transitions, dead, offsets, strict = check_messages(
                messages[start:start + batch], allocations=allocation_topics(pods, nodes))
            assert not dead, dead[:1]
            wh.write_checked(rows, texts, transitions, offsets, texts_are_json=strict, pod_rows=pods, node_rows=nodes)
            batches += 1
        return time.process_time() - began, batches


_INSTANT = re.compile(rb'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)"')


def renamed(messages: list[Message], rnd: int, shift: datetime.timedelta | None = None) -> list[Message]:
    """`messages` with fresh uids (objects' and their owners' alike) and node names for round `rnd`;
    with `shift`, every instant moved `rnd` times that much later (the stream going on in time)."""
    uid, node = f'"uid":"r{rnd}-'.encode(), f'"nodeName":"r{rnd}-'.encode()
    name = f'"name":"r{rnd}-'.encode()
    moved: dict[bytes, bytes] = {}

    def later(match) -> bytes:
        text = match.group(0)
        if text not in moved:
            instant = datetime.datetime.fromisoformat(match.group(1).decode().replace("Z", "+00:00")) + rnd * shift
            digits = len(match.group(1)) - 21   # fraction digits as given ("...:21.365Z": 3; "...:21Z": none)
            fraction = "." + f"{instant.microsecond:06d}"[:digits] if digits > 0 else ""
            out = instant.strftime("%Y-%m-%dT%H:%M:%S") + fraction
            moved[text] = f'"{out}Z"'.encode()
        return moved[text]

    out = []
    for m in messages:
        value = m.value.replace(b'"uid":"', uid)
        value = value.replace(b'"name":"', name) if m.topic == records.NODES_TOPIC else value.replace(b'"nodeName":"', node)
        if shift and rnd:
            value = _INSTANT.sub(later, value)
        out.append(m._replace(value=value))
    return out


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


_KEYED = ("workload_current", "deleted_workloads", "pod_current", "ended_pods", "node_current", "daily_allocation")


def memory(wh: Warehouse) -> dict:
    """Where the writer's memory is: DuckDB's by tag, its buffer pool, the keyed tables' rows, and
    the Python state the writer keeps beside them."""
    conn = wh.conn
    tags = {tag: round(used / 2**20, 1) for tag, used in conn.execute(
        "SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0").fetchall()}
    [(pool, limit)] = conn.execute("SELECT memory_usage, memory_limit FROM pragma_database_size() "
                                   "WHERE database_name = current_database()").fetchall()
    rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _KEYED}
    alloc = wh._allocations
    python = {"nodes": len(alloc._nodes), "daily_keys": len(alloc._daily_keys),
              "ended_filter_kb": len(alloc._ended._bits) // 1024, "deleted_filter_kb": len(wh._deleted._bits) // 1024}
    return {"duckdb_mb_by_tag": tags, "buffer_pool": pool, "memory_limit": limit,
            "file_mb": round(wh.path.stat().st_size / 2**20, 1), "rows": rows, "python": python}


def time_span(messages: list[Message]) -> datetime.timedelta:
    """A shift that moves every instant of `messages` past the latest: their span, in whole days, and a day."""
    instants = sorted({i for m in messages for i in _INSTANT.findall(m.value)})
    first, last = (datetime.datetime.fromisoformat(i.decode().replace("Z", "+00:00")) for i in (instants[0], instants[-1]))
    return datetime.timedelta(days=(last - first).days + 1)


def sustained(messages: list[Message], events: int, batch: int, minutes: float, memory_limit: str | None,
              replay_times: bool = False) -> None:
    """Write the messages round after round with fresh names into one file for `minutes`; print the
    memory each minute.  Each round later in time than the one before, as a live stream goes on,
    unless `replay_times` (the same instants every round, as bench/soak.py replays its fleet)."""
    shift = None if replay_times else time_span(messages)
    with tempfile.TemporaryDirectory() as tmp, Warehouse(Path(tmp) / "writer.duckdb", memory_limit=memory_limit) as wh:
        wh.conn.execute(f"SET threads = {WRITER_THREADS}")
        began = time.time()
        minute, rnd, written, cpu = 0, 0, 0, 0.0
        offsets = Counter()
        print(json.dumps({"bench": "writer.memory", "minute": 0, "rss_mb": round(_rss_mb(), 1), "memory_limit_given": memory_limit,
                          "round_shift_days": shift.days if shift else 0, **memory(wh)}), flush=True)
        while time.time() - began < minutes * 60:
            fresh = renamed(messages, rnd, shift)
            for start in range(0, len(fresh), batch):
                chunk = []
                for m in fresh[start:start + batch]:   # offsets go on from round to round
                    chunk.append(m._replace(offset=offsets[(m.topic, m.partition)]))
                    offsets[(m.topic, m.partition)] += 1
                t0 = time.process_time()
                pods, nodes = [], []
                rows, texts, transitions, dead, stored, strict = check_messages(
                    chunk, allocations=allocation_topics(pods, nodes))
                assert not dead, dead[:1]
                wh.write_checked(rows, texts, transitions, stored, texts_are_json=strict, pod_rows=pods, node_rows=nodes)
                cpu += time.process_time() - t0
                written += events * len(chunk) / len(messages)
                if time.time() - began >= (minute + 1) * 60:
                    minute += 1
                    print(json.dumps({"bench": "writer.memory", "minute": minute, "rss_mb": round(_rss_mb(), 1),
                                      "round": rnd, "raw_events": round(written),
                                      "cpu_us_per_raw_event": round(cpu * 1e6 / written, 1),
                                      "load_average": round(os.getloadavg()[0], 2), **memory(wh)}), flush=True)
                    written, cpu = 0, 0.0
                    if minute >= minutes:
                        return
            rnd += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=60000, help="raw events of the pod stream")
    parser.add_argument("--batch", type=int, nargs="+", default=[200, 400, 1500],
                        help="messages per batch (the pipeline's batches at 2,000 events/s: ~400)")
    parser.add_argument("--minutes", type=float, help="the writer's memory over this many minutes instead (one file)")
    parser.add_argument("--memory-limit", help="DuckDB memory_limit of the writer (with --minutes)")
    parser.add_argument("--replay-times", action="store_true",
                        help="with --minutes: every round at the same instants, as bench/soak.py (default: later each round)")
    args = parser.parse_args()
    events, messages = writer_messages(args.events, closing=bool(args.minutes))
    collect_garbage_rarely()   # as `workloadmap run warehouse` does
    if args.minutes:
        return sustained(messages, events, args.batch[0], args.minutes, args.memory_limit, args.replay_times)
    kinds = Counter(m.topic for m in messages)
    per_batch = {}
    for batch in args.batch:
        load = os.getloadavg()[0]
        cpu, batches = writing(messages, batch)
        per_batch[batch] = cpu * 1000 / batches
        print(json.dumps({"bench": "writer.pod_stream", "raw_events": events, "messages": len(messages),
                          "messages_by_topic": dict(kinds), "batch_messages": batch, "batches": batches,
                          "cpu_us_per_raw_event": round(cpu * 1e6 / events, 1),
                          "cpu_ms_per_batch": round(per_batch[batch], 2),
                          "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}), flush=True)
    small, large = min(args.batch), max(args.batch)
    if large > small:
        per_message_ms = (per_batch[large] - per_batch[small]) / (large - small)
        print(json.dumps({"bench": "writer.pod_stream.fit",
                          "fixed_ms_per_batch": round(per_batch[small] - small * per_message_ms, 2),
                          "us_per_message": round(per_message_ms * 1000, 1),
                          "from_batches": [small, large]}), flush=True)


if __name__ == "__main__":
    main()
