"""End to end on a real Kafka broker: replayed raw events → processors → warehouse (DuckDB).

The services run as the real `workloadmap run processors` / `run warehouse`
processes.  Checks: raw events in = records + dead letters; every workload's
final status, GPUs and pods as the simulator intended; bad input classes
dead-lettered with their reasons; no duplicates after re-publishing; and
nothing lost or doubled when a processor, the warehouse writer or the broker
is killed mid-stream and restarted.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest
from kafka import KafkaConsumer

from tests.services.fixtures import skip_if_kafka_opted_out
from tests.services.kafka_broker import KafkaBroker
from workloadmap.catalog import records
from workloadmap.ingest.publishing import KafkaPublisher, event_key
from workloadmap.ingest.simulating import simulate_messages

WORKLOADMAP = [sys.executable, "-m", "workloadmap"]


def _messages(workloads=40, days=2, seed=11, bad_fraction=0.06):
    return list(simulate_messages(clusters=3, workloads=workloads, days=days, seed=seed, bad_fraction=bad_fraction))


class Pipeline:
    """The services of one test, on their own topics, group ids and DuckDB file."""

    def __init__(self, bootstrap: str, tmp: Path):
        self.bootstrap = bootstrap
        self.tmp = tmp
        run = uuid.uuid4().hex[:8]
        self.env = dict(os.environ,
                        WORKLOADMAP_BOOTSTRAP_SERVERS=bootstrap,
                        WORKLOADMAP_RAW_TOPIC=f"raw-{run}", WORKLOADMAP_WORKLOADS_TOPIC=f"workloads-{run}",
                        WORKLOADMAP_TRANSITIONS_TOPIC=f"transitions-{run}",
                        WORKLOADMAP_DEADLETTER_TOPIC=f"deadletter-{run}",
                        WORKLOADMAP_PODS_TOPIC=f"pods-{run}", WORKLOADMAP_NODES_TOPIC=f"nodes-{run}",
                        WORKLOADMAP_STATE_TOPIC=f"state-{run}", WORKLOADMAP_DEFINITIONS_TOPIC=f"definitions-{run}",
                        WORKLOADMAP_CLIENT_ID=f"e2e-{run}", WORKLOADMAP_DUCKDB=str(tmp / "warehouse.duckdb"))
        self.snapshot = tmp / "snapshot.duckdb"
        self.workdir = tmp / "workdir"   # the services' working directory: they leave nothing in it
        self.workdir.mkdir()
        self.procs: dict[str, subprocess.Popen] = {}

    def topic(self, name):
        return self.env[f"WORKLOADMAP_{name.upper()}_TOPIC"]

    def start(self, service: str):
        args = [*WORKLOADMAP, "run", service]
        if service == "warehouse":
            args += ["--snapshot", str(self.snapshot), "--snapshot-every", "0.5"]
        log = open(self.tmp / f"{service}.log", "ab")
        self.procs[service] = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                               cwd=self.workdir)

    def kill(self, service: str):
        proc = self.procs.pop(service)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop(self, service: str):
        proc = self.procs.pop(service)
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(60) == 0, self.log(service)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"{service} did not stop on SIGTERM\n{self.log(service)}") from None

    def log(self, service: str) -> str:
        path = self.tmp / f"{service}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def publish(self, messages, from_index=0, to_index=None):
        with KafkaPublisher(self.bootstrap, topic=self.topic("raw")) as publisher:
            for key, value, _ in messages[from_index:to_index]:
                publisher.publish_raw(key, value)
            publisher.flush()

    def warehouse_rows(self, sql: str):
        if not self.snapshot.exists():
            return None
        try:
            con = duckdb.connect(str(self.snapshot), read_only=True)
        except duckdb.Error:
            return None
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()

    def wait_for_records(self, expected: int, timeout: float = 180,
                         count_sql: str = "SELECT count(*) FROM workload_states") -> None:
        """Until `count_sql` (one number: by default the workload records) reaches `expected`."""
        deadline = time.time() + timeout
        count = None
        while time.time() < deadline:
            for service, proc in self.procs.items():
                assert proc.poll() is None, f"{service} exited:\n{self.log(service)}"
            rows = self.warehouse_rows(count_sql)
            count = rows[0][0] if rows else None
            if count is not None and count >= expected:
                return
            time.sleep(0.5)
        raise AssertionError(f"warehouse has {count} of {expected} ({count_sql})\n--- processors\n"
                             f"{self.log('processors')}\n--- warehouse\n{self.log('warehouse')}")

    def topic_messages(self, name: str) -> list:
        """The committed messages of one of the run's topics (read_committed: as the writer reads them)."""
        consumer = KafkaConsumer(self.topic(name), bootstrap_servers=self.bootstrap, auto_offset_reset="earliest",
                                 isolation_level="read_committed", consumer_timeout_ms=3000)
        try:
            return list(consumer)
        finally:
            consumer.close()

    def dead_letters(self) -> list[dict]:
        return [json.loads(m.value) for m in self.topic_messages("deadletter")]

    def transaction_markers(self, name: str) -> int:
        """Offsets of a topic taken by transaction markers (not messages): 0 when nothing was
        written in a transaction.  A read_committed consumer skips the markers."""
        from kafka import TopicPartition
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, auto_offset_reset="earliest",
                                 isolation_level="read_committed", consumer_timeout_ms=3000)
        try:
            tps = [TopicPartition(self.topic(name), p) for p in consumer.partitions_for_topic(self.topic(name))]
            consumer.assign(tps)
            ends = consumer.end_offsets(tps)
            return sum(ends.values()) - sum(1 for _ in consumer)
        finally:
            consumer.close()

    def close(self):
        for service in list(self.procs):
            self.kill(service)


