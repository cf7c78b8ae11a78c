"""The exporter's series: what each record makes of them, as a scraper reads them (prometheus_client's parser).

Records are built field by field (tests/exporter_records.py, tests/allocation_records.py) so each
expectation is derived by hand from the record in the test; one test runs a catalog example through the
real processors to check the exporter reads the records they publish.
"""

from __future__ import annotations

import copy
import gzip
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from workloadmap.catalog import records
from workloadmap.catalog.definitions import STATUSES
from workloadmap.exporter.serving import AddressError, MetricsServer, parse_address
from workloadmap.exporter.tracking import DEADLETTERS, NODES, PODS, TRANSITIONS, WORKLOADS, Tracker
from workloadmap.processors.processing import MemoryStates, Processor

from tests.allocation_records import node, pod
from tests.conftest import example_objects
from tests.exporter_records import GIB, component, workload

W1 = {"cluster": "c1", "namespace": "ml", "workload": "wl-u1", "kind": "PyTorchJob"}


def feed(tracker: Tracker, *pairs) -> None:
    """Apply (kind, record dict) pairs as one batch."""
    tracker.apply_batch([(kind, records.encode(value), None) for kind, value in pairs])


def samples(tracker: Tracker) -> dict:
    """{(name, frozenset of labels): value} of the whole /metrics body, as Prometheus' text format is parsed."""
    out = {}
    for family in text_string_to_metric_families(tracker.exposition().decode()):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def value(tracker, name, **labels):
    return samples(tracker).get((name, frozenset(labels.items())))


def series_of(tracker, name) -> dict:
    """{frozenset of labels: value} of one family."""
    return {labels: v for (n, labels), v in samples(tracker).items() if n == name}


def mentioning(tracker, **labels) -> list:
    """Every per-object series whose labels include `labels` (health counters left out)."""
    want = set(labels.items())
    return [(n, dict(ls)) for (n, ls), _ in samples(tracker).items()
            if want <= set(ls) and not n.startswith(("workloadmap_records", "workloadmap_cluster_last"))]


TRAINER = [component("master", 1, per_pod_gpu=8, per_pod_cpu=4.0, per_pod_memory=32 * GIB),
           component("worker", 3, per_pod_gpu=8, per_pod_cpu=4.0, per_pod_memory=32 * GIB)]


def test_a_workload_record_gives_its_info_status_set_times_and_requests():
    t = Tracker()
    feed(t, (WORKLOADS, workload("u1", "Running", components=TRAINER, since="2026-12-01T10:00:00Z",
                                 created="2026-12-01T09:00:00Z")))
    assert value(t, "workloadmap_workload_info", **W1, framework="PyTorch", definition="pytorchjob") == 1
    status = {dict(ls)["status"]: v for ls, v in series_of(t, "workloadmap_workload_status").items()}
    assert status == {s: (1.0 if s == "Running" else 0.0) for s in STATUSES}   # the state set: 9 series
    # 2026-12-01T10:00:00Z is 1796119200 s after the epoch (date -d ... +%s); created one hour before
    assert value(t, "workloadmap_workload_status_transition_timestamp_seconds", **W1) == 1796119200
    assert value(t, "workloadmap_workload_created", **W1) == 1796119200 - 3600
    # 1 master + 3 workers, 8 GPUs, 4 cores and 32 GiB each
    assert value(t, "workloadmap_workload_requested_pods", **W1) == 4
    assert value(t, "workloadmap_workload_requested_gpus", **W1) == 32
    requests = {(dict(ls)["resource"], dict(ls)["unit"]): v
                for ls, v in series_of(t, "workloadmap_workload_resource_requests").items()}
    assert requests == {("cpu", "core"): 16, ("memory", "byte"): 128 * GIB, ("nvidia_com_gpu", "integer"): 32}
    assert value(t, "workloadmap_component_requested_pods", **W1, component="worker") == 3
    assert value(t, "workloadmap_component_requested_gpus", **W1, component="master") == 8
    assert value(t, "workloadmap_component_resource_requests", **W1, component="worker", resource="memory",
                 unit="byte") == 96 * GIB


