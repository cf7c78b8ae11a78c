"""Running the pipeline services: the watchers, the processors and the warehouse writer, wired from settings.

Why a module of its own: each service is a composition of stages that never
import each other (ingest, processors and warehouse meet only through Kafka
topics and the record format), plus what a long-running process needs
around them: the topics created when missing, a graceful stop on SIGTERM or
SIGINT, Kafka clients' logs kept quiet, the cyclic garbage collector tuned
for a stream of short-lived JSON values, the heap a backlog freed handed back
(trimming.py).  The command line (`workloadmap run ...`) only parses
arguments and reports; a program can run the same services by calling these
functions with a ``settings.Settings``.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from workloadmap.catalog import Catalog, records
from workloadmap.exporter.consuming import TopicsConsumer
from workloadmap.exporter.serving import MetricsServer, parse_address
from workloadmap.exporter.tracking import DEADLETTERS, NODES, PODS, TRANSITIONS, WORKLOADS, Health, Tracker
from workloadmap.ingest.clusters import Cluster, ClusterConfigError, ClusterSpec, connect
from workloadmap.ingest.publishing import KafkaPublisher
from workloadmap.ingest.watching import Watching, WatchingFailed
from workloadmap.warehouse.answering import ReadServer
from workloadmap.warehouse.consuming import KafkaWarehouseWriter
from workloadmap.warehouse.pricing import Pricing, load_pricing
from workloadmap.warehouse.writing import Warehouse, WriteResult, check_memory_limit

from .embedding import EmbeddedPipeline
from .settings import BrokerUnavailable, Settings, wait_for_broker
from .trimming import trim_heap_in_the_background

log = logging.getLogger(__name__)

STOP_WITHIN = 30.0  # seconds a processors worker is given to stop gracefully on SIGTERM/SIGINT


# The processors' state topic (processors/remembering.py) is compacted while the pipeline runs, not
# only once a week: the log cleaner never touches the segment being written, so segments roll every
# minute or 4 MiB (a few seconds of a busy partition: the segment being written is what a recovery
# reads beside the live objects); a partition is cleaned once a tenth of it is superseded, and within two minutes
# of a message at the latest.  A tombstone stays a minute after the clean that removed the values it
# deletes (then a recovery reads only the live objects and the last minute's deletions): a recovery
# reads a partition in seconds; one that took longer could keep a value whose tombstone it missed,
# which costs a little memory (a forgotten object, an owner link of a deleted owner) and nothing else.
STATE_TOPIC_CONFIG = {
    "cleanup.policy": "compact", "segment.ms": "60000", "segment.bytes": str(4 << 20),
    "min.cleanable.dirty.ratio": "0.1", "max.compaction.lag.ms": "120000", "delete.retention.ms": "60000",
}


def ensure_topics(settings: Settings, *, wait: float = 0.0) -> None:
    """Create the pipeline's topics when missing (idempotent); BrokerUnavailable when no broker
    answers, at once or after waiting up to `wait` seconds for one (every service and `replay` start
    here: the services wait ``settings.broker_wait``, `replay` does not)."""
    from kafka.errors import KafkaError

    deadline = time.monotonic() + wait
    while True:
        wait_for_broker(settings, max(0.0, deadline - time.monotonic()), say=log.warning)
        try:
            return _create_topics(settings)
        except KafkaError as exc:   # the broker accepts connections before it answers (starting up)
            if time.monotonic() >= deadline:
                raise BrokerUnavailable(f"the Kafka broker at {settings.bootstrap_servers} does not answer: "
                                        f"{exc}") from exc
            log.warning("the Kafka broker at %s does not answer yet (%s): trying again", settings.bootstrap_servers, exc)
            time.sleep(1.0)


def _create_topics(settings: Settings) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap_servers,
                             client_id=f"{settings.client_id}-admin", **settings.security())
    try:
        existing = set(admin.list_topics())
        outputs = {"max.message.bytes": str(records.MAX_OUTPUT_MESSAGE_BYTES)}
        missing = [NewTopic(settings.raw_topic, settings.partitions, 1)] if settings.raw_topic not in existing else []
        missing += [NewTopic(t, settings.partitions, 1, topic_configs=outputs)
                    for t in (settings.workloads_topic, settings.transitions_topic, settings.deadletter_topic,
                              settings.pods_topic, settings.nodes_topic)
                    if t not in existing]
        # as many partitions as the raw topic: a worker publishes a definition or its state in the
        # transaction of the raw partition it came from (same partition number)
        if settings.definitions_topic not in existing:
            missing.append(NewTopic(settings.definitions_topic, settings.partitions, 1,
                                    topic_configs={"cleanup.policy": "compact", **outputs}))
        if settings.state_topic not in existing:
            missing.append(NewTopic(settings.state_topic, settings.partitions, 1,
                                    topic_configs={**STATE_TOPIC_CONFIG, **outputs}))
        if missing:
            try:
                admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, for loops that stop between batches."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def collect_garbage_rarely() -> None:
    """Fewer cyclic garbage collections for a long-running stream service.

    Processing an event allocates a few hundred short-lived containers, so with
    Python's default threshold (700) a collection runs every few events, and each
    walks the young objects for cycles that a stream of JSON-like values does not
    make (reference counting frees them).  A watcher's relist is the same: a page
    of 500 pods is tens of thousands of containers, and with the default thresholds the
    collections, walking the growing set of tracked objects, cost more than the
    parsing.  Measured on 80,000 simulated events:
    0.216 and 0.174 ms per event with the defaults, 0.189 and 0.158 with
    collections 70 times rarer; the same as with the collector off.  What is alive
    at startup (the compiled catalog) is frozen out of every collection.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def quiet_kafka_logs() -> None:
    """Kafka clients' logs at ERROR: else every send formats a debug record (~10% of a worker's CPU)."""
    for name in ("kafka", "aiokafka", "faust", "mode"):
        logging.getLogger(name).setLevel(logging.ERROR)


