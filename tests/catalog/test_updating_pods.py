"""Writing pod-template changes and suspend flags through definitions, and mapping pods.

updating.py writes at the paths a definition reads (merging maps, skipping
None, returning a changed copy); pods.py tells which component / instance /
replica a Pod belongs to and which gang groups a set of pods forms.
"""

from __future__ import annotations

import copy

import pytest

from workloadmap.catalog.resolving import resolve
from workloadmap.catalog.pods import GangGroup, PodMembership, gang_groups, match_pod
from workloadmap.catalog.updating import UpdateError, resume, suspend, update_pod_specs
from workloadmap.catalog.validating import load_definition

from tests.conftest import example_objects


def jobset():
    return example_objects("jobset")["llama-pretrain"]


def templates(obj):
    """replicatedJob name -> its pod template, of a JobSet."""
    return {rj["name"]: rj["template"]["spec"]["template"] for rj in obj["spec"]["replicatedJobs"]}


# -- update_pod_specs ------------------------------------------------------------------

def test_scheduler_name_on_every_pod_template_of_a_jobset(catalog):
    obj = jobset()
    out = update_pod_specs(catalog.get("jobset"), obj, {"schedulerName": "kai-scheduler"})
    got = templates(out)
    assert set(got) == {"driver", "workers"}
    assert all(t["spec"]["schedulerName"] == "kai-scheduler" for t in got.values())
    # and the definition reads back what was written
    resolved = catalog.resolve(out)
    assert {c.instance: c.pod_template["spec"]["schedulerName"]
            for c in resolved.components if c.name == "replicatedjob"} == {"driver": "kai-scheduler",
                                                                          "workers": "kai-scheduler"}


def test_every_replicated_job_of_every_example_jobset_is_updated(catalog):
    for obj in example_objects("jobset").values():
        out = update_pod_specs(catalog.get("jobset"), obj, {"schedulerName": "kai-scheduler"})
        assert len(out["spec"]["replicatedJobs"]) == len(obj["spec"]["replicatedJobs"])
        assert all(t["spec"]["schedulerName"] == "kai-scheduler" for t in templates(out).values())


def test_only_chosen_instances_are_updated(catalog):
    obj = jobset()
    out = update_pod_specs(catalog.get("jobset"), obj, {"schedulerName": "kai-scheduler",
                                                         "labels": {"queue": "a"}}, instances=["workers"])
    got = templates(out)
    assert got["workers"]["spec"]["schedulerName"] == "kai-scheduler"
    assert got["workers"]["metadata"]["labels"] == {"queue": "a"}
    assert got["driver"] == templates(obj)["driver"]
    assert "schedulerName" not in got["driver"]["spec"]


def test_unknown_instance_changes_nothing(catalog):
    obj = jobset()
    assert update_pod_specs(catalog.get("jobset"), obj, {"schedulerName": "x"}, instances=["nope"]) == obj


def test_only_chosen_components_are_updated(catalog):
    obj = example_objects("pytorchjob")["llama3-8b-sft"]
    out = update_pod_specs(catalog.get("pytorchjob"), obj, {"priorityClassName": "high"}, components=["worker"])
    specs = out["spec"]["pytorchReplicaSpecs"]
    assert specs["Worker"]["template"]["spec"]["priorityClassName"] == "high"
    assert "priorityClassName" not in specs["Master"]["template"]["spec"]


def test_labels_and_annotations_merge_with_existing_ones(catalog):
    obj = jobset()
    existing = templates(obj)["workers"]["metadata"]["annotations"]
    assert existing  # kubectl.kubernetes.io/default-container
    out = update_pod_specs(catalog.get("jobset"), obj, {
        "annotations": {"scheduling.example.com/gang": "llama"}, "labels": {"queue": "research"}})
    workers = templates(out)["workers"]["metadata"]
    assert workers["annotations"] == {**existing, "scheduling.example.com/gang": "llama"}
    assert workers["labels"] == {"queue": "research"}
    driver = templates(out)["driver"]["metadata"]     # created where there was no metadata
    assert driver == {"labels": {"queue": "research"}, "annotations": {"scheduling.example.com/gang": "llama"}}
    # a second write merges with the first and overrides equal keys
    again = update_pod_specs(catalog.get("jobset"), out, {"labels": {"queue": "prod", "tier": "1"}})
    assert templates(again)["workers"]["metadata"]["labels"] == {"queue": "prod", "tier": "1"}
    assert templates(again)["workers"]["metadata"]["annotations"] == workers["annotations"]


