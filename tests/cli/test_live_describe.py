"""`describe`, `get all`, shell completion and the exit codes, against a real API server (issue 28).

The API server (tests/services/kube_api.py) runs no controller and no scheduler: the tests create
the workloads, the objects their controllers would create (Jobs, a RayJob's RayCluster, an
InferenceService's Deployment, a ReplicaSet) and the pods, and bind pods by writing nodeName and a
status as a kubelet would.  Every expectation below is counted by hand from what is created here.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.cli.test_live_commands import Seeder, run, table_rows
from tests.conftest import example_objects
from workloadmap.catalog import Catalog
from workloadmap.cli.main import COMPLETE_VAR
from workloadmap.ingest.authorizing import role_rules

ROOT = Path(__file__).resolve().parents[2]
NS, NS_ALL, NS_EMPTY = "wlm-describe", "wlm-all", "wlm-empty"
JS = "train-broken"


def _status(s: Seeder, name: str, status: dict) -> None:
    """Write a pod's status as a kubelet would."""
    path = f"/api/v1/namespaces/{NS}/pods/{name}"
    pod = s.kube.request("GET", path)
    pod["status"] = status
    s.kube.request("PUT", f"{path}/status", pod)


def _running(ready: bool, **container) -> dict:
    status = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                 {"type": "Ready", "status": "True" if ready else "False"}]}
    if container:
        status["containerStatuses"] = [{"name": "c", "ready": ready, "restartCount": 4, "image": "x", "imageID": "",
                                        "state": container}]
    return status


def seed_describe(kube) -> dict:
    """JobSet train-broken (llama-pretrain's spec: driver 1 pod; workers 2 jobs × 4 pods, 8 GPUs each):
    9 pods, of which workers-1-1 crash-loops (Running, not ready), workers-1-2 was OOMKilled (Failed,
    on a node), workers-1-3 cannot be scheduled (Pending, no node); the other 6 run ready."""
    s = Seeder(kube)
    s.namespace(NS)
    spec = copy.deepcopy(example_objects("jobset")["llama-pretrain"])
    spec["metadata"]["name"] = JS
    js = s.create(spec, NS)
    replicated = {rj["name"]: rj for rj in js["spec"]["replicatedJobs"]}
    for rj, index, count in (("driver", 0, 1), ("workers", 0, 4), ("workers", 1, 4)):
        job = s.create({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": f"{JS}-{rj}-{index}", "labels": {"jobset.sigs.k8s.io/jobset-name": JS}},
                        "spec": copy.deepcopy(replicated[rj]["template"]["spec"])}, NS, owner=js)
        template = s.template(js, "replicatedjob", rj)
        for completion in range(count):
            name = f"{JS}-{rj}-{index}-{completion}"
            broken = (rj, index) == ("workers", 1) and completion > 0
            node = None if (broken and completion == 3) else f"gpu-node-{index}{completion}"
            s.pod(NS, name, template, {
                "jobset.sigs.k8s.io/jobset-name": JS, "jobset.sigs.k8s.io/replicatedjob-name": rj,
                "jobset.sigs.k8s.io/job-index": str(index), "batch.kubernetes.io/job-name": job["metadata"]["name"],
                "batch.kubernetes.io/job-completion-index": str(completion)}, owner=job, node=node)
    _status(s, f"{JS}-workers-1-1", _running(False, waiting={"reason": "CrashLoopBackOff", "message": "back-off"}))
    _status(s, f"{JS}-workers-1-2", {"phase": "Failed", "containerStatuses": [{
        "name": "c", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
    _status(s, f"{JS}-workers-1-3", {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}]})
    return {"jobset": js}


def seed_all(kube) -> dict:
    """wlm-all: a JobSet and its Job; a RayJob and its RayCluster; an InferenceService and the
    Deployment it controls; a Deployment of its own with a ReplicaSet and a pod; a bare pod."""
    s = Seeder(kube)
    s.namespace(NS_ALL)
    s.namespace(NS_EMPTY)
    js = s.create(example_objects("jobset")["resnet-cifar10"], NS_ALL)
    s.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "resnet-cifar10-workers-0"},
              "spec": copy.deepcopy(js["spec"]["replicatedJobs"][0]["template"]["spec"])}, NS_ALL, owner=js)
    rayjob = next(iter(example_objects("rayjob").values()))
    rj = s.create(rayjob, NS_ALL)
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": f"{rj['metadata']['name']}-rc"},
               "spec": copy.deepcopy(rj["spec"]["rayClusterSpec"])}
    s.create(cluster, NS_ALL, owner=rj)
    isvc = s.create(next(iter(example_objects("inferenceservice").values())), NS_ALL)
    small = {"replicas": 1, "selector": {"matchLabels": {"app": "solo"}},
             "template": {"metadata": {"labels": {"app": "solo"}},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    s.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "isvc-predictor"},
              "spec": copy.deepcopy(small)}, NS_ALL, owner=isvc)
    solo = s.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "solo"},
                     "spec": copy.deepcopy(small)}, NS_ALL)
    rs = s.create({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "solo-5d4f"},
                   "spec": copy.deepcopy(small)}, NS_ALL, owner=solo)
    s.pod(NS_ALL, "solo-5d4f-x", small["template"], {"pod-template-hash": "5d4f"}, owner=rs, node="cpu-node-1")
    s.pod(NS_ALL, "lonely", small["template"], {}, node="cpu-node-2")
    return {"rayjob": rj["metadata"]["name"], "isvc": isvc["metadata"]["name"], "js": js["metadata"]["name"]}