def raw_publisher(settings: Settings, role: str) -> KafkaPublisher:
    """A publisher of raw events to the raw topic, as client `<client_id>-<role>`."""
    return KafkaPublisher(settings.bootstrap_servers, topic=settings.raw_topic,
                          client_id=f"{settings.client_id}-{role}", security=settings.security())


# --------------------------------------------------------------------------- the services


def run_processors(settings: Settings) -> None:
    """A faust worker resolving raw events into records, transitions and dead letters, until stopped.

    faust's worker handles SIGTERM/SIGINT itself: it stops the agents, commits
    the open transaction and leaves the group, so a graceful stop loses and
    repeats nothing.  It exits the process when it stops.
    """
    import faust

    from workloadmap.processors.app import WorkerSettings, create_app

    ensure_topics(settings, wait=settings.broker_wait)
    app = create_app(WorkerSettings(
        bootstrap_servers=settings.bootstrap_servers, app_id=f"{settings.client_id}-processors",
        raw_topic=settings.raw_topic, workloads_topic=settings.workloads_topic,
        transitions_topic=settings.transitions_topic, deadletter_topic=settings.deadletter_topic,
        definitions_topic=settings.definitions_topic, pods_topic=settings.pods_topic, nodes_topic=settings.nodes_topic,
        state_topic=settings.state_topic, partitions=settings.partitions, security=settings.security(),
    ))
    quiet_kafka_logs()
    collect_garbage_rarely()
    trim_heap_in_the_background()

    class Worker(faust.Worker):
        def _schedule_shutdown(self, signal) -> None:
            if not self._signal_stop_time:
                exit_unless_stopped_within(STOP_WITHIN)
            super()._schedule_shutdown(signal)

    Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False).execute_from_commandline()


def exit_unless_stopped_within(seconds: float) -> None:
    """Exit the process (status 1) if it is still there `seconds` from now (a daemon thread).

    Why: a graceful stop waits for things outside the worker (a rebalance under way, a
    transactional producer's broker, a state recovery's reads), and one of them can hold it for
    minutes.  An exit mid-way is a crash, which the processors are built to survive: what was
    not committed is aborted and processed again by the next owner of its partitions."""
    def watch() -> None:
        time.sleep(seconds)
        print(f"not stopped within {seconds:.0f} s of the signal: exiting", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="stop-watchdog", daemon=True).start()


def pricing_of(settings: Settings) -> Pricing | None:
    """The pricing file the warehouse writer keeps the finished days' cost rows with (``settings.pricing``,
    WORKLOADMAP_PRICING: the one `workloadmap cost` reads, so that its reports by day and workload read
    them); PricingError, naming the file, before anything starts."""
    return None if not settings.pricing else load_pricing(settings.pricing)


def exporter_topics(settings: Settings) -> dict[str, str]:
    """The topics the exporter reads, each with what it carries."""
    return {settings.workloads_topic: WORKLOADS, settings.transitions_topic: TRANSITIONS,
            settings.deadletter_topic: DEADLETTERS, settings.pods_topic: PODS, settings.nodes_topic: NODES}


@dataclass
class RunningExporter:
    """An exporter consumer in a thread of its own and the HTTP server of its series."""

    consumer: TopicsConsumer
    server: MetricsServer
    thread: threading.Thread

    def close(self) -> None:
        self.consumer.stop()
        self.thread.join(10)
        self.server.close()


