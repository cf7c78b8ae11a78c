"""End to end from two real API servers: watchers → Kafka → processors → DuckDB.

Objects of several frameworks are created, status-updated, scaled and deleted
in two clusters; the watchers run as the real `workloadmap run watchers`
process with service-account tokens bound to exactly the role `workloadmap
rbac` prints.  The warehouse's final state per workload must be what the
catalog makes of the objects as the API servers hold them at the end, and
deleted ones must end `Deleted`, including one deleted while the watcher was
stopped (published after its relist on restart).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager

import pytest

from tests import kube_objects as k
from tests.e2e.test_pipeline_e2e import Pipeline
from workloadmap.catalog import Catalog, records
from workloadmap.ingest.authorizing import reader_rbac

WATCHERS = [sys.executable, "-m", "workloadmap", "run", "watchers"]


def least_privilege_kubeconfig(kube, tmp_path, run: str):
    """A kubeconfig whose token is a service account bound to exactly the `workloadmap rbac` role."""
    namespace = k.namespace(kube, "wlm-system")
    rbac = reader_rbac(Catalog.builtin(), f"{namespace}/watcher", name=f"workloadmap-reader-{run}")
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", rbac.role)
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", rbac.binding)
    token = kube.service_account_token(namespace, "watcher")
    # the token reads workloads and is refused what the role does not grant
    kube.request("GET", "/apis/kubeflow.org/v1/pytorchjobs?limit=1", token=token)
    from tests.services.kube_api import KubeHTTPError
    for forbidden in ("/api/v1/secrets?limit=1", "/api/v1/configmaps?limit=1"):
        with pytest.raises(KubeHTTPError) as err:
            kube.request("GET", forbidden, token=token)
        assert err.value.code == 403
    return kube.kubeconfig_for_token(token, tmp_path / f"{kube.name}-watcher.kubeconfig", kube.name)


class Watchers:
    def __init__(self, pipeline: Pipeline, clusters: list[str], checkpoints):
        self.pipeline = pipeline
        self.args = [*WATCHERS, *(f for c in clusters for f in ("--cluster", c)), "--checkpoint-dir", str(checkpoints)]
        self.proc = None

    def start(self):
        self.listed = self._lists_done()  # before this start
        log = open(self.pipeline.tmp / "watchers.log", "ab")
        self.proc = subprocess.Popen(self.args, env=self.pipeline.env, stdout=log, stderr=subprocess.STDOUT)

    def wait_listed(self, clusters: int, timeout=120):
        """Until each cluster's watcher has listed every kind once: an object created and deleted before
        its kind's first list is never seen, by design (the list is the starting point)."""
        deadline = time.time() + timeout
        while self._lists_done() < self.listed + clusters:
            assert self.proc.poll() is None and time.time() < deadline, self.pipeline.log("watchers")
            time.sleep(0.2)

    def _lists_done(self) -> int:
        path = self.pipeline.tmp / "watchers.log"
        return path.read_text(errors="replace").count("first list done") if path.exists() else 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.pipeline.log("watchers")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def latest_states(p: Pipeline, namespaces) -> dict:
    marks = ",".join("?" * len(namespaces))
    rows = p.warehouse_rows(f"""
        SELECT cluster, namespace, name, kind, status, gpus, pods FROM workload_states
        WHERE namespace IN ({marks})
        QUALIFY row_number() OVER (PARTITION BY cluster, uid ORDER BY seq DESC) = 1""".replace("?", "'{}'").format(
        *namespaces)) or []
    return {(c, ns, kind, name): (status, gpus, pods) for c, ns, name, kind, status, gpus, pods in rows}


def wait_states(p: Pipeline, watchers: Watchers, namespaces, expected: dict, timeout=120):
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        assert watchers.proc.poll() is None, p.log("watchers")
        got = latest_states(p, namespaces)
        if all(got.get(key, (None,))[0] == want[0] for key, want in expected.items()):
            return got
        time.sleep(0.5)
    raise AssertionError(f"warehouse state {got}\nexpected {expected}\n--- watchers\n{p.log('watchers')}"
                         f"\n--- processors\n{p.log('processors')}")


