"""Pipelining the agent: a batch is processed while the outputs of the batches before it are sent.

Why: handing a raw partition's record batches to its transactional producer
waits.  aiokafka keeps one pending batch per output partition, drained into a
produce request only when the request in flight returns, and a partition's
transaction commit (every 0.2 s) holds that partition's lock, so its outputs
wait, for three round trips to the broker.  An agent that sent, then acked
each batch before taking the next spent those waits idle while events waited
in the raw topic: at full speed it waited on its sends about as long as it
processed (bench/RESULTS.md).

So the agent appends a batch's outputs (``OutputBatches.add_batch``) and
hands the batch's events over (``OutputPipeline.hand_over``); a sender task
sends everything appended since its last send, then acks those events.  While
a send waits, the agent processes the next batches, and their outputs go
together in the next send: under load, fewer and larger produce requests.
The agent waits only when ``max_unsent`` events are processed and not yet
taken by a send (memory and the latency of what is processed stay bounded).

What is kept as it was (processors/app.py, sending.py): an event is acked
only once all its outputs are in the producer, so a committed offset never
lacks its outputs; a send hands each raw partition's batches to its producer
under one hold of its lock, so an event's outputs are in one transaction;
sends go in processing order; an event is tracked as unacked from when the
agent takes it to its ack, so a rebalance or a stop waits for it to be sent
(``consumer.wait_empty``); a batch Kafka refused crashes the worker.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable


class OutputPipeline:
    """The sender task of an agent and the events handed to it (see the module docstring).

    `outputs` is an ``OutputBatches`` (``send()`` hands what was appended to
    the producers, ``raise_failures()`` raises for a refused batch); `ack`
    acks a list of events; `crash` stops the worker with an exception."""

    def __init__(self, outputs, ack: Callable[[list], None], crash: Callable[[BaseException], Awaitable],
                 max_unsent: int):
        self.outputs = outputs
        self._ack = ack
        self._crash = crash
        self.max_unsent = max_unsent
        self._events: list = []       # outputs appended, not yet taken by a send
        self._sending = False
        self._more = asyncio.Event()  # events were handed over
        self._room = asyncio.Event()  # fewer than max_unsent events wait for a send
        self._room.set()
        self._done = asyncio.Event()  # nothing handed over is unsent or unacked
        self._done.set()
        self._error: BaseException | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._sender())

    async def hand_over(self, events: list) -> None:
        """Events whose outputs were just appended: the sender task sends these outputs, then
        acks the events.  Waits only while `max_unsent` events wait for a send."""
        self._raise()
        self._events.extend(events)
        self._done.clear()
        self._more.set()
        if len(self._events) >= self.max_unsent:
            self._room.clear()
            await self._room.wait()
            self._raise()
        else:
            await asyncio.sleep(0)   # the sender starts its send now, not when the agent next waits

    async def flush(self) -> None:
        """Wait until everything handed over is sent and acked."""
        while not self._done.is_set():
            self._raise()
            await self._done.wait()
        self._raise()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    async def _sender(self) -> None:
        try:
            while True:
                await self._more.wait()
                self._more.clear()
                # the events and the outputs appended for them, taken together: send() detaches
                # the outputs before its first await, and nothing is appended in between
                events, self._events = self._events, []
                self._room.set()
                self.outputs.raise_failures()
                await self.outputs.send()
                self._ack(events)
                if not self._events:
                    self._done.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure stops the worker, which resumes from its commit
            self._error = exc
            self._room.set()
            self._done.set()
            await self._crash(exc)
