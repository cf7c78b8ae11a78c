"""Pod and node records from raw events, on their own (no API server): when a record is emitted,
what a late owner, a re-delivery, a deletion or a malformed object does, and what reaches DuckDB
through the embedded pipeline.  Objects are built field by field, as a controller and a kubelet
would write them; the expected records follow the interface of issue 25 (pod-record.schema.json)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from workloadmap.catalog import records
from workloadmap.embedding import EmbeddedPipeline
from workloadmap.ingest.publishing import event_key
from workloadmap.processors.processing import MemoryStates, Processor

GIB = 2**30


def ref(owner: dict) -> dict:
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True}


def deployment(uid="d1", rv="10"):
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ml", "uid": uid, "resourceVersion": rv, "generation": 1},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}}


def replicaset(owner, uid="r1", rv="11", name="web-7f"):
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": rv,
                         "ownerReferences": [ref(owner)]}}


def pod(uid="p1", rv="12", owner=None, node=None, phase="Pending", gpus=1, name=None, status=True):
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name or f"web-7f-{uid}", "namespace": "ml", "uid": uid, "resourceVersion": rv,
                        "creationTimestamp": "2026-12-01T00:00:00Z"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                                "limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [ref(owner)]
    if node:
        obj["spec"]["nodeName"] = node
    if status:
        obj["status"] = {"phase": phase}
    return obj


def node(name="n1", uid="n1-uid", rv="5", gpus="8", unschedulable=False, ready="True"):
    amounts = {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": gpus}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": uid, "resourceVersion": rv,
                         "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "eks.amazonaws.com/nodegroup": "p5",
                                    "node.kubernetes.io/instance-type": "p5.48xlarge"}},
           "spec": {"unschedulable": unschedulable} if unschedulable else {},
           "status": {"allocatable": amounts, "capacity": amounts,
                      "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]}}


def event(obj, at, etype="MODIFIED"):
    return records.raw_event("c1", etype, obj, at)


class Run:
    """A processor and its state, and every output so far by kind."""

    def __init__(self):
        self.processor, self.states = Processor(), MemoryStates()
        self.pods, self.nodes, self.workloads, self.letters = [], [], [], []

    def feed(self, *events) -> tuple[list, list]:
        new_pods, new_letters = [], []
        for e in events:
            value = e if isinstance(e, bytes) else records.encode(e)
            out = self.processor.process(event_key(e) if isinstance(e, dict) else b"c1/ml", value, self.states)
            new_pods += [json.loads(v) for _, v in out.pods]
            self.nodes += [json.loads(v) for _, v in out.nodes]
            self.workloads += [json.loads(v) for _, v in out.records]
            new_letters += [json.loads(v) for _, v in out.dead_letters]
        self.pods += new_pods
        self.letters += new_letters
        return new_pods, new_letters


SCHEMA = jsonschema.Draft7Validator(records.schema("pod-record"), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
NODE_SCHEMA = jsonschema.Draft7Validator(records.schema("node-record"), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def test_a_pod_record_only_when_a_kept_field_changes():
    """Pending (no node) -> Bound (nodeName set) -> status churn (Ready flips, phase Running) -> Succeeded:
    three records, none for the churn; previousState and stateSince follow the states."""
    run = Run()
    d = deployment()
    rs = replicaset(d)
    run.feed(event(d, "2026-12-01T00:00:00Z", "ADDED"), event(rs, "2026-12-01T00:00:01Z", "ADDED"))
    created, _ = run.feed(event(pod(owner=rs), "2026-12-01T00:00:02Z", "ADDED"))
    bound, _ = run.feed(event(pod(owner=rs, rv="13", node="n1"), "2026-12-01T00:00:05Z"))
    churn, _ = run.feed(event(pod(owner=rs, rv="14", node="n1", phase="Running"), "2026-12-01T00:00:07Z"))
    done, _ = run.feed(event(pod(owner=rs, rv="15", node="n1", phase="Succeeded"), "2026-12-01T01:00:00Z"))
    assert [p["state"] for p in created + bound + churn + done] == ["Pending", "Bound", "Terminated"]
    assert churn == []
    assert [p["previousState"] for p in run.pods] == [None, "Pending", "Bound"]
    assert [p["stateSince"] for p in run.pods] == ["2026-12-01T00:00:02Z", "2026-12-01T00:00:05Z",
                                                   "2026-12-01T01:00:00Z"]
    record = bound[0]
    assert record["workload"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d1"}
    assert (record["framework"], record["definition"], record["component"]) == ("Kubernetes", "deployment", "deployment")
    # 500m CPU, 1 GiB, the GPU limit as its request
    assert (record["gpu"], record["gpuResources"], record["cpu"], record["memory"]) == (1, {"nvidia.com/gpu": 1}, 0.5, GIB)
    for p in run.pods:
        SCHEMA.validate(p)
    # only the Deployment is a workload: the ReplicaSet and the pod are its parts
    assert {w["kind"] for w in run.workloads} == {"Deployment"}


def test_re_delivered_and_older_events_produce_nothing():
    run = Run()
    d, rs = deployment(), None
    rs = replicaset(d)
    first = [event(d, "2026-12-01T00:00:00Z", "ADDED"), event(rs, "2026-12-01T00:00:01Z", "ADDED"),
             event(pod(owner=rs, rv="13", node="n1"), "2026-12-01T00:00:02Z", "ADDED"),
             event(node(), "2026-12-01T00:00:03Z", "ADDED")]
    run.feed(*first)
    counts = (len(run.pods), len(run.nodes), len(run.workloads))
    run.feed(*first)                                                         # the same messages again
    run.feed(event(pod(owner=rs, rv="12"), "2026-12-01T00:00:04Z"))          # an older version
    assert (len(run.pods), len(run.nodes), len(run.workloads)) == counts == (1, 1, 1)


def test_a_pod_before_its_owners_is_attributed_when_they_come():
    """The pod first (workload null), its ReplicaSet (still waiting: for the Deployment), then the
    Deployment: the pod's record with its workload comes in the Deployment event's outputs, observed
    then, same resourceVersion; the pod's state did not change."""
    run = Run()
    d = deployment()
    rs = replicaset(d)
    (early,), _ = run.feed(event(pod(owner=rs, node="n1"), "2026-12-01T00:00:02Z", "ADDED"))
    assert early["workload"] is None and early["state"] == "Bound"
    assert run.feed(event(rs, "2026-12-01T00:00:03Z", "ADDED")) == ([], [])
    (late,), _ = run.feed(event(d, "2026-12-01T00:00:04Z", "ADDED"))
    assert late["workload"]["uid"] == "d1" and late["component"] == "deployment"
    assert (late["observedAt"], late["resourceVersion"], late["state"], late["stateSince"]) == (
        "2026-12-01T00:00:04Z", "12", "Bound", "2026-12-01T00:00:02Z")
    assert not run.states.pods.pending and not run.states.pods.waiting


