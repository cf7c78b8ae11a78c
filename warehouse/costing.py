"""Historical cost reports: resource-hours from status intervals, priced per cluster and GPU resource.

Why from status intervals: an interval is a stretch of time a workload spent
in one status with one demand, so resource-hours are exact sums (demand x the
interval's length) instead of samples.  The named query
``queries/cost_report.sql`` does the whole report in DuckDB: it clips every
interval to the window (one that crosses an edge counts only its part
inside), splits it at period boundaries without expanding it per period,
prices the hours with the rules of a pricing file (``pricing.py``) and groups
them; the result comes back as an Arrow table (``CostReport.table``), and the
``CostRow`` objects are made from it only when someone reads ``rows``.  A
group with a workload has a plan of its own, ``queries/cost_by_workload.sql``
(a year of daily rows is millions of them; a workload's intervals never
overlap, so most rows need no aggregation): the same rows, whose workload
columns come back once per workload and become Arrow dictionary columns here.
By UTC day (a window from midnight, a step of a day) and billing the statuses
the writer rolls up, those rows are read from the writer's daily rollup
instead (``rolling.py``, ``queries/cost_by_workload_daily.sql``); by workload
alone, billing Running and Degraded, with the pricing the writer was given,
the finished days' rows are read as the writer keeps them (``keep_costs``).

Which statuses consume (the billing rule):

- **Running** and **Degraded** always: the pods are scheduled and hold their
  GPUs (a Degraded workload is unhealthy, not released);
- **Initializing** and **Resuming** only with ``include_initializing``: the
  workload is acquiring its resources (pods pending, images pulling), which
  some sites bill and others do not;
- never **Suspended**, **Suspending**, **Completed**, **Failed**, **Deleted**
  or **Undefined**: a suspended (queued) workload holds nothing, a finished
  one's spec still *requests* its GPUs but its pods are gone, a deleted one
  holds nothing, and an undefined status is not evidence of consumption.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta, timezone
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from .pricing import Pricing
from .querying import run_query_arrow

CONSUMING = ("Running", "Degraded")
STARTING = ("Initializing", "Resuming")
DIMENSIONS = ("cluster", "namespace", "framework", "workload")
REQUESTED, ALLOCATED = "requested", "allocated"
BASES = (ALLOCATED, REQUESTED)  # what a cost report bills (cost_report's `basis`)
# What a cost report bills unless told (the library, the CLI and the served reads alike): what the pods
# hold, because that is what a site pays for; a spec's request is what it asked for, not what it got.
DEFAULT_BASIS = ALLOCATED
UNSPECIFIED_GPU = "unspecified"  # GPUs of a record that named no GPU resource (see cost_report.sql)


def consuming_statuses(include_initializing: bool = False) -> tuple[str, ...]:
    """The statuses whose intervals are billed (the rule in the module docstring)."""
    return CONSUMING + STARTING if include_initializing else CONSUMING


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _window(since: datetime, until: datetime, step: timedelta | None) -> tuple[datetime, datetime]:
    """A report's window in UTC, or ValueError when it is empty or its step is not positive."""
    since, until = _utc(since), _utc(until)
    if until <= since:
        raise ValueError(f"the window is empty: until ({until.isoformat()}) is not after since ({since.isoformat()})")
    if step is not None and step <= timedelta(0):
        raise ValueError("step must be positive")
    return since, until


@dataclass
class CostRow:
    """Resource-hours and cost of one group in one period."""

    period_start: datetime
    period_end: datetime
    cluster: str | None = None
    namespace: str | None = None
    framework: str | None = None
    workload: str | None = None  # kind/name
    uid: str | None = None
    role: str | None = None  # by role: the pods' component ('-' for pods of no component)
    gpu_hours: float = 0.0
    gpu_hours_by_resource: dict[str, float] = field(default_factory=dict)
    cpu_core_hours: float = 0.0
    memory_gib_hours: float = 0.0
    gpu_cost: float | None = None  # None: no pricing file
    cpu_cost: float | None = None
    memory_cost: float | None = None

    @property
    def cost(self) -> float | None:
        parts = [c for c in (self.gpu_cost, self.cpu_cost, self.memory_cost) if c is not None]
        return sum(parts) if parts else None


