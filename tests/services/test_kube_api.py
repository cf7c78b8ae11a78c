"""The real Kubernetes API server of tests/services (kube-apiserver + etcd, see kube_api.py):
both servers ready, every framework kind served and round-tripped with its status
subresource, 410 Gone after compaction, objects surviving an apiserver crash, RBAC on
service-account tokens, and two servers that know nothing of each other.

Needs the binaries (built once with Go >= 1.26: ``make kube-binaries``). Opt out
explicitly with WORKLOADMAP_NO_KUBE=1; otherwise a server that cannot start is a
failure, not a skip.
"""

from __future__ import annotations

import copy
import ssl
import time
import urllib.error
import urllib.request
import uuid
from importlib import resources

import pytest
import yaml

from tests.services.fixtures import all_crds, kube_opted_out
from tests.services.kube_api import CRD_DIR, KubeAPIServer, KubeHTTPError, write_kubeconfig
from workloadmap.catalog.attributing import owner_kinds
from workloadmap.catalog.registry import bundled_examples

if kube_opted_out():
    pytest.skip("WORKLOADMAP_NO_KUBE=1: real Kubernetes API server tests opted out",
                allow_module_level=True)  # fmt: skip

kubernetes = pytest.importorskip("kubernetes")  # a dependency of workloadmap itself

CORE_GROUPS = {"", "apps", "batch"}
IDENTITY = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")


def _suffix() -> str:
    return uuid.uuid4().hex[:6]


def _namespace(kube: KubeAPIServer, name: str) -> str:
    kube.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def _collection(api_version: str, plural: str, namespace: str) -> str:
    root = "/api" if "/" not in api_version else "/apis"
    return f"{root}/{api_version}/namespaces/{namespace}/{plural}"