@pytest.fixture(scope="module")
def cluster(kube_cluster):
    seeded = {**seed_describe(kube_cluster), **seed_all(kube_cluster)}
    seeded["kubeconfig"] = str(kube_cluster.kubeconfig)
    seeded["kube"] = kube_cluster
    return seeded


def live(cluster, *args):
    return run(*args, "--kubeconfig", cluster["kubeconfig"])


# == describe ====================================================================================
def test_describe_puts_broken_pods_first_with_their_reasons(cluster):
    result = live(cluster, "describe", f"jobset/{JS}", "-n", NS, "-o", "json")
    assert result.exit_code == 0, result.stderr
    item = json.loads(result.stdout)["items"][0]
    assert (item["kind"], item["name"], item["namespace"]) == ("JobSet", JS, NS)
    assert item["definition"] == "jobset" and item["definitionSource"] == "built-in:jobset.yaml"
    assert item["status"] in item["statuses"]
    pods = item["livePods"]
    assert len(pods) == 9
    # broken first (in the tree's order: instance, replica, name), then the rest
    assert [(p["name"], p["phase"], p["reason"], p["state"]) for p in pods[:3]] == [
        (f"{JS}-workers-1-1", "Running", "CrashLoopBackOff", "Bound"),
        (f"{JS}-workers-1-2", "Failed", "OOMKilled", "Terminated"),
        (f"{JS}-workers-1-3", "Pending", "Unschedulable", "Pending")]
    assert all(p["unhealthy"] for p in pods[:3]) and not any(p["unhealthy"] for p in pods[3:])
    assert pods[3]["name"] == f"{JS}-driver-0-0" and pods[0]["gpu"] == 8 and pods[3]["gpu"] == 0
    workers = {c["instance"]: c for c in item["components"] if c["name"] == "replicatedjob"}
    assert (workers["workers"]["readyPods"], workers["workers"]["actualPods"], workers["workers"]["pods"]) == (5, 8, 8)
    assert workers["workers"]["unhealthyPods"] == 3 and workers["workers"]["unhealthy"]
    assert not workers["driver"]["unhealthy"]
    # resources: 64 GPUs requested (8 workers × 8); bound and running: 4 + 2 workers = 48;
    # pending: the unscheduled worker's 8; the OOMKilled pod holds nothing
    total = item["resources"][-1]
    assert total == {"component": "TOTAL", "desired": 9, "actual": 9, "ready": 6, "gpu": 64, "cpu": total["cpu"],
                     "memory": total["memory"], "allocatedGpu": 48, "pendingGpu": 8}
    rows = {r["component"]: r for r in item["resources"][:-1]}
    assert (rows["replicatedjob/workers"]["allocatedGpu"], rows["replicatedjob/workers"]["pendingGpu"]) == (48, 8)
    # the JobSet is one gang (jobset-name, restart attempt): all 9 pods needed, 7 bound
    assert [(g["podGroup"], g["minMember"], g["pods"], g["bound"]) for g in item["gangGroups"]] == [("jobset", 9, 9, 7)]
    as_yaml = yaml.safe_load(live(cluster, "describe", JS, "-n", NS, "-o", "yaml").stdout)
    assert as_yaml["items"][0]["resources"] == item["resources"]


