"""The analytics commands over the warehouse: capacity, query, feed, export.

Each reads the DuckDB history read-only (a stopped warehouse or the snapshot a
running writer keeps: DuckDB lets no other process open a file being written)
through the named queries of ``warehouse/queries/``, and prints through the
shared output bundle.  Register with ``register(cli)``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import sys
import uuid
from pathlib import Path

import click

from workloadmap.warehouse.querying import (
    QueryError, ReadOnlyViolation, WarehouseUnavailable, open_readonly, run_query, run_sql)

from .outputs import emit, error, output_option
from .settings import from_options, settings_options

EXIT_FAILED = 1
DIMENSIONS = ("cluster", "namespace", "framework", "kind", "status")
RESOURCES = {"gpus": ("GPUs", 1), "cpu": ("CPU cores", 1), "memory": ("memory GiB", 2 ** 30)}
GIB = 2 ** 30


# --------------------------------------------------------------------------- shared helpers


def parse_instant(text: str) -> dt.datetime:
    """RFC 3339 / ISO 8601 (``2026-11-03T10:00:00Z``, ``2026-11-03 10:00``, ``2026-11-03``); naive means UTC."""
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a time (use e.g. 2026-11-03T10:00:00Z or 2026-11-03)") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


class Instant(click.ParamType):
    name = "TIME"

    def convert(self, value, param, ctx):
        return value if isinstance(value, dt.datetime) else parse_instant(value)


_STEP = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": dt.timedelta(minutes=1), "h": dt.timedelta(hours=1), "d": dt.timedelta(days=1),
          "w": dt.timedelta(weeks=1)}


def parse_step(text: str) -> dt.timedelta:
    m = _STEP.match(text.strip().lower())
    if not m or int(m.group(1)) == 0:
        raise click.BadParameter(f"{text!r} is not a step (use e.g. 15m, 1h, 6h, 1d, 1w)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def split_values(values) -> list[str] | None:
    """Repeatable options that also take comma-separated lists; None when not given."""
    out = [v.strip() for value in values or () for v in value.split(",") if v.strip()]
    return out or None


def jsonable(value):
    """DuckDB values as JSON-ready values (timestamps in RFC 3339 UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.isoformat()
        spec = "milliseconds" if value.microsecond else "seconds"
        return value.astimezone(dt.timezone.utc).isoformat(timespec=spec).replace("+00:00", "Z")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def number(value, digits: int = 3):
    """Rounded, and an int when whole (GPU counts read as 64, not 64.0)."""
    if value is None:
        return None
    value = round(float(value), digits)
    return int(value) if value.is_integer() else value


def duckdb_option(f):
    return click.option("--duckdb", "duckdb_path", default="workloadmap.duckdb", show_default=True,
                        envvar="WORKLOADMAP_DUCKDB", type=click.Path(dir_okay=False),
                        help="Warehouse file to read (a stopped warehouse or a --snapshot copy), read-only.")(f)


def connect(path, *, sandbox: bool = True):
    try:
        return open_readonly(path, sandbox=sandbox)
    except WarehouseUnavailable as exc:
        error(str(exc))
        sys.exit(EXIT_FAILED)


def fail(exc: Exception) -> None:
    error(str(exc))
    sys.exit(EXIT_FAILED)


def filter_options(f):
    for decl, name, help_text in reversed([
        (("--cluster",), "clusters", "Only these clusters (repeatable, or comma-separated)."),
        (("-n", "--namespace"), "namespaces", "Only these namespaces."),
        (("--framework",), "frameworks", "Only these frameworks (as in the records: JobSet, Ray, ...)."),
        (("--kind",), "kinds", "Only these kinds (JobSet, RayCluster, ...)."),
        (("--status",), "statuses", "Only these statuses."),
    ]):
        f = click.option(*decl, name, multiple=True, help=help_text)(f)
    return f


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

_CATEGORIES = ("running", "degraded", "starting", "queued", "all")


def _capacity_item(row: dict, by: list[str]) -> dict:
    item = {d: row[d] for d in by}
    item["workloads"] = row["workloads"]
    for c in _CATEGORIES:
        item[f"{c}_gpus"] = number(row[f"{c}_gpus"])
    for c in _CATEGORIES:
        item[f"{c}_cpu"] = number(row[f"{c}_cpu"])
    for c in _CATEGORIES:
        item[f"{c}_memory_gib"] = number(row[f"{c}_memory"] / GIB)
    return item


def _series_item(row: dict, by: list[str], step: str) -> dict:
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


def _top_item(row: dict) -> dict:
    item = {k: row[k] for k in ("cluster", "namespace", "name", "kind", "framework")}
    if "status" in row:
        item.update(status=row["status"], since=jsonable(row["since"]), pods=row["pods"],
                    gpus=number(row["gpus"]), cpu=number(row["cpu"]),
                    memory_gib=number(row["memory"] / GIB), gpu_resources=jsonable(row["gpu_resources"]))
    else:
        item.update(gpu_hours=number(row["gpu_hours"]), avg_gpus=number(row["avg_gpus"]),
                    peak_gpus=number(row["peak_gpus"]))
    return item


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
@filter_options
@output_option("table", "json", "yaml", "csv", default="table")
def capacity(duckdb_path, by, at, since, until, step, top, resource, clusters, namespaces, frameworks, kinds,
             statuses, output):
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
    """
    dims = [] if by.strip().lower() in ("", "none") else [d.strip().lower() for d in by.split(",") if d.strip()]
    bad = [d for d in dims if d not in DIMENSIONS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: group by {', '.join(DIMENSIONS)}", param_hint="--by")
    dims = list(dict.fromkeys(dims))
    if at is not None and since is not None:
        raise click.UsageError("--at is an instant, --since a window: give one of them")
    if until is not None and since is None:
        raise click.UsageError("--until needs --since")
    step_delta = parse_step(step)
    filters = {"clusters": split_values(clusters), "namespaces": split_values(namespaces),
               "frameworks": split_values(frameworks), "kinds": split_values(kinds)}
    status_list = split_values(statuses)
    conn = connect(duckdb_path)
    try:
        if since is not None and until is None:
            until = run_query(conn, "history_bounds").rows[0][1]
            if until is None:
                fail(QueryError(f"{duckdb_path}: the history is empty; give --until"))
        if since is not None and until <= since:
            raise click.UsageError("--until must be after --since")
        if top is not None:
            if since is None:
                rows = run_query(conn, "capacity_top", at=at, limit=top, statuses=status_list, **filters).dicts()
            else:
                rows = run_query(conn, "capacity_top_window", since=since, until=until, limit=top,
                                 statuses=status_list, **filters).dicts()
            items = [_top_item(r) for r in rows]
            _emit_top(output, items, resource, at, since, until)
        elif since is None:
            rows = run_query(conn, "capacity", at=at, by=dims or None, statuses=status_list, **filters).dicts()
            items = [_capacity_item(r, dims) for r in rows]
            _emit_capacity(output, items, dims, resource, at)
        else:
            rows = run_query(conn, "capacity_series", since=since, until=until, step=step_delta,
                             by=dims or None, statuses=status_list, **filters).dicts()
            items = [_series_item(r, dims, step) for r in rows] + window_summary(rows, dims, since, until)
            _emit_series(output, items, dims, resource, status_list)
    except (QueryError, ReadOnlyViolation) as exc:
        fail(exc)
    finally:
        conn.close()


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
            for c in _CATEGORIES:
                total[f"{c}_{suffix}"] = number(sum(r[f"{c}_{suffix}"] for r in rows))
            rows.append(total)
        view = [{**r, **{c: r[f"{c}_{suffix}"] for c in _CATEGORIES}} for r in rows]
        when = "now" if at is None else f"at {jsonable(at)}"
        title = f"{label} requested {when}" + (f", by {', '.join(dims)}" if dims else "")
        return simple_table(view, dims + ["workloads", *_CATEGORIES], title,
                            right={"workloads", *_CATEGORIES})

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
@click.option("--file", "-f", "sql_file", type=click.File("r", encoding="utf-8"), help="Read the SQL from a file ('-' is stdin).")
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
    from . import feeding

    filters = feeding.Filters(*(tuple(split_values(v) or ()) for v in (clusters, namespaces, kinds, statuses)))
    render = feeding.transition_line if output == "lines" else feeding.transition_json
    if options.get("duckdb") is not None:
        source = feeding.reading_warehouse(options["duckdb"], filters, since=since, follow=follow,
                                           poll_interval=poll_interval, idle_timeout=idle_timeout)
    else:
        if since is not None or follow:
            raise click.UsageError("--since and --follow read the warehouse: give --duckdb FILE")
        settings = from_options(dict(options))
        from .pipeline_commands import quiet_kafka_logs
        quiet_kafka_logs()
        source = feeding.reading_topic(settings, filters, from_beginning=from_beginning, idle_timeout=idle_timeout)
    printed = 0
    try:
        for t in source:
            click.echo(render(t))
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
@click.option("--parquet", "parquet_dir", required=True, type=click.Path(file_okay=False),
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
    for command in (capacity, query, feed, export):
        cli.add_command(command)
