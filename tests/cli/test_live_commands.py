"""Live commands (`get`, `tree`, `resources`, `catalog list` with a cluster, `rbac`) against a
real API server, and their pure parts (type names, RBAC rules, AGE, live views) on their own.

The API server (tests/services/kube_api.py) runs no controllers: the test creates the
workloads from the bundled examples (status written through /status), the Jobs and
ReplicaSets between them and their pods, and the pods themselves with the labels and
ownerReferences the frameworks' controllers would set, in its own namespaces.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.conftest import example_objects
from workloadmap.catalog import Catalog, load_definition
from workloadmap.catalog.pods import PodMembership
from workloadmap.cli import rendering
from workloadmap.cli.main import cli
from workloadmap.ingest.authorizing import DENIED_KINDS, guess_plural, role_rules
from workloadmap.ingest.discovering import (AmbiguousTypeError, ServedResource, ServedResources,
                                            resolve_type)
from workloadmap.ingest.inspecting import Inspector, label_keys, live_view, pod_info

ROOT = Path(__file__).resolve().parents[2]
NS_A, NS_B = "wlm-live-a", "wlm-live-b"
TEAM = "wlm-test/team"


def run(*args, input=None):
    result = CliRunner().invoke(cli, [str(a) for a in args], input=input)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


# == pure parts ================================================================================
def test_age_is_kubectls_human_duration():
    cases = {0: "0s", 5: "5s", 119: "119s", 120: "2m", 200: "3m20s", 12 * 60: "12m", 179 * 60: "179m",
             3 * 3600: "3h", 3 * 3600 + 600: "3h10m", 20 * 3600: "20h", 2 * 86400: "2d", 2 * 86400 + 4 * 3600: "2d4h",
             40 * 86400: "40d", 800 * 86400: "2y70d", 10 * 365 * 86400: "10y", -1: "0s", -5: "<invalid>"}
    for seconds, text in cases.items():
        assert rendering.human_duration(seconds) == text, seconds
    from datetime import datetime, timezone
    now = datetime(2026, 1, 3, 0, 0, 0, tzinfo=timezone.utc)
    assert rendering.age("2026-01-01T00:00:00Z", now) == "2d"
    assert rendering.age(None, now) == "<unknown>"


def test_guess_plural_follows_kubectl():
    assert [guess_plural(k) for k in ("Pod", "Milvus", "Ingress", "Box", "Batch", "Mesh", "NetworkPolicy",
                                      "Gateway", "JobSet", "PodGang")] == [
        "pods", "milvuses", "ingresses", "boxes", "batches", "meshes", "networkpolicies", "gateways", "jobsets",
        "podgangs"]


def _all_plurals(rules):
    return {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}


def test_role_rules_are_read_only_and_never_grant_sensitive_kinds(tmp_path):
    catalog = Catalog.builtin()
    rules = role_rules(catalog)
    granted = _all_plurals(rules.rules)
    assert {("", "pods"), ("jobset.x-k8s.io", "jobsets"), ("kubeflow.org", "pytorchjobs"), ("apps", "replicasets"),
            ("milvus.io", "milvuses"), ("workloadmap.io", "workloadmaps"), ("batch", "jobs")} <= granted
    # issue 25: nodes (what the clusters have) and the owner kinds pods' chains pass through, child
    # components' kinds included (Grove's PodCliques, a LeaderWorkerSet's StatefulSets, Knative Revisions)
    assert {("", "nodes"), ("grove.io", "podcliques"), ("grove.io", "podcliquescalinggroups"),
            ("apps", "statefulsets"), ("serving.knative.dev", "revisions"), ("ray.io", "rayclusters")} <= granted
    # the kinds a definition's references name: a TrainJob's runtimes, cluster-scoped and namespaced
    assert {("trainer.kubeflow.org", "trainjobs"), ("trainer.kubeflow.org", "clustertrainingruntimes"),
            ("trainer.kubeflow.org", "trainingruntimes")} <= granted
    # no other verb and no other core kind than those definitions name (Secrets, ConfigMaps denied)
    core = {r for g, r in granted if g == ""}
    assert core == {"pods", "nodes", "services", "serviceaccounts", "persistentvolumeclaims"}, core
    assert not {r for g, r in granted if g == "" and r in ("secrets", "configmaps")}
    # milvus and podcliqueset list Secrets / ConfigMaps in additionalChildKinds: reported, not granted
    assert rules.denied == ["configmaps", "secrets"]
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in rules.rules)
    assert all(len(rule["apiGroups"]) == 1 for rule in rules.rules)
    groups = [rule["apiGroups"][0] for rule in rules.rules]
    assert groups == sorted(groups) and len(set(groups)) == len(groups)
    assert all(rule["resources"] == sorted(rule["resources"]) for rule in rules.rules)
    # an explicit deny set, and a definition file naming its own child kinds
    doc = yaml.safe_load((ROOT / "catalog" / "builtin" / "job.yaml").read_text())
    doc["metadata"]["name"] = "job-with-children"
    doc["spec"]["structureDefinition"]["additionalChildKinds"] = [
        {"group": "", "version": "v1", "kind": "Secret"}, {"group": "example.com", "version": "v1", "kind": "Policy"}]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    catalog.add_file(str(path))
    rules = role_rules(catalog, deny=[("autoscaling", "HorizontalPodAutoscaler")])
    granted = _all_plurals(rules.rules)
    assert ("example.com", "policies") in granted
    assert ("autoscaling", "horizontalpodautoscalers") not in granted
    assert "horizontalpodautoscalers.autoscaling" in rules.denied and "secrets" in rules.denied
    assert ("", "Secret") in DENIED_KINDS and ("", "ConfigMap") in DENIED_KINDS


def test_rbac_command_prints_role_and_binding():
    result = run("rbac", "--service-account", "monitoring/workloadmap")
    assert result.exit_code == 0, result.output
    assert "Never granted" in result.output and "Secrets and ConfigMaps" in result.output
    role, binding = [d for d in yaml.safe_load_all(result.output) if d]
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "workloadmap-reader"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "workloadmap-reader"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "workloadmap", "namespace": "monitoring"}]
    as_json = json.loads(run("rbac", "--service-account", "monitoring/workloadmap", "--name", "r", "-o", "json").output)
    assert as_json["count"] == 2 and [i["kind"] for i in as_json["items"]] == ["ClusterRole", "ClusterRoleBinding"]
    bad = run("rbac", "--service-account", "no-namespace")
    assert bad.exit_code == 2 and "NAMESPACE/NAME" in bad.output


def _served() -> ServedResources:
    def r(group, version, kind, plural, short=(), preferred=True):
        return ServedResource(group, version, kind, plural, kind.lower(), True, tuple(short),
                              ("get", "list", "watch"), preferred)
    return ServedResources([
        r("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
        r("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
        r("apps", "v1", "Deployment", "deployments", ("deploy",)),
        r("apps", "v1", "StatefulSet", "statefulsets", ("sts",)),
        r("", "v1", "Pod", "pods", ("po",)),
        r("", "v1", "Service", "services", ("svc",)),
        r("serving.knative.dev", "v1", "Service", "services", ("kservice", "ksvc")),
        r("", "v1", "ConfigMap", "configmaps", ("cm",)),
    ])


def test_type_names_are_lenient():
    catalog, served = Catalog.builtin(), _served()
    for text in ("jobset", "JobSet", "JOBSETS", "jobsets", "jobsets.jobset.x-k8s.io", "jobset.v1alpha2.jobset.x-k8s.io"):
        assert resolve_type(text, catalog, served).qualified == "jobsets.jobset.x-k8s.io", text
    assert resolve_type("deploy", catalog, served).kind == "Deployment"
    assert resolve_type("po", catalog, served).kind == "Pod"
    assert resolve_type("ksvc", catalog, served).group == "serving.knative.dev"
    # a core Service is served but not a catalog kind: `service` means Knative's
    assert resolve_type("services", catalog, served).group == "serving.knative.dev"
    with pytest.raises(LookupError, match="closest known kinds: JobSet"):
        resolve_type("jobsett", catalog, served)
    with pytest.raises(LookupError, match="ConfigMap"):
        resolve_type("cm", catalog, served)
    # the same plural in two groups, both catalog kinds: ambiguous, the qualified names are listed
    doc = yaml.safe_load((ROOT / "catalog" / "builtin" / "jobset.yaml").read_text())
    doc["metadata"]["name"] = "other-jobset"
    doc["spec"]["structureDefinition"]["rootComponent"]["kind"].update(group="example.com", version="v1")
    catalog_two = Catalog.builtin()
    catalog_two.add(load_definition(doc, "file", "test"))
    two = ServedResources(served.resources + [ServedResource("example.com", "v1", "JobSet", "jobsets", "jobset",
                                                             True, (), ("get", "list", "watch"))])
    with pytest.raises(AmbiguousTypeError, match="jobsets.example.com, jobsets.jobset.x-k8s.io"):
        resolve_type("jobsets", catalog_two, two)


def test_live_view_counts_actual_and_ready_pods_per_component():
    catalog = Catalog.builtin()
    record = catalog.resolve(example_objects("jobset")["llama-pretrain"]).to_dict()
    gpu_spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}

    def pod(name, instance, replica, ready, spec=gpu_spec):
        obj = {"metadata": {"name": name, "namespace": "research"}, "spec": dict(spec, nodeName="n1"),
               "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        return pod_info(obj, PodMembership("replicatedjob", instance, replica), catalog.resolver.gpus)

    pods = [pod("w-1", "workers", "1", True), pod("w-0", "workers", "0", False), pod("d", "driver", "0", True, {}),
            pod("x", "extra", "0", True)]
    view = live_view(record, pods)
    by = {(c["name"], c["instance"]): c for c in view["components"]}
    assert (by[("replicatedjob", "workers")]["actualPods"], by[("replicatedjob", "workers")]["readyPods"]) == (2, 1)
    assert (by[("replicatedjob", "driver")]["actualPods"], by[("replicatedjob", "driver")]["readyPods"]) == (1, 1)
    assert view["live"] == {"pods": 4, "ready": 3, "gpu": 24, "cpu": 0, "memory": 0}
    assert [p["name"] for p in view["livePods"]] == ["d", "w-0", "w-1", "x"]
    assert [p["expected"] for p in view["livePods"]] == [True, True, True, False]
    rows = rendering.resource_rows(view)
    total = rows[-1]
    assert total["component"] == "TOTAL"
    for key in ("desired", "actual", "ready", "gpu", "liveGpu"):
        assert total[key] == sum(r[key] for r in rows[:-1]), key
    assert label_keys(catalog.get("jobset")) >= {"jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name"}
    assert "training.kubeflow.org/job-name" in label_keys(catalog.get("pytorchjob"))


def test_kubectl_plugin_entry_point():
    exe = Path(sys.executable).parent / "kubectl-workloadmap"
    result = subprocess.run([str(exe), "get", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "Usage: kubectl workloadmap get" in result.stdout


# == against a real API server ===================================================================
def _path(api_version: str, kind: str, namespace: str | None) -> str:
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    return f"{base}{f'/namespaces/{namespace}' if namespace else ''}/{guess_plural(kind)}"


def _owner(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


class Seeder:
    """Creates objects as their controllers would leave them (no controller runs)."""

    def __init__(self, kube):
        self.kube = kube
        self.catalog = Catalog.builtin()

    def namespace(self, name):
        self.kube.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def create(self, obj: dict, namespace: str, labels: dict | None = None, owner: dict | None = None) -> dict:
        obj = copy.deepcopy(obj)
        status = obj.pop("status", None)
        old = obj["metadata"]
        obj["metadata"] = {"name": old["name"], "namespace": namespace,
                           "labels": {**(old.get("labels") or {}), **(labels or {})},
                           "annotations": old.get("annotations") or {}}
        if owner is not None:
            obj["metadata"]["ownerReferences"] = [_owner(owner)]
        path = _path(obj["apiVersion"], obj["kind"], namespace)
        created = self.kube.request("POST", path, obj)
        if status:
            created["status"] = status
            created = self.kube.request("PUT", f"{path}/{old['name']}/status", created)
        created.setdefault("apiVersion", obj["apiVersion"])
        created.setdefault("kind", obj["kind"])
        return created

    def template(self, workload: dict, component: str, instance: str | None = None) -> dict:
        for view in self.catalog.resolve(workload).components:
            if view.name == component and view.instance == instance:
                return copy.deepcopy(view.pod_template)
        raise KeyError((component, instance))

    def pod(self, namespace, name, template, labels, owner=None, node=None, ready=True, phase="Running",
            annotations=None) -> dict:
        meta = {"name": name, "namespace": namespace,
                "labels": {**((template.get("metadata") or {}).get("labels") or {}), **labels},
                "annotations": annotations or {}}
        if owner is not None:
            meta["ownerReferences"] = [_owner(owner)]
        spec = copy.deepcopy(template["spec"])
        if node:
            spec["nodeName"] = node
        pod = self.kube.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                                {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        pod["status"] = {"phase": phase, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"},
            {"type": "PodScheduled", "status": "True" if node else "False"}]}
        return self.kube.request("PUT", f"/api/v1/namespaces/{namespace}/pods/{name}/status", pod)


def seed(kube) -> dict:
    s = Seeder(kube)
    s.namespace(NS_A)
    s.namespace(NS_B)
    jobsets, ptjs, deploys = example_objects("jobset"), example_objects("pytorchjob"), example_objects("deployment")
    out = {}
    # JobSet llama-pretrain (Running): Jobs per replicated job, pods owned by the Jobs; 7 of 9 pods, 6 ready
    llama = out["llama"] = s.create(jobsets["llama-pretrain"], NS_A, {TEAM: "llm"})
    s.create(jobsets["resnet-cifar10"], NS_A, {TEAM: "vision"})
    s.create(jobsets["bert-finetune"], NS_A, {TEAM: "llm"})
    s.create(jobsets["mig-inorder-eval"], NS_B, {TEAM: "eval"})
    replicated = {rj["name"]: rj for rj in llama["spec"]["replicatedJobs"]}
    plan = {("driver", 0): [("gpu-node-1", True)],
            ("workers", 0): [("gpu-node-2", True), ("gpu-node-2", True), ("gpu-node-3", True), ("gpu-node-3", True)],
            ("workers", 1): [("gpu-node-4", True), (None, False)]}
    for (rj, index), pods in plan.items():
        job = s.create({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": f"llama-pretrain-{rj}-{index}",
                                     "labels": {"jobset.sigs.k8s.io/jobset-name": "llama-pretrain"}},
                        "spec": copy.deepcopy(replicated[rj]["template"]["spec"])}, NS_A, owner=llama)
        template = s.template(llama, "replicatedjob", rj)
        for completion, (node, ready) in enumerate(pods):
            s.pod(NS_A, f"llama-pretrain-{rj}-{index}-{completion}", template, {
                "jobset.sigs.k8s.io/jobset-name": "llama-pretrain", "jobset.sigs.k8s.io/replicatedjob-name": rj,
                "jobset.sigs.k8s.io/job-index": str(index), "batch.kubernetes.io/job-name": job["metadata"]["name"],
                "batch.kubernetes.io/job-completion-index": str(completion)},
                owner=job, node=node, ready=ready, phase="Running" if node else "Pending")
    # a decoy: JobSet labels, but owned by a Job that is not the JobSet's
    stray_job = s.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "unrelated"},
                          "spec": copy.deepcopy(replicated["driver"]["template"]["spec"])}, NS_A)
    s.pod(NS_A, "unrelated-0", s.template(llama, "replicatedjob", "driver"), {
        "jobset.sigs.k8s.io/jobset-name": "llama-pretrain", "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": "1"}, owner=stray_job, node="cpu-node-1")
    # PyTorchJob llama3-8b-sft (master 1 + worker 3): pods owned by the job; worker-2 has no owner
    # reference (found by its job-name label) and is not ready yet
    ptj = out["ptj"] = s.create(ptjs["llama3-8b-sft"], NS_A, {TEAM: "llm"})
    s.create(ptjs["mnist-ddp"], NS_B)
    for rtype, index, node, ready, owned in (("master", 0, "gpu-node-5", True, True),
                                              ("worker", 0, "gpu-node-6", True, True),
                                              ("worker", 1, "gpu-node-7", True, True),
                                              ("worker", 2, None, False, False)):
        s.pod(NS_A, f"llama3-8b-sft-{rtype}-{index}", s.template(ptj, rtype), {
            "training.kubeflow.org/job-name": "llama3-8b-sft", "training.kubeflow.org/replica-type": rtype,
            "training.kubeflow.org/replica-index": str(index)},
            owner=ptj if owned else None, node=node, ready=ready, phase="Running" if node else "Pending")
    # Deployment embedding-server: ReplicaSet owned by the Deployment, 3 ready pods owned by the ReplicaSet
    dep = out["deployment"] = s.create(deploys["embedding-server"], NS_A, {TEAM: "search"})
    s.create(deploys["triton-mig"], NS_B)
    rs = s.create({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "embedding-server-6b7f9c"},
                   "spec": {"replicas": 3, "selector": dep["spec"]["selector"],
                            "template": copy.deepcopy(dep["spec"]["template"])}}, NS_A, owner=dep)
    for i in range(3):
        s.pod(NS_A, f"embedding-server-6b7f9c-{i}", dep["spec"]["template"], {"pod-template-hash": "6b7f9c"},
              owner=rs, node=f"gpu-node-{8 + i}")
    # the same name in two kinds; and a name a JobSet shares with the Job it controls
    small = {"replicas": 1, "selector": {"matchLabels": {"app": "twin"}},
             "template": {"metadata": {"labels": {"app": "twin"}},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    s.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "twin"}, "spec": small}, NS_A)
    s.create({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "twin"},
              "spec": dict(small, serviceName="twin")}, NS_A)
    owned = dict(copy.deepcopy(jobsets["resnet-cifar10"]))
    owned["metadata"]["name"] = "owned-twin"
    owned_js = s.create(owned, NS_A)
    s.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "owned-twin"},
              "spec": copy.deepcopy(owned_js["spec"]["replicatedJobs"][0]["template"]["spec"])}, NS_A, owner=owned_js)
    return out


@pytest.fixture(scope="module")
def live(kube_cluster):
    seeded = seed(kube_cluster)
    seeded["kubeconfig"] = str(kube_cluster.kubeconfig)
    seeded["kube"] = kube_cluster
    return seeded


def kget(live, *args):
    return run("get", *args, "--kubeconfig", live["kubeconfig"])


def table_rows(output: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a rich table printed without box (columns split on 2+ spaces)."""
    lines = [line for line in output.splitlines() if line.strip()]
    split = [re.split(r"\s{2,}", line.strip()) for line in lines]
    return split[0], split[1:]