def test_a_status_change_moves_the_one_of_the_state_set_and_the_transition_time():
    t = Tracker()
    feed(t, (WORKLOADS, workload("u1", "Running", at="2026-12-01T10:00:00Z")))
    feed(t, (WORKLOADS, workload("u1", "Failed", at="2026-12-01T10:05:00Z", previous="Running")))
    status = {dict(ls)["status"]: v for ls, v in series_of(t, "workloadmap_workload_status").items()}
    assert status["Failed"] == 1 and status["Running"] == 0 and sum(status.values()) == 1
    assert value(t, "workloadmap_workload_status_transition_timestamp_seconds", **W1) == 1796119200 + 300


def test_components_with_one_name_are_told_apart_by_their_instance_and_never_duplicated():
    t = Tracker()
    groups = [component("worker", 2, per_pod_gpu=1, instance="small"), component("worker", 4, per_pod_gpu=2,
                                                                                   instance="large"),
              component("worker", 1, per_pod_gpu=2, instance="large")]   # a repeated (name, instance) adds up
    feed(t, (WORKLOADS, workload("u1", components=groups)))
    pods = series_of(t, "workloadmap_component_requested_pods")
    assert {dict(ls)["component_instance"]: v for ls, v in pods.items()} == {"small": 2, "large": 5}
    assert value(t, "workloadmap_component_requested_gpus", **W1, component="worker",
                 component_instance="large") == 10


def test_a_deleted_workload_takes_every_series_with_it():
    t = Tracker()
    feed(t, (WORKLOADS, workload("u1", components=TRAINER)), (WORKLOADS, workload("u2", components=TRAINER)),
         (PODS, pod("p1", "2026-12-01T10:00:00Z", "Bound", node="n1", gpu=8, workload=("PyTorchJob", "wl-u1", "u1"),
                    namespace="ml", name="wl-u1-worker-0")))
    assert mentioning(t, workload="wl-u1")
    feed(t, (WORKLOADS, workload("u1", deleted=True, components=TRAINER)))
    assert mentioning(t, workload="wl-u1") == []
    assert mentioning(t, workload="wl-u2"), "the other workload keeps its series"
    # a late record of its terminating pod does not bring the pod-derived series back
    feed(t, (PODS, pod("p1", "2026-12-01T10:00:05Z", "Bound", node="n1", gpu=8,
                       workload=("PyTorchJob", "wl-u1", "u1"), name="wl-u1-worker-0")))
    assert mentioning(t, workload="wl-u1") == []
    feed(t, (PODS, pod("p1", "2026-12-01T10:00:09Z", "Terminated", deleted=True, gpu=8,
                       workload=("PyTorchJob", "wl-u1", "u1"), name="wl-u1-worker-0")))
    assert t.pods == {} and t.detached == {}, "nothing is kept of a deleted workload once its pods are gone"


def test_pods_add_up_to_allocated_and_pending_pods_and_gpus_by_workload_and_component():
    t = Tracker()
    owner = ("PyTorchJob", "wl-u1", "u1")
    at = "2026-12-01T10:00:00Z"
    feed(t, (PODS, pod("m0", at, "Bound", node="n1", gpu=8, workload=owner, component="master", replica="0")),
         (PODS, pod("w0", at, "Bound", node="n1", gpu=8, workload=owner, component="worker", replica="0")),
         (PODS, pod("w1", at, "Pending", gpu=8, workload=owner, component="worker", replica="1")),
         (PODS, pod("w2", at, "Terminated", gpu=8, workload=owner, component="worker", replica="2")))
    # Bound: m0, w0 (16 GPUs); Pending: w1 (8); Terminated w2 holds nothing
    assert value(t, "workloadmap_workload_allocated_pods", **W1) == 2
    assert value(t, "workloadmap_workload_allocated_gpus", **W1) == 16
    assert value(t, "workloadmap_workload_pending_pods", **W1) == 1
    assert value(t, "workloadmap_workload_pending_gpus", **W1) == 8
    assert value(t, "workloadmap_component_allocated_gpus", **W1, component="worker") == 8
    assert value(t, "workloadmap_component_pending_pods", **W1, component="worker") == 1
    assert value(t, "workloadmap_component_allocated_pods", **W1, component="master") == 1
    # w1 is bound, then m0 ends: its 8 GPUs move out, w1's move from pending to allocated
    feed(t, (PODS, pod("w1", "2026-12-01T10:01:00Z", "Bound", node="n2", gpu=8, workload=owner, component="worker",
                       replica="1")),
         (PODS, pod("m0", "2026-12-01T10:02:00Z", "Terminated", gpu=8, workload=owner, component="master")))
    assert value(t, "workloadmap_workload_allocated_gpus", **W1) == 16
    assert value(t, "workloadmap_workload_pending_gpus", **W1) == 0
    assert value(t, "workloadmap_component_allocated_gpus", **W1, component="master") == 0
    # the last pod of a component deleted: the component's sums go with it
    feed(t, (PODS, pod("m0", "2026-12-01T10:03:00Z", "Terminated", deleted=True, gpu=8, workload=owner,
                       component="master")))
    assert value(t, "workloadmap_component_allocated_pods", **W1, component="master") is None
    assert value(t, "workloadmap_component_allocated_pods", **W1, component="worker") == 2


