"""ingest/scheduling.py: the simulator's nodes, intermediate owners and pods are consistent with its
workloads and with a cluster's rules (checked on the stream itself, not on the code's bookkeeping)."""

from __future__ import annotations

import collections

import pytest

from workloadmap.catalog import records
from workloadmap.catalog.quantities import milli_value
from workloadmap.ingest.scheduling import scheduling
from workloadmap.ingest.simulating import simulate

CLUSTERS = ["prod-us-east", "prod-eu-west", "research"]
START = int(records.parse_time("2026-11-01T00:00:00Z").timestamp() * 1000)


@pytest.fixture(scope="module")
def stream():
    workloads = list(simulate(clusters=3, workloads=80, days=4, seed=11))
    return workloads, list(scheduling(workloads, clusters=CLUSTERS, start_ms=START, days=4, seed=11,
                                      nodes_per_cluster=12))


def test_events_are_raw_kubernetes_objects_in_time_order(stream):
    _, events = stream
    assert [e["observedAt"] for e in events] == sorted(e["observedAt"] for e in events)
    assert all(set(e) == {"cluster", "type", "observedAt", "object"} for e in events)


def test_the_same_seed_gives_the_same_stream():
    workloads = list(simulate(clusters=2, workloads=20, days=2, seed=3))
    once = list(scheduling(workloads, clusters=CLUSTERS[:2], start_ms=START, days=2, seed=3))
    again = list(scheduling(workloads, clusters=CLUSTERS[:2], start_ms=START, days=2, seed=3))
    assert once == again


def test_every_pod_leads_through_controller_owners_to_a_simulated_workload(stream):
    workloads, events = stream
    roots = {w.event["object"]["metadata"]["uid"] for w in workloads if w.event is not None}
    owners = {}
    for e in events:
        meta = e["object"]["metadata"]
        if e["object"]["kind"] not in ("Pod", "Node") and meta.get("ownerReferences"):
            owners[meta["uid"]] = meta["ownerReferences"][0]
    pods = [e for e in events if e["object"]["kind"] == "Pod"]
    assert pods
    for e in pods:
        if not e["object"]["metadata"].get("ownerReferences"):  # a bare Pod the simulator runs as a workload
            assert e["object"]["metadata"]["uid"] in roots
            continue
        ref = e["object"]["metadata"]["ownerReferences"][0]
        assert ref["controller"] is True
        uid, hops = ref["uid"], 0
        while uid in owners:
            uid, hops = owners[uid]["uid"], hops + 1
        assert uid in roots and hops <= 3
    kinds = {e["object"]["kind"] for e in events}
    assert {"ReplicaSet", "Job", "StatefulSet", "RayCluster"} <= kinds


def test_no_node_ever_holds_more_gpus_than_it_has_and_cordoned_or_lost_nodes_get_no_new_pods(stream):
    _, events = stream
    allocatable, held, bound, closed = {}, collections.Counter(), {}, set()
    cordoned, lost = set(), set()
    for e in events:
        obj = e["object"]
        if obj["kind"] == "Node":
            name = obj["metadata"]["name"]
            gpus = sum(float(v) for k, v in obj["status"]["allocatable"].items() if k.startswith("nvidia.com/"))
            allocatable[name] = gpus
            if obj["spec"].get("unschedulable"):
                cordoned.add(name)
            if e["type"] == "DELETED":
                lost.add(name)
            continue
        if obj["kind"] != "Pod" or not obj["metadata"].get("ownerReferences"):
            continue  # (a bare Pod workload of the simulator keeps its example's node)
        uid, node = obj["metadata"]["uid"], obj["spec"].get("nodeName")
        gpus = sum(milli_value(v) / 1000 for k, v in obj["spec"]["containers"][0]["resources"]["requests"].items()
                   if k.startswith("nvidia.com/"))
        ended = e["type"] == "DELETED" or obj["status"]["phase"] in ("Succeeded", "Failed")
        if node and uid not in bound and not ended:
            assert node not in cordoned and node not in lost, f"{obj['metadata']['name']} bound to {node}"
            bound[uid] = (node, gpus)
            held[node] += gpus
            assert held[node] <= allocatable[node], f"{node} over-committed"
        if ended and uid in bound and uid not in closed:
            closed.add(uid)
            held[bound[uid][0]] -= bound[uid][1]
    assert cordoned and lost


def test_some_pods_wait_for_capacity_and_the_lost_nodes_pods_are_evicted(stream):
    _, events = stream
    first_pending, bound_at = {}, {}
    for e in events:
        obj = e["object"]
        if obj["kind"] != "Pod":
            continue
        uid = obj["metadata"]["uid"]
        if e["type"] == "ADDED":
            first_pending[uid] = e["observedAt"]
        if obj["spec"].get("nodeName") and uid not in bound_at:
            bound_at[uid] = e["observedAt"]
    never = set(first_pending) - set(bound_at)
    assert never, "no pod ever waited for capacity"
    evicted = [e for e in events if e["object"]["kind"] == "Pod" and e["object"]["status"].get("reason") == "Evicted"]
    assert evicted