def test_get_lists_workloads_with_every_column(live):
    result = kget(live, "jobsets", "-n", NS_A)
    assert result.exit_code == 0, result.output
    header, rows = table_rows(result.stdout)
    assert header == ["NAME", "NAMESPACE", "STATUS", "COMPONENTS", "GPU", "AGE"]
    by_name = {r[0]: r for r in rows}
    assert set(by_name) == {"llama-pretrain", "resnet-cifar10", "bert-finetune", "owned-twin"}
    llama = by_name["llama-pretrain"]
    assert llama[1:5] == [NS_A, "Running", "replicatedjob/driver(1), replicatedjob/workers(8)", "64"]
    assert re.fullmatch(r"\d+s|\d+m(\d+s)?", llama[5]), llama
    assert by_name["resnet-cifar10"][2] == "Completed" and by_name["bert-finetune"][2] == "Suspended"
    ptj = kget(live, "pytorchjob", "-n", NS_A)
    assert table_rows(ptj.stdout)[1][0][:5] == ["llama3-8b-sft", NS_A, "Running", "master(1), worker(3)", "32"]


def test_get_json_is_items_and_count_of_resolved_records(live):
    data = json.loads(kget(live, "jobsets", "-n", NS_A, "-o", "json").stdout)
    assert data["count"] == len(data["items"]) == 4
    llama = next(i for i in data["items"] if i["name"] == "llama-pretrain")
    assert llama["uid"] == live["llama"]["metadata"]["uid"]
    assert (llama["total"]["pods"], llama["total"]["gpu"], llama["total"]["gpuResources"]) == (9, 64, {"nvidia.com/gpu": 64})
    assert llama["definition"] == "jobset" and llama["origin"] == "built-in" and llama["status"] == "Running"
    as_yaml = yaml.safe_load(kget(live, "jobsets", "-n", NS_A, "-o", "yaml").stdout)
    assert as_yaml["count"] == 4


