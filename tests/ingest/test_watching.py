"""Cluster watchers against a real kube-apiserver: list + watch, relists, restarts, definitions.

The publisher here records events in memory; the end-to-end path through
Kafka, processors and DuckDB is tests/e2e/test_kube_e2e.py.
"""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest
import yaml

from tests import kube_objects as k
from tests.services.kube_api import KubeHTTPError
from workloadmap.catalog import Catalog, load_definition, records
from workloadmap.catalog.registry import bundled_examples
from workloadmap.ingest.checkpointing import Checkpoints, Tracked
from workloadmap.ingest.clusters import ApiError, ClusterConfigError, ClusterSpec, connect
from workloadmap.ingest.discovering import discover
from workloadmap.ingest.watching import Backoff, KindWatcher, Watching


class Recorder:
    """A publisher that keeps (a copy of) every event."""

    def __init__(self):
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.flushes = 0

    def publish(self, event: dict) -> None:
        with self.lock:
            self.events.append(json.loads(records.encode(event)))

    def flush(self, timeout=None) -> None:
        self.flushes += 1

    def of(self, ns: str) -> list[tuple[str, str, str]]:
        with self.lock:
            return [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"]) for e in self.events
                    if e["object"]["metadata"].get("namespace") == ns]

    def full(self, ns: str) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e["object"]["metadata"].get("namespace") == ns]


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def cluster_of(kube, cluster_id: str = "cluster-a"):
    return connect(ClusterSpec.parse(f"{cluster_id}={kube.kubeconfig}"))


@pytest.fixture
def ns(kube_cluster):
    return k.namespace(kube_cluster, "watch")


def start(kube, recorder, *, checkpoint_dir=None, catalog=None, cluster_id="cluster-a", **options) -> Watching:
    watching = Watching([cluster_of(kube, cluster_id)], catalog or Catalog.builtin(), recorder,
                        checkpoint_dir=checkpoint_dir, **options).start()
    assert watching.wait_synced(60), "watchers did not finish their first list"
    return watching


# -- against the API server ------------------------------------------------------------------
def test_lifecycle_of_several_frameworks_is_published_in_order(kube_cluster, ns):
    recorder = Recorder()
    with start(kube_cluster, recorder):
        job = k.create(kube_cluster, k.example("PyTorchJob", "mnist-ddp"), ns)
        jobset = k.create(kube_cluster, k.example("JobSet", "resnet-cifar10"), ns)
        deployment = k.create(kube_cluster, k.example("Deployment", "embedding-server"), ns)
        k.update(kube_cluster, job, lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=5))
        k.delete(kube_cluster, jobset)
        wait_for(lambda: ("DELETED", "JobSet", "resnet-cifar10") in recorder.of(ns), what="the JobSet deletion")
        wait_for(lambda: len(recorder.of(ns)) >= 8, what="all events")
    seen = recorder.of(ns)
    # create + status write per object, the scale of the PyTorchJob, the JobSet deletion
    assert seen.count(("ADDED", "PyTorchJob", "mnist-ddp")) == 1
    assert seen.count(("MODIFIED", "PyTorchJob", "mnist-ddp")) == 2
    assert seen.count(("ADDED", "JobSet", "resnet-cifar10")) == 1
    assert seen.count(("DELETED", "JobSet", "resnet-cifar10")) == 1
    assert seen.count(("ADDED", "Deployment", "embedding-server")) == 1
    events = recorder.full(ns)
    for e in events:
        assert e["cluster"] == "cluster-a"
        assert "managedFields" not in e["object"]["metadata"]
        assert e["object"]["apiVersion"] and e["object"]["kind"]
        assert set(e) == {"cluster", "type", "observedAt", "object"}
    pj = [e for e in events if e["object"]["kind"] == "PyTorchJob"]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in pj]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert pj[-1]["object"]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 5
    assert pj[-1]["object"]["status"] == k.example("PyTorchJob", "mnist-ddp")["status"]
    assert deployment["metadata"]["uid"] in {e["object"]["metadata"]["uid"] for e in events}