@pytest.fixture
def pipeline_on(tmp_path):
    pipelines = []

    def make(bootstrap):
        p = Pipeline(bootstrap, tmp_path)
        pipelines.append(p)
        return p
    yield make
    for p in pipelines:
        p.close()


def _check_warehouse(p: Pipeline, messages) -> None:
    """Final state per workload as intended; no duplicate records."""
    good = [(k, v, i) for k, v, i in messages if i.expected_deadletter_reason is None]
    rows = p.warehouse_rows("SELECT count(*), count(DISTINCT (cluster, uid, resource_version, deleted)) "
                            "FROM workload_states")
    assert rows[0] == (len(good), len(good)), "every good event once, no duplicates"
    last = {}
    for _, _, intent in good:
        last[(intent.event["cluster"], intent.event["object"]["metadata"]["uid"])] = intent
    states = p.warehouse_rows("""
        SELECT cluster, uid, status, gpus, pods FROM workload_states
        QUALIFY row_number() OVER (PARTITION BY cluster, uid ORDER BY seq DESC) = 1""")
    assert len(states) == len(last)
    for cluster, uid, status, gpus, pods in states:
        intent = last[(cluster, uid)]
        assert status == intent.expected_status, (cluster, uid)
        if status != records.DELETED:
            assert gpus == pytest.approx(intent.expected_gpus) and pods == intent.expected_pods, (cluster, uid)
    # every status change has its transition, and every transition its status change: a record and
    # its transition commit together, whatever was killed meanwhile (bench/soak.py found them apart)
    changes = """SELECT cluster, uid, status, observed_at FROM (
        SELECT cluster, uid, status, observed_at, lag(status) OVER (PARTITION BY cluster, uid ORDER BY seq) AS before
        FROM workload_states) WHERE before IS DISTINCT FROM status"""
    on = ("ON t.cluster = c.cluster AND t.uid = c.uid AND t.to_status = c.status "
          "AND t.transitioned_at = c.observed_at")
    assert p.warehouse_rows(f"SELECT count(*) FROM ({changes}) c ANTI JOIN transitions t {on}") == [(0,)]
    assert p.warehouse_rows(f"SELECT count(*) FROM transitions t ANTI JOIN ({changes}) c {on}") == [(0,)]


