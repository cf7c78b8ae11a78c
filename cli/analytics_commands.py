"""The analytics commands over the warehouse: capacity, query, feed, export.

Each reads the DuckDB history read-only (a stopped warehouse or the snapshot a
running writer keeps: DuckDB lets no other process open a file being written)
through the named queries of ``warehouse/queries/``, and prints through the
shared output bundle.  Register with ``register(cli)``.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from workloadmap.warehouse import capacities
from workloadmap.warehouse.capacities import (
    ALLOCATION_DIMENSIONS, ALLOCATION_SERIES_DIMENSIONS, CATEGORIES, DIMENSIONS, WAIT_DIMENSIONS)
from workloadmap.warehouse.querying import (
    EmptyHistory, QueryError, ReadOnlyViolation, WarehouseUnavailable, run_sql)
from workloadmap.warehouse.values import jsonable, number, parse_step

from .options import (File, FilePath, Instant, connect, duckdb_option, filter_options, from_options, settings_options,
                      split_values)
from .outputs import duration, emit, fail, output_option, terminal_safe

RESOURCES = {"gpus": ("GPUs", 1), "cpu": ("CPU cores", 1), "memory": ("memory GiB", 2 ** 30)}


# --------------------------------------------------------------------------- output


def simple_table(items: list[dict], columns: list[str], title: str | None = None, right=()):
    from rich.table import Table

    table = Table(title=title, box=None, header_style="bold")
    for c in columns:
        table.add_column(c.upper().replace("_", " "), justify="right" if c in right else "left")
    for item in items:
        table.add_row(*("" if item.get(c) is None else (f"{item[c]:,}" if isinstance(item[c], (int, float))
                                                          and not isinstance(item[c], bool) else str(item[c]))
                        for c in columns))
    return table


# --------------------------------------------------------------------------- capacity

@click.command("capacity")
@duckdb_option
@click.option("--by", "by", default="cluster", show_default=True,
              help="Group by these, comma-separated: cluster, namespace, framework, kind, status (or 'none').")
@click.option("--at", "at", type=Instant(), help="Demand at this past instant instead of now.")
@click.option("--since", type=Instant(), help="Time series from this instant (with --until and --step).")
@click.option("--until", type=Instant(), help="End of the time series (default: the end of the history).")
@click.option("--step", default="1h", show_default=True, help="Step of the time series: 15m, 1h, 6h, 1d, 1w ...")
@click.option("--top", type=click.IntRange(min=1), help="Instead of groups: the N workloads with the most GPUs "
              "(now, at --at, or by GPU-hours over --since/--until).")
@click.option("--resource", type=click.Choice(sorted(RESOURCES)), default="gpus", show_default=True,
              help="The resource the table shows (JSON and CSV have all three).")
@click.option("--allocation", is_flag=True,
              help="What the nodes have and the pods hold instead of what workloads request: GPUs allocatable, "
                   "schedulable, allocated, idle, pending and requested, by cluster, gpu_product, node_pool, node, "
                   "namespace, framework, workload.")
@click.option("--node-pool", "node_pools", multiple=True, help="--allocation: only these node pools.")
@click.option("--gpu-product", "gpu_products", multiple=True, help="--allocation: only these GPU products.")
@filter_options
@output_option("table", "json", "yaml", "csv", default="table")
def capacity(duckdb_path, by, at, since, until, step, top, resource, allocation, node_pools, gpu_products, clusters,
             namespaces, frameworks, kinds, statuses, output):
    """GPU, CPU and memory demand: now, at an instant, or over a window; by cluster, namespace, framework ...

    \b
    Columns (per resource) at an instant:
      running   Running and Degraded workloads (holding their pods)
      degraded  the Degraded part of running
      starting  Initializing and Resuming
      queued    Suspended and Suspending (asking, holding nothing)
      all       every status but Deleted (Completed/Failed specs still request)
    Time series (--since): per step, the time-weighted average and the peak of the demand
    of Running and Degraded workloads (or of --status), then the whole window per group.

    \b
    With --allocation (pods and nodes), GPUs at an instant:
      allocatable    the nodes' allocatable GPUs (cordoned nodes included)
      schedulable    of Ready nodes that are not cordoned
      unschedulable  of cordoned nodes
      allocated      held by pods bound to a node
      idle           allocatable - allocated (groups of nodes only)
      pending        requested by pods waiting for a node
      requested      what live workloads ask for (Running, Degraded, Initializing,
                     Resuming, Suspended, Suspending)
    and over a window (--since), per step the average allocatable, allocated, idle
    and pending GPUs and their peaks.
    """
    dims = [] if by.strip().lower() in ("", "none") else [d.strip().lower() for d in by.split(",") if d.strip()]
    if at is not None and since is not None:
        raise click.UsageError("--at is an instant, --since a window: give one of them")
    if until is not None and since is None:
        raise click.UsageError("--until needs --since")
    if allocation:
        if top is not None or kinds or statuses:
            raise click.UsageError("--top, --kind and --status are for workload demand, not with --allocation")
        allowed = ALLOCATION_DIMENSIONS if since is None else ALLOCATION_SERIES_DIMENSIONS
    elif node_pools or gpu_products:
        raise click.UsageError("--node-pool and --gpu-product filter --allocation")
    else:
        allowed = DIMENSIONS
    bad = [d for d in dims if d not in allowed]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: group by {', '.join(allowed)}", param_hint="--by")
    dims = list(dict.fromkeys(dims))
    try:
        parse_step(step)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    filters = {"clusters": split_values(clusters), "namespaces": split_values(namespaces),
               "frameworks": split_values(frameworks)}
    conn = connect(duckdb_path)
    try:
        since, until = capacities.resolve_window(conn, at=at, since=since, until=until)
        if allocation:
            items = capacities.allocation_report(conn, at=at, since=since, until=until, step=step, by=dims,
                                                 node_pools=split_values(node_pools),
                                                 gpu_products=split_values(gpu_products), **filters)
        else:
            items = capacities.capacity_report(conn, at=at, since=since, until=until, step=step, top=top, by=dims,
                                               statuses=split_values(statuses), kinds=split_values(kinds), **filters)
    except EmptyHistory:
        fail(QueryError(f"{duckdb_path}: the history is empty; give --until"))
    except (QueryError, ReadOnlyViolation) as exc:
        fail(exc)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    finally:
        conn.close()
    if allocation:
        _emit_allocation(output, items, dims, at, since, step)
    elif top is not None:
        _emit_top(output, items, resource, at, since, until)
    elif since is None:
        _emit_capacity(output, items, dims, resource, at)
    else:
        _emit_series(output, items, dims, resource, split_values(statuses))


def _emit_capacity(output, items, dims, resource, at):
    suffix = {"gpus": "gpus", "cpu": "cpu", "memory": "memory_gib"}[resource]
    label = RESOURCES[resource][0]

    def table(items):
        rows = list(items)
        if len(rows) > 1:
            total = {d: "" for d in dims}
            if dims:
                total[dims[0]] = "TOTAL"
            total["workloads"] = sum(r["workloads"] for r in rows)
            for c in CATEGORIES:
                total[f"{c}_{suffix}"] = number(sum(r[f"{c}_{suffix}"] for r in rows))
            rows.append(total)
        view = [{**r, **{c: r[f"{c}_{suffix}"] for c in CATEGORIES}} for r in rows]
        when = "now" if at is None else f"at {jsonable(at)}"
        title = f"{label} requested {when}" + (f", by {', '.join(dims)}" if dims else "")
        return simple_table(view, dims + ["workloads", *CATEGORIES], title,
                            right={"workloads", *CATEGORIES})

    emit(output, items, table=table)


def _emit_series(output, items, dims, resource, statuses):
    suffix = {"gpus": "gpus", "cpu": "cpu", "memory": "memory_gib"}[resource]
    label = RESOURCES[resource][0]
    counted = ", ".join(statuses) if statuses else "Running and Degraded"

    def table(items):
        from rich.console import Group

        steps = [{**i, "avg": i[f"avg_{suffix}"], "peak": i[f"peak_{suffix}"]} for i in items if i["step"] != "window"]
        whole = [{**i, "avg": i[f"avg_{suffix}"], "peak": i[f"peak_{suffix}"]} for i in items if i["step"] == "window"]
        return Group(
            simple_table(steps, ["start", *dims, "avg", "peak"],
                         f"{label} of {counted} workloads, per {items[0]['step'] if items else 'step'}",
                         right={"avg", "peak"}),
            "",
            simple_table(whole, ["start", "end", *dims, "avg", "peak"], "Whole window", right={"avg", "peak"}))

    emit(output, items, table=table)


def _emit_top(output, items, resource, at, since, until):
    def table(items):
        if since is None:
            when = "now" if at is None else f"at {jsonable(at)}"
            return simple_table(items, ["cluster", "namespace", "name", "kind", "status", "pods", "gpus", "cpu",
                                        "memory_gib"],
                                f"Top workloads by GPUs {when}", right={"pods", "gpus", "cpu", "memory_gib"})
        return simple_table(items, ["cluster", "namespace", "name", "kind", "gpu_hours", "avg_gpus", "peak_gpus"],
                            f"Top workloads by GPU-hours, {jsonable(since)} .. {jsonable(until)}",
                            right={"gpu_hours", "avg_gpus", "peak_gpus"})

    emit(output, items, table=table)


def _emit_allocation(output, items, dims, at, since, step):
    shown = [("workload" if d == "workload" else d) for d in dims]
    if since is None:
        when = "now" if at is None else f"at {jsonable(at)}"
        # pods bound to nodes no node record has: a column only when there are some (JSON always has it)
        unknown = (capacities.UNKNOWN_NODE,) if any(i[f"{capacities.UNKNOWN_NODE}_gpus"] for i in items) else ()
        names = [*capacities.ALLOCATION_COLUMNS[:4], *unknown, *capacities.ALLOCATION_COLUMNS[4:]]
        title = f"GPUs {when}: capacity, allocation, idle, pending" + (f", by {', '.join(dims)}" if dims else "")
        emit(output, items, table=lambda items: simple_table(
            [{**i, **{c: i[f"{c}_gpus"] for c in names}} for i in items],
            shown + ["nodes", *names, "bound_pods", "pending_pods"], title,
            right={"nodes", *names, "bound_pods", "pending_pods"}))
    else:
        unknown = [f"avg_{capacities.UNKNOWN_NODE}"] if any(
            i[f"avg_{capacities.UNKNOWN_NODE}_gpus"] for i in items) else []
        columns = ["avg_allocatable", "avg_allocated", *unknown, "avg_idle", "avg_pending", "peak_allocated",
                   "peak_pending"]
        emit(output, items, table=lambda items: simple_table(
            [{**i, **{c: i[f"{c}_gpus"] for c in columns}} for i in items], ["start", *dims, *columns],
            f"GPUs per {step}: allocatable, allocated, idle, pending", right=set(columns)))


# --------------------------------------------------------------------------- wait


@click.command("wait")
@duckdb_option
@click.option("--by", "by", default="namespace,framework", show_default=True,
              help="Group by these, comma-separated: cluster, namespace, framework, workload (or 'none').")
@click.option("--waiting", is_flag=True, help="Only the workloads waiting now, one row each.")
@click.option("--since", type=Instant(), help="Only workloads created at or after this instant.")
@click.option("--until", type=Instant(), help="Only workloads created before this instant.")
@click.option("--as-of", "as_of", type=Instant(),
              help="Where waits still running end (default: now; a past instant for a stopped history).")
@click.option("--cluster", "clusters", multiple=True, help="Only these clusters (repeatable, or comma-separated).")
@click.option("-n", "--namespace", "namespaces", multiple=True, help="Only these namespaces.")
@click.option("--framework", "frameworks", multiple=True, help="Only these frameworks.")
@output_option("table", "json", "yaml", "csv", default="table")
def wait(duckdb_path, by, waiting, since, until, as_of, clusters, namespaces, frameworks, output):
    """Queue wait: how long workloads waited for all their pods to be bound, p50/p90/max per group.

    A workload's wait runs from its creation to the first instant as many of its
    pods are bound to nodes as it asks for; workloads still waiting count with
    their wait so far.  --waiting lists them (by workload).
    """
    dims = [] if by.strip().lower() in ("", "none") else [d.strip().lower() for d in by.split(",") if d.strip()]
    if waiting:
        dims = ["workload"]
    bad = [d for d in dims if d not in WAIT_DIMENSIONS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: group by {', '.join(WAIT_DIMENSIONS)}", param_hint="--by")
    conn = connect(duckdb_path)
    try:
        items = capacities.queue_waits(conn, by=dims, waiting=waiting, since=since, until=until, as_of=as_of,
                                       clusters=split_values(clusters), namespaces=split_values(namespaces),
                                       frameworks=split_values(frameworks))
    except (QueryError, ReadOnlyViolation) as exc:
        fail(exc)
    finally:
        conn.close()

    def table(items):
        view = [{**i, **{k: duration(i[f"{k}_wait_s"]) for k in ("p50", "p90", "max")}} for i in items]
        if "workload" in dims:
            view = [{**v, "wait": v["max"]} for v in view]
            return simple_table(view, ["cluster", "namespace", "workload", "status", "created", "ready_at", "wait"],
                                "Workloads waiting now" if waiting else "Queue wait per workload", right={"wait"})
        return simple_table(view, dims + ["workloads", "waiting", "p50", "p90", "max"],
                            "Queue wait" + (f" by {', '.join(dims)}" if dims else ""),
                            right={"workloads", "waiting", "p50", "p90", "max"})

    emit(output, items, table=table)


# --------------------------------------------------------------------------- query


def parse_param(text: str) -> tuple[str, object]:
    """``name=value``: an integer, a decimal number, true/false/null, else the text itself."""
    name, sep, raw = text.partition("=")
    name = name.strip().lstrip("$")
    if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        raise click.BadParameter(f"{text!r}: use NAME=VALUE", param_hint="-p")
    low = raw.strip().lower()
    if low in ("true", "false"):
        return name, low == "true"
    if low == "null":
        return name, None
    for kind in (int, float):
        try:
            return name, kind(raw)
        except ValueError:
            pass
    return name, raw


@click.command("query")
@click.argument("sql", required=False)
@click.option("--file", "-f", "sql_file", type=File("r", encoding="utf-8"), help="Read the SQL from a file ('-' is stdin).")
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE",
              help="Bind $NAME (repeatable): integers, numbers, true/false/null, else text.")
@duckdb_option
@output_option("table", "json", "yaml", "csv", default="table")
def query(sql, sql_file, params, duckdb_path, output):
    """Run one read-only SQL statement over the warehouse.

    The file is opened read-only with file access off: DuckDB itself refuses
    INSERT/UPDATE/DELETE/CREATE, COPY TO, ATTACH and reading other files.
    While a writer runs, query its snapshot (`run warehouse --snapshot FILE`).
    """
    if (sql is None) == (sql_file is None):
        raise click.UsageError("give the SQL as an argument or with --file, not both")
    text = sql if sql is not None else sql_file.read()
    bound = dict(parse_param(p) for p in params)
    conn = connect(duckdb_path)
    try:
        result = run_sql(conn, text, bound)
    except (QueryError, ReadOnlyViolation) as exc:
        fail(exc)
    finally:
        conn.close()
    items = [{c: jsonable(v) for c, v in zip(result.columns, row)} for row in result.rows]
    numeric = {c for c in result.columns if items and all(isinstance(i[c], (int, float)) or i[c] is None
                                                           for i in items)}
    emit(output, items, columns=result.columns,
         table=lambda items: simple_table(items, result.columns, None, right=numeric))


# --------------------------------------------------------------------------- feed


@click.command("feed")
@settings_options
@click.option("--from-beginning", is_flag=True, help="Kafka: start at the beginning of the topic (default: new only).")
@click.option("--follow", is_flag=True, help="Warehouse: after the history, poll for new transitions.")
@click.option("--poll-interval", type=float, default=1.0, show_default=True, help="Warehouse: seconds between polls.")
@click.option("--since", type=Instant(), help="Warehouse: only transitions at or after this instant.")
@click.option("--cluster", "clusters", multiple=True, help="Only these clusters (repeatable, or comma-separated).")
@click.option("-n", "--namespace", "namespaces", multiple=True, help="Only these namespaces.")
@click.option("--kind", "kinds", multiple=True, help="Only these kinds.")
@click.option("--status", "statuses", multiple=True, help="Only transitions TO these statuses.")
@click.option("--max-messages", type=click.IntRange(min=1), help="Stop after printing this many transitions.")
@click.option("--idle-timeout", type=float, help="Stop after this many seconds without a new transition.")
@output_option("lines", "jsonl", default="lines")
def feed(from_beginning, follow, poll_interval, since, clusters, namespaces, kinds, statuses, max_messages,
         idle_timeout, output, **options):
    """Follow status transitions across all clusters, as lines or JSON lines.

    With --duckdb FILE: from the warehouse's transitions table (embedded mode;
    the history, then new ones with --follow).  Otherwise from the transitions
    topic (full mode, settings as for `run`), followed until Ctrl-C.
    """
    from workloadmap import feeding

    filters = feeding.Filters(*(tuple(split_values(v) or ()) for v in (clusters, namespaces, kinds, statuses)))
    render = feeding.transition_line if output == "lines" else feeding.transition_json
    if options.get("duckdb") is not None:
        source = feeding.reading_warehouse(options["duckdb"], filters, since=since, follow=follow,
                                           poll_interval=poll_interval, idle_timeout=idle_timeout)
    else:
        if since is not None or follow:
            raise click.UsageError("--since and --follow read the warehouse: give --duckdb FILE")
        settings = from_options(dict(options))
        from workloadmap.running import quiet_kafka_logs
        quiet_kafka_logs()
        source = feeding.reading_topic(settings, filters, from_beginning=from_beginning, idle_timeout=idle_timeout)
    printed = 0
    try:
        for t in source:
            click.echo(terminal_safe(render(t)))
            printed += 1
            if max_messages is not None and printed >= max_messages:
                break
    except WarehouseUnavailable as exc:
        fail(exc)
    except KeyboardInterrupt:
        pass
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


# --------------------------------------------------------------------------- export


@click.command("export")
@click.option("--parquet", "parquet_dir", required=True, type=FilePath(file_okay=False),
              help="Directory to write: DIR/<table>/date=YYYY-MM-DD/cluster=NAME/*.parquet.")
@click.option("--table", "tables", multiple=True,
              type=click.Choice(["workload_states", "status_intervals", "transitions"]),
              help="Tables to export (repeatable; default: all three).")
@click.option("--overwrite", is_flag=True, help="Replace a table's directory that is already there.")
@duckdb_option
@output_option("table", "json", "yaml", default="table")
def export(parquet_dir, tables, overwrite, duckdb_path, output):
    """Export the history as Parquet partitioned by date (UTC) and cluster, for other engines."""
    from workloadmap.warehouse.exporting import EXPORTED, ExportExists, exporting_tables

    conn = connect(duckdb_path, sandbox=False)
    try:
        done = exporting_tables(conn, parquet_dir, tables or tuple(EXPORTED), overwrite=overwrite)
    except (ExportExists, QueryError) as exc:
        fail(exc)
    finally:
        conn.close()
    items = [{"table": d.table, "path": str(d.path), "rows": d.rows, "partitions": d.partitions} for d in done]
    emit(output, items, table=lambda items: simple_table(items, ["table", "rows", "partitions", "path"],
                                                         f"Parquet export to {Path(parquet_dir)}",
                                                         right={"rows", "partitions"}))


def register(cli: click.Group) -> None:
    for command in (capacity, wait, query, feed, export):
        cli.add_command(command)
