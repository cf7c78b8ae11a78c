"""Benchmark: Warehouse.write throughput (rows/s) into a fresh DuckDB file.

The records are the bundled example objects resolved through the catalog
(every framework, several states), spread over distinct workloads that each
go through a status history (Initializing, Running, a scale change,
Completed or Failed, then deletion for some), in batches as the Kafka writer
writes them.  Resolution is not timed; what is timed is Warehouse.write:
validation, Arrow columns, dedup, states, intervals, offsets, commit.

Three figures, one JSON line:
- ``dicts``: records given as dicts (JSON-encoded by write, as in the demo);
- ``texts``: records with their JSON text already in hand (the Kafka path);
- ``replay``: the same batches again (all duplicates, nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


from workloadmap.catalog import Catalog
from workloadmap.catalog.registry import bundled_examples
from workloadmap.warehouse.writing import Warehouse

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


def timed_write(path: str, batches: list[list[dict]], texts: list[list[str]] | None) -> tuple[float, int]:
    with Warehouse(path) as wh:
        start = time.perf_counter()
        inserted = 0
        for i, batch in enumerate(batches):
            res = wh.write(batch, offsets={("workloadmap.workloads.v1", 0): (i + 1) * len(batch)},
                           texts=texts[i] if texts else None)
            inserted += res.inserted
        return time.perf_counter() - start, inserted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=5000)
    args = ap.parse_args()
    recs = history(args.records)
    batches = [recs[i:i + args.batch] for i in range(0, len(recs), args.batch)]
    texts = [[json.dumps(r, separators=(",", ":")) for r in b] for b in batches]
    with tempfile.TemporaryDirectory() as tmp:
        t_dicts, n1 = timed_write(os.path.join(tmp, "dicts.duckdb"), batches, None)
        path = os.path.join(tmp, "texts.duckdb")
        t_texts, n2 = timed_write(path, batches, texts)
        t_replay, n3 = timed_write(path, batches, texts)
        size = os.path.getsize(path)
    print(json.dumps({
        "bench": "warehouse.write", "records": len(recs), "batch": args.batch,
        "dicts_rows_per_s": round(len(recs) / t_dicts), "texts_rows_per_s": round(len(recs) / t_texts),
        "replay_rows_per_s": round(len(recs) / t_replay), "inserted": n2, "replay_inserted": n3,
        "file_mb": round(size / 2**20, 1), "cpus": os.cpu_count(),
    }))
    assert n1 == n2 == len(recs) and n3 == 0


if __name__ == "__main__":
    main()
