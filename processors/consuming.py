"""Consuming the raw topic: faust's aiokafka consumer, with the raw records handed to the agent a
fetched batch at a time instead of one faust event at a time (bench/RESULTS.md).

1. Fetches are held at most FETCH_MAX_WAIT_MS by the broker.  aiokafka leaves
   out of a fetch request the partitions that still have records waiting to be
   processed, and faust hard-codes a 1,500 ms wait: after a burst, a request in
   flight without some partition was held the full wait while new events for
   that partition waited behind it.  Within that wait the broker answers once
   FETCH_MIN_BYTES are there (not at the first byte): at a steady rate a fetch
   answered at once held a few events, and each fetch, agent batch, output
   batch and produce request costs the worker and the broker more than an
   event does: at a steady rate a worker spent far more CPU per event than
   at full speed (bench/RESULTS.md).  An idle worker's event waits at most
   the fetch wait.

2. The raw topic's records bypass faust's per-message path.  faust turns
   each fetched record into a ``ConsumerMessage``, hands it to its conductor,
   which wraps it in an ``Event`` and puts it in the agent's channel queue,
   whose stream iteration tracks it and acks it, each with its sensors: about
   a quarter of the worker's CPU on the pod stream (bench/RESULTS.md).  Here the fetch loop
   (``RawConsumer._drain_messages``) cuts each partition's fetched records
   into ``RawBatch`` runs of at most MAX_RUN records and puts them in the
   consumer's ``raw_queue``; the agent takes what is queued, up to a batch
   (``RawQueue.take``), and acks a run at a time (``ack_batches``).  A run is
   one object to track and to ack: faust's bookkeeping is kept, per run.

   What faust's path does that matters, and is kept: a record before the
   partition's read offset is dropped (already delivered); the offsets
   between the read offset and a record, and between two records, that are
   no message (transaction markers of the relays' and other producers'
   transactions) are acked with the run, as faust acks such gaps; a commit
   every ``broker_commit_every`` acked offsets; a record fetched while the
   flow is suspended (a rebalance) or of an older consumer generation is
   skipped, not delivered, as faust's ``getmany`` skips it, and faust seeks
   the partitions back to their committed offsets; a run waiting for room in
   the queue is abandoned when the flow is suspended (the stuck delivery
   faust abandons).  Unlike faust, what is skipped is first put back
   (``rewind``): a partition with no commit yet is not moved by faust's seek.
   When the agent takes a run, a run of an older generation
   or taken while the flow is suspended is skipped and not acked (it comes
   again from the committed offset after the rebalance: acking it could let a
   commit carry its offsets before their outputs); a taken run is tracked in
   the consumer's unacked messages until acked, so a rebalance and a
   graceful stop wait for it (``Consumer.wait_empty``); an ack adds the run's
   offsets to the consumer's acked offsets, from which faust's commits take
   the offsets they commit, in the same transaction as the outputs.
   Not kept: the per-message sensors (faust's monitor counts no raw
   messages) and the per-message round robin between partitions (a fetch's
   runs alternate between partitions instead).

   Records of other topics (faust's own, such as the leader assignor's) go
   faust's way, each handed to the conductor; the delivery coroutine is run
   directly and only finished as faust does (raced against the flow's
   suspension) when it has to wait, which it almost never does.

faust-streaming is pinned in pyproject.toml.
"""

from __future__ import annotations

import asyncio
import collections
import time

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

FETCH_MAX_WAIT_MS = 100
FETCH_MIN_BYTES = 64 * 1024   # several dozen raw events
YIELD_EVERY = 100  # messages of other topics between two turns given to the event loop (as faust)
MAX_RUN = 500   # records of one partition in one RawBatch, at most
MAX_QUEUED = 4000   # raw records queued for the agent, at most: the fetch loop waits beyond


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS   # read when its fetcher starts
        consumer._fetch_min_bytes = FETCH_MIN_BYTES
        return consumer


