"""The raw consumer (processors/consuming.py): runs of raw records for the agent, and faust's
per-message delivery for its own topics.

Runs: the fetched records of a partition cut into runs, what is before the
read offset dropped, the offsets that are no message acked with the run that
follows them (as faust's gaps); the queue the agent takes runs from (what is
queued, whole runs, stale runs skipped and not tracked); acks that faust's
own commit computation (``Consumer._new_offset``) turns into the offsets it
commits.

Delivery of faust's own topics: the fetch loop runs each delivery coroutine
with ``send(None)`` and, when it has to wait, finishes it with ``_finish``.
These tests hold ``_finish`` to what an asyncio Task would do with the same
coroutine: results of awaited futures come back, bare yields are resumed,
exceptions propagate, and a cancellation reaches the coroutine (so faust's
race against a suspended flow still abandons a stuck delivery).
"""

from __future__ import annotations

import asyncio
import time

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



# --------------------------------------------------------------------------- runs for the agent

from collections import defaultdict  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from weakref import WeakSet  # noqa: E402

from aiokafka.structs import ConsumerRecord, TopicPartition  # noqa: E402
from intervaltree import IntervalTree  # noqa: E402

from workloadmap.processors.consuming import RawConsumer, RawQueue, ack_batches, current, runs_of  # noqa: E402

RAW = TopicPartition("raw", 1)   # as aiokafka's fetcher keys the records


def _records(*offsets, partition=1):
    return [ConsumerRecord("raw", partition, o, 0, 0, b"k%d" % o, b"v%d" % o, None, 2, 2, ()) for o in offsets]


def _spans(runs):
    return [(run.first, [r.offset for r in run.records]) for run in runs]


def test_a_partitions_records_are_cut_into_runs_each_acking_from_where_the_one_before_ended():
    # 13 and 16 are no message (transaction markers): each is acked with the run that follows it
    runs = runs_of(RAW, _records(10, 11, 12, 14, 15, 17), read=None, generation_id=3, max_run=2)
    assert _spans(runs) == [(10, [10, 11]), (12, [12, 14]), (15, [15, 17])]
    # the fetch's own partition key, as faust's messages carry it (aiokafka's commit checks its type)
    assert all(run.tp is RAW and run.generation_id == 3 for run in runs)


def test_records_before_the_read_offset_are_dropped_and_a_gap_after_it_is_acked_with_the_first_run():
    # read offset 11, the last delivered: 10 is dropped; 12 was no message (faust adds the gap
    # read + 1 .. offset); a record at the read offset itself is kept, as faust keeps it
    assert _spans(runs_of(RAW, _records(10, 13, 14), read=11, generation_id=1)) == [(12, [13, 14])]
    assert _spans(runs_of(RAW, _records(10, 11, 12), read=11, generation_id=1)) == [(11, [11, 12])]
    # after a seek the read offset is the committed one, the next to read: no gap
    assert _spans(runs_of(RAW, _records(20, 21), read=20, generation_id=1)) == [(20, [20, 21])]
    assert runs_of(RAW, _records(5, 6), read=9, generation_id=1) == []


class _App:
    def __init__(self):
        self.consumer_generation_id = 1
        self.active = True
        self.flow_control = SimpleNamespace(is_active=lambda: self.active)
        self.consumer = SimpleNamespace(unacked=WeakSet())
        self.monitor = SimpleNamespace(stream_inbound_time={})   # faust's Monitor keeps it per TP


def test_the_agent_takes_whole_runs_queued_now_up_to_about_its_batch_and_waits_only_when_none_is():
    async def main():
        app, queue = _App(), RawQueue(max_records=6)
        for run in runs_of(RAW, _records(*range(8)), read=None, generation_id=1, max_run=3):
            queue.put(run)
        assert not queue.has_room(), "8 queued of 6: the fetch loop waits"
        first = await queue.take(app, 4)     # 3, then 3 more (whole runs): 6
        assert queue.has_room()
        second = await queue.take(app, 4)
        waiting = asyncio.ensure_future(queue.take(app, 4))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        queue.put(runs_of(RAW, _records(8), read=7, generation_id=1)[0])
        third = await asyncio.wait_for(waiting, 5)
        return app, first, second, third

    app, first, second, third = asyncio.run(main())
    assert [_spans(b) for b in (first, second, third)] == [[(0, [0, 1, 2]), (3, [3, 4, 5])], [(6, [6, 7])],
                                                          [(8, [8])]]
    assert len(app.consumer.unacked) == 4 and all(run.tracked and not run.acked for run in first + second + third)