def test_replayed_events_reach_the_warehouse_exactly_once(kafka_broker, pipeline_on):
    messages = _messages()
    bad = [i.expected_deadletter_reason for _, _, i in messages if i.expected_deadletter_reason]
    good = len(messages) - len(bad)
    assert bad and good > 100
    # malformed, at the broker's default message size: its dead letter (bytes in base64) is larger
    oversized = b'{"cluster": "c1", ' + b"x" * 1_000_000
    p = pipeline_on(kafka_broker.bootstrap_servers)
    p.start("processors")
    p.start("warehouse")
    p.publish([(b"c1/oversized", oversized, None)])
    p.publish(messages)
    p.wait_for_records(good)
    letters = p.dead_letters()
    # raw in = records + dead letters
    assert Counter(d["reason"] for d in letters) == Counter(bad + [records.MALFORMED_JSON])
    assert all(d["stage"] == "processor" for d in letters)
    assert [base64.b64decode(d["valueBase64"]) for d in letters if d["key"] == "c1/oversized"] == [oversized]
    # the outputs were written in the transactions that committed their raw offsets
    for name in ("workloads", "transitions", "deadletter"):
        assert p.transaction_markers(name) > 0, name
    p.publish(messages)  # the same events again: nothing new anywhere
    time.sleep(8)
    p.stop("processors")
    time.sleep(3)
    p.stop("warehouse")
    assert not list(p.workdir.iterdir())
    _check_warehouse(p, messages)
    transitions = p.warehouse_rows("SELECT count(*), count(DISTINCT (cluster, uid, transitioned_at, to_status)) "
                                   "FROM transitions")[0]
    assert transitions[0] == transitions[1] > 0
    # a re-published bad message is a new message (new offset): it is dead-lettered again, so that
    # every raw message received stays accounted for as a record or a dead letter
    assert Counter(d["reason"] for d in p.dead_letters()) == Counter(bad * 2 + [records.MALFORMED_JSON])


