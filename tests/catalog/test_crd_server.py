"""The CRDs validate on the server: a real kube-apiserver checks definitions as our validator does.

Our WorkloadMap CRD (catalog/crd/workloadmap.io_workloadmaps.yaml) and the Karta CRD made from it
(catalog/crd/run.ai_kartas.yaml) carry the rules an API server can check itself: CEL
`x-kubernetes-validations` (the selector rules, the structure rules between fields), lists that
are maps (`x-kubernetes-list-type: map`) and required fields.  Each definition is sent with
`dryRun=All` and `fieldValidation=Strict` (kubectl's default: an unknown field is an error).
Every bad definition is refused by the server AND by `validate_document`, for the same reason.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.services.kube_api import KubeHTTPError
from workloadmap.catalog import Catalog, exporting
from workloadmap.catalog.validating import crd_document, validate_document

ROOT = Path(__file__).resolve().parents[2]
KARTA_CRD = ROOT / "catalog" / "crd" / "run.ai_kartas.yaml"
UPSTREAM = sorted((ROOT / "tests" / "fixtures" / "upstream").glob("*.yaml"))
WORKLOADMAPS = "/apis/workloadmap.io/v1alpha1/workloadmaps"
KARTAS = "/apis/run.ai/v1alpha1/kartas"
DRY = "?dryRun=All&fieldValidation=Strict"


@pytest.fixture(scope="module")
def kube(kube_cluster):
    kube_cluster.apply_crds([KARTA_CRD])
    return kube_cluster


def _send(kube, doc: dict) -> dict:
    path = KARTAS if doc["kind"] == "Karta" else WORKLOADMAPS
    return kube.request("POST", path + DRY, doc)


def _refusal(kube, doc: dict) -> str:
    with pytest.raises(KubeHTTPError) as info:
        _send(kube, doc)
    assert info.value.code == 422, info.value
    return info.value.status["message"]


def test_the_karta_crd_file_is_generated_from_ours():
    assert KARTA_CRD.read_text() == exporting.karta_crd_text(crd_document()), (
        "regenerate: python -m workloadmap.catalog.exporting > catalog/crd/run.ai_kartas.yaml")


def test_every_built_in_definition_is_accepted_and_its_karta_export_too(kube):
    for definition in Catalog.builtin():
        _send(kube, definition.document)
        doc, _ = exporting.karta_document(definition)
        _send(kube, doc)


@pytest.mark.parametrize("path", UPSTREAM, ids=lambda p: p.stem)
def test_every_upstream_shaped_definition_is_accepted_as_a_karta(kube, path):
    _send(kube, yaml.safe_load(path.read_text()))


def test_a_null_condition_field_name_is_pruned_and_defaulted_by_the_server(kube):
    doc = yaml.safe_load((ROOT / "tests" / "fixtures" / "upstream" / "ray-io-rayjob-v1.yaml").read_text())
    stored = _send(kube, doc)
    conditions = stored["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]["conditionsDefinition"]
    assert conditions["reasonFieldName"] == "reason"


def _base() -> dict:
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "bad"}, "spec": {
        "structureDefinition": {
            "rootComponent": {"name": "demo", "kind": {"group": "example.com", "version": "v1", "kind": "Demo"},
                              "statusDefinition": {"statusMappings": {}}},
            "childComponents": [{"name": "worker", "ownerRef": "demo",
                                 "specDefinition": {"podTemplateSpecPath": ".spec.template"},
                                 "podSelector": {"componentTypeSelector": {"keyPath": ".metadata.name"}}}]}}}


def _child(doc):
    return doc["spec"]["structureDefinition"]["childComponents"][0]


def _set(path_and_value):
    def change(doc):
        *parents, last = path_and_value[0]
        node = doc
        for key in parents:
            node = node[key]
        node[last] = path_and_value[1]
    return change


SD = ("spec", "structureDefinition")
CHILD = (*SD, "childComponents", 0)
# (case, change to the good document, the server's message, our validator's reason)
BAD = [
    ("a type selector without keyPath or matchLabels", _set(((*CHILD, "podSelector", "componentTypeSelector"), {})),
     "at least one of keyPath or matchLabels must be set", "at least one of keyPath or matchLabels must be set"),
    ("a value without keyPath", _set(((*CHILD, "podSelector", "componentTypeSelector"),
                                      {"value": "x", "matchLabels": {"app": "a"}})),
     "value requires keyPath", "value requires keyPath"),
    ("a matchLabels key that is no label key", _set(((*CHILD, "podSelector", "componentTypeSelector"),
                                                     {"matchLabels": {"not a key": "a"}})),
     "every matchLabels key must be a label key", "label key 'not a key'"),
    ("a matchLabels value that is no label value", _set(((*CHILD, "podSelector", "componentTypeSelector"),
                                                         {"matchLabels": {"app": "-bad-"}})),
     "every matchLabels value must be a label value", "label value '-bad-'"),
    ("empty matchLabels", _set(((*CHILD, "podSelector", "componentTypeSelector"), {"matchLabels": {}})),
     "should have at least 1 properties", "should be non-empty"),
    ("a kind listed twice in additionalChildKinds", _set(((*SD, "additionalChildKinds"), [
        {"group": "", "version": "v1", "kind": "Service"}, {"group": "serving.knative.dev", "version": "v1",
                                                            "kind": "Service"}])),
     "Duplicate value", "the list is a map keyed by kind"),
    ("two components of one name", lambda d: d["spec"]["structureDefinition"]["childComponents"].append(
        copy.deepcopy(_child(d))), "Duplicate value", "is not unique"),
    ("a child named as the root", _set(((*CHILD, "name"), "demo")),
     "component names must be unique", "is not unique"),
    ("a root with an owner ref", _set(((*SD, "rootComponent", "ownerRef"), "x")),
     "root component cannot have an owner ref", "root component cannot have an owner ref"),
    ("a root without a status definition", lambda d: d["spec"]["structureDefinition"]["rootComponent"].pop(
        "statusDefinition"), "root component must have a status definition",
     "root component must have a status definition"),
    ("a child without owner ref", lambda d: _child(d).pop("ownerRef"),
     "every child component must have an owner ref", "has no owner ref"),
    ("a child owned by no component", _set(((*CHILD, "ownerRef"), "ghost")),
     "owner ref must name an existing component", "owner ref to non-existing component 'ghost'"),
    ("two pod spec variants", _set(((*CHILD, "specDefinition", "podSpecPath"), ".spec.pod")),
     "multiple pod spec definitions", "multiple pod spec definitions"),
    ("metadataPath without podSpecPath", _set(((*CHILD, "specDefinition", "metadataPath"), ".spec.meta")),
     "metadataPath may only be used with podSpecPath", "metadataPath may only be used with podSpecPath"),
    ("an instance id path without an instance selector", _set(((*CHILD, "instanceIdPath"), ".spec.groups[].name")),
     "instanceIdPath and podSelector.componentInstanceSelector go together",
     "has instance id path but no pod component instance selector"),
    ("an expected condition without status or reason", _set(((*SD, "rootComponent", "statusDefinition"), {
        "conditionsDefinition": {"path": ".status.conditions"},
        "statusMappings": {"running": [{"byConditions": [{"type": "Ready"}]}]}})),
     "an expected condition needs status or reason", "an expected condition needs status or reason"),
    ("an empty status matcher", _set(((*SD, "rootComponent", "statusDefinition"),
                                      {"statusMappings": {"running": [{}]}})),
     "a status matcher needs byPhase, byConditions or byExpression",
     "a status matcher needs byPhase, byConditions or byExpression"),
    ("a sub-group of no component", _set((("spec", "optimizationInstructions"), {"gangScheduling": {
        "podGroup": {"name": "g", "subGroups": [{"componentName": "launcher"}]}}})),
     "every podGroup.subGroups componentName must name a root or child component", "'launcher' is not defined"),
    ("a topology without its levels", _set((("spec", "optimizationInstructions"), {"gangScheduling": {
        "podGroup": {"name": "g", "topology": {"topologyName": "rack"}}}})),
     "Required value", "'requiredTopologyLevel' is a required property"),
    ("a sub-group listed twice", _set((("spec", "optimizationInstructions"), {"gangScheduling": {
        "podGroup": {"name": "g", "subGroups": [{"componentName": "worker"}, {"componentName": "worker"}]}}})),
     "Duplicate value", "the list is a map keyed by componentName"),
    ("a deprecated pod group listed twice", _set((("spec", "optimizationInstructions"), {"gangScheduling": {
        "podGroups": [{"name": "g", "members": [{"componentName": "worker"}]},
                      {"name": "g", "members": [{"componentName": "worker"}]}]}})),
     "Duplicate value", "the list is a map keyed by name"),
    # references (our extension): one of kind / kinds, a kindSelector for several kinds, unique names
    ("a reference with kind and kinds", _set(((*SD, "references"), [{
        "name": "runtime", "nameSelector": ".spec.ref", "kind": {"version": "v1", "kind": "A"},
        "kinds": [{"version": "v1", "kind": "A"}]}])),
     "a reference names exactly one of kind or kinds", "names exactly one of kind or kinds"),
    ("a reference of several kinds without a kindSelector", _set(((*SD, "references"), [{
        "name": "runtime", "nameSelector": ".spec.ref",
        "kinds": [{"version": "v1", "kind": "A"}, {"version": "v1", "kind": "B"}]}])),
     "a reference with several kinds needs a kindSelector", "a kindSelector picks one"),
    ("two references of one name", _set(((*SD, "references"), [
        {"name": "runtime", "nameSelector": ".a", "kind": {"version": "v1", "kind": "A"}},
        {"name": "runtime", "nameSelector": ".b", "kind": {"version": "v1", "kind": "B"}}])),
     "Duplicate value", "the list is a map keyed by name"),
]


def test_the_good_document_is_accepted(kube):
    doc = _base()
    assert validate_document(doc) == []
    _send(kube, doc)
    doc["kind"], doc["apiVersion"] = "WorkloadMap", "workloadmap.io/v1alpha1"
    _send(kube, doc)


@pytest.mark.parametrize("case, change, server_says, we_say", BAD, ids=[b[0] for b in BAD])
def test_a_bad_definition_is_refused_by_the_server_and_by_us(kube, case, change, server_says, we_say):
    doc = _base()
    change(doc)
    for kind, api_version in (("Karta", "run.ai/v1alpha1"), ("WorkloadMap", "workloadmap.io/v1alpha1")):
        doc["kind"], doc["apiVersion"] = kind, api_version
        assert server_says in _refusal(kube, doc), kind
        assert any(we_say in p.reason for p in validate_document(doc)), [str(p) for p in validate_document(doc)]
