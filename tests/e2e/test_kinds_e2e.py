"""End to end on a real Kafka broker: workloads of a kind their cluster defines, published before the definition.

The watcher publishes a WorkloadMap keyed by its cluster (cluster-scoped) and the objects of its
kind keyed by cluster/namespace: on other raw partitions, whose worker may process them before it
learns the definition.  They must wait for it (processors/processing.py: kept in the state topic,
the definition relayed to every raw partition), then reach the warehouse resolved with it, and no
dead letter be made: with one worker, and with two splitting the partitions.

Expectations, worked out from tests/kube_objects.py's DEFINITION_TEMPLATE (pods = .spec.replicas,
each pod's GPUs from its template's limits) and tests/e2e/test_pipeline_e2e.py's Widgets (replicas
1 + i % 3 of 2 GPUs): 12 Widgets, 2 * (4 * (1 + 2 + 3)) = 48 GPUs, each record observed when its own
event was.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.e2e.test_pipeline_e2e import Pipeline, _widget_events, pipeline_on  # noqa: F401 - the fixture
from tests.e2e.test_references_e2e import PARTITIONS, _partition, _start_second_worker, _wait_for_workers
from tests.kube_objects import DEFINITION_TEMPLATE
from workloadmap.catalog import records
from workloadmap.ingest.publishing import event_key


def _waiting(p: Pipeline) -> set:
    """The workloads the state topic keeps waiting (committed: their raw events processed)."""
    latest = {}
    for m in p.topic_messages("state"):
        if m.key.startswith(b"waiting:"):
            latest[m.key] = m.value
    return {k for k, v in latest.items() if v is not None}


@pytest.mark.parametrize("workers", [1, 2])
def test_workloads_published_before_their_kind_s_definition_reach_the_warehouse(kafka_broker, pipeline_on,
                                                                                 workers):
    p = pipeline_on(kafka_broker.bootstrap_servers)
    definition = yaml.safe_load(DEFINITION_TEMPLATE.format(name="widgets", group="example.com", version="v1",
                                                           kind="Widget"))
    definition["metadata"].update(uid="def-1", resourceVersion="5")
    define = records.raw_event("lab", "ADDED", definition)
    widgets = _widget_events(12, rv=10)
    definition_partition = _partition(event_key(define))
    assert {_partition(key) for key, _ in widgets} - {definition_partition} == (
        set(range(PARTITIONS)) - {definition_partition}), "Widgets on every other raw partition"
    p.start("processors")
    if workers == 2:
        _start_second_worker(p)
        _wait_for_workers(p, 2)
    p.start("warehouse")
    p.publish([(key, value, None) for key, value in widgets])
    deadline = time.time() + 180
    while len(_waiting(p)) < len(widgets):   # processed, and waiting: no record, no dead letter
        assert time.time() < deadline, f"{_waiting(p)}\n{p.dead_letters()}\n{p.log('processors')}"
        time.sleep(1)
    assert p.dead_letters() == [] and not p.warehouse_rows("SELECT * FROM workload_states")
    p.publish([(event_key(define), records.encode(define), None)])
    try:
        p.wait_for_records(len(widgets))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ndead letters: {p.dead_letters()}") from None
    rows = p.warehouse_rows("SELECT definition, origin, count(*), sum(gpus) FROM workload_states "
                            "WHERE kind = 'Widget' GROUP BY ALL")
    assert rows == [("widgets", "cluster", 12, 2 * sum(1 + i % 3 for i in range(12)))]
    observed = {json.loads(value)["object"]["metadata"]["uid"]: json.loads(value)["observedAt"]
                for _, value in widgets}
    records_at = {r["uid"]: r["observedAt"] for r in (json.loads(m.value) for m in p.topic_messages("workloads"))}
    assert records_at == observed
    assert p.dead_letters() == [] and _waiting(p) == set()