def _crds() -> dict[tuple[str, str], dict]:
    """(group, kind) -> the CRD document, for every framework CRD file."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd
    return out


def _client(kubeconfig, context: str):
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig), context=context)
    return kubernetes.client.CoreV1Api(api)


def test_both_servers_ready(kube_clusters):
    assert list(kube_clusters) == ["cluster-a", "cluster-b"]
    for context, kube in kube_clusters.items():
        assert kube.name == context and kube.running
        assert kube.request("GET", "/readyz") == "ok"
        assert kube.request("GET", "/livez") == "ok"
        assert kube.request("GET", "/version")["gitVersion"] == kube.version == "v1.36.3"
        assert set(kube.timings) == {"etcd", "apiserver"}
        # the kubeconfig verifies the server's own certificate: no insecure-skip-tls-verify
        config = yaml.safe_load(kube.kubeconfig.read_text())
        assert config["current-context"] == context
        assert "insecure-skip-tls-verify" not in config["clusters"][0]["cluster"]
        names = [ns.metadata.name for ns in _client(kube.kubeconfig, context).list_namespace().items]
        assert {"default", "kube-system"} <= set(names)


def test_every_catalog_kind_is_served_as_upstream(kube_cluster, catalog):
    crds = _crds()
    framework_kinds = [gvk for gvk in catalog.kinds() if gvk.group not in CORE_GROUPS]
    framework = {(g.group, g.kind) for g in framework_kinds}
    assert framework <= set(crds), "one CRD per framework kind"
    # the other CRDs are kinds the catalog reads beside its workloads: intermediate owners of
    # pods (Grove's PodClique) and objects definitions' references name (TrainingRuntime)
    related = owner_kinds(catalog) | {(g.group, g.kind) for g, _ in catalog.reference_kinds()}
    assert set(crds) - framework <= related, "every other CRD is a kind the catalog reads"
    for gvk in framework_kinds:
        crd = crds[(gvk.group, gvk.kind)]
        names = crd["spec"]["names"]
        for version in crd["spec"]["versions"]:
            found = kube_cluster.request("GET", f"/apis/{gvk.group}/{version['name']}")["resources"]
            by_name = {r["name"]: r for r in found}
            resource = by_name[names["plural"]]
            assert resource["kind"] == gvk.kind and resource["namespaced"] is True
            assert resource.get("shortNames", []) == names.get("shortNames", [])
            assert resource.get("categories", []) == names.get("categories", [])
            assert resource["singularName"] == names["singular"]
            assert f"{names['plural']}/status" in by_name
            assert (f"{names['plural']}/scale" in by_name) == ("scale" in version["subresources"])
        storage = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
        served = kube_cluster.request(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        )["status"]["storedVersions"]
        assert served == storage
        # the version the catalog reads is served
        assert gvk.version in [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    # the WorkloadMap CRD we ship is applied from catalog/crd as it is
    wlm = kube_cluster.request("GET", "/apis/workloadmap.io/v1alpha1")["resources"]
    assert "workloadmaps" in {r["name"] for r in wlm}


def test_framework_objects_round_trip_with_status_subresource(kube_cluster, catalog):
    """Every bundled example object of a framework kind: created (the server drops its
    status), status written through /status, read back equal to the example and resolved
    the same by the catalog; a spec update through the main resource keeps the status."""
    kube, suffix, crds = kube_cluster, _suffix(), _crds()
    examples = [o for o in bundled_examples() if o["apiVersion"].rpartition("/")[0] not in CORE_GROUPS]
    framework = {(g.group, g.kind) for g in catalog.kinds() if g.group not in CORE_GROUPS}
    assert {(o["apiVersion"].rpartition("/")[0], o["kind"]) for o in examples} == framework
    seen_kinds = set()
    for example in examples:
        group = example["apiVersion"].rpartition("/")[0]
        crd = crds[(group, example["kind"])]
        ns = _namespace(kube, f"{example['metadata']['namespace']}-{suffix}"[:63])
        path = _collection(example["apiVersion"], crd["spec"]["names"]["plural"], ns)
        obj = copy.deepcopy(example)
        for field in IDENTITY:
            obj["metadata"].pop(field, None)
        obj["metadata"]["namespace"] = ns
        created = kube.request("POST", path, obj)
        assert "status" not in created, f"{example['kind']}: status must need the /status subresource"
        assert created["spec"] == example["spec"]
        name = created["metadata"]["name"]
        if "status" in example:
            created["status"] = example["status"]
            updated = kube.request("PUT", f"{path}/{name}/status", created)
            assert updated["status"] == example["status"]
            assert updated["metadata"]["generation"] == created["metadata"]["generation"]
        stored = kube.request("GET", f"{path}/{name}")
        assert stored["spec"] == example["spec"] and stored.get("status") == example.get("status")
        # the example as the server holds it, in the test's namespace (a reference a definition
        # names is looked up in the workload's namespace: both then find the same objects)
        moved = copy.deepcopy(example)
        moved["metadata"]["namespace"] = ns
        want, got = catalog.resolve(moved).to_dict(), catalog.resolve(stored).to_dict()
        for key in ("namespace", "uid", "resourceVersion", "generation", "creationTimestamp"):
            want.pop(key), got.pop(key)
        assert got == want, f"{example['kind']} {name} resolves differently once stored"

        if example["kind"] in seen_kinds:
            continue
        seen_kinds.add(example["kind"])
        # the main resource ignores status; a spec change bumps the generation
        stored["status"] = {"tampered": True}
        stored["metadata"].setdefault("labels", {})["workloadmap.io/test"] = "spec-update"
        stored["spec"]["workloadmapTestField"] = 1
        after = kube.request("PUT", f"{path}/{name}", stored)
        assert after.get("status") == example.get("status")
        assert after["metadata"]["generation"] == created["metadata"]["generation"] + 1
        version = next(v for v in crd["spec"]["versions"] if v["name"] == example["apiVersion"].split("/")[1])
        if "scale" in version["subresources"]:
            scale = kube.request("GET", f"{path}/{name}/scale")
            assert scale["kind"] == "Scale" and scale["spec"].get("replicas", 0) >= 0
    assert len(seen_kinds) == len(framework)


def test_builtin_definitions_validate_against_the_workloadmap_crd(kube_cluster):
    """The shipped definitions pass the shipped CRD's schema on a real server (dry run)."""
    folder = resources.files("workloadmap.catalog").joinpath("builtin")
    checked = 0
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".yaml"):
            continue
        for doc in yaml.safe_load_all(entry.read_text()):
            if doc and doc.get("kind") == "WorkloadMap":
                kube_cluster.request("POST", "/apis/workloadmap.io/v1alpha1/workloadmaps?dryRun=All", doc)
                checked += 1
    assert checked >= 18