def test_a_pod_workload_info_series_per_pod_is_the_join_key_and_goes_with_the_pod():
    t = Tracker()
    record = pod("p1", "2026-12-01T10:00:00Z", "Bound", node="n1", gpu=8, workload=("RayCluster", "rc", "u9"),
                 namespace="team-a", name="rc-worker-gpu-x7k2p", component="worker", instance="gpu-group",
                 replica=None)
    feed(t, (PODS, record))
    assert series_of(t, "workloadmap_pod_workload_info") == {frozenset({
        "cluster": "c1", "namespace": "team-a", "pod": "rc-worker-gpu-x7k2p", "workload": "rc", "kind": "RayCluster",
        "component": "worker", "component_instance": "gpu-group"}.items()): 1}   # a null replica is no label
    feed(t, (PODS, {**record, "deleted": True, "state": "Terminated", "eventType": "DELETED"}))
    assert series_of(t, "workloadmap_pod_workload_info") == {}


def test_without_pod_series_the_sums_stay_and_no_series_per_pod_is_kept():
    t = Tracker(pod_series=False)
    feed(t, (PODS, pod("p1", "2026-12-01T10:00:00Z", "Bound", node="n1", gpu=4,
                       workload=("PyTorchJob", "wl-u1", "u1"))))
    assert series_of(t, "workloadmap_pod_workload_info") == {}
    assert value(t, "workloadmap_workload_allocated_gpus", **W1) == 4


def test_a_pod_whose_owner_has_not_arrived_counts_nowhere_until_it_has():
    t = Tracker()
    feed(t, (PODS, pod("p1", "2026-12-01T10:00:00Z", "Bound", node="n1", gpu=4, workload=None)))
    assert series_of(t, "workloadmap_workload_allocated_gpus") == {}
    feed(t, (PODS, pod("p1", "2026-12-01T10:00:01Z", "Bound", node="n1", gpu=4,
                       workload=("PyTorchJob", "wl-u1", "u1"))))
    assert value(t, "workloadmap_workload_allocated_gpus", **W1) == 4


def test_nodes_give_info_allocatable_and_cordon_and_go_when_deleted():
    t = Tracker()
    feed(t, (NODES, node("n1", "2026-12-01T10:00:00Z", gpu=8, cpu=96.0, memory=1024 * GIB, unschedulable=True)))
    n1 = {"cluster": "c1", "node": "n1"}
    assert value(t, "workloadmap_node_info", **n1, gpu_product="NVIDIA-H100-80GB-HBM3", instance_type="p5.48xlarge",
                 node_pool="gpu-a", zone="us-east-1a") == 1
    assert value(t, "workloadmap_node_resource_allocatable", **n1, resource="nvidia_com_gpu", unit="integer") == 8
    assert value(t, "workloadmap_node_resource_allocatable", **n1, resource="memory", unit="byte") == 1024 * GIB
    assert value(t, "workloadmap_node_unschedulable", **n1) == 1
    feed(t, (NODES, node("n1", "2026-12-01T11:00:00Z", deleted=True)))
    assert mentioning(t, node="n1") == []


def test_transitions_and_dead_letters_count_by_their_labels():
    t = Tracker()
    transition = {"cluster": "c1", "namespace": "ml", "name": "wl", "kind": "JobSet", "uid": "u", "framework": "JobSet",
                  "definition": "jobset", "from": None, "to": "Running", "at": "2026-12-01T10:00:00Z", "gpus": 8,
                  "previousDurationSeconds": None}
    letter = records.DeadLetter("processor", records.UNKNOWN_KIND, "no definition", b"{}").to_dict()
    feed(t, (TRANSITIONS, transition), (TRANSITIONS, {**transition, "from": "Running", "to": "Failed"}),
         (TRANSITIONS, {**transition, "from": "Running", "to": "Failed"}), (DEADLETTERS, letter))
    assert value(t, "workloadmap_transitions_total", cluster="c1", framework="JobSet", from_status="Running",
                 to_status="Failed") == 2
    assert value(t, "workloadmap_transitions_total", cluster="c1", framework="JobSet", from_status="",
                 to_status="Running") == 1
    assert value(t, "workloadmap_dead_letters_total", stage="processor", reason="unknown-kind") == 1
    assert value(t, "workloadmap_records_total", cluster="c1", topic="transitions") == 3


