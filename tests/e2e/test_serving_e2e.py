"""`workloadmap run warehouse --serve` on a real Kafka broker: the writer's process answers what it committed.

The records and transitions are the hand-built history of tests/analytics_history.py, published
to this test's topics with its clusters renamed; the expected numbers are that module's, derived
by hand (tests/warehouse/test_answering.py says how).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

from kafka import KafkaProducer

from tests.analytics_history import records_and_transitions
from tests.e2e.test_exporter_e2e import _wait, topics  # noqa: F401 (the fixture)
from tests.services.prometheus import free_port
from workloadmap.catalog import records

TOKEN = "e2e-token-7f3a"


def _get(url: str, token: str | None = TOKEN):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return None, None


def _publish(bootstrap: str, env: dict, cluster: str, recs: list, transitions: list) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for r in recs:
        r = {**r, "cluster": f"{cluster}-{r['cluster']}"}
        producer.send(env["WORKLOADMAP_WORKLOADS_TOPIC"], key=records.record_key(r["cluster"], r["uid"]),
                      value=records.encode(r))
    for t in transitions:
        t = {**t, "cluster": f"{cluster}-{t['cluster']}"}
        producer.send(env["WORKLOADMAP_TRANSITIONS_TOPIC"], key=records.record_key(t["cluster"], t["uid"]),
                      value=records.encode(t))
    producer.flush()
    producer.close()


def _stream(url: str, count: int, out: list, keep=lambda event: True) -> None:
    """Read the feed into `out` until it holds `count` events that `keep` accepts (others are skipped)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        event: dict = {}
        while len(out) < count:
            line = resp.readline().decode().rstrip("\n")
            if line.startswith("data: "):
                event = json.loads(line[6:])
            elif line == "" and event:
                if keep(event):
                    out.append(event)
                event = {}


def test_the_writer_answers_capacity_and_streams_transitions_as_it_commits_them(kafka_broker, topics, tmp_path):  # noqa: F811
    env, cluster = topics
    recs, transitions = records_and_transitions()
    _publish(kafka_broker.bootstrap_servers, env, cluster, recs, transitions)
    port, log = free_port(), tmp_path / "warehouse.log"
    proc = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "warehouse", "--bootstrap-servers",
                             kafka_broker.bootstrap_servers, "--duckdb", str(tmp_path / "w.duckdb"),
                             "--client-id", cluster, "--serve", f"127.0.0.1:{port}"],
                            env={**os.environ, **env, "WORKLOADMAP_SERVE_TOKEN": TOKEN},
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        def committed():
            assert proc.poll() is None, log.read_text()
            status, body = _get(f"{base}/capacity?by=cluster&clusters={cluster}-a,{cluster}-b")
            return status == 200 and len(body["items"]) == 2 and body
        body = _wait(committed, "the writer to answer with both clusters", timeout=90)
        items = {i["cluster"]: i for i in body["items"]}
        # a: serve Running 4, train Completed 8 (all); b: big Failed 32, infer deleted
        assert (items[f"{cluster}-a"]["running_gpus"], items[f"{cluster}-a"]["all_gpus"]) == (4, 12)
        assert (items[f"{cluster}-b"]["running_gpus"], items[f"{cluster}-b"]["all_gpus"]) == (0, 32)
        assert _get(f"{base}/capacity", token=None)[0] == 401
        assert _get(f"{base}/capacity", token="wrong")[0] == 401
        status, body = _get(f"{base}/workloads/{cluster}-a/ml/RayService/serve")
        assert status == 200 and [h["status"] for h in body["history"]] == ["Running", "Degraded", "Running"]

        # the feed from the beginning (the file is this test's): the 11 transitions, then one
        # published while the client listens
        events: list = []
        reader = threading.Thread(target=_stream, args=(f"{base}/transitions?after=-1", 12, events), daemon=True)
        reader.start()
        _wait(lambda: len(events) >= 11, "the 11 transitions on the feed", timeout=60)
        late = {**transitions[0], "from": "Completed", "to": "Deleted", "at": "2026-11-01T07:00:00Z", "gpus": 0,
                "previousDurationSeconds": 7200.0}
        _publish(kafka_broker.bootstrap_servers, env, cluster, [], [late])
        reader.join(60)
        assert len(events) == 12, log.read_text()
        # in arrival order, which across the topic's partitions is not time order: compared as sets
        assert sorted((e["name"], e["to_status"], e["transitioned_at"]) for e in events[:11]) == \
            sorted((t["name"], t["to"], t["at"]) for t in transitions)
        assert (events[-1]["name"], events[-1]["to_status"]) == ("train", "Deleted")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()


