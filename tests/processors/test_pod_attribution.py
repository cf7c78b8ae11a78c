"""Pods attributed to their workloads through real owner chains, from a real kube-apiserver.

Objects and pods are created in the test API server as their controllers would create them (no
controller, scheduler or kubelet runs: pods are bound through the binding subresource and their
status written as a kubelet would); the cluster watcher publishes them, and the processors turn
the recorded raw events into pod and node records.  Expected workloads, components, instances
and replicas are derived by hand from the built-in definitions' pod selectors (catalog/builtin).
"""

from __future__ import annotations

import json

from tests import kube_objects as k
from tests.ingest.test_watching import Recorder, start, wait_for
from workloadmap.catalog import records
from workloadmap.ingest.publishing import event_key
from workloadmap.processors.processing import MemoryStates, Processor


def process(events, processor=None, states=None):
    """Pod and node records, workload records and dead letters of raw events, in this order."""
    processor, states = processor or Processor(), states if states is not None else MemoryStates()
    pods, nodes, workloads, letters = [], [], [], []
    for event in events:
        out = processor.process(event_key(event), records.encode(event), states)
        pods += [json.loads(v) for _, v in out.pods]
        nodes += [json.loads(v) for _, v in out.nodes]
        workloads += [json.loads(v) for _, v in out.records]
        letters += [json.loads(v) for _, v in out.dead_letters]
    return pods, nodes, workloads, letters


def latest(pods):
    return {p["name"]: p for p in pods}


def where(record):
    workload = record["workload"]
    return (workload and workload["kind"], workload and workload["name"], record["component"], record["instance"],
            record["replica"])


