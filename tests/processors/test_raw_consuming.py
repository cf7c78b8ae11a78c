"""The raw consumer's eager delivery: a delivery coroutine started by hand and finished later.

The fetch loop (processors/consuming.py) runs each delivery coroutine with
``send(None)`` and, when it has to wait, finishes it with ``_finish``.  These
tests hold ``_finish`` to what an asyncio Task would do with the same
coroutine: results of awaited futures come back, bare yields are resumed,
exceptions propagate, and a cancellation reaches the coroutine (so faust's
race against a suspended flow still abandons a stuck delivery).
"""

from __future__ import annotations

import asyncio

import pytest

from workloadmap.processors.consuming import _finish


def _start(coro):
    """Run a coroutine up to its first suspension, as the fetch loop does."""
    try:
        return False, coro.send(None)
    except StopIteration as stop:
        return True, stop.value


def test_a_delivery_that_does_not_wait_completes_at_once():
    seen = []

    async def deliver():
        seen.append("delivered")

    done, _ = _start(deliver())
    assert done and seen == ["delivered"]


def test_a_delivery_waiting_on_futures_and_bare_yields_is_finished_with_their_results():
    async def main():
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        seen = []

        async def deliver():
            seen.append(await first)
            await asyncio.sleep(0)      # a bare yield
            seen.append(await second)
            await asyncio.sleep(0.01)   # a timer future
            seen.append("end")

        coro = deliver()
        done, waiting = _start(coro)
        assert not done and waiting is first
        finishing = asyncio.ensure_future(_finish(coro, waiting))
        loop.call_soon(first.set_result, 1)
        loop.call_later(0.01, second.set_result, 2)
        await asyncio.wait_for(finishing, 5)
        return seen

    assert asyncio.run(main()) == [1, 2, "end"]


def test_an_exception_of_the_delivery_propagates():
    async def main():
        loop = asyncio.get_running_loop()
        gate = loop.create_future()

        async def deliver():
            await gate
            raise ValueError("bad message")

        coro = deliver()
        _, waiting = _start(coro)
        finishing = asyncio.ensure_future(_finish(coro, waiting))
        gate.set_result(None)
        with pytest.raises(ValueError, match="bad message"):
            await finishing

    asyncio.run(main())


def test_a_cancellation_reaches_the_delivery_which_may_clean_up():
    async def main():
        loop = asyncio.get_running_loop()
        never = loop.create_future()
        cleaned = []

        async def deliver():
            try:
                await never
            finally:
                cleaned.append(True)

        coro = deliver()
        _, waiting = _start(coro)
        finishing = asyncio.ensure_future(_finish(coro, waiting))
        await asyncio.sleep(0)
        finishing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await finishing
        return cleaned

    assert asyncio.run(main()) == [True]