def _interrupted_run(p: Pipeline, messages, interrupt, resume, timeout=180, *, stream=None):
    """Publish half, interrupt mid-stream, publish the rest, resume; then check the warehouse: the
    workloads' final states, or with a PodNodeStream its pod and node intervals and its accounting."""
    done_sql, done = ("SELECT count(*) FROM workload_states", len(messages)) if stream is None else stream.done
    p.start("processors")
    p.start("warehouse")
    half = len(messages) // 2
    p.publish(messages, 0, half)
    p.wait_for_records(half // 3, count_sql=done_sql)
    interrupt()
    p.publish(messages, half)
    resume()
    p.wait_for_records(done, timeout=timeout, count_sql=done_sql)
    time.sleep(4)
    p.stop("processors")
    p.stop("warehouse")
    if stream is None:
        _check_warehouse(p, messages)
    else:
        stream.check(p)


def _at(minutes: float) -> str:
    """The instant `minutes` (to the second) after 2026-12-01 00:00 UTC, as RFC 3339."""
    return (datetime(2026, 12, 1, tzinfo=timezone.utc) + timedelta(seconds=round(minutes * 60))).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class PodNodeStream:
    """A cluster's nodes and the pods of its Deployments, as raw events in time order, with the pod and
    node intervals the warehouse must end with, worked out from the plan (README: a pod holds from the
    event that binds it until the one that ends it; a node has its allocatable until changed or deleted):

    - node i (8 GPUs, node group pool-a, added at -60 min): i % 3 == 0 moves to pool-b at 15 min (two
      intervals, split there); i % 3 == 1 is cordoned at 10 min (two, the second unschedulable); i % 3 == 2
      is deleted at 60 min (one, closed there).  Pods go to the nodes that stay.
    - pod j (created at j/6 min in namespace team-(j % namespaces), owned by its namespace's ReplicaSet of
      a Deployment, both published at -30 min): Pending until bound 5 min later, then Bound until it
      Succeeds 20 min later (j % 3 == 0, deleted a minute after: no new interval), until it is deleted
      25 min later (j % 3 == 1), or for good (j % 3 == 2, open).
    - one pod whose nodeName is a number and one node whose allocatable GPUs are words: a dead letter each.

    Every pod and node event changes something the warehouse keeps (state, node, pool, cordon, deletion):
    each is one record, so raw pod (node) events = pod (node) records + malformed-pod (-node) letters."""

    def __init__(self, nodes: int = 6, pods: int = 120, namespaces: int = 4):
        steps = []   # (minute, type, object)
        self.pod_intervals, self.node_intervals = [], []
        for i in range(nodes):
            name = f"gpu-{i}"
            steps.append((-60, "ADDED", self._node(name)))
            if i % 3 == 0:
                steps.append((15, "MODIFIED", self._node(name, pool="pool-b")))
                self.node_intervals += [(name, _at(-60), _at(15), False, "pool-a"), (name, _at(15), None, False, "pool-b")]
            elif i % 3 == 1:
                steps.append((10, "MODIFIED", self._node(name, cordoned=True)))
                self.node_intervals += [(name, _at(-60), _at(10), False, "pool-a"), (name, _at(10), None, True, "pool-a")]
            else:
                steps.append((60, "DELETED", self._node(name)))
                self.node_intervals.append((name, _at(-60), _at(60), False, "pool-a"))
        kept_nodes = [f"gpu-{i}" for i in range(nodes) if i % 3 != 2]
        owners = {}
        for n in range(namespaces):
            deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                          "metadata": {"name": "serve", "namespace": f"team-{n}", "uid": f"d-{n}"},
                          "spec": {"replicas": pods // namespaces, "template": {"spec": {"containers": [
                              {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
            owners[n] = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                         "metadata": {"name": "serve-1", "namespace": f"team-{n}", "uid": f"rs-{n}",
                                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                           "name": "serve", "uid": f"d-{n}", "controller": True}]}}
            steps += [(-30, "ADDED", deployment), (-30, "ADDED", owners[n])]
        for j in range(pods):
            created, node = j / 6, kept_nodes[j % len(kept_nodes)]
            bound = created + 5
            steps += [(created, "ADDED", self._pod(j, owners[j % namespaces])),
                      (bound, "MODIFIED", self._pod(j, owners[j % namespaces], node, "Running"))]
            self.pod_intervals.append((f"p-{j}", "Pending", None, _at(created), _at(bound)))
            if j % 3 == 0:
                steps += [(bound + 20, "MODIFIED", self._pod(j, owners[j % namespaces], node, "Succeeded")),
                          (bound + 21, "DELETED", self._pod(j, owners[j % namespaces], node, "Succeeded"))]
                self.pod_intervals.append((f"p-{j}", "Bound", node, _at(bound), _at(bound + 20)))
            elif j % 3 == 1:
                steps.append((bound + 25, "DELETED", self._pod(j, owners[j % namespaces], node, "Running")))
                self.pod_intervals.append((f"p-{j}", "Bound", node, _at(bound), _at(bound + 25)))
            else:
                self.pod_intervals.append((f"p-{j}", "Bound", node, _at(bound), None))
        bad_pod = self._pod(pods, owners[0])
        bad_pod["spec"]["nodeName"] = 7
        bad_node = self._node("gpu-bad")
        bad_node["status"]["allocatable"]["nvidia.com/gpu"] = "eight"
        steps += [(30, "ADDED", bad_pod), (30, "ADDED", bad_node)]
        steps.sort(key=lambda step: step[0])   # stable: a pod's (node's) events stay in their order
        events = []
        for version, (minute, etype, obj) in enumerate(steps, start=100):
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(version)}}
            events.append(records.raw_event("lab", etype, obj, _at(minute)))
        self.messages = [(event_key(e), records.encode(e), None) for e in events]
        self.raw = Counter(e["object"]["kind"] for e in events)
        closed = sum(1 for iv in self.pod_intervals if iv[4]) + sum(1 for iv in self.node_intervals if iv[2])
        # intervals opened + intervals closed: grows with every fact the writer applies, reaches this at the end
        self.done = ("SELECT (SELECT count(*) FROM pod_intervals) + (SELECT count(*) FROM pod_history) "
                     "+ (SELECT count(*) FROM node_intervals) + (SELECT count(*) FROM node_history)",
                     len(self.pod_intervals) + len(self.node_intervals) + closed)

    @staticmethod
    def _node(name: str, *, pool: str = "pool-a", cordoned: bool = False) -> dict:
        amounts = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"eks.amazonaws.com/nodegroup": pool}},
                "spec": {"unschedulable": True} if cordoned else {},
                "status": {"allocatable": dict(amounts), "capacity": dict(amounts),
                           "conditions": [{"type": "Ready", "status": "True"}]}}

    @staticmethod
    def _pod(j: int, owner: dict, node: str | None = None, phase: str = "Pending") -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"serve-1-{j}", "namespace": owner["metadata"]["namespace"], "uid": f"p-{j}",
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-1",
                                                  "uid": owner["metadata"]["uid"], "controller": True}]},
                "spec": {**({"nodeName": node} if node else {}), "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": phase}}

    def check(self, p: Pipeline) -> None:
        """The intervals exactly as planned (none doubled, none missing); every raw pod and node event a
        record or a dead letter, and no record twice on its topic."""
        def times(rows):
            return sorted(tuple(v.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(v, datetime)
                                else v for v in row) for row in rows)
        pods = p.warehouse_rows("SELECT uid, state, node, valid_from, valid_to FROM pod_intervals")
        assert times(pods) == sorted(self.pod_intervals)
        nodes = p.warehouse_rows("SELECT name, valid_from, valid_to, unschedulable, node_pool FROM node_intervals")
        assert times(nodes) == sorted(self.node_intervals)
        letters = Counter(d["reason"] for d in p.dead_letters())
        assert letters == Counter({records.MALFORMED_POD: 1, records.MALFORMED_NODE: 1})
        for topic, kind, reason in (("pods", "Pod", records.MALFORMED_POD), ("nodes", "Node", records.MALFORMED_NODE)):
            versions = Counter((m.key, json.loads(m.value)["resourceVersion"]) for m in p.topic_messages(topic))
            assert max(versions.values()) == 1, [k for k, n in versions.items() if n > 1][:5]
            assert sum(versions.values()) + letters[reason] == self.raw[kind], topic


