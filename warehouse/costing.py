"""Historical cost reports: resource-hours from status intervals, times the prices of a pricing file.

Why from status intervals: an interval is a stretch of time a workload spent
in one status with one demand, so resource-hours are exact sums (demand x the
interval's length) instead of samples.  The named query
``queries/cost_usage.sql`` clips every interval to the window (one that
crosses an edge counts only its part inside) and splits it at period
boundaries; this module prices the hours per cluster and GPU resource name
(``pricing.py``) and adds them up to the groups asked for.

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

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from workloadmap.warehouse.pricing import Pricing
from workloadmap.warehouse.querying import run_query

CONSUMING = ("Running", "Degraded")
STARTING = ("Initializing", "Resuming")
DIMENSIONS = ("cluster", "namespace", "framework", "workload")
UNSPECIFIED_GPU = "unspecified"  # GPUs of a record that named no GPU resource (see cost_usage.sql)


def consuming_statuses(include_initializing: bool = False) -> tuple[str, ...]:
    """The statuses whose intervals are billed (the rule in the module docstring)."""
    return CONSUMING + STARTING if include_initializing else CONSUMING


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


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
    columns: tuple[str, ...]  # the dimensions the rows carry (workload brings cluster, namespace, framework)
    statuses: tuple[str, ...]
    currency: str | None  # None: no pricing file
    rows: list[CostRow]
    unpriced: dict[tuple[str, str], float]  # (cluster, GPU resource) -> GPU-hours nothing priced

    def totals(self) -> CostRow:
        total = CostRow(self.since, self.until)
        for row in self.rows:
            _add(total, row)
        return total


def _add(into: CostRow, row: CostRow) -> None:
    into.gpu_hours += row.gpu_hours
    for resource, hours in row.gpu_hours_by_resource.items():
        into.gpu_hours_by_resource[resource] = into.gpu_hours_by_resource.get(resource, 0.0) + hours
    into.cpu_core_hours += row.cpu_core_hours
    into.memory_gib_hours += row.memory_gib_hours
    for name in ("gpu_cost", "cpu_cost", "memory_cost"):
        value = getattr(row, name)
        if value is not None:
            setattr(into, name, (getattr(into, name) or 0.0) + value)


def row_columns(by) -> tuple[str, ...]:
    """The dimensions a row carries: those asked for, in their order; a workload brings its cluster,
    namespace and framework (just before it, unless asked for already)."""
    out: list[str] = []
    for d in by:
        implied = ("cluster", "namespace", "framework", "workload") if d == "workload" else (d,)
        out.extend(x for x in implied if x not in out and (x == d or x not in by))
    return tuple(out)


def cost_report(conn, since: datetime, until: datetime, *, by=("cluster",), step: timedelta | None = None,
                statuses=CONSUMING, pricing: Pricing | None = None, as_of: datetime | None = None,
                clusters=None, namespaces=None, frameworks=None) -> CostReport:
    """Resource-hours and cost per period and group over [since, until).

    `by`: dimensions among DIMENSIONS (order kept: the first one stacks the
    HTML chart); `step`: period length (None = one period, the window);
    `as_of`: where open intervals end (default now); filters are lists or
    None.  Without `pricing` the rows carry hours and no cost.
    """
    by = tuple(by)
    bad = [d for d in by if d not in DIMENSIONS]
    if bad:
        raise ValueError(f"cannot group by {', '.join(bad)} (choose among {', '.join(DIMENSIONS)})")
    since, until = _utc(since), _utc(until)
    if until <= since:
        raise ValueError(f"the window is empty: until ({until.isoformat()}) is not after since ({since.isoformat()})")
    if step is not None and step <= timedelta(0):
        raise ValueError("step must be positive")
    columns = row_columns(by)
    result = run_query(
        conn, "cost_usage", since=since, until=until, as_of=None if as_of is None else _utc(as_of), step=step,
        statuses=list(statuses), by=[d for d in by if d != "cluster"],
        clusters=None if clusters is None else list(clusters),
        namespaces=None if namespaces is None else list(namespaces),
        frameworks=None if frameworks is None else list(frameworks))
    rows: dict[tuple, CostRow] = {}
    unpriced: dict[tuple[str, str], float] = {}
    gpu_rates: dict[tuple[str, str], float | None] = {}
    starts: dict = {}
    priced = pricing is not None
    with_workload = "workload" in columns
    for period, cluster, namespace, framework, uid, kind, name, resource, gpu_h, cpu_h, mem_h in result.rows:
        start = starts.get(period)
        if start is None:
            start = starts[period] = _utc(period)
        values = {"cluster": cluster, "namespace": namespace, "framework": framework,
                  "workload": None if uid is None else f"{kind}/{name}"}
        key = (start, *(values[d] for d in columns), *((uid, cluster) if with_workload else ()))
        row = rows.get(key)
        if row is None:
            end = until if step is None else min(start + step, until)
            row = rows[key] = CostRow(start, end, **{d: values[d] for d in columns})
            row.uid = uid if with_workload else None
            if priced:
                row.gpu_cost = row.cpu_cost = row.memory_cost = 0.0
        if resource is None:  # the CPU and memory row of its group
            row.cpu_core_hours += cpu_h
            row.memory_gib_hours += mem_h
            if priced:
                row.cpu_cost += (pricing.cpu_price(cluster) or 0.0) * cpu_h
                row.memory_cost += (pricing.memory_price(cluster) or 0.0) * mem_h
            continue
        row.gpu_hours += gpu_h
        row.gpu_hours_by_resource[resource] = row.gpu_hours_by_resource.get(resource, 0.0) + gpu_h
        if priced:
            if (cluster, resource) not in gpu_rates:
                gpu_rates[(cluster, resource)] = pricing.gpu_price(cluster, resource)
            rate = gpu_rates[(cluster, resource)]
            if rate is None:
                unpriced[(cluster, resource)] = unpriced.get((cluster, resource), 0.0) + gpu_h
            else:
                row.gpu_cost += rate * gpu_h
    ordered = sorted(rows.values(), key=lambda row: (
        row.period_start, -(row.cost if row.cost is not None else row.gpu_hours), -row.gpu_hours,
        tuple(str(getattr(row, d) or "") for d in columns)))
    return CostReport(since, until, step, by, columns, tuple(statuses),
                      None if pricing is None else pricing.currency, ordered, unpriced)


def periods(report: CostReport) -> list[tuple[datetime, datetime]]:
    """Every period of the window (also those with no usage), in order."""
    if report.step is None:
        return [(report.since, report.until)]
    out, start = [], report.since
    while start < report.until:
        out.append((start, min(start + report.step, report.until)))
        start += report.step
    return out
