"""Pipeline commands: `run watchers|processors|warehouse|exporter`, `replay`, `demo`.

Argument parsing, progress and reports only: the services are wired in
``workloadmap.running`` and the embedded pipeline is
``workloadmap.embedding.EmbeddedPipeline``.
"""

from __future__ import annotations

import logging

import click

from workloadmap import settings as settings_module
from workloadmap.settings import DEFAULT_DUCKDB

from .options import FilePath, from_options, settings_options
from .outputs import console, fail


@click.group("run")
def run_group():
    """Run a pipeline service against a Kafka broker (the full stack)."""


@run_group.command("processors")
@settings_options
def run_processors(**options):
    """Resolve raw events into records, transitions and dead letters (a faust worker)."""
    from workloadmap import running

    running.run_processors(from_options(options))


def metrics_option(f):
    return click.option("--metrics", "metrics", default=None, metavar="[HOST]:PORT",
                        help="Also serve Prometheus metrics here (/metrics, /healthz, /readyz).")(f)


def pod_series_option(f):
    return click.option("--pod-series", type=click.Choice(["on", "off"]), default="on", show_default=True,
                        help="One workloadmap_pod_workload_info series per pod (the join key of DCGM and cAdvisor "
                             "series); off for very large fleets (the sums by workload and component stay).")(f)


def serving(action):
    """Run `action`, a bad or taken listen address as a usage error of --metrics / --listen / --serve."""
    from workloadmap.exporter.serving import AddressError

    try:
        return action()
    except AddressError as exc:
        raise click.BadParameter(str(exc), param_hint="--metrics / --listen / --serve") from None
    except OSError as exc:
        raise click.UsageError(f"cannot listen: {exc}") from None


@run_group.command("exporter")
@click.option("--listen", "listen", default=":9108", show_default=True, metavar="[HOST]:PORT",
              help="Where to serve /metrics, /healthz and /readyz.")
@pod_series_option
@settings_options
def run_exporter(listen, pod_series, **options):
    """Serve every workload's state, demand and allocation, and every pod's workload, as Prometheus series."""
    from workloadmap import running

    settings = from_options(options)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serving(lambda: running.run_exporter(settings, listen, pod_series=pod_series == "on", started=(
        lambda server: click.echo(f"serving metrics on {listen} (port {server.port}), reading "
                                  f"{settings.workloads_topic} and the other records topics at "
                                  f"{settings.bootstrap_servers}", err=True))))
    click.echo("exporter stopped", err=True)


@run_group.command("warehouse")
@click.option("--snapshot", "snapshot_path", type=FilePath(dir_okay=False),
              help="Also keep a read-only copy of the warehouse here (refreshed every --snapshot-every seconds) "
                   "for queries while the writer runs.")
@click.option("--snapshot-every", type=float, default=60.0, show_default=True)
@click.option("--pricing", "pricing", default=None, type=FilePath(dir_okay=False),
              help="Pricing file (as `cost --pricing`; or WORKLOADMAP_PRICING): the writer keeps the finished days' "
                   "cost rows by workload priced with it, so daily reports by workload with it read them.")
@click.option("--memory-limit", "duckdb_memory_limit", default=None, metavar="SIZE",
              help="Bound DuckDB's memory in the writer (2GB, 512MiB; or WORKLOADMAP_DUCKDB_MEMORY_LIMIT). "
                   "Default: DuckDB's, 80% of the machine's memory, which its cache of the file grows toward.")
@metrics_option
@click.option("--serve", "serve", default=None, metavar="[HOST]:PORT",
              help="Also answer read-only JSON queries here (capacity, cost, a workload, the transitions as "
                   "server-sent events), from what is committed now; a bearer token from WORKLOADMAP_SERVE_TOKEN "
                   "or the file WORKLOADMAP_SERVE_TOKEN_FILE names.")
@settings_options
def run_warehouse(snapshot_path, snapshot_every, metrics, serve, **options):
    """Write workload records and transitions into the DuckDB warehouse (the single writer)."""
    from workloadmap import running
    from workloadmap.warehouse.pricing import PricingError
    from workloadmap.warehouse.writing import MemoryLimitError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:  # the pricing file and the memory limit are read first, before Kafka
        totals = serving(lambda: running.run_warehouse(
            from_options(options), snapshot_path=snapshot_path, snapshot_every=snapshot_every, metrics=metrics,
            serve=serve, started=lambda server: click.echo(
                f"serving reads on {serve} (port {server.port}){' with a bearer token' if server.token else ''}",
                err=True)))
    except PricingError as exc:
        raise click.BadParameter(str(exc), param_hint="--pricing") from None
    except MemoryLimitError as exc:
        raise click.BadParameter(str(exc), param_hint="--memory-limit") from None
    click.echo(f"warehouse writer stopped: {totals.inserted} records, {totals.transitions_inserted} transitions "
               f"written; {totals.duplicates} duplicates dropped", err=True)


