"""Record formats: every resolved example matches the published JSON Schemas."""

from __future__ import annotations

import base64

import jsonschema
import pytest
from referencing import Registry, Resource

from workloadmap.catalog import records

from tests.conftest import example_objects

NAMES = ["resolved-workload", "workload-record", "raw-event", "transition", "dead-letter"]
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
