"""warehouse/allocating.py: pod and node records into intervals, the README's semantics, dedup,
exactly-once offsets, validation.  Expectations are derived by hand from the records each test writes."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.allocation_records import GIB, node, pod
from workloadmap.catalog import records
from workloadmap.warehouse.allocating import check_node, check_pod
from workloadmap.warehouse.checking import MalformedRecord
from workloadmap.warehouse.writing import Warehouse


def t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def pod_rows(wh, uid=None):
    sql = ("SELECT uid, state, node, workload_uid, component, gpus, valid_from, valid_to FROM pod_intervals "
           + ("WHERE uid = $uid " if uid else "") + "ORDER BY uid, valid_from")
    return wh.cursor().execute(sql, {"uid": uid} if uid else None).fetchall()


def node_rows(wh):
    return wh.cursor().execute("SELECT name, uid, gpus, unschedulable, valid_from, valid_to FROM node_intervals "
                               "ORDER BY name, valid_from").fetchall()


@pytest.fixture
def wh(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as w:
        yield w


def test_a_pod_pends_then_holds_its_gpus_from_bound_until_terminated(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Pending", gpu=2),
                   pod("p1", "2026-11-01T10:05:00Z", "Bound", node="n1", gpu=2),
                   pod("p1", "2026-11-01T12:00:00Z", "Terminated", node="n1", gpu=2)])
    assert pod_rows(wh) == [
        ("p1", "Pending", None, "wl-1", "worker", 2.0, t("2026-11-01T10:00:00Z"), t("2026-11-01T10:05:00Z")),
        ("p1", "Bound", "n1", "wl-1", "worker", 2.0, t("2026-11-01T10:05:00Z"), t("2026-11-01T12:00:00Z"))]
    assert wh.cursor().execute("SELECT count(*) FROM pod_current").fetchone() == (0,)


def test_a_bound_pod_stays_open_and_status_churn_of_the_same_state_opens_nothing(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", gpu=1)])
    result = wh.write(pods=[pod("p1", "2026-11-01T10:01:00Z", "Bound", node="n1", gpu=1)])
    assert (result.pods, result.pod_duplicates) == (1, 0)  # kept (latest seen), same interval
    assert pod_rows(wh) == [("p1", "Bound", "n1", "wl-1", "worker", 1.0, t("2026-11-01T10:00:00Z"), None)]


def test_a_deleted_pod_ends_and_any_later_record_of_it_is_dropped_even_after_reopening(tmp_path):
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", gpu=4)])
        wh.write(pods=[pod("p1", "2026-11-01T11:00:00Z", "Bound", node="n1", gpu=4, deleted=True)])
    with Warehouse(path) as wh:  # the ended pods' filter comes back from the file
        result = wh.write(pods=[pod("p1", "2026-11-01T12:00:00Z", "Bound", node="n1", gpu=4)])
        assert (result.pods, result.pod_duplicates) == (0, 1)
        assert pod_rows(wh) == [("p1", "Bound", "n1", "wl-1", "worker", 4.0, t("2026-11-01T10:00:00Z"),
                                 t("2026-11-01T11:00:00Z"))]


def test_a_batch_written_twice_and_late_records_change_nothing(wh):
    batch = [pod("p1", "2026-11-01T10:00:00Z", "Pending", gpu=1), pod("p1", "2026-11-01T10:02:00Z", "Bound",
                                                                       node="n1", gpu=1)]
    wh.write(pods=batch)
    before = pod_rows(wh)
    again = wh.write(pods=batch)
    assert (again.pods, again.pod_duplicates) == (0, 2)
    late = wh.write(pods=[pod("p1", "2026-11-01T10:01:00Z", "Pending", gpu=1)])
    assert late.pods == 0 and pod_rows(wh) == before


def test_a_pod_seen_before_its_owner_takes_the_workload_into_its_open_interval(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", gpu=1, workload=None, component=None)])
    wh.write(pods=[pod("p1", "2026-11-01T10:00:01Z", "Bound", node="n1", gpu=1)])
    assert pod_rows(wh) == [("p1", "Bound", "n1", "wl-1", "worker", 1.0, t("2026-11-01T10:00:00Z"), None)]


def test_the_workload_of_a_pod_seen_before_its_owner_comes_with_the_same_pod_version(wh):
    """The processors attribute a waiting pod when its owner comes, with the pod's own resourceVersion
    (the pod did not change): that record is not "the latest record again"; a repeat of it is."""
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", gpu=1, workload=None, component=None,
                       rv="12")])
    wh.write(pods=[pod("p1", "2026-11-01T10:00:05Z", "Bound", node="n1", gpu=1, rv="12")])
    wh.write(pods=[pod("p1", "2026-11-01T10:00:06Z", "Bound", node="n1", gpu=1, rv="12", component="leader")])
    assert pod_rows(wh) == [("p1", "Bound", "n1", "wl-1", "worker", 1.0, t("2026-11-01T10:00:00Z"), None)]


def test_a_change_of_node_request_or_role_opens_a_new_interval(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", gpu=1),
                   pod("p1", "2026-11-01T11:00:00Z", "Bound", node="n1", gpu=1, component="leader"),
                   pod("p1", "2026-11-01T12:00:00Z", "Bound", node="n1", gpu=2, component="leader")])
    assert pod_rows(wh) == [
        ("p1", "Bound", "n1", "wl-1", "worker", 1.0, t("2026-11-01T10:00:00Z"), t("2026-11-01T11:00:00Z")),
        ("p1", "Bound", "n1", "wl-1", "leader", 1.0, t("2026-11-01T11:00:00Z"), t("2026-11-01T12:00:00Z")),
        ("p1", "Bound", "n1", "wl-1", "leader", 2.0, t("2026-11-01T12:00:00Z"), None)]


def test_mig_slices_are_kept_by_resource(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", gpu=2,
                       gpu_resources={"nvidia.com/mig-1g.10gb": 2})])
    assert wh.cursor().execute("SELECT gpu_resources FROM pod_intervals").fetchone() == (
        {"nvidia.com/mig-1g.10gb": 2.0},)


def test_a_node_has_its_allocatable_until_changed_or_deleted_and_a_late_record_does_not_revive_it(wh):
    wh.write(nodes=[node("n1", "2026-11-01T00:00:00Z"),
                    node("n1", "2026-11-01T06:00:00Z", unschedulable=True)])  # cordoned
    wh.write(nodes=[node("n1", "2026-11-01T08:00:00Z", unschedulable=True, deleted=True)])
    late = wh.write(nodes=[node("n1", "2026-11-01T09:00:00Z")])  # the same node (uid), after its deletion
    assert (late.nodes, late.node_duplicates) == (0, 1)
    wh.write(nodes=[node("n1", "2026-11-01T10:00:00Z", uid="uid-n1-b")])  # a new node of the same name
    assert node_rows(wh) == [
        ("n1", "uid-n1", 8.0, False, t("2026-11-01T00:00:00Z"), t("2026-11-01T06:00:00Z")),
        ("n1", "uid-n1", 8.0, True, t("2026-11-01T06:00:00Z"), t("2026-11-01T08:00:00Z")),
        ("n1", "uid-n1-b", 8.0, False, t("2026-11-01T10:00:00Z"), None)]


def test_pod_and_node_offsets_are_stored_in_the_batch_transaction(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Pending")], nodes=[node("n1", "2026-11-01T00:00:00Z")],
             offsets={(records.PODS_TOPIC, 0): 1, (records.NODES_TOPIC, 2): 7})
    assert wh.offsets() == {(records.PODS_TOPIC, 0): 1, (records.NODES_TOPIC, 2): 7}


def test_a_malformed_pod_in_a_batch_leaves_the_file_untouched(wh):
    with pytest.raises(MalformedRecord):
        wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Pending"), {"cluster": "c1"}],
                 offsets={(records.PODS_TOPIC, 0): 2})
    assert pod_rows(wh) == [] and wh.offsets() == {}


@pytest.mark.parametrize("change, reason, words", [
    ({"state": "Running"}, records.WRONG_TYPES, "state 'Running' is not one of"),
    ({"state": "Bound", "nodeName": None}, records.WRONG_TYPES, "nodeName must name the node of a Bound pod"),
    ({"gpu": -1}, records.WRONG_TYPES, "gpu must be a non-negative number"),
    ({"memory": float("nan")}, records.WRONG_TYPES, "memory must be a non-negative number"),
    ({"gpuResources": {"nvidia.com/gpu": "two"}}, records.WRONG_TYPES, "gpuResources['nvidia.com/gpu']"),
    ({"workload": "JobSet/train"}, records.WRONG_TYPES, "workload must be an object"),
    ({"workload": {"kind": "JobSet", "name": "train"}}, records.WRONG_TYPES, "uid must be a non-empty string"),
    ({"observedAt": "yesterday"}, records.WRONG_TYPES, "observedAt 'yesterday' is not an RFC 3339 timestamp"),
    ({"deleted": "no"}, records.WRONG_TYPES, "deleted must be a boolean"),
    ({"phase": "Lost"}, records.WRONG_TYPES, "phase 'Lost' is not one of"),
])
def test_a_malformed_pod_record_is_refused_naming_the_pod_the_field_and_the_reason(change, reason, words):
    record = {**pod("p1", "2026-11-01T10:00:00Z", "Pending", gpu=1), **change}
    with pytest.raises(MalformedRecord) as info:
        check_pod(record)
    assert info.value.reason == reason
    assert info.value.detail.startswith("pod c1/ml/pod-p1: ") and words in info.value.detail


def test_a_pod_record_without_its_required_fields_names_them():
    record = pod("p1", "2026-11-01T10:00:00Z", "Pending")
    del record["state"], record["memory"]
    with pytest.raises(MalformedRecord) as info:
        check_pod(record)
    assert info.value.reason == records.MISSING_FIELDS and info.value.detail == "pod c1/ml/pod-p1 lacks state, memory"


@pytest.mark.parametrize("change, reason, words", [
    ({"allocatable": {"gpu": 8, "cpu": 96}}, records.MISSING_FIELDS, "allocatable lacks memory"),
    ({"capacity": [8]}, records.WRONG_TYPES, "capacity must be an object"),
    ({"unschedulable": "yes"}, records.WRONG_TYPES, "unschedulable must be a boolean"),
    ({"ready": 1}, records.WRONG_TYPES, "ready must be a boolean or null"),
    ({"labels": {"nodePool": 3}}, records.WRONG_TYPES, "nodePool must be a non-empty string"),
])
def test_a_malformed_node_record_is_refused_naming_the_node_the_field_and_the_reason(change, reason, words):
    record = {**node("n1", "2026-11-01T00:00:00Z"), **change}
    with pytest.raises(MalformedRecord) as info:
        check_node(record)
    assert info.value.reason == reason and info.value.detail.startswith("node c1/n1")
    assert words in info.value.detail


def test_memory_and_cpu_are_kept_as_given(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", cpu=3.5, memory=12 * GIB)])
    assert wh.cursor().execute("SELECT cpu, memory FROM pod_current").fetchone() == (3.5, 12 * GIB)


def test_the_kafka_writers_batch_checks_pods_and_nodes_and_dead_letters_the_malformed_with_their_reason():
    from types import SimpleNamespace

    from workloadmap.catalog.records import encode
    from workloadmap.warehouse.consuming import allocation_topics, check_messages

    def message(topic, offset, value):
        return SimpleNamespace(topic=topic, partition=0, offset=offset, key=b"c1/x", value=value)

    good_pod = pod("p1", "2026-11-01T10:00:00Z", "Pending", gpu=1)
    bad_pod = {**good_pod, "state": "Bound", "nodeName": None}
    msgs = [message(records.PODS_TOPIC, 0, encode(good_pod)), message(records.PODS_TOPIC, 1, encode(bad_pod)),
            message(records.PODS_TOPIC, 2, b"{not json"),
            message(records.NODES_TOPIC, 0, encode(node("n1", "2026-11-01T00:00:00Z")))]
    pods, nodes = [], []
    rows, _, _, dead, offsets, _ = check_messages(msgs, allocations=allocation_topics(pods, nodes))
    assert rows == [] and len(pods) == 1 and len(nodes) == 1 and pods[0][1] == "p1" and nodes[0][1] == "n1"
    assert [(d.reason, d.offset) for d in dead] == [(records.WRONG_TYPES, 1), (records.MALFORMED_JSON, 2)]
    assert "nodeName must name the node of a Bound pod" in dead[0].detail
    assert offsets == {(records.PODS_TOPIC, 0): 3, (records.NODES_TOPIC, 0): 1}


def test_a_version_9_file_keeps_its_ended_pods_in_the_append_only_table_of_version_10(tmp_path):
    import duckdb

    from workloadmap.warehouse import schema
    from workloadmap.warehouse.allocating import pod_key

    path = tmp_path / "v9.duckdb"
    conn = duckdb.connect(str(path))
    schema.migrate(conn, target=9)
    conn.execute("INSERT INTO ended_pods VALUES (?)", [pod_key("c1", "p1")])
    conn.close()
    with Warehouse(path) as wh:
        assert schema.current_version(wh.conn) == schema.LATEST_VERSION >= 10
        late = wh.write(pods=[pod("p1", "2026-11-01T12:00:00Z", "Bound", node="n1")])
        assert (late.pods, late.pod_duplicates) == (0, 1)  # the filter, built from the migrated table, knows it
        assert pod_rows(wh) == []


def test_the_deletion_after_a_pod_succeeded_changes_nothing_and_adds_no_second_key(wh):
    wh.write(pods=[pod("p1", "2026-11-01T10:00:00Z", "Bound", node="n1", gpu=1),
                   pod("p1", "2026-11-01T11:00:00Z", "Terminated", node="n1", gpu=1)])
    wh.write(pods=[pod("p1", "2026-11-01T11:00:30Z", "Terminated", node="n1", gpu=1, deleted=True),
                   pod("p2", "2026-11-01T11:00:30Z", "Terminated", deleted=True)])  # never seen pending or bound
    assert wh.cursor().execute("SELECT count(*) FROM ended_pods").fetchone() == (1,)
    assert pod_rows(wh) == [("p1", "Bound", "n1", "wl-1", "worker", 1.0, t("2026-11-01T10:00:00Z"),
                             t("2026-11-01T11:00:00Z"))]


def test_gpu_hours_by_framework_are_the_bound_pods_beside_the_specs_while_running(wh):
    """The demo's second table.  Requested: the lifecycle's Running intervals, 09:05-10:00 at 32 GPUs and
    10:00-12:00 at 48 = 29.33 + 96 = 125.3 GPU-hours.  Allocated, up to the last workload state (13:00): a
    Kubeflow pod bound 09:10-12:00 with 8 GPUs = 22.7; one that only pended = 0; a Ray pod bound from 11:00
    and still open = 2 h x 2 = 4.0; a Ray pod bound after 13:00 counts nothing."""
    from tests.warehouse.workload_records import lifecycle
    from workloadmap.warehouse.querying import run_query

    wh.write(lifecycle())
    kubeflow = dict(workload=("PyTorchJob", "train", "uid-1"), framework="Kubeflow Training")
    ray = dict(workload=("RayCluster", "ray", "uid-2"), framework="Ray")
    wh.write(pods=[pod("p1", "2025-06-03T09:06:00Z", "Pending", gpu=8, **kubeflow),
                   pod("p1", "2025-06-03T09:10:00Z", "Bound", node="n1", gpu=8, **kubeflow),
                   pod("p1", "2025-06-03T12:00:00Z", "Terminated", node="n1", gpu=8, **kubeflow),
                   pod("p2", "2025-06-03T09:06:00Z", "Pending", gpu=8, **kubeflow),
                   pod("r1", "2025-06-03T11:00:00Z", "Bound", node="n2", gpu=2, **ray),
                   pod("r2", "2025-06-03T13:30:00Z", "Bound", node="n2", gpu=2, **ray)])
    assert run_query(wh.cursor(), "gpu_hours_by_framework").rows == [
        ("Kubeflow Training", 22.7, 125.3), ("Ray", 4.0, 0.0)]
