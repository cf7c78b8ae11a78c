"""End to end: records in, series out of the real `workloadmap run exporter` process on a real Kafka broker,
and of the real `run watchers --embedded --metrics` on a real API server.

Records are published as the processors publish them (in transactions; an aborted one must never
show), to topics of this test's own (the settings' topic names), under a cluster id of its own.  Checks: the series of the records once /readyz answers;
a status change and a deletion reaching /metrics; after a restart the same series rebuilt from the
topics, the deleted workload's still absent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.allocation_records import pod
from tests.exporter_records import component, workload
from tests.services.prometheus import free_port
from workloadmap.catalog import records


def _http(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return None, b""


def _series(port: int, cluster: str) -> dict:
    """{(name, frozenset of labels): value} of the per-object series of `cluster` (health counters left out)."""
    status, body = _http(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples
            if s.labels.get("cluster") == cluster and not s.name.startswith(("workloadmap_records",
                                                                             "workloadmap_cluster_last"))}


def _wait(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Exporter:
    """`workloadmap run exporter` as a process of its own on a free port."""

    def __init__(self, bootstrap: str, env: dict, log):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workloadmap", "run", "exporter", "--listen", f"127.0.0.1:{self.port}",
             "--bootstrap-servers", bootstrap], env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        _wait(lambda: self.process.poll() is None and _http(f"http://127.0.0.1:{self.port}/readyz")[0] == 200
              or self.process.poll() is not None, "/readyz")
        assert self.process.poll() is None, "the exporter exited"

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


@pytest.fixture
def topics(kafka_broker):
    """This test's settings (topic names by environment) and a cluster id of its own."""
    run = uuid.uuid4().hex[:8]
    names = {"WORKLOADMAP_WORKLOADS_TOPIC": f"e2e-{run}.workloads", "WORKLOADMAP_TRANSITIONS_TOPIC":
             f"e2e-{run}.transitions", "WORKLOADMAP_DEADLETTER_TOPIC": f"e2e-{run}.deadletter",
             "WORKLOADMAP_PODS_TOPIC": f"e2e-{run}.pods", "WORKLOADMAP_NODES_TOPIC": f"e2e-{run}.nodes"}
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    try:
        existing = set(admin.list_topics())
        admin.create_topics([NewTopic(t, 3, 1) for t in names.values() if t not in existing])
    finally:
        admin.close()
    return names, f"e2e-{run}"


def test_records_in_series_out_deletions_gone_and_a_restart_rebuilds_the_same(kafka_broker, topics, tmp_path):
    env, cluster = topics
    workloads_topic, pods_topic = env["WORKLOADMAP_WORKLOADS_TOPIC"], env["WORKLOADMAP_PODS_TOPIC"]
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=f"{cluster}-tx")
    producer.init_transactions()

    def publish(*pairs, abort=False):
        producer.begin_transaction()
        for topic, record in pairs:
            producer.send(topic, key=records.record_key(cluster, record["uid"]), value=records.encode(record))
        producer.abort_transaction() if abort else producer.commit_transaction()

    comps = [component("master", 1, per_pod_gpu=8), component("worker", 2, per_pod_gpu=8)]
    a = dict(name="trainer", namespace="ml", cluster=cluster, components=comps)
    b = dict(name="serve", namespace="ml", cluster=cluster, kind="RayCluster", framework="Ray",
             definition="raycluster", components=[component("worker", 2, per_pod_gpu=4)])
    owner = ("PyTorchJob", "trainer", "ua")
    publish((workloads_topic, workload("ua", "Running", **a)), (workloads_topic, workload("ub", "Running", **b)),
            (pods_topic, pod("pa0", "2026-12-01T10:00:00Z", "Bound", cluster=cluster, node="n1", gpu=8,
                                     workload=owner, name="trainer-master-0", component="master")),
            (pods_topic, pod("pa1", "2026-12-01T10:00:00Z", "Pending", cluster=cluster, gpu=8,
                                     workload=owner, name="trainer-worker-0", component="worker")))
    publish((workloads_topic, workload("ua", "Completed", **a)), abort=True)   # never committed: never shown

    trainer = {"cluster": cluster, "namespace": "ml", "workload": "trainer", "kind": "PyTorchJob"}
    serve = {"cluster": cluster, "namespace": "ml", "workload": "serve", "kind": "RayCluster"}

    def key(name, **labels):
        return name, frozenset(labels.items())

    with open(tmp_path / "exporter.log", "wb") as log:
        exporter = Exporter(kafka_broker.bootstrap_servers, env, log)
        try:
            exporter.wait_ready()
            series = _series(exporter.port, cluster)
            assert series[key("workloadmap_workload_status", **trainer, status="Running")] == 1
            assert series[key("workloadmap_workload_status", **trainer, status="Completed")] == 0
            assert series[key("workloadmap_workload_requested_gpus", **trainer)] == 24
            assert series[key("workloadmap_workload_requested_gpus", **serve)] == 8
            assert series[key("workloadmap_workload_allocated_gpus", **trainer)] == 8
            assert series[key("workloadmap_workload_pending_gpus", **trainer)] == 8
            assert series[key("workloadmap_pod_workload_info", cluster=cluster, namespace="ml", pod="trainer-master-0",
                              workload="trainer", kind="PyTorchJob", component="master", replica="0")] == 1

            publish((workloads_topic, workload("ua", "Failed", **a, at="2026-12-01T10:05:00Z")),
                     (workloads_topic, workload("ub", deleted=True, **b, at="2026-12-01T10:05:00Z")))
            after = _wait(lambda: (lambda s: s if s.get(key("workloadmap_workload_status", **trainer, status="Failed"))
                                   == 1 and not any(dict(ls).get("workload") == "serve" for _, ls in s) else None)(
                _series(exporter.port, cluster)), "the change and the deletion on /metrics", timeout=30)
        finally:
            assert exporter.stop() == 0

        again = Exporter(kafka_broker.bootstrap_servers, env, log)
        try:
            again.wait_ready()
            assert _series(again.port, cluster) == after
        finally:
            again.stop()
    producer.close()