def test_describe_table_limits_keep_the_unhealthy(cluster):
    result = live(cluster, "describe", "jobset", JS, "-n", NS, "--pod-limit", "2", "--component-limit", "1")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"JobSet/{JS}" in out and f"Namespace:   {NS}" in out and "jobset (built-in:jobset.yaml)" in out
    # one instance shown under replicatedjob: workers (3 unhealthy pods) before driver (healthy)
    assert "workers  replicas 2  pods 5/8 ready, 8 desired" in out and "3 unhealthy" in out
    assert "... and 1 more instances (0 unhealthy)" in out and f"{JS}-driver-0-0" not in out
    # two pods under workers: the first two broken ones; the 6 others hidden, one of them broken
    assert f"{JS}-workers-1-1" in out and "CrashLoopBackOff" in out and "OOMKilled" in out
    assert f"{JS}-workers-1-3" not in out and "... and 6 more pods (1 unhealthy)" in out
    lines = out.splitlines()
    assert lines.index(next(l for l in lines if "workers-1-1" in l)) < lines.index(
        next(l for l in lines if "workers-1-2" in l))
    total = next(l for l in lines if l.startswith("TOTAL")).split()
    assert total == ["TOTAL", "9", "9", "6", "64", total[5], total[6], "48", "8"]
    assert "Gang groups" in out
    whole = live(cluster, "describe", f"jobset/{JS}", "-n", NS).stdout
    assert all(f"{JS}-workers-{i}-{j}" in whole for i in (0, 1) for j in range(4)) and "more pods" not in whole


def test_describe_file_resolves_offline(tmp_path):
    result = run("describe", "-f", ROOT / "catalog" / "examples" / "pytorchjob.yaml", "-o", "json",
                 "--kubeconfig", tmp_path / "absent")
    assert result.exit_code == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    first = items[0]
    assert first["livePods"] is None and first["live"] is None
    assert first["resources"][-1]["actual"] is None and first["resources"][-1]["allocatedGpu"] is None
    assert first["resources"][-1]["desired"] == first["total"]["pods"]
    table = run("describe", "-f", ROOT / "catalog" / "examples" / "jobset.yaml")
    assert table.exit_code == 0 and "9 desired (from the manifest: nothing live)" in table.stdout
    assert run("describe", "jobset/x", "-f", "x.yaml").exit_code == 2


# == get all =====================================================================================
def test_get_all_lists_top_level_workloads_of_every_kind(cluster):
    result = live(cluster, "get", "all", "-n", NS_ALL, "-o", "json")
    assert result.exit_code == 0, result.stderr
    rows = sorted((i["type"], i["name"]) for i in json.loads(result.stdout)["items"])
    # left to their owners: the JobSet's Job, the RayJob's RayCluster, the InferenceService's
    # Deployment, the solo Deployment's pod (through its ReplicaSet); the bare pod is its own
    assert rows == sorted([("JobSet", cluster["js"]), ("RayJob", cluster["rayjob"]),
                           ("InferenceService", cluster["isvc"]), ("Deployment", "solo"), ("Pod", "lonely")])
    header, table = table_rows(live(cluster, "get", "--all-types", "-n", NS_ALL).stdout)
    assert header[:4] == ["TYPE", "NAME", "NAMESPACE", "STATUS"]
    assert sorted((r[0], r[1]) for r in table) == rows
    assert live(cluster, "get", "all", "jobs", "-n", NS_ALL).exit_code == 2
    assert live(cluster, "get", "--all-types", "jobsets", "-n", NS_ALL).exit_code == 2