def test_get_status_selector_and_names(live):
    names = lambda *args: sorted(i["name"] for i in json.loads(kget(live, "jobsets", "-n", NS_A, "-o", "json",
                                                                     *args).stdout)["items"])
    assert names("--status", "running") == ["llama-pretrain"]
    assert names("--status", "Completed,SUSPENDED") == ["bert-finetune", "owned-twin", "resnet-cifar10"]
    assert names("--status", "Completed", "--status", "Running") == ["llama-pretrain", "owned-twin", "resnet-cifar10"]
    assert names("-l", f"{TEAM}=llm") == ["bert-finetune", "llama-pretrain"]
    assert names("-l", f"{TEAM}=llm", "--status", "Suspended") == ["bert-finetune"]
    assert names("-l", f"{TEAM}!=llm,{TEAM}") == ["resnet-cifar10"]
    bad = kget(live, "jobsets", "-n", NS_A, "--status", "Sleeping")
    assert bad.exit_code == 2 and "Sleeping" in bad.output
    one = json.loads(kget(live, "jobset/llama-pretrain", "-n", NS_A, "-o", "json").stdout)
    assert [i["name"] for i in one["items"]] == ["llama-pretrain"]
    two = json.loads(kget(live, "jobsets", "llama-pretrain", "resnet-cifar10", "-n", NS_A, "-o", "json").stdout)
    assert [i["name"] for i in two["items"]] == ["llama-pretrain", "resnet-cifar10"]
    missing = kget(live, "jobset/nope", "-n", NS_A)
    assert missing.exit_code == 3 and "'nope' not found" in missing.stderr   # exit 3: no such workload


