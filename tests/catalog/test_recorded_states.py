"""Built-in definitions agree with the states real controllers write, class by class.

Each fixture in tests/fixtures/controller_states/ is one class of state from upstream's recordings
of real operators (test/e2e/recorded_data/), written as our own object from those facts and the
operator's source (the file's comment): a base object and its cases, each case the changes that
make the state and the status we resolve.  Where ours differs from upstream's derived state on
purpose (scale-ups that still serve: Running, not Initializing; a resume not acted on yet:
Resuming, as upstream's Sandbox definition), the built-in definition says why.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "controller_states"


def _deployment(obj, case):
    s = dict(case["status"])
    available = s.pop("available")
    obj["status"] = {**s, "conditions": [
        {"type": "Available", "status": available,
         "reason": "MinimumReplicasAvailable" if available == "True" else "MinimumReplicasUnavailable"},
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}


def _inferenceservice(obj, case):
    for c in obj["status"]["conditions"]:
        if c["type"] == "Ready":
            c["status"] = case["ready"]
            if case["ready"] == "True":
                c.pop("reason")


def _sandbox(obj, case):
    obj["spec"]["operatingMode"] = case["operatingMode"]
    if "conditions" in case:
        obj["status"]["conditions"] = case["conditions"]
        return
    reasons = {"Suspended": case["suspendedReason"], "Ready": case["readyReason"],
               "Finished": case.get("finishedReason", "PodFailed")}
    for c in obj["status"]["conditions"]:
        c["reason"] = reasons[c["type"]]


def _llminferenceservice(obj, case):
    for c in obj["status"]["conditions"]:
        if c["status"] == "False":
            c["reason"] = case["reason"]
    obj["status"]["conditions"].append({"type": case["condition"], "status": "False", "reason": case["reason"]})


# how a case's keys change the base object, per class
CHANGES = {
    "rayjob-job-ended-while-deployment-running": lambda obj, case: obj["status"].update(jobStatus=case["jobStatus"]),
    "raycluster-created-suspended": lambda obj, case: obj.update(status=case["status"]) if "status" in case else None,
    "knative-route-not-ready": lambda obj, case: obj["metadata"].update(generation=case["generation"]),
    "inferenceservice-revision-failed": _inferenceservice,
    "deployment-scaling-up": _deployment,
    "leaderworkerset-scaling-up": lambda obj, case: obj["status"].update(readyReplicas=case["readyReplicas"]),
    "podcliqueset-scaling-up": lambda obj, case: obj.update(status=case["status"]),
    "statefulset-scaling-down": lambda obj, case: obj["status"].update(readyReplicas=case["readyReplicas"]),
    "resume-not-acted-on": lambda obj, case: None,
    "sandbox-pod-ended-by-suspend": _sandbox,
    "llminferenceservice-waits": _llminferenceservice,
    "nimservice-pvc-created": lambda obj, case: obj.update(status=case["status"]),
    "raycluster-suspended-state-first": lambda obj, case: obj.update(status=case["status"]),
    "llminferenceservice-missing-preset": lambda obj, case: obj.update(status=case["status"]),
}


def _cases():
    for path in sorted(FIXTURES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for case in doc["cases"]:
            obj = copy.deepcopy(case.get("object") or doc["object"])
            CHANGES[path.stem](obj, case)
            yield pytest.param(obj, case["expected"], id=f"{path.stem}/{case['name']}")


def test_every_fixture_class_has_its_changes():
    assert {p.stem for p in FIXTURES.glob("*.yaml")} == set(CHANGES)


@pytest.mark.parametrize("obj, expected", list(_cases()))
def test_recorded_state_class(catalog, obj, expected):
    resolved = catalog.resolve(obj)
    assert resolved.status == expected, resolved.statuses
    # one status of the set, the one resolved: these states are unambiguous
    assert resolved.statuses == [expected]
