"""Consuming the raw topic: faust's aiokafka consumer with two changes that matter for latency
and CPU (bench/RESULTS.md), and the agent's batches over its stream.

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

2. A fetched message is handed to the stream without a task per message when
   it can be.  faust's fetch loop delivers each message with
   ``wait_first(callback(message), suspend_flow.wait())``: four tasks and an
   ``asyncio.wait`` per message, so that a delivery stuck behind a full stream
   buffer or a suspended flow (a rebalance) is abandoned when the flow is
   suspended.  Here the delivery coroutine is first run directly; almost
   always it completes at once (the buffer has room, the flow is active).
   Only when it has to wait is it finished as faust does, raced against the
   flow's suspension, so the rebalance behaviour is unchanged.

Everything else of faust's fetch loop is kept as it is: offsets read, gaps in
acked offsets, commits every ``broker_commit_every`` messages, yielding to the
event loop every 100 messages.

3. The agent takes its events a batch at a time (``event_batches``) and acks
   them a batch at a time (``ack_batch``), instead of iterating its stream
   one event at a time.  Per event, faust's stream iteration runs a pass of
   its async generator, the stream sensors going in and out, the
   current-event bookkeeping and an ack with its sensors; a batch pays them
   once, and the outputs are sent per batch.  The batch reads the queue the
   stream's channel is fed by, keeps the per-event checks that carry faust's
   semantics (see ``event_batches``), and acks through each message's own
   ``ack`` as the stream does, so the consumer's offsets, gaps, commits and
   its wait for unacked messages on a rebalance or a stop are faust's.
   faust's ``Stream.take()`` batches too, but on top of the per-event
   iteration (one more coroutine per event) and by waiting for a full batch
   or a timeout: latency when idle, no CPU saved.

faust-streaming is pinned in pyproject.toml.
"""

from __future__ import annotations

import asyncio

from faust.events import Event
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka

FETCH_MAX_WAIT_MS = 100
FETCH_MIN_BYTES = 64 * 1024   # several dozen raw events
YIELD_EVERY = 100  # messages between two turns given to the event loop (as faust)


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


class RawConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer; see the module docstring for what differs and why."""

    def _new_consumer_thread(self):
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _drain_messages(self, fetcher) -> None:  # pragma: no cover - runs in every worker
        callback = self.callback
        should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        read_offsets = self._read_offset
        acks_enabled_for = self.app.topics.acks_enabled_for
        commit_every = self._commit_every
        since_yield = 0
        try:
            while not (should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                batch = self.getmany(timeout=1.0)
                await asyncio.sleep(0)
                if self.should_stop:
                    continue
                async for tp, message in batch:
                    since_yield += 1
                    if since_yield > YIELD_EVERY:
                        await asyncio.sleep(0)
                        since_yield = 0
                    offset = message.offset
                    read = read_offsets[tp]
                    if read is not None and offset < read:
                        continue    # already delivered (faust drops these too)
                    if read and offset - read > 1 and acks_enabled_for(message.topic):
                        await self._add_gap(tp, read + 1, offset)
                    if commit_every is not None and self._n_acked >= commit_every:
                        self._n_acked = 0
                        await self.commit()
                    delivery = callback(message)
                    try:
                        waiting = delivery.send(None)
                    except StopIteration:
                        pass    # delivered at once: the usual case
                    else:
                        await self.wait_first(_finish(delivery, waiting), self.suspend_flow.wait())
                    read_offsets[tp] = offset
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


async def event_batches(stream, max_events: int):
    """The events of an agent's stream, a batch at a time: what is buffered, up to `max_events`.

    The equivalent of iterating the stream (``Stream.__aiter__``) a batch at a
    time.  It reads the queue the stream's channel is fed by (the conductor
    puts each raw event there) and, per event, keeps what faust's stream
    iteration does for the worker's semantics: an error thrown into the channel
    is raised; an event of an older consumer generation, or one read while the
    flow is suspended (a rebalance), is skipped; an event is tracked as unacked
    (so a rebalance and a graceful stop wait for it) with the consumer's
    ``on_message_in`` sensor.  The per-event stream sensors
    (``on_stream_event_in``/``out``) are not called: the unit of the agent is
    the batch.  Nothing is acked here: the caller acks a batch with
    ``ack_batch`` once its outputs are in the producer.

    One difference with faust, on purpose: a skipped event is not acked.
    faust acks it (so that a filtered event does not hold the lag), but a
    skipped event here was never processed, and its partition's fetch
    position goes back to the committed offset on assignment, so it comes
    again; acking it could let a commit carry its offset before its outputs.

    Unlike ``Stream.take()`` it never waits for a batch to fill: a batch is
    what is buffered when the agent asks, and the agent waits only when
    nothing is (so an idle worker handles an event as soon as it arrives).
    """
    app = stream.app
    channel = stream.channel
    queue = channel.queue
    errors = queue._errors
    get_nowait = queue.get_nowait
    flow_active = app.flow_control.is_active
    acking_topics = app.topics.acking_topics
    consumer = app.consumer
    track = consumer.unacked.add
    on_message_in = stream._on_message_in
    started = await stream.maybe_start()
    try:
        while not stream.should_stop:
            if errors:
                raise errors.popleft()
            if queue.empty():
                first = await channel.__anext__()   # waits for one
                values = [first]
            else:
                values = []
            n = min(queue.qsize(), max_events - len(values))
            for _ in range(n):
                values.append(get_nowait())
            generation = app.consumer_generation_id
            active = flow_active()
            batch = []
            for event in values:
                if not isinstance(event, Event):
                    raise TypeError(f"the raw topic's channel delivered {type(event).__name__}, not an event")
                message = event.message
                if not active or message.generation_id != generation:
                    continue   # skipped, not acked (see above): it comes again after the rebalance
                if message.topic in acking_topics and not message.tracked:
                    message.tracked = True
                    track(message)
                    on_message_in(message.tp, message.offset, message)
                batch.append(event)
            if batch:
                yield batch
    except StopAsyncIteration:
        return   # the channel ended (faust throws it in when the worker stops), as Stream.__aiter__ returns
    finally:
        stream._channel_stop_iteration(channel)
        if started:
            await stream.stop()
            stream.service_reset()


def current(stream, events) -> list:
    """The events of a batch still of the consumer's generation, with the flow active: a
    rebalance may have happened while the batch waited.  The others are skipped as
    ``event_batches`` skips them (not acked), and no longer tracked as unacked, so that
    no rebalance or stop waits for them."""
    app = stream.app
    generation = app.consumer_generation_id
    if app.flow_control.is_active() and all(e.message.generation_id == generation for e in events):
        return events
    kept = []
    unacked = app.consumer.unacked
    active = app.flow_control.is_active()
    for event in events:
        if active and event.message.generation_id == generation:
            kept.append(event)
        else:
            unacked.discard(event.message)
    return kept


def ack_batch(stream, events) -> None:
    """Ack the events of a batch (their offsets may then be committed)."""
    for event in events:
        _ack(stream, event)


def _ack(stream, event) -> None:
    # Stream.ack without its per-event stream sensor: the message's own ack (reference count,
    # then the consumer's acked offsets) and the consumer's on_message_out sensor
    message = event.message
    if message.ack(stream.app.consumer):
        stream._on_message_out(message.tp, message.offset, message)
