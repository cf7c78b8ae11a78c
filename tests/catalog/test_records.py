"""Record formats: every resolved example matches the published JSON Schemas."""

from __future__ import annotations

import base64

import jsonschema
import pytest
from referencing import Registry, Resource

from workloadmap.catalog import records

from tests.allocation_records import node, pod
from tests.conftest import example_objects

NAMES = ["resolved-workload", "workload-record", "raw-event", "transition", "dead-letter", "pod-record", "node-record"]
REGISTRY = Registry().with_resources(
    (records.schema(n)["$id"].rsplit("/", 1)[-1], Resource.from_contents(records.schema(n))) for n in NAMES
).with_resources((records.schema(n)["$id"], Resource.from_contents(records.schema(n))) for n in NAMES)


def validator(name):
    return jsonschema.Draft7Validator(records.schema(name), registry=REGISTRY,
                                      format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


@pytest.mark.parametrize("name", NAMES)
def test_schemas_are_valid(name):
    jsonschema.Draft7Validator.check_schema(records.schema(name))


def test_every_resolved_example_matches_the_schema(catalog):
    v = validator("resolved-workload")
    for kind in ("jobset", "pytorchjob", "mpijob", "leaderworkerset", "raycluster", "rayjob", "rayservice",
                 "inferenceservice", "knative-service", "nimservice", "milvus", "podcliqueset",
                 "dynamographdeployment", "deployment", "statefulset", "job", "cronjob", "pod"):
        for obj in example_objects(kind).values():
            v.validate(catalog.resolve(obj).to_dict())


def test_workload_record_and_raw_event(catalog):
    obj = example_objects("jobset")["llama-pretrain"]
    obj = {**obj, "metadata": {**obj["metadata"], "managedFields": [{"manager": "kubectl"}]}}
    event = records.raw_event("prod-east", "MODIFIED", obj)
    assert "managedFields" not in event["object"]["metadata"]
    validator("raw-event").validate(event)
    record = {**catalog.resolve(event["object"]).to_dict(), "cluster": "prod-east",
              "observedAt": event["observedAt"], "eventType": "MODIFIED", "deleted": False,
              "previousStatus": None, "previousStatusSince": None, "statusSince": event["observedAt"]}
    validator("workload-record").validate(record)
    with pytest.raises(jsonschema.ValidationError):
        validator("workload-record").validate({**record, "eventType": "UPDATED"})


def test_dead_letter_keeps_the_original_bytes():
    original = b'{"cluster": "a", not json'
    letter = records.DeadLetter("processor", records.MALFORMED_JSON, "Expecting value", original,
                                key=b"a/uid", topic=records.RAW_TOPIC, partition=1, offset=7).to_dict()
    validator("dead-letter").validate(letter)
    assert base64.b64decode(letter["valueBase64"]) == original


def test_raw_event_rejects_unknown_types():
    with pytest.raises(ValueError):
        records.raw_event("c", "UPDATED", {"kind": "Pod"})


def test_the_warehouse_tests_pod_and_node_records_match_the_schemas():
    """The warehouse's tests build records by hand (tests/allocation_records.py): they must be the records
    the processors publish, so both halves code against one format."""
    validator("pod-record").validate(pod("p1", "2026-11-01T00:00:00Z", "Bound", node="n1", gpu=8))
    validator("pod-record").validate(pod("p2", "2026-11-01T00:00:00Z", "Pending", workload=None))
    validator("node-record").validate(node("n1", "2026-11-01T00:00:00Z", unschedulable=True))
    validator("node-record").validate(node("n2", "2026-11-01T00:00:00Z", gpu=0, product=None, pool=None))


@pytest.mark.parametrize("name, record, wrong", [
    ("pod-record", pod("p1", "2026-11-01T00:00:00Z", "Bound", node="n1"), {"state": "Running"}),
    ("pod-record", pod("p1", "2026-11-01T00:00:00Z", "Bound", node="n1"), {"workload": {"kind": "Pod"}}),
    ("pod-record", pod("p1", "2026-11-01T00:00:00Z", "Bound", node="n1"), {"env": []}),
    ("node-record", node("n1", "2026-11-01T00:00:00Z"), {"allocatable": {"gpu": 8}}),
    ("node-record", node("n1", "2026-11-01T00:00:00Z"), {"labels": {"gpuProduct": "H100"}}),
])
def test_pod_and_node_schemas_refuse_what_the_interface_does_not_allow(name, record, wrong):
    """A state outside Pending/Bound/Terminated, a workload reference without name and uid, a field the
    interface does not have (a pod's env must never travel), amounts without CPU and memory, labels
    without every grouping key: each is refused (the interface of issue 25)."""
    with pytest.raises(jsonschema.ValidationError):
        validator(name).validate({**record, **wrong})