def test_none_values_are_never_written(catalog):
    obj = jobset()
    out = update_pod_specs(catalog.get("jobset"), obj, {"schedulerName": None, "priorityClassName": None,
                                                         "labels": {"queue": "q"}, "annotations": None})
    for name, t in templates(out).items():
        assert "schedulerName" not in t["spec"], name
        assert "priorityClassName" not in t["spec"], name
        assert t["metadata"]["labels"] == {"queue": "q"}
    assert "annotations" not in templates(out)["driver"]["metadata"]
    assert update_pod_specs(catalog.get("jobset"), obj, {"schedulerName": None}) == obj


def test_the_input_object_is_not_modified(catalog):
    obj = jobset()
    before = copy.deepcopy(obj)
    out = update_pod_specs(catalog.get("jobset"), obj, {"schedulerName": "s", "labels": {"a": "b"},
                                                         "annotations": {"c": "d"},
                                                         "nodeAffinity": {"requiredDuringScheduling": {}}})
    assert obj == before
    assert out is not obj
    # no structure is shared either: changing the copy leaves the input alone
    templates(out)["workers"]["metadata"]["annotations"]["x"] = "y"
    templates(out)["workers"]["spec"]["containers"][0]["image"] = "changed"
    assert obj == before


def test_written_values_are_copies(catalog):
    labels = {"queue": "q"}
    out = update_pod_specs(catalog.get("jobset"), jobset(), {"labels": labels})
    templates(out)["driver"]["metadata"]["labels"]["queue"] = "changed"
    assert labels == {"queue": "q"}
    assert templates(out)["workers"]["metadata"]["labels"] == {"queue": "q"}


def test_affinity_and_resource_claims_land_in_the_pod_spec(catalog):
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    claims = [{"name": "gpu", "resourceClaimTemplateName": "gpu-claim"}]
    out = update_pod_specs(catalog.get("jobset"), jobset(), {"nodeAffinity": affinity, "resourceClaims": claims})
    for t in templates(out).values():
        assert t["spec"]["affinity"]["nodeAffinity"] == affinity
        assert t["spec"]["resourceClaims"] == claims


def test_unknown_change_is_rejected(catalog):
    with pytest.raises(UpdateError, match="cannot update image"):
        update_pod_specs(catalog.get("jobset"), jobset(), {"image": "x"})


def test_leaderworkerset_without_leader_template_writes_the_worker_template(catalog):
    obj = example_objects("leaderworkerset")["sglang-deepseek-r1"]
    assert "leaderTemplate" not in obj["spec"]["leaderWorkerTemplate"]
    out = update_pod_specs(catalog.get("leaderworkerset"), obj, {"schedulerName": "kai"})
    lwt = out["spec"]["leaderWorkerTemplate"]
    assert "leaderTemplate" not in lwt
    assert lwt["workerTemplate"]["spec"]["schedulerName"] == "kai"


# -- hand-written definitions ---------------------------------------------------------

def wm(children, root_extra=None):
    root = {"name": "demo", "kind": {"group": "example.com", "version": "v1", "kind": "Demo"},
            "statusDefinition": {"statusMappings": {
                "running": [{"byExpression": {"expression": ".status.ok", "expectedResult": "true"}}]}}}
    root.update(root_extra or {})
    doc = {"apiVersion": "workloadmap.io/v1alpha1", "kind": "WorkloadMap", "metadata": {"name": "demo"},
           "spec": {"structureDefinition": {"rootComponent": root, "childComponents": children}}}
    return load_definition(doc, "file", "test.yaml")


def demo(spec):
    return {"apiVersion": "example.com/v1", "kind": "Demo", "metadata": {"name": "d", "namespace": "ns"},
            "spec": spec}


FRAGMENTED = wm([{"name": "worker", "ownerRef": "demo", "specDefinition": {"fragmentedPodSpecDefinition": {
    "containersPath": ".spec.worker.containers",
    "schedulerNamePath": ".spec.worker.scheduling.scheduler",
    "labelsPath": ".spec.worker.podLabels",
    "annotationsPath": ".spec.worker.podAnnotations",
    "priorityClassNamePath": ".spec.priority",
}}}])


