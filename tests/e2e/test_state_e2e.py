"""The processors' state on a real broker (processors/remembering.py): a worker restarted after many
pods were created and deleted rebuilds its partitions from the compacted state topic alone, keeps
only the live objects, and goes on with exactly the outputs of a worker that never stopped."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta, timezone

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from tests.e2e.test_pipeline_e2e import Pipeline, pipeline_on  # noqa: F401 - the fixture
from workloadmap.catalog import records
from workloadmap.ingest.publishing import event_key
from workloadmap.processors.app import PartitionStates, WorkerSettings
from workloadmap.processors.processing import MemoryStates, Processor
from workloadmap.processors.remembering import FORGET_AFTER
from workloadmap.running import STATE_TOPIC_CONFIG

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
NAMESPACES, DELETED, LIVE = 4, 75, 5   # per namespace


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Churn:
    """A node, a Deployment and its ReplicaSet per namespace, DELETED pods per namespace bound then
    deleted 5 s later, then (FORGET_AFTER past the last deletion) LIVE pods per namespace: the first
    part.  The second: the relist of a restarted watcher deleting 10 of the deleted pods again (a
    newer resourceVersion), half the live pods Succeeded, a quarter deleted, a new pod per namespace."""

    def __init__(self):
        self.rv = 100
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "uid": "node-1"},
                "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                           "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
        first = [self.event("ADDED", node, 0)]
        for n in range(NAMESPACES):
            ns = f"team-{n}"
            deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                          "metadata": {"name": "serve", "namespace": ns, "uid": f"d-{n}"},
                          "spec": {"replicas": LIVE, "template": {"spec": {"containers": [
                              {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
            rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": "serve-1", "namespace": ns, "uid": f"rs-{n}",
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve",
                                                    "uid": f"d-{n}", "controller": True}]}}
            first += [self.event("ADDED", deployment, 0), self.event("ADDED", rs, 0)]
        gone = [self.pod(n, f"gone-{i}") for i in range(DELETED) for n in range(NAMESPACES)]
        for i, pod in enumerate(gone):
            first += [self.event("ADDED", pod, i * 0.5), self.event("DELETED", pod, i * 0.5 + 5)]
        start = len(gone) * 0.5 + 5 + FORGET_AFTER + 10
        live = [self.pod(n, f"live-{i}") for i in range(LIVE) for n in range(NAMESPACES)]
        first += [self.event("ADDED", pod, start) for pod in live]
        second = [self.event("DELETED", pod, start + 60) for pod in gone[:10]]
        second += [self.event("MODIFIED", {**pod, "status": {"phase": "Succeeded"}}, start + 61) for pod in live[::2]]
        second += [self.event("DELETED", pod, start + 62) for pod in live[1::4]]
        second += [self.event("ADDED", self.pod(n, "late"), start + 63) for n in range(NAMESPACES)]
        self.first, self.second = first, second
        self.live_pods = {f"lab/{p['metadata']['uid']}" for p in live}

    def event(self, etype: str, obj: dict, seconds: float) -> dict:
        self.rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        return records.raw_event("lab", etype, obj, _at(seconds))

    @staticmethod
    def pod(n: int, name: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"serve-1-{name}", "namespace": f"team-{n}", "uid": f"p-{n}-{name}",
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-1",
                                                  "uid": f"rs-{n}", "controller": True}]},
                "spec": {"nodeName": "gpu-1", "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Running"}}


def _outputs(events) -> dict:
    """What one uninterrupted processor gives: (key, value) of pod records, workload records and state
    messages, in order (every event is one raw partition's: they are the same per partition)."""
    processor, stores, out = Processor(), {}, {"pods": [], "workloads": [], "state": []}
    for e in events:
        o = processor.process(event_key(e), records.encode(e), stores.setdefault(event_key(e), MemoryStates()))
        out["pods"] += o.pods
        out["workloads"] += o.records
        out["state"] += o.state
    return out


def _committed(p: Pipeline, topic: str) -> list:
    return [(m.key, m.value) for m in p.topic_messages(topic)]


def _wait_for(p: Pipeline, topic: str, count: int, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        assert p.procs["processors"].poll() is None, p.log("processors")
        got = len(p.topic_messages(topic))
        if got >= count:
            return
        time.sleep(1)
    raise AssertionError(f"{got} of {count} messages on {topic}\n{p.log('processors')}")


def test_a_restarted_worker_recovers_only_the_live_objects_and_goes_on_as_if_never_stopped(kafka_broker, pipeline_on):
    """300 pods created and deleted, then 20 live ones: a worker SIGKILLed there is replaced by one that
    reads the state topic alone and keeps the 20 pods, the node, the 4 Deployments and the 8 owner
    links (Deployments, ReplicaSets), no deleted object; after the second part the pod and workload
    records on the topics are exactly those of one processor that never stopped, each once."""
    churn = Churn()
    expected_first = _outputs(churn.first)
    expected = _outputs(churn.first + churn.second)
    p = pipeline_on(kafka_broker.bootstrap_servers)
    p.start("processors")
    p.publish([(event_key(e), records.encode(e), None) for e in churn.first])
    _wait_for(p, "pods", len(expected_first["pods"]))
    _wait_for(p, "state", len(expected_first["state"]))
    p.kill("processors")   # SIGKILL: its state lives on only in the state topic
    # the topic as the worker created it: compacted, and so while the pipeline runs (running.py)
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, p.topic("state"))])
    finally:
        admin.close()
    configs = described["topic"][p.topic("state")]   # the values set on the topic
    assert {k: configs[k]["value"] for k in STATE_TOPIC_CONFIG} == STATE_TOPIC_CONFIG
    assert STATE_TOPIC_CONFIG["cleanup.policy"] == "compact" and int(STATE_TOPIC_CONFIG["segment.ms"]) <= 60_000

    # what a new owner of the three raw partitions rebuilds (the worker's own recovery code)
    states = PartitionStates(WorkerSettings(bootstrap_servers=kafka_broker.bootstrap_servers,
                                            state_topic=p.topic("state")))
    states.recover([0, 1, 2])
    stores = list(states.by_partition.values())
    assert {k for s in stores for k in s.pods.pods} == churn.live_pods
    assert {k for s in stores for k in s.pods.nodes} == {"lab/gpu-1"}
    assert {k for s in stores for k in s} == {f"lab/d-{n}" for n in range(NAMESPACES)}
    assert {k for s in stores for k in s.pods.owners} == {f"lab/{w}-{n}" for n in range(NAMESPACES) for w in ("d", "rs")}
    assert not any(s.forgetting.heap or s.pods.pending for s in stores)
    # it read the state topic's messages (compaction may have cleaned some already), nothing else
    assert sum(states.recovered.values()) <= len(expected_first["state"])
    history = len(_committed(p, "pods")) + len(_committed(p, "workloads"))
    assert history == len(expected_first["pods"]) + len(expected_first["workloads"])

    p.start("processors")
    p.publish([(event_key(e), records.encode(e), None) for e in churn.second])
    _wait_for(p, "pods", len(expected["pods"]))
    time.sleep(3)   # anything more would show now
    assert Counter(_committed(p, "pods")) == Counter(expected["pods"])
    assert Counter(_committed(p, "workloads")) == Counter(expected["workloads"])
    p.stop("processors")
