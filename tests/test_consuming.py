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

