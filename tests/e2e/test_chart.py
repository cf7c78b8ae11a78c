"""The Helm chart (charts/workloadmap): linted, rendered and applied by the real tools.

helm is built from the Go module proxy (tests/services/helm_cli.py); the rendered objects are
created on the real kube-apiserver (tests/services/kube_api.py) with strict field validation,
so a misspelt field or a wrong type fails here and not at a user's `helm install`.  Without
helm these tests FAIL, unless WORKLOADMAP_NO_HELM=1 opts out.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_compose import _resolve_command
from tests.services.helm_cli import NO_HELM_ENV, HelmError, build, helm
from tests.services.kube_api import KubeHTTPError
from workloadmap.catalog import Catalog
from workloadmap.ingest.authorizing import reader_rbac
from workloadmap.settings import SECRET, Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "workloadmap"
EXAMPLES = CHART / "examples"
SETTINGS = {f"WORKLOADMAP_{name.upper()}" for name in Settings.__dataclass_fields__}

# kind -> (API path prefix, plural, namespaced): the kinds the chart renders
KINDS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
}


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    if os.environ.get(NO_HELM_ENV, "") == "1":
        pytest.skip(f"{NO_HELM_ENV}=1: the chart tests, which need helm, are opted out")
    try:
        return build(quiet=True)
    except HelmError as e:
        pytest.fail(f"helm could not be built: {e}", pytrace=False)


def render(release: str, namespace: str, *values: str, sets: tuple[str, ...] = ()) -> list[dict]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for path in values:
        args += ["-f", str(EXAMPLES / path)]
    for item in sets:
        args += ["--set", item]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def by_kind(objects: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def pod_specs(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"]
            for o in objects if o["kind"] in ("Deployment", "StatefulSet")}


def _path(obj: dict, namespace: str) -> str:
    prefix, plural, namespaced = KINDS[obj["kind"]]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


def apply(kube, objects: list[dict], namespace: str, created: list) -> None:
    """Create every object on the API server, refusing unknown or duplicate fields; `created` gets their paths."""
    kube.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for obj in objects:
        try:
            kube.request("POST", f"{_path(obj, namespace)}?fieldValidation=Strict", obj)
        except KubeHTTPError as e:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} refused by the API server: {e}", pytrace=False)
        created.append(f"{_path(obj, namespace)}/{obj['metadata']['name']}")


def test_the_chart_passes_helm_lint_with_every_example(helm_binary):
    for example in sorted(EXAMPLES.glob("*.yaml")):
        out = helm("lint", "--strict", str(CHART), "-f", str(example))
        assert "0 chart(s) failed" in out, (example.name, out)


def test_the_committed_reader_rules_are_what_the_library_generates():
    import importlib.util

    spec = importlib.util.spec_from_file_location("reader_rules", ROOT / "charts" / "reader_rules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (CHART / "files" / "reader-rules.yaml").read_text()
    assert committed == module.render(), "charts/workloadmap/files/reader-rules.yaml is stale: run `make chart`"


def test_the_rendered_cluster_role_is_the_role_workloadmap_rbac_prints(helm_binary):
    objects = by_kind(render("wm", "observability", "single-cluster.yaml"))
    (role,) = objects["ClusterRole"]
    expected = reader_rbac(Catalog.builtin(), "observability/wm-workloadmap-watchers").role
    assert role["rules"] == expected["rules"]
    (binding,) = objects["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "wm-workloadmap-watchers",
                                    "namespace": "observability"}]
    assert not any(set(r["resources"]) & {"secrets", "configmaps"} for r in role["rules"])


def test_one_cluster_renders_all_four_components_hardened_and_running_real_commands(helm_binary):
    objects = render("wm", "observability", "single-cluster.yaml")
    kinds = by_kind(objects)
    specs = pod_specs(objects)
    assert set(specs) == {"wm-workloadmap-watchers", "wm-workloadmap-processors",
                          "wm-workloadmap-warehouse", "wm-workloadmap-exporter"}
    workloads = {o["metadata"]["name"]: o for o in objects if o["kind"] in ("Deployment", "StatefulSet")}
    assert workloads["wm-workloadmap-processors"]["spec"]["replicas"] == 3     # processors.workers
    warehouse = workloads["wm-workloadmap-warehouse"]
    assert warehouse["kind"] == "StatefulSet" and warehouse["spec"]["replicas"] == 1
    assert warehouse["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    services = {s["metadata"]["name"]: s for s in kinds["Service"]}
    assert services["wm-workloadmap-exporter"]["spec"]["ports"][0]["port"] == 9108
    for name, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        # only the watchers talk to the API server: no token in the others' pods
        assert spec.get("automountServiceAccountToken", True) is (name == "wm-workloadmap-watchers"), name
        (container,) = spec["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["capabilities"]["drop"] == ["ALL"], name
        assert security["allowPrivilegeEscalation"] is False, name
        assert container["image"] == "registry.example.com/workloadmap:0.1.0"
        _resolve_command(container["args"])                  # a real workloadmap command and options
        env = {e["name"]: e for e in container["env"]}
        assert env["WORKLOADMAP_BOOTSTRAP_SERVERS"]["value"] == "kafka.kafka.svc:9092"
        assert set(env) - {"HOME"} <= SETTINGS, name         # every variable is a setting
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp"}, name
        if name != "wm-workloadmap-processors":              # faust's web server is off
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", name
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", name
    watcher = specs["wm-workloadmap-watchers"]["containers"][0]["args"]
    assert watcher[watcher.index("--cluster") + 1] == "prod-a=in-cluster"


def test_many_clusters_render_a_central_release_and_a_watcher_release_per_cluster(helm_binary):
    central = render("wm", "workloadmap", "multi-cluster-central.yaml")
    east = render("wm-watchers", "workloadmap", "multi-cluster-watcher.yaml")
    west = render("wm-watchers", "workloadmap", "multi-cluster-watcher.yaml", sets=("watchers.clusterId=gpu-west",))
    assert set(pod_specs(central)) == {"wm-workloadmap-processors", "wm-workloadmap-warehouse",
                                       "wm-workloadmap-exporter"}
    assert "ClusterRole" not in by_kind(central)
    assert sorted(o["kind"] for o in east) == ["ClusterRole", "ClusterRoleBinding", "Deployment",
                                               "PersistentVolumeClaim", "ServiceAccount"]
    clusters = []
    for objects in (central, east, west):
        for name, spec in pod_specs(objects).items():
            container = spec["containers"][0]
            env = {e["name"]: e for e in container["env"]}
            assert env["WORKLOADMAP_BOOTSTRAP_SERVERS"]["value"].startswith("kafka-0.example.com:9093,")
            assert env["WORKLOADMAP_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
            assert env["WORKLOADMAP_PARTITIONS"]["value"] == "12"
            # the password is referenced, never inlined; the CA is a mounted Secret
            assert not {f"WORKLOADMAP_{s.upper()}" for s in SECRET if s != "sasl_password"} & set(env)
            password = env["WORKLOADMAP_SASL_PASSWORD"]
            assert "value" not in password
            assert password["valueFrom"]["secretKeyRef"] == {"name": "kafka-sasl", "key": "password"}
            assert env["WORKLOADMAP_SSL_CAFILE"]["value"] == "/etc/workloadmap/kafka-tls/ca.crt"
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert volumes["kafka-tls"]["secret"]["secretName"] == "kafka-ca"
            if "watchers" in name:
                args = container["args"]
                clusters.append(args[args.index("--cluster") + 1])
    assert clusters == ["gpu-east=in-cluster", "gpu-west=in-cluster"]
    # the central writer serves the fresh reads, its token a mounted Secret's file
    warehouse = pod_specs(central)["wm-workloadmap-warehouse"]
    container = warehouse["containers"][0]
    assert container["args"][container["args"].index("--serve") + 1] == ":8088"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WORKLOADMAP_SERVE_TOKEN_FILE"] == "/etc/workloadmap/serve-token/token"
    assert {v["name"]: v for v in warehouse["volumes"]}["serve-token"]["secret"]["secretName"] == "workloadmap-reads"


def test_the_writer_s_duckdb_memory_is_bounded_under_its_container_s_limit_unless_told_otherwise(helm_binary):
    """values.yaml: warehouse.duckdbMemoryLimit 2GB, under limits.memory 4Gi (DuckDB's default is 80% of
    the node's memory, not the container's); "" leaves DuckDB's default."""
    def writer(*sets):
        (container,) = pod_specs(render("wm", "observability", "single-cluster.yaml", sets=sets))[
            "wm-workloadmap-warehouse"]["containers"]
        return container
    container = writer()
    args = container["args"]
    assert args[args.index("--memory-limit") + 1] == "2GB" and container["resources"]["limits"]["memory"] == "4Gi"
    assert writer("warehouse.duckdbMemoryLimit=768MiB")["args"][args.index("--memory-limit") + 1] == "768MiB"
    assert "--memory-limit" not in writer("warehouse.duckdbMemoryLimit=")["args"]