def test_orphan_pod_is_its_own_workload_and_a_kind_outside_the_catalog_ends_the_chain():
    run = Run()
    (orphan,), _ = run.feed(event(pod(uid="p9", node="n1", name="scratch"), "2026-12-01T00:00:00Z", "ADDED"))
    assert (orphan["workload"]["kind"], orphan["workload"]["uid"], orphan["definition"], orphan["component"]) == (
        "Pod", "p9", "pod", "pod")
    assert [(w["kind"], w["uid"]) for w in run.workloads] == [("Pod", "p9")]
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dcgm", "uid": "ds1"}}
    (agent,), _ = run.feed(event(pod(uid="p8", owner=daemonset, node="n1", gpus=0), "2026-12-01T00:00:00Z", "ADDED"))
    # DaemonSets are no catalog kind: never watched, so the chain ends at the reference, with no definition
    assert (agent["workload"]["kind"], agent["workload"]["name"], agent["framework"], agent["component"]) == (
        "DaemonSet", "dcgm", None, None)
    assert len(run.workloads) == 1


def test_a_rollout_moves_pods_between_two_replicasets_of_one_deployment():
    run = Run()
    d = deployment()
    old, new = replicaset(d, "r1", "11", "web-old"), replicaset(d, "r2", "20", "web-new")
    run.feed(*(event(o, "2026-12-01T00:00:00Z", "ADDED") for o in (d, old, new)))
    run.feed(event(pod("p1", "21", old, "n1", "Running"), "2026-12-01T00:00:01Z", "ADDED"),
             event(pod("p2", "22", new, "n2", "Running"), "2026-12-01T00:00:02Z", "ADDED"),
             event(pod("p1", "23", old, "n1", "Running"), "2026-12-01T00:00:03Z", "DELETED"),
             event(old, "2026-12-01T00:00:04Z", "DELETED"))
    by_uid = {}
    for p in run.pods:
        by_uid.setdefault(p["uid"], []).append((p["state"], p["workload"]["uid"]))
    assert by_uid == {"p1": [("Bound", "d1"), ("Terminated", "d1")], "p2": [("Bound", "d1")]}
    assert run.pods[-1]["deleted"] is True or run.pods[-2]["deleted"] is True


