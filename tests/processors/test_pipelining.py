"""The agent's pipeline (processors/pipelining.py): batches processed while earlier outputs are sent.

Checked with a stand-in for ``OutputBatches`` whose sends wait on a gate the
test opens, as aiokafka's ``send_batch`` waits for the request in flight or a
partition's commit: an event is acked only once the send that carried its
outputs returned, batches handed over meanwhile go together in the next send,
the agent waits once ``max_unsent`` events wait, a refused batch crashes the
worker.  The real sends and acks run in the pipeline tests against the real
broker (tests/e2e/test_pipeline_e2e.py).
"""

from __future__ import annotations

import asyncio

import pytest

from workloadmap.processors.pipelining import OutputPipeline


class Outputs:
    """OutputBatches as the pipeline uses it: outputs appended, then taken whole by send()."""

    def __init__(self):
        self.appended: list = []
        self.sends: list[list] = []     # what each send carried, when it began
        self.gate = asyncio.Event()     # a send returns once the gate is open
        self.gate.set()
        self.failures: list = []

    def add_batch(self, outputs) -> None:
        self.appended.extend(outputs)

    async def send(self) -> None:
        taken, self.appended = self.appended, []   # before the first await, as OutputBatches.send
        self.sends.append(taken)
        await self.gate.wait()

    def raise_failures(self) -> None:
        if self.failures:
            raise RuntimeError("refused")


def pipeline_of(outputs, max_unsent=100):
    acked, crashes = [], []

    async def crash(exc):
        crashes.append(exc)

    return OutputPipeline(outputs, acked.extend, crash, max_unsent), acked, crashes


async def turns(n=5):
    for _ in range(n):
        await asyncio.sleep(0)


def test_an_event_is_acked_only_once_the_send_of_its_outputs_returned():
    async def main():
        outputs = Outputs()
        outputs.gate.clear()
        pipeline, acked, _ = pipeline_of(outputs)
        pipeline.start()
        outputs.add_batch(["out-1"])
        await pipeline.hand_over(["event-1"])
        await turns()
        assert outputs.sends == [["out-1"]] and acked == [], "sending: not acked yet"
        outputs.gate.set()
        await pipeline.flush()
        assert acked == ["event-1"]
        await pipeline.stop()

    asyncio.run(main())


def test_batches_processed_while_a_send_waits_go_together_in_the_next_send_in_order():
    async def main():
        outputs = Outputs()
        outputs.gate.clear()
        pipeline, acked, _ = pipeline_of(outputs)
        pipeline.start()
        outputs.add_batch(["a1", "a2"])
        await pipeline.hand_over(["a"])
        await turns()
        for name in "bc":   # the agent goes on while the first send waits
            outputs.add_batch([f"{name}1"])
            await pipeline.hand_over([name])
        assert outputs.sends == [["a1", "a2"]] and acked == []
        outputs.gate.set()
        await pipeline.flush()
        assert outputs.sends == [["a1", "a2"], ["b1", "c1"]]
        assert acked == ["a", "b", "c"]
        await pipeline.stop()

    asyncio.run(main())


def test_the_agent_waits_once_max_unsent_events_wait_for_a_send():
    async def main():
        outputs = Outputs()
        outputs.gate.clear()
        pipeline, acked, _ = pipeline_of(outputs, max_unsent=3)
        pipeline.start()
        await pipeline.hand_over(["e1"])   # taken by the first send, which waits
        await turns()
        await pipeline.hand_over(["e2", "e3"])   # 2 waiting: room for more
        third = asyncio.ensure_future(pipeline.hand_over(["e4"]))   # 3 waiting: the agent waits
        await turns()
        assert not third.done()
        outputs.gate.set()   # the first send returns; the next takes e2-e4, and the agent goes on
        await turns()
        assert third.done()
        await pipeline.flush()
        assert acked == ["e1", "e2", "e3", "e4"]
        await pipeline.stop()

    asyncio.run(main())


def test_a_refused_batch_crashes_the_worker_and_is_raised_to_the_agent_and_nothing_more_is_acked():
    async def main():
        outputs = Outputs()
        pipeline, acked, crashes = pipeline_of(outputs)
        pipeline.start()
        await pipeline.hand_over(["e1"])
        await pipeline.flush()
        outputs.failures.append("refused")   # a delivery of the first send failed
        await pipeline.hand_over(["e2"])
        await turns()
        assert [str(c) for c in crashes] == ["refused"]
        with pytest.raises(RuntimeError, match="refused"):
            await pipeline.hand_over(["e3"])
        with pytest.raises(RuntimeError, match="refused"):
            await pipeline.flush()
        assert acked == ["e1"]
        await pipeline.stop()

    asyncio.run(main())


def test_stop_ends_the_sender_task_leaving_unsent_events_unacked():
    async def main():
        outputs = Outputs()
        outputs.gate.clear()
        pipeline, acked, _ = pipeline_of(outputs)
        pipeline.start()
        await pipeline.hand_over(["e1"])
        await turns()
        await pipeline.stop()   # a worker stopping mid-send: e1 is processed again after a restart
        assert acked == [] and pipeline._task is None

    asyncio.run(main())