def _updates(kube: KubeAPIServer, path: str, obj: dict, field: str, count: int) -> dict:
    for i in range(count):
        obj.setdefault(field, {})["n"] = str(i)
        obj = kube.request("PUT", f"{path}/{obj['metadata']['name']}", obj)
    return obj


def _errors(events: list[dict]) -> list[tuple[int, str]]:
    return [(e["object"].get("code"), e["object"].get("reason")) for e in events if e["type"] == "ERROR"]


def test_watch_from_compacted_version_gets_410(kube_cluster):
    """With the watch cache (the default) compaction alone does not expire a version the
    cache holds; after an apiserver restart it does: ERROR event with code 410."""
    kube = kube_cluster
    ns = _namespace(kube, f"watch-{_suffix()}")
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    jobsets = _collection("jobset.x-k8s.io/v1alpha2", "jobsets", ns)
    cm = kube.request("POST", cms, {"metadata": {"name": "c"}, "data": {"n": "-"}})
    js = kube.request("POST", jobsets, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                        "metadata": {"name": "j"}, "spec": {}})  # fmt: skip
    old = {cms: cm["metadata"]["resourceVersion"], jobsets: js["metadata"]["resourceVersion"]}
    _updates(kube, cms, cm, "data", 3)
    _updates(kube, jobsets, js, "spec", 3)
    revision = kube.compact()
    assert revision > max(int(v) for v in old.values())

    for path, rv in old.items():  # still in the watch cache: replayed, no 410
        events = kube.watch(path, rv, timeout=5, max_events=3)
        assert [e["type"] for e in events] == ["MODIFIED"] * 3, events

    kube.kill()
    with pytest.raises(urllib.error.URLError):
        kube.request("GET", "/readyz", timeout=2)
    kube.restart()
    for path, rv in old.items():  # the new cache starts after the compaction
        events = kube.watch(path, rv, timeout=5)
        assert _errors(events) == [(410, "Expired")], events
        with pytest.raises(KubeHTTPError) as gone:
            kube.request("GET", f"{path}?resourceVersion={rv}&resourceVersionMatch=Exact")
        assert gone.value.code == 410
        # the kubernetes client sees the same
        core = _client(kube.kubeconfig, kube.name)
        if path == cms:
            watch = kubernetes.watch.Watch()
            with pytest.raises(kubernetes.client.exceptions.ApiException) as e:
                for _ in watch.stream(core.list_namespaced_config_map, ns, resource_version=rv,
                                      timeout_seconds=5):  # fmt: skip
                    pass
            assert e.value.status == 410


def test_watch_without_cache_gets_410_right_after_compaction():
    with KubeAPIServer(name="no-watch-cache", watch_cache=False) as kube:
        kube.apply_crds([CRD_DIR / "jobset.x-k8s.io_jobsets.yaml"])
        ns = _namespace(kube, "watch")
        cms = f"/api/v1/namespaces/{ns}/configmaps"
        jobsets = _collection("jobset.x-k8s.io/v1alpha2", "jobsets", ns)
        cm = kube.request("POST", cms, {"metadata": {"name": "c"}})
        js = kube.request("POST", jobsets, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                            "metadata": {"name": "j"}, "spec": {}})  # fmt: skip
        # At least two writes after the watched version: a watch from exactly one
        # revision below the compaction gets a 500 ("etcd event received with
        # PrevKv=nil") from v1.36.3 instead of a 410.
        _updates(kube, cms, cm, "data", 2)
        _updates(kube, jobsets, js, "spec", 2)
        kube.compact()
        for path, obj in ((cms, cm), (jobsets, js)):
            events = kube.watch(path, obj["metadata"]["resourceVersion"], timeout=5)
            assert _errors(events) == [(410, "Expired")], events


