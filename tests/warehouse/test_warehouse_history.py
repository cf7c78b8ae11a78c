"""The writer's cost per batch does not grow with the history (issue 14).

A history of 30,000 states and one of 1,000,000 are seeded in SQL, as the writer would have left
them (``bench/warehouse_bench.py``'s ``seed_history``: states, intervals, transitions, the keyed
current state of 2,000 live workloads, the keys of the deleted ones); then the same stream of
batches of 300 real records with their transitions goes through ``Warehouse.write``, the writer's
own path, which is what is timed.  The median CPU time per batch (CPU, not wall-clock: the
machine is shared) at 1,000,000 must be within 1.3 times the one at 30,000.  A few minutes at most.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import duckdb

from workloadmap.warehouse.consuming import WRITER_THREADS
from workloadmap.warehouse.writing import Warehouse, workload_key

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "warehouse_bench.py"
RATIO = 1.3


def _bench():
    spec = importlib.util.spec_from_file_location("warehouse_bench", _BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_per_batch(bench, path: Path, rows: int, batches: int = 25, warmup: int = 5) -> float:
    workloads = bench.seed_history(str(path), rows)
    work = bench.stream(workloads, warmup + batches)
    texts = [[json.dumps(r, separators=(",", ":")) for r in recs] for recs, _ in work]
    cpu = []
    with Warehouse(path) as wh:
        wh.conn.execute(f"SET threads = {WRITER_THREADS}")
        for i, (recs, trans) in enumerate(work):
            start = time.process_time()
            res = wh.write(recs, trans, {("workloadmap.workloads.v1", 0): i + 1}, texts=texts[i])
            if i >= warmup:
                cpu.append(time.process_time() - start)
            assert res.inserted == len(recs) and res.transitions_inserted == len(trans)
        cur = wh.cursor()
        assert cur.execute("SELECT count(*) FROM workload_states").fetchone()[0] == (
            workloads * bench.STATES_PER_WORKLOAD + len(work) * 300)
        # Every workload has one open interval, live ones in workload_current only.
        assert cur.execute("""SELECT count(*) FROM (SELECT cluster, uid FROM status_intervals WHERE valid_to IS NULL
                              GROUP BY ALL HAVING count(*) <> 1)""").fetchone()[0] == 0
    cpu.sort()
    return cpu[len(cpu) // 2]


def test_batch_cost_at_a_million_states_is_within_the_ratio_of_the_start(tmp_path):
    bench = _bench()
    start = _cpu_per_batch(bench, tmp_path / "start.duckdb", 30_000)
    end = _cpu_per_batch(bench, tmp_path / "end.duckdb", 1_000_000)
    assert end <= RATIO * start, f"{end * 1000:.1f} ms per batch at 1M states vs {start * 1000:.1f} ms at 30k"


def test_workload_key_is_duckdbs():
    conn = duckdb.connect()
    for cluster, uid in (("c1", "u1"), ("prod-us-east", "9a0c688b-d22c-42a3-b659-03785d0a33e6"), ("é", "x/y")):
        assert workload_key(cluster, uid) == conn.execute(
            "SELECT md5_number_lower(? || '/' || ?)", [cluster, uid]).fetchone()[0]

