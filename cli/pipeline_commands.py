"""Pipeline commands: `run processors`, `run warehouse`, `replay`, `demo`.

The CLI is the composition root: it is the one layer allowed to wire ingest,
processors and warehouse together (in-process for the embedded demo, through
Kafka for the full stack).
"""

from __future__ import annotations

import logging
import signal
import threading

import click

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


def register(cli: click.Group) -> None:
    cli.add_command(run_group)
    cli.add_command(replay)