def test_kill_and_restart_keep_objects(kube_cluster, tmp_path):
    kube = kube_cluster
    ns = _namespace(kube, f"crash-{_suffix()}")
    kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "kept"}, "data": {"a": "1"}})
    lws = _collection("leaderworkerset.x-k8s.io/v1", "leaderworkersets", ns)
    kube.request("POST", lws, {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                               "metadata": {"name": "kept"}, "spec": {"replicas": 2}})  # fmt: skip
    token = kube.service_account_token(ns, "survivor")
    server, kubeconfig = kube.server, kube.kubeconfig.read_text()

    kube.kill()
    assert not kube.running
    with pytest.raises(urllib.error.URLError):
        kube.request("GET", "/readyz", timeout=2)
    kube.restart()
    assert kube.running and kube.server == server and kube.kubeconfig.read_text() == kubeconfig
    assert kube.request("GET", f"/api/v1/namespaces/{ns}/configmaps/kept")["data"] == {"a": "1"}
    assert kube.request("GET", f"{lws}/kept")["spec"]["replicas"] == 2
    assert kube.request("GET", f"{lws}/kept/scale")["spec"]["replicas"] == 2
    # tokens signed before the crash still authenticate; the old kubeconfig still verifies
    whoami = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                          token=token)  # fmt: skip
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:survivor"
    assert _client(kube.kubeconfig, kube.name).read_namespace(ns).metadata.name == ns


def test_service_account_needs_rbac(kube_cluster, tmp_path):
    kube, suffix = kube_cluster, _suffix()
    ns = f"rbac-{suffix}"
    token = kube.service_account_token(ns, "reader")
    pods = f"/api/v1/namespaces/{ns}/pods"
    with pytest.raises(KubeHTTPError) as denied:
        kube.request("GET", pods, token=token)
    assert denied.value.code == 403
    with pytest.raises(KubeHTTPError) as unknown:
        kube.request("GET", pods, token="not-a-token")
    assert unknown.value.code == 401

    role = f"pod-reader-{suffix}"
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    })  # fmt: skip
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    })  # fmt: skip
    deadline = time.monotonic() + 10  # the authorizer learns bindings from an informer
    while True:
        try:
            assert kube.request("GET", pods, token=token)["items"] == []
            break
        except KubeHTTPError as e:
            assert e.code == 403 and time.monotonic() < deadline, e
            time.sleep(0.1)
    # the same through a kubeconfig for the token and the kubernetes client
    path = kube.kubeconfig_for_token(token, tmp_path / "reader.kubeconfig", "reader")
    core = _client(path, "reader")
    assert core.list_namespaced_pod(ns).items == []
    with pytest.raises(kubernetes.client.exceptions.ApiException) as e:
        core.list_namespaced_config_map(ns)
    assert e.value.status == 403


def test_the_two_servers_are_independent(kube_clusters, tmp_path):
    a, b = kube_clusters["cluster-a"], kube_clusters["cluster-b"]
    assert len({a.server, b.server}) == 2 and len({a.etcd_url, b.etcd_url}) == 2
    ns = _namespace(a, f"only-in-a-{_suffix()}")
    with pytest.raises(KubeHTTPError) as missing:
        b.request("GET", f"/api/v1/namespaces/{ns}")
    assert missing.value.code == 404
    with pytest.raises(KubeHTTPError) as foreign:  # a's admin token means nothing to b
        b.request("GET", "/api/v1/namespaces", token=a.admin_token)
    assert foreign.value.code == 401
    # each server has its own CA: a's does not verify b
    context = ssl.create_default_context(cafile=str(a.ca_file))
    with pytest.raises(urllib.error.URLError) as untrusted:
        urllib.request.urlopen(f"{b.server}/readyz", context=context, timeout=5)
    assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    # both have the CRDs; one merged kubeconfig reaches each by its context
    for kube in (a, b):
        assert kube.apply_crds(all_crds())  # idempotent: already there, applied again
    merged = write_kubeconfig(tmp_path / "both.kubeconfig", [a.kubeconfig_entry(), b.kubeconfig_entry()])
    in_a = {n.metadata.name for n in _client(merged, "cluster-a").list_namespace().items}
    in_b = {n.metadata.name for n in _client(merged, "cluster-b").list_namespace().items}
    assert ns in in_a and ns not in in_b