def test_fragmented_definition_writes_at_its_fragment_paths():
    obj = demo({"worker": {"containers": [{"name": "c"}], "podLabels": {"app": "w"}}})
    out = update_pod_specs(FRAGMENTED, obj, {"schedulerName": "kai", "labels": {"queue": "q"},
                                             "annotations": {"a": "1"}, "priorityClassName": "high"})
    assert out["spec"] == {
        "worker": {"containers": [{"name": "c"}], "podLabels": {"app": "w", "queue": "q"},
                   "podAnnotations": {"a": "1"}, "scheduling": {"scheduler": "kai"}},
        "priority": "high",
    }
    assert obj["spec"] == {"worker": {"containers": [{"name": "c"}], "podLabels": {"app": "w"}}}


def test_fragmented_definition_without_a_path_for_the_field():
    with pytest.raises(UpdateError, match="no path for nodeAffinity"):
        update_pod_specs(FRAGMENTED, demo({}), {"nodeAffinity": {"x": 1}})


def test_pod_spec_definition_writes_spec_and_metadata_fields():
    d = wm([{"name": "worker", "ownerRef": "demo", "specDefinition": {
        "podSpecPath": ".spec.pod", "metadataPath": ".spec.podMeta"}}])
    out = update_pod_specs(d, demo({"pod": {"containers": []}, "podMeta": {"labels": {"a": "1"}}}),
                           {"schedulerName": "kai", "labels": {"b": "2"}})
    assert out["spec"] == {"pod": {"containers": [], "schedulerName": "kai"},
                           "podMeta": {"labels": {"a": "1", "b": "2"}}}


def test_pod_spec_definition_without_metadata_path_cannot_take_labels():
    d = wm([{"name": "worker", "ownerRef": "demo", "specDefinition": {"podSpecPath": ".spec.pod"}}])
    with pytest.raises(UpdateError, match="no metadataPath for labels"):
        update_pod_specs(d, demo({"pod": {}}), {"labels": {"b": "2"}})


def test_unassignable_path_raises_update_error():
    d = wm([{"name": "worker", "ownerRef": "demo", "specDefinition": {"fragmentedPodSpecDefinition": {
        "containersPath": ".spec.containers", "schedulerNamePath": ".spec.x | tostring"}}}])
    with pytest.raises(UpdateError) as info:
        update_pod_specs(d, demo({"x": "s", "containers": []}), {"schedulerName": "kai"})
    message = str(info.value)
    assert "Demo ns/d" in message
    assert "'demo'" in message
    assert "schedulerNamePath" in message
    assert "'.spec.x | tostring'" in message


def test_alternative_path_is_assignable():
    d = wm([{"name": "worker", "ownerRef": "demo", "specDefinition": {"fragmentedPodSpecDefinition": {
        "containersPath": ".spec.containers", "schedulerNamePath": ".spec.a // .spec.b"}}}])
    assert update_pod_specs(d, demo({"b": "old"}), {"schedulerName": "kai"})["spec"] == {"b": "kai"}
    assert update_pod_specs(d, demo({"a": "x", "b": "old"}), {"schedulerName": "kai"})["spec"] == {
        "a": "kai", "b": "old"}


def test_path_count_not_matching_instances_raises_update_error():
    d = wm([{"name": "pool", "ownerRef": "demo", "instanceIdPath": ".spec.pools[].name",
             "podSelector": {"componentInstanceSelector": {"idPath": '.metadata.labels["pool"]'}},
             "specDefinition": {"podTemplateSpecPath": ".spec.templates[]"}}])
    obj = demo({"pools": [{"name": "a"}, {"name": "b"}, {"name": "c"}], "templates": [{}, {}]})
    with pytest.raises(UpdateError, match="2 paths for 3 instances"):
        update_pod_specs(d, obj, {"schedulerName": "kai"})


def test_shared_template_is_written_once_for_any_instance():
    d = wm([{"name": "pool", "ownerRef": "demo", "instanceIdPath": ".spec.pools[].name",
             "podSelector": {"componentInstanceSelector": {"idPath": '.metadata.labels["pool"]'}},
             "specDefinition": {"podTemplateSpecPath": ".spec.template"}}])
    obj = demo({"pools": [{"name": "a"}, {"name": "b"}], "template": {"spec": {}}})
    out = update_pod_specs(d, obj, {"schedulerName": "kai"}, instances=["b"])
    assert out["spec"]["template"] == {"spec": {"schedulerName": "kai"}}


