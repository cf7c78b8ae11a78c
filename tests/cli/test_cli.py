"""The command line: output dialect, errors and exit codes, documentation."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml
from click.testing import CliRunner

from tests.conftest import example_objects
from workloadmap.catalog import Catalog
from workloadmap.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "catalog" / "examples"


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def test_resolve_json_contract():
    result = run("resolve", "-f", str(EXAMPLES / "jobset.yaml"), "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["count"] == len(data["items"]) >= 2
    item = data["items"][0]
    for key in ("apiVersion", "kind", "namespace", "name", "uid", "definition", "status", "statuses", "phase",
                "components", "total"):
        assert key in item
    assert set(item["total"]) >= {"pods", "gpu", "cpu", "memory"}
    for c in item["components"]:
        assert set(c) >= {"name", "instance", "parent", "replicas", "minReplicas", "maxReplicas", "pods",
                          "perPod", "total"}
        assert set(c["perPod"]) >= {"gpu", "cpu", "memory"}
        assert c["total"]["gpu"] == c["perPod"]["gpu"] * c["pods"]
    assert item["total"]["pods"] == sum(c["pods"] for c in item["components"])


def test_resolve_reads_stdin_lists_and_multiple_documents():
    docs = list(yaml.safe_load_all((EXAMPLES / "pytorchjob.yaml").read_text()))
    as_list = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": docs[:2]})
    result = run("resolve", "-f", "-", "-o", "json", input=as_list + "---\n" + yaml.safe_dump(docs[2]))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["count"] == 3


def test_resolve_yaml_table_and_tree():
    path = str(EXAMPLES / "leaderworkerset.yaml")
    assert yaml.safe_load(run("resolve", "-f", path, "-o", "yaml").output)["count"] >= 2
    table = run("resolve", "-f", path).output
    assert "NAMESPACE" in table and "STATUS" in table and "leader(" in table and "worker(" in table
    tree = run("resolve", "-f", path, "-o", "tree").output
    assert "TOTAL" in tree and "group" in tree and "leader" in tree and "worker" in tree


def test_unknown_kind_names_the_kind_and_closest_kinds():
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobs", "metadata": {"name": "x", "namespace": "n"}}
    result = CliRunner().invoke(cli, ["resolve", "-f", "-", "-o", "json"], input=json.dumps(obj))
    assert result.exit_code == 1
    assert "PyTorchJobs" in result.stderr and "closest known kinds: PyTorchJob" in result.stderr
    assert json.loads(result.stdout)["count"] == 0


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n")
    result = CliRunner().invoke(cli, ["resolve", "-f", str(bad)])
    assert result.exit_code == 1
    assert str(bad) in result.stderr and "line" in result.stderr


def test_one_bad_object_does_not_hide_the_others(tmp_path):
    good = yaml.safe_load_all((EXAMPLES / "job.yaml").read_text())
    docs = list(good)[:1] + [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "broken"},
                               "spec": {"parallelism": "lots"}}]
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = CliRunner().invoke(cli, ["resolve", "-f", str(path), "-o", "json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["count"] == 1
    assert "Job broken" in result.stderr and "definition 'job'" in result.stderr


def test_gpu_resource_option_changes_what_counts():
    path = str(EXAMPLES / "jobset.yaml")
    default = json.loads(run("resolve", "-f", path, "-o", "json").output)
    only_mig = json.loads(run("resolve", "-f", path, "-o", "json", "--gpu-resource", "nvidia.com/mig-*").output)
    assert sum(i["total"]["gpu"] for i in only_mig["items"]) < sum(i["total"]["gpu"] for i in default["items"])


def test_user_definition_file_overrides_builtin(tmp_path):
    doc = yaml.safe_load((ROOT / "catalog" / "builtin" / "job.yaml").read_text())
    doc["metadata"]["name"] = "my-job"
    doc["spec"]["framework"] = "Mine"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    listed = json.loads(run("catalog", "list", "-d", str(path), "-o", "json").output)
    mine = [d for d in listed["items"] if d["kind"] == "Job" and d["apiVersion"] == "batch/v1"]
    assert [(d["name"], d["origin"]) for d in mine] == [("my-job", "file")]
    resolved = json.loads(run("resolve", "-d", str(path), "-f", str(EXAMPLES / "job.yaml"), "-o", "json").output)
    assert {i["definition"] for i in resolved["items"]} == {"my-job"}
    assert {i["origin"] for i in resolved["items"]} == {"file"}


def test_resolve_reads_referenced_objects_from_the_same_files(tmp_path):
    """A TrainJob's pods come from the runtime it names: given in the same files (any order), it is
    read, not resolved as a workload; missing, the TrainJob resolves without pods and the error
    stream names the object (exit 0: the record is complete as far as the inputs go)."""
    job = example_objects("trainjob")["llama-finetune"]
    runtime = next(o for o in yaml.safe_load_all((EXAMPLES / "related" / "trainingruntimes.yaml").read_text())
                   if o["metadata"]["name"] == "torch-distributed")
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([job, runtime]))
    result = run("resolve", "-f", str(both), "-o", "json")
    (item,) = json.loads(result.stdout)["items"]
    assert (item["name"], item["total"]["pods"], item["total"]["gpu"]) == ("llama-finetune", 4, 32)
    assert item["references"] == [{"name": "runtime", "apiVersion": "trainer.kubeflow.org/v1alpha1",
                                   "kind": "ClusterTrainingRuntime", "namespace": None,
                                   "objectName": "torch-distributed", "found": True}]
    alone = tmp_path / "alone.yaml"
    alone.write_text(yaml.safe_dump(job))
    result = run("resolve", "-f", str(alone), "-o", "json")
    (item,) = json.loads(result.stdout)["items"]
    assert (item["total"]["pods"], item["references"][0]["found"]) == (0, False)
    assert "ClusterTrainingRuntime torch-distributed not found: resolved without it (give it in the same files)" in result.stderr
    assert result.exit_code == 0


def test_catalog_list_and_show():
    listed = json.loads(run("catalog", "list", "-o", "json").output)
    kinds = {d["kind"] for d in listed["items"]}
    assert {"JobSet", "PyTorchJob", "RayCluster", "RayJob", "RayService", "InferenceService", "Service", "MPIJob",
            "NIMService", "LeaderWorkerSet", "Milvus", "PodCliqueSet", "DynamoGraphDeployment", "Deployment",
            "StatefulSet", "Job", "CronJob", "Pod"} <= kinds
    assert all(d["origin"] == "built-in" for d in listed["items"])
    shown = yaml.safe_load(run("catalog", "show", "jobset").output)
    assert shown["items"][0]["kind"] == "WorkloadMap"
    assert "replicatedjob" in run("catalog", "show", "jobset", "-o", "tree").output
    missing = CliRunner().invoke(cli, ["catalog", "show", "jobsett"])
    assert missing.exit_code == 1 and "did you mean jobset" in missing.stderr


def test_examples_flag_resolves_every_framework():
    result = run("resolve", "--examples", "-o", "json")
    data = json.loads(result.stdout)
    assert {i["definition"] for i in data["items"]} == {d.name for d in Catalog.builtin()}
    # the TrainJob example whose runtime exists nowhere is resolved without it, and said so
    assert "mnist-quick: reference $runtime: ClusterTrainingRuntime torch-distributed-gpu not found" in result.stderr
    assert result.exit_code == 0


def _commands(group: click.Group, prefix=("workloadmap",)):
    for name, cmd in group.commands.items():
        path = (*prefix, name)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path)
        else:
            yield " ".join(path)


def test_every_command_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    missing = [c for c in _commands(cli) if c not in readme]
    assert not missing, f"README.md does not document: {missing}"


def test_every_command_has_help():
    for name in _commands(cli):
        args = name.split()[1:] + ["--help"]
        result = run(*args)
        assert result.exit_code == 0 and "Usage:" in result.output