def test_a_terminating_pod_whose_owner_went_first_keeps_its_workload():
    """Garbage collection deletes the ReplicaSet before its pods: the pod's last records stay its Deployment's."""
    run = Run()
    d = deployment()
    rs = replicaset(d)
    run.feed(event(d, "2026-12-01T00:00:00Z", "ADDED"), event(rs, "2026-12-01T00:00:00Z", "ADDED"),
             event(pod(owner=rs, node="n1", phase="Running"), "2026-12-01T00:00:01Z", "ADDED"),
             event(rs, "2026-12-01T00:00:02Z", "DELETED"))
    (failed,), _ = run.feed(event(pod(owner=rs, rv="30", node="n1", phase="Failed"), "2026-12-01T00:00:03Z"))
    (gone,), _ = run.feed(event(pod(owner=rs, rv="31", node="n1", phase="Failed"), "2026-12-01T00:00:04Z", "DELETED"))
    assert failed["workload"]["uid"] == gone["workload"]["uid"] == "d1"
    assert (gone["state"], gone["deleted"]) == ("Terminated", True)


def test_an_adopted_workload_ends_and_its_owner_takes_its_pods():
    """A loose Deployment is a workload until a controller adopts it (its owner counts its pods from then)."""
    run = Run()
    d = deployment()
    run.feed(event(d, "2026-12-01T00:00:00Z", "ADDED"))
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "llm", "namespace": "ml", "uid": "i1", "resourceVersion": "40"},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "vllm"}}}}}
    adopted = deployment(rv="41")
    adopted["metadata"]["ownerReferences"] = [ref(isvc)]
    run.feed(event(isvc, "2026-12-01T00:00:01Z", "ADDED"), event(adopted, "2026-12-01T00:00:02Z"))
    (ended,) = [w for w in run.workloads if w["uid"] == "d1" and w["deleted"]]
    assert ended["status"] == records.DELETED
    pods, _ = run.feed(event(replicaset(adopted, rv="42"), "2026-12-01T00:00:03Z", "ADDED"),
                       event(pod(owner=replicaset(adopted), rv="43", node="n1"), "2026-12-01T00:00:03Z", "ADDED"))
    assert [(p["workload"]["kind"], p["workload"]["uid"], p["definition"]) for p in pods] == [
        ("InferenceService", "i1", "inferenceservice")]


def _ready(obj: dict, ready: str) -> dict:
    """The kubelet's readiness update of a pod (a condition flipped: nothing a record keeps)."""
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": ready}]
    return obj


