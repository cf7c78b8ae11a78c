"""Committing the worker's transactions (processors/sending.py).

faust commits its per-partition transactions one after another, each under
that partition's lock; OutputProducer overlaps them.  Checked with stand-ins
for aiokafka's transactional producers: each partition's transaction gets
its offsets, commits and begins the next one, in that order, and the three
run concurrently.  End to end, transactions are checked by the pipeline
tests against the real broker (tests/e2e/test_pipeline_e2e.py).
"""

from __future__ import annotations

import asyncio

import weakref
from types import SimpleNamespace

import pytest

from workloadmap.processors import sending
from workloadmap.processors.sending import OutputBatches, OutputProducer, OutputTopics


def _bare_producer(producers: dict) -> OutputProducer:
    """An OutputProducer over stand-ins for aiokafka's transactional producers (transactional id ->
    producer), with only what committing, sending and losing read."""
    producer = object.__new__(OutputProducer)
    producer.track_losses()
    producer.app = None   # request_rebalance finds no consumer: it logs and goes on
    producer._trn_locks = {tid: asyncio.Lock() for tid in producers}
    producer._transaction_producers = dict(producers)
    return producer


class Stuck:
    """A transactional producer whose every request waits for good: what aiokafka's does once it is
    stopped (its sender and metadata tasks cancelled, their waiters never resolved)."""

    def __init__(self):
        self._txn_manager = SimpleNamespace(is_in_transaction=lambda: True, state=SimpleNamespace(name="READY"))
        self.stopped = False

    async def _forever(self, *args, **kwargs):
        await asyncio.get_running_loop().create_future()

    send_batch = send_offsets_to_transaction = commit_transaction = begin_transaction = _forever

    async def stop(self):
        self.stopped = True


def test_the_output_producer_commits_the_partitions_transactions_concurrently():
    """faust commits one partition's transaction after another; OutputProducer overlaps them."""
    in_flight = {"now": 0, "most": 0}   # transactions between their offsets and their end

    class Transactional:
        def __init__(self, log, tid):
            self.log, self.tid = log, tid

        async def send_offsets_to_transaction(self, offsets, group_id):
            self.log.append(("offsets", self.tid, dict(offsets), group_id))
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
            await asyncio.sleep(0.01)

        async def commit_transaction(self):
            self.log.append(("commit", self.tid))
            await asyncio.sleep(0.01)
            in_flight["now"] -= 1

        async def begin_transaction(self):
            self.log.append(("begin", self.tid))

    async def main():
        log = []
        producer = object.__new__(OutputProducer)   # only what commit_transactions reads
        producer.track_losses()
        producer._trn_locks = {tid: asyncio.Lock() for tid in ("app-0", "app-1", "app-2", "gone")}
        producer._transaction_producers = {tid: Transactional(log, tid) for tid in ("app-0", "app-1", "app-2")}
        await producer.commit_transactions({f"app-{p}": {("raw", p): 10 + p} for p in range(3)} | {"gone": {}},
                                           "group")
        return log

    log = asyncio.run(main())
    for p in range(3):
        tid = f"app-{p}"
        mine = [entry[0] for entry in log if entry[1] == tid]
        assert mine == ["offsets", "commit", "begin"]
        assert ("offsets", tid, {("raw", p): 10 + p}, "group") in log
    assert in_flight["most"] == 3, "one after another, at most one transaction would be in flight"


def test_a_batchs_outputs_go_to_their_topics_at_the_raw_partition_number_in_order():
    from workloadmap.processors.processing import Outputs
    from workloadmap.processors.sending import OutputBatches, OutputTopics

    class Builder:
        def __init__(self, partition):
            self.partition, self.appended = partition, []

        def append(self, key, value, timestamp):
            if len(self.appended) == 2:   # full: OutputBatches starts another
                return None
            self.appended.append((key, value))
            return object()

    outputs = OutputBatches(app=None, raw_topic="raw", exactly_once=True,
                            topics=OutputTopics("records", "transitions", "dead", "definitions"))
    outputs._new_batch = Builder
    outputs.add_batch({
        0: Outputs(records=[(b"a", b"r1"), (b"a", b"r2"), (b"b", b"r3")], transitions=[(b"a", b"t1")]),
        2: Outputs(dead_letters=[(None, b"d1")], definitions=[(b"c/n", b"w1")]),
    })
    sent = [(p, t, to, b.appended) for p, t, to, b in outputs._full] + [
        (p, t, to, b.appended) for (p, t, to), b in outputs._batches.items()]
    assert sorted(sent) == sorted([
        (0, "records", 0, [(b"a", b"r1"), (b"a", b"r2")]), (0, "records", 0, [(b"b", b"r3")]),
        (0, "transitions", 0, [(b"a", b"t1")]), (2, "dead", 2, [(None, b"d1")]),
        (2, "definitions", 2, [(b"c/n", b"w1")])])
    assert all(b.partition == p for p, *_, b in outputs._full + [(*w, b) for w, b in outputs._batches.items()])


