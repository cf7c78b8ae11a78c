"""Validating definition documents: every rule rejects a broken definition.

Each rule test starts from one small valid document, breaks exactly one thing,
and checks the Problem it produces: the field path, a fragment of the reason,
and that the file and definition name are filled in.  Then: the three document
kinds, defaults applied on load, several problems at once, malformed YAML,
the built-in definitions, the CRD manifest, and `workloadmap catalog validate`.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from workloadmap.catalog import definitions
from workloadmap.catalog.validating import (
    DefinitionError,
    crd_document,
    load_definition,
    validate_document,
    validate_file,
)
from workloadmap.cli.main import cli

FILE = "defs/demo.yaml"
NAME = "demo"
SD = "spec.structureDefinition"
ROOT = f"{SD}.rootComponent"
CHILD0 = f"{SD}.childComponents[0]"
GANG = "spec.optimizationInstructions.gangScheduling"

BUILTIN_DIR = Path(str(resources.files("workloadmap.catalog").joinpath("builtin")))
BUILTIN_FILES = sorted(BUILTIN_DIR.glob("*.yaml"))


# -- builders -------------------------------------------------------------------

def running_status():
    return {"statusMappings": {"running": [{"byExpression": {"expression": ".status.ok", "expectedResult": "true"}}]}}


def component(name, owner=None, **fields):
    c = {"name": name}
    if owner is not None:
        c["ownerRef"] = owner
    c.update(fields)
    return c


def document(children=None, root=None, gang=None, api_version="workloadmap.io/v1alpha1", kind="WorkloadMap"):
    """A valid definition document: root `demo` (example.com/v1 Demo) and one `worker` child."""
    if root is None:
        root = component("demo", kind={"group": "example.com", "version": "v1", "kind": "Demo"},
                         statusDefinition=running_status())
    if children is None:
        children = [component("worker", "demo",
                              specDefinition={"podTemplateSpecPath": ".spec.template"},
                              scaleDefinition={"replicasPath": ".spec.replicas"})]
    spec = {"structureDefinition": {"rootComponent": root, "childComponents": children}}
    if gang is not None:
        spec["optimizationInstructions"] = {"gangScheduling": gang}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": NAME}, "spec": spec}


def problems_of(doc):
    return validate_document(doc, FILE)


def rejected(doc, path, fragment):
    """The problem at `path` (asserting it exists and names file, definition and reason)."""
    problems = problems_of(doc)
    at_path = [p for p in problems if p.path == path]
    assert at_path, f"no problem at {path!r}; got {problems}"
    problem = at_path[0]
    assert fragment in problem.reason, problem
    assert problem.file == FILE
    assert problem.definition == NAME
    return problem


def test_base_document_is_valid():
    assert problems_of(document()) == []


# -- document kind and schema ---------------------------------------------------

@pytest.mark.parametrize("api_version, kind", [
    ("workloadmap.io/v1alpha1", "Workload"),              # unknown kind
    ("workloadmap.io/v1beta1", "WorkloadMap"),             # unknown apiVersion
    ("run.ai/v1alpha1", "ResourceInterface"),              # known kind under another group
    ("apps/v1", "Deployment"),
])
def test_unknown_document_kind_is_rejected(api_version, kind):
    problem = rejected(document(api_version=api_version, kind=kind), "kind", "is not a definition kind")
    assert repr(kind) in problem.reason and repr(api_version) in problem.reason
    assert "WorkloadMap (workloadmap.io/v1alpha1)" in problem.reason


def test_missing_root_component_is_a_schema_error():
    doc = document()
    del doc["spec"]["structureDefinition"]["rootComponent"]
    rejected(doc, SD, "'rootComponent' is a required property")


def test_unknown_field_is_rejected():
    doc = document()
    child = doc["spec"]["structureDefinition"]["childComponents"][0]
    child["ownerName"] = child.pop("ownerRef")
    problem = rejected(doc, CHILD0, "unknown field")
    assert "ownerName" in problem.reason


def test_wrong_type_is_rejected():
    doc = document()
    doc["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"]["replicasPath"] = 3
    rejected(doc, f"{CHILD0}.scaleDefinition.replicasPath", "is not of type 'string'")


# -- jq -------------------------------------------------------------------------

def test_invalid_jq_syntax_is_rejected():
    doc = document()
    doc["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"]["replicasPath"] = ".spec.replicas["
    problem = rejected(doc, f"{CHILD0}.scaleDefinition.replicasPath", "invalid jq expression")
    assert ".spec.replicas[" in problem.reason


@pytest.mark.parametrize("expression, fragment", [
    (".a |= 1", "'|='"),
    ("..", "'..'"),
    ("range(3)", "'range'"),
])
def test_unsafe_jq_is_rejected(expression, fragment):
    doc = document()
    doc["spec"]["structureDefinition"]["childComponents"][0]["specDefinition"]["podTemplateSpecPath"] = expression
    problem = rejected(doc, f"{CHILD0}.specDefinition.podTemplateSpecPath", "invalid jq expression")
    assert fragment in problem.reason
    assert "not allowed" in problem.reason


def test_jq_is_checked_in_every_place_that_holds_jq():
    doc = document(gang={"podGroups": [{"name": "g", "members": [
        {"componentName": "worker", "groupByKeyPaths": [".ok", "range(2)"], "filters": [".."]}]}]})
    root = doc["spec"]["structureDefinition"]["rootComponent"]
    root["statusDefinition"]["phaseDefinition"] = {"path": ".status.phase |= 1"}
    root["statusDefinition"]["statusMappings"]["running"][0]["byExpression"]["expression"] = "env"
    root["suspendDefinition"] = {"suspendActions": [{"path": ".spec.suspend = true", "value": "true"}],
                                 "resumeActions": [{"path": ".spec.suspend", "value": "false"}]}
    paths = {p.path for p in problems_of(doc) if "invalid jq expression" in p.reason}
    assert paths == {
        f"{ROOT}.statusDefinition.phaseDefinition.path",
        f"{ROOT}.statusDefinition.statusMappings.running[0].byExpression.expression",
        f"{ROOT}.suspendDefinition.suspendActions[0].path",
        f"{GANG}.podGroups[0].members[0].groupByKeyPaths[1]",
        f"{GANG}.podGroups[0].members[0].filters[0]",
    }


# -- root component -------------------------------------------------------------

@pytest.mark.parametrize("kind", [
    {"version": "v1", "kind": "Demo"},                       # no group (core needs group: "")
    {"group": "example.com", "version": "", "kind": "Demo"},
    {"group": "example.com", "version": "v1", "kind": ""},
])
def test_root_without_full_gvk_is_rejected(kind):
    doc = document()
    doc["spec"]["structureDefinition"]["rootComponent"]["kind"] = kind
    problems = problems_of(doc)
    # an empty version/kind also fails the schema (minLength); either way the root kind is named
    assert any(p.path.startswith(f"{ROOT}.kind") for p in problems), problems
    if "group" not in kind:
        rejected(doc, f"{ROOT}.kind", "root component must have full kind")


def test_root_without_kind_is_rejected():
    doc = document()
    del doc["spec"]["structureDefinition"]["rootComponent"]["kind"]
    rejected(doc, f"{ROOT}.kind", "full kind")


def test_core_group_root_is_accepted():
    doc = document()
    doc["spec"]["structureDefinition"]["rootComponent"]["kind"] = {"group": "", "version": "v1", "kind": "Pod"}
    assert problems_of(doc) == []


def test_root_without_status_definition_is_rejected():
    doc = document()
    del doc["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]
    rejected(doc, f"{ROOT}.statusDefinition", "must have a status definition")


def test_root_with_owner_ref_is_rejected():
    doc = document()
    doc["spec"]["structureDefinition"]["rootComponent"]["ownerRef"] = "worker"
    rejected(doc, f"{ROOT}.ownerRef", "root component cannot have an owner ref")


# -- component tree -------------------------------------------------------------

def test_duplicate_component_names_are_rejected():
    doc = document(children=[component("worker", "demo"), component("worker", "demo")])
    problem = rejected(doc, f"{SD}.childComponents[1].name", "is not unique")
    assert "'worker'" in problem.reason and CHILD0 in problem.reason


def test_child_without_owner_ref_is_rejected():
    doc = document(children=[component("worker")])
    rejected(doc, f"{CHILD0}.ownerRef", "child component 'worker' has no owner ref")


def test_owner_ref_to_missing_component_is_rejected():
    doc = document(children=[component("worker", "launcher")])
    rejected(doc, f"{CHILD0}.ownerRef", "non-existing component 'launcher'")


def test_ownership_cycle_is_rejected():
    doc = document(children=[component("a", "b"), component("b", "a"), component("c", "demo")])
    problems = [p for p in problems_of(doc) if "ownership cycle" in p.reason]
    assert {p.path for p in problems} == {f"{CHILD0}.ownerRef", f"{SD}.childComponents[1].ownerRef"}
    assert all(p.file == FILE and p.definition == NAME for p in problems)


def test_self_ownership_is_a_cycle():
    doc = document(children=[component("a", "a")])
    rejected(doc, f"{CHILD0}.ownerRef", "ownership cycle")


# -- spec definition --------------------------------------------------------------

def test_more_than_one_spec_variant_is_rejected():
    doc = document(children=[component("worker", "demo", specDefinition={
        "podTemplateSpecPath": ".spec.template", "podSpecPath": ".spec.template.spec"})])
    problem = rejected(doc, f"{CHILD0}.specDefinition", "multiple pod spec definitions")
    assert "podTemplateSpecPath, podSpecPath" in problem.reason


def test_fragmented_and_template_variants_together_are_rejected():
    doc = document(children=[component("worker", "demo", specDefinition={
        "podTemplateSpecPath": ".spec.template",
        "fragmentedPodSpecDefinition": {"containersPath": ".spec.containers"}})])
    rejected(doc, f"{CHILD0}.specDefinition", "keep exactly one")


def test_metadata_path_without_pod_spec_path_is_rejected():
    doc = document(children=[component("worker", "demo", specDefinition={
        "podTemplateSpecPath": ".spec.template", "metadataPath": ".spec.template.metadata"})])
    rejected(doc, f"{CHILD0}.specDefinition.metadataPath", "metadataPath may only be used with podSpecPath")


def test_metadata_path_with_pod_spec_path_is_accepted():
    doc = document(children=[component("worker", "demo", specDefinition={
        "podSpecPath": ".spec.template.spec", "metadataPath": ".spec.template.metadata"})])
    assert problems_of(doc) == []


def test_instance_id_path_without_instance_selector_is_rejected():
    doc = document(children=[component("worker", "demo", instanceIdPath=".spec.groups[].name")])
    rejected(doc, f"{CHILD0}.instanceIdPath", "has instance id path but no pod component instance selector")


def test_instance_selector_without_instance_id_path_is_rejected():
    doc = document(children=[component("worker", "demo", podSelector={
        "componentInstanceSelector": {"idPath": '.metadata.labels["group"]'}})])
    rejected(doc, f"{CHILD0}.podSelector.componentInstanceSelector",
             "has pod component instance selector but no instance id path")


# -- gang scheduling ----------------------------------------------------------------

def test_pod_group_member_naming_missing_component_is_rejected():
    doc = document(gang={"podGroups": [{"name": "g", "members": [
        {"componentName": "worker"}, {"componentName": "launcher"}]}]})
    rejected(doc, f"{GANG}.podGroups[0].members[1].componentName",
             "pod-group member component 'launcher' is not defined")


def test_sub_group_naming_missing_component_is_rejected():
    doc = document(gang={"podGroup": {"name": "g", "subGroups": [{"componentName": "launcher"}]}})
    rejected(doc, f"{GANG}.podGroup.subGroups[0].componentName", "'launcher' is not defined")


def test_gang_members_naming_root_or_child_are_accepted():
    doc = document(gang={"podGroup": {"name": "g", "subGroups": [{"componentName": "demo"},
                                                                 {"componentName": "worker"}]}})
    assert problems_of(doc) == []


# -- status definition --------------------------------------------------------------

def status_doc(status):
    root = component("demo", kind={"group": "example.com", "version": "v1", "kind": "Demo"},
                     statusDefinition=status)
    return document(root=root)


STATUS = f"{ROOT}.statusDefinition"


def test_by_phase_without_phase_definition_is_rejected():
    doc = status_doc({"statusMappings": {"running": [{"byPhase": "Running"}]}})
    rejected(doc, f"{STATUS}.statusMappings.running[0].byPhase", "byPhase needs a phaseDefinition")


def test_by_conditions_without_conditions_definition_is_rejected():
    doc = status_doc({"statusMappings": {"failed": [{"byConditions": [{"type": "Failed", "status": "True"}]}]}})
    rejected(doc, f"{STATUS}.statusMappings.failed[0].byConditions", "byConditions needs a conditionsDefinition")


def test_expected_condition_without_status_or_reason_is_rejected():
    doc = status_doc({"conditionsDefinition": {"path": ".status.conditions"},
                      "statusMappings": {"running": [{"byConditions": [
                          {"type": "Ready", "status": "True"}, {"type": "Available"}]}]}})
    rejected(doc, f"{STATUS}.statusMappings.running[0].byConditions[1]",
             "an expected condition needs status or reason")


def test_expected_condition_with_reason_only_is_accepted():
    doc = status_doc({"conditionsDefinition": {"path": ".status.conditions"},
                      "statusMappings": {"running": [{"byConditions": [{"type": "Ready", "reason": "Up"}]}]}})
    assert problems_of(doc) == []


def test_empty_matcher_is_rejected():
    doc = status_doc({"statusMappings": {"running": [{"byPhase": ""}], "degraded": [{}]}})
    rejected(doc, f"{STATUS}.statusMappings.degraded[0]", "a status matcher needs byPhase, byConditions or byExpression")
    rejected(doc, f"{STATUS}.statusMappings.running[0]", "needs byPhase, byConditions or byExpression")


@pytest.mark.parametrize("value", ["yes", "True", "{suspend: true}", ""])
def test_suspend_action_value_that_is_not_json_is_rejected(value):
    doc = document()
    doc["spec"]["structureDefinition"]["rootComponent"]["suspendDefinition"] = {
        "suspendActions": [{"path": ".spec.suspend", "value": "true"}],
        "resumeActions": [{"path": ".spec.suspend", "value": value}]}
    problem = rejected(doc, f"{ROOT}.suspendDefinition.resumeActions[0].value", "is not JSON text")
    assert repr(value) in problem.reason


def test_suspend_action_values_are_json_text():
    doc = document()
    doc["spec"]["structureDefinition"]["rootComponent"]["suspendDefinition"] = {
        "suspendActions": [{"path": ".spec.suspend", "value": "true"},
                           {"path": ".spec.state", "value": '"Suspended"'},
                           {"path": ".spec.replicas", "value": "0"}],
        "resumeActions": [{"path": ".spec.suspend", "value": "false"}]}
    d = load_definition(doc, "file", FILE)
    assert [a.value for a in d.root.suspend.suspend] == [True, "Suspended", 0]
    assert [a.value for a in d.root.suspend.resume] == [False]


# -- document kinds, defaults, all problems at once --------------------------------

@pytest.mark.parametrize("api_version, kind", [
    ("optimization.nvidia.com/v1alpha1", "ResourceInterface"),
    ("run.ai/v1alpha1", "Karta"),
    ("workloadmap.io/v1alpha1", "WorkloadMap"),
])
def test_all_three_document_kinds_accept_the_same_spec(api_version, kind):
    doc = document(api_version=api_version, kind=kind,
                   gang={"podGroups": [{"name": "g", "members": [{"componentName": "worker"}]}]})
    original = copy.deepcopy(doc)
    assert problems_of(doc) == []
    d = load_definition(doc, "file", FILE)
    assert d.name == NAME
    assert d.gvk == definitions.GVK("example.com", "v1", "Demo")
    assert [c.name for c in d.components] == ["demo", "worker"]
    assert d.component("worker").parent is d.root
    assert [g.name for g in d.pod_groups] == ["g"]
    assert doc == original  # accepted unchanged


def test_invalid_document_raises_definition_error_with_problems():
    doc = document(children=[component("worker")])
    with pytest.raises(DefinitionError) as info:
        load_definition(doc, "file", FILE)
    assert [p.path for p in info.value.problems] == [f"{CHILD0}.ownerRef"]
    assert f"{FILE}: definition 'demo': {CHILD0}.ownerRef: child component 'worker' has no owner ref" in str(info.value)


def test_condition_field_names_default_on_load():
    doc = status_doc({"conditionsDefinition": {"path": ".status.conditions"},
                      "statusMappings": {"running": [{"byConditions": [{"type": "Ready", "status": "True"}]}]}})
    sd = load_definition(doc, "file", FILE).root.status
    assert (sd.type_field, sd.status_field, sd.message_field, sd.reason_field) == ("type", "status", "message", "reason")


def test_condition_field_names_given_are_kept():
    doc = status_doc({"conditionsDefinition": {"path": ".status.conds", "typeFieldName": "kind",
                                               "statusFieldName": "state", "messageFieldName": "msg",
                                               "reasonFieldName": "why"},
                      "statusMappings": {"running": [{"byConditions": [{"type": "Ready", "status": "True"}]}]}})
    sd = load_definition(doc, "file", FILE).root.status
    assert (sd.type_field, sd.status_field, sd.message_field, sd.reason_field) == ("kind", "state", "msg", "why")


def test_all_problems_of_a_document_are_reported():
    root = component("demo", kind={"group": "example.com", "version": "v1", "kind": "Demo"}, ownerRef="x")
    doc = document(root=root, children=[
        component("worker", "demo", instanceIdPath=".spec.groups[].name",
                  specDefinition={"podTemplateSpecPath": ".spec.template |= 1"}),
        component("worker", "ghost"),
    ], gang={"podGroups": [{"name": "g", "members": [{"componentName": "launcher"}]}]})
    problems = problems_of(doc)
    assert {p.path for p in problems} == {
        f"{ROOT}.statusDefinition",
        f"{ROOT}.ownerRef",
        f"{CHILD0}.specDefinition.podTemplateSpecPath",
        f"{CHILD0}.instanceIdPath",
        f"{SD}.childComponents[1].name",
        f"{SD}.childComponents[1].ownerRef",
        f"{GANG}.podGroups[0].members[0].componentName",
    }
    assert all(p.file == FILE and p.definition == NAME for p in problems)


def test_all_schema_problems_are_reported():
    doc = document()
    child = doc["spec"]["structureDefinition"]["childComponents"][0]
    child["ownerName"] = "demo"
    child["scaleDefinition"]["replicasPath"] = 3
    child["specDefinition"]["podTemplateSpecPath"] = ["not", "a", "string"]
    paths = {p.path for p in problems_of(doc)}
    assert paths == {CHILD0, f"{CHILD0}.scaleDefinition.replicasPath", f"{CHILD0}.specDefinition.podTemplateSpecPath"}


def test_a_file_with_several_broken_definitions_reports_every_one(tmp_path):
    first = document(children=[component("worker")])
    second = document(children=[component("worker", "demo"), component("worker", "demo")])
    second["metadata"]["name"] = "other"
    good = document()
    good["metadata"]["name"] = "fine"
    path = tmp_path / "defs.yaml"
    path.write_text(yaml.safe_dump_all([first, good, second]))
    problems = validate_file(str(path))
    assert [(p.definition, p.path) for p in problems] == [
        (NAME, f"{CHILD0}.ownerRef"),
        ("other", f"{SD}.childComponents[1].name"),
    ]
    assert all(p.file == str(path) for p in problems)


def test_malformed_yaml_reports_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: workloadmap.io/v1alpha1\nkind: WorkloadMap\nmetadata:\n  name: x\n"
                    "spec:\n  a: [1, 2\n  b: c\n")
    problems = validate_file(str(path))
    assert len(problems) == 1
    problem = problems[0]
    assert problem.file == str(path)
    assert problem.reason.startswith("malformed YAML: line 7")
    assert "line 7" in str(problem)


def test_empty_file_and_missing_file_are_problems(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert [p.reason for p in validate_file(str(empty))] == ["no definition documents"]
    missing = validate_file(str(tmp_path / "absent.yaml"))
    assert len(missing) == 1 and missing[0].reason.startswith("cannot read")


def test_non_mapping_document_is_a_problem():
    problems = validate_document(["a", "list"], FILE)
    assert len(problems) == 1 and "must be a mapping" in problems[0].reason and problems[0].file == FILE


# -- built-ins and the CRD --------------------------------------------------------

def test_there_are_builtin_definitions():
    assert len(BUILTIN_FILES) >= 10


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=lambda p: p.name)
def test_every_builtin_definition_file_validates(path):
    assert validate_file(str(path)) == []


def test_builtin_catalog_loads_every_file(catalog):
    names = {d.name for d in catalog}
    assert len(names) == len(BUILTIN_FILES)
    assert all(d.origin == "built-in" for d in catalog)


def test_crd_manifest_is_a_v1_crd_for_workloadmaps():
    crd = crd_document()
    path = Path(str(resources.files("workloadmap.catalog").joinpath("crd/workloadmap.io_workloadmaps.yaml")))
    assert yaml.safe_load(path.read_text()) == crd
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    spec = crd["spec"]
    assert spec["group"] == "workloadmap.io"
    assert spec["names"]["kind"] == "WorkloadMap"
    assert spec["names"]["plural"] == "workloadmaps"
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    assert spec["scope"] in ("Cluster", "Namespaced")
    storage = [v for v in spec["versions"] if v.get("storage")]
    assert len(storage) == 1
    version = storage[0]
    assert version["served"] is True
    assert version["name"] == "v1alpha1"
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object"
    assert "spec" in schema["properties"]
    assert schema["properties"]["spec"]["properties"]["structureDefinition"]["required"] == ["rootComponent"]
    # the YAML anchors expand to plain JSON (what the API server receives)
    json.dumps(crd)


def test_builtin_definitions_use_only_fields_of_the_crd_schema(catalog):
    # validation treats the CRD schema's objects as closed: a built-in using a field the
    # schema lacks would fail to validate, so each built-in passing proves coverage.
    for d in catalog:
        assert validate_document(d.document, d.source) == []
    # and the closed check really is active
    doc = copy.deepcopy(next(iter(catalog)).document)
    doc["spec"]["structureDefinition"]["rootComponent"]["notInSchema"] = 1
    assert any("unknown field" in p.reason for p in validate_document(doc, "x"))


# -- CLI --------------------------------------------------------------------------

def test_cli_validate_broken_file_exits_1_and_names_the_problem(tmp_path):
    doc = document(children=[component("worker", "launcher")])
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli, ["catalog", "validate", str(path), "-o", "json"])
    assert result.exit_code == 1, result.output
    items = json.loads(result.stdout)["items"]
    assert items == [{"file": str(path), "definition": NAME, "path": f"{CHILD0}.ownerRef",
                      "reason": "child component 'worker' has owner ref to non-existing component 'launcher'"}]


def test_cli_validate_broken_file_table_output(tmp_path, monkeypatch):
    # the human format may lay problems out as a table (folding long cells) or as lines:
    # check each part, short enough to stay whole either way
    monkeypatch.chdir(tmp_path)
    doc = document(children=[component("worker", "launcher")])
    Path("b.yaml").write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli, ["catalog", "validate", "b.yaml"])
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    assert "b.yaml" in out
    assert NAME in out
    assert "ownerRef" in out and "spec.structureDefinition" in out
    assert "non-existing component 'launcher'" in out


def test_cli_validate_good_file_exits_0(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(document()))
    result = CliRunner().invoke(cli, ["catalog", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: ok" in result.output
    result = CliRunner().invoke(cli, ["catalog", "validate", str(path), "-o", "json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"items": [], "count": 0}


def test_cli_validate_builtin_files_exit_0():
    result = CliRunner().invoke(cli, ["catalog", "validate", *map(str, BUILTIN_FILES), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["count"] == 0