def test_get_all_warns_of_forbidden_kinds_after_the_output(cluster, tmp_path):
    kube = cluster["kube"]
    role = "wlm-test-no-ray"
    rules = [r for r in role_rules(Catalog.builtin()).rules if r["apiGroups"] != ["ray.io"]]
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
                  "rules": rules})
    kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS_ALL}/rolebindings",
                 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": role},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                  "subjects": [{"kind": "ServiceAccount", "name": "no-ray", "namespace": NS_ALL}]})
    token = kube.service_account_token(NS_ALL, "no-ray")
    config = kube.kubeconfig_for_token(token, tmp_path / "no-ray.kubeconfig", "no-ray")
    result = run("get", "all", "-n", NS_ALL, "--kubeconfig", config)
    assert result.exit_code == 0, result.stderr
    names = sorted(r[1] for r in table_rows(result.stdout)[1])
    assert names == sorted([cluster["js"], cluster["isvc"], "solo", "lonely"])   # no RayJob: not listable
    warnings = [l for l in result.stderr.splitlines() if l.startswith("warning: forbidden:")]
    assert len(warnings) == len(result.stderr.splitlines()) == 4, result.stderr
    # the three Ray kinds the catalog reads (RayCluster, RayJob, RayService), one line each; and the
    # cluster's WorkloadMap definitions (cluster-scoped: a namespace's role cannot grant them)
    ray = [w for w in warnings if ".ray.io" in w]
    assert len(ray) == 3 and all("403" in w and "(left out)" in w for w in ray)
    assert {"rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io"} == {
        w.split("cannot list ")[1].split(" ")[0] for w in ray}
    assert any("workloadmaps.workloadmap.io" in w and "built-in and file definitions only" in w for w in warnings)


# == completion ==================================================================================
@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _workloadmap_completion workloadmap"),
                                            ("zsh", "#compdef workloadmap"),
                                            ("fish", "complete --no-files --command workloadmap")])
def test_completion_scripts_for_each_shell(shell, marker):
    result = run("completion", shell)
    assert result.exit_code == 0 and marker in result.stdout and COMPLETE_VAR in result.stdout
    assert run("completion", "tcsh").exit_code == 2