def test_instances_are_chosen_by_the_ids_the_resolver_reports():
    d = wm([{"name": "pool", "ownerRef": "demo", "instanceIdPath": ".spec.pools[].name",
             "podSelector": {"componentInstanceSelector": {"idPath": '.metadata.labels["pool"]'}},
             "specDefinition": {"podTemplateSpecPath": ".spec.pools[].template"}}])
    obj = demo({"pools": [{"name": "a", "template": {}}, {"name": 7, "template": {}},
                          {"name": True, "template": {}}]})
    ids = [c.instance for c in resolve(obj, d).components if c.name == "pool"]
    assert ids == ["a", "7", "true"]
    for i, iid in enumerate(ids):
        out = update_pod_specs(d, obj, {"schedulerName": "kai"}, instances=[iid])
        written = [bool(p["template"]) for p in out["spec"]["pools"]]
        assert written == [j == i for j in range(3)], iid


# -- suspend / resume --------------------------------------------------------------

def test_suspend_and_resume_a_jobset(catalog):
    definition = catalog.get("jobset")
    obj = jobset()
    assert obj["spec"]["suspend"] is False
    suspended = suspend(definition, obj)
    assert suspended["spec"]["suspend"] is True
    assert obj["spec"]["suspend"] is False            # input untouched
    assert catalog.resolve(suspended).status == "Suspended"
    resumed = resume(definition, suspended)
    assert resumed["spec"]["suspend"] is False
    assert suspended["spec"]["suspend"] is True
    # everything else is unchanged
    resumed["spec"]["suspend"] = obj["spec"]["suspend"]
    assert resumed == obj


def test_suspend_creates_missing_fields(catalog):
    obj = copy.deepcopy(example_objects("pytorchjob")["llama3-8b-sft"])
    del obj["spec"]["runPolicy"]
    out = suspend(catalog.get("pytorchjob"), obj)
    assert out["spec"]["runPolicy"] == {"suspend": True}
    assert "runPolicy" not in obj["spec"]


def test_suspend_without_suspend_definition_raises(catalog):
    definition = catalog.get("leaderworkerset")
    assert definition.root.suspend is None
    obj = example_objects("leaderworkerset")["vllm-llama3-70b"]
    with pytest.raises(UpdateError, match="no suspendDefinition"):
        suspend(definition, obj)
    with pytest.raises(UpdateError, match="no suspendDefinition"):
        resume(definition, obj)


def test_suspend_with_several_actions_and_json_values():
    d = wm([], root_extra={"suspendDefinition": {
        "suspendActions": [{"path": ".spec.suspend", "value": "true"},
                           {"path": ".spec.state", "value": '"Paused"'},
                           {"path": ".spec.groups[].replicas", "value": "0"}],
        "resumeActions": [{"path": ".spec.suspend", "value": "false"}]}})
    obj = demo({"groups": [{"replicas": 2}, {"replicas": 3}]})
    assert suspend(d, obj)["spec"] == {"groups": [{"replicas": 0}, {"replicas": 0}], "suspend": True,
                                       "state": "Paused"}
    assert resume(d, obj)["spec"] == {"groups": [{"replicas": 2}, {"replicas": 3}], "suspend": False}


def test_suspend_action_addressing_nothing_raises():
    d = wm([], root_extra={"suspendDefinition": {
        "suspendActions": [{"path": ".spec.groups[]?.paused", "value": "true"}],
        "resumeActions": [{"path": ".spec.groups[]?.paused", "value": "false"}]}})
    with pytest.raises(UpdateError, match="addresses nothing"):
        suspend(d, demo({"groups": []}))


# -- match_pod ---------------------------------------------------------------------

def lws_pod(lws, group, worker_index, size=4):
    name = f"{lws}-{group}" if worker_index == 0 else f"{lws}-{group}-{worker_index}"
    labels = {"leaderworkerset.sigs.k8s.io/name": lws,
              "leaderworkerset.sigs.k8s.io/group-index": str(group),
              "leaderworkerset.sigs.k8s.io/worker-index": str(worker_index)}
    annotations = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    if worker_index:
        annotations["leaderworkerset.sigs.k8s.io/leader-name"] = f"{lws}-{group}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "inference", "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "c"}]}}


