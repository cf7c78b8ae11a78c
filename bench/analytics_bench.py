"""Benchmark: the analytics queries on a 10,000,000-row, one-year workload history.

Why generated in SQL and not by the simulator: the simulator and the writer
produce some thousands of records a second, so a 10M-row history through
them takes hours; what this benchmark measures is the READ side (issue 4,
section 6), which only needs a warehouse of the right size and shape.  The
file is created by ``Warehouse(path)`` (so the schema and its migrations are
the real ones), then filled with two set-based ``INSERT ... SELECT`` over
``range(N)``:

- ``workload_states``: N rows, ``--states`` per workload (N / states
  workloads), deterministic pseudo-random (``hash`` of the row number, so a
  run is reproducible): 4 clusters, 50 namespaces (skewed: a few big
  teams), every built-in kind and framework, 1-64 GPUs (whole GPUs, MIG
  slices, AMD, a few without a resource name), a lifecycle per workload
  (Initializing, Running with Degraded/Suspended episodes and scale
  changes, Completed/Failed for batch kinds, then a deletion unless it is
  recent), ``observed_at`` spread over one year.  ``record`` is an
  abbreviated JSON object (identity and status) to keep the file small:
  no query here reads it.
- intervals: what the writer would derive from those states, one interval
  per change of status or demand, closed by the next change, the last one
  open (a deletion opens a final ``Deleted`` interval); kept as the writer
  keeps them, in the order it appends them (when they close), so DuckDB's
  min/max of each row group on ``valid_to`` works as it does on a real file (``interval_history``, the live workloads' open intervals in
  ``workload_current``, the deleted workloads' keys in ``deleted_workloads``).

Then, with the real code paths on a read-only connection
(``querying.open_readonly``), results as Arrow tables, each best of 3 after a warm-up (issue 15's figures and targets,
``TARGETS_MS``): current capacity by namespace (``capacity``, from the keyed
``workload_current``); capacity by namespace at an instant 45 days back and a 30-day hourly
series (``capacity``/``capacity_series`` over ``status_intervals``); a one-year daily cost
report by namespace and by workload (``costing.cost_report`` of the requested basis, with the example pricing file:
the whole report in SQL, an Arrow table out; the one by workload has millions of rows and is
timed once after its warm-up); and, for reference, the series as Python rows (what the CLI
turns into items) and the one-year cost by workload in one period.
One JSON line; with ``--scale 100000000`` the same on a second, larger history, with the ratios.

    python bench/analytics_bench.py [--rows 10000000] [--states 20] [--path FILE] [--scale ROWS]
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

import duckdb

from workloadmap.warehouse.costing import REQUESTED, cost_report
from workloadmap.warehouse.pricing import load_pricing
from workloadmap.warehouse.querying import open_readonly, run_query, run_query_arrow
from workloadmap.warehouse.writing import Warehouse

START = datetime(2025, 11, 1, tzinfo=timezone.utc)
END = datetime(2026, 11, 1, tzinfo=timezone.utc)
PRICING = Path(__file__).resolve().parent.parent / "warehouse" / "pricing.example.yaml"

CLUSTERS = ("prod-us-east", "prod-eu-west", "research", "edge-ap-south")
# (api_version, kind, definition, framework, batch?) of every built-in definition.
KINDS = (
    ("grove.io/v1alpha1", "PodCliqueSet", "podcliqueset", "Grove", False),
    ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobset", "JobSet", True),
    ("serving.kserve.io/v1beta1", "InferenceService", "inferenceservice", "KServe", False),
    ("serving.knative.dev/v1", "Service", "knative-service", "Knative", False),
    ("kubeflow.org/v2beta1", "MPIJob", "mpijob", "Kubeflow MPI", True),
    ("kubeflow.org/v1", "PyTorchJob", "pytorchjob", "Kubeflow Training", True),
    ("batch/v1", "CronJob", "cronjob", "Kubernetes", True),
    ("apps/v1", "Deployment", "deployment", "Kubernetes", False),
    ("batch/v1", "Job", "job", "Kubernetes", True),
    ("v1", "Pod", "pod", "Kubernetes", True),
    ("apps/v1", "StatefulSet", "statefulset", "Kubernetes", False),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkerset", "LeaderWorkerSet", False),
    ("milvus.io/v1beta1", "Milvus", "milvus", "Milvus", False),
    ("nvidia.com/v1alpha1", "DynamoGraphDeployment", "dynamographdeployment", "NVIDIA Dynamo", False),
    ("apps.nvidia.com/v1alpha1", "NIMService", "nimservice", "NVIDIA NIM", False),
    ("ray.io/v1", "RayCluster", "raycluster", "Ray", True),
    ("ray.io/v1", "RayJob", "rayjob", "Ray", True),
    ("ray.io/v1", "RayService", "rayservice", "Ray", False),
)
TEAMS = ("ml-research", "nlp", "inference", "recsys", "team-vision", "platform", "speech", "data-eng", "rag",
         "nim-service", "genai", "ml-apps", "llm-team", "edge-serving", "secure", "research", "ml-eval",
         "notebooks", "docs", "dynamo-prod", "hpc", "milvus", "search", "backend", "ai-search")
NAMESPACES = TEAMS + tuple(f"{t}-dev" for t in TEAMS)  # 50
# (resource name, weight): what one workload's GPUs are; '' = GPUs counted but no resource name.
GPU_RESOURCES = (("nvidia.com/gpu", 78), ("nvidia.com/mig-1g.10gb", 5), ("nvidia.com/mig-2g.20gb", 3),
                 ("nvidia.com/mig-3g.40gb", 4), ("amd.com/gpu", 6), ("", 4))
GPU_SIZES = (1, 1, 1, 2, 2, 4, 4, 8, 8, 8, 16, 32, 64)

# Per row i (workload w = i // K, state j = i % K): every column a function of (w, j), so the
# previous state's status and demand are the same expressions at j - 1 (no window to find changes).
_MACROS = """
CREATE OR REPLACE TEMP MACRO rnd(x, salt) AS (hash(x, salt) % 1000003) / 1000003.0;
CREATE OR REPLACE TEMP MACRO wl_kind(w) AS (hash(w, 'kind') % {n_kinds})::INTEGER;
CREATE OR REPLACE TEMP MACRO wl_gap(w, batch) AS  -- seconds between two states of the workload
    CASE WHEN batch THEN 600 + 3000 * rnd(w, 'gap') ELSE 7200 + 79200 * rnd(w, 'gap') END;