def test_cluster_changes_reach_the_warehouse(kafka_broker, kube_clusters, tmp_path):
    a, b = kube_clusters["cluster-a"], kube_clusters["cluster-b"]
    p = Pipeline(kafka_broker.bootstrap_servers, tmp_path)
    run = p.env["WORKLOADMAP_CLIENT_ID"].rpartition("-")[2]
    configs = [f"cluster-a={least_privilege_kubeconfig(a, tmp_path, run)}",
               f"cluster-b={least_privilege_kubeconfig(b, tmp_path, run)}"]
    watchers = Watchers(p, configs, tmp_path / "checkpoints")
    ns_a, ns_b = k.namespace(a, "e2e"), k.namespace(b, "e2e")
    catalog = Catalog.builtin()
    try:
        p.start("processors")
        p.start("warehouse")
        watchers.start()
        watchers.wait_listed(2)
        # cluster a: a PyTorchJob scaled then finished, a JobSet deleted, a RayCluster that stays
        pj = k.create(a, k.example("PyTorchJob", "mnist-ddp"), ns_a)
        jobset = k.create(a, k.example("JobSet", "resnet-cifar10"), ns_a)
        ray = k.create(a, k.example("RayCluster", "llm-finetune"), ns_a)
        # cluster b: a LeaderWorkerSet and an InferenceService, a Deployment deleted
        lws = k.create(b, k.example("LeaderWorkerSet", "vllm-llama3-70b"), ns_b)
        isvc = k.create(b, k.example("InferenceService", "llama3-8b"), ns_b)
        dep = k.create(b, k.example("Deployment", "embedding-server"), ns_b)

        pj = k.update(a, pj, lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=6))
        done = dict(pj["status"] or {})
        done["conditions"] = [*(done.get("conditions") or []),
                              {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
                               "lastTransitionTime": "2026-12-02T10:00:00Z"}]
        for c in done["conditions"]:
            if c["type"] == "Running":
                c["status"] = "False"
        pj = k.set_status(a, pj, done)
        k.delete(a, jobset)
        k.delete(b, dep)

        def expected_of(cluster, obj):
            return (catalog.resolve(obj).status,)
        expected = {
            ("cluster-a", ns_a, "PyTorchJob", "mnist-ddp"): expected_of("cluster-a", pj),
            ("cluster-a", ns_a, "JobSet", "resnet-cifar10"): (records.DELETED,),
            ("cluster-a", ns_a, "RayCluster", "llm-finetune"): expected_of("cluster-a", ray),
            ("cluster-b", ns_b, "LeaderWorkerSet", "vllm-llama3-70b"): expected_of("cluster-b", lws),
            ("cluster-b", ns_b, "InferenceService", "llama3-8b"): expected_of("cluster-b", isvc),
            ("cluster-b", ns_b, "Deployment", "embedding-server"): (records.DELETED,),
        }
        assert expected[("cluster-a", ns_a, "PyTorchJob", "mnist-ddp")] == ("Completed",)
        got = wait_states(p, watchers, [ns_a, ns_b], expected)
        assert set(got) == set(expected), "nothing else from these namespaces"
        for key, obj in (("cluster-a", ns_a, "PyTorchJob", "mnist-ddp"), pj), \
                        (("cluster-a", ns_a, "RayCluster", "llm-finetune"), ray), \
                        (("cluster-b", ns_b, "LeaderWorkerSet", "vllm-llama3-70b"), lws):
            resolved = catalog.resolve(obj)
            assert got[key][1] == pytest.approx(resolved.total.gpu), key
            assert got[key][2] == resolved.pods, key

        # the watcher stops; the RayCluster is deleted meanwhile; on restart its relist publishes DELETED
        watchers.stop()
        k.delete(a, ray)
        watchers.start()
        expected[("cluster-a", ns_a, "RayCluster", "llm-finetune")] = (records.DELETED,)
        wait_states(p, watchers, [ns_a, ns_b], expected)

        transitions = p.warehouse_rows(f"""
            SELECT name, from_status, to_status FROM transitions WHERE namespace = '{ns_a}' ORDER BY transitioned_at""")
        pj_path = [(f, t) for n, f, t in transitions if n == "mnist-ddp"]
        assert pj_path[-1] == (pj_path[-1][0], "Completed") and pj_path[0][0] is None
        assert [t for n, _, t in transitions if n == "llm-finetune"][-1] == records.DELETED
        records_count = p.warehouse_rows(f"""
            SELECT count(*), count(DISTINCT (cluster, uid, resource_version, deleted)) FROM workload_states
            WHERE namespace IN ('{ns_a}', '{ns_b}')""")[0]
        assert records_count[0] == records_count[1], "no duplicate records after the watcher's restart"
        assert "Forbidden" not in p.log("watchers") and "forbidden" not in p.log("watchers")
    finally:
        watchers.kill()
        p.close()


@contextmanager
def embedded_watchers(kube_cluster, tmp_path):
    """`run watchers --embedded` on the cluster into tmp_path/embedded.duckdb, once its first list is
    done: (process, warehouse, log); stopped with SIGTERM on leaving, which must exit 0."""
    db, log = tmp_path / "embedded.duckdb", tmp_path / "watchers.log"
    proc = subprocess.Popen([*WATCHERS, "--embedded", "--duckdb", str(db), "--cluster",
                             f"lab={kube_cluster.kubeconfig}", "--checkpoint-dir", str(tmp_path / "cp")],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while "first list done" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.2)
        yield proc, db, log
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()


