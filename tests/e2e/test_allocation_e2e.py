"""Allocation, capacity, idle and queue waits end to end: raw Kubernetes objects (nodes, workloads, their
ReplicaSets, pods) through the processors into the warehouse, in the embedded pipeline and through a real
Kafka broker, and the answers worked out by hand.

The history is the one of tests/warehouse/test_allocation_analytics.py, as a cluster would show it:

c1  nodes n1 (8 nvidia.com/gpu, node group gpu-a) and n2 (8, gpu-b) from 11-01; n2 cordoned 11-02 12:00
    and lost (deleted) 18:00.  Job ml/train (parallelism 2, 4 GPUs a pod), created 11-02 00:00: pod p1
    pending 00:00, bound to n1 00:30, Succeeded 10:30; pod p2 pending 00:00, bound to n2 01:00, deleted
    with its node 18:00.
c2  node m1 (7 nvidia.com/mig-1g.10gb, group mig) from 11-01.  Deployment inf/serve (1 replica, 1 GPU),
    created 06:00: its ReplicaSet's pod q1 pends for ever.  Deployment inf/nim (1 replica, 2 MIG slices),
    created 00:00: its pod q2 pending 00:00, bound to m1 02:00, still running.

Day 11-02, open intervals ending 11-03 00:00: c1 allocatable 8 x 24 + 8 x 18 = 336 GPU-h, allocated
4 x 10 + 4 x 17 = 108, idle 228; c2 allocatable 168, allocated 2 x 22 = 44, idle 124.  Pending GPUs at
00:15: 8 in c1; at 12:00: 1 in c2.  Waits: train 1 h (both pods bound at 01:00), nim 2 h, serve still
waiting at 11-03 00:00 (18 h).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.e2e.test_pipeline_e2e import pipeline_on  # noqa: F401 - the fixture
from workloadmap.catalog import records
from workloadmap.embedding import EmbeddedPipeline
from workloadmap.ingest.publishing import event_key
from workloadmap.warehouse import capacities, costing
from workloadmap.warehouse.querying import open_readonly

UTC = timezone.utc
DAY, NEXT = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC)


def at(hour, minute=0, day=2) -> str:
    return f"2026-11-{day:02d}T{hour:02d}:{minute:02d}:00Z"


def _node(name, pool, resource, count, *, cordoned=False):
    amounts = {resource: str(count), "cpu": "96", "memory": "1Ti"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": at(0, day=1),
                         "labels": {"eks.amazonaws.com/nodegroup": pool, "nvidia.com/gpu.product": "GPU"}},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": dict(amounts), "capacity": dict(amounts),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _ref(obj):
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
             "uid": obj["metadata"]["uid"], "controller": True}]


def _template(resource, count):
    return {"spec": {"containers": [{"name": "c", "resources": {"limits": {resource: str(count)}}}]}}


def _pod(name, namespace, owner, resource, count, created, *, node=None, phase="Pending", deleted_at=None):
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "creationTimestamp": created,
            "ownerReferences": _ref(owner)}
    if deleted_at:
        meta["deletionTimestamp"] = deleted_at
    spec = _template(resource, count)["spec"]
    if node:
        spec = {**spec, "nodeName": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def raw_events() -> list[dict]:
    """The history's raw events in time order, each object with its own increasing resourceVersion."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "uid": "uid-train", "creationTimestamp": at(0)},
           "spec": {"parallelism": 2, "completions": 2, "template": _template("nvidia.com/gpu", 4)}}
    running_job = {**job, "status": {"active": 2, "ready": 2, "startTime": at(0)}}
    deployments, sets = {}, {}
    for name, resource, count, created in (("serve", "nvidia.com/gpu", 1, at(6)),
                                           ("nim", "nvidia.com/mig-1g.10gb", 2, at(0))):
        d = deployments[name] = {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": name, "namespace": "inf", "uid": f"uid-{name}",
                                              "creationTimestamp": created},
                                 "spec": {"replicas": 1, "template": _template(resource, count)}}
        sets[name] = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                      "metadata": {"name": f"{name}-7c9", "namespace": "inf", "uid": f"uid-{name}-rs",
                                   "creationTimestamp": created, "ownerReferences": _ref(d)},
                      "spec": {"replicas": 1}}
    gpu, mig = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
    steps = [
        ("c1", at(0, day=1), "ADDED", _node("n1", "gpu-a", gpu, 8)),
        ("c1", at(0, day=1), "ADDED", _node("n2", "gpu-b", gpu, 8)),
        ("c2", at(0, day=1), "ADDED", _node("m1", "mig", mig, 7)),
        ("c1", at(0), "ADDED", job),
        ("c1", at(0), "ADDED", _pod("p1", "ml", job, gpu, 4, at(0))),
        ("c1", at(0), "ADDED", _pod("p2", "ml", job, gpu, 4, at(0))),
        ("c2", at(0), "ADDED", deployments["nim"]),
        ("c2", at(0), "ADDED", sets["nim"]),
        ("c2", at(0), "ADDED", _pod("q2", "inf", sets["nim"], mig, 2, at(0))),
        ("c1", at(0, 30), "MODIFIED", _pod("p1", "ml", job, gpu, 4, at(0), node="n1", phase="Running")),
        ("c1", at(1), "MODIFIED", _pod("p2", "ml", job, gpu, 4, at(0), node="n2", phase="Running")),
        ("c1", at(1), "MODIFIED", running_job),
        ("c2", at(2), "MODIFIED", _pod("q2", "inf", sets["nim"], mig, 2, at(0), node="m1", phase="Running")),
        ("c2", at(6), "ADDED", deployments["serve"]),
        ("c2", at(6), "ADDED", sets["serve"]),
        ("c2", at(6), "ADDED", _pod("q1", "inf", sets["serve"], gpu, 1, at(6))),
        ("c1", at(10, 30), "MODIFIED", _pod("p1", "ml", job, gpu, 4, at(0), node="n1", phase="Succeeded")),
        ("c1", at(12), "MODIFIED", _node("n2", "gpu-b", gpu, 8, cordoned=True)),
        ("c1", at(18), "DELETED", _pod("p2", "ml", job, gpu, 4, at(0), node="n2", phase="Running",
                                       deleted_at=at(18))),
        ("c1", at(18), "DELETED", _node("n2", "gpu-b", gpu, 8, cordoned=True)),
    ]
    out = []
    for n, (cluster, when, etype, obj) in enumerate(steps):
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(1000 + n)}}
        out.append(records.raw_event(cluster, etype, obj, when))
    return out