def test_faust_watchdog_of_slow_streams_sees_when_the_agent_last_took_a_partitions_runs():
    # faust's verify_event_path logs a lagging partition whose stream_inbound_time is missing as a
    # stream that "has not started processing"; only the bypassed per-event path used to set it
    other = TopicPartition("raw", 2)

    async def main():
        app, queue = _App(), RawQueue()
        app.consumer_generation_id = 2
        queue.put(runs_of(other, _records(0, partition=2), read=None, generation_id=1)[0])   # skipped: stale
        queue.put(runs_of(RAW, _records(5), read=None, generation_id=2)[0])
        before = time.monotonic()
        await queue.take(app, 100)
        return app, before

    app, before = asyncio.run(main())
    assert list(app.monitor.stream_inbound_time) == [RAW]
    assert before <= app.monitor.stream_inbound_time[RAW] <= time.monotonic()


def test_runs_of_an_older_generation_or_taken_while_the_flow_is_suspended_are_skipped_not_tracked():
    async def main():
        app, queue = _App(), RawQueue()
        app.consumer_generation_id = 2
        queue.put(runs_of(RAW, _records(0, 1), read=None, generation_id=1)[0])   # fetched before a rebalance
        queue.put(runs_of(RAW, _records(2), read=1, generation_id=2)[0])
        kept = await queue.take(app, 100)
        app.active = False
        queue.put(runs_of(RAW, _records(3), read=2, generation_id=2)[0])
        waiting = asyncio.ensure_future(queue.take(app, 100))   # 3 is skipped: it waits for more
        await asyncio.sleep(0.01)
        assert not waiting.done()
        app.active = True
        queue.put(runs_of(RAW, _records(4), read=3, generation_id=2)[0])
        after = await asyncio.wait_for(waiting, 5)
        return app, kept, after

    app, kept, after = asyncio.run(main())
    # never processed, and fetched again from the committed offset after the rebalance: an ack
    # could let a commit carry their offsets before their outputs
    assert _spans(kept) == [(2, [2])] and _spans(after) == [(4, [4])]
    assert {run.first for run in app.consumer.unacked} == {2, 4}


def test_current_drops_the_runs_a_rebalance_made_stale_while_the_batch_waited():
    async def main():
        app, queue = _App(), RawQueue()
        queue.put(runs_of(RAW, _records(0, 1), read=None, generation_id=1)[0])
        batch = await queue.take(app, 100)
        unchanged = current(app, batch)
        app.consumer_generation_id = 2          # a rebalance while the agent waited for state recovery
        fresh = runs_of(RAW, _records(5), read=None, generation_id=2)
        return app, unchanged, current(app, batch + fresh)

    app, unchanged, kept = asyncio.run(main())
    assert _spans(unchanged) == [(0, [0, 1])] and _spans(kept) == [(5, [5])]
    assert not app.consumer.unacked, "the stale run is no longer waited for"


def test_runs_to_ack_count_while_a_rebalance_waits_for_them_but_never_from_an_older_generation():
    """The sender acks a batch once its outputs are sent.  While a rebalance waits for those acks (the
    flow suspended) they count, and the rebalance commits them; a run of an older generation (its
    partition assigned again since, its events read again from the committed offset) or of a
    partition whose transaction was lost never counts: an ack would let a commit carry offsets whose
    outputs went into a transaction given up."""
    async def main():
        app, queue = _App(), RawQueue()
        for partition in (0, 1):
            queue.put(runs_of(TopicPartition("raw", partition), _records(0, 1), read=None, generation_id=1)[0])
        batch = await queue.take(app, 100)
        app.active = False                       # a rebalance began: it waits for the acks
        during = current(app, batch, acking=True)
        lost = current(app, batch, {1}, acking=True)
        app.consumer_generation_id = 2           # the assignment after it
        after = current(app, batch, acking=True)
        return app, during, lost, after

    app, during, lost, after = asyncio.run(main())
    assert [r.tp.partition for r in during] == [0, 1]
    assert [r.tp.partition for r in lost] == [0]
    assert after == [] and not app.consumer.unacked