@run_group.command("watchers")
@click.option("--cluster", "clusters", multiple=True, metavar="ID=SOURCE",
              help="A cluster to watch, repeatable: ID=CONTEXT (of --kubeconfig), ID=FILE[#CONTEXT] "
                   "or ID=in-cluster. ID is the cluster id every record carries.")
@click.option("--kubeconfig", "kubeconfig", default=None, help="Kubeconfig file for ID=CONTEXT clusters "
              "(default: $KUBECONFIG or ~/.kube/config).")
@click.option("--checkpoint-dir", "checkpoint_dir", default=None,
              help="Folder of the watchers' checkpoints (what was published, so deletions while stopped "
                   "are published on restart). Default: ./workloadmap-watchers.")
@click.option("--embedded", is_flag=True,
              help="No broker: process the events in-process into the --duckdb warehouse.")
@click.option("--definitions", "-d", "definition_files", multiple=True, type=FilePath(dir_okay=False),
              help="Add definitions from a YAML file (repeatable); the cluster's own WorkloadMaps override them.")
@metrics_option
@click.option("--serve", "serve", default=None, metavar="[HOST]:PORT",
              help="With --embedded: also answer read-only JSON queries of the warehouse here (as `run "
                   "warehouse --serve`).")
@pod_series_option
@settings_options
def run_watchers(embedded, definition_files, metrics, serve, pod_series, **options):
    """Watch clusters (list + watch every catalog kind they serve) and publish raw object events."""
    from workloadmap import running
    from workloadmap.ingest.clusters import ClusterConfigError
    from workloadmap.ingest.watching import WatchingFailed
    from workloadmap.warehouse.writing import MemoryLimitError

    from .catalogs import build_catalog

    settings = from_options(options)
    if not settings.clusters:
        raise click.UsageError("give at least one --cluster ID=SOURCE (or `clusters` in --config)")
    if serve and not embedded:
        raise click.UsageError("--serve needs --embedded (with a broker, `run warehouse --serve` answers the reads)")
    try:
        clusters = running.connect_clusters(settings)
    except ClusterConfigError as exc:
        raise click.UsageError(str(exc)) from None
    catalog = build_catalog(definition_files, ())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serving(lambda: running.run_watchers(
            settings, clusters, catalog, embedded=embedded, stop=running.stop_on_signals(), metrics=metrics,
            pod_series=pod_series == "on", serve=serve,
            started=lambda target: click.echo(f"watching {', '.join(repr(c) for c in clusters)} into {target}",
                                              err=True)))
    except (WatchingFailed, MemoryLimitError) as exc:   # the latter: WORKLOADMAP_DUCKDB_MEMORY_LIMIT, --embedded
        fail(exc)
    click.echo("watchers stopped; checkpoints saved in " + settings.checkpoint_dir, err=True)


def simulation_options(f):
    """The simulator's knobs, shared by `replay` and `demo`."""
    for decl, name, kind, default, help_text in reversed([
        ("--clusters", "clusters", int, 3, "Simulated clusters."),
        ("--workloads", "workloads", int, 200, "Simulated workloads (all frameworks and core kinds)."),
        ("--days", "days", float, 7.0, "Simulated days of history."),
        ("--seed", "seed", int, 7, "Seed: the same seed gives the same history, byte for byte."),
    ]):
        f = click.option(decl, name, type=kind, default=default, show_default=True, help=help_text)(f)
    return f