async def _finish(coro, waiting):
    """Run a coroutine that yielded `waiting` (a future, or None for a bare yield) to its end,
    as an asyncio Task would; a cancellation is passed into the coroutine."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                # The coroutine's own `await` marked the future as blocking for the Task that
                # runs it (there is none); a second await on a marked future raises.  A Task
                # clears the mark before it waits: so does this.
                waiting._asyncio_future_blocking = False
                await waiting
        except BaseException as exc:  # noqa: BLE001 - cancellation included: the coroutine decides
            try:
                waiting = coro.throw(exc)
            except StopIteration:
                return
            continue
        try:
            waiting = coro.send(None)
        except StopIteration:
            return


class RawBatch:
    """A run of one raw partition's fetched records, delivered, tracked and acked as one.

    `first` is the first offset its ack covers: its first record's, or, when
    offsets that are no message precede it since the partition's read offset,
    the one after that read offset (as faust's gaps).  Hashable by identity
    and weakly referenceable: faust's consumer keeps unacked messages in a
    WeakSet, and reads ``acked`` and ``refcount`` of them."""

    __slots__ = ("tp", "records", "first", "generation_id", "acked", "tracked", "__weakref__")
    refcount = 1   # faust's wait_empty logs the refcounts of what it waits for

    def __init__(self, tp, records: list, first: int, generation_id: int):
        self.tp = tp
        self.records = records
        self.first = first
        self.generation_id = generation_id
        self.acked = False
        self.tracked = False

    @property
    def last(self) -> int:
        return self.records[-1].offset

    def __repr__(self) -> str:
        return f"<RawBatch {self.tp.topic}[{self.tp.partition}] {self.first}..{self.last}>"


class RawQueue:
    """The runs fetched for the agent, bounded in records (the fetch loop waits for room)."""

    def __init__(self, max_records: int = MAX_QUEUED):
        self.max_records = max_records
        self._runs: collections.deque[RawBatch] = collections.deque()
        self._records = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def __len__(self) -> int:
        return self._records

    def put(self, run: RawBatch) -> None:
        self._runs.append(run)
        self._records += len(run.records)
        self._arrived.set()
        if self._records >= self.max_records:
            self._room.clear()

    async def wait_for_room(self) -> None:
        await self._room.wait()

    def has_room(self) -> bool:
        return self._room.is_set()

    async def take(self, app, max_records: int) -> list[RawBatch]:
        """The runs queued now, up to about `max_records` records (whole runs); waits only when
        none is.  Runs of an older consumer generation, or taken while the flow is suspended,
        are skipped (not acked: see the module docstring); the others are tracked as unacked
        (so a rebalance or a stop waits for their ack) and returned."""
        runs = self._runs
        while True:
            while not runs:
                self._arrived.clear()
                await self._arrived.wait()
            generation = app.consumer_generation_id
            active = app.flow_control.is_active()
            unacked = app.consumer.unacked
            taken, n = [], 0
            while runs and n < max_records:
                run = runs.popleft()
                self._records -= len(run.records)
                if not active or run.generation_id != generation:
                    continue
                n += len(run.records)
                run.tracked = True
                unacked.add(run)
                taken.append(run)
            if self._records < self.max_records:
                self._room.set()
            if taken:
                stream_in(app, taken)
                return taken


def stream_in(app, runs: list[RawBatch]) -> None:
    """Tell faust's monitor that the agent took events of these runs' partitions.  Faust's watchdog
    of slow streams (its aiokafka driver's ``verify_event_path``) reads the time the monitor saw a
    partition's last event come into a stream, which only the bypassed per-event path sets: without
    this, every partition with a lag was logged as a stream that "has not started processing",
    and a stream that really stopped could not be told from one that works."""
    monitor = app.monitor
    if monitor is None:
        return
    now = time.monotonic()
    inbound = monitor.stream_inbound_time
    for run in runs:
        inbound[run.tp] = now


def current(app, runs: list[RawBatch], dropped=frozenset(), acking: bool = False) -> list[RawBatch]:
    """The runs of a batch still of the consumer's generation, with the flow active, and not of a
    `dropped` raw partition (its transaction lost: sending.py): a rebalance may have happened
    while the batch waited.  The others are skipped as ``RawQueue.take`` skips them (not acked),
    and no longer tracked as unacked, so that no rebalance or stop waits for them.

    `acking`: the runs are to be acked, their outputs sent.  A run of the generation counts
    while the flow is suspended (a rebalance waits for its ack, then commits it), but a run of
    an older generation never does: its partition may have been assigned again since, with its
    state rebuilt from the commits and its events read again from the committed offset, and an
    ack would let a commit carry offsets whose outputs went into a transaction given up."""
    generation = app.consumer_generation_id
    active = acking or app.flow_control.is_active()
    if not dropped and active and all(run.generation_id == generation for run in runs):
        return runs
    unacked = app.consumer.unacked
    kept = []
    for run in runs:
        if active and run.generation_id == generation and run.tp.partition not in dropped:
            kept.append(run)
        else:
            unacked.discard(run)
    return kept


def ack_batches(consumer, runs: list[RawBatch]) -> None:
    """Ack runs (their offsets may then be committed): faust's ``Consumer.ack`` for every offset
    a run covers, at once, with its lock, its committed-offset check and its waiters' wake-up."""
    with ack_lock:
        unacked = consumer._unacked_messages
        for run in runs:
            if run.acked:
                continue
            run.acked = True
            unacked.discard(run)
            tp = run.tp
            committed = consumer._committed_offset[tp]
            offsets = range(run.first if committed is None else max(run.first, committed), run.last + 1)
            acked_index = consumer._acked_index[tp]
            if not acked_index.isdisjoint(offsets):
                offsets = [o for o in offsets if o not in acked_index]
            acked_index.update(offsets)
            consumer._acked[tp].extend(offsets)
            consumer._n_acked += len(offsets)
        notify(consumer._waiting_for_ack)


def runs_of(tp, records: list, read: int | None, generation_id: int, max_run: int = MAX_RUN) -> list[RawBatch]:
    """A partition's fetched records as runs of at most `max_run`: what is before the read offset
    dropped (already delivered), the first run's ack starting after the read offset when offsets
    that are no message lie between (as faust's gaps)."""
    if read is not None and records and records[0].offset < read:
        records = [r for r in records if r.offset >= read]
    if not records:
        return []
    runs = []
    first = records[0].offset
    if read and first - read > 1:
        first = read + 1
    for start in range(0, len(records), max_run):
        chunk = records[start:start + max_run]
        runs.append(RawBatch(tp, chunk, first if start == 0 else chunk[0].offset, generation_id))
    # a gap between two runs' records belongs to the later run: its first offset follows the
    # earlier run's last
    for before, after in zip(runs, runs[1:]):
        after.first = before.last + 1
    return runs


async def rewind(consumer, spans: dict) -> None:
    """In the consumer's thread: each partition's position back to `first` of its span (first, last)
    of fetched records that were not delivered, if the position is still past them (a rebalance since
    gave the partition a fresh position: it is left alone).

    Why: records fetched while a rebalance stops the flow (or while their partition is paused, or
    abandoned waiting for room) are not delivered, and the fetch moved the position past them.  faust
    then seeks the partitions to their committed offsets, which puts them back only where there is a
    commit: a partition its previous owner never committed (killed before its first commit) stayed
    past records nobody had read, and after a takeover its events were never processed."""
    assignment = consumer._subscription.subscription.assignment if consumer._subscription.subscription else None
    if assignment is None:
        return
    for tp, (first, last) in spans.items():
        if tp not in assignment.tps:
            continue
        state = assignment.state_value(tp)
        if state.has_valid_position and state.position > last:
            consumer.seek(tp, first)


class RawConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer; see the module docstring for what differs and why.  The raw
    topic is set by ``for_topic`` (app.py)."""

    raw_topic: str = ""

    @classmethod
    def for_topic(cls, raw_topic: str) -> type:
        return type(cls.__name__, (cls,), {"raw_topic": raw_topic})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.raw_queue = RawQueue()

    def _new_consumer_thread(self):
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _drain_messages(self, fetcher) -> None:  # pragma: no cover - runs in every worker
        should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        read_offsets = self._read_offset
        app = self.app
        raw_topic = self.raw_topic
        queue = self.raw_queue
        commit_every = self._commit_every
        try:
            while not (should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                await asyncio.sleep(0)   # as faust: a fetch loop always gives the event loop a turn
                if self.should_stop:
                    continue
                records, active_partitions = await self._wait_next_records(1.0)
                generation = app.consumer_generation_id
                if records is None or self.should_stop:
                    continue
                if not self.flow_active:
                    # as faust's getmany: fetched while a rebalance stopped the flow; put back first,
                    # then the partitions that have a commit are sought to it
                    await self._unfetch(records)
                    try:
                        await self.perform_seek()
                    except Exception as exc:  # noqa: BLE001 - as faust: logged, the loop goes on
                        self.log.warning(f"exception performing seek when flow not active {exc}")
                    continue
                fetched = list(records.items())
                for i, (tp, tp_records) in enumerate(fetched):
                    if not self.flow_active or app.consumer_generation_id != generation:
                        await self._unfetch(dict(fetched[i:]))   # a rebalance began
                        break
                    if not (active_partitions is None or tp in active_partitions
                            or tp in self._buffered_partitions):
                        await self._unfetch({tp: tp_records})
                        continue
                    app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    if tp.topic != raw_topic:
                        await self._deliver_each(tp, tp_records)
                        continue
                    for run in runs_of(tp, tp_records, read_offsets[tp], generation):
                        if commit_every is not None and self._n_acked >= commit_every:
                            self._n_acked = 0
                            await self.commit()
                        if not queue.has_room():
                            await self.wait_first(queue.wait_for_room(), self.suspend_flow.wait())
                            if not self.flow_active:
                                # abandoned, as faust abandons a stuck delivery: put back
                                rest = [r for r in tp_records if r.offset >= run.records[0].offset]
                                await self._unfetch({tp: rest, **dict(fetched[i + 1:])})
                                break
                        queue.put(run)
                        read_offsets[tp] = run.last
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _unfetch(self, records) -> None:
        """Put back fetched records that are not delivered: each partition's position back to the first
        of them (see ``rewind``)."""
        spans = {tp: (rs[0].offset, rs[-1].offset) for tp, rs in records.items() if rs}
        if spans:
            try:
                await self._thread.call_thread(rewind, self._thread._ensure_consumer(), spans)
            except Exception as exc:  # noqa: BLE001 - stopping: nothing more is read anyway
                self.log.warning(f"fetched records not put back: {exc!r}")

    async def _deliver_each(self, tp, records) -> None:  # pragma: no cover - faust's own topics
        """faust's per-message delivery, for the records of a topic other than the raw topic."""
        read_offsets = self._read_offset
        callback = self.callback
        to_message = self._to_message
        for i, record in enumerate(records):
            if i and not i % YIELD_EVERY:
                await asyncio.sleep(0)
            offset = record.offset
            read = read_offsets[tp]
            if read is not None and offset < read:
                continue    # already delivered (faust drops these too)
            if read and offset - read > 1 and self.app.topics.acks_enabled_for(tp.topic):
                await self._add_gap(tp, read + 1, offset)
            delivery = callback(to_message(tp, record))
            try:
                waiting = delivery.send(None)
            except StopIteration:
                pass    # delivered at once: the usual case
            else:
                await self.wait_first(_finish(delivery, waiting), self.suspend_flow.wait())
            read_offsets[tp] = offset
