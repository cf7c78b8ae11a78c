"""Pipeline commands: `run processors`, `run warehouse`, `replay`, `demo`.

The CLI is the composition root: it is the one layer allowed to wire ingest,
processors and warehouse together (in-process for the embedded demo, through
Kafka for the full stack).
"""

from __future__ import annotations

import json
import logging
import signal
import threading

import click

from .outputs import console
from .settings import Settings, from_options, settings_options


def ensure_topics(settings: Settings) -> None:
    """Create the pipeline's topics when missing (idempotent)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap_servers,
                             client_id=f"{settings.client_id}-admin", **settings.security())
    try:
        existing = set(admin.list_topics())
        wanted = [settings.raw_topic, settings.workloads_topic, settings.transitions_topic, settings.deadletter_topic]
        missing = [NewTopic(t, settings.partitions, 1) for t in wanted if t not in existing]
        if missing:
            try:
                admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


@click.group("run")
def run_group():
    """Run a pipeline service against a Kafka broker (the full stack)."""


@run_group.command("processors")
@settings_options
def run_processors(**options):
    """Resolve raw events into records, transitions and dead letters (a faust worker)."""
    import faust

    from workloadmap.processors.app import Settings as AppSettings
    from workloadmap.processors.app import create_app

    settings = from_options(options)
    ensure_topics(settings)
    app = create_app(AppSettings(
        bootstrap_servers=settings.bootstrap_servers, app_id=f"{settings.client_id}-processors",
        raw_topic=settings.raw_topic, workloads_topic=settings.workloads_topic,
        transitions_topic=settings.transitions_topic, deadletter_topic=settings.deadletter_topic,
        partitions=settings.partitions, security=settings.security(),
    ))
    # faust's worker handles SIGTERM/SIGINT itself: it stops the agents, commits the open
    # transaction and leaves the group, so a graceful stop loses and repeats nothing.
    faust.Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False).execute_from_commandline()


@run_group.command("warehouse")
@click.option("--snapshot", "snapshot_path", type=click.Path(dir_okay=False),
              help="Also keep a read-only copy of the warehouse here (refreshed every --snapshot-every seconds) "
                   "for queries while the writer runs.")
@click.option("--snapshot-every", type=float, default=60.0, show_default=True)
@settings_options
def run_warehouse(snapshot_path, snapshot_every, **options):
    """Write workload records and transitions into the DuckDB warehouse (the single writer)."""
    from workloadmap.warehouse.writing import KafkaWarehouseWriter

    settings = from_options(options)
    ensure_topics(settings)
    quiet_kafka_logs()
    stop = stop_on_signals()
    writer = KafkaWarehouseWriter(
        settings.bootstrap_servers, settings.duckdb,
        topics=(settings.workloads_topic, settings.transitions_topic),
        group_id=f"{settings.client_id}-warehouse", client_id=f"{settings.client_id}-warehouse",
        security=settings.security(), deadletter_topic=settings.deadletter_topic,
        transitions_topic=settings.transitions_topic, snapshot_path=snapshot_path, snapshot_every_s=snapshot_every)
    totals = writer.run(stop)  # returns after SIGTERM/SIGINT, once the batch in hand is committed and closed
    click.echo(f"warehouse writer stopped: {totals.inserted} records, {totals.transitions_inserted} transitions "
               f"written; {totals.duplicates} duplicates dropped", err=True)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, for loops that stop between batches."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def quiet_kafka_logs() -> None:
    for name in ("kafka", "aiokafka", "faust", "mode"):
        logging.getLogger(name).setLevel(logging.ERROR)


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
@click.option("--from-file", "from_file", type=click.Path(dir_okay=False, exists=True),
              help="Replay raw events from a JSON-lines file instead of simulating.")
@click.option("--to-file", "to_file", type=click.Path(dir_okay=False),
              help="Write the raw events to a JSON-lines file instead of publishing them to Kafka.")
@settings_options
def replay(clusters, workloads, days, seed, bad_fraction, from_file, to_file, **options):
    """Publish simulated (or recorded) raw object events to Kafka, or write them to a file."""
    from workloadmap.ingest.publishing import KafkaPublisher, read_jsonl, write_jsonl
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
    ensure_topics(settings)
    count = 0
    with progress("publishing") as bar, KafkaPublisher(
            settings.bootstrap_servers, topic=settings.raw_topic, client_id=f"{settings.client_id}-replay",
            security=settings.security()) as publisher:
        task = bar.add_task("publishing")
        for key, value in messages:
            publisher.publish_raw(key, value)
            count += 1
            bar.advance(task)
        publisher.flush()
    click.echo(f"published {count} raw events to {settings.raw_topic} at {settings.bootstrap_servers}", err=True)


@click.command("demo")
@simulation_options
@click.option("--duckdb", "duckdb_path", default="workloadmap-demo.duckdb", show_default=True,
              type=click.Path(dir_okay=False), help="DuckDB file to write (rerunning adds nothing new).")
@click.option("--batch", type=int, default=5000, show_default=True, help="Records per warehouse transaction.")
def demo(clusters, workloads, days, seed, duckdb_path, batch):
    """The embedded pipeline: simulate a multi-cluster history, process it in-process into DuckDB, summarise."""
    from workloadmap.ingest.simulating import simulate_messages
    from workloadmap.processors.processing import MemoryStates, Processor
    from workloadmap.warehouse.writing import Warehouse

    processor, states = Processor(), MemoryStates()
    counts = {"events": 0, "records": 0, "dead_letters": 0, "transitions": 0}
    pending_records, pending_transitions = [], []
    with Warehouse(duckdb_path) as warehouse, progress("simulating and processing") as bar:
        task = bar.add_task("events")

        def flush():
            if pending_records or pending_transitions:
                warehouse.write([json.loads(v) for v in pending_records], list(pending_transitions),
                                texts=[v.decode() for v in pending_records])
                pending_records.clear()
                pending_transitions.clear()

        for key, value, _ in simulate_messages(clusters=clusters, workloads=workloads, days=days, seed=seed):
            out = processor.process(key, value, states)
            counts["events"] += 1
            counts["dead_letters"] += len(out.dead_letters)
            pending_records.extend(record for _, record in out.records)
            pending_transitions.extend(json.loads(t) for _, t in out.transitions)
            counts["records"] += len(out.records)
            if len(pending_records) >= batch:
                counts["transitions"] += len(pending_transitions)
                flush()
            bar.advance(task)
        counts["transitions"] += len(pending_transitions)
        flush()
        summary = demo_summary(warehouse.cursor())
    click.echo(f"{counts['events']} raw events -> {counts['records']} records, {counts['transitions']} transitions, "
               f"{counts['dead_letters']} dead letters -> {duckdb_path}")
    for title, table in summary:
        click.echo("")
        console().print(table)


def demo_summary(cur):
    """Capacity now and GPU-hours per framework, as rich tables."""
    from rich.table import Table

    now = cur.execute("""
        SELECT cluster,
               count(*) AS workloads,
               sum(gpus) FILTER (WHERE status IN ('Running', 'Degraded')) AS running,
               sum(gpus) FILTER (WHERE status = 'Initializing') AS starting,
               sum(gpus) FILTER (WHERE status IN ('Suspended', 'Suspending')) AS queued,
               sum(gpus) AS requested
        FROM current_workloads GROUP BY cluster ORDER BY cluster""").fetchall()
    capacity = Table(title="GPU demand at the end of the history", box=None, header_style="bold")
    for col in ("CLUSTER", "WORKLOADS", "RUNNING", "STARTING", "QUEUED", "ALL STATES"):
        capacity.add_column(col, justify="left" if col == "CLUSTER" else "right")
    for row in now:
        capacity.add_row(row[0], str(row[1]), *(f"{v or 0:g}" for v in row[2:]))
    hours = cur.execute("""
        SELECT framework, round(sum(gpus * epoch(coalesce(valid_to, last) - valid_from)) / 3600, 1) AS gpu_hours
        FROM status_intervals, (SELECT max(observed_at) AS last FROM workload_states)
        WHERE status IN ('Running', 'Degraded')
        GROUP BY framework ORDER BY gpu_hours DESC""").fetchall()
    usage = Table(title="GPU-hours while Running or Degraded, by framework", box=None, header_style="bold")
    usage.add_column("FRAMEWORK")
    usage.add_column("GPU-HOURS", justify="right")
    for framework, gpu_hours in hours:
        usage.add_row(framework, f"{gpu_hours:,.1f}")
    return [("capacity", capacity), ("usage", usage)]


def register(cli: click.Group) -> None:
    cli.add_command(run_group)
    cli.add_command(replay)
    cli.add_command(demo)

