"""Workload records made from the bundled examples, a lifecycle of one, and the intervals a warehouse
holds for it: the inputs and expectations the warehouse's tests share."""

from __future__ import annotations

import copy

from workloadmap.catalog import Catalog, records
from workloadmap.catalog.registry import bundled_examples
from workloadmap.warehouse.writing import Warehouse


def resolved_examples() -> list[dict]:
    catalog = Catalog.builtin()
    return [catalog.resolve(d).to_dict() for d in bundled_examples()]


EXAMPLES = resolved_examples()
PYTORCHJOB = next(r for r in EXAMPLES if r["kind"] == "PyTorchJob" and r["total"]["gpu"] > 0)


def as_record(resolved: dict, cluster="c1", observed="2025-06-03T09:00:00Z", event="ADDED", **changes) -> dict:
    rec = copy.deepcopy(resolved)
    rec.update(cluster=cluster, observedAt=observed, eventType=event, deleted=event == "DELETED")
    if rec["deleted"]:
        rec["status"], rec["statuses"] = records.DELETED, [records.DELETED]
    rec.update(changes)
    return rec


def lifecycle(uid="uid-1", cluster="c1") -> list[dict]:
    """Initializing -> Running -> Running (same demand) -> scaled -> Completed -> deleted."""
    base = dict(PYTORCHJOB, uid=uid)
    scaled = copy.deepcopy(base["total"])
    scaled["pods"] += 2
    scaled["gpu"] += 16
    scaled["gpuResources"] = {"nvidia.com/gpu": scaled["gpu"]}
    steps = [
        ("ADDED", "Initializing", "09:00", base["total"]),
        ("MODIFIED", "Running", "09:05", base["total"]),
        ("MODIFIED", "Running", "09:20", base["total"]),
        ("MODIFIED", "Running", "10:00", scaled),
        ("MODIFIED", "Completed", "12:00", scaled),
        ("DELETED", "Completed", "13:00", scaled),
    ]
    return [as_record(base, cluster, f"2025-06-03T{hm}:00Z", event, status=status, statuses=[status],
                      total=copy.deepcopy(total), resourceVersion=str(100 + i))
            for i, (event, status, hm, total) in enumerate(steps)]


def intervals(wh: Warehouse, uid="uid-1") -> list[tuple]:
    return wh.cursor().execute("""
        SELECT status, strftime(valid_from, '%H:%M'), strftime(valid_to, '%H:%M'), pods, gpus, gpu_resources
        FROM status_intervals WHERE uid = ? ORDER BY valid_from, from_seq""", [uid]).fetchall()


EXPECTED_LIFECYCLE = [
    ("Initializing", "09:00", "09:05", 4, 32.0, {"nvidia.com/gpu": 32.0}),
    ("Running", "09:05", "10:00", 4, 32.0, {"nvidia.com/gpu": 32.0}),
    ("Running", "10:00", "12:00", 6, 48.0, {"nvidia.com/gpu": 48.0}),
    ("Completed", "12:00", "13:00", 6, 48.0, {"nvidia.com/gpu": 48.0}),
    ("Deleted", "13:00", None, 0, 0.0, {}),
]


def example_batch() -> list[dict]:
    return [as_record(r, cluster=f"c{i % 3}", observed=f"2025-06-03T09:{i % 60:02d}:00Z")
            for i, r in enumerate(EXAMPLES)]
