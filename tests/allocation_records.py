"""Pod and node records as the processors publish them (catalog/schemas/pod-record.schema.json,
node-record.schema.json), built field by field for warehouse tests that must not depend on the
processors: each call says only what the test is about."""

from __future__ import annotations

GIB = 2**30


def pod(uid: str, at: str, state: str, *, cluster="c1", node=None, gpu=0, gpu_resources=None, cpu=1.0,
        memory=GIB, workload=("JobSet", "train", "wl-1"), namespace="ml", name=None, rv=None, deleted=False,
        component="worker", instance=None, replica="0", framework="JobSet", created="2026-11-01T00:00:00Z",
        event="MODIFIED") -> dict:
    """A pod record; `workload` is (kind, name, uid) or None (its owner has not arrived)."""
    record = {
        "cluster": cluster, "observedAt": at, "eventType": "DELETED" if deleted else event, "deleted": deleted,
        "namespace": namespace, "name": name or f"pod-{uid}", "uid": uid, "resourceVersion": rv or at,
        "creationTimestamp": created, "nodeName": node,
        "phase": {"Pending": "Pending", "Bound": "Running", "Terminated": "Succeeded"}[state],
        "state": state,
        "workload": None if workload is None else {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": workload[0],
                                                   "name": workload[1], "uid": workload[2]},
        "framework": framework if workload is not None else None, "definition": None,
        "component": component, "instance": instance, "replica": replica,
        "gpu": gpu, "cpu": cpu, "memory": memory, "previousState": None, "stateSince": at,
    }
    if gpu_resources is not None or gpu:
        record["gpuResources"] = gpu_resources or {"nvidia.com/gpu": gpu}
    return record


def node(name: str, at: str, *, cluster="c1", gpu=8, gpu_resources=None, cpu=96.0, memory=1024 * GIB,
         uid=None, rv=None, deleted=False, unschedulable=False, ready=True, product="NVIDIA-H100-80GB-HBM3",
         pool="gpu-a", instance_type="p5.48xlarge", zone="us-east-1a", event="MODIFIED") -> dict:
    """A node record whose capacity equals its allocatable amounts."""
    amounts = {"gpu": gpu, "cpu": cpu, "memory": memory}
    if gpu:
        amounts["gpuResources"] = gpu_resources or {"nvidia.com/gpu": gpu}
    return {
        "cluster": cluster, "observedAt": at, "eventType": "DELETED" if deleted else event, "deleted": deleted,
        "name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv or at,
        "creationTimestamp": "2026-10-01T00:00:00Z", "allocatable": dict(amounts), "capacity": dict(amounts),
        "unschedulable": unschedulable, "ready": ready,
        "labels": {"gpuProduct": product, "instanceType": instance_type, "nodePool": pool, "zone": zone},
    }
