"""Workload records as the processors publish them (catalog/schemas/workload-record.schema.json), built
field by field for exporter tests: each call says only what the test is about.  Pod and node records
come from tests/allocation_records.py (the format of catalog/schemas/pod-record.schema.json)."""

from __future__ import annotations

from workloadmap.catalog import records

GIB = 2**30


def resources(gpu=0, cpu=0.0, memory=0, gpu_resource="nvidia.com/gpu", pods=None) -> dict:
    out = {"gpu": gpu, "cpu": cpu, "memory": memory}
    if gpu:
        out["gpuResources"] = {gpu_resource: gpu}
    if pods is not None:
        out["pods"] = pods
    return out


def component(name, pods, per_pod_gpu=0, per_pod_cpu=1.0, per_pod_memory=GIB, instance=None) -> dict:
    return {"name": name, "instance": instance, "parent": None, "kind": None, "replicas": pods, "minReplicas": None,
            "maxReplicas": None, "podsPerReplica": 1, "pods": pods,
            "perPod": resources(per_pod_gpu, per_pod_cpu, per_pod_memory),
            "total": resources(per_pod_gpu * pods, per_pod_cpu * pods, per_pod_memory * pods)}


def workload(uid, status="Running", *, cluster="c1", namespace="ml", name=None, kind="PyTorchJob",
             framework="PyTorch", definition="pytorchjob", at="2026-12-01T10:00:00Z", since=None,
             components=(), deleted=False, created="2026-12-01T09:00:00Z", previous=None) -> dict:
    """A workload record whose total is the sum of its `components`."""
    comps = list(components)
    total = {"pods": sum(c["pods"] for c in comps),
             **resources(sum(c["total"]["gpu"] for c in comps), sum(c["total"]["cpu"] for c in comps),
                         sum(c["total"]["memory"] for c in comps))}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": kind, "namespace": namespace, "name": name or f"wl-{uid}",
        "uid": uid, "resourceVersion": at, "generation": 1, "creationTimestamp": created,
        "definition": definition, "origin": "built-in", "framework": framework,
        "status": records.DELETED if deleted else status, "statuses": [status], "phase": None, "conditions": [],
        "components": comps, "total": total, "cluster": cluster, "observedAt": at,
        "eventType": "DELETED" if deleted else "MODIFIED", "deleted": deleted, "previousStatus": previous,
        "previousStatusSince": None, "statusSince": since or at,
    }