def start_exporter(settings: Settings, address: str, *, pod_series: bool = True, role: str = "exporter",
                   started: Callable[[MetricsServer], object] = lambda server: None) -> RunningExporter:
    """The exporter's consumer and its HTTP server on `address`, started.

    Binding comes first, so a taken address fails before anything reads Kafka
    (OSError; AddressError for one that is not [HOST]:PORT).
    """
    tracker = Tracker(pod_series=pod_series, health=Health(consumer=role))
    consumer = TopicsConsumer(tracker, settings.bootstrap_servers, exporter_topics(settings),
                              client_id=f"{settings.client_id}-{role}", security=settings.security())
    server = MetricsServer(address, tracker.exposition_parts, exposition_gzip=tracker.exposition_gzip,
                           ready=consumer.ready.is_set, healthy=consumer.healthy).start()
    started(server)
    thread = threading.Thread(target=consumer.run, name=f"{role}-consumer", daemon=True)
    thread.start()
    return RunningExporter(consumer, server, thread)


def run_exporter(settings: Settings, address: str, *, pod_series: bool = True, stop: threading.Event | None = None,
                 started: Callable[[MetricsServer], object] = lambda server: None) -> None:
    """Serve the records as Prometheus series on `address` until `stop` (default: SIGTERM or SIGINT) is set.

    Reads every record the topics hold at each start (the series are rebuilt,
    nothing kept on disk); /readyz answers 200 once caught up.
    """
    quiet_kafka_logs()
    stop = stop or stop_on_signals()
    exporter = start_exporter(settings, address, pod_series=pod_series, started=started)
    collect_garbage_rarely()
    trim_heap_in_the_background()
    try:
        while not stop.wait(0.5) and exporter.thread.is_alive():
            pass
    finally:
        exporter.close()
    if exporter.consumer.failed is not None:
        raise exporter.consumer.failed


def serve_tracker(tracker: Tracker, address: str, *, stop: threading.Event | None = None,
                  started: Callable[[MetricsServer], object] = lambda server: None) -> None:
    """Serve what `tracker` holds on `address` until `stop` (default: SIGTERM or SIGINT) is set
    (the demo's series, once its history is processed)."""
    stop = stop or stop_on_signals()
    tracker.refresh()
    server = MetricsServer(address, tracker.exposition_parts, exposition_gzip=tracker.exposition_gzip).start()
    try:
        started(server)
        while not stop.wait(0.5):
            pass
    finally:
        server.close()


def serve_reads(path: str, address: str, *, token: str | None = None, stop: threading.Event | None = None,
                started: Callable[[ReadServer], object] = lambda server: None) -> None:
    """Serve the fresh reads of the warehouse file `path` on `address` until `stop` (default: SIGTERM or
    SIGINT) is set: the demo's history once written (``demo --serve``), its writer this process."""
    stop = stop or stop_on_signals()
    with Warehouse(path) as warehouse:
        server = ReadServer(parse_address(address), token=token)
        try:
            started(server)
            while not stop.wait(0.1):
                server.answer(warehouse)
        finally:
            server.close()


def run_warehouse(settings: Settings, *, snapshot_path: str | None = None, snapshot_every: float = 60.0,
                  stop: threading.Event | None = None, metrics: str | None = None, serve: str | None = None,
                  started: Callable[[ReadServer], object] = lambda server: None) -> WriteResult:
    """The single writer of the warehouse, until `stop` (default: SIGTERM or SIGINT) is set.

    Returns the totals written, once the batch in hand is committed and the
    writer closed.  With `snapshot_path`, a read-only copy is kept there,
    refreshed every `snapshot_every` seconds, for readers while it runs.
    With `metrics` ([HOST]:PORT), the exporter's series are served there too
    (an exporter consumer in the same process, reading the same topics).
    With `serve` ([HOST]:PORT), the fresh reads are served there (warehouse/answering.py):
    `started` is told the server once it listens.
    """
    pricing = pricing_of(settings)
    check_memory_limit(settings.duckdb_memory_limit)
    token = settings.read_token()  # an unreadable token file fails before anything starts
    quiet_kafka_logs()   # before the admin client: its connection's INFO lines are a dozen a start
    ensure_topics(settings, wait=settings.broker_wait)
    log.info("the topics are there at %s", settings.bootstrap_servers)
    stop = stop or stop_on_signals()
    exporter = start_exporter(settings, metrics, role="warehouse-exporter") if metrics else None
    reads = None
    if serve:
        reads = ReadServer(parse_address(serve), token=token)
        started(reads)
    writer = KafkaWarehouseWriter(
        settings.bootstrap_servers, settings.duckdb, pricing=pricing, memory_limit=settings.duckdb_memory_limit,
        topics=(settings.workloads_topic, settings.transitions_topic, settings.pods_topic, settings.nodes_topic),
        group_id=f"{settings.client_id}-warehouse", client_id=f"{settings.client_id}-warehouse",
        security=settings.security(), deadletter_topic=settings.deadletter_topic,
        transitions_topic=settings.transitions_topic, pods_topic=settings.pods_topic,
        nodes_topic=settings.nodes_topic, snapshot_path=snapshot_path, snapshot_every_s=snapshot_every,
        between_batches=None if reads is None else reads.answer)
    collect_garbage_rarely()
    trim_heap_in_the_background()
    try:
        return writer.run(stop)
    finally:
        if reads is not None:
            reads.close()
        if exporter is not None:
            exporter.close()