def test_a_record_that_cannot_be_read_is_counted_with_its_reason_and_the_batch_goes_on():
    t = Tracker()
    no_uid = {k: v for k, v in workload("u1").items() if k != "uid"}
    rejected = t.apply_batch([(WORKLOADS, b"{not json", b"c1/x"), (WORKLOADS, records.encode(no_uid), None),
                              (WORKLOADS, records.encode(workload("u2", "Sleeping")), None),
                              (WORKLOADS, records.encode(workload("u3")), None)])
    assert rejected == 3
    assert value(t, "workloadmap_exporter_rejected_records_total", topic="workloads", reason="malformed-json") == 1
    assert value(t, "workloadmap_exporter_rejected_records_total", topic="workloads", reason="missing-fields") == 1
    assert value(t, "workloadmap_exporter_rejected_records_total", topic="workloads", reason="wrong-types") == 1
    assert value(t, "workloadmap_workload_requested_pods", cluster="c1", namespace="ml", workload="wl-u3",
                 kind="PyTorchJob") == 0


def test_label_values_with_quotes_backslashes_and_newlines_read_back_unchanged():
    t = Tracker()
    odd = 'a"b\\c\nd'
    feed(t, (WORKLOADS, workload("u1", framework=odd)))
    assert value(t, "workloadmap_workload_info", **W1, framework=odd, definition="pytorchjob") == 1


def test_freshness_is_the_newest_observation_per_cluster():
    t = Tracker()
    feed(t, (WORKLOADS, workload("u1", at="2026-12-01T10:00:00Z")),
         (WORKLOADS, workload("u2", cluster="c2", at="2026-12-01T10:00:30Z")))
    feed(t, (WORKLOADS, workload("u3", at="2026-12-01T09:00:00Z")))   # an older one does not move it back
    assert value(t, "workloadmap_cluster_last_event_timestamp_seconds", cluster="c1") == 1796119200
    assert value(t, "workloadmap_cluster_last_event_timestamp_seconds", cluster="c2") == 1796119230


def test_the_records_the_processors_publish_are_read_as_published(catalog):
    processor, state = Processor(catalog), MemoryStates()
    obj = copy.deepcopy(example_objects("jobset")["llama-pretrain"])
    out = processor.process(None, records.encode(records.raw_event("prod", "ADDED", obj, "2026-12-01T10:00:00Z")),
                            state)
    (key, value_bytes), = out.records
    record = records.decode(value_bytes)
    t = Tracker()
    t.apply_batch([(WORKLOADS, value_bytes, key)] + [(TRANSITIONS, v, k) for k, v in out.transitions])
    labels = {"cluster": "prod", "namespace": record["namespace"], "workload": "llama-pretrain", "kind": "JobSet"}
    assert value(t, "workloadmap_workload_requested_gpus", **labels) == 64 == record["total"]["gpu"]
    assert value(t, "workloadmap_workload_status", **labels, status="Running") == 1
    names = {dict(ls)["component"] for ls in series_of(t, "workloadmap_component_requested_pods")}
    assert names == {c["name"] for c in record["components"]}
    assert value(t, "workloadmap_transitions_total", cluster="prod", framework="JobSet", from_status="",
                 to_status="Running") == 1


def test_the_gzipped_body_is_the_text_body_and_a_scrape_compresses_again_only_the_parts_that_changed():
    t = Tracker()
    feed(t, *[(WORKLOADS, workload(f"u{i}", components=TRAINER)) for i in range(50)])
    assert gzip.decompress(t.exposition_gzip()) == t.exposition()
    status = t.families["workloadmap_workload_status"]
    assert status.dirty == set()
    feed(t, (WORKLOADS, workload("u7", "Running", components=TRAINER)))   # the same lines: nothing changes
    assert status.dirty == set()
    feed(t, (WORKLOADS, workload("u7", "Failed", components=TRAINER)), (WORKLOADS, workload("u9", deleted=True)))
    # u7's status part and u9's part; the requests of u7 did not change, so their family is untouched
    assert 1 <= len(status.dirty) <= 2 and t.families["workloadmap_workload_requested_gpus"].dirty != set()
    assert len(t.families["workloadmap_workload_requested_gpus"].dirty) == 1   # u9 dropped
    assert gzip.decompress(t.exposition_gzip()) == t.exposition()
    assert value(t, "workloadmap_workload_status", cluster="c1", namespace="ml", workload="wl-u7", kind="PyTorchJob",
                 status="Failed") == 1


