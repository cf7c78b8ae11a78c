"""A small hand-built warehouse history whose analytics answers are computed by hand.

All on 2026-11-01 (UTC).  GPUs / CPU cores / memory GiB per workload:

  a/ml/train  JobSet (JobSet)                8 / 16 / 64   00:00 Initializing, 01:00 Running, 05:00 Completed
  a/ml/serve  RayService (Ray)               4 /  4 /  8   02:00 Running, 03:00 Degraded, 04:00 Running (open)
  b/web/infer InferenceService (KServe)      2 /  2 /  4   00:30 Suspended, 03:30 Running, 06:00 deleted
  b/ml/big    PyTorchJob (Kubeflow Training) 16 / 8 / 32   01:30 Running, 02:30 scaled to 32 / 16 / 64 (Running),
                                                           04:30 Failed

The transitions table gets the 11 status transitions of these records (the
02:30 scale change is not a transition).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from workloadmap.warehouse.writing import Warehouse

DAY = datetime(2026, 11, 1, tzinfo=timezone.utc)
GIB = 2 ** 30

WORKLOADS = {
    "train": ("a", "ml", "train", "JobSet", "JobSet"),
    "serve": ("a", "ml", "serve", "RayService", "Ray"),
    "infer": ("b", "web", "infer", "InferenceService", "KServe"),
    "big": ("b", "ml", "big", "PyTorchJob", "Kubeflow Training"),
}

# (workload, "HH:MM", status, gpus, cpu, memory GiB, deleted)
STATES = [
    ("train", "00:00", "Initializing", 8, 16, 64, False),
    ("train", "01:00", "Running", 8, 16, 64, False),
    ("train", "05:00", "Completed", 8, 16, 64, False),
    ("serve", "02:00", "Running", 4, 4, 8, False),
    ("serve", "03:00", "Degraded", 4, 4, 8, False),
    ("serve", "04:00", "Running", 4, 4, 8, False),
    ("infer", "00:30", "Suspended", 2, 2, 4, False),
    ("infer", "03:30", "Running", 2, 2, 4, False),
    ("infer", "06:00", "Running", 2, 2, 4, True),
    ("big", "01:30", "Running", 16, 8, 32, False),
    ("big", "02:30", "Running", 32, 16, 64, False),
    ("big", "04:30", "Failed", 32, 16, 64, False),
]


def at(hhmm: str) -> datetime:
    h, m = hhmm.split(":")
    return DAY + timedelta(hours=int(h), minutes=int(m))


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def records_and_transitions(states=STATES):
    records, transitions, last = [], [], {}
    for rv, (w, hhmm, status, gpus, cpu, mem, deleted) in enumerate(states, start=1):
        cluster, ns, name, kind, framework = WORKLOADS[w]
        t = at(hhmm)
        shown = "Deleted" if deleted else status
        records.append({
            "cluster": cluster, "uid": f"uid-{w}", "apiVersion": "v1", "kind": kind, "namespace": ns, "name": name,
            "definition": kind.lower(), "framework": framework, "resourceVersion": str(rv), "observedAt": iso(t),
            "eventType": "DELETED" if deleted else "MODIFIED", "deleted": deleted, "status": status,
            "total": {"pods": 1, "gpu": gpus, "cpu": cpu, "memory": mem * GIB,
                      "gpuResources": {"nvidia.com/gpu": gpus}},
        })
        previous = last.get(w)
        if previous is None or previous[0] != shown:
            transitions.append({
                "cluster": cluster, "namespace": ns, "name": name, "kind": kind, "uid": f"uid-{w}",
                "framework": framework, "definition": kind.lower(), "from": previous and previous[0], "to": shown,
                "at": iso(t), "gpus": 0 if deleted else gpus,
                "previousDurationSeconds": None if previous is None else (t - previous[1]).total_seconds(),
            })
            last[w] = (shown, t)
    return records, transitions


def build(path) -> str:
    records, transitions = records_and_transitions()
    with Warehouse(path) as wh:
        wh.write(records, transitions)
    return str(path)
