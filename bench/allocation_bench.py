"""Benchmark: pods and nodes in the warehouse (issue 25): the writer's batch cost against the history of pod
intervals, and capacity now / one year of daily idle cost on 10 M pod intervals beside 10 M workload states.

Why seeded in SQL: what is measured is (a) that a batch of pod records costs the same whatever the
history (the writer reads only its keys: ``pod_current``, the ``ended_pods`` filter), and (b) the
read side's named queries on a history of the issue's size; neither needs the history to have gone
through the writer record by record (hours at these sizes), only to be of the right size and shape.
The file is created by ``Warehouse(path)`` (the real schema), the workload history by
``analytics_bench.generating`` (with ``--analytics``), then the pods and nodes by set-based SQL:

- 4 clusters x 256 nodes of 8 ``nvidia.com/gpu``, open all year, one in 16 cordoned;
- ``--pods`` pod intervals over one year, two per pod (Pending a few minutes, then Bound 10 minutes
  to 2 days on a node, 1, 2, 4 or 8 GPUs), appended as the writer appends them (in about
  ``valid_to`` order), every ended pod's key in ``ended_pods``;
- 20,000 live pods (18,000 Bound, 2,000 Pending) in ``pod_current``;
- ``daily_allocation``: the closed intervals' GPU-seconds by UTC day, as the writer keeps them.

Figures (JSON lines): ``allocation.batch_vs_history`` (median and p90 ms and CPU ms of a batch of 300
pod records, 100 pods created, 100 bound, 100 ended, after a history of 30,000 and of --pods
intervals; their ratio, target <= 1.3), and with ``--analytics``: ``allocation.analytics``
(``allocation`` now by cluster, target 100 ms; one year of daily idle cost by cluster, target 1 s;
best of 3 after a warm-up, read-only connection).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloadmap.catalog import records  # noqa: E402
from workloadmap.warehouse import costing  # noqa: E402
from workloadmap.warehouse.capacities import allocation  # noqa: E402
from workloadmap.warehouse.consuming import WRITER_THREADS  # noqa: E402
from workloadmap.warehouse.querying import open_readonly  # noqa: E402
from workloadmap.warehouse.schema import DAILY_ALLOCATION_OF  # noqa: E402
from workloadmap.warehouse.writing import Warehouse  # noqa: E402

START = datetime(2025, 12, 1, tzinfo=timezone.utc)
END = START + timedelta(days=365)
CLUSTERS = ("prod-us-east", "prod-eu-west", "research", "prod-ap-south")
NODES = 256
LIVE_BOUND, LIVE_PENDING = 18_000, 2_000
BATCH = 300
TARGET_RATIO, TARGET_NOW_MS, TARGET_IDLE_YEAR_S = 1.3, 100, 1.0

_SEED = """
CREATE TEMP MACRO rnd(i, salt) AS (hash(i::VARCHAR || salt) % 1000000) / 1000000.0;
INSERT INTO node_current BY NAME
SELECT c.cluster, 'node-' || n AS name, c.cluster || '-node-' || n AS uid, TIMESTAMPTZ '{start}' AS valid_from,
       8.0 AS gpus, MAP {{'nvidia.com/gpu': 8.0}} AS gpu_resources, 96.0 AS cpu, 1099511627776 AS memory,
       8.0 AS capacity_gpus, MAP {{'nvidia.com/gpu': 8.0}} AS capacity_gpu_resources, 96.0 AS capacity_cpu,
       1099511627776 AS capacity_memory, n % 16 = 0 AS unschedulable, true AS ready,
       'NVIDIA-H100-80GB-HBM3' AS gpu_product, 'p5.48xlarge' AS instance_type, 'pool-' || (n % 4) AS node_pool,
       'zone-a' AS zone, TIMESTAMPTZ '{start}' AS observed_at, '1' AS version_key, false AS deleted
