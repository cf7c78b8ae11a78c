"""The faust-streaming app: raw events in, records, transitions and dead letters out.

One agent consumes the raw topic, a batch at a time (the batched path):

1. ``consuming.RawQueue.take`` takes the raw records the consumer fetched
   and queued, up to about MAX_BATCH, without waiting for more (an idle
   worker handles an event as soon as it arrives; a busy one gets large
   batches), keeping what faust's per-message path does that matters here
   (stale generations skipped, records tracked as unacked for rebalances and
   stops) a run of records at a time;
2. :meth:`~processing.Processor.process_batch` resolves the batch in one
   pass into outputs per raw partition, each event against the state the
   events before it left;
3. ``sending.OutputBatches`` appends them to one record batch per raw
   partition and output topic; records go to the same partition number of
   the records topic as their raw event, with transitions, dead letters and
   definitions likewise;
4. a sender task (``pipelining.OutputPipeline``) hands the batches appended
   so far to each partition's transactional producer, then acks their
   records (``consuming.ack_batches``), so their offsets may commit; meanwhile
   the agent goes on with the next batches.

Delivery: faust's ``exactly_once`` guarantee wraps the outputs and the input
offsets of each commit in one Kafka transaction; readers use
``read_committed``.  The per-object state (the summary of each live object's
latest record, owner links, pending pods: processors/remembering.py) is kept in
memory and rebuilt, when a worker is assigned raw partition p, from partition p
of the compacted state topic (committed messages only), which the outputs'
transactions write with the records.  So after a crash the state is exactly
what the committed records say, and the raw
events after the committed offsets are processed again against it: nothing
is lost and nothing repeated.  A batch changes none of this: its events are
acked after their outputs are in the producer, so a commit never carries an
offset without its outputs, and outputs that commit before their offsets make
the re-delivered events duplicates, which produce nothing.  (A faust Table is
not used for this state: in exactly-once mode faust commits a transaction
without first flushing the table's changelog buffer, so a killed worker could
leave offsets committed and their state changes lost.)

Several workers split the raw topic's partitions, and the state with them.
Definitions applied to clusters, and the objects their references name, are
the exception: every worker needs all of them (see ClusterDefinitions).  A
workload that waits for such an object is resolved again by the relayed copy
of the object's event that reaches its own raw partition (processing.py), so
the worker that learns the object from the definitions topic has nothing to
resolve from there, and no partition's transaction carries outputs without
an offset of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
import ssl
import tempfile
from dataclasses import dataclass, field

import faust
from faust.assignor import PartitionAssignor
from kafka.errors import KafkaError

from workloadmap.catalog import records

from .consuming import RawConsumer, ack_batches, current
from .pipelining import OutputPipeline
from .processing import KIND_WAIT, MemoryStates, Processor
from .sending import OutputBatches, OutputProducer, OutputTopics, request_rebalance

MAX_BATCH = 1000  # events processed together, at most
MAX_UNSENT = 4 * MAX_BATCH   # events processed while a send waits, at most (pipelining.py)
LOST_REBALANCE_AGAIN = 30.0  # seconds a lost transaction's partition waits for its rebalance before asking again

log = logging.getLogger(__name__)


@dataclass
class WorkerSettings:
    """What one faust worker of the processors is given: its broker, topics and app id (the services'
    settings, ``workloadmap.settings.Settings``, are turned into these by ``workloadmap.running``)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    app_id: str = "workloadmap-processors"
    raw_topic: str = records.RAW_TOPIC
    workloads_topic: str = records.WORKLOADS_TOPIC
    transitions_topic: str = records.TRANSITIONS_TOPIC
    deadletter_topic: str = records.DEADLETTER_TOPIC
    definitions_topic: str = records.DEFINITIONS_TOPIC
    pods_topic: str = records.PODS_TOPIC
    nodes_topic: str = records.NODES_TOPIC
    state_topic: str = records.STATE_TOPIC
    partitions: int = 3
    replication_factor: int = 1
    exactly_once: bool = True
    security: dict = field(default_factory=dict)  # security_protocol, sasl_*, ssl_* (never logged)


def _credentials(security: dict):
    if not security:
        return None
    protocol = security.get("security_protocol", "PLAINTEXT").upper()
    ssl_context = None
    if "SSL" in protocol:
        ssl_context = ssl.create_default_context(cafile=security.get("ssl_cafile"))
        if security.get("ssl_certfile"):
            ssl_context.load_cert_chain(security["ssl_certfile"], security.get("ssl_keyfile"))
    if "SASL" in protocol:
        return faust.SASLCredentials(
            username=security.get("sasl_plain_username"), password=security.get("sasl_plain_password"),
            mechanism=security.get("sasl_mechanism", "PLAIN"), ssl_context=ssl_context)
    return faust.SSLCredentials(ssl_context) if ssl_context else None


