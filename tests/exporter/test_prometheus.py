"""A real Prometheus scrapes the exporter: the shipped recording rules load and give hand-computed answers.

One Prometheus (Debian's package, tests/services/prometheus.py) scrapes, every second, an exporter
server whose tracker the test feeds with records, and a DCGM-shaped server the test serves itself
(DCGM_FI_DEV_GPU_UTIL by GPU, namespace and pod, the cluster given as the scrape job's label as
the rules file says).  The fleet, and every expected figure derived from it:

    cluster c1
    team-a/trainer    PyTorchJob  PyTorch Running   master 1 x 8 GPUs, worker 2 x 8: 24 requested, 24 held
    team-b/ray-serve  RayCluster  Ray     Running   head 0 GPUs, worker 2 x 4: 8 requested; worker-1 pending: 4 held
    team-a/sweep      JobSet      JobSet  Failed    16 requested, no pods
    nodes n1 8 GPUs, n2 8, n3 16: 32 allocatable; 24 + 4 held -> 4 idle; 4 pending
    DCGM utilisation (two GPUs shown per pod):
      trainer-master-0 90, 70   trainer-worker-0 50, 50   trainer-worker-1 30, 10
      ray-serve-worker-0 40, 60   unrelated team-c/other-0 99 (no workload: in no result)
    -> trainer 300/6 = 50 (master 80, worker 140/4 = 35); ray-serve worker 50
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path

import pytest
import yaml

from workloadmap.catalog import records
from workloadmap.exporter.serving import MetricsServer
from workloadmap.exporter.tracking import NODES, PODS, WORKLOADS, Tracker

from tests.allocation_records import node, pod
from tests.exporter_records import component, workload
from tests.services.prometheus import INTERVAL_S, Prometheus, prometheus_binary

ROOT = Path(__file__).resolve().parents[2]
RULES = resources.files("workloadmap.exporter").joinpath("prometheus/workloadmap-rules.yaml")
DASHBOARD = resources.files("workloadmap.exporter").joinpath("grafana/workloadmap-dashboard.json")

DCGM = {("team-a", "trainer-master-0"): (90, 70), ("team-a", "trainer-worker-0"): (50, 50),
        ("team-a", "trainer-worker-1"): (30, 10), ("team-b", "ray-serve-worker-0"): (40, 60),
        ("team-c", "other-0"): (99,)}


def dcgm_exposition() -> bytes:
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for (namespace, pod_name), values in DCGM.items():
        for gpu, v in enumerate(values):
            lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{pod_name}-{gpu}",device="nvidia{gpu}",'
                         f'modelName="NVIDIA H100 80GB HBM3",Hostname="n1",container="main",namespace="{namespace}",'
                         f'pod="{pod_name}"}} {v}')
    return ("\n".join(lines) + "\n").encode()


def iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def fleet(now: datetime) -> list:
    at = iso(now - timedelta(seconds=30))
    trainer = ("PyTorchJob", "trainer", "u-trainer")
    ray = ("RayCluster", "ray-serve", "u-ray")
    out = [
        (WORKLOADS, workload("u-trainer", "Running", name="trainer", namespace="team-a", at=at,
                             components=[component("master", 1, per_pod_gpu=8), component("worker", 2, per_pod_gpu=8)])),
        (WORKLOADS, workload("u-ray", "Running", name="ray-serve", namespace="team-b", kind="RayCluster",
                             framework="Ray", definition="raycluster", at=at,
                             components=[component("head", 1), component("worker", 2, per_pod_gpu=4)])),
        (WORKLOADS, workload("u-sweep", "Failed", name="sweep", namespace="team-a", kind="JobSet", framework="JobSet",
                             definition="jobset", at=at, components=[component("trainer", 2, per_pod_gpu=8)])),
        (PODS, pod("p1", at, "Bound", node="n1", gpu=8, workload=trainer, namespace="team-a", name="trainer-master-0",
                   component="master", framework="PyTorch")),
        (PODS, pod("p2", at, "Bound", node="n2", gpu=8, workload=trainer, namespace="team-a", name="trainer-worker-0",
                   component="worker", framework="PyTorch")),
        (PODS, pod("p3", at, "Bound", node="n3", gpu=8, workload=trainer, namespace="team-a", name="trainer-worker-1",
                   component="worker", replica="1", framework="PyTorch")),
        (PODS, pod("p4", at, "Bound", node="n3", gpu=0, workload=ray, namespace="team-b", name="ray-serve-head",
                   component="head", framework="Ray")),
        (PODS, pod("p5", at, "Bound", node="n3", gpu=4, workload=ray, namespace="team-b", name="ray-serve-worker-0",
                   component="worker", framework="Ray")),
        (PODS, pod("p6", at, "Pending", gpu=4, workload=ray, namespace="team-b", name="ray-serve-worker-1",
                   component="worker", replica="1", framework="Ray")),
        (NODES, node("n1", at, gpu=8)), (NODES, node("n2", at, gpu=8)), (NODES, node("n3", at, gpu=16)),
    ]
    return out


def feed(tracker: Tracker, pairs) -> None:
    tracker.apply_batch([(kind, records.encode(value), None) for kind, value in pairs])


def by(result: dict, *names) -> dict:
    """{label values: value} of a query result, keyed by the given labels."""
    return {tuple(dict(ls).get(n) for n in names): v for ls, v in result.items()}


@pytest.fixture
def stack(tmp_path):
    """(tracker, prometheus): the exporter and the fake DCGM served, a Prometheus scraping both with the rules."""
    prometheus_binary()
    tracker = Tracker()
    with MetricsServer("127.0.0.1:0", tracker.exposition_parts, exposition_gzip=tracker.exposition_gzip) as exporter, \
            MetricsServer("127.0.0.1:0", dcgm_exposition) as dcgm:
        jobs = {"workloadmap": {"target": f"127.0.0.1:{exporter.port}"},
                "dcgm": {"target": f"127.0.0.1:{dcgm.port}", "labels": {"cluster": "c1"}}}
        with Prometheus(tmp_path, jobs, rules=[RULES]) as prometheus:
            yield tracker, prometheus


def test_the_shipped_rules_pass_promtool():
    run = subprocess.run([prometheus_binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 11 rules found" in run.stdout


def test_the_shipped_prometheus_configuration_passes_promtool_and_scrapes_the_compose_services():
    config = resources.files("workloadmap.exporter").joinpath("prometheus/prometheus.yml")
    run = subprocess.run([prometheus_binary("promtool"), "check", "config", str(config)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr   # the rule file it names is checked too
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    targets = {t for job in yaml.safe_load(config.read_text())["scrape_configs"]
               for c in job["static_configs"] for t in c["targets"]}
    assert targets == {"exporter:9108", "watchers:9109"}
    assert ":9108" in compose["exporter"]["command"] and ":9109" in compose["watchers"]["command"]


def test_the_recording_rules_give_the_hand_computed_joins(stack):
    tracker, prom = stack
    now = datetime.now(timezone.utc)
    feed(tracker, fleet(now))
    util = prom.wait_for("workload:workloadmap_dcgm_gpu_utilization:avg", lambda r: len(r) == 2)
    assert by(util, "namespace", "workload", "kind") == {("team-a", "trainer", "PyTorchJob"): 50,
                                                          ("team-b", "ray-serve", "RayCluster"): 50}
    roles = prom.wait_for("workload_component:workloadmap_dcgm_gpu_utilization:avg", lambda r: len(r) == 3)
    assert by(roles, "workload", "component") == {("trainer", "master"): 80, ("trainer", "worker"): 35,
                                                   ("ray-serve", "worker"): 50}
    held = prom.wait_for("cluster_namespace_framework:workloadmap_allocated_gpus:sum", lambda r: len(r) == 2)
    assert by(held, "cluster", "namespace", "framework") == {("c1", "team-a", "PyTorch"): 24,
                                                              ("c1", "team-b", "Ray"): 4}
    asked = prom.query("cluster_namespace_framework:workloadmap_running_requested_gpus:sum")
    assert by(asked, "namespace", "framework") == {("team-a", "PyTorch"): 24, ("team-b", "Ray"): 8,
                                                   ("team-a", "JobSet"): 0}   # Failed: asks for none running
    statuses = by(prom.query("cluster_status:workloadmap_workloads:count"), "status")
    assert statuses[("Running",)] == 2 and statuses[("Failed",)] == 1 and sum(statuses.values()) == 3
    by_framework = by(prom.query("cluster_framework_status:workloadmap_workloads:count > 0"), "framework", "status")
    assert by_framework == {("PyTorch", "Running"): 1, ("Ray", "Running"): 1, ("JobSet", "Failed"): 1}
    assert by(prom.query("cluster:workloadmap_pending_gpus:sum"), "cluster") == {("c1",): 4}
    assert by(prom.query("cluster:workloadmap_idle_gpus:sum"), "cluster") == {("c1",): 4}
    # the newest event was observed 30 s before `now`; the rule is evaluated a few seconds later
    (age,) = prom.query("cluster:workloadmap_last_event_age:seconds").values()
    assert 30 <= age <= 30 + (datetime.now(timezone.utc) - now).total_seconds() + 2 * INTERVAL_S


def test_a_status_change_is_visible_within_one_scrape_and_a_deleted_workload_vanishes(stack):
    tracker, prom = stack
    now = datetime.now(timezone.utc)
    feed(tracker, fleet(now))
    prom.wait_for('workloadmap_workload_status{workload="ray-serve",status="Running"} == 1', lambda r: len(r) == 1)
    changed = time.monotonic()
    feed(tracker, [(WORKLOADS, workload("u-ray", "Degraded", name="ray-serve", namespace="team-b", kind="RayCluster",
                                        framework="Ray", definition="raycluster", at=iso(now), previous="Running"))])
    prom.wait_for('workloadmap_workload_status{workload="ray-serve",status="Degraded"} == 1', lambda r: len(r) == 1,
                  timeout=5)
    # within one scrape interval, plus the scrape's own time and the query's polling step
    assert time.monotonic() - changed <= INTERVAL_S + 1.0
    trainer = ("PyTorchJob", "trainer", "u-trainer")
    feed(tracker, [(WORKLOADS, workload("u-trainer", deleted=True, name="trainer", namespace="team-a", at=iso(now)))]
         + [(PODS, pod(uid, iso(now), "Terminated", deleted=True, workload=trainer, namespace="team-a", name=name))
            for uid, name in (("p1", "trainer-master-0"), ("p2", "trainer-worker-0"), ("p3", "trainer-worker-1"))])
    prom.wait_for('{workload="trainer"}', lambda r: r == {}, timeout=5)
    util = prom.wait_for("workload:workloadmap_dcgm_gpu_utilization:avg", lambda r: len(r) == 1)
    assert by(util, "workload") == {("ray-serve",): 50}
    statuses = by(prom.query("cluster_status:workloadmap_workloads:count"), "status")
    assert statuses[("Running",)] == 0 and statuses[("Degraded",)] == 1 and statuses[("Failed",)] == 1


def test_every_dashboard_query_is_valid_promql_and_the_workload_panels_have_data(stack):
    tracker, prom = stack
    feed(tracker, fleet(datetime.now(timezone.utc)))
    prom.wait_for("workload_component:workloadmap_dcgm_gpu_utilization:avg", lambda r: len(r) == 3)
    prom.wait_for("cluster_framework_status:workloadmap_workloads:count", lambda r: len(r) > 0)
    dashboard = json.loads(DASHBOARD.read_text())
    empty = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$cluster", ".*")
            if not prom.query(expr) and panel["title"].startswith(("GPU", "Workloads", "Freshness")):
                empty.append(panel["title"])
    assert empty == []