def _complete(words: str, env_extra=None):
    """The candidates click answers a bash completion request with (its own protocol: type,value lines)."""
    from click.testing import CliRunner
    from workloadmap.cli.main import cli
    parts = words.split(" ")
    env = {COMPLETE_VAR: "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    result = CliRunner().invoke(cli, [], env=env, prog_name="workloadmap", complete_var=COMPLETE_VAR)
    assert result.exit_code == 0 and not result.exception, result.output
    return [line.split(",", 1)[1] for line in result.stdout.splitlines() if line]


def test_completion_answers_commands_options_kinds_and_cluster_names(cluster):
    assert {"describe", "get", "completion", "tree"} <= set(_complete("workloadmap "))
    assert "--pod-limit" in _complete("workloadmap describe --pod")
    assert {"jobsets", "jobs"} <= set(_complete("workloadmap get job"))
    assert "all" in _complete("workloadmap get a")
    kc = cluster["kubeconfig"]
    assert _complete(f"workloadmap describe --kubeconfig {kc} -n {NS} jobset/tr") == [f"jobset/{JS}"]
    assert _complete(f"workloadmap get --kubeconfig {kc} -n {NS_ALL} deployments ") == ["isvc-predictor", "solo"]
    assert _complete(f"workloadmap get --kubeconfig {kc} -n {NS_ALL} deployments solo ") == ["isvc-predictor"]
    assert NS in _complete(f"workloadmap get --kubeconfig {kc} -n wlm-d")
    assert _complete("workloadmap get --status Comp") == ["Completed"]


def test_completion_through_bash_itself(cluster):
    exe = Path(sys.executable).parent / "workloadmap"
    script = (f'eval "$({exe} completion bash)"; COMP_WORDS=(workloadmap describe --kubeconfig '
              f'{cluster["kubeconfig"]} -n {NS} jobset/train); COMP_CWORD=6; _workloadmap_completion workloadmap; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    env = dict(os.environ, PATH=f"{exe.parent}:{os.environ.get('PATH', '')}")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.split() == [f"jobset/{JS}"], out.stderr


def test_kubectl_plugin_completion_answers_in_cobras_protocol(cluster):
    """kubectl 1.26+ runs kubectl_complete-workloadmap with the words after `kubectl workloadmap`
    and reads one candidate a line, then `:<directive>` (4: no file names)."""
    exe = Path(sys.executable).parent / "kubectl_complete-workloadmap"
    kinds = subprocess.run([str(exe), "get", "job"], capture_output=True, text=True, timeout=60)
    assert kinds.returncode == 0 and kinds.stdout.splitlines() == ["jobs", "jobsets", ":4"]
    names = subprocess.run([str(exe), "describe", "--kubeconfig", cluster["kubeconfig"], "-n", NS, "jobset/tr"],
                           capture_output=True, text=True, timeout=60)
    assert names.returncode == 0 and names.stdout.splitlines() == [f"jobset/{JS}", ":4"], names.stderr


def test_completion_of_an_unreachable_cluster_is_nothing_and_quick(tmp_path):
    config = tmp_path / "dead.kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    started = time.monotonic()
    assert _complete(f"workloadmap describe --kubeconfig {config} jobset/") == []
    assert _complete(f"workloadmap get --kubeconfig {tmp_path / 'absent'} -n ") == []
    assert time.monotonic() - started < 10


# == exit codes ==================================================================================
def _error(result) -> dict:
    return json.loads(result.stdout)


def test_exit_codes_and_machine_readable_errors(cluster, tmp_path):
    kube = cluster["kube"]
    # 0: an empty result is no error
    empty = live(cluster, "get", "jobsets", "-n", NS_EMPTY, "-o", "json")
    assert empty.exit_code == 0 and json.loads(empty.stdout) == {"items": [], "count": 0}
    assert live(cluster, "get", "all", "-n", NS_EMPTY).exit_code == 0
    # 1: credentials refused
    bogus = kube.kubeconfig_for_token("not-a-token", tmp_path / "bogus.kubeconfig", "bogus")
    refused = run("get", "jobsets", "-n", NS, "--kubeconfig", bogus, "-o", "json")
    assert refused.exit_code == 1 and _error(refused)["error"] == "unauthorized" and "401" in refused.stderr
    assert _error(refused)["hint"]
    # 2: usage
    assert live(cluster, "get", "jobsets", "--no-such-option").exit_code == 2
    assert live(cluster, "describe", "-n", NS).exit_code == 2
    # 3: no such workload (a name, a bare name, a catalog kind the cluster does not serve)
    for args in (("get", "jobset/nope"), ("describe", "jobset/nope"), ("describe", "nope"), ("tree", "nope")):
        result = live(cluster, *args, "-n", NS, "-o", "json")
        assert result.exit_code == 3, (args, result.stderr)
        assert _error(result)["error"] == "not_found" and "nope" in _error(result)["message"]
        assert len(result.stderr.strip().splitlines()) == 1
    # 4: no definition reads the kind (served, or not at all); offline too
    for args in (("get", "secrets"), ("get", "jobsett"), ("get", "widgetz"), ("describe", "configmap/x")):
        result = live(cluster, *args, "-n", NS, "-o", "yaml")
        assert result.exit_code == 4, (args, result.stderr)
        assert yaml.safe_load(result.stdout)["error"] == "no_definition"
    manifest = tmp_path / "widget.yaml"
    manifest.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    offline = run("describe", "-f", manifest, "-o", "json")
    assert offline.exit_code == 4 and _error(offline)["error"] == "no_definition"
    # 5: one name, two workloads (a Deployment and a StatefulSet)
    s = Seeder(kube)
    small = {"replicas": 1, "selector": {"matchLabels": {"app": "twin"}},
             "template": {"metadata": {"labels": {"app": "twin"}}, "spec": {"containers": [{"name": "c", "image": "b"}]}}}
    s.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "twin"}, "spec": small}, NS_EMPTY)
    s.create({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "twin"},
              "spec": dict(small, serviceName="twin")}, NS_EMPTY)
    twin = live(cluster, "describe", "twin", "-n", NS_EMPTY, "-o", "json")
    assert twin.exit_code == 5 and _error(twin)["error"] == "ambiguous"
    assert "deployments.apps/twin" in _error(twin)["message"]
    assert live(cluster, "describe", "sts/twin", "-n", NS_EMPTY).exit_code == 0


def test_version():
    from workloadmap import __version__
    result = run("--version")
    assert result.exit_code == 0 and __version__ in result.stdout


# == without an API server: type look-up and the cluster definitions' warnings =================
def _served(*kinds):
    from workloadmap.ingest.discovering import ServedResource, ServedResources
    return ServedResources([ServedResource(g, v, k, p, k.lower(), True, (), ("get", "list", "watch"))
                            for g, v, k, p in kinds])