class PartitionStates:
    """Object states of the raw partitions this worker owns, rebuilt from the state topic."""

    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self.by_partition: dict[int, MemoryStates] = {}
        self.recovered: dict[int, int] = {}   # raw partition -> state messages its last recovery read

    def of(self, partition: int) -> MemoryStates:
        states = self.by_partition.get(partition)
        if states is None:
            states = self.by_partition[partition] = MemoryStates()
        return states

    def forget(self, partitions) -> list[MemoryStates]:
        """Drop these partitions' stores; the stores dropped."""
        return [store for store in (self.by_partition.pop(p, None) for p in partitions) if store is not None]

    def held(self) -> dict[int, int]:
        """Raw partition -> the entries its store holds (MemoryStates.objects)."""
        return {p: store.objects() for p, store in sorted(self.by_partition.items())}

    def uids(self) -> set[str]:
        """The uids of the objects of every store held (MemoryStates.uids)."""
        return set().union(*(store.uids() for store in self.by_partition.values()))

    def recover(self, partitions) -> None:
        """Read these partitions of the state topic, committed messages only, the latest message of
        each key (a tombstone forgets it), into fresh stores (blocking: run it in an executor).

        Only the state topic: compacted, it holds about one message per live object (and the deleted
        ones not yet forgotten), so a recovery costs the live objects, not the history."""
        from kafka import KafkaConsumer, TopicPartition

        settings = self.settings
        consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False,
                                 isolation_level="read_committed", client_id=f"{settings.app_id}-recovery",
                                 **_kafka_python_security(settings.security))
        latest: dict[int, dict[bytes, bytes]] = {p: {} for p in partitions}
        read = dict.fromkeys(partitions, 0)
        try:
            tps = []
            if settings.state_topic in consumer.topics():
                tps = [TopicPartition(settings.state_topic, p) for p in partitions]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = consumer.end_offsets(tps)  # the last stable offsets: committed messages only
            remaining = {tp for tp in tps if consumer.position(tp) < ends[tp]}
            while remaining:
                for tp, messages in consumer.poll(timeout_ms=1000).items():
                    kept = latest[tp.partition]
                    read[tp.partition] += len(messages)
                    for m in messages:
                        if m.value is None:
                            kept.pop(m.key, None)
                        else:
                            kept[m.key] = m.value
                remaining = {tp for tp in remaining if consumer.position(tp) < ends[tp]}
        finally:
            consumer.close()
        for p, kept in latest.items():
            self.by_partition[p] = MemoryStates.from_state(kept.items())
        self.recovered.update(read)


def collect_what_was_given_back() -> None:
    """Collect the garbage after a rebalance that changed what this worker holds.

    Why: the partitions a worker gives up free their stores and the resolver's trees of their
    objects, and a recovery frees what it read (every state message of a partition, as bytes and
    decoded) once the store is built; those are millions of small objects, some in cycles that
    only a collection frees (the worker collects rarely on purpose:
    running.collect_garbage_rarely).  What they free goes back to glibc's heap, and from there to
    the operating system by the process's heap trimming (workloadmap/trimming.py), so a worker that
    once took over a killed peer's partitions does not keep that RSS after giving them back.  Not
    per batch: a collection walks every tracked object, and the live set changes size only when
    the partitions change."""
    gc.collect()


class ClusterDefinitions:
    """Every worker's copy of the definitions clusters applied: the whole definitions topic.

    A WorkloadMap raw event lands in one raw partition, so only the worker owning it
    sees it; that worker applies it and also publishes it to the (compacted) definitions
    topic in the same transaction.  Every worker reads that topic in full, committed
    messages only: at each partition assignment before processing (so a restarted worker
    knows every definition again) and every few seconds (so the other workers learn it).
    Newest resourceVersion wins (Processor.apply_definition), so the order in which
    partitions are read does not matter.
    """

    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self._consumer = None

    def read_new(self) -> list[dict]:
        """The events published since the last call (blocking: run it in an executor)."""
        from kafka import KafkaConsumer, TopicPartition

        if self._consumer is None:
            consumer = KafkaConsumer(bootstrap_servers=self.settings.bootstrap_servers, enable_auto_commit=False,
                                     isolation_level="read_committed", auto_offset_reset="earliest",
                                     client_id=f"{self.settings.app_id}-definitions",
                                     **_kafka_python_security(self.settings.security))
            partitions = consumer.partitions_for_topic(self.settings.definitions_topic)
            if not partitions:
                consumer.topics()   # a fresh consumer may not have fetched metadata yet: fetch it now
                partitions = consumer.partitions_for_topic(self.settings.definitions_topic)
            if not partitions:  # no such topic (yet): try again at the next call
                consumer.close()
                return []
            consumer.assign([TopicPartition(self.settings.definitions_topic, p) for p in sorted(partitions)])
            self._consumer = consumer
        consumer = self._consumer
        tps = list(consumer.assignment())
        ends = consumer.end_offsets(tps)
        events = []
        deadline = time.monotonic() + 60  # never hold the worker: the rest comes with the next call
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                events.extend(records.decode(m.value) for m in messages if m.value is not None)
        return events

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None   # the next read_new starts a fresh consumer