@dataclass
class CostReport:
    since: datetime
    until: datetime
    step: timedelta | None
    by: tuple[str, ...]  # the dimensions asked for
    columns: tuple[str, ...]  # the dimensions the rows carry (workload brings cluster, namespace, framework;
    #                           role brings workload)
    statuses: tuple[str, ...]
    currency: str | None  # None: no pricing file
    table: pa.Table  # the report's rows in its order (cost_report.sql's; by workload: _workload_rows)
    basis: str  # what it bills (BASES)

    @cached_property
    def rows(self) -> list[CostRow]:
        """The table's rows as CostRow objects (made on first use: a yearly report by workload has millions)."""
        with_workload = "workload" in self.columns
        out = []
        for r in self.table.to_pylist():
            workload = None if r["uid"] is None else f"{r['kind']}/{r['name']}"
            row = CostRow(_utc(r["period_start"]), _utc(r["period_end"]),
                          **{d: workload if d == "workload" else r[d] for d in self.columns})
            row.uid = r["uid"] if with_workload else None
            row.gpu_hours = r["gpu_hours"]
            row.gpu_hours_by_resource = dict(r["gpu_hours_by_resource"])
            row.cpu_core_hours, row.memory_gib_hours = r["cpu_core_hours"], r["memory_gib_hours"]
            row.gpu_cost, row.cpu_cost, row.memory_cost = r["gpu_cost"], r["cpu_cost"], r["memory_cost"]
            out.append(row)
        return out

    @cached_property
    def unpriced(self) -> dict[tuple[str, str], float]:
        """(cluster, GPU resource) -> GPU-hours that no rule of the pricing file priced."""
        column = self.table.column("unpriced")
        out: dict[tuple[str, str], float] = {}
        for entries in pc.drop_null(column).to_pylist():
            for e in entries:
                key = (e["cluster"], e["resource"])
                out[key] = out.get(key, 0.0) + e["hours"]
        return out

    def totals(self) -> CostRow:
        """The whole window: every row added up (in Arrow, without making the rows)."""
        total = CostRow(self.since, self.until)
        t = self.table
        total.gpu_hours = pc.sum(t.column("gpu_hours")).as_py() or 0.0
        total.cpu_core_hours = pc.sum(t.column("cpu_core_hours")).as_py() or 0.0
        total.memory_gib_hours = pc.sum(t.column("memory_gib_hours")).as_py() or 0.0
        if self.currency is not None:
            total.gpu_cost, total.cpu_cost, total.memory_cost = (
                pc.sum(t.column(c)).as_py() or 0.0 for c in ("gpu_cost", "cpu_cost", "memory_cost"))
        maps = t.column("gpu_hours_by_resource").chunks
        if maps:
            sums = pa.table({"resource": pa.concat_arrays([m.keys for m in maps]),
                             "hours": pa.concat_arrays([m.items for m in maps])}).group_by(
                "resource").aggregate([("hours", "sum")])
            total.gpu_hours_by_resource = dict(zip(sums.column("resource").to_pylist(),
                                                   sums.column("hours_sum").to_pylist()))
        return total


def pricing_params(pricing: Pricing | None) -> dict:
    """The pricing as the cost queries take it: $gpu_prices and $rates (NULL: hours only)."""
    return {"gpu_prices": None if pricing is None else pricing.gpu_rules(),
            "rates": None if pricing is None else pricing.rate_rows()}


def priced_with(pricing: Pricing | None) -> str:
    """What the writer's kept report rows were priced with (usage_rollup.priced_with): the prices
    themselves, not the file's name, so a report reads them only when it would price them the same."""
    return json.dumps(pricing_params(pricing), sort_keys=True, separators=(",", ":"))


def row_columns(by) -> tuple[str, ...]:
    """The dimensions a row carries: those asked for, in their order; a workload brings its cluster,
    namespace and framework, a role its workload (just before it, unless asked for already)."""
    out: list[str] = []
    for d in by:
        implied = {"workload": ("cluster", "namespace", "framework", "workload"),
                   "role": ("cluster", "namespace", "framework", "workload", "role")}.get(d, (d,))
        out.extend(x for x in implied if x not in out and (x == d or x not in by))
    return tuple(out)


