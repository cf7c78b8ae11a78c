"""Cross-resource references: a definition names another object by jq paths on the resolved
object and reads it as a jq variable (the TrainJob's $runtime), validated and bounded like every
expression; resolution through a lookup, and what a missing object leaves."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import example_objects
from workloadmap.catalog import DefinitionError, ObjectIndex, RelatedKey, load_definition, related_keys
from workloadmap.catalog.definitions import GVK
from workloadmap.catalog.registry import bundled_related

RUNTIMES = bundled_related()


def _doc(reference: dict, replicas: str = "$ref.spec.count", key_path: str = '.metadata.labels.app') -> dict:
    return {"apiVersion": "workloadmap.io/v1alpha1", "kind": "WorkloadMap", "metadata": {"name": "with-ref"}, "spec": {
        "structureDefinition": {
            "references": [reference],
            "rootComponent": {"name": "app", "kind": {"group": "example.com", "version": "v1", "kind": "App"},
                              "statusDefinition": {"phaseDefinition": {"path": ".status.phase"},
                                                   "statusMappings": {"running": [{"byPhase": "Running"}]}}},
            "childComponents": [{
                "name": "worker", "ownerRef": "app",
                "specDefinition": {"podTemplateSpecPath": "$ref.spec.template"},
                "scaleDefinition": {"replicasPath": replicas},
                "podSelector": {"componentTypeSelector": {"keyPath": key_path}}}]}}}


REF = {"name": "ref", "kind": {"group": "example.com", "version": "v1", "kind": "Blueprint"},
       "nameSelector": ".spec.blueprint"}


def _problems(doc) -> list[str]:
    with pytest.raises(DefinitionError) as err:
        load_definition(doc, "file", "test.yaml")
    return [f"{p.path}: {p.reason}" for p in err.value.problems]


def test_a_reference_is_bound_in_the_expressions_on_the_object_and_only_there():
    definition = load_definition(_doc(REF), "file", "test.yaml")
    worker = definition.component("worker")
    assert worker.scale.replicas.bound and worker.spec.pod_template.bound
    assert worker.scale.replicas.source == "$ref.spec.count"       # messages show what the author wrote
    # a pod selector runs on a pod: the variable is not defined there
    (problem,) = _problems(_doc(REF, key_path="$ref.metadata.name"))
    assert problem.startswith("spec.structureDefinition.childComponents[0].podSelector.componentTypeSelector.keyPath: "
                              "invalid jq expression '$ref.metadata.name': $ref is not defined")
    # a variable no reference declares
    (problem,) = _problems(_doc(REF, replicas="$other.spec.count"))
    assert "$other is not defined" in problem


@pytest.mark.parametrize("reference, reason", [
    ({**REF, "kinds": [REF["kind"]]}, "reference 'ref' names exactly one of kind or kinds"),
    ({"name": "ref", "nameSelector": ".x", "kinds": [REF["kind"], {**REF["kind"], "kind": "Other"}]},
     "reference 'ref' has several kinds: a kindSelector picks one"),
    ({**REF, "nameSelector": ".spec["}, "invalid jq expression '.spec['"),
    ({**REF, "name": "not-a-jq-name"}, "does not match"),
])
def test_bad_references_are_refused_with_the_field(reference, reason):
    assert any(reason in p for p in _problems(_doc(reference)))


def test_reference_selectors_are_checked_and_evaluated_as_every_expression():
    """A selector may not loop (refused at load, as any expression); a value of the wrong type is a
    resolution error naming the field; a long computation is fine within the bounds."""
    from workloadmap.catalog import ResolveError, Resolver

    assert any("repeat" in p for p in _problems(_doc({**REF, "nameSelector": "[repeat(1)] | length"})))
    obj = {"apiVersion": "example.com/v1", "kind": "App", "metadata": {"name": "a", "namespace": "n"},
           "spec": {"blueprint": 7, "items": list(range(3000))}}
    with pytest.raises(ResolveError, match=r"references\[0\]\.nameSelector: a referenced name must be a string"):
        Resolver().resolve(obj, load_definition(_doc(REF), "file", "t"))
    joined = load_definition(_doc({**REF, "nameSelector": "[.spec.items[] | tostring] | add"}), "file", "t")
    assert Resolver().resolve(obj, joined).references[0]["objectName"].startswith("012")


@pytest.mark.parametrize("runtime_ref, namespace, key", [
    # the default kind is ClusterTrainingRuntime (trainjob_types.go): cluster-scoped, no namespace
    ({"name": "torch-distributed"}, "ml", RelatedKey("runtime", GVK("trainer.kubeflow.org", "v1alpha1",
                                                                     "ClusterTrainingRuntime"), None, "torch-distributed")),
    # a TrainingRuntime is looked up in the TrainJob's namespace
    ({"name": "deepspeed-zero3", "kind": "TrainingRuntime"}, "nlp",
     RelatedKey("runtime", GVK("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime"), "nlp", "deepspeed-zero3")),
    # no name, or a kind the definition does not know: names nothing
    ({}, "ml", None),
    ({"name": "x", "kind": "ConfigMap"}, "ml", None),
])
def test_trainjob_runtime_ref_names_the_runtime(catalog, runtime_ref, namespace, key):
    job = copy.deepcopy(example_objects("trainjob")["llama-finetune"])
    job["metadata"]["namespace"] = namespace
    job["spec"]["runtimeRef"] = runtime_ref
    assert related_keys(catalog.get("trainjob"), job) == [key]


def test_trainjob_pods_follow_the_runtime_and_the_trainer_settings(catalog):
    index = ObjectIndex(RUNTIMES)
    job = copy.deepcopy(example_objects("trainjob")["llama-finetune"])
    resolved = catalog.resolve(job, index)
    assert {c.instance: c.pods for c in resolved.components if c.name == "replicatedjob"} == {
        "dataset-initializer": 0, "node": 4}
    # without trainer.numNodes the runtime's mlPolicy.numNodes (1); without resourcesPerNode the
    # runtime's node container (4 CPU, 16Gi, no GPU); the initializer not yet done runs its pod
    del job["spec"]["trainer"]
    job["status"]["jobsStatus"][0]["succeeded"] = 0
    resolved = catalog.resolve(job, index)
    nodes = {c.instance: c for c in resolved.components if c.name == "replicatedjob"}
    assert (nodes["node"].pods, nodes["node"].per_pod.cpu, nodes["node"].per_pod.gpu) == (1, 4, 0)
    assert nodes["dataset-initializer"].pods == 1
    # MPI with runLauncherAsNode: trainer.numNodes counts the launcher (plugins/mpi/mpi.go)
    mpi = copy.deepcopy(next(r for r in RUNTIMES if r["metadata"]["name"] == "torch-distributed"))
    mpi["metadata"]["name"] = "mpi-launcher-as-node"
    mpi["spec"]["mlPolicy"] = {"numNodes": 1, "mpi": {"runLauncherAsNode": True}}
    job = copy.deepcopy(example_objects("trainjob")["llama-finetune"])
    job["spec"]["runtimeRef"] = {"name": "mpi-launcher-as-node"}
    nodes = {c.instance: c for c in catalog.resolve(job, ObjectIndex([mpi])).components if c.name == "replicatedjob"}
    assert nodes["node"].pods == 3


@pytest.mark.parametrize("suspend, conditions, jobs, status", [
    (False, [], [], "Initializing"),
    (False, [], [{"name": "node", "active": 2}], "Running"),
    (True, [], [{"name": "node", "active": 2}], "Suspending"),
    (True, [{"type": "Suspended", "status": "True", "reason": "Suspended"}], [], "Suspended"),
    (False, [{"type": "Suspended", "status": "True", "reason": "Suspended"}], [], "Resuming"),
    (False, [{"type": "Suspended", "status": "False", "reason": "Resumed"}], [{"name": "node", "ready": 1}], "Running"),
    (False, [{"type": "Complete", "status": "True"}], [{"name": "node", "succeeded": 4}], "Completed"),
    (False, [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}], [], "Failed"),
])
def test_trainjob_states(catalog, suspend, conditions, jobs, status):
    """trainjob_controller.go (Suspended Suspended/Resumed, Failed DeadlineExceeded) and the JobSet's
    terminal conditions propagated as Complete / Failed; Running once a job has active pods."""
    job = copy.deepcopy(example_objects("trainjob")["llama-finetune"])
    job["spec"]["suspend"] = suspend
    job["status"] = {"conditions": conditions, "jobsStatus": jobs}
    resolved = catalog.resolve(job, ObjectIndex(RUNTIMES))
    assert resolved.status == status
    if status in ("Suspended", "Completed", "Failed", "Suspending"):
        assert resolved.pods == 0


def test_a_missing_reference_resolves_without_it_and_is_named(catalog):
    job = example_objects("trainjob")["mnist-quick"]
    record = catalog.resolve(job, ObjectIndex(RUNTIMES)).to_dict()
    assert record["references"] == [{"name": "runtime", "apiVersion": "trainer.kubeflow.org/v1alpha1",
                                     "kind": "ClusterTrainingRuntime", "namespace": None,
                                     "objectName": "torch-distributed-gpu", "found": False}]
    assert record["total"]["pods"] == 0 and record["status"] == "Initializing"
    # the same object, once its runtime exists, has its pods
    runtime = copy.deepcopy(next(r for r in RUNTIMES if r["metadata"]["name"] == "torch-distributed"))
    runtime["metadata"]["name"] = "torch-distributed-gpu"
    record = catalog.resolve(job, ObjectIndex([runtime])).to_dict()
    # the dataset initializer (not yet run) and trainer.numNodes 2 nodes
    assert record["references"][0]["found"] and record["total"]["pods"] == 1 + 2


def test_references_are_in_the_record_schema(catalog):
    from workloadmap.catalog import records
    import jsonschema

    validator = jsonschema.Draft7Validator(records.schema("resolved-workload"))
    for job in example_objects("trainjob").values():
        validator.validate(catalog.resolve(job, ObjectIndex(RUNTIMES)).to_dict())


def test_cached_components_follow_the_referenced_object_s_version(catalog):
    """A status update reuses the component tree; a new version of the runtime (another
    resourceVersion) or its absence is another key, so the pods follow it."""
    from workloadmap.catalog import Catalog, Resolver

    cached = Catalog(catalog, resolver=Resolver(cache_size=100))
    runtime = copy.deepcopy(next(r for r in RUNTIMES if r["metadata"]["name"] == "torch-distributed"))
    job = copy.deepcopy(example_objects("trainjob")["llama-finetune"])
    del job["spec"]["trainer"]["numNodes"]                      # the count is the runtime's mlPolicy.numNodes
    assert cached.resolve(job, ObjectIndex([runtime])).pods == 1
    update = {**job, "metadata": {**job["metadata"], "resourceVersion": "5120774"}}
    assert cached.resolve(update, ObjectIndex([runtime])).pods == 1
    runtime["spec"]["mlPolicy"]["numNodes"] = 3
    runtime["metadata"]["resourceVersion"] = "4410022"
    assert cached.resolve(update, ObjectIndex([runtime])).pods == 3
    assert cached.resolve(update, ObjectIndex()).pods == 0
    # a referenced object without a resourceVersion cannot be told from its next version: not cached
    del runtime["metadata"]["resourceVersion"]
    assert cached.resolve(update, ObjectIndex([runtime])).pods == 3
    runtime["spec"]["mlPolicy"]["numNodes"] = 2
    assert cached.resolve(update, ObjectIndex([runtime])).pods == 2