def test_status_churn_after_an_owner_link_changed_attributes_the_pod_again():
    """A ReplicaSet adopted by another Deployment (its controller reference changed): the pod's next
    event, a readiness flip, is attributed through the new link, so its record names the new workload;
    the readiness flips before and after it make none."""
    run = Run()
    d1, d2 = deployment("d1"), deployment("d2", "20")
    d2["metadata"]["name"] = "web-2"
    rs = replicaset(d1)
    run.feed(*(event(o, "2026-12-01T00:00:00Z", "ADDED") for o in (d1, d2, rs)))
    (bound,), _ = run.feed(event(pod(owner=rs, rv="30", node="n1", phase="Running"), "2026-12-01T00:00:01Z", "ADDED"))
    assert bound["workload"]["uid"] == "d1"
    churn, _ = run.feed(event(_ready(pod(owner=rs, rv="31", node="n1", phase="Running"), "True"), "2026-12-01T00:00:02Z"))
    assert churn == []
    run.feed(event(replicaset(d2, rv="32"), "2026-12-01T00:00:03Z"))
    (moved,), _ = run.feed(event(_ready(pod(owner=rs, rv="33", node="n1", phase="Running"), "False"),
                                 "2026-12-01T00:00:04Z"))
    assert (moved["workload"]["uid"], moved["state"], moved["resourceVersion"]) == ("d2", "Bound", "33")
    again, _ = run.feed(event(_ready(pod(owner=rs, rv="34", node="n1", phase="Running"), "True"), "2026-12-01T00:00:05Z"))
    assert again == []


def test_status_churn_with_a_new_request_or_phase_class_makes_a_record():
    """After readiness flips (no record), a pod resized in place (its GPU limit 1 -> 2) makes a record
    with the new request, and its Succeeded phase one with state Terminated."""
    run = Run()
    d = deployment()
    rs = replicaset(d)
    run.feed(event(d, "2026-12-01T00:00:00Z", "ADDED"), event(rs, "2026-12-01T00:00:00Z", "ADDED"))
    run.feed(event(pod(owner=rs, rv="30", node="n1", phase="Running"), "2026-12-01T00:00:01Z", "ADDED"))
    assert run.feed(event(_ready(pod(owner=rs, rv="31", node="n1", phase="Running"), "True"),
                          "2026-12-01T00:00:02Z"))[0] == []
    (resized,), _ = run.feed(event(_ready(pod(owner=rs, rv="32", node="n1", phase="Running", gpus=2), "True"),
                                   "2026-12-01T00:00:03Z"))
    assert (resized["gpu"], resized["state"]) == (2, "Bound")
    (done,), _ = run.feed(event(_ready(pod(owner=rs, rv="33", node="n1", phase="Succeeded", gpus=2), "False"),
                                "2026-12-01T00:00:04Z"))
    assert (done["state"], done["gpu"]) == ("Terminated", 2)