def _kafka_python_security(security: dict) -> dict:
    return {k: v for k, v in security.items()
            if k in ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                     "ssl_cafile", "ssl_certfile", "ssl_keyfile")}


class ActiveOnlyAssignor(PartitionAssignor):
    """faust's partition assignor, without standby partitions.

    Standbys serve table changelogs, and this app has no table; but faust's assignor gives
    standbys of every topic, the raw topic included (``table_standby_replicas``, 1 by default),
    and faust's transactions do not stop the producer of a partition that goes from active to
    standby.  Assigned that partition again, a worker went on with that stale producer, fenced
    long before by the partition's owner meanwhile: its first commit failed and the partition was
    given up again, and a standby's fetches were wasted.  Not ``table_standby_replicas=0``: faust
    then falls back to aiokafka's round-robin assignor, which its exactly-once transactions cannot
    work with (they map partitions to transactional ids through this assignor's topic groups)."""

    def __init__(self, app, replicas: int = 0) -> None:
        super().__init__(app, replicas=0)


def create_app(settings: WorkerSettings, processor: Processor | None = None) -> faust.App:
    processor = processor or Processor(kind_wait=KIND_WAIT)
    # faust wants a data directory (for local table stores); this app keeps its state in
    # memory and rebuilds it from the state topic, so a private temporary one does, and
    # no `<app id>-data` directory is left in the working directory
    data_dir = tempfile.TemporaryDirectory(prefix="workloadmap-processors-")
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{hp.strip()}" for hp in settings.bootstrap_servers.split(",")],
        broker_credentials=_credentials(settings.security),
        store="memory://",
        datadir=data_dir.name,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        processing_guarantee="exactly_once" if settings.exactly_once else "at_least_once",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        web_enabled=False,
        key_serializer="raw",
        value_serializer="raw",
        broker_commit_every=2000,
        # no linger: the agent hands over whole record batches (sending.py), and aiokafka takes
        # one pending batch per partition and one request in flight per broker, so what comes
        # while a request is in flight goes in the next one.  A lingering batch held the next
        # batch of its partition until it left: a linger cost a worker alone a third of its
        # throughput (bench/RESULTS.md)
        producer_linger=0,
        producer_max_batch_size=1 << 20,
        producer_max_request_size=records.MAX_OUTPUT_MESSAGE_BYTES,
        # a record becomes readable (read_committed) when its transaction commits: every 0.2 s,
        # or after broker_commit_every acked events (a shorter interval, a shorter latency tail)
        broker_commit_interval=0.2,
        # aiokafka fetches a partition again only once its buffered records are consumed, so
        # the per-partition fetch size bounds the rate: 1 MiB (faust's default) held one worker
        # below its CPU's pace, 16 MiB does not (bench/RESULTS.md)
        consumer_max_fetch_size=16 << 20,
        broker_session_timeout=15.0,  # a killed worker's partitions move on after 15 s, not 60
        PartitionAssignor=ActiveOnlyAssignor,
    )
    app.transport.Consumer = RawConsumer.for_topic(settings.raw_topic)   # this app's transport only (consuming.py)
    app.transport.Producer = OutputProducer   # (sending.py)
    raw = app.topic(settings.raw_topic, key_type=bytes, value_type=bytes, partitions=settings.partitions)
    states = PartitionStates(settings)
    definitions = ClusterDefinitions(settings)
    reading = asyncio.Lock()   # one reader at a time: the consumer is not thread-safe

    async def read_definitions():
        async with reading:
            events = await asyncio.get_running_loop().run_in_executor(None, definitions.read_new)
        for event in events:
            try:
                processor.apply_definition(event)
            except Exception as exc:  # noqa: BLE001 - accepted once, so a newer release rejects it: keep the rest
                app.log.warning("definition from %s not applied: %s", settings.definitions_topic, exc)

    @app.timer(interval=5.0)
    async def follow_definitions():
        # A timer's error would stop the worker: while the broker is away (a restart, a
        # network cut) the definitions simply come with a later tick.  The assignment's
        # read below is not guarded: a worker must not process without the definitions.
        try:
            await read_definitions()
        except KafkaError as exc:
            definitions.close()
            app.log.warning("definitions topic not read (next try in 5 s): %s", exc)

    # faust goes on delivering messages while the assignment handler below awaits its
    # executor reads; the agent waits for it, or it would process against missing state
    ready = asyncio.Event()

    @app.timer(interval=5.0)
    async def rebalance_when_lost():
        # A lost partition's transaction waits for a rebalance (sending.py); if the one asked for
        # did not come (the broker away, the request fell into a rebalance already under way), ask again.
        producer = app.producer
        if settings.exactly_once and producer.lost and time.monotonic() - producer.lost_at > LOST_REBALANCE_AGAIN:
            producer.lost_at = time.monotonic()
            request_rebalance(app)

    @app.on_partitions_assigned.connect
    async def recover_states(app, assigned, **kwargs):
        # What a worker holds for a raw partition is released here, when the assignment no longer
        # has it, not in faust's on_partitions_revoked: aiokafka's rebalances are eager, so a
        # revocation takes back every partition, the ones that stay included, and only the
        # assignment after it says which are gone.  Until then nothing processes (the flow is
        # suspended), and the agent waits for `ready` after it.
        ready.clear()
        mine = {tp.partition for tp in assigned if tp.topic == settings.raw_topic}
        # a partition whose transaction was lost has a state ahead of its commits (sending.py): rebuilt too
        lost = app.producer.take_lost() if settings.exactly_once else set()
        gone = (set(states.by_partition) - mine) | lost
        for store in states.forget(gone):
            processor.forget_objects(store.uids())   # their trees: only this partition's events used them
        fresh = sorted(mine - set(states.by_partition))
        if fresh:
            await asyncio.get_running_loop().run_in_executor(None, states.recover, fresh)
        await read_definitions()
        if gone or fresh:
            collect_what_was_given_back()   # once per rebalance that changed what this worker holds
            held, cached = states.held(), processor.cached_uids()
            log.warning("raw partitions %s held: %s entries (%s); objects with component trees: %s, "
                        "of other partitions: %s", sorted(held), sum(held.values()),
                        ", ".join(f"{p}: {n}" for p, n in held.items()) or "none", len(cached),
                        len(cached - states.uids()))
        ready.set()

    @app.agent(raw)
    async def process(stream):
        # One batch at a time: the raw records queued when the agent asks (RawQueue.take,
        # consuming.py: the stream's faust events are bypassed, so `stream` is not iterated),
        # resolved in one pass (Processor.process_batch), their outputs appended to one record
        # batch per raw partition and output topic (sending.py), handed to that partition's
        # transactional producer by the pipeline, which then acks the batch.  Acks are manual
        # and come last, so a committed offset never lacks its outputs.  The agent ends when
        # faust cancels it (the worker stops).
        outputs = OutputBatches(app, settings.raw_topic, settings.exactly_once, OutputTopics(
            settings.workloads_topic, settings.transitions_topic, settings.deadletter_topic,
            settings.definitions_topic, settings.pods_topic, settings.nodes_topic, settings.state_topic),
            settings.partitions)
        await outputs.start()
        # the batch's outputs are sent, and its events acked, by the pipeline's sender task while
        # the agent processes the next batches (processors/pipelining.py); a failure to send
        # crashes the worker, which resumes from its last commit once restarted
        consumer = app.consumer
        queue = consumer.raw_queue

        def ack(runs):
            # the runs of a partition whose transaction was lost are not acked: processed again (sending.py)
            ack_batches(consumer, current(app, runs, outputs.take_dropped(), acking=True))

        pipeline = OutputPipeline(outputs, ack, app.crash, MAX_UNSENT)
        pipeline.start()
        try:
            while True:
                runs = await queue.take(app, MAX_BATCH)
                if not ready.is_set():
                    # the assignment's state recovery (recover_states); a stop does not wait for it:
                    # faust's stop waits for the runs in hand, so they are let go (not acked: read again)
                    while not ready.is_set() and not app.should_stop:
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(ready.wait(), 1.0)
                    if not ready.is_set():
                        for run in runs:
                            consumer.unacked.discard(run)
                        continue
                    runs = current(app, runs)
                outputs.add_batch(processor.process_batch(
                    [(r.key, r.value, r.topic, r.partition, r.offset) for run in runs for r in run.records],
                    states.of))
                await pipeline.hand_over(runs)
        finally:
            await pipeline.stop()

    app.workloadmap_data_dir = data_dir   # held by the app: the directory lives as long as the app does
    return app
