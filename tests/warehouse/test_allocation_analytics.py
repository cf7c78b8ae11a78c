"""Capacity, allocation, idle, queue waits and allocated cost on a small two-cluster history of pod and
node records, every answer worked out by hand (the comments), through the library and the CLI.

The history (written with Warehouse.write, as the Kafka writer and the embedded pipeline do):

c1  n1  8 nvidia.com/gpu, pool gpu-a, from 11-01;
    n2  8 nvidia.com/gpu, pool gpu-b, from 11-01, cordoned 11-02 12:00, lost (deleted) 11-02 18:00.
    W1  JobSet ml/train, asks 2 pods: Initializing 11-02 00:00 (created then), Running 01:00.
        p1 (worker 0) Pending 00:00, Bound n1 00:30 with 4 GPUs, Succeeded 10:30;
        p2 (worker 1) Pending 00:00, Bound n2 01:00 with 4 GPUs, deleted with its node 18:00 (evicted).
c2  m1  7 nvidia.com/mig-1g.10gb, pool mig, from 11-01.
    W2  Deployment inf/serve, asks 1 pod, created 11-02 06:00: q1 Pending from 06:00, never bound.
    W3  NIMService inf/nim, asks 1 pod, created 11-02 00:00: q2 Bound m1 02:00 with 2 MIG slices, open.

Day 11-02 [00:00, 24:00), open intervals ending at 11-03 00:00:
  c1 allocatable 8 x 24 + 8 x 18 = 336 GPU-h; allocated p1 4 x 10 + p2 4 x 17 = 108; idle 228.
  c2 allocatable 7 x 24 = 168; allocated q2 2 x 22 = 44; idle 124.
Waits: W1 from 00:00 to 01:00 (both pods bound) = 3,600 s; W3 2 h = 7,200 s; W2 still waiting at
11-03 00:00: 18 h = 64,800 s.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from tests.allocation_records import node, pod
from workloadmap.cli.main import cli  # the real group (a group of its own would set the commands' help options)
from workloadmap.warehouse import capacities, costing
from workloadmap.warehouse.pricing import parse_pricing
from workloadmap.warehouse.querying import open_readonly
from workloadmap.warehouse.writing import Warehouse


UTC = timezone.utc
DAY, NEXT = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC)
PRICING = parse_pricing({"default": {"gpu": {"nvidia.com/gpu": 2.0, "nvidia.com/mig-*": 0.5}}})


def at(hour, minute=0, day=2) -> str:
    return f"2026-11-{day:02d}T{hour:02d}:{minute:02d}:00Z"


def workload(cluster, uid, kind, namespace, name, framework, steps, created):
    return [{"cluster": cluster, "uid": uid, "apiVersion": "example.io/v1", "kind": kind, "namespace": namespace,
             "name": name, "framework": framework, "status": status, "observedAt": when, "eventType": "MODIFIED",
             "deleted": False, "creationTimestamp": created, "resourceVersion": when,
             "total": {"pods": pods, "gpu": gpus, "cpu": 1, "memory": 1 << 30}}
            for status, when, pods, gpus in steps]


W1 = ("JobSet", "train", "w1")
W2 = ("Deployment", "serve", "w2")
W3 = ("NIMService", "nim", "w3")
MIG = {"nvidia.com/mig-1g.10gb": 2}


def history() -> dict:
    nodes = [node("n1", at(0, day=1)), node("n2", at(0, day=1), pool="gpu-b"),
             node("n2", at(12), pool="gpu-b", unschedulable=True),
             node("n2", at(18), pool="gpu-b", unschedulable=True, deleted=True),
             node("m1", at(0, day=1), cluster="c2", gpu=7, gpu_resources={"nvidia.com/mig-1g.10gb": 7}, pool="mig",
                  product="NVIDIA-A100-SXM4-80GB")]
    pods = [pod("p1", at(0), "Pending", gpu=4, workload=W1, replica="0"),
            pod("p2", at(0), "Pending", gpu=4, workload=W1, replica="1"),
            pod("p1", at(0, 30), "Bound", node="n1", gpu=4, workload=W1, replica="0"),
            pod("p2", at(1), "Bound", node="n2", gpu=4, workload=W1, replica="1"),
            pod("p1", at(10, 30), "Terminated", node="n1", gpu=4, workload=W1, replica="0"),
            pod("p2", at(18), "Bound", node="n2", gpu=4, workload=W1, replica="1", deleted=True),
            pod("q1", at(6), "Pending", cluster="c2", gpu=1, workload=W2, namespace="inf", component="main",
                framework="Deployment"),
            pod("q2", at(2), "Bound", cluster="c2", node="m1", gpu=2, gpu_resources=MIG, workload=W3,
                namespace="inf", component="nim", framework="NIMService")]
    records = (workload("c1", "w1", "JobSet", "ml", "train", "JobSet",
                        [("Initializing", at(0), 2, 8), ("Running", at(1), 2, 8)], at(0))
               + workload("c2", "w2", "Deployment", "inf", "serve", "Deployment", [("Initializing", at(6), 1, 1)],
                          at(6))
               + workload("c2", "w3", "NIMService", "inf", "nim", "NIMService",
                          [("Initializing", at(0), 1, 2), ("Running", at(2), 1, 2)], at(0)))
    return {"records": records, "pods": pods, "nodes": nodes}


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("alloc") / "w.duckdb"
    h = history()
    with Warehouse(p) as wh:  # in two batches, nodes first: the order of topics does not matter
        wh.write(nodes=h["nodes"])
        wh.write(h["records"], pods=h["pods"])
    return p


@pytest.fixture
def conn(path):
    c = open_readonly(path)
    yield c
    c.close()


def by_key(items, *keys):
    return {tuple(i[k] for k in keys): i for i in items}


def test_capacity_now_counts_what_the_nodes_have_and_the_pods_hold(conn):
    now = by_key(capacities.allocation(conn, by=["cluster"]), "cluster")
    # c1: n2 was lost, n1 has 8 and holds nothing (p1 ended, p2 deleted); c2: m1 7 slices, q2 holds 2, q1 pends 1;
    # requested: W1 Running asks 8, W2 Initializing 1, W3 Running 2
    assert {k: (i["nodes"], i["allocatable_gpus"], i["allocated_gpus"], i["idle_gpus"], i["pending_gpus"],
                i["requested_gpus"]) for k, i in now.items()} == {
        ("c1",): (1, 8, 0, 8, 0, 8), ("c2",): (1, 7, 2, 5, 1, 3)}


def test_capacity_at_an_instant_reports_the_cordoned_node_apart(conn):
    c1 = by_key(capacities.allocation(conn, at=datetime(2026, 11, 2, 13, tzinfo=UTC), by=["cluster", "node_pool"],
                                      clusters=["c1"]), "node_pool")
    # 13:00: n2 cordoned (allocatable, not schedulable) holding p2's 4; n1 free (p1 ended 10:30)
    assert (c1[("gpu-a",)]["allocatable_gpus"], c1[("gpu-a",)]["schedulable_gpus"], c1[("gpu-a",)]["idle_gpus"]) == (8, 8, 8)
    assert (c1[("gpu-b",)]["allocatable_gpus"], c1[("gpu-b",)]["schedulable_gpus"],
            c1[("gpu-b",)]["unschedulable_gpus"], c1[("gpu-b",)]["allocated_gpus"], c1[("gpu-b",)]["idle_gpus"]) == (
        8, 0, 8, 4, 4)


def test_pending_at_instants(conn):
    early = capacities.allocation(conn, at=datetime(2026, 11, 2, 0, 15, tzinfo=UTC), by=["cluster"])
    noon = capacities.allocation(conn, at=datetime(2026, 11, 2, 12, tzinfo=UTC), by=["cluster"])
    # 00:15 p1 and p2 pend (4 + 4); 12:00 only q1 (1) in c2
    assert {i["cluster"]: (i["pending_gpus"], i["pending_pods"]) for i in early} == {"c1": (8, 2), "c2": (0, 0)}
    assert {i["cluster"]: (i["pending_gpus"], i["pending_pods"]) for i in noon} == {"c1": (0, 0), "c2": (1, 1)}


def test_by_namespace_and_workload_there_is_no_idle(conn):
    items = by_key(capacities.allocation(conn, at=datetime(2026, 11, 2, 3, tzinfo=UTC), by=["workload"]), "workload")
    assert items[("JobSet/train",)]["allocated_gpus"] == 8 and items[("JobSet/train",)]["idle_gpus"] is None
    assert items[("NIMService/nim",)]["allocated_gpus"] == 2


def test_idle_gpu_hours_and_cost_per_cluster_and_resource(conn):
    rows = costing.idle_report(conn, DAY, NEXT, by=("cluster",), pricing=PRICING, as_of=NEXT)
    got = {(r.cluster, r.resource): (r.allocatable_gpu_hours, r.allocated_gpu_hours, r.idle_gpu_hours, r.idle_cost)
           for r in rows}
    # idle cost: c1 228 x 2.0 = 456; c2 124 x 0.5 = 62
    assert got == {("c1", "nvidia.com/gpu"): pytest.approx((336, 108, 228, 456)),
                   ("c2", "nvidia.com/mig-1g.10gb"): pytest.approx((168, 44, 124, 62))}


def test_idle_per_node_pool_splits_the_lost_node(conn):
    rows = costing.idle_report(conn, DAY, NEXT, by=("cluster", "node_pool"), as_of=NEXT, clusters=["c1"])
    # gpu-a: 192 offered, p1 40 held; gpu-b: 144 offered (until lost), p2 68 held
    assert {r.node_pool: (r.allocatable_gpu_hours, r.allocated_gpu_hours, r.idle_gpu_hours) for r in rows} == {
        "gpu-a": pytest.approx((192, 40, 152)), "gpu-b": pytest.approx((144, 68, 76))}


def test_the_series_averages_allocation_and_idle_per_step(conn):
    items = capacities.allocation_series(conn, DAY, DAY + timedelta(hours=2), timedelta(hours=1), step_name="1h",
                                         by=["cluster"], clusters=["c1"])
    # 00-01: allocatable 16; p1 bound from 00:30 (4 x 0.5 h), p2 and p1 pend (8 then 4): avg allocated 2,
    # pending 4 x 1 + 4 x 0.5 = 6; 01-02: 8 allocated, nothing pending
    assert [(i["avg_allocatable_gpus"], i["avg_allocated_gpus"], i["avg_idle_gpus"], i["avg_pending_gpus"])
            for i in items] == [(16, 2, 14, 6), (16, 8, 8, 0)]


def test_queue_waits_per_workload_and_their_percentiles(conn):
    per = by_key(capacities.queue_waits(conn, by=["workload"], as_of=NEXT), "workload")
    assert {k[0]: (i["max_wait_s"], i["waiting"]) for k, i in per.items()} == {
        "JobSet/train": (3600, 0), "NIMService/nim": (7200, 0), "Deployment/serve": (64800, 1)}
    inf = by_key(capacities.queue_waits(conn, by=["namespace"], as_of=NEXT), "namespace")[("inf",)]
    # waits 7,200 and 64,800: p50 36,000; p90 7,200 + 0.9 x 57,600 = 59,040
    assert (inf["workloads"], inf["waiting"], inf["p50_wait_s"], inf["p90_wait_s"], inf["max_wait_s"]) == (
        2, 1, 36000, 59040, 64800)
    waiting = capacities.queue_waits(conn, by=["workload"], waiting=True, as_of=NEXT)
    assert [(i["workload"], i["ready_at"]) for i in waiting] == [("Deployment/serve", None)]


def test_cost_bills_allocated_gpu_hours_per_workload_and_role(conn):
    report = costing.cost_report(conn, DAY, NEXT, by=("workload",), basis=costing.ALLOCATED, as_of=NEXT,
                                 pricing=PRICING)
    got = {r.workload: (r.gpu_hours, r.gpu_cost) for r in report.rows}
    # W1 108 GPU-h x 2.0; W3 44 MIG-hours x 0.5; W2 never held anything
    assert got == {"JobSet/train": pytest.approx((108, 216)), "NIMService/nim": pytest.approx((44, 22))}
    roles = costing.cost_report(conn, DAY, NEXT, by=("role",), basis=costing.ALLOCATED, as_of=NEXT)
    # grouped on the pod intervals' component column, the workload left whole
    assert roles.columns == ("cluster", "namespace", "framework", "workload", "role")
    assert {(r.workload, r.uid, r.role): r.gpu_hours for r in roles.rows} == {
        ("JobSet/train", "w1", "worker"): 108, ("NIMService/nim", "w3", "nim"): 44}
    # what the records request while Running: W1 8 GPUs 01:00-24:00 = 184; W3 2 x 22 = 44
    requested = costing.cost_report(conn, DAY, NEXT, by=("workload",), as_of=NEXT, basis=costing.REQUESTED)
    assert {r.workload: r.gpu_hours for r in requested.rows} == {"JobSet/train": 184, "NIMService/nim": 44}


def test_the_library_bills_allocated_gpu_hours_unless_told_otherwise(conn):
    """Issue 25: cost bills allocated GPU-hours by default; the library, the CLI and the served reads share
    one default (the 108 and 44 allocated GPU-hours above, not the 184 requested)."""
    report = costing.cost_report(conn, DAY, NEXT, by=("workload",), as_of=NEXT)
    assert report.basis == costing.ALLOCATED
    assert {r.workload: r.gpu_hours for r in report.rows} == {"JobSet/train": 108, "NIMService/nim": 44}
    (basis,) = [p for p in cli.commands["cost"].params if p.name == "basis"]
    assert basis.default == costing.DEFAULT_BASIS == costing.ALLOCATED


def invoke(path, *args):
    result = CliRunner().invoke(cli, [*args, "--duckdb", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_cli_capacity_allocation_wait_and_cost(path, tmp_path):
    items = json.loads(invoke(path, "capacity", "--allocation", "--by", "none", "-o", "json").output)["items"]
    assert items[0]["allocatable_gpus"] == 15 and items[0]["idle_gpus"] == 13  # 8 + 7 offered, q2 holds 2
    table = invoke(path, "capacity", "--allocation", "--by", "cluster,node_pool").output
    assert "GPUs now: capacity, allocation, idle, pending, by cluster, node_pool" in table
    csv_lines = invoke(path, "capacity", "--allocation", "--by", "node_pool", "-o", "csv").output.splitlines()
    assert csv_lines[0].startswith("node_pool,nodes,allocatable_gpus,schedulable_gpus,unschedulable_gpus")
    assert "mig,1,7,7,0,2,0,5,0,0,1,0,0" in csv_lines and not any(l.startswith("gpu-b") for l in csv_lines)  # n2 lost
    products = json.loads(invoke(path, "capacity", "--allocation", "--by", "gpu_product", "-o", "json").output)
    assert {i["gpu_product"]: i["allocatable_gpus"] for i in products["items"]} == {
        "NVIDIA-H100-80GB-HBM3": 8, "NVIDIA-A100-SXM4-80GB": 7, None: 0}
    waits = invoke(path, "wait", "--waiting", "--as-of", "2026-11-03T00:00:00Z").output
    assert "Deployment/serve" in waits and "18h00m" in waits
    cost = json.loads(invoke(path, "cost", "--since", "2026-11-02", "--until", "2026-11-03", "-o", "json").output)
    assert {i["cluster"]: i["gpuHours"] for i in cost["items"]}["c1"] == pytest.approx(108)
    roles = json.loads(invoke(path, "cost", "--since", "2026-11-02", "--until", "2026-11-03", "--by", "role",
                              "-o", "json").output)["items"]
    assert [(i["workload"], i["uid"], i["role"], i["gpuHours"]) for i in roles] == [
        ("JobSet/train", "w1", "worker", 108), ("NIMService/nim", "w3", "nim", 44)]
    pricing = tmp_path / "p.yaml"
    pricing.write_text("default: {gpu: {nvidia.com/gpu: 2.0, 'nvidia.com/mig-*': 0.5}}\n")
    idle = json.loads(invoke(path, "cost", "--idle", "--since", "2026-11-02", "--until", "2026-11-03",
                             "--pricing", str(pricing), "-o", "json").output)["items"]
    assert {i["cluster"]: i["idleCost"] for i in idle} == {"c1": 456, "c2": 62}
    html = invoke(path, "cost", "--since", "2026-11-02", "--until", "2026-11-03", "--step", "hour", "-o", "html").output
    assert 'id="chart-allocation"' in html and 'id="chart-idle"' in html


def test_the_kept_daily_allocation_and_the_intervals_give_the_same_idle_hours(conn):
    # a window of whole UTC days reads daily_allocation for the closed pod intervals; hourly steps compute
    # every interval: the day's sums agree
    daily = {(r.cluster, r.resource): r.allocated_gpu_hours
             for r in costing.idle_report(conn, DAY, NEXT, by=("cluster",), as_of=NEXT)}
    hourly = {}
    for r in costing.idle_report(conn, DAY, NEXT, by=("cluster",), step=timedelta(hours=1), as_of=NEXT):
        hourly[(r.cluster, r.resource)] = hourly.get((r.cluster, r.resource), 0.0) + r.allocated_gpu_hours
    assert daily == pytest.approx(hourly) and daily[("c1", "nvidia.com/gpu")] == pytest.approx(108)
    kept = conn.execute("SELECT day, cluster, node_pool, resource, gpu_seconds / 3600 FROM daily_allocation "
                        "ORDER BY ALL").fetchall()
    # closed Bound intervals only: p1 (40 GPU-h on gpu-a) and p2 (68 on gpu-b); q2 is still open
    assert kept == [(DAY.date(), "c1", "gpu-a", "nvidia.com/gpu", 40.0), (DAY.date(), "c1", "gpu-b", "nvidia.com/gpu", 68.0)]


def test_the_html_report_with_allocation_and_idle_charts_renders_in_chromium(path, tmp_path):
    from tests.warehouse.test_costing import browse, chromium, console_messages
    import re

    out = tmp_path / "report.html"
    invoke(path, "cost", "--since", "2026-11-02", "--until", "2026-11-03", "--step", "hour", "-o", "html",
           "--out", str(out))
    text = out.read_text()
    assert text.count('<svg class="chart"') == 5  # time, top workloads, clusters, allocation, idle
    browser = chromium()
    if browser is None:
        return  # WORKLOADMAP_NO_BROWSER=1: the checks above still ran
    dom = browse(browser, out, tmp_path, mode="dom")
    assert dom.returncode == 0 and console_messages(dom.stderr) == [], dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert 'data-report="ready"' in body
    # bars: GPU-hours per hour by cluster: c1 holds from 00:30 to 18:00 (18 hours), c2 from 02:00 (22);
    # top workloads 2; clusters 2; allocated and idle stacked in each of the 24 hours (48: something is
    # held and something idle every hour); idle by cluster 2
    assert int(re.search(r'data-charts="(\d+)"', body).group(1)) == 18 + 22 + 2 + 2 + 48 + 2
