"""What a worker remembers (processors/remembering.py): the state topic's messages, deleted objects
remembered for FORGET_AFTER seconds of the partition's event time then forgotten with a tombstone,
repeated deletions and older events making no record, at most MAX_DELETED deleted objects, and a
store rebuilt from the state messages alone giving the same outputs as the store that wrote them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from workloadmap.catalog import records
from workloadmap.ingest.publishing import event_key
from workloadmap.ingest.scheduling import simulate_clusters
from workloadmap.processors.processing import MemoryStates, Outputs, Processor
from workloadmap.processors.remembering import FORGET_AFTER, Forgetting

from tests.processors.test_pod_records import deployment, node, pod, replicaset

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event(obj, seconds, etype="MODIFIED", rv=None):
    if rv is not None:
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}
    return records.raw_event("c1", etype, obj, at(seconds))


class Run:
    """A processor and one store; ``feed`` gives the Outputs of each event."""

    def __init__(self, states: MemoryStates | None = None):
        self.processor, self.states = Processor(), states if states is not None else MemoryStates()
        self.state_messages: list = []

    def feed(self, *events) -> Outputs:
        total = Outputs()
        for e in events:
            out = self.processor.process(event_key(e), records.encode(e), self.states)
            for name in ("records", "transitions", "dead_letters", "pods", "nodes", "state"):
                getattr(total, name).extend(getattr(out, name))
            self.state_messages += out.state
        return total


def _lived_and_deleted(run: Run):
    """A Deployment, its ReplicaSet, a pod bound to node n1, then all four deleted at 10-13 s."""
    d = deployment()
    rs = replicaset(d)
    p = pod(owner=rs, node="n1", rv="13")
    n = node()
    run.feed(event(d, 0, "ADDED"), event(rs, 1, "ADDED"), event(p, 2, "ADDED"), event(n, 3, "ADDED"))
    deleted = run.feed(event(p, 10, "DELETED", rv="20"), event(rs, 11, "DELETED", rv="21"),
                       event(d, 12, "DELETED", rv="22"), event(n, 13, "DELETED", rv="23"))
    return d, rs, p, n, deleted


def test_each_record_goes_with_its_state_message_in_the_same_outputs():
    """A workload's summary, a pod's and a node's record under their prefixed keys, an owner link for
    the Deployment and the ReplicaSet (both owners in the chain): the state a new owner of the
    partition reads back."""
    run = Run()
    out = run.feed(event(deployment(), 0, "ADDED"))
    (record,) = [json.loads(v) for _, v in out.records]
    summary = dict(out.state)[b"workload:c1/d1"]
    assert json.loads(summary) == {"rv": "10", "status": record["status"], "since": at(0), "deleted": False}
    rs = replicaset(deployment())
    out = run.feed(event(rs, 1, "ADDED"), event(pod(owner=rs, node="n1"), 2, "ADDED"), event(node(), 3, "ADDED"))
    keys = [k for k, _ in out.state]
    assert keys == [b"owner:c1/r1", b"pod:c1/p1", b"node:c1/n1"]
    assert dict(out.state)[b"pod:c1/p1"] == out.pods[0][1] and dict(out.state)[b"node:c1/n1"] == out.nodes[0][1]


def test_deleted_objects_are_forgotten_once_the_partition_s_event_time_is_past_the_grace():
    """Pod deleted at 10 s, Deployment at 12 s, node at 13 s (FORGET_AFTER 60 s): an event at 69 s
    forgets nothing; one at 70 s forgets the pod, one at 73 s the Deployment and the node, each
    with a tombstone in that event's outputs; the ReplicaSet's owner link went at its deletion."""
    assert FORGET_AFTER == 60
    run = Run()
    _, _, _, _, deleted = _lived_and_deleted(run)
    assert (b"owner:c1/r1", None) in deleted.state and "c1/r1" not in run.states.pods.owners
    assert run.states["c1/d1"]["deleted"] and run.states.pods.pods["c1/p1"] == {
        "rv": "20", "deleted": True, "deletedAt": (T0 + timedelta(seconds=10)).timestamp()}
    other = node(name="n2", uid="n2-uid", rv="30")
    assert [(k, v is None) for k, v in run.feed(event(other, 69, "ADDED")).state] == [(b"node:c1/n2", False)]
    assert [k for k, v in run.feed(event(other, 70, rv="31")).state if v is None] == [b"pod:c1/p1"]
    assert "c1/p1" not in run.states.pods.pods and "c1/d1" in run.states
    assert [k for k, v in run.feed(event(other, 73, rv="32")).state if v is None] == [
        b"workload:c1/d1", b"node:c1/n1"]
    assert ("c1/d1" not in run.states and "c1/n1" not in run.states.pods.nodes and len(run.states.forgetting) == 0)
    # what the topic keeps after compaction: the live node n2 alone
    recovered = MemoryStates.from_state(run.state_messages)
    assert (dict(recovered), recovered.pods.pods, set(recovered.pods.nodes), recovered.pods.owners) == (
        {}, {}, {"c1/n2"}, {})


def test_an_observed_at_in_another_format_forgets_as_well():
    """observedAt with an offset for Z and no milliseconds (a recorded file's): at 71 s it forgets the
    pod deleted at 10 s and not yet the Deployment deleted at 12 s (remembering.Forgetting.may_be_due
    compares texts first)."""
    run = Run()
    _lived_and_deleted(run)
    tick = event(node(name="n2", uid="n2-uid", rv="30"), 0, "ADDED")
    tick["observedAt"] = "2026-12-01T00:01:11+00:00"
    assert [k for k, v in run.feed(tick).state if v is None] == [b"pod:c1/p1"]


@pytest.mark.parametrize("later", [20, 200], ids=["remembered", "forgotten"])
def test_a_repeated_deletion_and_an_older_event_make_no_record(later):
    """A restarted watcher's relist deletes again (with the list's resourceVersion, newer), and a late
    watcher publishes versions older than the deletions: no workload, pod or node record, while
    the deletions are remembered (20 s) and once forgotten (200 s: the repeated deletion comes first,
    so the object is unknown when its older event would have brought it back, and stays unknown)."""
    run = Run()
    d, rs, p, n, _ = _lived_and_deleted(run)
    again = run.feed(event(p, later, "DELETED", rv="40"), event(d, later, "DELETED", rv="40"),
                     event(n, later, "DELETED", rv="40"))
    assert (again.records, again.pods, again.nodes, again.transitions, again.dead_letters) == ([], [], [], [], [])
    if later == 20:
        older = run.feed(event(p, later + 1, rv="14"), event(d, later + 1, rv="11"), event(n, later + 1, rv="6"))
        assert (older.records, older.pods, older.nodes, older.transitions) == ([], [], [], [])


def test_a_flood_of_deletions_keeps_the_newest_max_deleted_of_them():
    """At most max_deleted (here 3) deleted objects: five pods deleted at 10..14 s leave p3, p4, p5;
    p1 is forgotten in p4's deletion's outputs and p2 in p5's."""
    run = Run(MemoryStates(forgetting=Forgetting(max_deleted=3)))
    rs = replicaset(deployment())
    pods = [pod(uid=f"p{i}", owner=rs, node="n1", rv=str(20 + i)) for i in range(1, 6)]
    run.feed(event(deployment(), 0, "ADDED"), event(rs, 1, "ADDED"), *(event(p, 2, "ADDED") for p in pods))
    tombstones = [[k for k, v in run.feed(event(p, 9 + i, "DELETED", rv=str(30 + i))).state if v is None]
                  for i, p in enumerate(pods, start=1)]
    assert tombstones == [[], [], [], [b"pod:c1/p1"], [b"pod:c1/p2"]]
    assert sorted(run.states.pods.pods) == ["c1/p3", "c1/p4", "c1/p5"]