# --------------------------------------------------------------------------- serving


def get(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_the_server_serves_metrics_in_the_text_format_gzipped_when_asked_and_ready_only_when_caught_up():
    t = Tracker()
    feed(t, (WORKLOADS, workload("u1")))
    ready = []
    with MetricsServer("127.0.0.1:0", t.exposition_parts, exposition_gzip=t.exposition_gzip,
                       ready=lambda: bool(ready)) as server:
        base = f"http://127.0.0.1:{server.port}"
        status, headers, body = get(base + "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert b'workloadmap_workload_info{cluster="c1",namespace="ml",workload="wl-u1"' in body
        status, headers, zipped = get(base + "/metrics", {"Accept-Encoding": "gzip"})
        assert headers["Content-Encoding"] == "gzip" and gzip.decompress(zipped) == body
        assert get(base + "/healthz")[0] == 200
        assert get(base + "/readyz")[0] == 503
        ready.append(True)
        assert get(base + "/readyz")[0] == 200
        assert get(base + "/nothing")[0] == 404


@pytest.mark.parametrize("text, expected", [("127.0.0.1:9108", ("127.0.0.1", 9108)), (":9108", ("0.0.0.0", 9108)),
                                            ("9108", ("0.0.0.0", 9108)), ("[::1]:9108", ("::1", 9108))])
def test_listen_addresses(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["host:http", "127.0.0.1:70000"])
def test_a_bad_listen_address_says_why(text):
    with pytest.raises(AddressError, match="listen address"):
        parse_address(text)


# --------------------------------------------------------------------------- the sums against a recount

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

POD_EVENTS = st.lists(st.tuples(st.sampled_from(["p1", "p2", "p3", "p4", "p5"]),
                                st.sampled_from(["Pending", "Bound", "Terminated", "deleted"]),
                                st.sampled_from([None, "u1", "u2"]), st.sampled_from(["head", "worker"]),
                                st.integers(0, 8)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(POD_EVENTS)
def test_the_sums_are_always_the_recount_of_each_pods_last_record(events):
    """Whatever order pod records come in, the allocated and pending sums by workload and component are the
    recount of every pod's last record (deleted pods and pods without a workload count nowhere)."""
    t = Tracker()
    last = {}
    for i, (uid, state, owner, comp, gpu) in enumerate(events):
        at = f"2026-12-01T10:{i // 60:02d}:{i % 60:02d}Z"
        record = pod(uid, at, "Terminated" if state == "deleted" else state, deleted=state == "deleted", gpu=gpu,
                     node="n1" if state == "Bound" else None, component=comp,
                     workload=None if owner is None else ("PyTorchJob", f"wl-{owner}", owner))
        feed(t, (PODS, record))
        last[uid] = (state, owner, comp, gpu)
    expected: dict = {}
    for state, owner, comp, gpu in last.values():
        if owner is None or state == "deleted":
            continue
        for scope in ((owner,), (owner, comp)):
            sums = expected.setdefault(scope, {"allocated_pods": 0, "allocated_gpus": 0, "pending_pods": 0,
                                               "pending_gpus": 0})
            if state in ("Bound", "Pending"):
                what = "allocated" if state == "Bound" else "pending"
                sums[f"{what}_pods"] += 1
                sums[f"{what}_gpus"] += gpu
    got: dict = {}
    for (name, labels), v in samples(t).items():
        labels = dict(labels)
        for scope_name in ("workload", "component"):
            prefix = f"workloadmap_{scope_name}_"
            if name.startswith(prefix) and name[len(prefix):] in ("allocated_pods", "allocated_gpus", "pending_pods",
                                                                  "pending_gpus"):
                owner = labels["workload"].removeprefix("wl-")
                scope = (owner,) if scope_name == "workload" else (owner, labels["component"])
                got.setdefault(scope, {})[name[len(prefix):]] = v
    assert got == expected
    assert len(t.pods) == sum(1 for state, *_ in last.values() if state != "deleted")