def test_the_embedded_watchers_answer_reads_of_what_they_wrote(kube_cluster, tmp_path):
    """`run watchers --embedded --serve`: an MPIJob of a real API server, its record and the cluster's
    capacity read over HTTP (the token from a file), its deletion streamed as a transition."""
    from tests import kube_objects as k
    from workloadmap.catalog import Catalog

    ns = k.namespace(kube_cluster, "served")
    obj = k.example("MPIJob", "tensorflow-benchmarks")
    k.create(kube_cluster, obj, ns)
    expected = Catalog.builtin().resolve(obj).to_dict()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port, log = free_port(), tmp_path / "watchers.log"
    proc = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "watchers", "--embedded", "--duckdb",
                             str(tmp_path / "w.duckdb"), "--cluster", f"lab={kube_cluster.kubeconfig}",
                             "--checkpoint-dir", str(tmp_path / "cp"), "--serve", f"127.0.0.1:{port}"],
                            env={**os.environ, "WORKLOADMAP_SERVE_TOKEN_FILE": str(token_file)},
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        def record():
            assert proc.poll() is None, log.read_text()
            status, body = _get(f"{base}/workloads/lab/{ns}/MPIJob/tensorflow-benchmarks")
            return status == 200 and body
        body = _wait(record, "the MPIJob's record over HTTP (the pipeline flushes before each checkpoint)",
                     timeout=120)
        assert body["workload"]["status"] == expected["status"]
        assert body["record"]["total"]["gpu"] == expected["total"]["gpu"]
        status, capacity = _get(f"{base}/capacity?clusters=lab&namespaces={ns}")
        assert status == 200 and capacity["items"][0]["all_gpus"] == expected["total"]["gpu"]
        assert _get(f"{base}/capacity", token=None)[0] == 401

        events: list = []
        # the session's API server holds other tests' workloads too: this namespace's only
        reader = threading.Thread(target=_stream, args=(f"{base}/transitions?after=-1", 2, events,
                                                        lambda e: e["namespace"] == ns), daemon=True)
        reader.start()
        _wait(lambda: len(events) >= 1, "the MPIJob's first transition on the feed", timeout=60)
        kube_cluster.request("DELETE", f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs/tensorflow-benchmarks")
        reader.join(60)
        assert [(e["name"], e["to_status"]) for e in events] == [
            ("tensorflow-benchmarks", expected["status"]), ("tensorflow-benchmarks", "Deleted")], log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()


def test_the_demo_serves_its_history_once_written(tmp_path):
    """`demo --serve`: once the simulated history is written, the demo's process answers the reads of
    it (and the dashboard); the workloads per cluster are the warehouse's current ones."""
    import duckdb

    port, db, log = free_port(), tmp_path / "demo.duckdb", tmp_path / "demo.log"
    proc = subprocess.Popen([sys.executable, "-m", "workloadmap", "demo", "--workloads", "30", "--days", "1",
                             "--duckdb", str(db), "--serve", f"127.0.0.1:{port}"],
                            env={**os.environ, "WORKLOADMAP_SERVE_TOKEN": TOKEN},
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        _wait(lambda: proc.poll() is not None or "serving the dashboard" in log.read_text(), "the demo", timeout=120)
        assert proc.poll() is None, log.read_text()
        status, body = _get(f"http://127.0.0.1:{port}/api/v1/capacity?by=cluster")
        assert status == 200
        served = {i["cluster"]: i["workloads"] for i in body["items"]}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            assert resp.status == 200 and b"Live transitions" in resp.read()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text()
    con = duckdb.connect(str(db), read_only=True)
    stored = dict(con.execute("SELECT cluster, count(*) FROM workload_current GROUP BY cluster").fetchall())
    con.close()
    assert served == stored and sum(served.values()) > 0
