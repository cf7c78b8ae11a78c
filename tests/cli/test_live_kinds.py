"""The kinds added for today's Workload Map, live: every example object of each is created in a real
API server (the test CRDs: names and versions as upstream), and `workloadmap get` finds it through
discovery and resolves it as `resolve -f` resolves the file.

No controller runs: the objects carry the status their controllers would write (through /status).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests import kube_objects as k
from tests.conftest import example_objects
from workloadmap.catalog import Catalog
from workloadmap.cli.main import cli

# (example file, `get` type name as a user types it)
KINDS = [
    ("llminferenceservice", "llmisvc"),
    ("dynamographdeployment-v1beta1", "dynamographdeployments.v1beta1.nvidia.com"),
    ("sandbox", "sandboxes"),
    ("nimcache", "nimcache"),
]


@pytest.mark.parametrize("example, type_name", KINDS)
def test_get_resolves_every_example_of_the_kind_as_offline(kube_cluster, example, type_name):
    ns = k.namespace(kube_cluster, "kinds")
    objects = example_objects(example)
    for obj in objects.values():
        k.create(kube_cluster, obj, ns)
    result = CliRunner().invoke(cli, ["get", type_name, "-n", ns, "-o", "json",
                                      "--kubeconfig", str(kube_cluster.kubeconfig)])
    assert result.exit_code == 0, result.output + (result.stderr or "")
    items = {i["name"]: i for i in json.loads(result.output)["items"]}
    assert set(items) == set(objects)
    catalog = Catalog.builtin()
    for name, obj in objects.items():
        offline = catalog.resolve(obj).to_dict()
        assert items[name]["status"] == offline["status"], name
        assert items[name]["total"] == offline["total"], name
        assert items[name]["definition"] == offline["definition"], name


def test_get_fetches_the_runtime_a_trainjob_names(kube_cluster):
    """The TrainJob's pods live in its runtime: `get` fetches the ClusterTrainingRuntime (cluster-scoped)
    or the TrainingRuntime (in the TrainJob's namespace) it names; a runtime the cluster does not have
    leaves the TrainJob without pods, warned on stderr, the command still succeeding."""
    from workloadmap.catalog.registry import bundled_related

    ns = k.namespace(kube_cluster, "train")
    for runtime in bundled_related():
        body = {key: value for key, value in runtime.items() if key != "status"}
        body["metadata"] = {"name": runtime["metadata"]["name"], "labels": runtime["metadata"].get("labels") or {}}
        if runtime["kind"] == "ClusterTrainingRuntime":
            kube_cluster.ensure("/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", body)
        else:
            kube_cluster.request("POST", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainingruntimes", body)
    jobs = example_objects("trainjob")
    jobs["bert-zero3"]["metadata"]["namespace"] = ns   # its TrainingRuntime is in the test's namespace
    for job in jobs.values():
        k.create(kube_cluster, job, ns)
    result = CliRunner().invoke(cli, ["get", "trainjobs", "-n", ns, "-o", "json",
                                      "--kubeconfig", str(kube_cluster.kubeconfig)])
    assert result.exit_code == 0, result.output
    items = {i["name"]: i for i in json.loads(result.stdout)["items"]}
    assert (items["llama-finetune"]["total"]["pods"], items["llama-finetune"]["total"]["gpu"]) == (4, 32)
    assert items["bert-zero3"]["references"][0] == {
        "name": "runtime", "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "namespace": ns, "objectName": "deepspeed-zero3", "found": True}
    assert items["mnist-quick"]["references"][0]["found"] is False
    assert items["mnist-quick"]["total"]["pods"] == 0
    assert "reference $runtime: ClusterTrainingRuntime torch-distributed-gpu not found" in result.stderr