def test_pods_are_attributed_through_their_real_owner_chains(kube_cluster):
    ns = k.namespace(kube_cluster, "pods")
    kube = kube_cluster
    recorder = Recorder()
    with start(kube, recorder) as watching:
        k.node(kube, f"{ns}-gpu-a", gpus=8, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                    "karpenter.sh/nodepool": "h100", "topology.kubernetes.io/zone": "z1"})
        # a Deployment rolled out: two ReplicaSets, a pod in each (the old one terminating)
        deployment = k.create(kube, k.example("Deployment", "embedding-server"), ns)
        old_rs, new_rs = (kube.request("POST", f"/apis/apps/v1/namespaces/{ns}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"embedding-server-{h}", "ownerReferences": [k.owner_reference(deployment)]},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "embedding", "hash": h}},
                     "template": {"metadata": {"labels": {"app": "embedding", "hash": h}},
                                  "spec": {"containers": [{"name": "main", "image": "x"}]}}}}) for h in ("aaa", "bbb"))
        old_pod = k.create_pod(kube, k.pod("embedding-server-aaa-1", owner=old_rs, gpus=1), ns)
        new_pod = k.create_pod(kube, k.pod("embedding-server-bbb-1", owner=new_rs, gpus=1), ns)
        # a JobSet's Job and its pod, labelled as the JobSet controller labels them
        jobset = k.create(kube, k.example("JobSet", "llama-pretrain"), ns)
        job = k.create(kube, k.example("Job", "bert-distill"), ns, with_status=False, owner=jobset, name="llama-workers-1")
        js_pod = k.create_pod(kube, k.pod("llama-workers-1-0", owner=job, gpus=8, labels={
            "jobset.sigs.k8s.io/jobset-name": "llama-pretrain", "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": "1"}), ns)
        # a LeaderWorkerSet's worker StatefulSet and a worker pod of group 2
        lws = k.create(kube, k.example("LeaderWorkerSet"), ns)
        sts = kube.request("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", {
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "lws-2", "ownerReferences": [k.owner_reference(lws)]},
            "spec": {"replicas": 1, "serviceName": "lws", "selector": {"matchLabels": {"g": "2"}},
                     "template": {"metadata": {"labels": {"g": "2"}}, "spec": {"containers": [{"name": "w", "image": "x"}]}}}})
        worker = k.pod("lws-2-1", owner=sts, gpus=4, labels={"leaderworkerset.sigs.k8s.io/group-index": "2",
                                                             "leaderworkerset.sigs.k8s.io/worker-index": "1"})
        worker["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/leader-name": "lws-2",
                                             "unread.example.com/note": "not read by any selector"}
        lws_pod = k.create_pod(kube, worker, ns)
        # a Grove PodCliqueSet's standalone PodClique and a pod of it
        pcs = k.create(kube, k.example("PodCliqueSet"), ns)
        pcs_name = pcs["metadata"]["name"]
        clique = kube.request("POST", f"/apis/grove.io/v1alpha1/namespaces/{ns}/podcliques", {
            "apiVersion": "grove.io/v1alpha1", "kind": "PodClique",
            "metadata": {"name": f"{pcs_name}-0-frontend", "ownerReferences": [k.owner_reference(pcs)]},
            "spec": {"replicas": 2}})
        grove_pod = k.create_pod(kube, k.pod(f"{pcs_name}-0-frontend-1", owner=clique, gpus=2, labels={
            "app.kubernetes.io/component": "pcs-podclique", "app.kubernetes.io/part-of": pcs_name,
            "grove.io/podclique": f"{pcs_name}-0-frontend", "grove.io/podcliqueset-replica-index": "0",
            "grove.io/podclique-pod-index": "1"}), ns)
        # a pod no controller owns, pending (nothing binds it)
        orphan = k.create_pod(kube, k.pod("scratch", gpus=1), ns)
        for pod in (old_pod, new_pod, js_pod, lws_pod, grove_pod):
            k.bind(kube, pod, f"{ns}-gpu-a")
        wait_for(lambda: sum(1 for e in recorder.full(ns) if e["object"]["kind"] == "Pod"
                             and (e["object"].get("status") or {}).get("phase") == "Running") >= 5,
                 what="the bound pods")
        wait_for(lambda: {"apps/ReplicaSet", "apps/StatefulSet", "grove.io/PodClique", "batch/Job"}
                 <= set(watching.clusters[0].watchers), what="the owner kinds the pods named")
        wait_for(lambda: {"embedding-server-aaa", "lws-2", f"{pcs_name}-0-frontend"}
                 <= {e["object"]["metadata"]["name"] for e in recorder.full(ns)}, what="the owners")
    events = [e for e in recorder.events
              if e["object"]["metadata"].get("namespace") == ns or e["object"]["metadata"].get("name") == f"{ns}-gpu-a"]
    pods, nodes, workloads, letters = process(events)
    assert letters == []
    by_name = latest(pods)
    # deployment.yaml: one untyped component "deployment", no instance or replica selector
    assert where(by_name["embedding-server-aaa-1"]) == ("Deployment", "embedding-server", "deployment", None, None)
    assert where(by_name["embedding-server-bbb-1"]) == ("Deployment", "embedding-server", "deployment", None, None)
    # jobset.yaml: type key jobset-name (component "replicatedjob"), instance replicatedjob-name, replica job-index
    assert where(by_name["llama-workers-1-0"]) == ("JobSet", "llama-pretrain", "replicatedjob", "workers", "1")
    # leaderworkerset.yaml: the worker's type key is the leader-name annotation; replica the group index
    assert where(by_name["lws-2-1"]) == ("LeaderWorkerSet", lws["metadata"]["name"], "worker", None, "2")
    # podcliqueset.yaml: component label pcs-podclique, instance = podclique minus "<pcs>-<replica>-", replica pod index
    assert where(by_name[f"{pcs_name}-0-frontend-1"]) == ("PodCliqueSet", pcs_name, "clique", "frontend", "1")
    # no controller: its own workload, through pod.yaml
    assert where(by_name["scratch"]) == ("Pod", "scratch", "pod", None, None)
    assert by_name["scratch"]["state"] == "Pending" and by_name["scratch"]["nodeName"] is None
    for name in ("embedding-server-aaa-1", "llama-workers-1-0", "lws-2-1"):
        assert by_name[name]["state"] == "Bound" and by_name[name]["nodeName"] == f"{ns}-gpu-a"
    assert (by_name["llama-workers-1-0"]["gpu"], by_name["llama-workers-1-0"]["gpuResources"]) == (8, {"nvidia.com/gpu": 8})
    assert (by_name["lws-2-1"]["cpu"], by_name["lws-2-1"]["memory"]) == (1, 2**30)
    # only the top-level workloads and the orphan pod are workloads: no record of a ReplicaSet, Job,
    # StatefulSet or PodClique, nor of a pod a controller owns
    kinds = {(w["kind"], w["name"]) for w in workloads}
    assert kinds == {("Deployment", "embedding-server"), ("JobSet", "llama-pretrain"),
                     ("LeaderWorkerSet", lws["metadata"]["name"]), ("PodCliqueSet", pcs_name), ("Pod", "scratch")}
    # the node: what a kubelet reported, the grouping labels
    (node,) = {n["name"]: n for n in nodes}.values()
    assert node["allocatable"] == {"gpu": 8, "gpuResources": {"nvidia.com/gpu": 8}, "cpu": 96, "memory": 2**40}
    assert node["ready"] is True and node["unschedulable"] is False
    assert node["labels"] == {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "instanceType": None, "nodePool": "h100",
                              "zone": "z1"}
    # what travelled of a pod: never env, volumes, command or args; the annotation a selector reads, not another
    published = [e["object"] for e in events if e["object"]["kind"] == "Pod"]
    text = json.dumps(published)
    assert "hunter2" not in text and "volumes" not in text and "train.py" not in text and '"command"' not in text
    lws_published = next(p for p in published if p["metadata"]["name"] == "lws-2-1")
    assert lws_published["metadata"]["annotations"] == {"leaderworkerset.sigs.k8s.io/leader-name": "lws-2"}
    # (the API server defaults a request from its limit)
    assert lws_published["spec"]["containers"] == [{"name": "main", "resources": {
        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}]
    # a pod seen before its owners (the same events, every pod first) ends with the same attribution
    reordered = sorted(events, key=lambda e: e["object"]["kind"] != "Pod")
    again, _, _, letters = process(reordered)
    assert letters == []
    assert {n: where(p) for n, p in latest(again).items()} == {n: where(p) for n, p in by_name.items()}
    first = next(p for p in again if p["name"] == "llama-workers-1-0")
    assert first["workload"] is None   # published while its Job had not come


def _owned(kube, ns: str, api_version: str, kind: str, name: str, owner: dict) -> dict:
    """An intermediate owner as its controller would create it: a minimal valid object of its kind."""
    template = {"metadata": {"labels": {"owner": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}]}}
    spec = {"Deployment": {"replicas": 0, "selector": {"matchLabels": {"owner": name}}, "template": template},
            "ReplicaSet": {"replicas": 0, "selector": {"matchLabels": {"owner": name}}, "template": template},
            "StatefulSet": {"replicas": 0, "serviceName": name, "selector": {"matchLabels": {"owner": name}},
                            "template": template},
            "Job": {"suspend": True, "template": {"spec": {**template["spec"], "restartPolicy": "Never"}}},
            }.get(kind, {})
    body = {"apiVersion": api_version, "kind": kind, "spec": spec,
            "metadata": {"name": name, "ownerReferences": [k.owner_reference(owner)]}}
    return kube.request("POST", k.plural_path(body, ns), body)