def test_broker_wait_reaches_every_component_and_the_startup_probe_allows_it(helm_binary):
    """kafka.brokerWait is the services' broker_wait (settings.py): a service started while its broker
    restarts waits that long, serving no probe yet; the startup probe (every 5 s) allows the wait and a
    minute more, so the liveness probe does not restart it meanwhile: 120 s -> 24 + 12 = 36 probes;
    300 s -> 60 + 12 = 72."""
    for wait, probes in (("", 36), ("300", 72)):
        sets = (f"kafka.brokerWait={wait}",) if wait else ()
        for name, spec in pod_specs(render("wm", "observability", "single-cluster.yaml", sets=sets)).items():
            (container,) = spec["containers"]
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["WORKLOADMAP_BROKER_WAIT"] == (wait or "120"), name
            if name != "wm-workloadmap-processors":   # faust's web server is off: no probes
                startup = container["startupProbe"]
                assert startup["periodSeconds"] == 5 and startup["failureThreshold"] == probes, name
                assert startup["httpGet"] == container["livenessProbe"]["httpGet"], name
    with pytest.raises(HelmError, match="/kafka/brokerWait"):
        helm("template", "wm", str(CHART), "-f", str(EXAMPLES / "single-cluster.yaml"), "--set", "kafka.brokerWait=-1")