def cost_report(conn, since: datetime, until: datetime, *, by=("cluster",), step: timedelta | None = None,
                statuses=CONSUMING, pricing: Pricing | None = None, as_of: datetime | None = None,
                clusters=None, namespaces=None, frameworks=None, basis: str = DEFAULT_BASIS) -> CostReport:
    """Resource-hours and cost per period and group over [since, until).

    `by`: dimensions among DIMENSIONS, and ``role`` with the allocated basis (a workload's rows per
    role: the pod intervals' component column, in the rows' `role`) (order kept: the first one stacks
    the HTML chart); `step`: period length (None = one period, the window);
    `as_of`: where open intervals end (default now); filters are lists or
    None.  Without `pricing` the rows carry hours and no cost.  `basis` (BASES, default DEFAULT_BASIS):
    bill what the pods hold while bound to a node (``allocated``: `statuses` do not apply;
    cost_report.sql says how), or what the workloads request while in `statuses` (``requested``).
    """
    if basis not in BASES:
        raise ValueError(f"basis {basis!r}: choose {' or '.join(BASES)}")
    by = tuple(by)
    roles = "role" in by
    if roles and basis != ALLOCATED:
        raise ValueError("by role needs the allocated basis (roles are the pods' components)")
    by = tuple(dict.fromkeys(by))
    known = DIMENSIONS + ("role",)
    bad = [d for d in by if d not in known]
    if bad:
        raise ValueError(f"cannot group by {', '.join(bad)} (choose among {', '.join(known)})")
    since, until = _window(since, until, step)
    columns = row_columns(by)
    by_workload = "workload" in columns
    query = "cost_report"
    if by_workload and basis == REQUESTED:  # by UTC day, billing the statuses the writer rolls up: from its daily rollup
        daily = (step == timedelta(days=1) and since == datetime.combine(since.date(), time(), timezone.utc)
                 and set(statuses) in (set(CONSUMING), set(CONSUMING + STARTING)))
        query = "cost_by_workload_daily" if daily else "cost_by_workload"
    table = run_query_arrow(
        conn, query, since=since, until=until,
        as_of=None if as_of is None else _utc(as_of), step=step, statuses=list(statuses),
        by=[c for c in columns if c != "role"],
        clusters=None if clusters is None else list(clusters),
        namespaces=None if namespaces is None else list(namespaces),
        frameworks=None if frameworks is None else list(frameworks),
        **pricing_params(pricing), **({"priced_with": priced_with(pricing)} if query == "cost_by_workload_daily" else {}),
        **({"basis": basis, "roles": roles} if query == "cost_report" else {}))
    if query != "cost_report":
        table = _workload_rows(table)
    return CostReport(since, until, step, by, columns, tuple(statuses),
                      None if pricing is None else pricing.currency, table, basis)


@dataclass
class IdleRow:
    """GPU-hours the nodes offered, the pods held and the rest (idle) in one period, group and GPU resource."""

    period_start: datetime
    period_end: datetime
    cluster: str | None
    node_pool: str | None
    resource: str
    allocatable_gpu_hours: float
    allocated_gpu_hours: float
    idle_gpu_hours: float
    unknown_node_gpu_hours: float  # held by pods on nodes no node record had then: not in allocated nor idle
    idle_cost: float | None  # None: no pricing file
    unpriced_hours: float | None  # idle hours no rule priced (None: no pricing file)


IDLE_DIMENSIONS = ("cluster", "node_pool")


