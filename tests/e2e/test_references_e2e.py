"""End to end on a real Kafka broker: TrainJobs whose runtime arrives after them, on another raw partition.

The raw topic is keyed by cluster/namespace, a ClusterTrainingRuntime by cluster/name: the runtime
lands on another partition than most TrainJobs naming it.  Published after them (a relist publishes
kinds in any order), it must still end with every TrainJob's record resolved with it, written in the
TrainJob's own partition's transaction, once: with one worker, with two, with the worker SIGKILLed
around the runtime's arrival (processors/processing.py: relays and waiting workloads).

Expectations, worked out from catalog/examples (trainjob.yaml's llama-finetune, related/
trainingruntimes.yaml) and the TrainJob definition's rules:
- a TrainJob on ClusterTrainingRuntime torch-distributed with trainer.numNodes n and resourcesPerNode
  8 GPUs: its dataset-initializer job has succeeded (not counted), its trainer job runs n pods of
  8 GPUs: n pods, 8n GPUs; without the runtime, 0 pods and 0 GPUs;
- a TrainJob on its namespace's TrainingRuntime deepspeed-zero3 (mlPolicy.numNodes 2, container
  `node` with 8 GPUs) and no trainer override: 2 pods, 16 GPUs.
"""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import time

import pytest
from kafka.partitioner.default import murmur2

from tests.conftest import example_objects
from tests.e2e.test_pipeline_e2e import WORKLOADMAP, Pipeline, pipeline_on  # noqa: F401 - the fixture
from workloadmap.catalog import records
from workloadmap.catalog.registry import bundled_related
from workloadmap.ingest.publishing import KafkaPublisher, event_key

CLUSTER = "prod"
PARTITIONS = 3     # the services' default (settings.partitions)
AT = "2026-12-05T08:00:00Z"


def _partition(key: bytes) -> int:
    """The raw partition the publisher's (kafka-python's default) partitioner gives a key (murmur2, as Java's)."""
    return (murmur2(key) & 0x7fffffff) % PARTITIONS


def _runtime(name: str, namespace: str | None = None) -> dict:
    obj = copy.deepcopy(next(o for o in bundled_related() if o["metadata"]["name"] == name))
    if namespace is not None:
        obj["metadata"].update(namespace=namespace, uid=f"runtime-{namespace}")
    return obj