def test_the_worker_assigns_no_standby_partitions():
    """faust's assignor gave every worker standbys of the raw topic, and faust's transactions keep
    the producer of a partition gone from active to standby: assigned it again, a worker used that
    stale producer, fenced long before by the partition's owner meanwhile, and lost its first
    transaction.  The app keeps faust's assignor (its topic groups name the transactional ids; with
    no standbys configured faust would switch to round robin) without standbys."""
    from faust.assignor.copartitioned_assignor import CopartitionedAssignor
    from faust.assignor.cluster_assignment import ClusterAssignment
    from faust.assignor.client_assignment import ClientAssignment

    from workloadmap.processors.app import ActiveOnlyAssignor, WorkerSettings, create_app

    app = create_app(WorkerSettings(bootstrap_servers="127.0.0.1:9"))
    assert isinstance(app.assignor, ActiveOnlyAssignor) and app.conf.table_standby_replicas > 0
    cluster = ClusterAssignment(subscriptions={"a": ["raw"], "b": ["raw"]},
                                assignments={"a": ClientAssignment(actives={}, standbys={}),
                                             "b": ClientAssignment(actives={}, standbys={})})
    assigned = CopartitionedAssignor(topics={"raw"}, cluster_asgn=cluster.copartitioned_assignments({"raw"}),
                                     num_partitions=3, replicas=app.assignor.replicas).get_assignment()
    assert sorted(p for a in assigned.values() for p in a.actives) == [0, 1, 2]
    assert all(not a.standbys for a in assigned.values())


def test_fetched_records_not_delivered_are_put_back_unless_a_rebalance_moved_their_partition_since():
    """A takeover test lost a killed peer's partitions for good: the survivor's fetch of them, in
    flight across the rebalance, came back while the flow was still stopped, was dropped, and faust's
    seek to the committed offsets did not move them back, as the peer had committed nothing.  The
    position of a partition whose fetched records are not delivered goes back to the first of them,
    unless it no longer stands past them (a rebalance gave it a fresh position since)."""
    from aiokafka.consumer.subscription_state import SubscriptionState

    from workloadmap.processors.consuming import rewind

    async def main():
        subscription = SubscriptionState()
        tps = [TopicPartition("raw", p) for p in range(4)]
        subscription.assign_from_user(tps[:3])
        consumer = SimpleNamespace(_subscription=subscription, seek=subscription.seek)
        subscription.seek(tps[0], 512)    # fetched 0..511: past them
        subscription.seek(tps[1], 40)     # a fresh position, before them (committed at 40)
        subscription.seek(tps[2], 90)     # fetched 70..79, then past transaction markers up to 90
        await rewind(consumer, {tps[0]: (0, 511), tps[1]: (60, 99), tps[2]: (70, 79), tps[3]: (5, 9)})
        state = subscription.subscription.assignment.state_value
        return [state(tp).position for tp in tps[:3]]

    assert asyncio.run(main()) == [0, 40, 70]


def _faust_consumer():
    """faust's Consumer with only its ack and commit bookkeeping (as Consumer.__init__ sets it)."""
    consumer = object.__new__(RawConsumer)
    consumer._acked = defaultdict(list)
    consumer._acked_index = defaultdict(set)
    consumer._committed_offset = defaultdict(lambda: None)
    consumer._gap = defaultdict(IntervalTree)
    consumer._unacked_messages = WeakSet()
    consumer._n_acked = 0
    consumer._waiting_for_ack = None
    return consumer


def test_acked_runs_make_the_offsets_fausts_commit_takes_up_to_the_first_unacked_run():
    consumer = _faust_consumer()
    runs = runs_of(RAW, _records(10, 11, 13, 14, 15, 18, 19), read=None, generation_id=1, max_run=3)
    assert _spans(runs) == [(10, [10, 11, 13]), (14, [14, 15, 18]), (19, [19])]
    for run in runs:
        consumer._unacked_messages.add(run)
    tp = RAW
    ack_batches(consumer, [runs[0], runs[2]])
    ack_batches(consumer, [runs[0]])   # again: nothing more
    assert consumer._n_acked == 4 + 1
    # faust commits the offset after the last of the first consecutive acked offsets: 10..13
    # (12 no message, acked with its run), not past the unacked run 14..18
    assert consumer._new_offset(tp) == 14
    ack_batches(consumer, [runs[1]])
    assert consumer._new_offset(tp) == 20
    assert not consumer._unacked_messages and all(run.acked for run in runs)


def test_offsets_before_the_committed_offset_are_not_acked_again():
    consumer = _faust_consumer()
    tp = RAW
    consumer._committed_offset[tp] = 12   # committed meanwhile (a commit of an earlier transaction)
    ack_batches(consumer, runs_of(RAW, _records(10, 11, 12, 13), read=None, generation_id=1))
    assert consumer._acked[tp] == [12, 13] and consumer._n_acked == 2
    assert consumer._new_offset(tp) == 14