def test_embedded_watchers_write_the_warehouse_without_a_broker(kube_cluster, tmp_path):
    """`run watchers --embedded`: the same processing in-process into DuckDB, no Kafka."""
    import duckdb

    ns = k.namespace(kube_cluster, "embedded")
    k.create(kube_cluster, k.example("MPIJob", "tensorflow-benchmarks"), ns)
    gone = k.create(kube_cluster, k.example("RayJob", "mnist-train"), ns)
    with embedded_watchers(kube_cluster, tmp_path) as (_, db, log):
        k.delete(kube_cluster, gone)
        time.sleep(7)   # past a checkpoint: the in-process pipeline flushes before each one
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("""SELECT name, status FROM workload_states WHERE namespace = ?
                          QUALIFY row_number() OVER (PARTITION BY uid ORDER BY seq DESC) = 1 ORDER BY name""",
                       [ns]).fetchall()
    con.close()
    mpijob = catalog_status(k.example("MPIJob", "tensorflow-benchmarks"))
    assert rows == [("mnist-train", records.DELETED), ("tensorflow-benchmarks", mpijob)]
    assert "lab" in log.read_text()


def catalog_status(obj: dict) -> str:
    return Catalog.builtin().resolve(obj).status


def test_pods_and_nodes_deleted_while_the_watcher_was_away_end_their_intervals(kafka_broker, kube_cluster, tmp_path):
    """Issue 25: a node lost with its pod, a bound pod and a pending one deleted while no watcher ran; on
    restart the relist publishes their tombstones and the warehouse closes their intervals (after the
    watcher stopped); what stayed keeps its one open interval (the relist's unchanged objects add none)."""
    kube = kube_cluster
    ns = k.namespace(kube, "away")
    nodes = {n: k.node(kube, f"{ns}-{n}") for n in ("n1", "n2")}
    pods = {}
    for name, node in (("p1", "n1"), ("p2", "n1"), ("p3", "n2"), ("p4", None)):
        pods[name] = k.create_pod(kube, k.pod(name, gpus=2), ns)
        if node:
            pods[name] = k.bind(kube, pods[name], f"{ns}-{node}")
    p = Pipeline(kafka_broker.bootstrap_servers, tmp_path)
    watchers = Watchers(p, [f"lab={kube.kubeconfig}"], tmp_path / "checkpoints")

    def intervals():
        """pod or node name -> [(state, node, open?)] of this test's objects, in time order."""
        rows = p.warehouse_rows(f"""
            SELECT name, state, node, valid_to IS NULL, valid_to FROM pod_intervals WHERE cluster = 'lab' AND namespace = '{ns}'
            UNION ALL
            SELECT name, 'Node', NULL, valid_to IS NULL, valid_to FROM node_intervals
            WHERE cluster = 'lab' AND starts_with(name, '{ns}-')
            ORDER BY 1, 5 NULLS LAST""") or []
        out = {}
        for name, state, node, is_open, _ in rows:
            out.setdefault(name.removeprefix(f"{ns}-"), []).append((state, node and node.removeprefix(f"{ns}-"), is_open))
        return out

    def wait_intervals(expected: dict):
        deadline = time.time() + 120
        got = None
        while time.time() < deadline:
            assert watchers.proc.poll() is None, p.log("watchers")
            got = intervals()
            if got == expected:
                return
            time.sleep(0.5)
        raise AssertionError(f"{got}\nexpected {expected}\n--- watchers\n{p.log('watchers')}"
                             f"\n--- processors\n{p.log('processors')}\n--- warehouse\n{p.log('warehouse')}")
    try:
        p.start("processors")
        p.start("warehouse")
        watchers.start()
        watchers.wait_listed(1)
        wait_intervals({"n1": [("Node", None, True)], "n2": [("Node", None, True)],
                        "p1": [("Bound", "n1", True)], "p2": [("Bound", "n1", True)],
                        "p3": [("Bound", "n2", True)], "p4": [("Pending", None, True)]})
        watchers.stop()
        stopped = time.time()
        for obj in (pods["p1"], pods["p3"], nodes["n2"], pods["p4"]):
            k.delete(kube, obj)
        watchers.start()
        wait_intervals({"n1": [("Node", None, True)], "n2": [("Node", None, False)],
                        "p1": [("Bound", "n1", False)], "p2": [("Bound", "n1", True)],
                        "p3": [("Bound", "n2", False)], "p4": [("Pending", None, False)]})
        # closed by the relist's tombstones (observed after the stop), not at some earlier event
        ends = p.warehouse_rows(f"""
            SELECT epoch(valid_to) FROM pod_intervals WHERE namespace = '{ns}' AND valid_to IS NOT NULL
            UNION ALL SELECT epoch(valid_to) FROM node_intervals WHERE starts_with(name, '{ns}-') AND valid_to IS NOT NULL""")
        assert len(ends) == 4 and all(end >= stopped - 1 for (end,) in ends), (ends, stopped)
        # this test's objects only: the shared API server also holds other tests' pods, whose owners a
        # relist may deliver after them (a pod recorded unattributed, then again with its workload)
        records_ = [json.loads(m.value) for topic in ("pods", "nodes") for m in p.topic_messages(topic)]
        versions = Counter((r["uid"], r["resourceVersion"]) for r in records_
                           if r.get("namespace") == ns or r["name"].startswith(f"{ns}-"))
        assert len(versions) >= 6 and max(versions.values()) == 1, "no pod or node record twice"
    finally:
        watchers.kill()
        p.close()