def test_get_pages_with_chunk_size(live, monkeypatch):
    pages = []
    from workloadmap.ingest.clusters import Cluster
    original = Cluster.list_pages

    def counting(self, path, params=None, *, chunk_size=500, timeout=120.0):
        for page in original(self, path, params, chunk_size=chunk_size, timeout=timeout):
            if "/jobsets" in path:
                pages.append(len(page["items"]))
            yield page

    monkeypatch.setattr(Cluster, "list_pages", counting)
    paged = json.loads(kget(live, "jobsets", "-n", NS_A, "--chunk-size", "1", "-o", "json").stdout)
    assert pages == [1, 1, 1, 1] or pages == [1, 1, 1, 1, 0]
    pages.clear()
    whole = json.loads(kget(live, "jobsets", "-n", NS_A, "-o", "json").stdout)
    assert pages == [4]
    assert [i["uid"] for i in paged["items"]] == [i["uid"] for i in whole["items"]]
    pages.clear()
    one_request = json.loads(kget(live, "jobsets", "-n", NS_A, "--chunk-size", "0", "-o", "json").stdout)
    assert pages == [4] and one_request["count"] == 4


def test_get_all_namespaces_and_default_namespace(live, tmp_path):
    data = json.loads(kget(live, "jobsets", "-A", "-o", "json").stdout)
    mine = {(i["namespace"], i["name"]) for i in data["items"] if i["namespace"] in (NS_A, NS_B)}
    assert (NS_B, "mig-inorder-eval") in mine and (NS_A, "llama-pretrain") in mine and len(mine) == 5
    header, rows = table_rows(kget(live, "jobsets", "--all-namespaces").stdout)
    assert any(r[:3] == ["mig-inorder-eval", NS_B, "Initializing"] for r in rows)
    # without -n: the context's namespace
    config = yaml.safe_load(Path(live["kubeconfig"]).read_text())
    config["contexts"][0]["context"]["namespace"] = NS_B
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    names = [i["name"] for i in json.loads(run("get", "jobsets", "--kubeconfig", path, "-o", "json").stdout)["items"]]
    assert names == ["mig-inorder-eval"]