def check_answers(conn) -> None:
    """The hand-computed answers (module docstring) on a warehouse connection."""
    idle = {(r.cluster, r.resource): (r.allocatable_gpu_hours, r.allocated_gpu_hours, r.idle_gpu_hours)
            for r in costing.idle_report(conn, DAY, NEXT, by=("cluster",), as_of=NEXT)}
    assert idle == {("c1", "nvidia.com/gpu"): pytest.approx((336, 108, 228)),
                    ("c2", "nvidia.com/mig-1g.10gb"): pytest.approx((168, 44, 124))}
    early = capacities.allocation(conn, at=datetime(2026, 11, 2, 0, 15, tzinfo=UTC), by=["cluster"])
    noon = capacities.allocation(conn, at=datetime(2026, 11, 2, 12, tzinfo=UTC), by=["cluster"])
    assert {i["cluster"]: i["pending_gpus"] for i in early} == {"c1": 8, "c2": 2}  # q2 pends until 02:00 too
    assert {i["cluster"]: i["pending_gpus"] for i in noon} == {"c1": 0, "c2": 1}
    at13 = {i["cluster"]: i for i in capacities.allocation(conn, at=datetime(2026, 11, 2, 13, tzinfo=UTC),
                                                          by=["cluster"])}
    assert (at13["c1"]["allocatable_gpus"], at13["c1"]["unschedulable_gpus"], at13["c1"]["allocated_gpus"]) == (
        16, 8, 4)
    waits = {i["workload"]: (i["max_wait_s"], i["waiting"])
             for i in capacities.queue_waits(conn, by=["workload"], as_of=NEXT)}
    assert waits == {"Job/train": (3600, 0), "Deployment/nim": (7200, 0), "Deployment/serve": (64800, 1)}
    billed = {r.workload: r.gpu_hours for r in costing.cost_report(
        conn, DAY, NEXT, by=("workload",), basis=costing.ALLOCATED, as_of=NEXT).rows}
    assert billed == pytest.approx({"Job/train": 108, "Deployment/nim": 44})


def test_the_embedded_pipeline_gives_the_hand_computed_answers(tmp_path):
    path = tmp_path / "w.duckdb"
    with EmbeddedPipeline.open(path) as pipeline:
        pipeline.feed(raw_events())
        pipeline.flush()
        assert pipeline.dead_letters == []
        check_answers(pipeline.warehouse.cursor())


def test_through_kafka_the_same_answers(kafka_broker, pipeline_on):
    p = pipeline_on(kafka_broker.bootstrap_servers)
    p.start("processors")
    p.start("warehouse")
    events = raw_events()
    p.publish([(event_key(e), records.encode(e), None) for e in events])
    deadline = time.time() + 180
    while time.time() < deadline:
        # the last facts: n2's deletion and p2's end (their intervals closed)
        rows = p.warehouse_rows("SELECT (SELECT count(*) FROM node_history WHERE name = 'n2'), "
                                "(SELECT count(*) FROM pod_history WHERE uid = 'uid-p2' AND state = 'Bound'), "
                                "(SELECT count(*) FROM workload_states)")
        if rows and rows[0][:2] == (2, 1) and rows[0][2] >= 4:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"not all in the warehouse: {rows}\n{p.log('processors')}\n{p.log('warehouse')}")
    time.sleep(1.5)  # one more snapshot after the last batch
    conn = open_readonly(p.snapshot)
    try:
        check_answers(conn)
    finally:
        conn.close()
    assert p.dead_letters() == []