def _stream(kind: str, seed: int) -> dict:
    """_interrupted_run's stream: the simulator's workloads, or pods and nodes (PodNodeStream)."""
    if kind == "workloads":
        return {"messages": _messages(seed=seed, bad_fraction=0.0)}
    stream = PodNodeStream()
    return {"messages": stream.messages, "stream": stream}


@pytest.mark.parametrize("kind", ["workloads", "pods and nodes"])
@pytest.mark.parametrize("victim", ["processors", "warehouse"])
def test_a_service_killed_mid_stream_loses_and_doubles_nothing(kafka_broker, pipeline_on, victim, kind):
    p = pipeline_on(kafka_broker.bootstrap_servers)
    _interrupted_run(p, **_stream(kind, seed=23),
                     interrupt=lambda: p.kill(victim),  # SIGKILL: no chance to commit or clean up
                     resume=lambda: (time.sleep(2), p.start(victim)))


@pytest.mark.parametrize("kind", ["workloads", "pods and nodes"])
def test_broker_restart_mid_stream_loses_and_doubles_nothing(pipeline_on, kind):
    skip_if_kafka_opted_out()
    with KafkaBroker() as broker:
        p = pipeline_on(broker.bootstrap_servers)

        def interrupt():
            broker.stop()
            time.sleep(3)
            broker.restart()
        _interrupted_run(p, **_stream(kind, seed=31), interrupt=interrupt, resume=lambda: None, timeout=300)