def test_embedded_watchers_serve_the_series_of_a_real_cluster_and_their_own_counters(kube_cluster, tmp_path):
    """`run watchers --embedded --metrics`: a real API server's MPIJob, its bound worker pod and the node as
    series, the watchers' counters beside them, ready once every kind is listed; the deleted MPIJob's series
    gone after the pipeline's next flush, its pod's too although the pod is still there (no garbage
    collector runs in the test server)."""
    from tests import kube_objects as k
    from workloadmap.catalog import Catalog

    ns = k.namespace(kube_cluster, "exported")
    obj = k.example("MPIJob", "tensorflow-benchmarks")
    created = k.create(kube_cluster, obj, ns)
    node = f"{ns}-gpu"
    k.node(kube_cluster, node, gpus=8)
    worker = k.create_pod(kube_cluster, k.pod("tensorflow-benchmarks-worker-0", owner=created, gpus=2, labels={
        "training.kubeflow.org/job-name": "tensorflow-benchmarks", "training.kubeflow.org/replica-type": "worker"}),
        ns)
    k.bind(kube_cluster, worker, node)
    port = free_port()
    log = tmp_path / "watchers.log"
    proc = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "watchers", "--embedded", "--duckdb",
                             str(tmp_path / "w.duckdb"), "--cluster", f"lab={kube_cluster.kubeconfig}",
                             "--checkpoint-dir", str(tmp_path / "cp"), "--metrics", f"127.0.0.1:{port}"],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    mpijob = {"cluster": "lab", "namespace": ns, "workload": "tensorflow-benchmarks", "kind": "MPIJob"}
    expected = Catalog.builtin().resolve(obj)
    total = expected.to_dict()["total"]
    try:
        _wait(lambda: proc.poll() is not None or _http(f"http://127.0.0.1:{port}/readyz")[0] == 200, "/readyz",
              timeout=120)
        assert proc.poll() is None, log.read_text()
        series = _wait(lambda: (lambda s: s if ("workloadmap_workload_info", frozenset(
            {**mpijob, "framework": expected.framework, "definition": expected.definition}.items())) in s else None)(
            _series(port, "lab")), "the MPIJob's series (the pipeline flushes before each checkpoint)", timeout=30)
        assert series[("workloadmap_workload_status", frozenset({**mpijob, "status": expected.status}.items()))] == 1
        assert series[("workloadmap_workload_requested_gpus", frozenset(mpijob.items()))] == total["gpu"]
        assert series[("workloadmap_watcher_events_total", frozenset(
            {"cluster": "lab", "kind": "MPIJob", "type": "ADDED"}.items()))] >= 1
        assert series[("workloadmap_watcher_relists_total", frozenset(
            {"cluster": "lab", "kind": "MPIJob"}.items()))] >= 1
        # the worker pod: attributed by the MPIJob definition's selectors (replica from its name), bound: 2 GPUs
        series = _wait(lambda: (lambda s: s if s.get(("workloadmap_workload_allocated_gpus", frozenset(
            mpijob.items()))) == 2 else None)(_series(port, "lab")), "the bound worker's 2 GPUs", timeout=30)
        assert series[("workloadmap_pod_workload_info", frozenset({
            "cluster": "lab", "namespace": ns, "pod": "tensorflow-benchmarks-worker-0", "workload": "tensorflow-benchmarks",
            "kind": "MPIJob", "component": "worker", "replica": "0"}.items()))] == 1
        assert series[("workloadmap_component_allocated_pods", frozenset({**mpijob, "component": "worker"}.items()))] == 1
        assert series[("workloadmap_node_resource_allocatable", frozenset(
            {"cluster": "lab", "node": node, "resource": "nvidia_com_gpu", "unit": "integer"}.items()))] == 8
        k.delete(kube_cluster, created)
        _wait(lambda: not any(dict(ls).get("workload") == "tensorflow-benchmarks" for _, ls in _series(port, "lab")),
              "the deleted MPIJob's series gone", timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()


def test_the_demo_serves_the_series_of_its_history_as_the_warehouse_has_it(tmp_path):
    """`demo --metrics`: once the simulated history is processed, its series are served; the workloads by
    status are the warehouse's current workloads by status (the same records, two readers)."""
    import duckdb

    port, db, log = free_port(), tmp_path / "demo.duckdb", tmp_path / "demo.log"
    proc = subprocess.Popen([sys.executable, "-m", "workloadmap", "demo", "--workloads", "30", "--days", "1",
                             "--duckdb", str(db), "--metrics", f"127.0.0.1:{port}"],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        _wait(lambda: proc.poll() is not None or "serving the history's series" in log.read_text(), "the demo",
              timeout=120)
        assert proc.poll() is None, log.read_text()
        status, body = _http(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        served: dict = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                if s.name == "workloadmap_workload_status" and s.value == 1:
                    served[s.labels["status"]] = served.get(s.labels["status"], 0) + 1
        con = duckdb.connect(str(db), read_only=True)
        stored = dict(con.execute("SELECT status, count(*) FROM current_workloads GROUP BY status").fetchall())
        con.close()
        assert served == stored and sum(served.values()) > 0
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text()


def test_the_warehouse_writer_serves_the_same_series_with_metrics(kafka_broker, topics, tmp_path):
    """`run warehouse --metrics`: the writer's process serves the exporter's series of the topics it writes from."""
    env, cluster = topics
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    record = workload("uw", "Running", name="writer-side", namespace="ml", cluster=cluster,
                      components=[component("worker", 2, per_pod_gpu=4)])
    producer.send(env["WORKLOADMAP_WORKLOADS_TOPIC"], key=records.record_key(cluster, "uw"), value=records.encode(record))
    producer.flush()
    producer.close()
    port, log = free_port(), tmp_path / "warehouse.log"
    proc = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "warehouse", "--bootstrap-servers",
                             kafka_broker.bootstrap_servers, "--duckdb", str(tmp_path / "w.duckdb"),
                             "--client-id", cluster, "--metrics", f"127.0.0.1:{port}"],
                            env={**os.environ, **env}, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    labels = {"cluster": cluster, "namespace": "ml", "workload": "writer-side", "kind": "PyTorchJob"}
    try:
        series = _wait(lambda: proc.poll() is None and _http(f"http://127.0.0.1:{port}/readyz")[0] == 200
                       and _series(port, cluster) or proc.poll() is not None, "the writer's series", timeout=60)
        assert proc.poll() is None, log.read_text()
        assert series[("workloadmap_workload_requested_gpus", frozenset(labels.items()))] == 8
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()


def test_the_exporter_rides_out_a_broker_restart_and_counts_nothing_twice(tmp_path):
    """The soak's exporter exited twice when its broker restarted (bench/soak.py): it waits for the
    broker with the consumer it has, so the series go on from where they were and the records
    counted before the restart are not counted again."""
    from tests.services.fixtures import skip_if_kafka_opted_out
    from tests.services.kafka_broker import KafkaBroker

    skip_if_kafka_opted_out()
    with KafkaBroker() as broker:
        env, cluster = {}, "e2e-restart"
        topic = records.WORKLOADS_TOPIC
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.create_topics([NewTopic(topic, 3, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        spec = dict(name="trainer", namespace="ml", cluster=cluster, components=[component("master", 1, per_pod_gpu=8)])
        producer.send(topic, key=b"k", value=records.encode(workload("ua", "Running", **spec))).get(30)
        trainer = {"cluster": cluster, "namespace": "ml", "workload": "trainer", "kind": "PyTorchJob"}
        status = ("workloadmap_workload_status", frozenset({**trainer, "status": "Failed"}.items()))
        with open(tmp_path / "exporter.log", "wb") as log:
            exporter = Exporter(broker.bootstrap_servers, env, log)
            try:
                exporter.wait_ready()
                broker.stop()
                time.sleep(8)   # the exporter's polls and lag reads fail meanwhile
                broker.restart()
                producer.send(topic, key=b"k", value=records.encode(
                    workload("ua", "Failed", **spec, at="2026-12-01T10:05:00Z"))).get(60)
                _wait(lambda: _series(exporter.port, cluster).get(status) == 1, "the record after the restart", 90)
                assert exporter.process.poll() is None
                _, body = _http(f"http://127.0.0.1:{exporter.port}/metrics")
                counted = [s.value for family in text_string_to_metric_families(body.decode()) for s in family.samples
                           if s.name == "workloadmap_records_total" and s.labels.get("cluster") == cluster]
                assert counted == [2.0], "two records read, each once"
            finally:
                assert exporter.stop() == 0
        producer.close()