def test_a_missing_bootstrap_server_or_cluster_id_is_refused_by_name(helm_binary):
    with pytest.raises(HelmError, match="kafka.bootstrapServers is required"):
        helm("template", "wm", str(CHART), "--set", "watchers.clusterId=a")
    with pytest.raises(HelmError, match="watchers.clusterId is required"):
        helm("template", "wm", str(CHART), "--set", "kafka.bootstrapServers=k:9092")
    single = ("-f", str(EXAMPLES / "single-cluster.yaml"))
    # values.schema.json: types, ranges and the settings' choices, named by path
    for setting, named in (("processors.workers=-1", "/processors/workers"),
                           ("kafka.securityProtocol=TLS", "/kafka/securityProtocol"),
                           ("kafka.bootstrapServers=kafka", "/kafka/bootstrapServers"),
                           ("exporter.podSeries=maybe", "/exporter/podSeries"),
                           ("warehouse.duckdbMemoryLimit=lots", "/warehouse/duckdbMemoryLimit")):
        with pytest.raises(HelmError, match=named):
            helm("template", "wm", str(CHART), *single, "--set", setting)
    helm("template", "wm", str(CHART), *single, "--set", "kafka.bootstrapServers=[::1]:9092\\,k2:9093")
    with pytest.raises(HelmError, match="Secrets and ConfigMaps are never granted"):
        helm("template", "wm", str(CHART), "-f", str(EXAMPLES / "single-cluster.yaml"),
             "--set", "watchers.rbac.extraRules[0].apiGroups[0]=",
             "--set", "watchers.rbac.extraRules[0].resources[0]=secrets",
             "--set", "watchers.rbac.extraRules[0].verbs[0]=get")


def test_the_rendered_objects_are_accepted_by_a_real_api_server_and_the_role_reads_only(helm_binary, kube_cluster):
    suffix = uuid.uuid4().hex[:6]
    namespace = f"chart-{suffix}"
    release = f"wm{suffix}"
    objects = render(release, namespace, "single-cluster.yaml",
                     sets=("watchers.definitions.extra\\.yaml=kind: List",))
    assert "ConfigMap" in by_kind(objects)
    created: list[str] = []
    try:
        apply(kube_cluster, objects, namespace, created)
        for path in ("deployments", "statefulsets"):
            assert kube_cluster.request("GET", f"/apis/apps/v1/namespaces/{namespace}/{path}")["items"], path
        # the watchers' service account reads what the watchers watch, and nothing sensitive
        token = kube_cluster.service_account_token(namespace, f"{release}-workloadmap-watchers")
        for path in ("/api/v1/pods", "/api/v1/nodes", "/apis/kubeflow.org/v2beta1/mpijobs",
                     "/apis/workloadmap.io/v1alpha1/workloadmaps"):
            kube_cluster.request("GET", f"{path}?limit=1", token=token)
        for method, path in (("GET", "/api/v1/secrets"), ("GET", "/api/v1/configmaps"),
                             ("DELETE", f"/api/v1/namespaces/{namespace}/pods/x")):
            with pytest.raises(KubeHTTPError) as refused:
                kube_cluster.request(method, path, token=token)
            assert refused.value.code == 403, (method, path)
        apply(kube_cluster, render(f"{release}c", namespace, "multi-cluster-central.yaml"), namespace, created)
        apply(kube_cluster, render(f"{release}w", namespace, "multi-cluster-watcher.yaml"), namespace, created)
    finally:
        # the session's API server is shared: other tests' watchers must not meet these Deployments
        for path in reversed(created):
            try:
                kube_cluster.request("DELETE", path)
            except KubeHTTPError:
                pass