def idle_report(conn, since: datetime, until: datetime, *, by=("cluster",), step: timedelta | None = None,
                pricing: Pricing | None = None, as_of: datetime | None = None, clusters=None) -> list[IdleRow]:
    """Allocatable, allocated and idle GPU-hours per period, group (IDLE_DIMENSIONS) and GPU resource over
    [since, until), and the idle cost with `pricing` (``queries/idle_cost.sql``)."""
    by = tuple(by)
    bad = [d for d in by if d not in IDLE_DIMENSIONS]
    if bad:
        raise ValueError(f"idle GPU-hours are by {' or '.join(IDLE_DIMENSIONS)}, not {', '.join(bad)}")
    since, until = _window(since, until, step)
    # whole UTC days: the closed pod intervals from the writer's daily_allocation (idle_cost.sql)
    rolled = (since == datetime.combine(since.date(), time(), timezone.utc)
              and until == datetime.combine(until.date(), time(), timezone.utc)
              and (step is None or (step >= timedelta(days=1) and step % timedelta(days=1) == timedelta(0))))
    table = run_query_arrow(conn, "idle_cost", since=since, until=until, step=step, by=list(by), rolled=rolled,
                            as_of=None if as_of is None else _utc(as_of),
                            clusters=None if clusters is None else list(clusters),
                            gpu_prices=pricing_params(pricing)["gpu_prices"])
    return [IdleRow(_utc(r.pop("period_start")), _utc(r.pop("period_end")), **r) for r in table.to_pylist()]


_GROUP_COLUMNS = ("cluster", "namespace", "framework", "uid", "kind", "name")
_HOURS_MAP = pa.map_(pa.string(), pa.float64())


def _workload_rows(result: pa.Table) -> pa.Table:
    """The report's table from the rows of cost_by_workload.sql: its report rows (in order) with their
    workload's columns as dictionary columns (one entry per workload, indexed by wid) and the map of
    GPU-hours per resource made from the row's one resource or its entries, without copying the rows."""
    n_workloads = result.column("period_start").null_count
    rows = result.slice(0, result.num_rows - n_workloads)
    groups = result.slice(result.num_rows - n_workloads)
    if rows.column("period_start").null_count or groups.column("period_start").null_count != n_workloads:
        raise RuntimeError("cost_by_workload.sql: the workload rows are not after the report rows")
    wid = rows.column("wid")
    if not pc.all(pc.equal(groups.column("wid"), pa.array(range(n_workloads), pa.int32()))).as_py():
        # wids with gaps (the daily query numbers the workloads as the rollup does; a filter leaves gaps):
        # the dictionary's entries in wid order, each row's index its wid's place there
        groups = groups.take(pc.sort_indices(groups.column("wid")))
        wid = pc.index_in(wid, value_set=groups.column("wid")).cast(pa.int32())
    out = {"period_start": rows.column("period_start"), "period_end": rows.column("period_end")}
    for name in _GROUP_COLUMNS:
        values = groups.column(name).combine_chunks().cast(pa.string())
        out[name] = pa.chunked_array([pa.DictionaryArray.from_arrays(c, values) for c in wid.chunks],
                                     pa.dictionary(pa.int32(), pa.string()))
    maps = []
    for resource, hours, entries in zip(*(rows.column(c).chunks for c in ("resource", "gpu_hours", "entries"))):
        one = resource.is_valid()
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(pc.cast(one, pa.int32()))])
        if entries.null_count == len(entries):  # (nearly always) each map: its row's one resource, or empty
            if resource.null_count:
                resource, hours = resource.filter(one), hours.filter(one)
            maps.append(pa.MapArray.from_arrays(offsets, resource, hours))
            continue
        single = pa.ListArray.from_arrays(offsets, pa.StructArray.from_arrays(
            [resource.filter(one), hours.filter(one)], ["key", "value"]))
        merged = pc.if_else(entries.is_valid(), entries, single)
        maps.append(pa.MapArray.from_arrays(merged.offsets, merged.values.field("key"), merged.values.field("value")))
    out["gpu_hours"] = rows.column("gpu_hours")
    out["gpu_hours_by_resource"] = pa.chunked_array(maps, _HOURS_MAP)
    for name in ("cpu_core_hours", "memory_gib_hours", "gpu_cost", "cpu_cost", "memory_cost", "cost", "unpriced"):
        out[name] = rows.column(name)
    return pa.table(out)


def periods(report: CostReport) -> list[tuple[datetime, datetime]]:
    """Every period of the window (also those with no usage), in order."""
    if report.step is None:
        return [(report.since, report.until)]
    out, start = [], report.since
    while start < report.until:
        out.append((start, min(start + report.step, report.until)))
        start += report.step
    return out