def _history():
    """Two simulated clusters for three days (workloads of every framework, their owners, pods on
    nodes, deletions), one raw partition's worth: every event."""
    return list(simulate_clusters(clusters=2, workloads=40, days=3, seed=5))


def test_a_store_rebuilt_from_the_state_messages_gives_the_outputs_of_the_store_that_wrote_them():
    """The history processed at once, and again stopped at a third and two thirds where a new worker
    (a fresh Processor with the definitions the first published, a store from the state messages
    alone) goes on: the same records, transitions, pod, node and state messages after each stop."""
    events = _history()
    deletions = sum(1 for e in events if e["type"] == "DELETED")
    assert deletions > 30   # the history deletes: forgetting is exercised
    live, outs = Run(), []
    for e in events:
        outs.append(live.feed(e))
    for stop in (len(events) // 3, 2 * len(events) // 3):
        fresh = Processor()
        for out in outs[:stop]:
            for _, value in out.definitions:
                if value is not None:
                    fresh.apply_definition(records.decode(value))
        restarted = Run(MemoryStates.from_state([m for out in outs[:stop] for m in out.state]))
        restarted.processor = fresh
        for e, expected in zip(events[stop:], outs[stop:]):
            got = restarted.feed(e)
            for name in ("records", "transitions", "pods", "nodes", "state"):
                assert getattr(got, name) == getattr(expected, name), (name, e["object"]["kind"], e["type"])
            assert ([json.loads(v)["reason"] for _, v in got.dead_letters]
                    == [json.loads(v)["reason"] for _, v in expected.dead_letters])


def test_after_the_grace_only_live_objects_are_remembered_in_memory_and_in_the_topic():
    """Once the event time is FORGET_AFTER past the history's last deletion, the store holds exactly
    the workloads, pods and nodes still alive at the end of the history (and the owner links of live
    owners); the state messages, compacted, hold the same."""
    events = _history()
    run = Run()
    run.feed(*events)
    last: dict[tuple, dict] = {}
    for e in events:
        last[(e["object"]["kind"], e["object"]["metadata"]["uid"])] = e
    alive = {k: e for k, e in last.items() if e["type"] != "DELETED"}
    end = records.parse_time(events[-1]["observedAt"]) + timedelta(seconds=FORGET_AFTER)
    tick = records.raw_event("elsewhere", "ADDED", node(name="tick", uid="tick"), end.isoformat())
    run.feed(tick)
    for store in (run.states, MemoryStates.from_state(run.state_messages)):
        pods = {f"{e['cluster']}/{uid}" for (kind, uid), e in alive.items() if kind == "Pod"}
        nodes = {f"{e['cluster']}/{e['object']['metadata']['name']}" for (kind, _), e in alive.items()
                 if kind == "Node"} | {"elsewhere/tick"}
        assert set(store.pods.pods) == pods and set(store.pods.nodes) == nodes
        owners = {f"{e['cluster']}/{uid}" for (kind, uid), e in alive.items() if kind not in ("Pod", "Node")}
        assert set(store.pods.owners) <= owners and set(store) <= owners | pods
        assert not any(s.get("deleted") for s in (*store.values(), *store.pods.pods.values(),
                                                  *store.pods.nodes.values()))
    assert len(run.states.forgetting) == 0