CREATE OR REPLACE TEMP MACRO wl_t0(w, gap) AS {start} + rnd(w, 't0') * ({span} - {k} * gap);
CREATE OR REPLACE TEMP MACRO at_state(w, j, t0, gap) AS t0 + (j + 0.9 * rnd(w * {k} + j, 'jit')) * gap;
-- Deleted at the end unless the workload's last state is recent (services: 30 days, batch: 2 days) or 3% kept.
CREATE OR REPLACE TEMP MACRO wl_kept(w, t0, gap, batch) AS
    rnd(w, 'keep') < 0.03 OR t0 + {k} * gap > {end} - CASE WHEN batch THEN 2 * 86400 ELSE 30 * 86400 END;
CREATE OR REPLACE TEMP MACRO st(w, j, batch, kept) AS
    CASE WHEN j = 0 THEN 'Initializing'
         WHEN j = {k} - 1 AND NOT kept THEN 'Deleted'
         WHEN batch AND j >= {k} - 2 THEN CASE WHEN rnd(w, 'fail') < 0.12 THEN 'Failed' ELSE 'Completed' END
         WHEN j = 1 AND rnd(w, 'slow') < 0.4 THEN 'Initializing'
         WHEN rnd(w * {k} + j, 'st') < 0.05 THEN 'Degraded'
         WHEN batch AND rnd(w * {k} + j, 'st') < 0.09 THEN 'Suspended'
         ELSE 'Running' END;