def test_match_lws_leader_and_worker_pods(catalog):
    definition = catalog.get("leaderworkerset")
    assert match_pod(definition, lws_pod("sg", 1, 0)) == PodMembership("leader", None, "1")
    assert match_pod(definition, lws_pod("sg", 1, 3)) == PodMembership("worker", None, "1")
    assert match_pod(definition, lws_pod("sg", 0, 2)) == PodMembership("worker", None, "0")


def jobset_pod(jobset_name, replicated_job, job_index, pod_index=0, attempt="0"):
    labels = {"jobset.sigs.k8s.io/jobset-name": jobset_name,
              "jobset.sigs.k8s.io/replicatedjob-name": replicated_job,
              "jobset.sigs.k8s.io/job-index": str(job_index),
              "jobset.sigs.k8s.io/restart-attempt": attempt}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{jobset_name}-{replicated_job}-{job_index}-{pod_index}", "labels": labels,
                         "ownerReferences": [{"kind": "Job", "name": f"{jobset_name}-{replicated_job}-{job_index}",
                                              "controller": True}]},
            "spec": {"containers": [{"name": "c"}]}}


def test_match_jobset_pod_to_its_replicated_job(catalog):
    definition = catalog.get("jobset")
    assert match_pod(definition, jobset_pod("llama-pretrain", "workers", 1)) == PodMembership(
        "replicatedjob", "workers", "1")
    assert match_pod(definition, jobset_pod("llama-pretrain", "driver", 0)) == PodMembership(
        "replicatedjob", "driver", "0")


def test_pod_no_component_claims_is_none(catalog):
    stray = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "labels": {"app": "x"}}, "spec": {}}
    assert match_pod(catalog.get("jobset"), stray) is None
    assert match_pod(catalog.get("leaderworkerset"), stray) is None
    assert match_pod(catalog.get("pytorchjob"), stray) is None


def test_match_pytorchjob_pods(catalog):
    definition = catalog.get("pytorchjob")
    for pod in pytorch_pods("j", masters=1, workers=2):
        kind = pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]
        index = pod["metadata"]["labels"]["training.kubeflow.org/replica-index"]
        assert match_pod(definition, pod) == PodMembership(kind, None, index)


# -- gang_groups -------------------------------------------------------------------

def test_lws_gang_groups_per_group_index(catalog):
    obj = copy.deepcopy(example_objects("leaderworkerset")["sglang-deepseek-r1"])
    obj["spec"]["replicas"] = 2
    assert obj["spec"]["leaderWorkerTemplate"]["size"] == 4
    definition = catalog.get("leaderworkerset")
    workload = catalog.resolve(obj)
    assert workload.pods == 8
    pods = [lws_pod("sglang-deepseek-r1", g, w) for g in (0, 1) for w in range(4)]
    groups = gang_groups(definition, workload, pods)
    assert sorted(groups, key=lambda g: g.key) == [
        GangGroup("group", "sglang-deepseek-r1/0", [p["metadata"]["name"] for p in pods[:4]], 4),
        GangGroup("group", "sglang-deepseek-r1/1", [p["metadata"]["name"] for p in pods[4:]], 4),
    ]


def test_lws_gang_groups_with_missing_pods_keep_min_member(catalog):
    obj = copy.deepcopy(example_objects("leaderworkerset")["sglang-deepseek-r1"])   # 3 groups of 4
    workload = catalog.resolve(obj)
    pods = [lws_pod("sglang-deepseek-r1", 2, w) for w in (0, 2)]                  # 2 of group 2 so far
    groups = gang_groups(catalog.get("leaderworkerset"), workload, pods)
    assert [(g.key, len(g.pods), g.min_member) for g in groups] == [("sglang-deepseek-r1/2", 2, 4)]


def pytorch_pods(job, masters, workers):
    pods = []
    for kind, count in (("master", masters), ("worker", workers)):
        for i in range(count):
            pods.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"{job}-{kind}-{i}", "labels": {
                             "training.kubeflow.org/job-name": job,
                             "training.kubeflow.org/operator-name": "pytorchjob-controller",
                             "training.kubeflow.org/replica-type": kind,
                             "training.kubeflow.org/replica-index": str(i)}},
                         "spec": {"containers": [{"name": "pytorch"}]}})
    return pods