def test_a_relay_goes_to_every_other_raw_partition_through_its_own_partition_s_producer():
    """A referenced object's event of raw partition 1 (of 3) is relayed to raw partitions 0 and 2, in
    batches of partition 1's producer (so they commit with its offset), and to no other topic."""
    from workloadmap.processors.processing import Outputs
    from workloadmap.processors.sending import OutputBatches, OutputTopics

    class Builder:
        def __init__(self, partition):
            self.partition, self.appended = partition, []

        def append(self, key, value, timestamp):
            self.appended.append((key, value))
            return object()

    outputs = OutputBatches(app=None, raw_topic="raw", exactly_once=True,
                            topics=OutputTopics("records", "transitions", "dead", "definitions"), partitions=3)
    outputs._new_batch = Builder
    outputs.add_batch({1: Outputs(definitions=[(b"c/related:x", b"e")], relays=[(b"c/x", b"e2")])})
    assert sorted((p, t, to, b.partition, b.appended) for (p, t, to), b in outputs._batches.items()) == [
        (1, "definitions", 1, 1, [(b"c/related:x", b"e")]),
        (1, "raw", 0, 1, [(b"c/x", b"e2")]), (1, "raw", 2, 1, [(b"c/x", b"e2")])]


def test_all_the_outputs_of_a_partitions_batch_go_into_one_transaction_whatever_commits_meanwhile():
    """The soak (bench/soak.py) lost transitions whose records were in the warehouse, each time a
    worker crashed: the records' batch went into one transaction, a commit ran in between, the
    transitions' batch into the next, which the crash aborted; the events, processed again, were
    duplicates of their committed records.  So a partition's batches are sent under one hold of
    its lock, and a commit waiting for that lock runs before or after all of them."""
    from workloadmap.processors.processing import Outputs

    class Builder:
        def append(self, key, value, timestamp):
            return object()

    topics = OutputTopics("records", "transitions", "dead", "definitions", pods="pods", state="state")

    async def main():
        transaction = {"app-0": 1, "app-1": 1}   # the open transaction of each partition's producer
        sent = []

        class Transactional:
            def __init__(self, tid):
                self.tid = tid
                self._txn_manager = SimpleNamespace(is_in_transaction=lambda: True)

            async def send_batch(self, batch, topic, partition):
                sent.append((partition, topic, transaction[self.tid]))
                await asyncio.sleep(0)   # the producer yields (as aiokafka does while a batch is pending)
                done = asyncio.get_running_loop().create_future()
                done.set_result(None)
                return done

        locks = {tid: asyncio.Lock() for tid in transaction}
        outputs = OutputBatches(app=None, raw_topic="raw", exactly_once=True, topics=topics)
        outputs._producer = _bare_producer({t: Transactional(t) for t in transaction})
        outputs._producer._trn_locks = locks
        outputs._transactional_id = lambda partition: f"app-{partition}"
        outputs._new_batch = lambda partition: Builder()
        outputs.add_batch({p: Outputs(records=[(b"k", b"r")], transitions=[(b"k", b"t")], pods=[(b"k", b"p")],
                                      state=[(b"k", b"o")]) for p in (0, 1)})

        async def committing(tid):   # faust's commit: under the partition's lock, end it and begin the next
            for _ in range(10):
                async with locks[tid]:
                    transaction[tid] += 1
                await asyncio.sleep(0)

        await asyncio.gather(outputs.send(), committing("app-0"), committing("app-1"))
        return sent

    sent = asyncio.run(main())
    assert sorted((p, t) for p, t, _ in sent) == sorted(
        (p, t) for p in (0, 1) for t in ("records", "transitions", "pods", "state"))
    for p in (0, 1):
        assert len({n for q, _, n in sent if q == p}) == 1, f"partition {p}'s outputs in several transactions: {sent}"