def test_without_a_node_count_each_gpu_pool_holds_nine_tenths_of_its_clusters_peak_demand():
    """The pools are sized from the workloads (FILL of the peak): derived here from the pod stream alone, the
    peak of the GPUs its live pods ask for, per cluster and GPU resource, after each instant's events."""
    workloads = list(simulate(clusters=2, workloads=60, days=3, seed=5))
    events = list(scheduling(workloads, clusters=CLUSTERS[:2], start_ms=START, days=3, seed=5))
    per_node, nodes = {}, collections.Counter()
    live: dict[str, tuple] = {}
    demand, peak = collections.Counter(), collections.Counter()
    last = None
    for e in events + [None]:
        if e is None or e["observedAt"] != last:
            for key, gpus in demand.items():
                peak[key] = max(peak[key], gpus)
            if e is None:
                break
            last = e["observedAt"]
        obj = e["object"]
        if obj["kind"] == "Node" and e["type"] == "ADDED":
            for resource, amount in obj["status"]["allocatable"].items():
                if resource.startswith("nvidia.com/"):
                    per_node[e["cluster"], resource] = int(amount)
                    nodes[e["cluster"], resource] += 1
        if obj["kind"] != "Pod" or not obj["metadata"].get("ownerReferences"):
            continue
        uid = obj["metadata"]["uid"]
        requests = obj["spec"]["containers"][0]["resources"]["requests"]
        gpu = [(k, milli_value(v) / 1000) for k, v in requests.items() if k.startswith("nvidia.com/")]
        ended = e["type"] == "DELETED" or obj["status"]["phase"] in ("Succeeded", "Failed")
        if not ended and uid not in live and gpu:
            live[uid] = (e["cluster"], *gpu[0])
            demand[e["cluster"], gpu[0][0]] += gpu[0][1]
        elif ended and uid in live:
            cluster, resource, gpus = live.pop(uid)
            demand[cluster, resource] -= gpus
    assert peak and set(peak) <= set(nodes), "every GPU resource a pod asks for is offered by a pool"
    for key, most in peak.items():
        assert nodes[key] == max(1, -(-0.9 * most // per_node[key])), key


@pytest.fixture(scope="module")
def kubelet_stream():
    workloads = list(simulate(clusters=2, workloads=30, days=2, seed=5))
    return list(scheduling(workloads, clusters=CLUSTERS[:2], start_ms=START, days=2, seed=5, nodes_per_cluster=40,
                           kubelet=True))


def _life(event) -> tuple:
    """What a pod event shows of a pod's life: (type, phase, on a node, Ready, deletion asked)."""
    obj = event["object"]
    ready = next((c["status"] for c in obj["status"].get("conditions", ()) if c["type"] == "Ready"), None)
    return (event["type"], obj["status"]["phase"], bool(obj["spec"].get("nodeName")), ready,
            "deletionTimestamp" in obj["metadata"])


def test_with_the_kubelet_a_bound_pod_goes_through_the_kubelets_updates_in_order(kubelet_stream):
    by_pod = collections.defaultdict(list)
    for e in kubelet_stream:
        if e["object"]["kind"] == "Pod" and e["object"]["metadata"].get("ownerReferences"):
            by_pod[e["object"]["metadata"]["uid"]].append(e)
    # a kubelet's sequence (kubernetes.io pod lifecycle): bound by the scheduler, containers created
    # (Pending, not ready), Running not ready, Ready; ended by its phase; deletion asked, then gone
    started = [("ADDED", "Pending", False, None, False), ("MODIFIED", "Pending", True, None, False),
               ("MODIFIED", "Pending", True, "False", False), ("MODIFIED", "Running", True, "False", False),
               ("MODIFIED", "Running", True, "True", False)]
    lived = [events for events in by_pod.values() if len(events) == 8]
    assert lived, "no pod went through a whole life"
    for events in lived:
        assert [_life(e) for e in events[:5]] == started
        phase = events[5]["object"]["status"]["phase"]
        assert phase in ("Succeeded", "Failed")
        assert [_life(e) for e in events[5:]] == [("MODIFIED", phase, True, None, False),
                                                  ("MODIFIED", phase, True, None, True),
                                                  ("DELETED", phase, True, None, True)]
    for events in by_pod.values():
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert versions == sorted(versions) and len(set(versions)) == len(versions)
        assert [e["observedAt"] for e in events] == sorted(e["observedAt"] for e in events)


def test_the_kubelets_updates_make_no_pod_record(kubelet_stream):
    from workloadmap.processors.processing import MemoryStates, Processor
    from workloadmap.ingest.publishing import event_key

    processor, states = Processor(), MemoryStates()
    recorded, updates = set(), set()
    for e in kubelet_stream:
        out = processor.process(event_key(e), records.encode(e), states)
        for _, value in out.pods:
            record = records.decode(value)
            recorded.add((record["cluster"], record["uid"], record["resourceVersion"]))
        meta = e["object"]["metadata"]
        if e["object"]["kind"] != "Pod" or not meta.get("ownerReferences"):
            continue   # (a bare Pod workload of the simulator is an example object, not a scheduled pod)
        life = _life(e)
        if life[3] is not None or (life[4] and life[0] == "MODIFIED"):   # Ready set, or the deletion asked
            updates.add((e["cluster"], meta["uid"], meta["resourceVersion"]))
    assert updates and not updates & recorded