@pytest.mark.parametrize("obj, field", [
    (pod(node=7), "spec.nodeName must be a string"),
    (pod(phase="Sleeping"), "status.phase 'Sleeping' is not one of"),
    ({**pod(), "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}, "spec.containers[0].resources.requests[cpu] 'lots' is not a"),
    ({**pod(), "spec": {"containers": "c"}}, "spec.containers must be a list"),
    ({**pod(), "metadata": {"uid": "p1", "name": "x"}}, "metadata.namespace must be a non-empty string"),
    (pod(gpus=-2), "spec.containers[0].resources.limits[nvidia.com/gpu] '-2' is negative"),
    ({**pod(), "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "12Qi"}}}]}},
     "spec.containers[0].resources.requests[memory] '12Qi' is not a Kubernetes quantity"),
    (node(gpus="eight"), "status.allocatable['nvidia.com/gpu']"),
    (node(gpus="-8"), "status.allocatable['nvidia.com/gpu'] '-8' is negative"),
    ({**node(), "status": {"capacity": {"cpu": "-1"}}}, "status.capacity['cpu'] '-1' is negative"),
    ({**node(), "spec": {"unschedulable": "yes"}}, "spec.unschedulable must be a boolean"),
])
def test_a_malformed_pod_or_node_is_a_dead_letter_naming_it_and_the_stream_goes_on(obj, field):
    run = Run()
    _, (letter,) = run.feed(event(obj, "2026-12-01T00:00:00Z", "ADDED"))
    kind = obj["kind"].lower()
    assert letter["reason"] == f"malformed-{kind}" and letter["stage"] == "processor"
    assert letter["detail"].startswith(f"{kind} c1/") and field in letter["detail"], letter["detail"]
    (fine,), letters = run.feed(event(pod(uid="p2"), "2026-12-01T00:00:01Z", "ADDED"))
    assert letters == [] and fine["uid"] == "p2"


@pytest.mark.parametrize("obj, named", [
    ({**pod(), "metadata": {"name": "x", "namespace": "ml", "resourceVersion": "3"}}, "Pod c1/ml/x"),
    ({**node(), "metadata": {"name": "n2", "resourceVersion": "3"}}, "Node c1/n2"),
])
def test_a_pod_or_node_without_a_uid_is_a_dead_letter_naming_it(obj, named):
    """The uid keys a pod's (node's) state and intervals: without it the event is refused, naming the
    object it came from, and the next one goes through."""
    run = Run()
    _, (letter,) = run.feed(event(obj, "2026-12-01T00:00:00Z", "ADDED"))
    assert (letter["reason"], letter["detail"]) == (records.MISSING_FIELDS, f"{named}: object.metadata lacks uid")
    (fine,), letters = run.feed(event(pod(uid="p2"), "2026-12-01T00:00:01Z", "ADDED"))
    assert letters == [] and fine["uid"] == "p2"


def test_node_records_on_kept_changes_only():
    run = Run()
    run.feed(event(node(), "2026-12-01T00:00:00Z", "ADDED"),
             event({**node(rv="6"), "status": {**node()["status"], "conditions": [
                 {"type": "MemoryPressure", "status": "True"}, {"type": "Ready", "status": "True"}]}},
                   "2026-12-01T00:01:00Z"),                                      # not kept: no record
             event(node(rv="7", unschedulable=True), "2026-12-01T00:02:00Z"),    # cordoned
             event(node(rv="8", unschedulable=True, ready="False"), "2026-12-01T00:03:00Z"),
             event(node(rv="9", unschedulable=True, ready="False"), "2026-12-01T00:04:00Z", "DELETED"))
    assert [(n["unschedulable"], n["ready"], n["deleted"]) for n in run.nodes] == [
        (False, True, False), (True, True, False), (True, False, False), (True, False, True)]
    first = run.nodes[0]
    assert first["allocatable"] == {"gpu": 8, "gpuResources": {"nvidia.com/gpu": 8}, "cpu": 96, "memory": 2**40}
    assert first["labels"] == {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "instanceType": "p5.48xlarge",
                               "nodePool": "p5", "zone": None}
    for n in run.nodes:
        NODE_SCHEMA.validate(n)


def test_the_embedded_pipeline_writes_pods_and_nodes_with_the_late_workload(tmp_path):
    """Through DuckDB: the pod seen before its owners has one interval, Bound on n1, whose workload is
    the Deployment (its owner's late record completes it: same pod resourceVersion)."""
    d = deployment()
    rs = replicaset(d)
    with EmbeddedPipeline.open(tmp_path / "w.duckdb") as pipeline:
        pipeline.feed([event(node(), "2026-12-01T00:00:00Z", "ADDED"),
                       event(pod(owner=rs, node="n1", phase="Running"), "2026-12-01T00:00:01Z", "ADDED"),
                       event(rs, "2026-12-01T00:00:02Z", "ADDED"), event(d, "2026-12-01T00:00:03Z", "ADDED")])
        pipeline.flush()
        assert pipeline.dead_letters == []
        rows = pipeline.warehouse.cursor().execute(
            "SELECT uid, state, node, workload_kind, workload_uid, component, gpus FROM pod_intervals").fetchall()
        assert rows == [("p1", "Bound", "n1", "Deployment", "d1", "deployment", 1.0)]
        nodes = pipeline.warehouse.cursor().execute("SELECT name, gpus, unschedulable FROM node_current").fetchall()
        assert nodes == [("n1", 8.0, False)]
        assert (pipeline.counts["pods"], pipeline.counts["nodes"]) == (2, 1)
