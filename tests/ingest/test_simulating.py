"""The simulator: deterministic, covering, and every intent is what the catalog resolves."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import jsonschema
import pytest

from workloadmap.catalog import Catalog, ResolveError, UnknownKindError
from workloadmap.catalog import records
from workloadmap.ingest.simulating import BAD_KINDS, KINDS, simulate, simulate_messages

FRAMEWORKS = {"JobSet", "PyTorchJob", "MPIJob", "RayCluster", "RayJob", "RayService", "InferenceService",
              "Service", "NIMService", "LeaderWorkerSet", "Milvus", "PodCliqueSet", "DynamoGraphDeployment"}
CORE = {"Deployment", "StatefulSet", "Job", "CronJob", "Pod"}


@pytest.fixture(scope="module")
def history():
    """The default history: 3 clusters, 200 workloads, 7 days, seed 7."""
    return list(simulate())


def _encoded(events):
    return [records.encode(e.event) for e in events]


def test_same_seed_same_bytes_other_seed_other_history():
    a = _encoded(simulate(workloads=40, days=2, seed=11))
    b = _encoded(simulate(workloads=40, days=2, seed=11))
    c = _encoded(simulate(workloads=40, days=2, seed=12))
    assert a == b
    assert a != c
    assert len(a) > 100


def test_every_intent_is_what_the_catalog_resolves(history):
    catalog = Catalog.builtin()
    for e in history:
        resolved = catalog.resolve(e.event["object"])
        status = records.DELETED if e.event["type"] == "DELETED" else resolved.status
        assert (e.expected_status, e.expected_gpus, e.expected_pods) == (
            status, float(resolved.total.gpu), resolved.pods), (e.step, e.event["object"]["metadata"])
        assert isinstance(e.expected_gpus, float)


def test_events_are_raw_events_keyed_by_namespace(history):
    schema = records.schema("raw-event")
    for e in history:
        jsonschema.validate(e.event, schema)
        meta = e.event["object"]["metadata"]
        assert e.key == f"{e.event['cluster']}/{meta['namespace']}".encode()


def test_coverage_of_clusters_kinds_types_and_statuses(history):
    clusters = {e.event["cluster"] for e in history}
    assert len(clusters) >= 3 and {"prod-us-east", "prod-eu-west", "research"} <= clusters
    kinds = {e.event["object"]["kind"] for e in history}
    assert FRAMEWORKS | CORE <= kinds and len(KINDS) == 18
    assert {e.event["type"] for e in history} == set(records.EVENT_TYPES)
    statuses = Counter(e.expected_status for e in history)
    assert {"Initializing", "Running", "Completed", "Failed", "Degraded", "Suspended", records.DELETED} <= set(statuses)
    steps = {e.step for e in history}
    assert {"created", "started", "completed", "failed", "scaled-up", "scaled-down", "degraded", "recovered",
            "suspended", "resumed", "queued", "admitted", "deleted"} <= steps


def test_at_least_a_week_in_time_order_from_the_simulated_clock(history):
    times = [records.parse_time(e.event["observedAt"]) for e in history]
    assert times == sorted(times)
    assert times[0] >= records.parse_time("2026-11-01T00:00:00Z")
    assert (times[-1] - times[0]).total_seconds() > 6.5 * 86400
    shifted = next(simulate(workloads=5, days=1, start="2030-01-01T00:00:00Z"))
    assert shifted.event["observedAt"].startswith("2030-01-01T")


def test_resource_versions_increase_per_cluster_and_generation_follows_the_spec(history):
    last_rv: dict = {}
    last: dict = {}
    for e in history:
        obj = e.event["object"]
        rv = int(obj["metadata"]["resourceVersion"])
        assert rv > last_rv.get(e.event["cluster"], 0)
        last_rv[e.event["cluster"]] = rv
        uid = obj["metadata"]["uid"]
        spec = json.dumps(obj.get("spec"), sort_keys=True)
        gen = obj["metadata"].get("generation")
        if uid in last:
            prev_spec, prev_gen, prev_type = last[uid]
            assert prev_type != "DELETED", "nothing follows a deletion"
            if obj["kind"] != "Pod":
                assert gen == prev_gen + (spec != prev_spec)
        else:
            assert e.event["type"] == "ADDED"
            assert gen in (1, None)
        last[uid] = (spec, gen, e.event["type"])


def test_scaling_changes_replicas_and_gpus(history):
    catalog = Catalog.builtin()
    by_uid = defaultdict(list)
    for e in history:
        by_uid[e.event["object"]["metadata"]["uid"]].append(e)
    changed = 0
    for events in by_uid.values():
        for i, after in enumerate(events):
            if after.step in ("scaled-up", "scaled-down"):
                # compared with the state before the scale (a scale-up may pass through Degraded first)
                before = next(e for e in reversed(events[:i]) if e.step != "scaling-up")
                assert after.event["object"]["spec"] != before.event["object"]["spec"]
                resolved = catalog.resolve(after.event["object"])
                assert float(resolved.total.gpu) == after.expected_gpus
                changed += after.expected_gpus != before.expected_gpus or after.expected_pods != before.expected_pods
    assert changed >= 10


def test_suspend_and_resume_go_through_the_definition(history):
    catalog = Catalog.builtin()
    suspended = [e for e in history if e.step in ("suspended", "preempted", "queued")]
    assert {e.event["object"]["kind"] for e in suspended} >= {"JobSet", "PyTorchJob", "Job"} & {
        e.event["object"]["kind"] for e in history}
    for e in suspended:
        assert catalog.definition_for(e.event["object"]).root.suspend is not None
        assert e.expected_status == "Suspended"


def test_gpu_sizes_span_1_to_64_and_some_workloads_outlive_the_simulation(history):
    gpus = {e.expected_gpus for e in history}
    assert min(g for g in gpus if g > 0) == 1 and max(gpus) == 64
    last = {}
    for e in history:
        last[e.event["object"]["metadata"]["uid"]] = e
    assert len(last) == 200
    running_at_end = [e for e in last.values() if e.expected_status == "Running"]
    assert len(running_at_end) >= 20
    assert any(e.event["object"]["kind"] in {"JobSet", "PyTorchJob", "Job", "MPIJob", "RayJob"} for e in running_at_end)


def test_scale_knobs():
    small = list(simulate(clusters=5, workloads=30, days=1, seed=3))
    assert len({e.event["cluster"] for e in small}) == 5
    assert len({e.event["object"]["metadata"]["uid"] for e in small}) == 30
    more = list(simulate(clusters=7, workloads=60, days=1, seed=3))
    assert len({e.event["cluster"] for e in more}) == 7
    with pytest.raises(ValueError):
        next(simulate(clusters=0))


def test_bad_messages_carry_their_dead_letter_reason():
    catalog = Catalog.builtin()
    messages = list(simulate_messages(workloads=40, days=2, seed=5, bad_fraction=0.1))
    good = [m for m in messages if m[2].expected_deadletter_reason is None]
    bad = [m for m in messages if m[2].expected_deadletter_reason is not None]
    # the good ones are exactly simulate()'s events, in order
    assert [m[1] for m in good] == _encoded(simulate(workloads=40, days=2, seed=5))
    assert abs(len(bad) / len(messages) - 0.1) < 0.01
    reasons = Counter(m[2].expected_deadletter_reason for m in bad)
    assert set(reasons) == {records.MALFORMED_JSON, records.UNKNOWN_KIND, records.MISSING_FIELDS,
                            records.WRONG_TYPES, records.RESOLVE_ERROR}
    assert {m[2].step for m in bad} == set(BAD_KINDS)
    for key, value, intent in bad:
        reason = intent.expected_deadletter_reason
        assert intent.event is None and intent.expected_status is None and key == intent.key
        if reason == records.MALFORMED_JSON:
            with pytest.raises(ValueError):
                json.loads(value)
            continue
        event = json.loads(value)
        if reason == records.MISSING_FIELDS:
            assert "object" not in event or "uid" not in event["object"]["metadata"]
        elif reason == records.WRONG_TYPES:
            assert event["object"] == "text"
        elif reason == records.UNKNOWN_KIND:
            jsonschema.validate(event, records.schema("raw-event"))
            with pytest.raises(UnknownKindError):
                catalog.resolve(event["object"])
        else:
            jsonschema.validate(event, records.schema("raw-event"))
            assert event["object"]["spec"]["replicas"] == "lots"
            with pytest.raises(ResolveError):
                catalog.resolve(event["object"])
    # bad messages never share a key with a good object's stream (missing-uid ones have cluster/"")
    good_keys = {m[0] for m in good}
    assert not any(m[0] in good_keys for m in bad)
    with pytest.raises(ValueError):
        next(simulate_messages(bad_fraction=1.0))