FROM (SELECT unnest({clusters}) AS cluster) c, range({nodes}) r(n);
INSERT INTO pod_history BY NAME
SELECT cluster, uid, 'team-' || (p % 40) AS namespace, uid AS name, t0 AS created,
       'jobset.x-k8s.io/v1alpha2' AS workload_api_version, 'JobSet' AS workload_kind, 'job-' || (p // 4) AS workload_name,
       'w-' || (p // 4) AS workload_uid, 'JobSet' AS framework, 'jobset' AS definition, 'worker' AS component,
       NULL AS instance, (p % 4)::VARCHAR AS replica,
       CASE WHEN s = 1 THEN 'node-' || (hash(p) % {nodes}) END AS node,
       CASE WHEN s = 0 THEN 'Pending' ELSE 'Bound' END AS state,
       CASE WHEN s = 0 THEN t0 ELSE t1 END AS valid_from, CASE WHEN s = 0 THEN t1 ELSE t2 END AS valid_to,
       g AS gpus, 8.0 * g AS cpu, (64 * g)::BIGINT * 1073741824 AS memory, MAP {{'nvidia.com/gpu': g}} AS gpu_resources
FROM (
    SELECT p, s, 'pod-' || p AS uid, ({clusters})[1 + p % 4] AS cluster,
           [1.0, 2.0, 4.0, 8.0][1 + (hash(p) % 4)::INTEGER] AS g,
           to_timestamp({start_s} + p * {spacing}) AS t0,
           to_timestamp({start_s} + p * {spacing} + 30 + rnd(p, 'q') * 600) AS t1,
           to_timestamp({start_s} + p * {spacing} + 630 + rnd(p, 'q') * 600 + 600 + rnd(p, 'r') * 172800) AS t2
    FROM range({pods}) r(p), (VALUES (0), (1)) v(s)
)
ORDER BY valid_to;
INSERT INTO ended_pods SELECT DISTINCT md5_number_lower(cluster || '/' || uid) FROM pod_history;
INSERT INTO pod_current BY NAME
SELECT c.cluster, 'live-' || i AS uid, 'team-' || (i % 40) AS namespace, 'live-' || i AS name,
       TIMESTAMPTZ '{end}' - INTERVAL 1 HOUR AS created, 'jobset.x-k8s.io/v1alpha2' AS workload_api_version,
       'JobSet' AS workload_kind, 'live-job-' || (i // 4) AS workload_name, 'lw-' || (i // 4) AS workload_uid,
       'JobSet' AS framework, 'jobset' AS definition, 'worker' AS component, NULL AS instance, (i % 4)::VARCHAR AS replica,
       CASE WHEN i < {live_bound} THEN 'node-' || (i % {nodes}) END AS node,
       CASE WHEN i < {live_bound} THEN 'Bound' ELSE 'Pending' END AS state,
       TIMESTAMPTZ '{end}' - INTERVAL 1 HOUR AS valid_from, 1.0 AS gpus, 8.0 AS cpu, 68719476736 AS memory,
       MAP {{'nvidia.com/gpu': 1.0}} AS gpu_resources, TIMESTAMPTZ '{end}' - INTERVAL 1 HOUR AS observed_at,
       '1' AS version_key
FROM range({live}) r(i), (SELECT ({clusters})[1 + (i % 4)] AS cluster) c
"""


def seeding(path: str, pods: int) -> float:
    """Pods and nodes into the warehouse at `path` (created if new): `pods` pod intervals (two per pod)."""
    start = time.perf_counter()
    with Warehouse(path) as wh:
        conn = wh.cursor()
        conn.execute("SET TimeZone = 'UTC'")
        clusters = "[" + ", ".join(f"'{c}'" for c in CLUSTERS) + "]"
        knobs = dict(start=START.isoformat(), end=END.isoformat(), start_s=START.timestamp(), clusters=clusters,
                     nodes=NODES, pods=pods // 2, spacing=(END - START).total_seconds() / max(pods // 2, 1),
                     live=LIVE_BOUND + LIVE_PENDING, live_bound=LIVE_BOUND)
        for statement in _SEED.format(**knobs).split(";"):
            if statement.strip():
                conn.execute(statement)
        # the closed intervals' GPU-seconds by day, as the writer keeps them (the idle report reads them for
        # whole days), computed as the migration that introduced the table computes them
        conn.execute("INSERT INTO daily_allocation " + DAILY_ALLOCATION_OF.format(source="pod_history"))
        conn.execute("CHECKPOINT")
        conn.close()
    return time.perf_counter() - start


def _pod(uid: str, cluster: str, at: str, state: str, node: str | None) -> dict:
    return {"cluster": cluster, "observedAt": at, "eventType": "MODIFIED", "deleted": False, "namespace": "team-1",
            "name": uid, "uid": uid, "resourceVersion": at, "creationTimestamp": at, "nodeName": node,
            "phase": {"Pending": "Pending", "Bound": "Running", "Terminated": "Succeeded"}[state], "state": state,
            "workload": {"apiVersion": "batch/v1", "kind": "Job", "name": f"job-{uid}", "uid": f"w-{uid}"},
            "framework": "Kubernetes", "definition": "job", "component": "main", "instance": None, "replica": "0",
            "gpu": 2, "gpuResources": {"nvidia.com/gpu": 2}, "cpu": 16, "memory": 128 << 30,
            "previousState": None, "stateSince": at}


def stream(batches: int) -> list[list[dict]]:
    """Batches of BATCH pod records in a steady state: a third new pods (Pending), a third bound (created
    a batch before), a third ended (bound a batch before)."""
    third = BATCH // 3
    out = []
    for b in range(batches):
        at = (END + timedelta(seconds=b)).isoformat().replace("+00:00", "Z")
        batch = []
        for k in range(third):
            batch.append(_pod(f"b{b}-{k}", CLUSTERS[k % 4], at, "Pending", None))
            if b >= 1:
                batch.append(_pod(f"b{b - 1}-{k}", CLUSTERS[k % 4], at, "Bound", f"node-{k % NODES}"))
            if b >= 2:
                batch.append(_pod(f"b{b - 2}-{k}", CLUSTERS[k % 4], at, "Terminated", f"node-{k % NODES}"))
        out.append(batch)
    return out


def batch_cost(pods: int, batches: int = 40, warmup: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pods.duckdb")
        seed_s = seeding(path, pods)
        times, cpu = [], []
        with Warehouse(path) as wh:
            wh.conn.execute(f"SET threads = {WRITER_THREADS}")  # as the Kafka writer runs it
            for i, batch in enumerate(stream(warmup + batches)):
                start, start_cpu = time.perf_counter(), time.process_time()
                result = wh.write(pods=batch, offsets={(records.PODS_TOPIC, 0): i + 1})
                if i >= warmup:
                    times.append(time.perf_counter() - start)
                    cpu.append(time.process_time() - start_cpu)
                    assert result.pods == len(batch), result
        times.sort()
        cpu.sort()
        return {"history_pod_intervals": pods, "seed_s": round(seed_s, 1),
                "median_ms": round(1000 * times[len(times) // 2], 1),
                "p90_ms": round(1000 * times[int(len(times) * 0.9)], 1),
                "cpu_median_ms": round(1000 * cpu[len(cpu) // 2], 1),
                "cpu_us_per_record": round(1e6 * cpu[len(cpu) // 2] / BATCH, 1)}


def best_of(fn, runs: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def analytics(pods: int, states: int, path: str | None) -> dict:
    import analytics_bench  # the 10 M-state workload history, generated as its benchmark does

    with tempfile.TemporaryDirectory() as tmp:
        path = path or os.path.join(tmp, "analytics.duckdb")
        generated = 0.0
        if not Path(path).exists():
            generated = analytics_bench.generating(path, states, 20)[0]  # its default: 20 states per workload
            generated += seeding(path, pods)
        conn = open_readonly(path)
        try:
            counts = conn.execute("SELECT (SELECT count(*) FROM pod_intervals), (SELECT count(*) FROM state_history), "
                                  "(SELECT count(*) FROM daily_allocation)").fetchone()
            now_s = best_of(lambda: allocation(conn, by=["cluster"]))
            now_pool_s = best_of(lambda: allocation(conn, by=["cluster", "node_pool"]))
            idle_s = best_of(lambda: costing.idle_report(conn, START, END, by=("cluster",), step=timedelta(days=1),
                                                         as_of=END))
            idle_pool_s = best_of(lambda: costing.idle_report(conn, START, END, by=("cluster", "node_pool"),
                                                              step=timedelta(days=1), as_of=END))
        finally:
            conn.close()
    return {"bench": "allocation.analytics", "pod_intervals": counts[0], "workload_states": counts[1],
            "daily_allocation_rows": counts[2],
            "generate_s": round(generated, 1), "capacity_now_ms": round(1000 * now_s, 1),
            "capacity_now_by_pool_ms": round(1000 * now_pool_s, 1),
            "idle_year_daily_by_cluster_s": round(idle_s, 3), "idle_year_daily_by_pool_s": round(idle_pool_s, 3),
            "targets": {"capacity_now_ms": TARGET_NOW_MS, "idle_year_daily_by_cluster_s": TARGET_IDLE_YEAR_S},
            "cpus": os.cpu_count(), "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=10_000_000, help="pod intervals of the large history")
    ap.add_argument("--small", type=int, default=30_000, help="pod intervals of the small history")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--analytics", action="store_true", help="the read side on --pods and --states")
    ap.add_argument("--states", type=int, default=10_000_000, help="workload states beside the pods (--analytics)")
    ap.add_argument("--file", help="--analytics: a warehouse file to reuse (generated when missing)")
    args = ap.parse_args()
    if args.analytics:
        print(json.dumps(analytics(args.pods, args.states, args.file)), flush=True)
        return
    small, large = batch_cost(args.small, args.batches), batch_cost(args.pods, args.batches)
    print(json.dumps({"bench": "allocation.batch_vs_history", "batch": BATCH, "batches": args.batches,
                      "by_history": [small, large],
                      "median_ratio": round(large["median_ms"] / small["median_ms"], 2),
                      "p90_ratio": round(large["p90_ms"] / small["p90_ms"], 2),
                      "cpu_median_ratio": round(large["cpu_median_ms"] / small["cpu_median_ms"], 2),
                      "target_ratio": TARGET_RATIO, "cpus": os.cpu_count(), "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