def test_get_accepts_kubectl_type_names(live):
    def names(type_text):
        result = kget(live, type_text, "-n", NS_A, "-o", "json")
        assert result.exit_code == 0, (type_text, result.output)
        return sorted(i["name"] for i in json.loads(result.stdout)["items"])

    jobsets = names("jobsets")
    for text in ("jobset", "JobSet", "JOBSETS", "jobsets.jobset.x-k8s.io", "jobset.v1alpha2.jobset.x-k8s.io"):
        assert names(text) == jobsets, text
    assert names("deploy") == names("deployments") == names("Deployment") == ["embedding-server", "twin"]
    assert names("sts") == ["twin"]
    assert "llama3-8b-sft-master-0" in names("po")
    assert names("pytorchjobs.kubeflow.org") == ["llama3-8b-sft"]
    unknown = kget(live, "jobsett", "-n", NS_A)
    assert unknown.exit_code == 4 and "jobsett" in unknown.stderr and "JobSet" in unknown.stderr
    not_catalog = kget(live, "secrets", "-n", NS_A)
    assert not_catalog.exit_code == 4 and "Secret" in not_catalog.stderr


def test_get_wide_adds_kind_pods_cpu_memory_definition(live):
    result = kget(live, "jobsets", "-n", NS_A, "-o", "wide")
    assert result.exit_code == 0, result.output
    header, rows = table_rows(result.stdout)
    assert header == ["NAME", "NAMESPACE", "KIND", "STATUS", "COMPONENTS", "PODS", "GPU", "CPU", "MEMORY", "AGE",
                      "DEFINITION"]
    llama = next(r for r in rows if r[0] == "llama-pretrain")
    record = json.loads(kget(live, "jobset/llama-pretrain", "-n", NS_A, "-o", "json").stdout)["items"][0]
    assert llama[2] == "JobSet" and llama[5] == "6/9" and llama[6] == "64"
    assert llama[7] == rendering.format_cpu(record["total"]["cpu"])
    assert llama[8] == rendering.format_bytes(record["total"]["memory"])
    assert llama[10] == "jobset (built-in)"
    resnet = next(r for r in rows if r[0] == "resnet-cifar10")
    assert resnet[5] == "0/4"
    deploy = table_rows(kget(live, "deploy", "embedding-server", "-n", NS_A, "-o", "wide").stdout)[1][0]
    assert deploy[5] == "3/3"
    ptj = table_rows(kget(live, "pytorchjobs", "-n", NS_A, "-o", "wide").stdout)[1][0]
    assert ptj[5] == "3/4"   # worker-2 (labels only, no owner reference) counts, not ready
    jobs = {r[0]: r for r in table_rows(kget(live, "jobs", "-n", NS_A, "-o", "wide").stdout)[1]}
    assert jobs["llama-pretrain-workers-0"][5] == "4/4" and jobs["llama-pretrain-workers-1"][5] == "1/4"


