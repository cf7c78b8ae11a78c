"""Gang minimums counted per gang key, kind by kind, against how the controllers and KAI
Scheduler's pod grouper (pkg/podgrouper/podgrouper/plugins) size the same gangs.

Each case builds the pods a controller creates for an object (labels as the controller sets
them), groups them through the built-in definition and checks every gang's key and minimum.
Where our instruction and KAI's plugin differ, the comment says how.
"""

from __future__ import annotations

import copy

from workloadmap.catalog.pods import gang_groups

from tests.conftest import example_objects


def _pod(name: str, labels: dict, annotations: dict | None = None, owner: tuple | None = None) -> dict:
    meta = {"name": name, "namespace": "ml", "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": owner[0], "name": owner[1], "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "main"}]}}


def _gangs(catalog, definition: str, obj: dict, pods: list[dict]) -> dict:
    groups = gang_groups(catalog.get(definition), catalog.resolve(obj), pods)
    return {(g.pod_group, g.key): (len(g.pods), g.min_member) for g in groups}


# -- JobSet: one gang of every replicated Job's pods (KAI: replicas x min(parallelism, completions)
#    per replicated job, summed; our Job pods are the same count) ---------------------------------

def test_jobset(catalog):
    obj = example_objects("jobset")["llama-pretrain"]          # driver 1 x 1 pod, workers 2 x 4 pods
    pods = [_pod(f"llama-pretrain-{rj}-{j}-{p}", {
        "jobset.sigs.k8s.io/jobset-name": "llama-pretrain", "jobset.sigs.k8s.io/replicatedjob-name": rj,
        "jobset.sigs.k8s.io/job-index": str(j), "jobset.sigs.k8s.io/restart-attempt": "0"})
        for rj, jobs, per in (("driver", 1, 1), ("workers", 2, 4)) for j in range(jobs) for p in range(per)]
    assert _gangs(catalog, "jobset", obj, pods) == {("jobset", "llama-pretrain/0"): (9, 9)}
    # the driver's pod not created yet: the gang still needs it
    assert _gangs(catalog, "jobset", obj, pods[1:]) == {("jobset", "llama-pretrain/0"): (8, 9)}


# -- PyTorchJob: master + workers (KAI: sum of replicas; elasticPolicy.minReplicas when set) -------

def _pytorch_pods(job: str, masters: int, workers: int) -> list[dict]:
    return [_pod(f"{job}-{kind}-{i}", {"training.kubeflow.org/job-name": job,
                                      "training.kubeflow.org/replica-type": kind,
                                      "training.kubeflow.org/replica-index": str(i)})
            for kind, n in (("master", masters), ("worker", workers)) for i in range(n)]


def test_pytorchjob(catalog):
    obj = copy.deepcopy(example_objects("pytorchjob")["llama3-8b-sft"])   # Master 1 + Worker 3
    assert _gangs(catalog, "pytorchjob", obj, _pytorch_pods("llama3-8b-sft", 1, 3)) == {
        ("job", "llama3-8b-sft"): (4, 4)}
    # elastic: the workers' minimum (training-operator's PodGroup and KAI take elasticPolicy.minReplicas)
    obj["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 3}
    assert _gangs(catalog, "pytorchjob", obj, _pytorch_pods("llama3-8b-sft", 1, 3)) == {
        ("job", "llama3-8b-sft"): (4, 3)}


# -- MPIJob: launcher + workers (KAI: sum of replicas, Launcher and Worker both required) ----------

def test_mpijob(catalog):
    obj = example_objects("mpijob")["tensorflow-benchmarks"]   # Launcher 1 + Worker 4
    pods = [_pod("tensorflow-benchmarks-launcher-x", {"training.kubeflow.org/job-name": "tensorflow-benchmarks",
                                                      "training.kubeflow.org/job-role": "launcher"})]
    pods += [_pod(f"tensorflow-benchmarks-worker-{i}", {"training.kubeflow.org/job-name": "tensorflow-benchmarks",
                                                        "training.kubeflow.org/job-role": "worker",
                                                        "training.kubeflow.org/replica-index": str(i)})
             for i in range(4)]
    assert _gangs(catalog, "mpijob", obj, pods) == {("job", "tensorflow-benchmarks"): (5, 5)}


# -- RayCluster / RayJob: head + per worker group minReplicas (if > 0, else replicas) x numOfHosts,
#    as KAI's ray grouper (calcJobNumOfPodsAndSubGroups) ---------------------------------------------

def _ray_pods(cluster: str, groups: dict) -> list[dict]:
    pods = [_pod(f"{cluster}-head-abcde", {"ray.io/cluster": cluster, "ray.io/node-type": "head",
                                           "ray.io/group": "headgroup"})]
    for group, count in groups.items():
        pods += [_pod(f"{cluster}-{group}-worker-{i}", {"ray.io/cluster": cluster, "ray.io/node-type": "worker",
                                                        "ray.io/group": group}) for i in range(count)]
    return pods


def test_raycluster(catalog):
    obj = example_objects("raycluster")["llm-finetune"]
    groups = {g["groupName"]: g for g in obj["spec"]["workerGroupSpecs"]}
    # one group minReplicas 1 of replicas 2, the other minReplicas 0 of replicas 3
    assert [(g["replicas"], g["minReplicas"]) for g in groups.values()] == [(2, 1), (3, 0)]
    pods = _ray_pods("llm-finetune", {name: g["replicas"] for name, g in groups.items()})
    assert _gangs(catalog, "raycluster", obj, pods) == {("raycluster", "llm-finetune"): (6, 1 + 1 + 3)}


def test_rayjob(catalog):
    obj = next(o for o in example_objects("rayjob").values() if not o["spec"].get("clusterSelector"))
    workload = catalog.resolve(obj)
    cluster = "rc-" + obj["metadata"]["name"]
    groups = {v.instance: v for v in workload.components if v.name == "worker"}
    pods = _ray_pods(cluster, {name: v.pods for name, v in groups.items()})
    expected = 1 + sum((v.min_replicas if v.min_replicas else v.replicas) * v.pods_per_replica
                       for v in groups.values())
    assert _gangs(catalog, "rayjob", obj, pods) == {("raycluster", cluster): (len(pods), expected)}


# -- LeaderWorkerSet: one gang per group of `size` pods (KAI: size per group-index, LeaderCreated) -----

def _lws_pods(name: str, groups: range, size: int, extra: dict | None = None) -> list[dict]:
    pods = []
    for g in groups:
        for w in range(size):
            labels = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(g),
                      "leaderworkerset.sigs.k8s.io/worker-index": str(w), **(extra or {})}
            ann = {"leaderworkerset.sigs.k8s.io/size": str(size)}
            if w:
                ann["leaderworkerset.sigs.k8s.io/leader-name"] = f"{name}-{g}"
            pods.append(_pod(f"{name}-{g}" + (f"-{w}" if w else ""), labels, ann))
    return pods


def test_leaderworkerset(catalog):
    obj = example_objects("leaderworkerset")["sglang-deepseek-r1"]     # 3 groups of 4
    assert _gangs(catalog, "leaderworkerset", obj, _lws_pods("sglang-deepseek-r1", range(3), 4)) == {
        ("group", f"sglang-deepseek-r1/{g}"): (4, 4) for g in range(3)}


# -- NIMService on LWS: one gang per LWS group of pipeline-parallel size ------------------------------

def test_nimservice_on_lws(catalog):
    obj = copy.deepcopy(example_objects("nimservice")["deepseek-r1"])   # multiNode, pipeline 2
    obj["spec"]["replicas"] = 2
    pods = _lws_pods("deepseek-r1", range(2), 2, {"app.kubernetes.io/name": "deepseek-r1"})
    # the filter reads the LWS label the operator adds: on the pods, not on the template
    assert _gangs(catalog, "nimservice", obj, pods) == {
        ("lws-group", "deepseek-r1/0"): (2, 2), ("lws-group", "deepseek-r1/1"): (2, 2)}


# -- Grove: base PodGang per PCS replica, scaled PodGang per PCSG replica beyond minAvailable
#    (KAI's grove grouper reads the PodGang: the sum of its PodCliques' minAvailable) -----------------

def _grove_pods(pcs: str, replica: int, clique: str, count: int, pcsg: tuple | None = None,
                podgang: str | None = None) -> list[dict]:
    labels = {"app.kubernetes.io/part-of": pcs, "grove.io/podcliqueset-replica-index": str(replica)}
    if pcsg is None:
        fqn = f"{pcs}-{replica}-{clique}"
        labels.update({"app.kubernetes.io/component": "pcs-podclique", "grove.io/podclique": fqn,
                       "grove.io/podgang": podgang or f"{pcs}-{replica}"})
    else:
        name, index = pcsg
        sg = f"{pcs}-{replica}-{name}"
        fqn = f"{sg}-{index}-{clique}"
        labels.update({"app.kubernetes.io/component": "pcsg-podclique", "grove.io/podclique": fqn,
                       "grove.io/podcliquescalinggroup": sg,
                       "grove.io/podcliquescalinggroup-replica-index": str(index),
                       "grove.io/podgang": podgang or f"{pcs}-{replica}"})
    return [_pod(f"{fqn}-{i}", {**labels, "grove.io/podclique-pod-index": str(i)}) for i in range(count)]


def test_grove_base_and_scaled_podgangs(catalog):
    obj = example_objects("podcliqueset")["disagg-llama"]
    # frontend 2 (standalone); PCSG prefill = pleader 1 + pworker 1, replicas 2, minAvailable 1;
    # PCSG decode = dleader 1 + dworker 3, replicas 1, minAvailable 1
    pods = _grove_pods("disagg-llama", 0, "frontend", 2)
    for clique, n in (("pleader", 1), ("pworker", 1)):
        pods += _grove_pods("disagg-llama", 0, clique, n, ("prefill", 0))
        pods += _grove_pods("disagg-llama", 0, clique, n, ("prefill", 1), podgang="disagg-llama-0-prefill-0")
    for clique, n in (("dleader", 1), ("dworker", 3)):
        pods += _grove_pods("disagg-llama", 0, clique, n, ("decode", 0))
    assert _gangs(catalog, "podcliqueset", obj, pods) == {
        ("podgang", "disagg-llama-0"): (8, 8),                          # frontend 2 + prefill 0 + decode 0
        ("scaled-podgang", "disagg-llama-0-prefill-0"): (2, 2),         # prefill replica 1
    }


def test_grove_base_podgang_holds_min_available_pcsg_replicas(catalog):
    obj = copy.deepcopy(example_objects("podcliqueset")["disagg-llama"])
    obj["spec"]["replicas"] = 2
    prefill = next(g for g in obj["spec"]["template"]["podCliqueScalingGroups"] if g["name"] == "prefill")
    prefill.update(replicas=3, minAvailable=2)
    pods = []
    for r in range(2):
        pods += _grove_pods("disagg-llama", r, "frontend", 2)
        for i in range(3):
            podgang = None if i < 2 else f"disagg-llama-{r}-prefill-{i - 2}"
            for clique in ("pleader", "pworker"):
                pods += _grove_pods("disagg-llama", r, clique, 1, ("prefill", i), podgang=podgang)
        for clique, n in (("dleader", 1), ("dworker", 3)):
            pods += _grove_pods("disagg-llama", r, clique, n, ("decode", 0))
    gangs = _gangs(catalog, "podcliqueset", obj, pods)
    assert gangs == {
        ("podgang", "disagg-llama-0"): (10, 10),     # frontend 2 + 2 prefill replicas x 2 + decode 4
        ("podgang", "disagg-llama-1"): (10, 10),
        ("scaled-podgang", "disagg-llama-0-prefill-0"): (2, 2),
        ("scaled-podgang", "disagg-llama-1-prefill-0"): (2, 2),
    }
    # a base gang whose frontend pods are not created yet still needs them
    late = [p for p in pods if p["metadata"]["labels"]["grove.io/podclique"] != "disagg-llama-1-frontend"]
    assert _gangs(catalog, "podcliqueset", obj, late)[("podgang", "disagg-llama-1")] == (8, 10)


# -- Dynamo: one gang per multinode service replica of nodeCount pods -------------------------------

def _dynamo_pods(dgd: str, service: str, replica: int, nodes: int, pathway: str, worker_hash: str = "a1b2c3") -> list:
    labels = {"nvidia.com/dynamo-graph-deployment-name": dgd, "nvidia.com/dynamo-component": service,
              "nvidia.com/dynamo-worker-hash": worker_hash}
    out = []
    for n in range(nodes):
        if pathway == "grove":
            sg = f"{dgd}-0-{service.lower()}"
            extra = {"grove.io/podcliquescalinggroup": sg,
                     "grove.io/podcliquescalinggroup-replica-index": str(replica),
                     "grove.io/podclique-pod-index": str(max(n - 1, 0))}
        else:   # one LWS "<dcd>-<i>" of replicas 1 per service replica (older operators)
            extra = {"leaderworkerset.sigs.k8s.io/name": f"{dgd}-{service.lower()}-{replica}",
                     "leaderworkerset.sigs.k8s.io/group-index": "0",
                     "leaderworkerset.sigs.k8s.io/worker-index": str(n), "instance-id": str(replica),
                     "role": "leader" if n == 0 else "worker"}
        out.append(_pod(f"{dgd}-{service.lower()}-{worker_hash}-{replica}-{n}", {**labels, **extra}))
    return out


def _dynamo_all(pathway: str, worker_hash: str = "a1b2c3") -> list:
    pods = [_pod("sglang-dsr1-0-frontend-x", {"nvidia.com/dynamo-graph-deployment-name": "sglang-dsr1",
                                              "nvidia.com/dynamo-component": "Frontend"})]
    pods += _dynamo_pods("sglang-dsr1", "SGLangDecodeWorker", 0, 4, pathway, worker_hash)
    for r in range(2):
        pods += _dynamo_pods("sglang-dsr1", "SGLangPrefillWorker", r, 2, pathway, worker_hash)
    return pods


def test_dynamo_gangs_per_service_replica(catalog):
    obj = example_objects("dynamographdeployment")["sglang-dsr1"]   # decode 1 x 4 nodes, prefill 2 x 2 nodes
    expected = {
        ("multinode-replica", "sglang-dsr1/SGLangDecodeWorker/a1b2c3/0"): (4, 4),
        ("multinode-replica", "sglang-dsr1/SGLangPrefillWorker/a1b2c3/0"): (2, 2),
        ("multinode-replica", "sglang-dsr1/SGLangPrefillWorker/a1b2c3/1"): (2, 2),
    }
    assert _gangs(catalog, "dynamographdeployment", obj, _dynamo_all("grove")) == expected
    # one LeaderWorkerSet per replica: every group-index is 0, the instance-id label tells them apart
    assert _gangs(catalog, "dynamographdeployment", obj, _dynamo_all("lws")) == expected


def test_dynamo_rolling_update_keeps_worker_generations_apart(catalog):
    obj = example_objects("dynamographdeployment")["sglang-dsr1"]
    pods = _dynamo_all("lws", "old111") + _dynamo_all("lws", "new222")[1:]
    gangs = _gangs(catalog, "dynamographdeployment", obj, pods)
    assert len(gangs) == 6
    assert all(count == minimum for count, minimum in gangs.values())
    assert gangs[("multinode-replica", "sglang-dsr1/SGLangDecodeWorker/new222/0")] == (4, 4)


# -- LLMInferenceService multi-node: one gang per LWS group (leader + size-1 workers) -------------

def test_llm_inference_service_multi_node_groups(catalog):
    obj = example_objects("llminferenceservice")["deepseek-r1-dp"]     # 2 groups of size 2 (data 16 / 8)
    lws = "deepseek-r1-dp-kserve-mn"
    pods = [_pod(f"{lws}-{g}" + (f"-{w}" if w else ""), {
        "app.kubernetes.io/component": "llminferenceservice-workload-" + ("worker" if w else "leader"),
        "app.kubernetes.io/name": "deepseek-r1-dp",
        "leaderworkerset.sigs.k8s.io/name": lws, "leaderworkerset.sigs.k8s.io/group-index": str(g),
        "leaderworkerset.sigs.k8s.io/worker-index": str(w)}) for g in range(2) for w in range(2)]
    assert _gangs(catalog, "llminferenceservice", obj, pods) == {
        ("decode-group", f"{lws}/0"): (2, 2), ("decode-group", f"{lws}/1"): (2, 2)}
    # a single-node service's Deployment pods form no gang
    single = example_objects("llminferenceservice")["llama-3-70b-pd"]
    pod = _pod("llama-3-70b-pd-kserve-7d9f8c6b5-x2kqz", {
        "app.kubernetes.io/component": "llminferenceservice-workload", "app.kubernetes.io/name": "llama-3-70b-pd"})
    assert _gangs(catalog, "llminferenceservice", single, [pod]) == {}