def progress(label: str, total: int | None = None):
    """A progress bar on stderr (hidden when stderr is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


@click.command("replay")
@simulation_options
@click.option("--bad-fraction", type=float, default=0.0, show_default=True,
              help="Share of deliberately bad messages (malformed JSON, unknown kinds, ...), for tests.")
@click.option("--from-file", "from_file", type=FilePath(dir_okay=False, exists=True),
              help="Replay raw events from a JSON-lines file instead of simulating.")
@click.option("--to-file", "to_file", type=FilePath(dir_okay=False),
              help="Write the raw events to a JSON-lines file instead of publishing them to Kafka.")
@settings_options
def replay(clusters, workloads, days, seed, bad_fraction, from_file, to_file, **options):
    """Publish simulated (or recorded) raw object events to Kafka, or write them to a file."""
    from workloadmap import running
    from workloadmap.ingest.publishing import read_jsonl, write_jsonl
    from workloadmap.ingest.simulating import simulate_messages

    if from_file:
        messages = ((key, value) for key, value in read_jsonl(from_file))
    else:
        messages = ((key, value) for key, value, _ in simulate_messages(
            clusters=clusters, workloads=workloads, days=days, seed=seed, bad_fraction=bad_fraction))
    if to_file:
        count = write_jsonl(messages, to_file)
        click.echo(f"wrote {count} raw events to {to_file}", err=True)
        return
    settings = from_options(options)
    running.ensure_topics(settings)
    count = 0
    with progress("publishing") as bar, running.raw_publisher(settings, "replay") as publisher:
        task = bar.add_task("publishing")
        for key, value in messages:
            publisher.publish_raw(key, value)
            count += 1
            bar.advance(task)
        publisher.flush()
    click.echo(f"published {count} raw events to {settings.raw_topic} at {settings.bootstrap_servers}", err=True)


def _refuse_a_real_history(path, clusters: int) -> None:
    """The demo writes the default warehouse file: never mix its simulated clusters into a history
    of real ones that happens to be there."""
    import os

    from workloadmap.ingest.simulating import cluster_names
    from workloadmap.warehouse.querying import WarehouseUnavailable, open_readonly, run_query

    if not os.path.exists(path):
        return
    try:
        conn = open_readonly(path)
    except WarehouseUnavailable:
        return   # the writer, opening it next, says what is wrong with it
    try:
        found = {row["cluster"] for row in run_query(conn, "demand_by_cluster").dicts()}
    finally:
        conn.close()
    foreign = sorted(found - set(cluster_names(max(clusters, len(found)))))
    if foreign:
        fail(f"{path} holds clusters the demo does not simulate ({', '.join(foreign[:3])}"
             f"{', ...' if len(foreign) > 3 else ''}): give the demo another --duckdb")


@click.command("demo")
@simulation_options
@click.option("--duckdb", "duckdb_path", default=DEFAULT_DUCKDB, show_default=True, envvar="WORKLOADMAP_DUCKDB",
              type=FilePath(dir_okay=False),
              help="DuckDB file to write, the one the analytics commands read by default (rerunning adds nothing "
                   "new; a file holding clusters the demo does not simulate is refused).")
@click.option("--batch", type=int, default=5000, show_default=True, help="Records per warehouse transaction.")
@click.option("--metrics", "metrics", default=None, metavar="[HOST]:PORT",
              help="Then serve the history's end state as Prometheus series here (/metrics) until Ctrl-C.")
@click.option("--serve", "serve", default=None, metavar="[HOST]:PORT",
              help="Then answer read-only JSON queries of the warehouse and serve the dashboard here (as `run "
                   "warehouse --serve`; token from WORKLOADMAP_SERVE_TOKEN[_FILE]) until Ctrl-C.")
def demo(clusters, workloads, days, seed, duckdb_path, batch, metrics, serve):
    """The embedded pipeline: simulate a multi-cluster history (workloads, their owners and pods, the
    clusters' nodes), process it in-process into DuckDB, summarise."""
    from workloadmap import running
    from workloadmap.embedding import EmbeddedPipeline
    from workloadmap.exporter.serving import parse_address
    from workloadmap.exporter.tracking import Health, Tracker
    from workloadmap.ingest.scheduling import simulate_clusters
    from workloadmap.running import collect_garbage_rarely

    for address in (metrics, serve):
        if address:
            serving(lambda: parse_address(address))   # a bad address is refused before the history is made
    if metrics and serve:
        raise click.UsageError("give --metrics or --serve, not both")
    try:
        token = settings_module.load().read_token() if serve else None   # a bad token file, before the history
    except settings_module.SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    _refuse_a_real_history(duckdb_path, clusters)
    tracker = Tracker(health=Health(consumer="demo")) if metrics else None
    with EmbeddedPipeline.open(duckdb_path, batch=batch, tracker=tracker) as pipeline, \
            progress("simulating and processing") as bar:
        collect_garbage_rarely()
        task = bar.add_task("events")
        for event in simulate_clusters(clusters=clusters, workloads=workloads, days=days, seed=seed):
            pipeline.publish(event)
            bar.advance(task)
        pipeline.flush()
        summary = demo_summary(pipeline)
    counts = pipeline.counts
    click.echo(f"{counts['events']} raw events -> {counts['records']} records, {counts['transitions']} transitions, "
               f"{counts['pods']} pod and {counts['nodes']} node records, {counts['dead_letters']} dead letters "
               f"-> {duckdb_path}")
    for table in summary:
        click.echo("")
        console().print(table)
    if tracker is not None:
        serving(lambda: running.serve_tracker(tracker, metrics, started=lambda server: click.echo(
            f"\nserving the history's series on {metrics} (port {server.port}): /metrics; Ctrl-C to stop", err=True)))
    if serve:
        serving(lambda: running.serve_reads(duckdb_path, serve, token=token, started=lambda server: click.echo(
            f"\nserving the dashboard and the reads on {serve} (port {server.port}): /, /api/v1/...; "
            "Ctrl-C to stop", err=True)))


def demo_summary(pipeline) -> list:
    """Capacity now and GPU-hours per framework (the named queries of the same names), as rich tables."""
    from rich.table import Table

    capacity = Table(title="GPU demand at the end of the history", box=None, header_style="bold")
    for col in ("CLUSTER", "WORKLOADS", "RUNNING", "STARTING", "QUEUED", "ALL STATES"):
        capacity.add_column(col, justify="left" if col == "CLUSTER" else "right")
    for row in pipeline.query("demand_by_cluster").rows:
        capacity.add_row(row[0], str(row[1]), *(f"{v or 0:g}" for v in row[2:]))
    usage = Table(title="GPU-hours by framework: held by bound pods, asked for while Running or Degraded",
                  box=None, header_style="bold")
    for col in ("FRAMEWORK", "ALLOCATED", "REQUESTED"):
        usage.add_column(col, justify="left" if col == "FRAMEWORK" else "right")
    for framework, allocated, requested in pipeline.query("gpu_hours_by_framework").rows:
        usage.add_row(framework, f"{allocated:,.1f}", f"{requested:,.1f}")
    return [capacity, usage, *allocation_summary(pipeline)]


def allocation_summary(pipeline) -> list:
    """What the nodes have and the pods hold at the end, idle GPU-hours and queue waits over the history."""
    from rich.table import Table

    from .outputs import duration

    first, last = pipeline.query("history_bounds").rows[0]
    if last is None:
        return []
    now = Table(title="GPUs at the end of the history: capacity, allocation, idle, pending", box=None,
                header_style="bold")
    columns = ("allocatable", "schedulable", "allocated", "idle", "pending", "requested")
    for col in ("CLUSTER", "NODES", *(c.upper() for c in columns), "PENDING PODS"):
        now.add_column(col, justify="left" if col == "CLUSTER" else "right")
    for r in pipeline.query("allocation", by=["cluster"], at=last).dicts():
        now.add_row(r["cluster"], str(r["nodes"]), *(f"{r[c]:g}" for c in columns), str(r["pending_pods"]))
    idle = Table(title="GPU-hours over the history: allocatable, allocated, idle", box=None, header_style="bold")
    for col in ("CLUSTER", "RESOURCE", "ALLOCATABLE", "ALLOCATED", "IDLE", "IDLE %"):
        idle.add_column(col, justify="left" if col in ("CLUSTER", "RESOURCE") else "right")
    for r in pipeline.query("idle_cost", since=first, until=last, as_of=last, by=["cluster"]).dicts():
        share = 100 * r["idle_gpu_hours"] / r["allocatable_gpu_hours"] if r["allocatable_gpu_hours"] else 0
        idle.add_row(r["cluster"], r["resource"], f"{r['allocatable_gpu_hours']:,.1f}",
                     f"{r['allocated_gpu_hours']:,.1f}", f"{r['idle_gpu_hours']:,.1f}", f"{share:.0f}%")
    # workloads created in the history (one created before it was first seen with its pods already bound)
    waits = Table(title="Queue wait (creation to all pods bound) of the workloads created in the history, "
                        "by framework", box=None, header_style="bold")
    for col in ("FRAMEWORK", "WORKLOADS", "WAITING", "P50", "P90", "MAX"):
        waits.add_column(col, justify="left" if col == "FRAMEWORK" else "right")
    for r in pipeline.query("queue_waits", by=["framework"], since=first, as_of=last).dicts():
        waits.add_row(r["framework"] or "-", str(r["workloads"]), str(r["waiting"]),
                      *(duration(r[k]) for k in ("p50_wait_s", "p90_wait_s", "max_wait_s")))
    return [now, idle, waits]


def register(cli: click.Group) -> None:
    cli.add_command(run_group)
    cli.add_command(replay)
    cli.add_command(demo)

