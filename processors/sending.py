"""Sending a worker's outputs: one record batch per raw partition and output topic.

Why batches: sending each output with ``producer.send`` costs a future, an
accumulator lookup and a lock per message, about a fifth of a worker's CPU.
The agent instead appends the outputs of a batch of events
(``Processor.process_batch``: outputs per raw partition) to aiokafka
``BatchBuilder`` objects (``add_batch``) and hands each record batch to the
producer at once (``send_batch``), then acks those events.

Why no linger (app.py): the record batches are whole when handed over, and
aiokafka keeps one pending batch per partition (the next ``send_batch`` of a
partition waits until the pending one leaves) and one produce request in
flight per broker.  A lingering batch held the agent until it left; with no
linger what comes while a request is in flight goes in the next request.

Why this producer: in exactly-once mode faust runs one transactional producer
per assigned raw partition and commits, in its transaction, that partition's
offsets.  The outputs of an event of raw partition p go to partition p of each
output topic (co-partitioned with raw events: the state of the objects of raw
partition p is rebuilt from partition p of the state topic) through partition p's
producer, so they commit or abort with the offset of the event that caused
them.  A batch is sent under faust's lock for that producer, which faust holds
while it commits and begins the next transaction (sending in between would be
refused).

Ordering with commits: events are acked only after their outputs' batches are
in the producer, and aiokafka sends everything it holds before it commits a
transaction; so a committed offset never lacks its outputs.  A partition's
batches of one send go in under one hold of its lock, so all the outputs of an
event are in one transaction (see ``OutputBatches.send``).  Outputs of events
not yet acked may commit before their offsets: after a crash those events are
processed again against the state those outputs imply, which makes them
duplicates and produces nothing.

Relays (``Outputs.relays``: a referenced object's event for the other raw
partitions, processing.py) go to the raw topic itself, to every partition but
their own, through their own partition's producer: they commit with the
offset of the event that caused them, and each is then an ordinary event of
the partition it went to.

Committing: faust commits the per-partition transactions one after another,
each with three requests (offsets into the transaction, its end, the next
begin) under that partition's lock, so outputs wait while it runs.
``OutputProducer`` commits them concurrently.

faust exposes no public per-partition producer, so this reads two attributes
of faust-streaming's aiokafka Producer (pinned in pyproject.toml).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import NamedTuple

from faust.transport.drivers import aiokafka as faust_aiokafka

from workloadmap.catalog import records as records_module

log = logging.getLogger(__name__)


class OutputProducer(faust_aiokafka.Producer):
    """faust's aiokafka Producer with the per-partition transactions committed concurrently.

    Why: a commit round, one partition after another, took a large part of the
    latency budget (bench/RESULTS.md), and that is time records wait to become
    visible and, under each partition's lock, outputs wait to be sent.  The transactions are independent (one
    transactional id per partition), so their round trips may overlap.
    """

    async def commit_transactions(self, tid_to_offset_map, group_id, start_new_transaction=True) -> None:
        await asyncio.gather(*(self._commit_transaction(tid, offsets, group_id, start_new_transaction)
                               for tid, offsets in tid_to_offset_map.items()))

    async def _commit_transaction(self, transactional_id, offsets, group_id, start_new_transaction) -> None:
        async with self._trn_locks[transactional_id]:
            producer = self._transaction_producers.get(transactional_id)
            if producer is None:
                log.warning("commit invoked for unknown transaction %s", transactional_id)
                return
            await producer.send_offsets_to_transaction(offsets, group_id)
            await producer.commit_transaction()
            if start_new_transaction:
                await producer.begin_transaction()


class OutputTopics(NamedTuple):
    """Where each kind of output goes (the fields of processing.Outputs)."""

    records: str
    transitions: str
    dead_letters: str
    definitions: str
    pods: str = records_module.PODS_TOPIC
    nodes: str = records_module.NODES_TOPIC
    state: str = records_module.STATE_TOPIC


class OutputBatches:
    """Outputs appended per (raw partition, topic, partition of that topic: the same number but for
    relays); ``send()`` hands every batch to the raw partition's producer."""

    def __init__(self, app, raw_topic: str, exactly_once: bool, topics: OutputTopics, partitions: int = 1):
        self.app = app
        self.raw_topic = raw_topic
        self.topics = topics
        self.exactly_once = exactly_once
        self.partitions = partitions   # the raw topic's, unless its metadata says otherwise (raw_partitions)
        self._batches: dict[tuple[int, str, int], object] = {}
        self._full: list[tuple[int, str, int, object]] = []
        self._producer = None  # faust's Producer
        self.failures: list[BaseException] = []

    async def start(self) -> None:
        started = await self.app.maybe_start_producer()   # the transaction manager in exactly-once mode
        self._producer = getattr(started, "producer", started)

    def _transactional_id(self, partition: int) -> str | None:
        if not self.exactly_once:
            return None
        group = self.app.assignor.group_for_topic(self.raw_topic)
        return f"{self.app.conf.id}-{group}-{partition}"

    def _aiokafka_producer(self, transactional_id: str | None):
        if transactional_id is None:
            return self._producer._ensure_producer()
        return self._producer._transaction_producers[transactional_id]

    def add(self, partition: int, topic: str, key: bytes | None, value: bytes | None,
            to: int | None = None) -> None:
        """Append one output of an event of raw `partition` to `topic`, at partition `to` of it (by
        default the same number)."""
        where = (partition, topic, partition if to is None else to)
        batch = self._batches.get(where)
        if batch is None:
            batch = self._batches[where] = self._new_batch(partition)
        if batch.append(key=key, value=value, timestamp=None) is None:   # full: start another
            self._full.append((*where, batch))
            batch = self._batches[where] = self._new_batch(partition)
            if batch.append(key=key, value=value, timestamp=None) is None:
                raise ValueError(f"an output of {len(value or b'')} bytes to {topic} is larger than "
                                 f"the producer's max batch size")

    def add_batch(self, by_partition) -> None:
        """Append the outputs of a batch of events (``Processor.process_batch``: Outputs per raw partition)."""
        for partition, out in by_partition.items():
            for topic, pairs in ((self.topics.records, out.records), (self.topics.transitions, out.transitions),
                                 (self.topics.dead_letters, out.dead_letters),
                                 (self.topics.definitions, out.definitions), (self.topics.pods, out.pods),
                                 (self.topics.nodes, out.nodes), (self.topics.state, out.state)):
                for key, value in pairs:
                    self.add(partition, topic, key, value)
            if out.relays:
                others = [p for p in range(self.raw_partitions()) if p != partition]
                for key, value in out.relays:
                    for to in others:
                        self.add(partition, self.raw_topic, key, value, to)

    def raw_partitions(self) -> int:
        """How many partitions the raw topic has: as the consumer's group metadata says, else as configured."""
        consumer = getattr(self.app, "consumer", None)
        counted = consumer.topic_partitions(self.raw_topic) if consumer is not None else None
        return counted or self.partitions

    def _new_batch(self, partition: int):
        return self._aiokafka_producer(self._transactional_id(partition)).create_batch()

    def __len__(self) -> int:
        return len(self._batches) + len(self._full)

    async def send(self) -> None:
        """Hand every batch to its partition's producer (returns once they are queued, not delivered).

        All the batches of one raw partition are sent under one hold of that partition's lock, so
        they land in one transaction: a commit between two of them would put an event's record in
        a transaction that commits and its transition (or pod, owner, dead letter) in the next one,
        which a crash aborts; the event, processed again, is then a duplicate of its committed
        record and produces nothing, and the transition is lost for good."""
        by_partition: dict[int, list] = {}
        for partition, topic, to, batch in self._full + [(*where, b) for where, b in self._batches.items()]:
            by_partition.setdefault(partition, []).append((topic, to, batch))
        self._full, self._batches = [], {}
        for partition, batches in by_partition.items():
            transactional_id = self._transactional_id(partition)
            lock = (self._producer._trn_locks[transactional_id] if transactional_id is not None
                    else contextlib.nullcontext())
            async with lock:
                producer = self._aiokafka_producer(transactional_id)
                for topic, to, batch in batches:
                    delivery = await producer.send_batch(batch, topic, partition=to)
                    delivery.add_done_callback(self._delivered)

    def _delivered(self, delivery) -> None:
        if not delivery.cancelled() and delivery.exception() is not None:
            self.failures.append(delivery.exception())

    def raise_failures(self) -> None:
        """Raise if a batch sent earlier was refused: its outputs are lost, which must not pass unseen."""
        if self.failures:
            failures, self.failures = self.failures, []
            raise RuntimeError(f"{len(failures)} output batch(es) refused by Kafka: {failures[0]!r}") from failures[0]