class TrainJobs:
    """TrainJobs on the cluster's torch-distributed runtime, in namespaces over every raw partition but
    the runtime's too, and TrainJobs on their namespace's own TrainingRuntime; their runtimes' events;
    and each TrainJob's expected (pods, GPUs) once resolved with its runtime."""

    def __init__(self, cluster_scoped: int = 12, namespaced: int = 3):
        self.runtime_partition = _partition(f"{CLUSTER}/torch-distributed".encode())
        template = example_objects("trainjob")["llama-finetune"]
        jobs, self.expected = [], {}
        i = 0
        while len(jobs) < cluster_scoped:
            namespace = f"team-{i}"
            i += 1
            job = copy.deepcopy(template)
            n = 1 + len(jobs) % 4
            job["metadata"].update(name=f"finetune-{len(jobs)}", namespace=namespace, uid=f"tj-{len(jobs)}")
            job["spec"]["trainer"]["numNodes"] = n
            jobs.append(job)
            self.expected[job["metadata"]["uid"]] = (n, 8.0 * n)
        self.runtimes = [_runtime("torch-distributed")]
        for k in range(namespaced):
            namespace = f"nlp-{k}"
            job = copy.deepcopy(template)
            job["metadata"].update(name=f"bert-{k}", namespace=namespace, uid=f"tj-nlp-{k}")
            job["spec"] = {"runtimeRef": {"name": "deepspeed-zero3", "kind": "TrainingRuntime",
                                          "apiGroup": "trainer.kubeflow.org"}}
            job["status"]["jobsStatus"] = [{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2,
                                            "suspended": 0}]
            jobs.append(job)
            self.expected[job["metadata"]["uid"]] = (2, 16.0)
            self.runtimes.append(_runtime("deepspeed-zero3", namespace))
        self.jobs = [(event_key(e), records.encode(e), None)
                     for e in (records.raw_event(CLUSTER, "ADDED", j, AT) for j in jobs)]
        self.runtime_events = [(event_key(e), records.encode(e), None)
                               for e in (records.raw_event(CLUSTER, "ADDED", r, "2026-12-05T08:01:00Z")
                                         for r in self.runtimes)]
        elsewhere = {_partition(key) for key, _, _ in self.jobs[:cluster_scoped]} - {self.runtime_partition}
        assert elsewhere == set(range(PARTITIONS)) - {self.runtime_partition}, "TrainJobs on every other partition"

    def check_partitions(self, p: Pipeline) -> None:
        """As published: the runtime on its partition, TrainJobs on every other (the raw topic itself)."""
        where = {}
        for m in p.topic_messages("raw"):
            event = json.loads(m.value)
            if not event.get("relayed"):
                where[(event["object"]["kind"], event["object"]["metadata"]["name"])] = m.partition
        assert where[("ClusterTrainingRuntime", "torch-distributed")] == self.runtime_partition
        jobs = {part for (kind, name), part in where.items() if kind == "TrainJob" and name.startswith("finetune")}
        assert jobs - {self.runtime_partition} == set(range(PARTITIONS)) - {self.runtime_partition}

    def latest(self, p: Pipeline) -> dict | None:
        rows = p.warehouse_rows("""
            SELECT uid, pods, gpus, version_key FROM workload_states WHERE kind = 'TrainJob'
            QUALIFY row_number() OVER (PARTITION BY cluster, uid ORDER BY seq DESC) = 1""")
        return None if rows is None else {uid: (pods, gpus, key) for uid, pods, gpus, key in rows}

    def wait_resolved(self, p: Pipeline, timeout: float = 180) -> None:
        """Until every TrainJob's latest record in the warehouse is the one resolved with its runtime."""
        deadline = time.time() + timeout
        latest = None
        while time.time() < deadline:
            for service, proc in p.procs.items():
                assert proc.poll() is None, f"{service} exited:\n{p.log(service)}"
            latest = self.latest(p)
            if latest and {uid: (pods, gpus) for uid, (pods, gpus, _) in latest.items()} == self.expected:
                break
            time.sleep(0.5)
        assert latest is not None and {uid: v[:2] for uid, v in latest.items()} == self.expected, (
            f"{latest}\n--- processors\n{p.log('processors')}")
        assert all(key.endswith("#1") for _, _, key in latest.values())   # resolved with the runtime found

    def check_records(self, p: Pipeline) -> None:
        """Each TrainJob's records on the topic: exactly one without its runtime, then one with it."""
        found = {}
        for m in p.topic_messages("workloads"):
            record = json.loads(m.value)
            found.setdefault(record["uid"], []).append(tuple(r["found"] for r in record["references"]))
        assert found == {uid: [(False,), (True,)] for uid in self.expected}
        assert p.dead_letters() == []


def _start_second_worker(p: Pipeline) -> None:
    p.procs["processors-2"] = subprocess.Popen([*WORKLOADMAP, "run", "processors"], env=p.env,
                                               stdout=open(p.tmp / "processors-2.log", "ab"),
                                               stderr=subprocess.STDOUT, cwd=p.workdir)


def _wait_for_workers(p: Pipeline, n: int, timeout: float = 90) -> None:
    """Until the processors' consumer group is stable with `n` members (the partitions split among them)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
    group = f"{p.env['WORKLOADMAP_CLIENT_ID']}-processors"
    try:
        deadline = time.time() + timeout
        info = None
        while time.time() < deadline:
            try:
                info = admin.describe_groups([group])[group]
            except KafkaError as exc:   # no coordinator yet (a fresh broker creates the offsets topic)
                info = exc
            else:
                if info.get("group_state") == "Stable" and len(info.get("members") or ()) == n:
                    return
            time.sleep(1)
        raise AssertionError(f"group {group}: {info}")
    finally:
        admin.close()


def _wait_for_runtime_commit(p: Pipeline, timeout: float = 60) -> None:
    """Until the runtime's event is committed (its message on the definitions topic: same transaction)."""
    from kafka import KafkaConsumer

    key = f"{CLUSTER}/related:ClusterTrainingRuntime//torch-distributed".encode()
    consumer = KafkaConsumer(p.topic("definitions"), bootstrap_servers=p.bootstrap, auto_offset_reset="earliest",
                             isolation_level="read_committed")
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                if any(m.key == key for m in messages):
                    return
    finally:
        consumer.close()
    raise AssertionError(f"runtime not committed within {timeout} s")


