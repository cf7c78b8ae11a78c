"""The Kafka writer: the workloads, transitions, pods and nodes topics into the warehouse, exactly once.

The core (``writing.Warehouse``) knows no transport; this module is the thin
Kafka side around it, as ``processors/`` wraps its ``Processor``:

- ``check_messages``: a batch of messages parsed once each and checked
  (``checking.py``), malformed ones turned into dead letters with their reason;
- ``KafkaWarehouseWriter``: reads every partition from the offsets the file
  stores, writes each batch with the offsets after it in one transaction, and
  sends the dead letters.

kafka-python is imported here only, and only when a writer connects.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import msgspec
import orjson

from workloadmap.catalog import records
from workloadmap.catalog.records import (
    DEADLETTER_TOPIC, NODES_TOPIC, PODS_TOPIC, TRANSITIONS_TOPIC, WORKLOADS_TOPIC, DeadLetter)

from . import allocating
from .checking import MalformedRecord, check_records, check_transition, fast_rows, no_cyclic_collection
from .pricing import Pricing
from .writing import DEFAULT_CONSUMER, Warehouse, WriteResult

log = logging.getLogger(__name__)

WRITER_THREADS = 1  # DuckDB threads of the Kafka writer (see KafkaWarehouseWriter.__init__)
STAGE = "warehouse"


def check_messages(messages, transitions_topic: str = TRANSITIONS_TOPIC, *, allocations: dict | None = None):
    """A batch of Kafka messages as the writer takes them: (state rows, their texts, transition
    rows, dead letters, offsets after the batch, whether every text was parsed as strict JSON).

    `allocations` maps the pods and nodes topics to their check and the list their rows go to
    (``allocation_topics``); without it every message that is not a transition is taken for a
    workload record.

    Each value is parsed once: a workload record only for the fields the writer reads
    (``_ReadFields``), a transition whole (orjson: strict JSON; the standard library when it
    refuses, so what is malformed is what that rejects); the records are checked together
    (``fast_rows``, and check_record on their whole values whenever it declines); what cannot be
    stored becomes a dead letter with its reason."""
    rows, texts, transitions, dead, offsets = [], [], [], [], {}
    values, kept = [], []  # the workload records, checked together

    def dead_letter(m, exc):
        if isinstance(exc, MalformedRecord):
            reason, detail = exc.reason, exc.detail
        else:
            reason, detail = records.MALFORMED_JSON, str(exc)[:200]
        dead.append(DeadLetter(STAGE, reason, detail, m.value or b"", key=m.key, topic=m.topic,
                               partition=m.partition, offset=m.offset))

    with no_cyclic_collection():
        _parse_messages(messages, transitions_topic, transitions, values, kept, offsets, dead_letter,
                        allocations or {})
        try:
            checked = fast_rows(values)  # the batch's usual case: every record valid
        except Exception:  # check_record decides, on the whole records (the read fields lack what it reports)
            checked = _check_whole(kept)
        values.clear()  # freed now: the collector, back on, does not walk them
    texts_are_json = all(strict for _, _, strict in kept)
    for row, (m, text, _) in zip(checked, kept):
        if isinstance(row, ValueError):  # as when records were checked one by one
            dead_letter(m, row)
        else:
            rows.append(row)
            texts.append(text)
    return rows, texts, transitions, dead, offsets, texts_are_json


_ABSENT = object()  # a required field the record lacks (fast_rows declines it: not of its type)


class _ReadFields(msgspec.Struct):
    """The fields of a workload record the writer reads (check_record's), and only those.

    Why: parsing a whole record builds some hundred objects (its components, their pods and
    requests), and building and freeing them was most of the Kafka writer's parse; the record's
    text is stored as received anyway.  The
    decoder still reads the whole text, so what it accepts is strict JSON (NaN, control
    characters, lone surrogates refused; it leaves invalid UTF-8 in fields it skips to the text's
    own decoding, which refuses it).  A field absent from the record is None here, as ``dict.get``
    gives it, or _ABSENT for a required one.
    """

    cluster: object = _ABSENT
    uid: object = _ABSENT
    kind: object = _ABSENT
    status: object = _ABSENT
    eventType: object = _ABSENT
    deleted: object = _ABSENT
    observedAt: object = _ABSENT
    total: object = _ABSENT
    apiVersion: object = None
    namespace: object = None
    name: object = None
    definition: object = None
    framework: object = None
    origin: object = None
    phase: object = None
    resourceVersion: object = None
    generation: object = None
    creationTimestamp: object = None
    references: object = None   # the version key says which referenced objects a record was resolved with


_READ_FIELDS = msgspec.json.Decoder(_ReadFields)


def _whole(data: bytes) -> tuple[object, bool]:
    """A message's whole value and whether it is strict JSON: orjson's, else the standard library's
    (NaN...: strict False), else its ValueError."""
    try:
        return orjson.loads(data), True
    except orjson.JSONDecodeError:
        return json.loads(data), False


def allocation_topics(pods: list, nodes: list, pods_topic: str = PODS_TOPIC, nodes_topic: str = NODES_TOPIC) -> dict:
    """check_messages' `allocations`: pod records checked into `pods`, node records into `nodes`."""
    return {pods_topic: (allocating.check_pod, pods), nodes_topic: (allocating.check_node, nodes)}


def _parse_messages(messages, transitions_topic, transitions, values, kept, offsets, dead_letter,
                    allocations) -> None:
    """Each value parsed once: a workload record's read fields (``_ReadFields``, as a dict) when it
    is strict JSON, else the whole value (strict False: DuckDB checks its text); a transition, a pod
    or a node record whole."""
    read_fields, asdict = _READ_FIELDS.decode, msgspec.structs.asdict
    for m in messages:
        key = (m.topic, m.partition)
        if offsets.get(key, -1) <= m.offset:
            offsets[key] = m.offset + 1
        data = m.value
        try:
            if m.topic == transitions_topic:
                transitions.append(check_transition(None if data is None else _whole(data)[0]))
                continue
            allocation = allocations.get(m.topic)
            if allocation is not None:
                check, into = allocation
                into.append(check(None if data is None else _whole(data)[0]))
                continue
            if data is None:
                value, strict = None, True
            else:
                try:
                    value, strict = asdict(read_fields(data)), True
                except msgspec.DecodeError:  # not strict JSON, or not an object
                    value, strict = _whole(data)  # raises what the standard library rejects
            text = data.decode() if data is not None else ""  # (None is refused by check_record)
            values.append(value)
            kept.append((m, text, strict))
        except (ValueError, UnicodeDecodeError) as exc:
            dead_letter(m, exc)


def _check_whole(kept) -> list:
    """check_records over the kept messages' whole values (a row, or the ValueError refusing it)."""
    values, errors = [], {}
    for n, (m, _, _) in enumerate(kept):
        try:
            values.append(None if m.value is None else _whole(m.value)[0])
        except ValueError as exc:
            values.append(None)
            errors[n] = exc
    return [errors.get(n, row) for n, row in enumerate(check_records(values))]


CAUGHT_UP_POLL_S = 0.02  # a poll this long that brings nothing: the writer has caught up
# A batch gathers for at least this many times the last batch's write (its CPU time) after its first
# message, so that its fixed cost is shared by more records when writing is costly (see poll_batch).
GATHER_PER_WRITE = 1.0


ASSIGN_EVERY_S = 10.0  # how often the writer looks for partitions it does not read yet


class KafkaWarehouseWriter:
    """Consumes the workloads, transitions, pods and nodes topics into a Warehouse, exactly once.

    Kafka's own committed offsets are NOT the source of truth: the consumer
    reads every partition of the topics (``_assign``), each from the offset stored in DuckDB
    (or from the beginning when the file has none), and each batch is written
    with the offsets after it in the same transaction.  After that commit the
    offsets are also committed to Kafka, only so that lag shows up in the usual
    tools.  Malformed messages are dead-lettered (stage ``warehouse``) before
    the batch commits (at-least-once: a crash in between may repeat a dead
    letter) and their offsets advance with the batch.

    `security`: extra kafka-python settings for a secured cluster
    (``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username``,
    ``ssl_cafile``, ...), passed to the consumer and the dead-letter producer.
    `pricing`: what the Warehouse keeps the daily cost rows with (rolling.keep_costs).
    `memory_limit`: DuckDB's memory bound in the writer (Warehouse; None: DuckDB's default).
    """

    def __init__(self, bootstrap_servers, path, topics=(WORKLOADS_TOPIC, TRANSITIONS_TOPIC, PODS_TOPIC, NODES_TOPIC), *,
                 group_id: str = DEFAULT_CONSUMER, batch_size: int = 5000, max_wait_ms: int = 500,
                 security: dict | None = None, client_id: str = "workloadmap-warehouse",
                 commit_to_kafka: bool = True, deadletter_topic: str = DEADLETTER_TOPIC,
                 transitions_topic: str = TRANSITIONS_TOPIC, pods_topic: str = PODS_TOPIC,
                 nodes_topic: str = NODES_TOPIC,
                 snapshot_path: str | os.PathLike | None = None, snapshot_every_s: float = 60.0,
                 on_batch=None, pricing: Pricing | None = None, between_batches=None,
                 memory_limit: str | None = None):
        self.bootstrap_servers = bootstrap_servers
        self.topics = tuple(topics)
        self.group_id = group_id
        self.batch_size = batch_size
        self.max_wait_ms = max_wait_ms
        self.security = dict(security or {})
        self.client_id = client_id
        self.commit_to_kafka = commit_to_kafka
        self.deadletter_topic = deadletter_topic
        self.transitions_topic = transitions_topic
        self.pods_topic, self.nodes_topic = pods_topic, nodes_topic
        self.snapshot_path = snapshot_path
        self.snapshot_every_s = snapshot_every_s
        self.on_batch = on_batch  # called with (WriteResult, message count) after each commit
        # called with the Warehouse after each poll, committed or idle (answering.ReadServer.answer)
        self.between_batches = between_batches
        self.warehouse = Warehouse(path, consumer=group_id, pricing=pricing, memory_limit=memory_limit)
        # One DuckDB thread: a batch is a dozen small statements, and spread over threads they
        # cost more CPU and wait for cores the processors and the broker also want.
        self.warehouse.conn.execute(f"SET threads = {WRITER_THREADS}")
        self.totals = WriteResult()
        self.dead_letters = 0
        self._stop = threading.Event()
        self._pending: list = []
        self._consumer = None
        self._producer = None
        self._last_snapshot = 0.0
        self._last_write_s = 0.0   # the CPU time of the last batch's write (poll_batch)
        self._closed = False

    # ------------------------------------------------------------------ Kafka clients

    def _connect(self):
        from kafka import KafkaConsumer
        self._consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, group_id=self.group_id, client_id=self.client_id,
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=self.batch_size,
            isolation_level="read_committed",  # the processors publish in transactions
            # a partition with records still buffered is left out of the next fetch, and new
            # records for it wait until that fetch returns: hold fetches 100 ms, not 500
            fetch_max_wait_ms=100,
            **self.security)
        self._assigned = frozenset()
        self._assign()

    def _assign(self) -> None:
        """Read every partition of the topics, each from the offset DuckDB stores for it.

        Why assigned, not subscribed: a warehouse file has one writer (DuckDB allows one), so
        there is nothing to balance, and a group's rebalancing only cost: a writer restarted
        after a crash waited for the dead member's session to expire (45 s) before reading,
        and kafka-python (3.0.12) now and then never finished joining when the topics were
        new.  The group id still names the offsets committed to Kafka (for lag monitoring).
        Partitions the broker does not know yet (a topic still to be created, partitions
        added later) are picked up by later calls (``poll_batch``, every ASSIGN_EVERY_S).
        """
        from kafka.structs import TopicPartition
        partitions = frozenset(TopicPartition(t, p) for t in self.topics
                               for p in self._consumer.partitions_for_topic(t) or ())
        self._assign_checked = time.monotonic()
        if partitions <= self._assigned:
            return
        self._flush()  # what was read so far is written, so DuckDB's offsets are where reading stands
        self._consumer.assign(sorted(partitions))
        stored = self.warehouse.offsets()
        for tp in partitions:
            offset = stored.get((tp.topic, tp.partition))
            if offset is None:
                self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, offset)
        self._assigned = partitions
        log.info("warehouse writer reads %s", sorted((tp.topic, tp.partition) for tp in partitions))

    def _dead_letter_producer(self):
        if self._producer is None:
            from kafka import KafkaProducer
            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all",
                                           client_id=self.client_id + "-deadletter",
                                           max_request_size=records.MAX_OUTPUT_MESSAGE_BYTES, **self.security)
        return self._producer

    # ------------------------------------------------------------------ batches

    def poll_batch(self) -> WriteResult | None:
        """Read up to batch_size messages and write them.

        A batch ends when it is full, after max_wait_ms, or once the writer has caught up (a
        short poll brings nothing more) and the batch has gathered for GATHER_PER_WRITE times
        the last batch's write (its CPU time, this thread's: DuckDB runs the writer's statements
        on it) since its first message.  Why that wait: a batch costs a dozen
        statements whatever its size, and the processors' records become readable a
        transaction at a time (every 0.2 s under load), so a batch that ended when caught up
        held one transaction's records and its fixed cost was most of the writer's CPU per
        record (bench/RESULTS.md).  The wait follows the cost: an idle writer's small batch
        writes in milliseconds and waits as little; a busy one's write costs more, the next
        batch gathers longer and shares its fixed cost among more records, the latency it adds
        bounded by max_wait_ms.  CPU time, not wall time: on cores shared with other work a
        write's wall time grows with the wait for a core, and gathering longer then would only
        add latency.
        """
        if self._consumer is None:
            self._connect()
        elif time.monotonic() - self._assign_checked >= ASSIGN_EVERY_S or not self._assigned:
            self._assign()
        if not self._assigned:  # none of the topics exists yet
            self._stop.wait(self.max_wait_ms / 1000)
            return None
        max_wait = self.max_wait_ms / 1000
        deadline = time.monotonic() + max_wait
        gathered = None   # until when the batch gathers at least, from its first message on
        while len(self._pending) < self.batch_size and not self._stop.is_set():
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                break
            if self._pending:
                if gathered is None:
                    gathered = now + min(GATHER_PER_WRITE * self._last_write_s, max_wait)
                timeout = min(left, max(gathered - now, CAUGHT_UP_POLL_S))
            else:
                timeout = left
            polled = self._consumer.poll(timeout_ms=max(1, int(timeout * 1000)),
                                         max_records=self.batch_size - len(self._pending))
            if not polled and self._pending and time.monotonic() >= gathered:
                break
            for messages in polled.values():
                self._pending.extend(messages)
        began = time.thread_time()
        result = self._flush()
        if result is not None:
            self._last_write_s = time.thread_time() - began
        self._maybe_snapshot()
        return result

    def _flush(self) -> WriteResult | None:
        if not self._pending:
            return None
        messages, self._pending = self._pending, []
        pods, nodes = [], []
        rows, texts, transitions, dead, offsets, texts_are_json = check_messages(
            messages, self.transitions_topic,
            allocations=allocation_topics(pods, nodes, self.pods_topic, self.nodes_topic))
        if dead:
            producer = self._dead_letter_producer()
            for letter in dead:
                producer.send(self.deadletter_topic, key=letter.key, value=records.encode(letter.to_dict()))
            producer.flush()
            self.dead_letters += len(dead)
        result = self.warehouse.write_checked(rows, texts, transitions, offsets, texts_are_json=texts_are_json,
                                              pod_rows=pods, node_rows=nodes)
        self.totals += result
        if self.commit_to_kafka:
            self._commit_kafka(offsets)
        if self.on_batch is not None:
            self.on_batch(result, len(messages))
        return result

    def _commit_kafka(self, offsets) -> None:
        from kafka.structs import OffsetAndMetadata, TopicPartition
        try:
            self._consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                   for (t, p), o in offsets.items()})
        except Exception as exc:  # monitoring only: DuckDB holds the truth
            log.warning("committing offsets to Kafka failed (DuckDB has them): %s", exc)

    def _maybe_snapshot(self) -> None:
        if self.snapshot_path is None:
            return
        now = time.monotonic()
        if now - self._last_snapshot >= self.snapshot_every_s:
            self.warehouse.snapshot(self.snapshot_path)
            self._last_snapshot = now

    # ------------------------------------------------------------------ lifecycle

    def run(self, stop_event: threading.Event | None = None) -> WriteResult:
        """Write batches until `stop_event` is set or stop() is called; then close."""
        try:
            while not self._stop.is_set() and not (stop_event is not None and stop_event.is_set()):
                self.poll_batch()
                if self.between_batches is not None:
                    self.between_batches(self.warehouse)
        finally:
            self.close()
        return self.totals

    def stop(self) -> None:
        """Ask run() to finish the batch in hand and close (safe from a signal handler)."""
        self._stop.set()

    def close(self) -> None:
        """Write what is in hand and release everything; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._flush()
        finally:
            if self._consumer is not None:
                self._consumer.close(autocommit=False)
                self._consumer = None
            if self._producer is not None:
                self._producer.close()
                self._producer = None
            if self.snapshot_path is not None:
                self.warehouse.snapshot(self.snapshot_path)
            self.warehouse.close()
