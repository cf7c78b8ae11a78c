"""Capacity reports as JSON-ready items: demand at an instant, per step over a window, the top workloads.

``capacity_report`` (workload demand) and ``allocation_report`` (what the
nodes have and the pods hold) are what ``workloadmap capacity [--allocation]
-o json`` prints, the twins of ``costing.cost_report``: a notebook or a
dashboard gets the same items from the same call.  They choose among the named
queries ``capacity``, ``capacity_series``, ``capacity_top``,
``capacity_top_window``, ``allocation`` and ``allocation_series``, which answer
in DuckDB rows (memory in bytes, timestamps as datetimes), and turn the rows
into items: memory in GiB, numbers rounded, instants in RFC 3339.
``window_summary`` adds what no single SQL step gives: the whole window per
group, as the time-weighted average of its steps and the highest of their peaks.
"""

from __future__ import annotations

from .querying import history_end, run_query
from .values import GIB, iso, jsonable, number, parse_step

DIMENSIONS = ("cluster", "namespace", "framework", "kind", "status")
CATEGORIES = ("running", "degraded", "starting", "queued", "all")


def capacity_report(conn, *, at=None, since=None, until=None, step: str = "1h", top: int | None = None,
                    by=("cluster",), statuses=None, **filters) -> list[dict]:
    """Workload demand, as ``workloadmap capacity -o json`` gives it.

    - Now, or at the instant `at`: per group of DIMENSIONS (`by`), the workloads and each category's
      GPUs, CPU and memory GiB (``capacity_item``).
    - Over the window [since, until) (`until` defaults to the end of the history): per step of `step`
      (``15m``, ``1h``, ``1d`` ...) and group, the average and the peak demand of Running and Degraded
      workloads (or of `statuses`), then the whole window per group (``series_item``, ``window_summary``).
    - With `top`: the N workloads with the most GPUs now or at `at`, or with the most GPU-hours over the
      window (``top_item``).

    Filters: clusters, namespaces, frameworks, kinds (lists or None).  Raises ValueError for a request
    that does not hold together (`at` and `since`, `until` without `since`, an empty window, an unknown
    dimension or step), and querying.EmptyHistory when the window needs the end of an empty history.
    """
    by = _dimensions(by, DIMENSIONS)
    step_delta = parse_step(step)
    since, until = resolve_window(conn, at=at, since=since, until=until)
    if top is not None:
        if since is None:
            rows = run_query(conn, "capacity_top", at=at, limit=top, statuses=statuses, **filters).dicts()
        else:
            rows = run_query(conn, "capacity_top_window", since=since, until=until, limit=top, statuses=statuses,
                             **filters).dicts()
        return [top_item(r) for r in rows]
    if since is None:
        rows = run_query(conn, "capacity", at=at, by=by or None, statuses=statuses, **filters).dicts()
        return [capacity_item(r, by) for r in rows]
    rows = run_query(conn, "capacity_series", since=since, until=until, step=step_delta, by=by or None,
                     statuses=statuses, **filters).dicts()
    return [series_item(r, by, step) for r in rows] + window_summary(rows, by, since, until)


def resolve_window(conn, *, at=None, since=None, until=None):
    """(since, until) of a report: (None, None) for an instant (`at`, or now), else the window
    [since, until) with its end the history's by default (the reports call it; a caller that shows
    the window calls it first)."""
    if at is not None and since is not None:
        raise ValueError("at is an instant, since a window: give one of them")
    if until is not None and since is None:
        raise ValueError("until needs since")
    if since is not None:
        until = history_end(conn) if until is None else until
        if until <= since:
            raise ValueError(f"the window is empty: until ({iso(until)}) is not after since ({iso(since)})")
    return since, until


def _dimensions(by, allowed) -> list[str]:
    by = list(dict.fromkeys(by or ()))
    bad = [d for d in by if d not in allowed]
    if bad:
        raise ValueError(f"cannot group by {', '.join(bad)} (choose among {', '.join(allowed)})")
    return by


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


# --------------------------------------------------------------------------- allocation (pods and nodes)

ALLOCATION_DIMENSIONS = ("cluster", "gpu_product", "node_pool", "node", "namespace", "framework", "workload")
ALLOCATION_SERIES_DIMENSIONS = ("cluster", "gpu_product", "node_pool", "namespace", "framework")
ALLOCATION_COLUMNS = ("allocatable", "schedulable", "unschedulable", "allocated", "idle", "pending", "requested")
# GPUs of the Bound pods on nodes no node record has (allocation.sql): apart from allocated and idle;
# an item has it after allocated
UNKNOWN_NODE = "unknown_node_allocated"
_ITEM_COLUMNS = (*ALLOCATION_COLUMNS[:4], UNKNOWN_NODE, *ALLOCATION_COLUMNS[4:])
WAIT_DIMENSIONS = ("cluster", "namespace", "framework", "workload")


