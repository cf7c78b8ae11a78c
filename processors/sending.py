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

Losing a partition's transaction (``OutputProducer.lose``): a transaction
that cannot commit (its producer fenced by the worker that took the partition
over while this one was frozen or cut off from the broker, its transaction
aborted by the broker after a restart that outlasted the transaction timeout,
a batch refused) takes with it the outputs of the events acked since the last
commit, while the worker's state of that partition and its consumer position
have moved past them.  faust crashes the worker there; a crash is correct but
costs a restart and a state recovery of every partition.  Instead only that
partition is given up: its producer is dropped (so nothing more goes into
the lost transaction and nothing of it can commit: no producer, no commit of
the partition's offsets), its state is forgotten at the next assignment
(``take_lost``), and the worker asks its group to rebalance.  After the
rebalance the group's assignment says who owns the partition: faust starts a
new transactional producer for it where it is assigned (its initialisation
fences any older one and aborts what was left open), seeks it to its
committed offset, and the state is rebuilt from the committed outputs; so
the events after the last commit are processed again, once, against the
state those commits imply.

What waited on a given-up producer lets go (``unless_given_up``): a send
(its events are then not acked) and a commit step.  aiokafka, once a producer
is stopped, never answers what waited on it; a send stuck there kept its
events unacked and the rebalance asked for waited for them, and a commit stuck
there held the partition's lock while faust's next commits waited for it: the
worker stopped for good.  A commit step is also bounded in time, so that no
retry without end holds the worker either.

faust exposes no public per-partition producer, so this reads two attributes
of faust-streaming's aiokafka Producer (pinned in pyproject.toml), and asks
for the rebalance through its aiokafka consumer's group coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import weakref
from typing import NamedTuple

from faust.transport.drivers import aiokafka as faust_aiokafka

from workloadmap.catalog import records as records_module

log = logging.getLogger(__name__)

# seconds a step of a partition's transaction commit (offsets in, end, next begin) may take: past
# that the partition is given up (``OutputProducer.unless_given_up``).  Above the transaction
# timeout (aiokafka's 60 s), past which the broker aborts the transaction and the step fails by
# itself, so that only a step no error ever ends is cut.  A step waits out a broker restart: at
# 30 s, the soak's restart (the broker away 24 s) cost a worker its partitions, their recovery
# and a longer pause (bench/RESULTS.md)
TRANSACTION_STEP_WITHIN = 120.0


class GivenUp(Exception):
    """A step of a partition's transaction did not end: its producer was given up, or it took too long."""


class OutputProducer(faust_aiokafka.Producer):
    """faust's aiokafka Producer with the per-partition transactions committed concurrently, and a
    partition whose transaction cannot commit given up instead of the worker (``lose``).

    Why concurrently: a commit round, one partition after another, took a large part of the
    latency budget (bench/RESULTS.md), and that is time records wait to become
    visible and, under each partition's lock, outputs wait to be sent.  The transactions are independent (one
    transactional id per partition), so their round trips may overlap.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        self.track_losses()

    def track_losses(self) -> None:
        self.lost: dict[str, str] = {}   # transactional id -> why, until the next assignment takes it
        self.lost_at = 0.0   # when the first of them was lost (monotonic)
        self._stopping: set[asyncio.Task] = set()
        # producer -> a future done once it is given up (lose, stop_transaction): what waits on it lets go
        self._given_up: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def commit_transactions(self, tid_to_offset_map, group_id, start_new_transaction=True) -> None:
        await asyncio.gather(*(self._commit_transaction(tid, offsets, group_id, start_new_transaction)
                               for tid, offsets in tid_to_offset_map.items()))

    async def _commit_transaction(self, transactional_id, offsets, group_id, start_new_transaction) -> None:
        if transactional_id in self.lost:
            return   # its offsets commit after the rebalance, from whoever owns the partition then
        lock = self._trn_locks.get(transactional_id)
        async with lock or contextlib.nullcontext():
            if transactional_id in self.lost:
                return   # lost while this waited for the lock
            producer = self._transaction_producers.get(transactional_id)
            if producer is None:
                log.warning("commit invoked for unknown transaction %s", transactional_id)
                return
            steps = [functools.partial(producer.send_offsets_to_transaction, offsets, group_id),
                     producer.commit_transaction] + ([producer.begin_transaction] if start_new_transaction else [])
            try:
                for step in steps:
                    await self.unless_given_up(producer, step(), within=TRANSACTION_STEP_WITHIN)
            except Exception as exc:   # noqa: BLE001 - fenced, aborted, broker errors: the partition is given up
                self.lose(transactional_id, exc, producer)

    async def unless_given_up(self, producer, step, within: float | None = None):
        """Await `step` (a coroutine using `producer`) unless `producer` is given up meanwhile (``lose``),
        or, with `within`, the step lasts longer than that many seconds: then raise ``GivenUp``.

        Why: a step of a given-up producer may never end.  ``lose`` stops the producer, and
        aiokafka, when its sender task is cancelled, leaves pending what waited on it (a
        transaction's end, offsets sent into it, a batch's room); a commit waiting there held
        its partition's lock, and faust's next commits wait for the one under way, so the
        worker committed nothing more, and a send waiting for that lock kept its events
        unacked, which a rebalance then waited for.  The bound covers what no error ends (a
        request retried without end): its partition is given up and processed again."""
        given_up = self._given_up_future(producer)
        if given_up.done():
            step.close()
            raise GivenUp("its producer was given up")
        task = asyncio.ensure_future(step)
        try:
            done, _ = await asyncio.wait((task, given_up), timeout=within, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task in done:
            return task.result()
        task.cancel()
        raise GivenUp("its producer was given up" if given_up.done() else f"not done within {within:g} s")

    async def flush(self) -> None:
        """faust's flush (a rebalance's, a stop's), over the producers of now: ``lose`` may drop one
        while another flushes (faust iterated the live dict, and a worker crashed there), and a
        given-up producer's flush may never end."""
        await self.buffer.flush()
        if self._producer is not None:
            await self._producer.flush()
        for producer in list(self._transaction_producers.values()):
            with contextlib.suppress(GivenUp):
                await self.unless_given_up(producer, producer.flush())

    async def stop_transaction(self, transactional_id: str) -> None:
        """faust stops a revoked partition's producer: what waits on it gives up (unless_given_up)."""
        producer = self._transaction_producers.get(transactional_id)
        if producer is not None:
            self._give_up(producer)
        await super().stop_transaction(transactional_id)

    def _given_up_future(self, producer) -> asyncio.Future:
        given_up = self._given_up.get(producer)
        if given_up is None:
            given_up = self._given_up[producer] = asyncio.get_running_loop().create_future()
        return given_up

    def _give_up(self, producer) -> None:
        given_up = self._given_up_future(producer)
        if not given_up.done():
            given_up.set_result(None)

    def lose(self, transactional_id: str, why, producer=None) -> None:
        """Give up the transaction of one partition (see the module docstring): its producer is
        dropped, its open transaction aborted when possible, and the group asked to rebalance.
        With `producer`, only if that is still the partition's producer (a failure reported late by
        one given up earlier says nothing about the one a rebalance has started since)."""
        current = self._transaction_producers.get(transactional_id)
        if transactional_id in self.lost or (producer is not None and current is not producer):
            return
        if not self.lost:
            self.lost_at = time.monotonic()
        self.lost[transactional_id] = repr(why)[:300]
        log.warning("transaction %s lost (%s): its partition is processed again from its last commit "
                    "after a rebalance", transactional_id, self.lost[transactional_id])
        producer = self._transaction_producers.pop(transactional_id, None)
        if producer is not None:
            self._give_up(producer)   # what waits on it gives up (unless_given_up)
            task = asyncio.ensure_future(_stopping(producer))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
        request_rebalance(self.app)

    def take_lost(self) -> set[int]:
        """The raw partitions whose transactions were lost since the last call (their state is to
        be rebuilt): called at an assignment, after faust started the assigned partitions' producers."""
        partitions = self.lost_partitions()
        self.lost.clear()
        return partitions

    def lost_partitions(self) -> set[int]:
        # faust's transactional ids end with the partition: "{app id}-{group}-{partition}"
        return {int(tid.rsplit("-", 1)[1]) for tid in self.lost}


async def _stopping(producer) -> None:
    """Abort what a given-up producer holds (so that readers need not wait for the broker's
    transaction timeout), then stop it; within bounds, whatever state it is in."""
    manager = producer._txn_manager
    try:
        if manager is not None and manager.state.name in ("IN_TRANSACTION", "ABORTABLE_ERROR"):
            await asyncio.wait_for(producer.abort_transaction(), 10)
    except Exception:   # noqa: BLE001 - fenced or unreachable: the next owner's producer aborts it
        pass
    try:
        await asyncio.wait_for(producer.stop(), 10)
    except Exception:   # noqa: BLE001
        pass


def request_rebalance(app) -> None:
    """Ask the worker's consumer group to rebalance (aiokafka's coordinator, in faust's consumer thread)."""
    try:
        thread = app.consumer._thread
        coordinator = thread._ensure_consumer()._coordinator
        thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)
    except Exception as exc:   # noqa: BLE001 - not started or stopping: the next assignment comes anyway
        log.warning("rebalance not requested: %r", exc)


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
        self._dropped: set[int] = set()   # raw partitions whose outputs were dropped since the last send
        self._last_dropped: set[int] = set()

    async def start(self) -> None:
        started = await self.app.maybe_start_producer()   # the transaction manager in exactly-once mode
        self._producer = getattr(started, "producer", started)

    def _transactional_id(self, partition: int) -> str | None:
        if not self.exactly_once:
            return None
        group = self.app.assignor.group_for_topic(self.raw_topic)
        return f"{self.app.conf.id}-{group}-{partition}"

    def _transactional(self, transactional_id: str, *, sending: bool):
        """The partition's transactional producer, or None when its transaction is lost (given up).

        Appending needs the producer only (its transaction may be committing meanwhile); sending,
        under the partition's lock, needs it in a transaction: between a commit and the next begin
        the lock is held, so a producer found out of one is fenced, failed or ended for good."""
        if transactional_id in self._producer.lost:
            return None
        producer = self._producer._transaction_producers.get(transactional_id)
        if producer is None:
            self._producer.lose(transactional_id, "no producer for the partition")
        elif sending and not producer._txn_manager.is_in_transaction():
            self._producer.lose(transactional_id, f"its producer is {producer._txn_manager.state.name}", producer)
            return None
        return producer

    def add(self, partition: int, topic: str, key: bytes | None, value: bytes | None,
            to: int | None = None) -> None:
        """Append one output of an event of raw `partition` to `topic`, at partition `to` of it (by
        default the same number).  Dropped when the partition's transaction is lost: the event is
        processed again after the rebalance (sending.py's docstring)."""
        where = (partition, topic, partition if to is None else to)
        batch = self._batches.get(where)
        if batch is None:
            batch = self._new_batch(partition)
            if batch is None:
                self._dropped.add(partition)
                return
            self._batches[where] = batch
        if batch.append(key=key, value=value, timestamp=None) is None:   # full: start another
            self._full.append((*where, batch))
            batch = self._batches[where] = self._new_batch(partition)
            if batch is None:
                del self._batches[where]
                self._dropped.add(partition)
                return
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
        """A record batch of the partition's producer; None when its transaction is lost."""
        transactional_id = self._transactional_id(partition)
        if transactional_id is None:
            return self._producer._ensure_producer().create_batch()
        producer = self._transactional(transactional_id, sending=False)
        return None if producer is None else producer.create_batch()

    def __len__(self) -> int:
        return len(self._batches) + len(self._full)

    async def send(self) -> set[int]:
        """Hand every batch to its partition's producer (returns once they are queued, not delivered);
        returns the raw partitions whose outputs were dropped, their transactions lost since the last
        send: their events must not be acked (a commit of their offsets would skip them).

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
            if transactional_id is None:
                await self._send(self._producer._ensure_producer(), batches, None)
                continue
            producer = self._transactional(transactional_id, sending=False)
            try:
                sent = producer is not None and await self._producer.unless_given_up(
                    producer, self._send_in_transaction(transactional_id, batches))
            except GivenUp:
                sent = False
            if not sent:
                self._dropped.add(partition)
        dropped, self._dropped = self._dropped, set()
        if self.exactly_once:
            dropped |= self._producer.lost_partitions()
        self._last_dropped = dropped
        return dropped

    async def _send_in_transaction(self, transactional_id: str, batches) -> bool:
        """A partition's batches, under one hold of its lock, into its transaction; whether they went in."""
        async with self._producer._trn_locks.get(transactional_id) or contextlib.nullcontext():
            producer = self._transactional(transactional_id, sending=True)
            return producer is not None and await self._send(producer, batches, transactional_id)

    def take_dropped(self) -> set[int]:
        """What the last ``send()`` returned, once (for the acks that follow it)."""
        dropped, self._last_dropped = self._last_dropped, set()
        return dropped

    async def _send(self, producer, batches, transactional_id: str | None) -> bool:
        """Whether every batch went in (else the partition's transaction is lost)."""
        for topic, to, batch in batches:
            try:
                delivery = await producer.send_batch(batch, topic, partition=to)
            except Exception as exc:   # noqa: BLE001 - not in a transaction any more (fenced, failed)
                if transactional_id is None:
                    raise
                self._producer.lose(transactional_id, exc, producer)
                return False
            delivery.add_done_callback(functools.partial(self._delivered, transactional_id, producer))
        return True

    def _delivered(self, transactional_id: str | None, producer, delivery) -> None:
        if delivery.cancelled() or delivery.exception() is None:
            return
        if transactional_id is None:
            self.failures.append(delivery.exception())
        else:   # the transaction cannot commit: the partition is given up, its events processed again
            self._producer.lose(transactional_id, delivery.exception(), producer)

    def raise_failures(self) -> None:
        """Raise if a batch sent earlier was refused: its outputs are lost, which must not pass unseen
        (at least once; in exactly-once mode a refused batch's partition is given up instead)."""
        if self.failures:
            failures, self.failures = self.failures, []
            raise RuntimeError(f"{len(failures)} output batch(es) refused by Kafka: {failures[0]!r}") from failures[0]