def test_owned_objects_are_published_and_owner_kinds_watched_once_named(kube_cluster, ns):
    """Issue 25: an object a controller owns (a JobSet's Job) is published like any object (the processors
    follow pods' chains through it and never count it as a workload); an owner kind (ReplicaSet) is
    watched once a published object names it as its controller; kinds definitions list but no chain
    passes through (Services) are not."""
    recorder = Recorder()
    with start(kube_cluster, recorder) as watching:
        owner = k.create(kube_cluster, k.example("JobSet", "bert-finetune"), ns)
        k.create(kube_cluster, k.example("Job", "bert-distill"), ns, with_status=False, owner=owner)
        loose = k.create(kube_cluster, k.example("Job", "dataset-tokenize"), ns)
        wait_for(lambda: ("ADDED", "Job", "dataset-tokenize") in recorder.of(ns), what="the loose Job")
        k.update(kube_cluster, loose, lambda o: o["metadata"].update(ownerReferences=[k.owner_reference(owner)]))
        wait_for(lambda: ("ADDED", "Job", "bert-distill") in recorder.of(ns), what="the owned Job")
        adopted = wait_for(lambda: [e for e in recorder.full(ns) if e["object"]["metadata"]["name"] == "dataset-tokenize"
                                    and e["object"]["metadata"].get("ownerReferences")], what="the adopted Job")
        assert adopted[0]["type"] == "MODIFIED"
        # (the API server is shared by the session's tests: another test's pods may have named a
        # ReplicaSet already, so only "watched once named" is checked, below)
        deployment = k.create(kube_cluster, k.example("Deployment", "embedding-server"), ns)
        rs = kube_cluster.request("POST", f"/apis/apps/v1/namespaces/{ns}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "embedding-server-1", "ownerReferences": [k.owner_reference(deployment)]},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "m", "image": "x"}]}}}})
        k.create_pod(kube_cluster, k.pod("embedding-server-1-x", owner=rs), ns)
        wait_for(lambda: ("ADDED", "ReplicaSet", "embedding-server-1") in recorder.of(ns), what="the ReplicaSet")
        keys = set(watching.clusters[0].watchers)
    # a ReplicaSet has no definition: its identity and owners travel, never its pod template
    (published,) = [e["object"] for e in recorder.full(ns) if e["object"]["kind"] == "ReplicaSet"]
    assert set(published) == {"apiVersion", "kind", "metadata"}
    assert published["metadata"]["ownerReferences"] == [k.owner_reference(deployment)]
    assert {"/Pod", "/Node", "apps/ReplicaSet", "batch/Job"} <= keys
    assert "/Service" not in keys and "rbac.authorization.k8s.io/Role" not in keys
    assert ("ADDED", "JobSet", "bert-finetune") in recorder.of(ns)


def test_secrets_and_configmaps_are_never_watched(kube_cluster):
    """Even when a definition names them: the watcher refuses to list them."""
    catalog = Catalog.builtin()
    doc = yaml.safe_load(k.DEFINITION_TEMPLATE.format(name="secret-reader", group='""', version="v1", kind="Secret"))
    catalog.add(load_definition(doc, "file", "test"))
    recorder = Recorder()
    with start(kube_cluster, recorder, catalog=catalog) as watching:
        keys = set(watching.clusters[0].watchers)
    assert "/Secret" not in keys and "/ConfigMap" not in keys
    assert "kubeflow.org/PyTorchJob" in keys and "workloadmap.io/WorkloadMap" in keys
    assert not any(e["object"]["kind"] in ("Secret", "ConfigMap") for e in recorder.events)


def test_restarted_watcher_publishes_what_vanished_while_it_was_away(kube_cluster, ns, tmp_path):
    recorder = Recorder()
    objs = [k.create(kube_cluster, k.example("RayCluster", name), ns)
            for name in ("llm-finetune", "vllm-multinode", "batch-eval")]
    with start(kube_cluster, recorder, checkpoint_dir=tmp_path):
        wait_for(lambda: len(recorder.of(ns)) == 3, what="the first list")
    assert (tmp_path / "cluster-a.json").exists()
    # while no watcher runs: two deleted, one scaled
    k.delete(kube_cluster, objs[0])
    k.delete(kube_cluster, objs[1])
    scaled = k.update(kube_cluster, objs[2], lambda o: o["spec"]["workerGroupSpecs"][0].update(replicas=7))
    again = Recorder()
    with start(kube_cluster, again, checkpoint_dir=tmp_path):
        wait_for(lambda: len(again.of(ns)) >= 3, what="the relist")
        time.sleep(0.5)
    seen = again.of(ns)
    assert sorted(seen) == [("DELETED", "RayCluster", "llm-finetune"), ("DELETED", "RayCluster", "vllm-multinode"),
                            ("MODIFIED", "RayCluster", "batch-eval")]
    deleted = [e for e in again.full(ns) if e["type"] == "DELETED"]
    last_versions = {o["metadata"]["uid"]: int(o["metadata"]["resourceVersion"]) for o in objs[:2]}
    for e in deleted:
        meta = e["object"]["metadata"]
        assert meta["namespace"] == ns
        # the list's resourceVersion: newer than anything the object ever had
        assert int(meta["resourceVersion"]) > last_versions[meta["uid"]]
        assert int(meta["resourceVersion"]) >= int(scaled["metadata"]["resourceVersion"])
        assert e["object"]["apiVersion"] == "ray.io/v1"


class Kind410:
    """The objects of one kind the 410 test makes, changes and deletes (a workload kind, pods, nodes)."""

    def __init__(self, kube, kind: str, ns: str):
        self.kube, self.kind, self.ns = kube, kind, ns
        self.group, self.version = {"MPIJob": ("kubeflow.org", "v1"), "Pod": ("", "v1"), "Node": ("", "v1")}[kind]
        self.prefix = f"{ns}-" if kind == "Node" else ""   # nodes have no namespace: names of the test's own

    def create(self, name: str) -> dict:
        name = self.prefix + name
        if self.kind == "MPIJob":
            return k.create(self.kube, k.example("MPIJob", "pi"), self.ns, name=name)
        if self.kind == "Pod":
            return k.create_pod(self.kube, k.pod(name, gpus=1), self.ns)
        return k.node(self.kube, name)

    def change(self, obj: dict) -> dict:
        """What a controller, the scheduler or an operator does to it: scale, bind, cordon."""
        if self.kind == "MPIJob":
            return k.update(self.kube, obj, lambda o: o["spec"]["mpiReplicaSpecs"]["Worker"].update(replicas=3))
        if self.kind == "Pod":
            return k.bind(self.kube, obj, f"{self.ns}-node")
        return k.update(self.kube, obj, lambda o: o["spec"].update(unschedulable=True))

    def seen(self, recorder: Recorder) -> list[tuple[str, str, str]]:
        """(type, kind, name without the prefix) of the test's own objects, in the order published."""
        with recorder.lock:
            return [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"][len(self.prefix):])
                    for e in recorder.events if e["object"]["kind"] == self.kind
                    and (e["object"]["metadata"].get("namespace") == self.ns if self.kind != "Node"
                         else e["object"]["metadata"]["name"].startswith(self.prefix))]

    def versions(self, recorder: Recorder) -> list[tuple[str, str]]:
        with recorder.lock:
            return [(e["object"]["metadata"]["name"], e["object"]["metadata"]["resourceVersion"])
                    for e in recorder.events if e["object"]["kind"] == self.kind
                    and e["object"]["metadata"]["name"].startswith(self.prefix)
                    and e["object"]["metadata"].get("namespace") in (None, self.ns)]


@pytest.mark.parametrize("kind", ["MPIJob", "Pod", "Node"])
def test_expired_watch_relists_without_loss_and_survives_an_apiserver_restart(kube_cluster, ns, kind):
    """410 Gone after compaction + apiserver restart: the watcher relists and misses nothing (a workload
    kind, pods and nodes alike: issue 25), and publishes no version of an object twice."""
    objects = Kind410(kube_cluster, kind, ns)
    cluster = cluster_of(kube_cluster)
    resource = discover(cluster).for_definition(objects.group, objects.version, kind)
    recorder = Recorder()
    stop = threading.Event()
    watcher = KindWatcher(cluster, resource, recorder.publish, stop, watch_timeout=5,
                          backoff=Backoff(0.1, 0.5))
    first, second = objects.create("first"), objects.create("second")
    watcher.relist()
    listed_at = watcher.resource_version
    assert ("ADDED", kind, "first") in objects.seen(recorder)
    # changes the watcher does not see, then its resourceVersion is compacted away
    k.delete(kube_cluster, first)
    objects.change(second)
    objects.create("third")
    kube_cluster.compact()
    kube_cluster.kill()
    kube_cluster.restart()
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: watcher.counts["gone"] >= 1 and watcher.counts["relists"] >= 2, what="a 410 and a relist")
        wait_for(lambda: ("ADDED", kind, "third") in objects.seen(recorder), what="the relist's events")
        assert int(watcher.resource_version) > int(listed_at)
        after = objects.seen(recorder)[2:]
        assert ("DELETED", kind, "first") in after
        assert ("MODIFIED", kind, "second") in after
        # and it goes on watching after the recovery
        objects.create("fourth")
        wait_for(lambda: ("ADDED", kind, "fourth") in objects.seen(recorder), what="a new object after recovery")
    finally:
        stop.set()
        watcher.interrupt()
        thread.join(10)
    assert not thread.is_alive()
    versions = objects.versions(recorder)
    assert len(versions) == len(set(versions)), f"a version published twice: {versions}"