def test_pytorchjob_gang_is_one_group_of_all_pods(catalog):
    obj = example_objects("pytorchjob")["llama3-8b-sft"]      # Master 1 + Worker 3
    workload = catalog.resolve(obj)
    pods = pytorch_pods("llama3-8b-sft", masters=1, workers=3)
    groups = gang_groups(catalog.get("pytorchjob"), workload, pods)
    assert len(groups) == 1
    group = groups[0]
    assert (group.pod_group, group.key, group.min_member) == ("job", "llama3-8b-sft", 4)
    assert group.pods == [p["metadata"]["name"] for p in pods]
    assert group.min_member == workload.pods


def test_gang_groups_skip_pods_no_component_claims(catalog):
    obj = example_objects("pytorchjob")["llama3-8b-sft"]
    pods = pytorch_pods("llama3-8b-sft", masters=1, workers=1)
    stray = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray"}, "spec": {}}
    groups = gang_groups(catalog.get("pytorchjob"), catalog.resolve(obj), [*pods, stray])
    assert [g.pods for g in groups] == [["llama3-8b-sft-master-0", "llama3-8b-sft-worker-0"]]


def jobset_gang_pods():
    """The 9 pods of llama-pretrain: driver 1 job x 1 pod, workers 2 jobs x 4 pods."""
    return [jobset_pod("llama-pretrain", "driver", 0)] + [
        jobset_pod("llama-pretrain", "workers", j, p) for j in range(2) for p in range(4)]


def test_jobset_gang_groups_split_by_restart_attempt(catalog):
    workload = catalog.resolve(jobset())
    assert workload.pods == 9
    old = jobset_pod("llama-pretrain", "workers", 1, 0, attempt="1")
    old["metadata"]["name"] = "old-attempt"
    all_pods = jobset_gang_pods()
    pods = all_pods[5:] + all_pods[:5] + [old]   # a job-index 1 pod first: see the test below
    groups = gang_groups(catalog.get("jobset"), workload, pods)
    by_key = {g.key: g for g in groups}
    assert set(by_key) == {"llama-pretrain/0", "llama-pretrain/1"}
    assert sorted(by_key["llama-pretrain/0"].pods) == sorted(p["metadata"]["name"] for p in all_pods)
    assert by_key["llama-pretrain/0"].min_member == 9
    assert by_key["llama-pretrain/1"].pods == ["old-attempt"]


def test_jobset_gang_min_member_does_not_depend_on_pod_order(catalog):
    workload = catalog.resolve(jobset())
    pods = jobset_gang_pods()
    for order in (pods[5:] + pods[:5], pods):   # first pod job-index 1, then job-index 0
        groups = gang_groups(catalog.get("jobset"), workload, order)
        assert [(g.key, len(g.pods), g.min_member) for g in groups] == [("llama-pretrain/0", 9, 9)]


def test_multi_node_inference_service_is_one_gang_of_head_and_workers(catalog):
    obj = example_objects("inferenceservice")["mixtral-multinode"]
    workload = catalog.resolve(obj)
    assert workload.pods == 2   # the head and RAY_NODE_COUNT - 1 = 1 worker

    def pod(name, app, ray_env):
        env = [{"name": "RAY_NODE_COUNT", "value": "2"}] if ray_env else []
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": obj["metadata"]["namespace"], "labels": {
                    "serving.kserve.io/inferenceservice": "mixtral-multinode", "component": "predictor",
                    "app": app}},
                "spec": {"containers": [{"name": "kserve-container" if ray_env else "worker-container", "env": env}]}}

    pods = [pod("mixtral-multinode-predictor-7d9c-abcde", "isvc.mixtral-multinode-predictor", True),
            pod("mixtral-multinode-predictor-worker-5f6b-fghij", "isvc.mixtral-multinode-predictor-worker", False)]
    groups = gang_groups(catalog.get("inferenceservice"), workload, pods)
    # both pods are needed: the head's RAY_NODE_COUNT, which the gang filter reads, is in the resolved spec
    assert [(g.key, len(g.pods), g.min_member) for g in groups] == [("mixtral-multinode", 2, 2)]
