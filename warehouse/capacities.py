"""Capacity reports as JSON-ready items: demand at an instant, per step over a window, the top workloads.

The named queries ``capacity``, ``capacity_series``, ``capacity_top`` and
``capacity_top_window`` answer in DuckDB rows (memory in bytes, timestamps as
datetimes); these functions turn them into the items every consumer shows
(`workloadmap capacity -o json`, a dashboard, a notebook): memory in GiB,
numbers rounded, instants in RFC 3339.  ``window_summary`` adds what no
single SQL step gives: the whole window per group, as the time-weighted
average of its steps and the highest of their peaks.
"""

from __future__ import annotations

from .values import GIB, jsonable, number

DIMENSIONS = ("cluster", "namespace", "framework", "kind", "status")
CATEGORIES = ("running", "degraded", "starting", "queued", "all")


def capacity_item(row: dict, by: list[str]) -> dict:
    """A row of ``capacity``: the group, its workloads, and each category's GPUs, CPU and memory GiB."""
    item = {d: row[d] for d in by}
    item["workloads"] = row["workloads"]
    for c in CATEGORIES:
        item[f"{c}_gpus"] = number(row[f"{c}_gpus"])
    for c in CATEGORIES:
        item[f"{c}_cpu"] = number(row[f"{c}_cpu"])
    for c in CATEGORIES:
        item[f"{c}_memory_gib"] = number(row[f"{c}_memory"] / GIB)
    return item


def series_item(row: dict, by: list[str], step: str) -> dict:
    """A row of ``capacity_series``: one step of one group, its average and peak demand."""
    item = {"start": jsonable(row["step_start"]), "end": jsonable(row["step_end"]), "step": step}
    item.update({d: row[d] for d in by})
    item.update(avg_gpus=number(row["avg_gpus"]), peak_gpus=number(row["peak_gpus"]),
                avg_cpu=number(row["avg_cpu"]), peak_cpu=number(row["peak_cpu"]),
                avg_memory_gib=number(row["avg_memory"] / GIB), peak_memory_gib=number(row["peak_memory"] / GIB))
    return item


def window_summary(rows: list[dict], by: list[str], since, until) -> list[dict]:
    """Per group over the whole window: the time-weighted average and the highest peak of its steps."""
    groups: dict[tuple, dict] = {}
    total = (until - since).total_seconds()
    for row in rows:
        key = tuple(row[d] for d in by)
        g = groups.setdefault(key, {"start": jsonable(since), "end": jsonable(until), "step": "window",
                                    **dict(zip(by, key)), "_acc": [0.0, 0.0, 0.0], "_peak": [0.0, 0.0, 0.0]})
        length = (row["step_end"] - row["step_start"]).total_seconds()
        for i, r in enumerate(("gpus", "cpu", "memory")):
            g["_acc"][i] += row[f"avg_{r}"] * length
            g["_peak"][i] = max(g["_peak"][i], row[f"peak_{r}"])
    out = []
    for g in groups.values():
        acc, peak = g.pop("_acc"), g.pop("_peak")
        g.update(avg_gpus=number(acc[0] / total), peak_gpus=number(peak[0]),
                 avg_cpu=number(acc[1] / total), peak_cpu=number(peak[1]),
                 avg_memory_gib=number(acc[2] / total / GIB), peak_memory_gib=number(peak[2] / GIB))
        out.append(g)
    return out


def top_item(row: dict) -> dict:
    """A row of ``capacity_top`` (its state and demand) or ``capacity_top_window`` (its GPU-hours)."""
    item = {k: row[k] for k in ("cluster", "namespace", "name", "kind", "framework")}
    if "status" in row:
        item.update(status=row["status"], since=jsonable(row["since"]), pods=row["pods"],
                    gpus=number(row["gpus"]), cpu=number(row["cpu"]),
                    memory_gib=number(row["memory"] / GIB), gpu_resources=jsonable(row["gpu_resources"]))
    else:
        item.update(gpu_hours=number(row["gpu_hours"]), avg_gpus=number(row["avg_gpus"]),
                    peak_gpus=number(row["peak_gpus"]))
    return item