def test_watcher_backs_off_while_the_apiserver_is_down_and_recovers(kube_cluster, ns):
    recorder = Recorder()
    with start(kube_cluster, recorder) as watching:
        kube_cluster.kill()
        time.sleep(2)
        kube_cluster.restart()
        k.create(kube_cluster, k.example("LeaderWorkerSet", "vllm-llama3-70b"), ns)
        wait_for(lambda: ("ADDED", "LeaderWorkerSet", "vllm-llama3-70b") in recorder.of(ns), timeout=60,
                 what="an object created after the restart")
        errors = sum(w.counts["errors"] for w in watching.clusters[0].watchers.values())
    assert errors >= 1   # the outage was seen, and retried


def test_definitions_applied_to_the_cluster_add_kinds_to_watch(kube_cluster, ns):
    """A WorkloadMap for a kind no built-in reads: published, and its kind watched from then on."""
    crd = k.WIDGET_CRD
    kube_cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd) \
        if not _exists(kube_cluster, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com") else None
    wait_for(lambda: _exists(kube_cluster, "/apis/example.com/v1/widgets"), what="the Widget CRD")
    recorder = Recorder()
    with start(kube_cluster, recorder, rediscover_every=1.0) as watching:
        definition = yaml.safe_load(k.DEFINITION_TEMPLATE.format(name=f"widget-{ns}", group="example.com",
                                                                 version="v1", kind="Widget"))
        kube_cluster.request("POST", "/apis/workloadmap.io/v1alpha1/workloadmaps", definition)
        wait_for(lambda: "example.com/Widget" in watching.clusters[0].watchers, what="a Widget watcher")
        widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": ns},
                  "spec": {"replicas": 2, "template": {"spec": {"containers": [
                      {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
        kube_cluster.request("POST", f"/apis/example.com/v1/namespaces/{ns}/widgets", widget)
        wait_for(lambda: ("ADDED", "Widget", "w1") in recorder.of(ns), what="the Widget")
        kube_cluster.request("DELETE", f"/apis/workloadmap.io/v1alpha1/workloadmaps/widget-{ns}")
        wait_for(lambda: any(e["type"] == "DELETED" and e["object"]["kind"] == "WorkloadMap" for e in recorder.events),
                 what="the definition's deletion")
    kinds = [(e["type"], e["object"]["kind"]) for e in recorder.events]
    assert ("ADDED", "WorkloadMap") in kinds and ("DELETED", "WorkloadMap") in kinds
    # the definition event comes before any Widget event
    assert kinds.index(("ADDED", "WorkloadMap")) < kinds.index(("ADDED", "Widget"))


def test_two_clusters_publish_under_their_own_ids(kube_clusters):
    a, b = kube_clusters["cluster-a"], kube_clusters["cluster-b"]
    ns_a, ns_b = k.namespace(a, "two"), k.namespace(b, "two")
    recorder = Recorder()
    clusters = [cluster_of(a, "cluster-a"), cluster_of(b, "cluster-b")]
    with Watching(clusters, Catalog.builtin(), recorder) as watching:
        assert watching.wait_synced(60)
        k.create(a, k.example("NIMService", "deepseek-r1"), ns_a)
        k.create(b, k.example("NIMService", "deepseek-r1"), ns_b)
        wait_for(lambda: recorder.of(ns_a) and recorder.of(ns_b), what="one event per cluster")
    assert {e["cluster"] for e in recorder.full(ns_a)} == {"cluster-a"}
    assert {e["cluster"] for e in recorder.full(ns_b)} == {"cluster-b"}


def _exists(kube, path) -> bool:
    try:
        kube.request("GET", path)
        return True
    except KubeHTTPError:
        return False


# -- without a server -------------------------------------------------------------------------
def test_cluster_specs(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    assert ClusterSpec.parse("prod=gke_prod_ctx") == ClusterSpec("prod", None, "gke_prod_ctx")
    assert ClusterSpec.parse("prod=ctx:with:colons", "/k") == ClusterSpec("prod", "/k", "ctx:with:colons")
    assert ClusterSpec.parse(f"lab={kubeconfig}") == ClusterSpec("lab", str(kubeconfig), None)
    assert ClusterSpec.parse(f"lab={kubeconfig}#admin") == ClusterSpec("lab", str(kubeconfig), "admin")
    assert ClusterSpec.parse("here=in-cluster").in_cluster
    for bad in ("noequals", "=ctx", "id=", f"x={tmp_path}/missing#ctx"):
        with pytest.raises(ClusterConfigError):
            ClusterSpec.parse(bad)
    with pytest.raises(ClusterConfigError, match="cluster 'lab'.*context 'nope'"):
        connect(ClusterSpec.parse(f"lab={kubeconfig}#nope"))


def test_unreachable_server_is_an_api_error_not_a_crash(tmp_path):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
        "users": [{"name": "x", "user": {"token": "secret-token-value"}}]}))
    cluster = connect(ClusterSpec.parse(f"x={path}"))
    with pytest.raises(ApiError) as err:
        cluster.get("/api")
    assert err.value.status == 0 and "secret-token-value" not in str(err.value)
    assert "secret-token-value" not in repr(cluster)


def test_checkpoints_round_trip_and_belong_to_one_cluster(tmp_path):
    store = Checkpoints(tmp_path, "prod/eu")
    assert store.load() == {}
    tracked = {"ray.io/RayCluster": {"u1": Tracked("ns", "a", "12")}, "/Pod": {}}
    store.save(tracked)
    assert Checkpoints(tmp_path, "prod/eu").load() == tracked
    other = Checkpoints(tmp_path, "prod/eu")
    other.path.write_text(other.path.read_text().replace("prod/eu", "dev"))
    with pytest.raises(ValueError, match="not a checkpoint of cluster"):
        other.load()
    assert Checkpoints(None, "x").load() == {}


def test_backoff_grows_to_its_bound_and_resets():
    backoff = Backoff(0.01, 0.04)
    stop = threading.Event()
    delays = []
    for _ in range(5):
        t0 = time.monotonic()
        backoff.wait(stop)
        delays.append(time.monotonic() - t0)
    assert max(delays) < 0.2
    assert backoff.attempts == 5
    backoff.reset()
    assert backoff.attempts == 0


def test_examples_used_here_resolve(catalog):
    for kind in ("PyTorchJob", "JobSet", "Deployment", "RayCluster", "MPIJob", "LeaderWorkerSet", "NIMService"):
        catalog.resolve(copy.deepcopy(k.example(kind)))
    assert bundled_examples()


def test_repeated_watch_failures_end_in_a_relist():
    """A resourceVersion the server keeps refusing with an error other than 410 (seen: a 500 from
    etcd) must not block the kind forever: after three failures in a row the watcher relists."""
    from workloadmap.ingest.discovering import ServedResource

    class Refusing:
        id = "fake"

        def __init__(self):
            self.lists = 0

        def list_pages(self, path, chunk_size):
            self.lists += 1
            if self.lists >= 2:
                stop.set()
            return [{"metadata": {"resourceVersion": "7"}, "items": []}]

        def watch(self, path, params, timeout):
            raise ApiError(500, "InternalError", "etcd event received with PrevKv=nil", path)

    stop = threading.Event()
    cluster = Refusing()
    watcher = KindWatcher(cluster, ServedResource("ray.io", "v1", "RayJob", "rayjobs"), Recorder().publish, stop,
                          backoff=Backoff(0.001, 0.002))
    watcher.run()
    assert cluster.lists == 2 and watcher.counts["errors"] == 3


def test_the_kinds_references_name_are_watched_and_published(kube_cluster, ns):
    """A TrainJob's runtimes (a cluster-scoped ClusterTrainingRuntime, a namespaced TrainingRuntime) are
    watched beside the workloads: the processors resolve TrainJobs with them."""
    recorder = Recorder()
    with start(kube_cluster, recorder) as watching:
        assert {"trainer.kubeflow.org/ClusterTrainingRuntime", "trainer.kubeflow.org/TrainingRuntime",
                "trainer.kubeflow.org/TrainJob"} <= set(watching.clusters[0].watchers)
        name = f"runtime-{ns}"
        kube_cluster.request("POST", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", {
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name}, "spec": {"mlPolicy": {"numNodes": 2}}})
        kube_cluster.request("POST", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainingruntimes", {
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "team-runtime"}, "spec": {"mlPolicy": {"numNodes": 1}}})

        def seen():
            with recorder.lock:
                return {(e["object"]["kind"], e["object"]["metadata"]["name"]) for e in recorder.events}
        wait_for(lambda: {("ClusterTrainingRuntime", name), ("TrainingRuntime", "team-runtime")} <= seen(),
                 what="the runtimes' events")