def test_a_send_waiting_on_a_producer_given_up_lets_go_and_drops_the_partition():
    """A worker's send waited for good on a producer given up meanwhile (fenced after a takeover:
    aiokafka, once stopped, never answers what waited on it); its events stayed unacked and the
    rebalance it had asked for waited for them, so the worker stopped.  The send now lets go of a
    given-up producer: the partition's events are not acked (processed again after the rebalance)."""
    from workloadmap.processors.processing import Outputs

    topics = OutputTopics("records", "transitions", "dead", "definitions", pods="pods", state="state")

    async def main():
        stuck, fine = Stuck(), Stuck()
        delivered = asyncio.get_running_loop().create_future()
        delivered.set_result(None)

        async def send_at_once(batch, topic, partition):
            return delivered

        fine.send_batch = send_at_once
        outputs = OutputBatches(app=None, raw_topic="raw", exactly_once=True, topics=topics)
        outputs._producer = _bare_producer({"app-0": stuck, "app-1": fine})
        outputs._transactional_id = lambda partition: f"app-{partition}"
        outputs._new_batch = lambda partition: SimpleNamespace(append=lambda **kw: object())
        outputs.add_batch({p: Outputs(records=[(b"k", b"r")]) for p in (0, 1)})
        sending_ = asyncio.ensure_future(outputs.send())
        await asyncio.sleep(0.05)
        assert not sending_.done(), "partition 0's send waits on its producer"
        outputs._producer.lose("app-0", "fenced", stuck)
        dropped = await asyncio.wait_for(sending_, 5)
        await asyncio.sleep(0)   # the given-up producer's stop runs
        return dropped, stuck, outputs

    dropped, stuck, outputs = asyncio.run(main())
    assert dropped == {0}
    assert outputs.take_dropped() == {0}
    assert stuck.stopped


def test_a_commit_step_that_never_ends_gives_its_partition_up(monkeypatch):
    """A commit waiting for good held its partition's lock, and faust's next commits waited for it:
    the worker committed nothing more.  A step that outlasts its bound gives the partition up; the
    other partitions commit."""
    monkeypatch.setattr(sending, "TRANSACTION_STEP_WITHIN", 0.1)
    done = []

    class Fine(Stuck):
        async def send_offsets_to_transaction(self, offsets, group_id):
            done.append("offsets")

        async def commit_transaction(self):
            done.append("commit")

        async def begin_transaction(self):
            done.append("begin")

    async def main():
        producer = _bare_producer({"app-0": Stuck(), "app-1": Fine()})
        await asyncio.wait_for(producer.commit_transactions({"app-0": {("raw", 0): 5}, "app-1": {("raw", 1): 7}},
                                                            "group"), 5)
        lock_free = not producer._trn_locks["app-0"].locked()
        return producer, lock_free

    producer, lock_free = asyncio.run(main())
    assert set(producer.lost) == {"app-0"} and "not done within 0.1 s" in producer.lost["app-0"]
    assert producer.lost_partitions() == {0}
    assert lock_free
    assert done == ["offsets", "commit", "begin"]


def test_a_revoked_partitions_commit_under_way_lets_go_when_faust_stops_its_producer():
    """faust stops a revoked partition's producer at the assignment, whatever waits on it: a commit
    under way lets go (the partition is not lost: it is gone, its events are its new owner's)."""

    async def main():
        stuck = Stuck()
        producer = _bare_producer({"app-0": stuck})
        committing = asyncio.ensure_future(producer.commit_transactions({"app-0": {("raw", 0): 5}}, "group"))
        await asyncio.sleep(0.05)
        await producer.stop_transaction("app-0")
        await asyncio.wait_for(committing, 5)
        return producer, stuck

    producer, stuck = asyncio.run(main())
    assert producer.lost == {} and stuck.stopped
    assert "app-0" not in producer._transaction_producers


def test_a_flush_goes_on_when_a_producer_is_given_up_meanwhile():
    """A rebalance flushes every producer; a worker crashed there ("dictionary changed size during
    iteration") when a transaction was lost during the flush, and a given-up producer's flush never
    ends.  The flush goes over the producers of its start and lets go of a given-up one."""

    class Flushing(Stuck):
        async def flush(self):
            await asyncio.sleep(0.05)

    class StuckFlush(Stuck):
        flush = Stuck._forever

    async def main():
        stuck = StuckFlush()
        producer = _bare_producer({"app-0": Flushing(), "app-1": stuck, "app-2": Flushing()})
        producer.buffer = SimpleNamespace(flush=Flushing().flush)
        producer._producer = None
        flushing = asyncio.ensure_future(producer.flush())
        await asyncio.sleep(0.08)   # app-0's flush is done, app-1's waits
        producer.lose("app-1", "fenced", stuck)
        await asyncio.wait_for(flushing, 5)
        return producer

    producer = asyncio.run(main())
    assert set(producer._transaction_producers) == {"app-0", "app-2"}