-- Services scale now and then (demand changes in blocks of 5 states), batch workloads keep their size.
CREATE OR REPLACE TEMP MACRO scale(w, j, batch) AS
    CASE WHEN batch THEN 1 ELSE 1 + (hash(w, j // 5, 'scale') % 3 = 0)::INTEGER END;
"""

_STATES = """
INSERT INTO state_history
SELECT i + 1 AS seq, c.cluster, uid, k.api_version, k.kind, namespace, name, k.definition, k.framework,
       rv AS resource_version, rv AS version_key, 1 + j // 5 AS generation, 'built-in' AS origin,
       to_timestamp(t0) AS creation_timestamp, to_timestamp(at_state(w, j, t0, gap)) AS observed_at,
       CASE WHEN j = 0 THEN 'ADDED' WHEN status = 'Deleted' THEN 'DELETED' ELSE 'MODIFIED' END AS event_type,
       status = 'Deleted' AS deleted, status, NULL AS phase,
       CASE WHEN status = 'Deleted' THEN 0 ELSE greatest(1, gpus // 8)::INTEGER END AS pods,
       CASE WHEN status = 'Deleted' THEN 0 ELSE gpus END AS gpus,
       CASE WHEN status = 'Deleted' THEN 0 ELSE 4 + 8 * gpus END AS cpu,
       CASE WHEN status = 'Deleted' THEN 0 ELSE (16 + 64 * gpus)::BIGINT * 1073741824 END AS memory,
       CASE WHEN status = 'Deleted' OR res = '' THEN MAP {{}}::MAP(VARCHAR, DOUBLE) ELSE MAP([res], [gpus]) END,
       json_object('kind', k.kind, 'namespace', namespace, 'name', name, 'uid', uid, 'cluster', c.cluster,
                   'resourceVersion', rv, 'status', status, 'observedAt',
                   strftime(to_timestamp(at_state(w, j, t0, gap)), '%Y-%m-%dT%H:%M:%S.%gZ'),
                   'total', json_object('gpu', gpus, 'gpuResources', res)) AS record
FROM (
    SELECT *, st(w, j, batch, wl_kept(w, t0, gap, batch)) AS status,
           base_gpus * scale(w, j, batch)::DOUBLE AS gpus, (1000000 + i)::VARCHAR AS rv
    FROM (
        SELECT *, wl_t0(w, gap) AS t0
        FROM (
            SELECT i, w, j, b.batch, wl_gap(w, b.batch) AS gap, base_gpus, res, namespace, name, uid, kk, cc
            FROM (
                SELECT i, w, j, wl_kind(w) AS kk, (hash(w, 'cluster') % 100) AS cc,
                       {sizes}[1 + (hash(w, 'gpus') % {n_sizes})::INTEGER]::DOUBLE AS base_gpus,
                       {res_pick} AS res,
                       {namespaces}[1 + floor({n_ns} * pow(rnd(w, 'ns'), 2))::INTEGER] AS namespace,
                       lower({kind_names}[1 + wl_kind(w)]) || '-' || w AS name,
                       printf('00000000-0000-4000-8000-%012d', w) AS uid
                FROM (SELECT range AS i, range // {k} AS w, range % {k} AS j FROM range({rows}))
            ) x JOIN bench_kinds b ON b.k = x.kk
        )
    )
) s
JOIN bench_kinds k ON k.k = s.kk
JOIN bench_clusters c ON s.cc >= c.lo AND s.cc < c.hi
ORDER BY i
"""

# The writer's intervals: a new one opens at a state whose status or demand differs from the previous
# state's; it closes at the next one's opening (the last stays open).  In the order the writer appends
# them to interval_history: a closed interval when it closes, a final Deleted one at the deletion.
_INTERVALS = """
INSERT INTO interval_history (cluster, uid, api_version, kind, namespace, name, definition, framework, status,
                              valid_from, valid_to, pods, gpus, cpu, memory, gpu_resources, from_seq, appended_seq)
SELECT * FROM (
SELECT cluster, uid, api_version, kind, namespace, name, definition, framework, status,
       observed_at AS valid_from,
       lead(observed_at) OVER (PARTITION BY cluster, uid ORDER BY seq) AS valid_to,
       pods, gpus, cpu, memory, gpu_resources, seq AS from_seq,
       coalesce(lead(seq) OVER (PARTITION BY cluster, uid ORDER BY seq), seq) AS appended_seq
FROM (
    SELECT *, wl_t0(w, gap) AS t0
    FROM (
        SELECT s.*, w, j, b.batch, wl_gap(w, b.batch) AS gap
        FROM (SELECT *, (seq - 1) // {k} AS w, (seq - 1) % {k} AS j FROM state_history) s
        JOIN bench_kinds b ON b.k = wl_kind(s.w)
    )
) s
WHERE j = 0 OR status <> st(w, j - 1, batch, wl_kept(w, t0, gap, batch))
     OR (status <> 'Deleted' AND scale(w, j, batch) <> scale(w, j - 1, batch))
) ORDER BY coalesce(valid_to, valid_from)
"""


def _list(values) -> str:
    return "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


def generating(path: str, rows: int, states: int) -> tuple[float, float, int, int]:
    """Create the warehouse with the real schema, fill it in SQL, roll it up as the writer does;
    (seconds, of which the rollup's and the kept cost rows', states, intervals)."""
    start = time.perf_counter()
    with Warehouse(path) as wh:
        conn = wh.cursor()
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("CREATE TEMP TABLE bench_kinds (k INTEGER, api_version VARCHAR, kind VARCHAR, "
                     "definition VARCHAR, framework VARCHAR, batch BOOLEAN)")
        conn.executemany("INSERT INTO bench_kinds VALUES (?, ?, ?, ?, ?, ?)",
                         [(i, *kind) for i, kind in enumerate(KINDS)])
        conn.execute("CREATE TEMP TABLE bench_clusters (cluster VARCHAR, lo INTEGER, hi INTEGER)")
        conn.executemany("INSERT INTO bench_clusters VALUES (?, ?, ?)",  # 40 / 30 / 20 / 10 %
                         [(CLUSTERS[0], 0, 40), (CLUSTERS[1], 40, 70), (CLUSTERS[2], 70, 90), (CLUSTERS[3], 90, 100)])
        knobs = dict(k=states, rows=rows, start=START.timestamp(), end=END.timestamp(),
                     span=(END - START).total_seconds(), n_kinds=len(KINDS))
        for statement in _MACROS.format(**knobs).split(";"):
            if statement.strip():
                conn.execute(statement)
        total = sum(weight for _, weight in GPU_RESOURCES)
        cases, acc = [], 0
        for name, weight in GPU_RESOURCES:
            acc += weight
            cases.append(f"WHEN rnd(w, 'res') < {acc / total} THEN '{name}'")
        res_pick = "CASE " + " ".join(cases[:-1]) + f" ELSE '{GPU_RESOURCES[-1][0]}' END"
        conn.execute(_STATES.format(
            **knobs, sizes="[" + ", ".join(map(str, GPU_SIZES)) + "]", n_sizes=len(GPU_SIZES), res_pick=res_pick,
            namespaces=_list(NAMESPACES), n_ns=len(NAMESPACES), kind_names=_list(k[1] for k in KINDS)))
        conn.execute(_INTERVALS.format(**knobs))
        # As the writer keeps them (schema 3): the open intervals of live workloads, with their latest
        # state, in workload_current; the keys of the deleted ones in deleted_workloads.
        conn.execute("""INSERT INTO workload_current BY NAME
            SELECT i.* EXCLUDE (valid_to, appended_seq), s.seq, s.observed_at, s.version_key
            FROM interval_history i
            JOIN (SELECT cluster, uid, max(seq) AS seq, max(observed_at) AS observed_at,
                         arg_max(version_key, seq) AS version_key
                  FROM state_history GROUP BY cluster, uid) s ON s.cluster = i.cluster AND s.uid = i.uid
            WHERE i.valid_to IS NULL AND i.status <> 'Deleted'""")
        conn.execute("DELETE FROM interval_history WHERE valid_to IS NULL AND status <> 'Deleted'")
        conn.execute("""INSERT INTO deleted_workloads SELECT DISTINCT md5_number_lower(cluster || '/' || uid)
                        FROM interval_history WHERE valid_to IS NULL""")
        conn.execute("CHECKPOINT")
        n_states = conn.execute("SELECT count(*) FROM workload_states").fetchone()[0]
        n_intervals = conn.execute("SELECT count(*) FROM status_intervals").fetchone()[0]
        conn.close()
        rolling = time.perf_counter()
    # The writer's daily rollup (warehouse/rolling.py), in one pass: a writer that wrote this history
    # would have rolled it up every 100,000 states, each pass adding about the latest days, so the
    # table is in about day order, as here.  (Each interval's appended_seq is the seq of the state that
    # closed it, after the seeding writer's own pass at its close, which then has nothing to roll up.)
    # The writer opening the file does it, and keeps the finished days' cost rows by workload priced
    # with the bench's pricing file (rolling.keep_costs), as `run warehouse --pricing` would.
    with Warehouse(path, pricing=load_pricing(PRICING)):
        pass
    return time.perf_counter() - start, time.perf_counter() - rolling, n_states, n_intervals


def best_of(fn, runs: int = 3) -> tuple[float, object]:
    """Milliseconds of the fastest of `runs` calls after one warm-up call, and the warm-up's result."""
    result = fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000, result


# Figure name -> target in milliseconds (issue 15).
TARGETS_MS = {"capacity_by_namespace": 50, "capacity_at_by_namespace": 200, "capacity_series_30d_hourly": 200,
              "cost_year_daily_by_namespace": 1000, "cost_year_daily_by_workload": 2000}


def measuring(path: str, *, runs: int = 3, daily_by_workload: bool = True) -> dict:
    """The analytics figures on one warehouse file, through the real code paths on a read-only connection.

    `daily_by_workload` False leaves out the daily report by workload (on 100 M states its result is
    ~50 M rows, more than this machine's memory holds as one Arrow table next to DuckDB's own).
    """
    pricing = load_pricing(PRICING)
    at = END - timedelta(days=45)
    series = dict(since=END - timedelta(days=30), until=END, step=timedelta(hours=1), by=["namespace"])
    conn = open_readonly(path)
    try:
        figures, results = {}, {}
        queries = {
            "capacity_by_namespace": lambda: run_query_arrow(conn, "capacity", by=["namespace"]),
            "capacity_at_by_namespace": lambda: run_query_arrow(conn, "capacity", by=["namespace"], at=at),
            "capacity_series_30d_hourly": lambda: run_query_arrow(conn, "capacity_series", **series),
            # The same series as Python rows (what `workloadmap capacity --since` turns into items).
            "capacity_series_30d_hourly_python_rows": lambda: run_query(conn, "capacity_series", **series),
            "cost_year_daily_by_namespace": lambda: cost_report(
                conn, START, END, by=("namespace",), step=timedelta(days=1), pricing=pricing, as_of=END,
                basis=REQUESTED),
            "cost_year_by_workload": lambda: cost_report(
                conn, START, END, by=("workload",), pricing=pricing, as_of=END, basis=REQUESTED),
            "cost_year_daily_by_workload": lambda: cost_report(
                conn, START, END, by=("workload",), step=timedelta(days=1), pricing=pricing, as_of=END,
                basis=REQUESTED),
            # The same rows computed from the rollup (no pricing: the kept rows are priced, not read).
            "cost_year_daily_by_workload_unpriced": lambda: cost_report(
                conn, START, END, by=("workload",), step=timedelta(days=1), as_of=END, basis=REQUESTED),
        }
        if not daily_by_workload:
            del queries["cost_year_daily_by_workload"], queries["cost_year_daily_by_workload_unpriced"]
        for name, query in queries.items():
            print(f"analytics: {name} ...", file=sys.stderr, flush=True)
            # The daily report by workload has millions of rows: one timed run after the warm-up.
            ms, results[name] = best_of(query, 1 if name.startswith("cost_year_daily_by_workload") else runs)
            figures[f"{name}_ms"] = round(ms, 1)
        current = conn.execute("SELECT count(*) FROM workload_current").fetchone()[0]
        kept = conn.execute("SELECT count(*) FROM daily_costs").fetchone()[0]
    finally:
        conn.close()
    report = results["cost_year_daily_by_namespace"]
    totals = report.totals()
    capacity = results["capacity_by_namespace"]
    return {
        **figures,
        "capacity_groups": capacity.num_rows,
        "current_workloads": current,
        "kept_cost_rows": kept,
        "current_running_gpus": sum(capacity.column("running_gpus").to_pylist()),
        "series_rows": results["capacity_series_30d_hourly"].num_rows,
        "cost_rows_by_namespace": report.table.num_rows,
        "cost_rows_by_workload": (results["cost_year_daily_by_workload"].table.num_rows
                                  if daily_by_workload else None),
        "year_gpu_hours": round(totals.gpu_hours),
        "year_cost": round(totals.cost or 0.0),
        "met": {name: figures[f"{name}_ms"] <= target for name, target in TARGETS_MS.items()
                if f"{name}_ms" in figures},
    }


def run(rows: int, states: int, path: str | None, tmp: str, daily_by_workload: bool = True) -> dict:
    path = path or os.path.join(tmp, f"history-{rows}.duckdb")
    if os.path.exists(path):
        raise SystemExit(f"{path} exists: give a new file")
    print(f"analytics: generating {rows:,} states ...", file=sys.stderr, flush=True)
    seconds, rollup_seconds, n_states, n_intervals = generating(path, rows, states)
    size = os.path.getsize(path)
    figures = measuring(path, daily_by_workload=daily_by_workload)
    return {"rows": n_states, "intervals": n_intervals, "workloads": n_states // states,
            "generation_s": round(seconds, 1), "rollup_s": round(rollup_seconds, 1), "file_mb": round(size / 2**20), **figures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="workload_states rows")
    ap.add_argument("--states", type=int, default=20, help="states per workload")
    ap.add_argument("--path", help="warehouse file to create (kept); default: a temporary one")
    ap.add_argument("--scale", type=int, default=0, metavar="ROWS",
                    help="also generate a history of ROWS states (e.g. 100000000) and print its figures and "
                         "their ratio to the first (about 10 min and 13 GB of disk per 100 M)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = {"bench": "analytics", **run(args.rows, args.states, args.path, tmp)}
        if args.scale:
            big = run(args.scale, args.states, None, tmp, daily_by_workload=False)
            out["scaled"] = big
            out["scaled_ratio"] = {k: round(big[k] / out[k], 2) for k in out
                                   if k.endswith("_ms") and k in big and out[k] > 0}
    print(json.dumps({**out, "targets_ms": TARGETS_MS, "cpus": os.cpu_count(), "duckdb": duckdb.__version__}))


if __name__ == "__main__":
    main()