# The owners real controllers put between a workload and its pods (the operators' sources: a KServe raw
# deployment's Deployment, a NIMService's Deployment, Milvus's component Deployments, each with their
# ReplicaSets; KubeRay's RayCluster of a RayJob or RayService; a CronJob's Jobs; Dynamo's PodCliqueSet
# on Grove, with its PodCliques; pods a PyTorchJob, MPIJob, RayCluster, Job or StatefulSet owns directly).
CHAINS = {
    "StatefulSet": (), "Job": (), "PyTorchJob": (), "MPIJob": (), "RayCluster": (),
    "CronJob": (("batch/v1", "Job"),),
    "RayJob": (("ray.io/v1", "RayCluster"),), "RayService": (("ray.io/v1", "RayCluster"),),
    "InferenceService": (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
    "NIMService": (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
    "Milvus": (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
    "DynamoGraphDeployment": (("grove.io/v1alpha1", "PodCliqueSet"), ("grove.io/v1alpha1", "PodClique")),
}


def test_every_kinds_pods_reach_their_workload_through_its_real_chain(kube_cluster):
    """One workload of each kind above, its chain of owners, one pod at the end (bound), created in the
    API server in that order; the processors see the recorded events with every pod first (the worst
    order): each pod's workload is the top of its chain, and only the tops are workloads."""
    kube = kube_cluster
    ns = k.namespace(kube, "chains")
    recorder = Recorder()
    expected = {}
    with start(kube, recorder):
        k.node(kube, f"{ns}-n", gpus=8)
        for kind, chain in CHAINS.items():
            top = k.create(kube, k.example(kind), ns)
            owner = top
            for i, (api_version, owner_kind) in enumerate(chain):
                owner = _owned(kube, ns, api_version, owner_kind, f"{kind.lower()}-{i}", owner)
            pod = k.create_pod(kube, k.pod(f"{kind.lower()}-pod", owner=owner, gpus=1), ns)
            k.bind(kube, pod, f"{ns}-n")
            expected[pod["metadata"]["name"]] = (kind, top["metadata"]["name"], top["metadata"]["uid"])
        wait_for(lambda: {e["object"]["metadata"]["name"] for e in recorder.full(ns)} >= set(expected)
                 | {f"{kind.lower()}-{i}" for kind, chain in CHAINS.items() for i in range(len(chain))},
                 what="every pod and owner")
        wait_for(lambda: sum(1 for e in recorder.full(ns) if e["object"]["kind"] == "Pod"
                             and (e["object"].get("status") or {}).get("phase") == "Running") >= len(expected),
                 what="the bound pods")
    events = [e for e in recorder.events if e["object"]["metadata"].get("namespace") == ns]
    pods_first = sorted(events, key=lambda e: e["object"]["kind"] != "Pod")
    for order in (events, pods_first):
        pods, _, workloads, letters = process(order)
        assert letters == []
        found = {name: (p["workload"]["kind"], p["workload"]["name"], p["workload"]["uid"])
                 for name, p in latest(pods).items()}
        assert found == expected
        assert all(p["state"] == "Bound" for p in latest(pods).values())
        assert {(w["kind"], w["name"]) for w in workloads} == {(kind, name) for kind, name, _ in expected.values()}
