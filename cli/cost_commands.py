"""`workloadmap cost`: GPU-hours, CPU core-hours, memory GiB-hours and their cost over a window.

The numbers come from the warehouse (``warehouse/costing.py`` over the named
query ``cost_report``); this module reads the options, opens the warehouse
read-only and prints the report as a table, JSON, CSV or a self-contained
HTML file with charts (``cost_html.py``).
"""

from __future__ import annotations

import contextlib
import sys
from datetime import datetime, timedelta, timezone

import click
from rich.table import Table

from workloadmap.warehouse import costing
from workloadmap.warehouse.pricing import PricingError, load_pricing
from workloadmap.warehouse.querying import EmptyHistory, QueryError, history_end
from workloadmap.warehouse.values import iso

from . import cost_html
from .options import FilePath, Instant, connect, duckdb_option, invocation_now, split_values
from .outputs import emit, fail, output_option

STEPS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}
LABELS = {"cluster": "Cluster", "namespace": "Namespace", "framework": "Framework", "workload": "Workload",
          "role": "Role", "node_pool": "Node pool"}


def _short(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def item_of(row: costing.CostRow, report: costing.CostReport) -> dict:
    """The JSON form of a row (also the CSV columns, without gpuHoursByResource)."""
    item = {"periodStart": iso(row.period_start), "periodEnd": iso(row.period_end)}
    for d in report.columns:
        item[d] = getattr(row, d)
    if "workload" in report.columns:
        item["uid"] = row.uid
    item.update({
        "gpuHours": _r(row.gpu_hours), "cpuCoreHours": _r(row.cpu_core_hours),
        "memoryGiBHours": _r(row.memory_gib_hours),
        "gpuHoursByResource": {k: _r(v) for k, v in sorted(row.gpu_hours_by_resource.items())},
    })
    if report.currency is not None:
        item.update({"gpuCost": _r(row.gpu_cost, 2), "cpuCost": _r(row.cpu_cost, 2),
                     "memoryCost": _r(row.memory_cost, 2), "cost": _r(row.cost, 2), "currency": report.currency})
    return item


def _billed(report: costing.CostReport) -> str:
    if report.basis == costing.ALLOCATED:
        return "billed: GPUs, CPU and memory allocated (held by pods bound to nodes)"
    return f"billed: requested while {', '.join(report.statuses)}"


def _table(report: costing.CostReport):
    def build(items):
        step = report.step is not None
        t = Table(title=f"{_short(report.since)} → {_short(report.until)} UTC", title_justify="left",
                  caption=_billed(report), caption_justify="left")
        if step:
            t.add_column("Period")
        for d in report.columns:
            t.add_column(LABELS[d])
        for name in ("GPU-h", "CPU core-h", "Mem GiB-h"):
            t.add_column(name, justify="right")
        if report.currency:
            t.add_column(f"Cost {report.currency}", justify="right")
        for row in report.rows:
            cells = [cost_html.period_label(row.period_start, row.period_end)] if step else []
            cells += [str(getattr(row, d) or "-") for d in report.columns]
            cells += [f"{row.gpu_hours:,.1f}", f"{row.cpu_core_hours:,.1f}", f"{row.memory_gib_hours:,.1f}"]
            if report.currency:
                cells.append(f"{row.cost:,.2f}")
            t.add_row(*cells)
        total = report.totals()
        if report.rows:
            t.add_section()
            lead = (1 if step else 0) + len(report.columns)
            cells = ["total"] + [""] * (lead - 1)
            cells += [f"{total.gpu_hours:,.1f}", f"{total.cpu_core_hours:,.1f}", f"{total.memory_gib_hours:,.1f}"]
            if report.currency:
                cells.append(f"{total.cost:,.2f}")
            t.add_row(*cells)
        return t
    return build


CSV_COLUMNS = ("periodStart", "periodEnd", "cluster", "namespace", "framework", "workload", "uid", "role",
               "gpuHours", "cpuCoreHours", "memoryGiBHours", "gpuCost", "cpuCost", "memoryCost", "cost", "currency")


def csv_columns(report: costing.CostReport) -> list[str]:
    """The CSV header: the JSON keys of a row (whatever the rows), without the per-resource map."""
    keep = set(report.columns) | {"periodStart", "periodEnd", "gpuHours", "cpuCoreHours", "memoryGiBHours"}
    if "workload" in report.columns:
        keep.add("uid")
    if report.currency is not None:
        keep |= {"gpuCost", "cpuCost", "memoryCost", "cost", "currency"}
    return [c for c in CSV_COLUMNS if c in keep]


def idle_item(row: costing.IdleRow) -> dict:
    item = {"periodStart": iso(row.period_start), "periodEnd": iso(row.period_end), "cluster": row.cluster,
            "nodePool": row.node_pool, "resource": row.resource,
            "allocatableGpuHours": _r(row.allocatable_gpu_hours), "allocatedGpuHours": _r(row.allocated_gpu_hours),
            "idleGpuHours": _r(row.idle_gpu_hours), "unknownNodeGpuHours": _r(row.unknown_node_gpu_hours)}
    if row.idle_cost is not None:
        item.update(idleCost=_r(row.idle_cost, 2), unpricedIdleGpuHours=_r(row.unpriced_hours))
    return item


def _idle_table(rows: list[costing.IdleRow], since, until, by, currency):
    def build(items):
        t = Table(title=f"Idle GPUs {_short(since)} → {_short(until)} UTC", title_justify="left",
                  caption="idle = allocatable - allocated GPU-hours", caption_justify="left")
        step = len({r.period_start for r in rows}) > 1
        if step:
            t.add_column("Period")
        for d in by:
            t.add_column(LABELS[d])
        t.add_column("GPU resource")
        # pods bound to nodes no node record had: a column only when there are some
        unknown = any(r.unknown_node_gpu_hours for r in rows)
        for name in ("Allocatable GPU-h", "Allocated GPU-h", "Idle GPU-h", "Idle %"):
            t.add_column(name, justify="right")
        if unknown:
            t.add_column("On unknown nodes GPU-h", justify="right")
        if currency:
            t.add_column(f"Idle cost {currency}", justify="right")
        for r in rows:
            cells = [cost_html.period_label(r.period_start, r.period_end)] if step else []
            cells += [str(getattr(r, d) or "-") for d in by] + [r.resource]
            share = r.idle_gpu_hours / r.allocatable_gpu_hours * 100 if r.allocatable_gpu_hours else 0.0
            cells += [f"{r.allocatable_gpu_hours:,.1f}", f"{r.allocated_gpu_hours:,.1f}", f"{r.idle_gpu_hours:,.1f}",
                      f"{share:,.0f}%"] + ([f"{r.unknown_node_gpu_hours:,.1f}"] if unknown else [])
            if currency:
                cells.append("-" if r.idle_cost is None else f"{r.idle_cost:,.2f}")
            t.add_row(*cells)
        return t
    return build


# --------------------------------------------------------------------------- HTML


def html_report(conn, report: costing.CostReport, *, options: dict, pricing_source: str | None) -> str:
    """The HTML document: the charts need their own cuts of the same window (a series, workloads, clusters)."""
    common = dict(statuses=report.statuses, pricing=options["pricing"], as_of=options["as_of"],
                  clusters=options["clusters"], namespaces=options["namespaces"], frameworks=options["frameworks"],
                  basis=report.basis)
    span = report.until - report.since
    step = report.step or (STEPS["day"] if span >= timedelta(days=2) else STEPS["hour"])
    first = report.by[0] if report.by else "cluster"
    series_report = costing.cost_report(conn, report.since, report.until, by=(first,), step=step, **common)
    workloads = costing.cost_report(conn, report.since, report.until, by=("workload",), **common)
    clusters = costing.cost_report(conn, report.since, report.until, by=("cluster",), **common)
    priced = report.currency is not None

    periods = costing.periods(series_report)
    index = {p[0]: i for i, p in enumerate(periods)}
    per_value: dict[str, list[float]] = {}
    for row in series_report.rows:
        # a role is one of its workload's: kind/name/role (the same component name is many workloads')
        value = f"{row.workload}/{row.role}" if first == "role" else getattr(row, first)
        values = per_value.setdefault(str(value or "-"), [0.0] * len(periods))
        values[index[row.period_start]] += row.gpu_hours
    ranked = sorted(per_value.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    series = ranked[:cost_html.MAX_SERIES]
    if len(ranked) > cost_html.MAX_SERIES:
        rest = [sum(vs[i] for _, vs in ranked[cost_html.MAX_SERIES:]) for i in range(len(periods))]
        series.append(("other", rest))
    time_chart = cost_html.stacked_bars(periods, series, unit="GPU-hours")

    top = sorted(workloads.rows, key=lambda r: (-r.gpu_hours, r.cluster or "", r.workload or ""))
    top_items = [(f"{r.cluster} · {r.namespace}/{r.workload}", r.gpu_hours)
                 for r in top[:cost_html.TOP_WORKLOADS] if r.gpu_hours > 0]
    top_chart = cost_html.horizontal_bars("chart-workloads", top_items, unit="GPU-hours")

    by_cluster = sorted(((r.cluster, r.cost if priced else r.gpu_hours) for r in clusters.rows),
                        key=lambda kv: (-kv[1], kv[0]))
    cluster_unit = f"{report.currency}" if priced else "GPU-hours"
    cluster_chart = cost_html.horizontal_bars("chart-clusters", by_cluster, unit=cluster_unit)

    more_charts = _allocation_charts(conn, report, step, periods, options)
    total = report.totals()
    cards = [("GPU-hours", f"{total.gpu_hours:,.1f}"), ("CPU core-hours", f"{total.cpu_core_hours:,.1f}"),
             ("Memory GiB-hours", f"{total.memory_gib_hours:,.1f}")]
    if priced:
        cards.insert(0, (f"Cost ({report.currency})", f"{total.cost:,.2f}"))
    headers = (["Period"] if report.step else []) + [LABELS[d] for d in report.columns] + \
        ["GPU-hours", "CPU core-hours", "Memory GiB-hours"] + ([f"Cost ({report.currency})"] if priced else [])
    numeric_from = len(headers) - (4 if priced else 3)
    rows = []
    for r in report.rows:
        rows.append(([cost_html.period_label(r.period_start, r.period_end)] if report.step else [])
                    + [getattr(r, d) or "-" for d in report.columns]
                    + [cost_html.number(r.gpu_hours), cost_html.number(r.cpu_core_hours),
                       cost_html.number(r.memory_gib_hours)]
                    + ([cost_html.number(r.cost, 2)] if priced else []))
    footer = ["total"] + [""] * (numeric_from - 1) + [
        cost_html.number(total.gpu_hours), cost_html.number(total.cpu_core_hours),
        cost_html.number(total.memory_gib_hours)] + ([cost_html.number(total.cost, 2)] if priced else [])
    by_text = ", ".join(report.by) or "cluster"
    tables = [(f"By {by_text}" + (f", per {options['step_name']}" if report.step else ""),
               cost_html.table(headers, rows, numeric_from=numeric_from, table_id="report", footer=footer))]
    resources = sorted(total.gpu_hours_by_resource.items(), key=lambda kv: -kv[1])
    tables.append(("GPU-hours by GPU resource", cost_html.table(
        ["GPU resource", "GPU-hours"], [[k, cost_html.number(v)] for k, v in resources],
        numeric_from=1, table_id="resources")))
    notes = ["Not costed (no price for these GPU resources): " + "; ".join(
        f"{c} {r}: {h:,.1f} GPU-hours" for (c, r), h in sorted(report.unpriced.items()))] if report.unpriced else []
    meta = [f"Window {iso(report.since)} → {iso(report.until)} (UTC); consuming statuses: "
            f"{', '.join(report.statuses)}",
            f"Prices: {pricing_source} ({report.currency})" if priced else "No pricing file: hours only",
            f"Generated {iso(datetime.now(timezone.utc).replace(microsecond=0))} by workloadmap cost"]
    return cost_html.render(
        title="GPU cost report" if priced else "GPU usage report", meta=meta, cards=cards,
        time_chart=time_chart, time_title=f"GPU-hours per {'day' if step == STEPS['day'] else 'hour'} by {first}",
        top_chart=top_chart, top_title=f"Top {cost_html.TOP_WORKLOADS} workloads by GPU-hours",
        cluster_chart=cluster_chart, cluster_title="Cost by cluster" if priced else "GPU-hours by cluster",
        tables=tables, notes=notes, more_charts=more_charts)


def _allocation_charts(conn, report: costing.CostReport, step, periods, options) -> list[tuple[str, str]]:
    """Allocation against capacity per period (allocated and idle GPU-hours stacked: the bar is what the
    nodes had) and idle GPU-hours (or cost) by cluster; none when the history has no nodes."""
    rows = costing.idle_report(conn, report.since, report.until, by=("cluster",), step=step,
                               pricing=options["pricing"], as_of=options["as_of"], clusters=options["clusters"])
    if not rows:
        return []
    index = {p[0]: i for i, p in enumerate(periods)}
    allocated, idle = [0.0] * len(periods), [0.0] * len(periods)
    by_cluster: dict[str, float] = {}
    priced = report.currency is not None
    for r in rows:
        i = index.get(r.period_start)
        if i is not None:
            allocated[i] += r.allocated_gpu_hours
            idle[i] += max(r.idle_gpu_hours, 0.0)
        value = (r.idle_cost or 0.0) if priced else r.idle_gpu_hours
        by_cluster[r.cluster or "-"] = by_cluster.get(r.cluster or "-", 0.0) + value
    unit = "day" if step == STEPS["day"] else "hour"
    return [
        (f"GPU-hours allocated and idle per {unit} (the bar: allocatable)",
         cost_html.stacked_bars(periods, [("allocated", allocated), ("idle", idle)], unit="GPU-hours",
                                chart_id="chart-allocation")),
        ("Idle cost by cluster" if priced else "Idle GPU-hours by cluster",
         cost_html.horizontal_bars("chart-idle", sorted(by_cluster.items(), key=lambda kv: (-kv[1], kv[0])),
                                   unit=report.currency if priced else "GPU-hours")),
    ]


# --------------------------------------------------------------------------- the command


@click.command("cost")
@duckdb_option
@click.option("--since", required=True, type=Instant(), metavar="TIME",
              help="Window start: 2026-11-01, 2026-11-01T06:00:00Z, now, or 7d / 12h (ago).")
@click.option("--until", type=Instant(), metavar="TIME",
              help="Window end (exclusive), same forms; default: the end of the history (its last state).")
@click.option("--by", "by", multiple=True, metavar="DIMS",
              help="Group by cluster, namespace, framework, workload, role (a workload's component; allocated "
                   "basis) (comma-separated or repeated; default cluster); with --idle: cluster, node_pool. "
                   "The first one stacks the HTML time chart.")
@click.option("--step", type=click.Choice(sorted(STEPS)), default=None,
              help="One row per period (periods start at --since); default: the whole window.")
@click.option("--pricing", "pricing_path", envvar="WORKLOADMAP_PRICING", type=FilePath(dir_okay=False),
              help="Pricing file (YAML, see warehouse/pricing.example.yaml); without it, hours only.")
@click.option("--basis", type=click.Choice(costing.BASES), default=costing.DEFAULT_BASIS, show_default=True,
              help="Bill what pods hold while bound to nodes (allocated), or what workloads request while "
                   "Running/Degraded (requested).")
@click.option("--include-initializing", is_flag=True,
              help="--basis requested: also bill Initializing and Resuming (default: Running and Degraded only).")
@click.option("--idle", is_flag=True,
              help="Instead: allocatable, allocated and idle GPU-hours and the idle cost, by cluster or node_pool.")
@click.option("--cluster", "clusters", multiple=True, help="Only these clusters (repeatable, or comma-separated).")
@click.option("-n", "--namespace", "namespaces", multiple=True, help="Only these namespaces.")
@click.option("--framework", "frameworks", multiple=True,
              help="Only these frameworks (as in the records: JobSet, Ray, ...).")
@output_option("table", "json", "csv", "html", default="table")
@click.option("--out", "out_path", type=FilePath(dir_okay=False),
              help="Write the output to this file instead of stdout (meant for -o html).")
def cost(duckdb_path, since, until, by, step, pricing_path, basis, include_initializing, idle, clusters, namespaces,
         frameworks, output, out_path):
    """GPU-hours, CPU core-hours and memory GiB-hours consumed over a window, and their cost.

    By default what pods held while bound to a node (allocated), attributed to
    their workload (and role: --by role); with --basis requested, what workloads
    requested while Running or Degraded (and Initializing/Resuming with
    --include-initializing).  Each interval counts only its part inside the
    window; an open one lasts until now.  --idle: the GPU-hours the nodes had
    and no pod held, and their cost.
    """
    now = invocation_now()
    t0, t1 = since, until
    dims = split_values(by) or ["cluster"]
    allowed = costing.IDLE_DIMENSIONS if idle else costing.DIMENSIONS + (("role",) if basis == costing.ALLOCATED else ())
    unknown = [d for d in dims if d not in allowed]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: choose among {', '.join(allowed)}", param_hint="--by")
    if include_initializing and basis == costing.ALLOCATED and not idle:
        raise click.UsageError("--include-initializing bills requests by status: give --basis requested")
    try:
        pricing = load_pricing(pricing_path) if pricing_path else None
    except PricingError as exc:
        fail(exc)
    options = dict(pricing=pricing, as_of=now, clusters=split_values(clusters),
                   namespaces=split_values(namespaces), frameworks=split_values(frameworks), step_name=step)
    conn = connect(duckdb_path)
    try:
        if t1 is None:
            t1 = history_end(conn)
        if t1 <= t0:
            raise click.BadParameter(f"{iso(t1)} is not after --since {iso(t0)}", param_hint="--until")
        if idle:
            if output == "html":
                raise click.UsageError("--idle prints a table, JSON or CSV; the HTML report has the idle charts")
            rows = costing.idle_report(conn, t0, t1, by=tuple(dict.fromkeys(dims)), step=STEPS.get(step),
                                       pricing=pricing, as_of=now, clusters=options["clusters"])
        else:
            report = costing.cost_report(
                conn, t0, t1, by=tuple(dict.fromkeys(dims)), step=STEPS.get(step),
                statuses=costing.consuming_statuses(include_initializing), pricing=pricing, as_of=now,
                clusters=options["clusters"], namespaces=options["namespaces"], frameworks=options["frameworks"],
                basis=basis)
            document = html_report(conn, report, options=options, pricing_source=pricing_path) \
                if output == "html" else None
    except EmptyHistory:
        fail(QueryError(f"{duckdb_path}: the history is empty; give --until"))
    except QueryError as exc:
        fail(exc)
    finally:
        conn.close()
    if idle:
        items = [idle_item(r) for r in rows]
        with contextlib.ExitStack() as stack:
            if out_path:
                stack.enter_context(contextlib.redirect_stdout(_open_out(out_path, stack)))
            emit(output, items, table=_idle_table(rows, t0, t1, list(dict.fromkeys(dims)),
                                                  pricing.currency if pricing else None))
        return
    for (cluster, resource), hours in sorted(report.unpriced.items()):
        click.echo(f"warning: no price for {resource} in cluster {cluster} ({pricing_path}): "
                   f"{hours:,.1f} GPU-hours not costed", err=True)
    items = [item_of(row, report) for row in report.rows]
    with contextlib.ExitStack() as stack:
        if out_path:
            stack.enter_context(contextlib.redirect_stdout(_open_out(out_path, stack)))
        if output == "html":
            sys.stdout.write(document)
        else:
            emit(output, items, table=_table(report), columns=csv_columns(report))


def _open_out(out_path, stack):
    try:
        return stack.enter_context(open(out_path, "w", encoding="utf-8", newline=""))
    except OSError as exc:
        fail(OSError(f"{out_path}: cannot write: {exc.strerror}"))


def register(cli: click.Group) -> None:
    """Add `cost` to the `workloadmap` command group."""
    cli.add_command(cost)
