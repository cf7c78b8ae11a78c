"""Status as a set: every matched status is visible wherever a status is.

Upstream returns every status whose matchers matched and leaves the choice to consumers; we keep
one resolved status by precedence and carry the whole matched set beside it: the record's
`statuses`, `-o json`, the tables (`Degraded +Initializing`), `get --status` (any of the set)
and the transitions (`statuses` at `to`).

The case: a StatefulSet scaling down from 3 to 2 while one of its pods is not ready, read
through upstream's own StatefulSet definition (tests/fixtures/upstream/apps-statefulset-v1.yaml):
the controller has seen the new spec (observedGeneration = generation) and removes pods one at a
time from the highest ordinal, so `status.replicas` (3) is still above `spec.replicas` (2), and
with `readyReplicas` 1 both upstream's scaling-down Initializing matcher and its Degraded matcher
(some but not all wanted replicas ready, all updated, one revision) hold.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
from rich.console import Console

from workloadmap.catalog import Catalog, records
from workloadmap.catalog.validating import load_file
from workloadmap.cli import rendering
from workloadmap.ingest.inspecting import matches_statuses
from workloadmap.processors.processing import transition_of

UPSTREAM_STATEFULSET = Path(__file__).resolve().parents[1] / "fixtures" / "upstream" / "apps-statefulset-v1.yaml"


def _scaling_down() -> dict:
    catalog = Catalog.builtin()
    for d in load_file(str(UPSTREAM_STATEFULSET)):
        catalog.add(d)
    obj = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "qdrant", "namespace": "search", "uid": "u-1", "generation": 4},
           "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "qdrant"}]}}},
           "status": {"observedGeneration": 4, "replicas": 3, "readyReplicas": 1, "updatedReplicas": 2,
                      "currentRevision": "qdrant-7d9", "updateRevision": "qdrant-7d9"}}
    return catalog.resolve(obj).to_dict()


def test_the_record_carries_every_matched_status_in_precedence_order():
    record = _scaling_down()
    # our precedence puts Degraded before Initializing (upstream's order lists Initializing first)
    assert (record["status"], record["statuses"]) == ("Degraded", ["Degraded", "Initializing"])


def test_get_status_matches_any_status_of_the_set():
    record = _scaling_down()
    assert matches_statuses(record, {"initializing"})
    assert matches_statuses(record, {"degraded"})
    assert matches_statuses(record, set())
    assert not matches_statuses(record, {"running", "failed"})
    # nothing matched: Undefined is the resolved status, and only it
    undefined = {**record, "status": "Undefined", "statuses": []}
    assert matches_statuses(undefined, {"undefined"}) and not matches_statuses(undefined, {"degraded"})


def test_tables_show_the_other_matched_statuses():
    console = Console(width=200, record=True)
    console.print(rendering.workload_table([_scaling_down()]))
    assert "Degraded +Initializing" in console.export_text()


def test_a_transition_carries_the_set_it_went_to():
    record = {**_scaling_down(), "cluster": "a", "observedAt": "2025-06-03T10:00:01Z", "eventType": "MODIFIED",
              "deleted": False, "previousStatus": "Running", "previousStatusSince": "2025-06-03T09:14:02Z",
              "statusSince": "2025-06-03T10:00:01Z"}
    transition = transition_of(record)
    assert (transition["from"], transition["to"], transition["statuses"]) == (
        "Running", "Degraded", ["Degraded", "Initializing"])
    jsonschema.validate(transition, records.schema("transition"))
