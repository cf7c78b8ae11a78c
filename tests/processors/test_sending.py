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

from workloadmap.processors.sending import OutputProducer


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
        producer.lost = {}
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
    from types import SimpleNamespace

    from workloadmap.processors.processing import Outputs
    from workloadmap.processors.sending import OutputBatches, OutputTopics

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
        outputs._producer = SimpleNamespace(_trn_locks=locks, lost={}, lost_partitions=set,
                                            _transaction_producers={t: Transactional(t) for t in transaction})
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