def connect_clusters(settings: Settings) -> list[Cluster]:
    """Connections to the clusters of ``settings.clusters``; ClusterConfigError when one cannot be
    had or two share an id (the id every record carries)."""
    clusters = [connect(ClusterSpec.parse(text, settings.kubeconfig)) for text in settings.clusters]
    ids = [c.id for c in clusters]
    if len(set(ids)) != len(ids):
        raise ClusterConfigError(f"cluster ids must be unique: {', '.join(ids)}")
    return clusters


def run_watchers(settings: Settings, clusters: list[Cluster], catalog: Catalog, *, embedded: bool = False,
                 stop: threading.Event | None = None, started: Callable[[str], object] = lambda target: None,
                 metrics: str | None = None, pod_series: bool = True, serve: str | None = None) -> None:
    """Watch `clusters` and publish their raw events until `stop` (default: SIGTERM or SIGINT) is set.

    Into the raw topic, or with `embedded` through an EmbeddedPipeline into the
    ``settings.duckdb`` warehouse (no broker).  `started` is told where the
    events go once publishing can start.  With `metrics` ([HOST]:PORT), the
    watchers' counters (events, relists, errors by cluster and kind) are served
    there, ready once every cluster is listed; embedded, with the exporter's
    series of the records the pipeline makes.  With `serve` ([HOST]:PORT, embedded only) the
    warehouse's fresh reads are served there, answered between publishes.  On return the checkpoints are
    saved and the publisher, the warehouse, the server and the clusters are closed.  Raises
    WatchingFailed when the publisher or a watcher thread failed (the watchers stop at once: a
    process that went on would publish nothing more, silently).
    """
    if serve and not embedded:
        raise ValueError("serving the warehouse's reads needs the embedded pipeline (run warehouse --serve otherwise)")
    quiet_kafka_logs()
    token = settings.read_token() if serve else None
    stop = stop or stop_on_signals()
    tracker = Tracker(pod_series=pod_series, health=Health(consumer="embedded")) if metrics else None
    if embedded:
        warehouse = Warehouse(settings.duckdb, pricing=pricing_of(settings), memory_limit=settings.duckdb_memory_limit)
        publisher = EmbeddedPipeline(warehouse, batch=1000, tracker=tracker)
        target = f"the embedded pipeline into {settings.duckdb}"
    else:
        ensure_topics(settings, wait=settings.broker_wait)
        warehouse = None
        publisher = raw_publisher(settings, "watchers")
        target = f"{settings.raw_topic} at {settings.bootstrap_servers}"
    watching = Watching(clusters, catalog, publisher, checkpoint_dir=settings.checkpoint_dir, stop=stop)
    server = None
    if tracker is not None:
        tracker.health.count_watchers(watching.counts)
        server = (MetricsServer(metrics, tracker.exposition_parts, exposition_gzip=tracker.exposition_gzip,
                                ready=watching.synced) if embedded
                  else MetricsServer(metrics, tracker.health.exposition, ready=watching.synced)).start()
        target += f"; metrics at http://{metrics}/metrics"
    reads = None
    if serve:
        reads = ReadServer(parse_address(serve), token=token)
        target += f"; reads at http://{serve}/api/v1"
    started(target)
    collect_garbage_rarely()   # a relist parses pages of hundreds of objects while the tracked set grows
    trim_heap_in_the_background()
    try:
        with watching:
            while not stop.wait(0.5 if reads is None else 0.1):
                if reads is not None:
                    watching.between_publishes(lambda: reads.answer(warehouse))
    finally:
        if reads is not None:
            reads.close()
        try:
            publisher.close()
        except Exception:
            if watching.failure is None:
                raise
        finally:
            if server is not None:
                server.close()
            if warehouse is not None:
                warehouse.close()
            for cluster in clusters:
                cluster.close()
    if watching.failure is not None:
        raise WatchingFailed(f"the watchers stopped: {watching.failure}")