def test_a_catalog_kind_not_served_is_not_found_and_an_unknown_one_has_no_definition():
    from workloadmap.ingest.inspecting import Inspector, NoDefinitionError, NotFoundError
    inspector = Inspector(None, Catalog.builtin(), _served(("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")), "c")
    assert inspector.resource("jobsets").kind == "JobSet"
    with pytest.raises(NotFoundError, match="does not serve RayJob"):     # exit 3: no RayJob can exist here
        inspector.resource("rayjobs")
    with pytest.raises(NoDefinitionError, match="closest known kinds: JobSet"):   # exit 4
        inspector.resource("jobsett")


class _Pages:
    """A cluster whose only list is the WorkloadMap definitions given."""

    def __init__(self, objects):
        self.objects = objects

    def list_pages(self, path, params=None, *, chunk_size=500):
        yield {"items": self.objects}


def test_cluster_definitions_warn_of_collisions_kinds_not_served_and_problems():
    from workloadmap.ingest.inspecting import (COLLISION, INVALID_DEFINITION, NOT_SERVED, Notice,
                                               load_cluster_definitions)
    doc = yaml.safe_load((ROOT / "catalog" / "builtin" / "jobset.yaml").read_text())
    first, second = copy.deepcopy(doc), copy.deepcopy(doc)
    first["metadata"]["name"], second["metadata"]["name"] = "jobset-a", "jobset-b"
    ray = yaml.safe_load((ROOT / "catalog" / "builtin" / "rayjob.yaml").read_text())
    ray["metadata"]["name"] = "rayjob-here"
    broken = copy.deepcopy(doc)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["structureDefinition"]["rootComponent"]["kind"] = "not a kind"
    served = _served(("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
                     ("workloadmap.io", "v1alpha1", "WorkloadMap", "workloadmaps"))
    notices: list[Notice] = []
    catalog = Catalog.builtin()
    loaded = load_cluster_definitions(catalog, _Pages([first, second, ray, broken]), served, "c", notices.append)
    assert [d.name for d in loaded] == ["jobset-a", "jobset-b", "rayjob-here"]
    causes = [n.cause for n in notices]
    assert causes.count(COLLISION) == 1 and causes.count(NOT_SERVED) == 1 and INVALID_DEFINITION in causes
    collision = next(n for n in notices if n.cause == COLLISION)
    assert "'jobset-a' and 'jobset-b' both read JobSet" in collision.message and "'jobset-b' is used" in collision.message
    assert "does not serve RayJob" in next(n for n in notices if n.cause == NOT_SERVED).message
    assert catalog.get("jobset-b").gvk.kind == "JobSet"


def test_pod_reasons_as_kubectl_says_them():
    from workloadmap.ingest.describing import pod_reason
    assert pod_reason({"status": {"phase": "Failed", "reason": "Evicted"}}) == "Evicted"
    init_waiting = {"status": {"phase": "Pending", "initContainerStatuses": [
        {"name": "i", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}
    assert pod_reason(init_waiting) == "Init:ImagePullBackOff"
    creating = {"status": {"phase": "Pending", "containerStatuses": [{"name": "c", "state": {"waiting": {
        "reason": "ContainerCreating"}}}]}}
    assert pod_reason(creating) is None   # on its way, not broken
    assert pod_reason({"status": {"phase": "Failed", "containerStatuses": [{"name": "c", "state": {
        "terminated": {"exitCode": 2}}}]}}) == "ExitCode:2"
    assert pod_reason({"status": {"phase": "Succeeded", "containerStatuses": [{"name": "c", "state": {
        "terminated": {"exitCode": 0, "reason": "Completed"}}}]}}) is None
    assert pod_reason({"metadata": {"deletionTimestamp": "2026-12-05T00:00:00Z"}, "status": {"phase": "Running"}}) \
        == "Terminating"


def test_describe_header_marks_the_resolved_status_among_the_matched():
    from workloadmap.cli import rendering
    item = {"kind": "JobSet", "name": "x", "namespace": "ns", "definition": "jobset", "origin": "file",
            "definitionSource": "/tmp/d.yaml", "creationTimestamp": None, "status": "Degraded",
            "statuses": ["Running", "Degraded"], "live": None, "total": {"pods": 3}}
    text = rendering._describe_header(item, None).plain
    assert "Status:      Running, Degraded *" in text and "jobset (file: /tmp/d.yaml)" in text
    assert "3 desired (from the manifest: nothing live)" in text
    undefined = rendering._describe_header(dict(item, status="Undefined", statuses=[]), None).plain
    assert "Status:      Undefined *\n" in undefined