def _group(row: dict, by) -> dict:
    item = {d: row[d] for d in by if d != "workload"}
    if "workload" in by:
        item["workload"] = None if row["kind"] is None else f"{row['kind']}/{row['name']}"
        item["uid"] = row["uid"]
    return item


def allocation_item(row: dict, by) -> dict:
    """A row of ``allocation``: the group, its nodes, and the GPUs allocatable, schedulable, unschedulable,
    allocated, idle (None for pod-side groups), pending and requested, with the pods bound and pending;
    and the GPUs allocated on unknown nodes (pods bound to a node no node record has), kept apart."""
    item = _group(row, by)
    item["nodes"] = row["nodes"]
    for c in _ITEM_COLUMNS:
        item[f"{c}_gpus"] = number(row[c]) if row[c] is not None else None
    item.update(bound_pods=row["bound_pods"], pending_pods=row["pending_pods"], workloads=row["workloads"])
    return item


def allocation_series_item(row: dict, by, step: str) -> dict:
    """A row of ``allocation_series``: one step of one group, averages and peaks."""
    item = {"start": jsonable(row["step_start"]), "end": jsonable(row["step_end"]), "step": step}
    item.update({d: row[d] for d in by})
    for c in ("allocatable", "allocated", UNKNOWN_NODE, "idle", "pending"):
        item[f"avg_{c}_gpus"] = None if row[f"avg_{c}"] is None else number(row[f"avg_{c}"])
    for c in ("allocatable", "allocated", "pending"):
        item[f"peak_{c}_gpus"] = number(row[f"peak_{c}"])
    return item


def wait_item(row: dict, by) -> dict:
    """A row of ``queue_waits``: the group (a workload: with its created, ready_at and status), how many
    workloads and how many of them wait, and the p50 / p90 / max of their waits in seconds."""
    item = _group(row, by)
    if "workload" in by:
        item.update(cluster=row["cluster"], namespace=row["namespace"], framework=row["framework"],
                    status=row["status"], created=jsonable(row["created"]), ready_at=jsonable(row["ready_at"]))
    item.update(workloads=row["workloads"], waiting=row["waiting"], p50_wait_s=number(row["p50_wait_s"]),
                p90_wait_s=number(row["p90_wait_s"]), max_wait_s=number(row["max_wait_s"]))
    return item


def allocation_report(conn, *, at=None, since=None, until=None, step: str = "1h", by=("cluster",),
                      **filters) -> list[dict]:
    """GPUs of the nodes and the pods, as ``workloadmap capacity --allocation -o json`` gives them: now or at
    `at` per group of ALLOCATION_DIMENSIONS (``allocation``), or per step of `step` over [since, until)
    per group of ALLOCATION_SERIES_DIMENSIONS (``allocation_series``; `until` defaults to the end of the
    history).  Filters: clusters, namespaces, frameworks, node_pools, gpu_products (lists or None).
    Raises as ``capacity_report`` does."""
    step_delta = parse_step(step)
    since, until = resolve_window(conn, at=at, since=since, until=until)
    if since is None:
        return allocation(conn, at=at, by=by, **filters)
    return allocation_series(conn, since, until, step_delta, step_name=step, by=by, **filters)


def allocation(conn, *, at=None, by=("cluster",), **filters) -> list[dict]:
    """GPUs allocatable, schedulable, allocated, idle, pending and requested now (or `at`), per group of
    ALLOCATION_DIMENSIONS (``queries/allocation.sql``); filters: clusters, namespaces, frameworks,
    node_pools, gpu_products (lists or None)."""
    by = _dimensions(by, ALLOCATION_DIMENSIONS)
    rows = run_query(conn, "allocation", at=at, by=by or None, **filters).dicts()
    return [allocation_item(r, by) for r in rows]


def allocation_series(conn, since, until, step, *, step_name: str, by=("cluster",), **filters) -> list[dict]:
    """Per step of `step` over [since, until): average and peak GPUs allocatable, allocated, idle and pending
    per group of ALLOCATION_SERIES_DIMENSIONS (``queries/allocation_series.sql``)."""
    by = _dimensions(by, ALLOCATION_SERIES_DIMENSIONS)
    rows = run_query(conn, "allocation_series", since=since, until=until, step=step, by=by or None,
                     **filters).dicts()
    return [allocation_series_item(r, by, step_name) for r in rows]


def queue_waits(conn, *, by=("namespace", "framework"), waiting: bool = False, since=None, until=None, as_of=None,
                **filters) -> list[dict]:
    """Queue waits per group of WAIT_DIMENSIONS (p50, p90, max; `workload`: one row each), or only the
    workloads waiting at `as_of` (default now) with `waiting` (``queries/queue_waits.sql``)."""
    by = _dimensions(by, WAIT_DIMENSIONS)
    rows = run_query(conn, "queue_waits", by=by or None, waiting=waiting, since=since, until=until, as_of=as_of,
                     **filters).dicts()
    return [wait_item(r, by) for r in rows]