def test_tree_shows_desired_actual_ready_nodes_and_gpus(live):
    result = run("tree", "llama-pretrain", "-n", NS_A, "--kubeconfig", live["kubeconfig"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "JobSet wlm-live-a/llama-pretrain" in out and "pods 6/7 ready, 9 desired" in out
    assert re.search(r"driver\s+replicas 1\s+pods 1/1 ready, 1 desired", out)
    assert re.search(r"workers\s+replicas 2\s+pods 5/6 ready, 8 desired", out)
    assert re.search(r"llama-pretrain-workers-0-0\s+Running\s+ready\s+node gpu-node-2\s+replica 0\s+8 GPU", out)
    assert re.search(r"llama-pretrain-workers-1-1\s+Pending\s+not ready\s+unscheduled\s+replica 1\s+8 GPU", out)
    assert "unrelated-0" not in out
    assert "TOTAL  9 pods desired, 7 actual, 6 ready  64 GPU" in out
    item = json.loads(run("tree", "jobset/llama-pretrain", "-n", NS_A, "--kubeconfig", live["kubeconfig"],
                          "-o", "json").stdout)["items"][0]
    assert item["live"]["pods"] == 7 and item["live"]["ready"] == 6 and item["live"]["gpu"] == 48
    pods = {p["name"]: p for p in item["livePods"]}
    assert pods["llama-pretrain-driver-0-0"]["node"] == "gpu-node-1" and pods["llama-pretrain-driver-0-0"]["gpu"] == 0
    assert pods["llama-pretrain-workers-0-3"] | {"creationTimestamp": None} == {
        "name": "llama-pretrain-workers-0-3", "namespace": NS_A, "component": "replicatedjob", "instance": "workers",
        "replica": "0", "phase": "Running", "ready": True, "node": "gpu-node-3", "restarts": 0,
        "creationTimestamp": None, "gpu": 8, "cpu": pods["llama-pretrain-workers-0-3"]["cpu"],
        "memory": pods["llama-pretrain-workers-0-3"]["memory"], "gpuResources": {"nvidia.com/gpu": 8},
        "expected": True}
    workers = next(c for c in item["components"] if c["instance"] == "workers")
    assert (workers["pods"], workers["actualPods"], workers["readyPods"]) == (8, 6, 5)


def test_tree_finds_bare_names_and_reports_ambiguity(live):
    ptj = run("tree", "llama3-8b-sft", "-n", NS_A, "--kubeconfig", live["kubeconfig"])
    assert ptj.exit_code == 0, ptj.output
    assert "PyTorchJob wlm-live-a/llama3-8b-sft" in ptj.stdout and "pods 3/4 ready, 4 desired" in ptj.stdout
    assert "llama3-8b-sft-worker-2" in ptj.stdout  # no owner reference: its job-name label
    # a JobSet and the Job it controls share the name: the JobSet is the workload
    owned = run("tree", "owned-twin", "-n", NS_A, "--kubeconfig", live["kubeconfig"], "-o", "json")
    assert json.loads(owned.stdout)["items"][0]["kind"] == "JobSet"
    twin = run("tree", "twin", "-n", NS_A, "--kubeconfig", live["kubeconfig"])
    assert twin.exit_code == 5   # ambiguous
    assert "deployments.apps/twin" in twin.stderr and "statefulsets.apps/twin" in twin.stderr
    assert len(twin.stderr.strip().splitlines()) == 1
    assert run("tree", "sts/twin", "-n", NS_A, "--kubeconfig", live["kubeconfig"]).exit_code == 0
    # -A: a name only this module uses (other tests create the bundled examples, by their names,
    # in namespaces of their own on the same session server)
    everywhere = run("tree", "owned-twin", "-A", "--kubeconfig", live["kubeconfig"], "-o", "json")
    assert everywhere.exit_code == 0, everywhere.stderr
    assert json.loads(everywhere.stdout)["items"][0]["namespace"] == NS_A
    missing = run("tree", "no-such-workload", "-n", NS_A, "--kubeconfig", live["kubeconfig"])
    assert missing.exit_code == 3 and "no workload named 'no-such-workload'" in missing.stderr


def test_resources_total_row_is_the_sum(live):
    result = run("resources", "llama-pretrain", "-n", NS_A, "--kubeconfig", live["kubeconfig"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "JobSet wlm-live-a/llama-pretrain" in lines[0]
    header, rows = table_rows("\n".join(lines[1:]))
    assert header == ["COMPONENT", "REPLICAS", "DESIRED", "ACTUAL", "READY", "GPU/POD", "GPU", "CPU", "MEMORY",
                      "LIVE GPU"]
    body, total = rows[:-1], rows[-1]
    assert [r[0] for r in body] == ["replicatedjob/driver", "replicatedjob/workers"]
    assert total[0] == "TOTAL"
    for col in (2, 3, 4, 6, 9):  # DESIRED ACTUAL READY GPU LIVE GPU
        assert int(total[col]) == sum(int(r[col]) for r in body), header[col]
    assert total[2:5] == ["9", "7", "6"] and total[6] == "64" and total[9] == "48"
    item = json.loads(run("resources", "llama-pretrain", "-n", NS_A, "--kubeconfig", live["kubeconfig"],
                          "-o", "json").stdout)["items"][0]
    assert item["total"]["cpu"] == sum(c["total"]["cpu"] for c in item["components"])
    assert rendering.format_cpu(item["total"]["cpu"]) == total[7]
    assert rendering.format_bytes(item["total"]["memory"]) == total[8]


WORKLOADMAPS = "/apis/workloadmap.io/v1alpha1/workloadmaps"


@pytest.fixture
def cluster_definitions(live):
    """A valid WorkloadMap for Job and an invalid one applied to the cluster (deleted afterwards)."""
    kube = live["kube"]
    doc = yaml.safe_load((ROOT / "catalog" / "builtin" / "job.yaml").read_text())
    doc["metadata"] = {"name": "wlm-test-job"}
    doc["spec"]["framework"] = "Cluster Jobs"
    bad = copy.deepcopy(doc)
    bad["metadata"] = {"name": "wlm-test-broken"}
    bad["spec"]["structureDefinition"]["rootComponent"]["kind"] = {"group": "example.com", "version": "v1",
                                                                    "kind": "Broken"}
    bad["spec"]["structureDefinition"]["rootComponent"]["specDefinition"] = {"podTemplateSpecPath": ".spec.template["}
    for d in (doc, bad):
        kube.request("POST", WORKLOADMAPS, d)
    yield
    for name in ("wlm-test-job", "wlm-test-broken"):
        kube.request("DELETE", f"{WORKLOADMAPS}/{name}")


def test_catalog_list_shows_cluster_definitions_with_their_origin(live, cluster_definitions):
    result = run("catalog", "list", "--kubeconfig", live["kubeconfig"], "-o", "json")
    assert result.exit_code == 0, result.output
    items = {i["name"]: i for i in json.loads(result.stdout)["items"]}
    assert items["wlm-test-job"]["origin"] == "cluster" and items["wlm-test-job"]["framework"] == "Cluster Jobs"
    assert items["wlm-test-job"]["source"] == "cluster:cluster-a/wlm-test-job"
    assert "job" not in items  # the cluster's definition overrides the built-in for batch/v1 Job
    assert items["jobset"]["origin"] == "built-in"
    assert "wlm-test-broken" not in items
    assert "cluster:cluster-a/wlm-test-broken" in result.stderr and "podTemplateSpecPath" in result.stderr
    header, rows = table_rows(run("catalog", "list", "--context", "cluster-a", "--kubeconfig",
                                  live["kubeconfig"]).stdout)
    assert header[-1] == "ORIGIN"
    origin = {r[0]: r[-1] for r in rows if len(r) == len(header)}
    assert origin["wlm-test-job"] == "cluster" and origin["deployment"] == "built-in"
    assert all(i["origin"] == "built-in" for i in json.loads(run("catalog", "list", "-o", "json").stdout)["items"])
    # the live commands read through the cluster's definitions too
    jobs = json.loads(kget(live, "jobs", "-n", NS_A, "-o", "json").stdout)["items"]
    assert jobs and {j["definition"] for j in jobs} == {"wlm-test-job"} and {j["origin"] for j in jobs} == {"cluster"}


def test_rbac_applies_and_grants_exactly_read_access(live, tmp_path):
    kube = live["kube"]
    ns, account, role = "wlm-live-rbac", "reader", "wlm-test-reader"
    token = kube.service_account_token(ns, account)
    result = run("rbac", "--service-account", f"{ns}/{account}", "--name", role, "--kubeconfig", live["kubeconfig"])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", docs[0])
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", docs[1])
    try:
        stored = kube.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
        assert stored["rules"] == docs[0]["rules"]
        from tests.services.kube_api import KubeHTTPError
        jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS_A}/jobsets"
        pods = f"/api/v1/namespaces/{NS_A}/pods"
        assert kube.request("GET", jobsets, token=token)["items"]
        assert kube.request("GET", f"{jobsets}/llama-pretrain", token=token)["metadata"]["name"] == "llama-pretrain"
        assert kube.request("GET", pods, token=token)["items"]
        assert kube.request("GET", "/apis/workloadmap.io/v1alpha1/workloadmaps", token=token)["kind"] == "WorkloadMapList"
        events = kube.watch(jobsets, "0", timeout=2, max_events=1, token=token)
        assert events and events[0]["type"] == "ADDED"
        assert kube.watch(pods, "0", timeout=2, max_events=1, token=token)[0]["type"] == "ADDED"
        assert kube.request("GET", "/api/v1/nodes", token=token)["kind"] == "NodeList"   # issue 25: nodes are read
        for method, path, body in (("GET", f"/api/v1/namespaces/{NS_A}/secrets", None),
                                   ("GET", f"/api/v1/namespaces/{NS_A}/configmaps", None),
                                   ("POST", jobsets, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                      "metadata": {"name": "forbidden"}, "spec": {}}),
                                   ("DELETE", f"{pods}/llama3-8b-sft-master-0", None),
                                   ("PATCH", "/api/v1/nodes/none", {"spec": {"unschedulable": True}})):
            with pytest.raises(KubeHTTPError) as err:
                kube.request(method, path, body, token=token)
            assert err.value.code == 403, (method, path)
        # the live commands work with exactly this role
        reader = kube.kubeconfig_for_token(token, tmp_path / "reader.kubeconfig", "reader")
        wide = run("get", "jobsets", "-n", NS_A, "-o", "wide", "--kubeconfig", reader)
        assert wide.exit_code == 0, wide.output
        assert next(r for r in table_rows(wide.stdout)[1] if r[0] == "llama-pretrain")[5] == "6/9"
        tree = run("tree", "llama-pretrain", "-n", NS_A, "--kubeconfig", reader)
        assert tree.exit_code == 0 and "pods 6/7 ready, 9 desired" in tree.stdout
    finally:
        kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
        kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")


def test_cluster_errors_are_one_line(live, tmp_path):
    kube = live["kube"]
    nobody = kube.kubeconfig_for_token(kube.service_account_token("wlm-live-rbac", "nobody"),
                                       tmp_path / "nobody.kubeconfig", "nobody")
    forbidden = run("get", "jobsets", "-n", NS_A, "--kubeconfig", nobody)
    assert forbidden.exit_code == 1
    errors = [line for line in forbidden.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot list jobsets.jobset.x-k8s.io" in errors[0] and "403" in errors[0]
    assert "workloadmaps" in forbidden.stderr  # its definitions could not be read either: a warning
    bogus = kube.kubeconfig_for_token("not-a-token", tmp_path / "bogus.kubeconfig", "bogus")
    unauthorized = run("get", "jobsets", "-n", NS_A, "--kubeconfig", bogus)
    assert unauthorized.exit_code == 1 and "401" in unauthorized.stderr
    assert len(unauthorized.stderr.strip().splitlines()) == 1
    missing = run("get", "jobsets", "--kubeconfig", tmp_path / "absent")
    assert missing.exit_code == 1 and len(missing.stderr.strip().splitlines()) == 1
    wrong_context = run("get", "jobsets", "--kubeconfig", live["kubeconfig"], "--context", "nope")
    assert wrong_context.exit_code == 1 and "nope" in wrong_context.stderr


def test_library_returns_what_the_commands_print(live):
    messages = []
    with Inspector.open(Catalog.builtin(), live["kubeconfig"], warn=messages.append) as inspector:
        listing = inspector.workloads("jobsets", NS_A, with_pods=True)
        assert not listing.errors and not messages
        llama = next(i for i in listing.items if i["name"] == "llama-pretrain")
        assert llama["live"] == {"pods": 7, "ready": 6, "gpu": 48, "cpu": llama["live"]["cpu"],
                                 "memory": llama["live"]["memory"]}
        detail = inspector.describe("llama-pretrain", NS_A)
        assert json.loads(json.dumps(detail)) == detail
        assert [p["name"] for p in detail["livePods"]][:2] == ["llama-pretrain-driver-0-0", "llama-pretrain-workers-0-0"]
