"""Upstream Workload Map documents read unchanged: today's fields with upstream's meaning.

Upstream facts (github dsx-ai-factory/workload-map, pkg/api/runai/v1alpha1 and its generated
CRD charts/karta/crds/run.ai_kartas.yaml; KAI Scheduler's Karta pod grouper):
- `componentTypeSelector` holds when every part set holds: `keyPath` (equal to `value`, or
  present) AND every `matchLabels` entry equal to the pod's label; CEL rules "at least one of
  keyPath or matchLabels must be set" and "value requires keyPath"; keyPath minLength 1.
- `gangScheduling.podGroup {name, topology, subGroups[{componentName, topology}]}`: one pod
  group of the workload; each sub-group needs its component subtree's effective minimum
  replicas (min replicas when set, else replicas), the group all sub-groups (minSubGroup =
  their count); without sub-groups the group needs the root subtree's minimum.  Topology
  {topologyName, requiredTopologyLevel, preferredTopologyLevel}, all three required.
- condition field names default to type/status/message/reason; an API server prunes a null.
- lists that are maps: childComponents by name, additionalChildKinds by kind, podGroups by
  name, members and subGroups by componentName; groupByKeyPaths and filters are sets.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from workloadmap.catalog import Catalog
from workloadmap.catalog.pods import GangSubGroup, gang_groups, match_pod
from workloadmap.catalog.validating import load_definition, load_file, validate_document, validate_file

from tests.conftest import example_objects

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"
UPSTREAM_FILES = sorted(FIXTURES.glob("*.yaml"))
SEL = "spec.structureDefinition.childComponents[0].podSelector.componentTypeSelector"


def _problems(doc) -> list[tuple[str, str]]:
    return [(p.path, p.reason) for p in validate_document(doc, "f.yaml")]


def _with_selector(selector: dict) -> dict:
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "demo"}, "spec": {
        "structureDefinition": {
            "rootComponent": {"name": "demo", "kind": {"group": "example.com", "version": "v1", "kind": "Demo"},
                              "statusDefinition": {"statusMappings": {}}},
            "childComponents": [{"name": "worker", "ownerRef": "demo", "specDefinition": {
                "podTemplateSpecPath": ".spec.template"}, "podSelector": {"componentTypeSelector": selector}}]}}}


def _pod(labels: dict, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels,
                                                            "annotations": annotations or {}}}


# -- every upstream-shaped definition loads unchanged ------------------------------------------

@pytest.mark.parametrize("path", UPSTREAM_FILES, ids=lambda p: p.stem)
def test_upstream_definition_validates_unchanged(path):
    assert validate_file(str(path)) == []


def test_there_is_a_fixture_for_upstream_catalog_definitions():
    # docs/catalog and the Go catalog's kartas (its NIMService, NIMCache, JobSet and Pod ones are not
    # in the stored copy of upstream we read)
    assert {p.stem for p in UPSTREAM_FILES} >= {
        "apps-statefulset-v1", "leaderworkerset-x-k8s-io-leaderworkerset-v1", "milvus-io-milvus-v1beta1",
        "ray-io-rayjob-v1", "serving-knative-dev-service-v1", "agents-x-k8s-io-sandbox-v1beta1",
        "batch-job-v1", "batch-cronjob-v1", "apps-deployment-v1", "kubeflow-org-pytorchjob-v1",
        "kubeflow-org-mpijob-v2beta1", "ray-io-raycluster-v1", "serving-kserve-io-inferenceservice-v1beta1",
        "grove-io-podcliqueset-v1alpha1", "serving-kserve-io-llminferenceservice-v1alpha1",
        "serving-kserve-io-llminferenceservice-v1alpha2", "ray-io-rayservice-v1",
        "nvidia-com-dynamographdeployment-v1alpha1", "nvidia-com-dynamographdeployment-v1beta1"}


# example objects an upstream definition cannot resolve, and why (its own jq, not ours)
UPSTREAM_CANNOT = {
    # `.spec.template.podCliqueScalingGroups[].name`: iterating a missing list is a jq error
    # (gojq's too); these PodCliqueSets have no scaling groups
    ("grove-io-podcliqueset-v1alpha1", "agg-qwen"): "Cannot iterate over null",
    ("grove-io-podcliqueset-v1alpha1", "embedding-svc"): "Cannot iterate over null",
    ("grove-io-podcliqueset-v1alpha1", "llama-70b-staging"): "Cannot iterate over null",
    # `resourcesPath: .resources` reads Dynamo's own resources ({requests: {cpu, memory, gpu},
    # limits: {gpu, gpuType, custom: {...}}}) as Kubernetes ResourceRequirements: `custom` and
    # `gpuType` are no quantities
    ("nvidia-com-dynamographdeployment-v1alpha1", "sglang-dsr1"): "custom.*dict is not a Kubernetes quantity",
    ("nvidia-com-dynamographdeployment-v1alpha1", "trtllm-agg"): "gpuType.*is not a Kubernetes quantity",
}


def _examples_of(definition) -> list[dict]:
    from workloadmap.catalog.registry import bundled_examples

    return [obj for obj in bundled_examples() if obj.get("kind") == definition.gvk.kind
            and obj["apiVersion"].rpartition("/")[0] == definition.gvk.group]


@pytest.mark.parametrize("path", UPSTREAM_FILES, ids=lambda p: p.stem)
def test_upstream_definition_resolves_every_example_of_its_kind(path):
    from workloadmap.catalog import ResolveError
    catalog = _upstream_catalog(path.stem)
    definition = catalog.get(path.stem)
    examples = [o for o in _examples_of(definition) if catalog.definition_for(o) is definition]
    assert examples, path.stem
    for obj in examples:
        cannot = UPSTREAM_CANNOT.get((path.stem, obj["metadata"]["name"]))
        if cannot:
            with pytest.raises(ResolveError, match=cannot):
                catalog.resolve(obj)
        else:
            workload = catalog.resolve(obj)
            assert workload.definition == path.stem and workload.status


def _upstream_catalog(stem: str) -> Catalog:
    catalog = Catalog.builtin()
    for d in load_file(str(FIXTURES / f"{stem}.yaml")):
        catalog.add(d)
    return catalog


@pytest.mark.parametrize("stem, example, expected", [
    # StatefulSet: replicas (default 1) pods of .spec.template
    ("apps-statefulset-v1", "statefulset", {"vllm-shards": 2, "qdrant": 3, "redis-cache": 3}),
    # LWS: leaders = replicas, workers = replicas x (size - 1); the group level has no pods.
    # sglang-deepseek-r1 has no leaderTemplate: upstream's leader path is null there, so no
    # leader pods (ours builds the leaders from workerTemplate, as the controller does: 12)
    ("leaderworkerset-x-k8s-io-leaderworkerset-v1", "leaderworkerset",
     {"vllm-llama3-70b": 2 + 2 * 1, "sglang-deepseek-r1": 0 + 3 * 3}),
    # RayJob: head 1 + each worker group's replicas (no submitter pod upstream)
    ("ray-io-rayjob-v1", "rayjob", {"mnist-train": 1 + 2, "llm-batch-inference": 1 + 4}),
    # Milvus: a component's fragmented pod fields are its own only (.spec.components.<c>.*): the
    # example's mixCoord (1) and dataNode (2) set nothing but replicas, so upstream sees no pod
    # spec there and counts proxy 2 + queryNode 3 + indexNode 1 (ours inherits the shared
    # .spec.components fields the operator applies: 9)
    ("milvus-io-milvus-v1beta1", "milvus", {"vectordb-prod": 2 + 3 + 1}),
])
def test_upstream_definition_resolves_our_examples(stem, example, expected):
    catalog = _upstream_catalog(stem)
    objects = example_objects(example)
    for name, pods in expected.items():
        workload = catalog.resolve(objects[name])
        assert workload.definition == stem
        assert workload.pods == pods, name


def test_upstream_rayjob_reads_the_job_status_phase():
    # upstream maps .status.jobStatus: SUCCEEDED -> Completed, FAILED -> Failed
    catalog = _upstream_catalog("ray-io-rayjob-v1")
    objects = example_objects("rayjob")
    assert catalog.resolve(objects["llm-batch-inference"]).status == "Completed"
    assert catalog.resolve(objects["data-validate"]).status == "Failed"


def test_upstream_knative_revision_minimum_defaults_to_one():
    catalog = _upstream_catalog("serving-knative-dev-service-v1")
    workload = catalog.resolve(example_objects("knative-service")["image-classifier"])
    revision = next(c for c in workload.components if c.name == "revision")
    # no min-scale annotation: `// 1`; replicas unset, so pods = minReplicas = 1
    assert (revision.min_replicas, revision.pods) == (1, 1)


# -- componentTypeSelector.matchLabels -------------------------------------------------------

def test_match_labels_alone_is_a_type_selector():
    definition = load_file(str(FIXTURES / "milvus-io-milvus-v1beta1.yaml"))[0]
    zookeeper = _pod({"app": "pulsar", "component": "zookeeper", "release": "rag"})
    bookie = _pod({"app": "pulsar", "component": "bookie"})
    assert match_pod(definition, zookeeper).component == "pulsar-zookeeper"
    assert match_pod(definition, bookie).component == "pulsar-bookkeeper"


def test_match_labels_every_entry_must_hold():
    definition = load_file(str(FIXTURES / "milvus-io-milvus-v1beta1.yaml"))[0]
    # component=proxy alone is not Pulsar's proxy (app must be pulsar too); Milvus's own proxy
    # pods carry app.kubernetes.io/component=proxy
    assert match_pod(definition, _pod({"component": "proxy", "app": "other"})) is None
    milvus_proxy = _pod({"app.kubernetes.io/component": "proxy"})
    assert match_pod(definition, milvus_proxy).component == "proxy"


def test_match_labels_are_anded_with_key_path():
    doc = _with_selector({"keyPath": '.metadata.labels["role"]', "value": "worker", "matchLabels": {"tier": "gpu"}})
    definition = load_definition(doc, "file", "f.yaml")
    assert match_pod(definition, _pod({"role": "worker", "tier": "gpu"})).component == "worker"
    assert match_pod(definition, _pod({"role": "worker", "tier": "cpu"})) is None
    assert match_pod(definition, _pod({"role": "launcher", "tier": "gpu"})) is None


def test_a_type_selector_needs_key_path_or_match_labels():
    assert (SEL, "at least one of keyPath or matchLabels must be set") in _problems(_with_selector({}))


def test_value_requires_key_path():
    doc = _with_selector({"value": "worker", "matchLabels": {"tier": "gpu"}})
    assert _problems(doc) == [(f"{SEL}.value", "value requires keyPath")]


def test_match_labels_keys_and_values_follow_label_syntax():
    doc = _with_selector({"matchLabels": {"bad key": "x", "example.com/ok": "not ok!", "Example.COM/x": "y"}})
    reasons = [r for p, r in _problems(doc) if p == f"{SEL}.matchLabels"]
    assert any(r.startswith("label key 'bad key'") for r in reasons)
    assert any(r.startswith("label value 'not ok!'") for r in reasons)
    assert any(r.startswith("label key 'Example.COM/x': the prefix") for r in reasons)
    assert len(reasons) == 3


def test_empty_match_labels_and_empty_key_path_are_refused():
    assert [p for p, _ in _problems(_with_selector({"matchLabels": {}}))] == [f"{SEL}.matchLabels"]
    assert ((f"{SEL}.keyPath", "'' should be non-empty") in _problems(_with_selector({"keyPath": ""})))


# -- null condition field names ---------------------------------------------------------------

def test_condition_field_names_given_as_null_take_their_defaults():
    definition = load_file(str(FIXTURES / "ray-io-rayjob-v1.yaml"))[0]   # reasonFieldName: null
    sd = definition.root.status
    assert (sd.type_field, sd.status_field, sd.message_field, sd.reason_field) == (
        "type", "status", "message", "reason")


# -- lists that are maps ----------------------------------------------------------------------

def test_a_kind_listed_twice_in_additional_child_kinds_is_refused():
    doc = _with_selector({"keyPath": ".metadata.name"})
    doc["spec"]["structureDefinition"]["additionalChildKinds"] = [
        {"group": "", "version": "v1", "kind": "Service"},
        {"group": "serving.knative.dev", "version": "v1", "kind": "Service"}]
    assert _problems(doc) == [("spec.structureDefinition.additionalChildKinds[1]",
                               "duplicate entry (kind 'Service'; also at [0]): the list is a map keyed by kind")]


def test_pod_group_names_and_members_are_unique():
    doc = _with_selector({"keyPath": ".metadata.name"})
    member = {"componentName": "worker", "groupByKeyPaths": [".metadata.name", ".metadata.name"]}
    doc["spec"]["optimizationInstructions"] = {"gangScheduling": {"podGroups": [
        {"name": "g", "members": [member, {"componentName": "worker"}]}, {"name": "g", "members": []}]}}
    paths = [p for p, _ in _problems(doc)]
    gp = "spec.optimizationInstructions.gangScheduling.podGroups"
    assert sorted(paths) == sorted([f"{gp}[1]", f"{gp}[0].members[1]", f"{gp}[0].members[0].groupByKeyPaths[1]"])


def test_built_in_definitions_list_every_kind_once(catalog):
    for definition in catalog:
        kinds = [k.kind for k in definition.additional_child_kinds]
        assert len(kinds) == len(set(kinds)), definition.name


# -- podGroup with topology and sub-groups -----------------------------------------------------

RACK = {"topologyName": "rack-topology", "requiredTopologyLevel": "zone", "preferredTopologyLevel": "rack"}
HOST = {"topologyName": "gpu-topology", "requiredTopologyLevel": "rack", "preferredTopologyLevel": "host"}


def _pytorch_with_pod_group(pod_group: dict):
    catalog = Catalog.builtin()
    doc = copy.deepcopy(catalog.get("pytorchjob").document)
    doc["apiVersion"], doc["kind"] = "run.ai/v1alpha1", "Karta"
    doc["metadata"] = {"name": "pytorch-podgroup"}
    del doc["spec"]["framework"]
    doc["spec"]["optimizationInstructions"] = {"gangScheduling": {"podGroup": pod_group}}
    assert validate_document(doc) == []
    definition = load_definition(doc, "file", "f.yaml")
    catalog.add(definition)
    return catalog, definition


def _training_pods(job: str, masters: int, workers: int) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{job}-{role.lower()}-{i}", "labels": {
        "training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": role.lower(),
        "training.kubeflow.org/replica-index": str(i)}}}
        for role, n in (("Master", masters), ("Worker", workers)) for i in range(n)]


def test_pod_group_sub_groups_need_their_components_minimums():
    catalog, definition = _pytorch_with_pod_group({"name": "training", "topology": RACK, "subGroups": [
        {"componentName": "master"}, {"componentName": "worker", "topology": HOST}]})
    obj = example_objects("pytorchjob")["llama3-8b-sft"]          # Master 1, Worker 3
    workload = catalog.resolve(obj)
    pods = _training_pods("llama3-8b-sft", 1, 2)                    # one worker not created yet
    [group] = gang_groups(definition, workload, pods)
    assert (group.pod_group, group.key, group.min_member) == ("training", "llama3-8b-sft", 1 + 3)
    assert group.topology.to_dict() == RACK
    assert group.sub_groups == [
        GangSubGroup("master", ["llama3-8b-sft-master-0"], 1, None),
        GangSubGroup("worker", ["llama3-8b-sft-worker-0", "llama3-8b-sft-worker-1"], 3, group.sub_groups[1].topology)]
    assert group.sub_groups[1].topology.to_dict() == HOST
    # the record carries the group for a scheduler, from the object alone
    assert workload.to_dict()["podGroup"] == {"name": "training", "minMember": 4, "topology": RACK, "subGroups": [
        {"name": "master", "minMember": 1, "topology": None}, {"name": "worker", "minMember": 3, "topology": HOST}]}


def test_pod_group_without_sub_groups_needs_the_root_subtree_minimum():
    catalog, definition = _pytorch_with_pod_group({"name": "all"})
    obj = example_objects("pytorchjob")["elastic-imagenet"]       # Worker 2, elasticPolicy minReplicas 1
    workload = catalog.resolve(obj)
    [group] = gang_groups(definition, workload, _training_pods("elastic-imagenet", 0, 2))
    # the effective minimum replicas: the worker's minReplicas (1), as upstream's CalculateSubtreeScale
    assert (group.min_member, len(group.pods), group.sub_groups, group.topology) == (1, 2, [], None)
    assert workload.to_dict()["podGroup"] == {"name": "all", "minMember": 1, "topology": None, "subGroups": []}


def test_definitions_without_pod_group_have_no_pod_group_in_the_record(catalog):
    record = catalog.resolve(example_objects("pytorchjob")["llama3-8b-sft"]).to_dict()
    assert "podGroup" not in record


def test_a_topology_needs_all_three_fields():
    doc = _with_selector({"keyPath": ".metadata.name"})
    doc["spec"]["optimizationInstructions"] = {"gangScheduling": {"podGroup": {
        "name": "g", "subGroups": [{"componentName": "worker", "topology": {"topologyName": "t"}}]}}}
    reasons = [r for p, r in _problems(doc)
               if p == "spec.optimizationInstructions.gangScheduling.podGroup.subGroups[0].topology"]
    assert sorted(reasons) == ["'preferredTopologyLevel' is a required property",
                               "'requiredTopologyLevel' is a required property"]


def test_sub_group_shape_is_upstreams():
    doc = _with_selector({"keyPath": ".metadata.name"})
    doc["spec"]["optimizationInstructions"] = {"gangScheduling": {"podGroup": {
        "name": "g", "subGroups": [{"componentName": "worker", "groupByKeyPaths": [".metadata.name"]}]}}}
    assert _problems(doc) == [("spec.optimizationInstructions.gangScheduling.podGroup.subGroups[0]",
                               "unknown field ('groupByKeyPaths' was unexpected)")]


def test_upstream_yaml_fixtures_are_karta_documents():
    for path in UPSTREAM_FILES:
        doc = yaml.safe_load(path.read_text())
        assert (doc["apiVersion"], doc["kind"]) == ("run.ai/v1alpha1", "Karta"), path.name


# -- export as a Karta -------------------------------------------------------------------------

def test_catalog_show_karta_prints_an_upstream_document_without_our_extensions():
    from click.testing import CliRunner

    from workloadmap.cli.main import cli

    result = CliRunner().invoke(cli, ["catalog", "show", "leaderworkerset", "-o", "karta"])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.stdout)
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]) == ("run.ai/v1alpha1", "Karta", {"name": "leaderworkerset"})
    assert "framework" not in doc["spec"]
    worker = doc["spec"]["structureDefinition"]["childComponents"][2]
    assert worker["name"] == "worker" and "podsPerReplicaPath" not in worker["scaleDefinition"]
    assert ("left out workloadmap extensions upstream does not know: spec.framework, "
            "spec.structureDefinition.childComponents[2].scaleDefinition.podsPerReplicaPath") in result.stderr
    # the export is a valid definition of its own, read back unchanged
    assert validate_document(doc) == []


def test_karta_export_gives_every_kind_its_group():
    catalog = Catalog.builtin()
    from workloadmap.catalog import exporting
    for definition in catalog:
        doc, _ = exporting.karta_document(definition)
        structure = doc["spec"]["structureDefinition"]
        kinds = [c["kind"] for c in [structure["rootComponent"], *structure.get("childComponents", [])] if "kind" in c]
        kinds += structure.get("additionalChildKinds", [])
        assert all("group" in k for k in kinds), definition.name


def test_upstream_sandbox_with_a_companion_component_routes_the_pods_the_sandbox_owns():
    # a version of upstream's Sandbox Karta adds `companion`: a Pod component without a pod spec
    # whose keyPath selects the pods a Sandbox owns that lack the sandbox-name-hash label (an
    # integration's proxy or supervisor), in the Sandbox's gang by owner uid
    doc = yaml.safe_load((FIXTURES / "agents-x-k8s-io-sandbox-v1beta1.yaml").read_text())
    owner_uid = '[.metadata.ownerReferences[]? | select(.kind == "Sandbox") | .uid][0]'
    doc["spec"]["structureDefinition"]["childComponents"].append({
        "name": "companion", "ownerRef": "sandbox", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "podSelector": {"componentTypeSelector": {
            "keyPath": f'select(.metadata.labels["agents.x-k8s.io/sandbox-name-hash"] == null) | {owner_uid}'}}})
    doc["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0]["members"].append(
        {"componentName": "companion", "groupByKeyPaths": [owner_uid]})
    assert _problems(doc) == []
    definition = load_definition(doc, "file", "f.yaml")
    owners = [{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": "code-agent", "uid": "u-1"}]
    sandbox_pod = _pod({"agents.x-k8s.io/sandbox-name-hash": "1a2b3c4d"})
    proxy_pod = _pod({})
    for pod in (sandbox_pod, proxy_pod):
        pod["metadata"]["ownerReferences"] = owners
    assert match_pod(definition, sandbox_pod).component == "agent"
    assert match_pod(definition, proxy_pod).component == "companion"