def test_raced_against_a_suspended_flow_the_stuck_delivery_is_abandoned():
    """What faust's fetch loop does with a delivery blocked on a full buffer during a rebalance."""
    async def main():
        loop = asyncio.get_running_loop()
        buffer_has_room = loop.create_future()
        flow_suspended = asyncio.Event()
        delivered = []

        async def deliver():
            await buffer_has_room
            delivered.append(True)

        coro = deliver()
        _, waiting = _start(coro)
        loop.call_soon(flow_suspended.set)
        done, pending = await asyncio.wait(
            [asyncio.ensure_future(_finish(coro, waiting)), asyncio.ensure_future(flow_suspended.wait())],
            return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return delivered, buffer_has_room.cancelled()

    assert asyncio.run(main()) == ([], True)



# --------------------------------------------------------------------------- the agent's batches
#
# event_batches reads an agent stream's channel queue a batch at a time.  Checked with a stand-in
# for the stream and the app around a real faust queue, events and consumer messages: what a
# batch holds, what is skipped as faust's stream iteration skips it (but not acked), what is tracked,
# how errors and the end of the channel come through, and that acks come only from ack_batch.

from types import SimpleNamespace  # noqa: E402

from faust.events import Event  # noqa: E402
from faust.types.tuples import ConsumerMessage  # noqa: E402
from mode.utils.queues import FlowControlEvent, ThrowableQueue  # noqa: E402

from workloadmap.processors.consuming import ack_batch, current, event_batches  # noqa: E402


class _Consumer:
    def __init__(self):
        self.unacked, self.acked = set(), []

    def ack(self, message):
        if message.acked:
            return False
        message.acked = True
        self.unacked.discard(message)
        self.acked.append(message.offset)
        return True


class _App:
    def __init__(self, stream):
        self.flow_control = SimpleNamespace(is_active=lambda: stream.active)
        self.topics = SimpleNamespace(acking_topics={"raw"})
        self.consumer = stream.consumer
        self._stream = stream

    @property
    def consumer_generation_id(self):
        return self._stream.generation


class _Stream:
    """What event_batches reads of a faust Stream (and of its app)."""

    def __init__(self, maxsize=10_000):
        self.active, self.generation = True, 1
        self.consumer = _Consumer()
        self.app = _App(self)
        flow = FlowControlEvent()
        flow.resume()
        self.queue = ThrowableQueue(maxsize=maxsize, flow_control=flow)
        self.channel = SimpleNamespace(queue=self.queue, __anext__=self.queue.get)
        self.should_stop = False
        self.messages_in, self.messages_out, self.started, self.stopped = [], [], 0, 0

    async def maybe_start(self):
        self.started += 1
        return True

    async def stop(self):
        self.stopped += 1

    def service_reset(self):
        pass

    def _channel_stop_iteration(self, channel):
        pass

    def _on_message_in(self, tp, offset, message):
        self.messages_in.append(offset)

    def _on_message_out(self, tp, offset, message):
        self.messages_out.append(offset)

    def put(self, *offsets, generation=None, partition=0):
        for offset in offsets:
            message = ConsumerMessage("raw", partition, offset, 0.0, 0, None, b"k%d" % offset, b"v%d" % offset,
                                      None, generation_id=self.generation if generation is None else generation)
            message.incref()   # as the conductor does, once per channel
            self.queue.put_nowait(Event(self.app, message.key, message.value, None, message))


def _stand_in():
    return _Stream()


def _offsets(events):
    return [e.message.offset for e in events]


def test_a_batch_is_what_is_buffered_up_to_the_maximum_without_waiting_for_more():
    async def main():
        stream = _stand_in()
        stream.put(*range(2500))
        batches = event_batches(stream, 1000)
        sizes = [len(await batches.__anext__()) for _ in range(3)]
        # nothing buffered: the next batch waits for the next event, and is that event alone
        waiting = asyncio.ensure_future(batches.__anext__())
        await asyncio.sleep(0.01)
        assert not waiting.done()
        stream.put(2500)
        last = await asyncio.wait_for(waiting, 5)
        await batches.aclose()
        return sizes, _offsets(last), stream

    sizes, last, stream = asyncio.run(main())
    assert sizes == [1000, 1000, 500] and last == [2500]
    assert stream.consumer.acked == [], "event_batches acks nothing: the agent acks once the outputs are sent"
    assert stream.messages_in == list(range(2501)), "every event is tracked, with the consumer's sensor"
    assert len(stream.consumer.unacked) == 2501
    assert (stream.started, stream.stopped) == (1, 1)


def test_events_of_an_older_generation_or_read_while_the_flow_is_suspended_are_skipped_not_acked():
    async def main():
        stream = _stand_in()
        stream.generation = 2
        stream.put(0, 1, generation=1)   # fetched before a rebalance
        stream.put(2, 3)
        batches = event_batches(stream, 100)
        first = await batches.__anext__()
        stream.active = False            # a rebalance begins: what is left is skipped too
        stream.put(4)
        stream.active = True
        stream.put(5)
        # 4 and 5 come in one read: the flow is active again when it is read, so both are kept
        second = await batches.__anext__()
        await batches.aclose()
        return _offsets(first), _offsets(second), stream

    first, second, stream = asyncio.run(main())
    assert first == [2, 3] and second == [4, 5]
    # never processed, and fetched again from the committed offset after the rebalance: an ack
    # could let a commit carry their offsets before their outputs
    assert stream.consumer.acked == [] and stream.messages_out == []
    assert 0 not in stream.messages_in, "a skipped event is not tracked"


def test_a_batch_read_while_suspended_is_skipped_whole():
    async def main():
        stream = _stand_in()
        stream.put(0, 1)
        stream.active = False
        batches = event_batches(stream, 100)
        waiting = asyncio.ensure_future(batches.__anext__())
        await asyncio.sleep(0.01)
        stream.active = True
        stream.put(2)
        batch = await asyncio.wait_for(waiting, 5)
        await batches.aclose()
        return _offsets(batch), stream

    batch, stream = asyncio.run(main())
    assert batch == [2] and stream.consumer.acked == []


def test_current_drops_the_events_a_rebalance_made_stale_while_the_batch_waited():
    async def main():
        stream = _stand_in()
        stream.put(0, 1, 2)
        batches = event_batches(stream, 100)
        batch = await batches.__anext__()
        unchanged = current(stream, batch)
        stream.active = False
        suspended = current(stream, batch)
        stream.active = True
        stream.generation = 2            # a rebalance while the agent waited for state recovery
        stream.put(3)                    # of the new generation
        kept = current(stream, batch + [await stream.queue.get()])
        await batches.aclose()
        return _offsets(unchanged), suspended, _offsets(kept), stream

    unchanged, suspended, kept, stream = asyncio.run(main())
    assert unchanged == [0, 1, 2] and suspended == [] and kept == [3]
    assert not stream.consumer.unacked, "the skipped (0-2) are no longer waited for (3 was never tracked)" and stream.consumer.acked == []


def test_ack_batch_acks_every_event_once_with_the_consumers_sensor():
    async def main():
        stream = _stand_in()
        stream.put(0, 1, 2, partition=1)
        batches = event_batches(stream, 100)
        batch = await batches.__anext__()
        ack_batch(stream, batch)
        ack_batch(stream, batch)   # again: nothing more
        await batches.aclose()
        return stream

    stream = asyncio.run(main())
    assert stream.consumer.acked == [0, 1, 2] and stream.messages_out == [0, 1, 2]
    assert not stream.consumer.unacked


def test_an_error_thrown_into_the_channel_is_raised_and_its_end_ends_the_batches():
    async def main():
        stream = _stand_in()
        batches = event_batches(stream, 100)
        stream.queue._throw(ValueError("broken"))
        with pytest.raises(ValueError, match="broken"):
            await batches.__anext__()
        stream = _stand_in()
        batches = event_batches(stream, 100)
        waiting = asyncio.ensure_future(batches.__anext__())
        await asyncio.sleep(0.01)
        stream.queue._throw(StopAsyncIteration())   # what faust throws in when the worker stops
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(waiting, 5)
        return stream

    stream = asyncio.run(main())
    assert stream.stopped == 1