def _widget_events(n: int, rv: int):
    """Raw events of `n` Widgets (a kind only a cluster definition describes), at resourceVersion `rv`."""
    out = []
    for i in range(n):
        obj = {"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": f"w{i}", "namespace": f"lab-{i}", "uid": f"widget-{i}",
                            "resourceVersion": str(rv)},
               "spec": {"replicas": 1 + i % 3, "template": {"spec": {"containers": [
                   {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}},
               "status": {"phase": "Running"}}
        event = records.raw_event("lab", "ADDED" if rv == 10 else "MODIFIED", obj)
        out.append((event_key(event), records.encode(event)))
    return out


def test_cluster_definitions_reach_every_worker_and_survive_restarts(kafka_broker, pipeline_on):
    """A WorkloadMap lands in one raw partition; the workers owning the others, and a restarted
    worker, must still read its kind (through the definitions topic), not dead-letter it."""
    import yaml

    from tests.kube_objects import DEFINITION_TEMPLATE

    p = pipeline_on(kafka_broker.bootstrap_servers)
    definition = yaml.safe_load(DEFINITION_TEMPLATE.format(name="widgets", group="example.com", version="v1",
                                                           kind="Widget"))
    definition["metadata"].update(uid="def-1", resourceVersion="5")
    p.start("processors")
    second = subprocess.Popen([*WORKLOADMAP, "run", "processors"], env=p.env,
                              stdout=open(p.tmp / "processors-2.log", "ab"), stderr=subprocess.STDOUT)
    p.procs["processors-2"] = second
    p.start("warehouse")
    event = records.raw_event("lab", "ADDED", definition)
    with KafkaPublisher(p.bootstrap, topic=p.topic("raw")) as publisher:
        publisher.publish(event)
        publisher.flush()
    # the worker owning its partition publishes it on the definitions topic (a slow start on loaded
    # cores can take long); then both workers read it within a follow period (5 s): two, and a margin
    deadline = time.time() + 180
    while not p.topic_messages("definitions"):
        assert time.time() < deadline, f"the definition never reached the definitions topic\n{p.log('processors')}"
        time.sleep(1)
    time.sleep(12)
    first = _widget_events(12, rv=10)   # 12 namespaces (the raw key): every raw partition gets some
    with KafkaPublisher(p.bootstrap, topic=p.topic("raw")) as publisher:
        for key, value in first:
            publisher.publish_raw(key, value)
        publisher.flush()
    try:
        p.wait_for_records(12)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ndead letters: {p.dead_letters()}") from None
    # every worker restarts: the definition is read again before processing
    p.stop("processors-2")
    p.stop("processors")
    p.start("processors")
    with KafkaPublisher(p.bootstrap, topic=p.topic("raw")) as publisher:
        for key, value in _widget_events(12, rv=11):
            publisher.publish_raw(key, value)
        publisher.flush()
    try:
        p.wait_for_records(24, timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ndead letters: {p.dead_letters()}") from None
    assert p.dead_letters() == []
    rows = p.warehouse_rows("SELECT definition, origin, count(*), sum(gpus) FROM workload_states "
                            "WHERE kind = 'Widget' GROUP BY ALL")
    assert rows == [("widgets", "cluster", 24, 2 * 2 * sum(1 + i % 3 for i in range(12)))]


def _pod_events(namespaces: int, pods: int, *, owners: bool):
    """Raw events of a Deployment, its ReplicaSet and `pods` bound pods in each of `namespaces` namespaces
    (the raw key: several partitions), and one node: the pods alone (`owners` False) or the owners alone."""
    out = []
    at = "2026-12-01T00:00:00Z"
    if not owners:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "uid": "node-1", "resourceVersion": "1"},
                "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                           "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
        out.append(records.raw_event("lab", "ADDED", node, at))
    for n in range(namespaces):
        ns = f"team-{n}"
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "serve", "namespace": ns, "uid": f"d-{n}", "resourceVersion": "10"},
                      "spec": {"replicas": pods, "template": {"spec": {"containers": [
                          {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": "serve-1", "namespace": ns, "uid": f"rs-{n}", "resourceVersion": "11",
                           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve",
                                                "uid": f"d-{n}", "controller": True}]}}
        if owners:
            out += [records.raw_event("lab", "ADDED", o, "2026-12-01T00:05:00Z") for o in (rs, deployment)]
            continue
        for i in range(pods):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"serve-1-{i}", "namespace": ns, "uid": f"p-{n}-{i}", "resourceVersion": "12",
                                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-1",
                                                     "uid": f"rs-{n}", "controller": True}]},
                   "spec": {"nodeName": "gpu-1", "containers": [
                       {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                   "status": {"phase": "Running"}}
            out.append(records.raw_event("lab", "ADDED", pod, at))
    return [(event_key(e), records.encode(e), None) for e in out]


def test_pending_pods_survive_a_killed_worker_and_are_attributed_when_their_owners_come(kafka_broker, pipeline_on):
    """Pods published before their owners wait (workload null) in the worker's state; the worker is
    SIGKILLed; a new one rebuilds the state from the owners topic and attributes every pod when the
    ReplicaSets and Deployments come: one interval per pod, on its Deployment; each pod has exactly two
    records (waiting, attributed) and the node one; nothing is dead-lettered."""
    p = pipeline_on(kafka_broker.bootstrap_servers)
    p.start("processors")
    p.start("warehouse")
    pods = _pod_events(6, 4, owners=False)
    p.publish(pods)
    deadline = time.time() + 180
    while time.time() < deadline:
        rows = p.warehouse_rows("SELECT count(*) FROM pod_intervals WHERE workload_uid IS NULL AND state = 'Bound'")
        if rows and rows[0][0] == 24:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"pods not in the warehouse\n{p.log('processors')}\n{p.log('warehouse')}")
    p.kill("processors")   # SIGKILL: its state lives on only in the topics
    p.start("processors")
    p.publish(_pod_events(6, 4, owners=True))
    p.wait_for_records(6)   # the Deployments' records
    deadline = time.time() + 120
    rows = None
    while time.time() < deadline:
        rows = p.warehouse_rows("SELECT workload_kind, count(DISTINCT uid), count(*) FROM pod_intervals "
                                "GROUP BY ALL ORDER BY ALL")
        if rows == [("Deployment", 24, 24)]:
            break
        time.sleep(0.5)
    assert rows == [("Deployment", 24, 24)], f"{rows}\n{p.log('processors')}"
    owners = p.warehouse_rows("SELECT DISTINCT uid, workload_uid FROM pod_intervals")
    assert {uid: wl for uid, wl in owners} == {f"p-{n}-{i}": f"d-{n}" for n in range(6) for i in range(4)}
    per_key = Counter((m.topic, m.key) for m in p.topic_messages("pods") + p.topic_messages("nodes"))
    assert sorted(Counter(per_key.values()).items()) == [(1, 1), (2, 24)]   # the node once; each pod twice
    assert p.dead_letters() == []


def test_a_worker_killed_mid_pod_stream_loses_and_doubles_no_pod_record(kafka_broker, pipeline_on):
    """Owners of half the namespaces first, then every pod, then the other owners, with the worker
    SIGKILLed while the pods stream in: every pod ends attributed once, and no pod record repeats
    (a pod's records differ in version or workload: the warehouse would take a repeat as one anyway,
    so the topic is checked)."""
    p = pipeline_on(kafka_broker.bootstrap_servers)
    owners = _pod_events(20, 30, owners=True)
    pods = _pod_events(20, 30, owners=False)
    early, late = owners[:20], owners[20:]   # two events per namespace: the first 10 namespaces' owners
    p.start("processors")
    p.start("warehouse")
    p.publish(early)
    p.publish(pods, 0, 300)
    time.sleep(2)
    p.kill("processors")
    p.publish(pods, 300)
    p.start("processors")
    p.publish(late)
    deadline = time.time() + 180
    rows = None
    while time.time() < deadline:
        rows = p.warehouse_rows("SELECT count(DISTINCT uid), count(*), count(workload_uid) FROM pod_intervals")
        if rows == [(600, 600, 600)]:
            break
        time.sleep(0.5)
    assert rows == [(600, 600, 600)], f"{rows}\n{p.log('processors')}"
    seen = Counter((m.key, json.loads(m.value)["resourceVersion"], (json.loads(m.value)["workload"] or {}).get("uid"))
                   for m in p.topic_messages("pods"))
    assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1][:5]
    assert {key for key, _, wl in seen if wl is not None} == {f"lab/p-{n}-{i}".encode() for n in range(20) for i in range(30)}
    assert p.dead_letters() == []