@pytest.mark.parametrize("workers", [1, 2])
def test_trainjobs_published_before_their_runtime_end_resolved_with_it(kafka_broker, pipeline_on, workers):
    p = pipeline_on(kafka_broker.bootstrap_servers)
    jobs = TrainJobs()
    p.start("processors")
    if workers == 2:
        _start_second_worker(p)
        _wait_for_workers(p, 2)
    p.start("warehouse")
    p.publish(jobs.jobs)
    p.wait_for_records(len(jobs.jobs))
    assert {pods for pods, _, _ in jobs.latest(p).values()} == {0}   # no runtime yet: no pods
    p.publish(jobs.runtime_events)
    jobs.wait_resolved(p)
    jobs.check_partitions(p)
    jobs.check_records(p)


def test_a_worker_killed_before_the_runtime_ends_with_every_trainjob_resolved_once(kafka_broker, pipeline_on):
    """SIGKILLed with the TrainJobs waiting and the runtime not published yet: a new worker knows them
    from the owners topic alone and resolves them when the runtime comes; nothing doubled."""
    p = pipeline_on(kafka_broker.bootstrap_servers)
    jobs = TrainJobs()
    p.start("processors")
    p.start("warehouse")
    p.publish(jobs.jobs)
    p.wait_for_records(len(jobs.jobs))
    p.kill("processors")
    p.publish(jobs.runtime_events)
    p.start("processors")
    jobs.wait_resolved(p)
    jobs.check_records(p)


def _resolved(p: Pipeline) -> set:
    """The TrainJobs with a committed record resolved with their runtime."""
    return {json.loads(m.value)["uid"] for m in p.topic_messages("workloads")
            if all(r["found"] for r in json.loads(m.value)["references"])}


def test_a_worker_killed_between_the_runtime_s_commit_and_its_relays_ends_with_every_trainjob_resolved_once(
        kafka_broker, pipeline_on):
    """Two workers; the one owning some TrainJobs' partitions is frozen (SIGSTOP) before the runtime is
    published, the other processes the runtime and commits it with its relays; so the frozen one's
    TrainJobs are certainly not resolved yet when both are SIGKILLed. A new worker rebuilds the
    waiting TrainJobs from the owners topic and resolves them at the relays: every TrainJob once.
    Which worker owns the runtime's partition is found out: the first frozen, if the runtime is not
    committed within a few seconds, is let go and the other frozen instead."""
    p = pipeline_on(kafka_broker.bootstrap_servers)
    jobs = TrainJobs()
    p.start("processors")
    _start_second_worker(p)
    _wait_for_workers(p, 2)
    p.start("warehouse")
    p.publish(jobs.jobs)
    p.wait_for_records(len(jobs.jobs))
    frozen, other = "processors-2", "processors"
    p.procs[frozen].send_signal(signal.SIGSTOP)
    p.publish(jobs.runtime_events)
    try:
        _wait_for_runtime_commit(p, timeout=4)   # well within the 15 s session timeout: no rebalance
    except AssertionError:   # the frozen worker owns the runtime's partition: freeze the other instead
        frozen, other = other, frozen
        p.procs[frozen].send_signal(signal.SIGSTOP)
        p.procs[other].send_signal(signal.SIGCONT)
        _wait_for_runtime_commit(p)
    time.sleep(2)   # the running worker resolves the TrainJobs of its own partitions
    waiting = set(jobs.expected) - _resolved(p)
    assert waiting, "the frozen worker owns TrainJob partitions: their TrainJobs wait for its relays"
    p.kill(frozen)   # SIGKILL: works on a stopped process
    p.kill(other)
    p.start("processors")
    jobs.wait_resolved(p)
    jobs.check_records(p)
