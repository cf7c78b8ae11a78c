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


def register(cli: click.Group) -> None:
    cli.add_command(run_group)

