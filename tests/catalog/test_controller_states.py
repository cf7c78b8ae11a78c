"""Statuses of built-in definitions in controller states the bundled examples do not show.

Each case is an object in a state its framework's controller writes (the
source named beside it), resolved through the built-in catalog.  The golden
tests cover one object per example; these cover the transitions between them
that are easy to get wrong: a workload whose pods are still Pending is not
Running yet, and a failed child being recreated is Degraded, not Undefined.
"""

from __future__ import annotations

import copy

import pytest

from ..conftest import example_objects


def _jobset(replicated_jobs_status: list[dict], conditions: list[dict] = (), suspend: bool = False) -> dict:
    """A JobSet of two 8-GPU trainer Jobs with the given status (kubernetes-sigs/jobset v1alpha2)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "llm-pretrain", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-000000000001"},
        "spec": {
            "suspend": suspend,
            "failurePolicy": {"maxRestarts": 3, "rules": [
                {"name": "restart-failed-job", "action": "RestartJob", "targetReplicatedJobs": ["trainer"]}]},
            "replicatedJobs": [{"name": "trainer", "replicas": 2, "template": {"spec": {
                "parallelism": 2, "completions": 2, "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                     "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}],
        },
        "status": {"restarts": 0, "conditions": list(conditions), "replicatedJobsStatus": [
            {"name": "trainer", "active": 0, "ready": 0, "failed": 0, "succeeded": 0, "suspended": 0,
             **s} for s in replicated_jobs_status]},
    }


RESUMED = {"type": "Suspended", "status": "False", "reason": "ResumeJobs", "message": "jobset is resumed",
           "lastTransitionTime": "2026-11-30T10:00:00Z"}


@pytest.mark.parametrize("obj, expected", [
    # `active` counts Jobs with a running OR pending pod (jobset_types.go ReplicatedJobStatus):
    # both Jobs active, no pod ready yet, e.g. waiting for GPUs
    pytest.param(_jobset([{"active": 2}], [RESUMED]), "Initializing", id="jobset-pods-pending"),
    # `ready`: Jobs whose ready + succeeded pods reach min(parallelism, completions)
    pytest.param(_jobset([{"active": 2, "ready": 1}], [RESUMED]), "Running", id="jobset-one-job-ready"),
    pytest.param(_jobset([{"active": 1, "succeeded": 1}]), "Running", id="jobset-one-job-done-one-active"),
    # the RestartJob failure-policy action recreates the failed Job and sets no condition
    # (failure_policy.go); controllers before v0.12 have no RestartingJobSet condition either
    pytest.param(_jobset([{"active": 1, "ready": 1, "failed": 1}]), "Degraded", id="jobset-job-recreated"),
    pytest.param(_jobset([{"failed": 1}]), "Degraded", id="jobset-restart-before-v0.12"),
    pytest.param(_jobset([{"failed": 1}], [{"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts"}]),
                 "Failed", id="jobset-failed"),
    pytest.param(_jobset([{"suspended": 2}], suspend=True), "Suspended", id="jobset-suspended"),
])
def test_status_in_controller_state(catalog, obj, expected):
    resolved = catalog.resolve(obj)
    assert resolved.status == expected, resolved.statuses
    assert resolved.total.gpu == 32  # 2 Jobs x 2 pods x 8 GPUs, whatever the status


def _raycluster(worker_group: dict) -> dict:
    """A RayCluster as the API server stores it (ray.io/v1, CRD defaults applied)."""
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "raycluster-gpu", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-000000000002"},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray:2.46.0",
                 "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "rayStartParams": {}, "numOfHosts": 1, **worker_group,
                                  "template": {"spec": {"containers": [
                                      {"name": "ray-worker", "image": "rayproject/ray:2.46.0-gpu",
                                       "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}],
        },
        "status": {"state": "ready", "conditions": [
            {"type": "RayClusterProvisioned", "status": "True", "reason": "AllPodRunningAndReadyFirstTime"},
            {"type": "HeadPodReady", "status": "True", "reason": "HeadPodRunningAndReady"}]},
    }


@pytest.mark.parametrize("group, replicas, maximum", [
    # maxReplicas omitted: the CRD's default (MaxInt32) is stored, and means no maximum
    ({"replicas": 2, "minReplicas": 0, "maxReplicas": 2147483647}, 2, None),
    ({"replicas": 2, "minReplicas": 1, "maxReplicas": 4}, 2, 4),
    ({"replicas": 6, "minReplicas": 1, "maxReplicas": 4}, 4, 4),   # clamped as the controller does
])
def test_ray_worker_group_bounds(catalog, group, replicas, maximum):
    resolved = catalog.resolve(_raycluster(group))
    worker = next(c for c in resolved.components if c.name == "worker")
    assert (worker.replicas, worker.max_replicas) == (replicas, maximum)
    assert resolved.total.gpu == replicas


def _inference_service(annotations: dict) -> dict:
    """The KServe ModelMesh quick-start InferenceService (serving.kserve.io/v1beta1), loaded."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "example-sklearn-isvc", "namespace": "modelmesh-serving", "annotations": annotations,
                     "uid": "7c1e0f9a-0000-4000-8000-000000000003"},
        "spec": {"predictor": {"model": {
            "modelFormat": {"name": "sklearn"},
            "storage": {"key": "localMinIO", "path": "sklearn/mnist-svm.joblib"},
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}}},
        "status": {"conditions": [{"type": "PredictorReady", "status": "True"}, {"type": "Ready", "status": "True"}],
                   "modelStatus": {"transitionStatus": "UpToDate",
                                   "states": {"activeModelState": "Loaded", "targetModelState": "Loaded"}}},
    }


@pytest.mark.parametrize("annotations, pods", [
    # ModelMesh: served by the namespace's shared modelmesh-serving Deployment, no pods of its own
    ({"serving.kserve.io/deploymentMode": "ModelMesh"}, 0),
    ({"serving.kserve.io/deploymentMode": "RawDeployment"}, 1),
    ({}, 1),
])
def test_inference_service_pods_by_deployment_mode(catalog, annotations, pods):
    resolved = catalog.resolve(_inference_service(annotations))
    assert resolved.status == "Running"
    assert resolved.pods == pods
    assert resolved.total.cpu == pods


def _multinode(worker_spec: dict, model_requests: dict | None = None) -> dict:
    """A multi-node huggingface InferenceService (KServe raw deployment, Ray across pods)."""
    model = {"modelFormat": {"name": "huggingface"}, "storageUri": "pvc://llama-3-70b-pvc/hf/70b"}
    if model_requests:
        model["resources"] = {"requests": model_requests, "limits": model_requests}
    return {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "huggingface-llama3", "namespace": "llm", "uid": "7c1e0f9a-0000-4000-8000-000000000004",
                     "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment",
                                     "serving.kserve.io/autoscalerClass": "none"}},
        "spec": {"predictor": {"model": model, "workerSpec": worker_spec}},
    }


def _worker(gpus: str) -> list:
    return [{"name": "worker-container", "resources": {"requests": {"nvidia.com/gpu": gpus},
                                                       "limits": {"nvidia.com/gpu": gpus}}}]


@pytest.mark.parametrize("obj, workers, head_gpus, worker_gpus", [
    # TP x PP GPUs over RAY_NODE_COUNT nodes (kserve components/predictor.go computeRayNodeAndGPUs);
    # no GPU requests anywhere: one GPU per node, TP x PP nodes
    pytest.param(_multinode({"pipelineParallelSize": 2, "tensorParallelSize": 1}), 1, 1, 1, id="docs-pp2"),
    pytest.param(_multinode({"pipelineParallelSize": 2, "tensorParallelSize": 2}), 3, 1, 1, id="tp2-pp2"),
    pytest.param(_multinode({}), 0, 1, 1, id="defaults-one-node"),   # TP and PP default to 1
    # worker GPUs: ceil(total / worker GPUs) nodes, the head takes the rest
    pytest.param(_multinode({"tensorParallelSize": 4, "containers": _worker("2")}), 1, 2, 2, id="tp4-workers-2gpu"),
    # head and worker GPUs given: the head keeps its own
    pytest.param(_multinode({"pipelineParallelSize": 2, "tensorParallelSize": 4, "containers": _worker("4")},
                            {"nvidia.com/gpu": "4"}), 1, 4, 4, id="pp2-tp4-head-and-workers-4gpu"),
    # the head alone can hold them all: no workers
    pytest.param(_multinode({"tensorParallelSize": 2, "containers": _worker("1")}, {"nvidia.com/gpu": "2"}),
                 0, 2, 0, id="head-holds-all"),
    # head GPUs only: single-GPU workers for the rest
    pytest.param(_multinode({"tensorParallelSize": 4}, {"nvidia.com/gpu": "2"}), 2, 2, 1, id="head-gpus-only"),
])
def test_inference_service_multi_node_gpus(catalog, obj, workers, head_gpus, worker_gpus):
    views = {c.name: c for c in catalog.resolve(obj).components}
    head, worker = views["predictor"], views["predictor-worker"]
    assert (worker.replicas, worker.pods) == (workers, workers)
    assert (head.per_pod.gpu, worker.per_pod.gpu) == (head_gpus, worker_gpus)
    total = (obj["spec"]["predictor"]["workerSpec"].get("tensorParallelSize", 1)
             * obj["spec"]["predictor"]["workerSpec"].get("pipelineParallelSize", 1))
    assert head.total.gpu + worker.total.gpu == total


def test_pod_with_a_crash_looping_sidecar_is_degraded(catalog):
    # a restartable init container (sidecar, KEP-753) reports in initContainerStatuses
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-000000000005"},
           "spec": {"initContainers": [{"name": "log-shipper", "image": "fluent/fluent-bit:3.2", "restartPolicy": "Always"}],
                    "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
           "status": {"phase": "Running",
                      "initContainerStatuses": [{"name": "log-shipper", "ready": False, "restartCount": 6,
                                                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
                      "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0,
                                             "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}}]}}
    assert catalog.resolve(pod).status == "Degraded"


@pytest.mark.parametrize("active, pods", [(0, 2), (1, 2), (2, 4)])
def test_cron_job_counts_every_run_in_progress(catalog, active, pods):
    # concurrencyPolicy Allow (the default): runs overlap, each with its own Job (status.active)
    cron = {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly-eval", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-000000000006"},
            "spec": {"schedule": "*/30 * * * *", "jobTemplate": {"spec": {"parallelism": 2, "completions": 2,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "eval", "image": "eval:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}},
            "status": {"active": [{"kind": "Job", "namespace": "ml", "name": f"nightly-eval-2950{i}"}
                                  for i in range(active)]}}
    resolved = catalog.resolve(cron)
    assert (resolved.pods, resolved.total.gpu) == (pods, pods)


# -- pods as the controllers label them ------------------------------------------------------

def _pod(name: str, labels: dict, owner: dict | None = None) -> dict:
    meta = {"name": name, "namespace": "ml", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "controller": True, **owner}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "main"}]}}


@pytest.mark.parametrize("definition, pod, expected", [
    # KubeRay's Redis cleanup Job (GCS fault tolerance) is not the RayJob's submitter
    # (raycluster_controller.go buildRedisCleanupJob)
    ("rayjob", _pod("rc-redis-cleanup-x7k2p", {"ray.io/node-type": "redis-cleanup", "ray.io/cluster": "rc",
                                               "batch.kubernetes.io/job-name": "rc-redis-cleanup",
                                               "job-name": "rc-redis-cleanup"}), None),
    ("rayjob", _pod("rayjob-sample-4gq2b", {"batch.kubernetes.io/job-name": "rayjob-sample",
                                            "job-name": "rayjob-sample"}), ("submitter", None, None)),
    # a Job with manualSelector gets no job-name labels: its controller reference tells
    ("job", _pod("batch-run-9xk2p", {"app": "batch-run"}, {"kind": "Job", "name": "batch-run", "uid": "u1"}),
     ("job", None, None)),
    # MPIJob kubeflow.org/v1 (training-operator up to release-1.9) labels replica-type
    ("mpijob", _pod("pi-launcher-abcde", {"training.kubeflow.org/job-name": "pi",
                                          "training.kubeflow.org/replica-type": "launcher",
                                          "training.kubeflow.org/job-role": "master"}), ("launcher", None, None)),
    ("mpijob", _pod("pi-worker-1", {"training.kubeflow.org/job-name": "pi",
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": "1"}), ("worker", None, "1")),
    # PyTorchJob from training-operator v1.2/v1.3 (kubeflow/common v0.3): unprefixed labels
    ("pytorchjob", _pod("mnist-worker-1", {"job-name": "mnist", "group-name": "kubeflow.org",
                                           "replica-type": "worker", "replica-index": "1"}), ("worker", None, "1")),
])
def test_pod_membership(catalog, definition, pod, expected):
    from workloadmap.catalog.pods import match_pod

    got = match_pod(catalog.get(definition), pod)
    assert (None if got is None else (got.component, got.instance, got.replica)) == expected


@pytest.mark.parametrize("labels, hostname, replica", [
    ({"grove.io/podclique-pod-index": "1"}, "disagg-llama-0-frontend-1", "1"),
    ({}, "disagg-llama-0-frontend-1", "1"),   # Grove before v0.1.0-alpha.8: the hostname tells
    ({}, None, None),
])
def test_grove_pod_index(catalog, labels, hostname, replica):
    from workloadmap.catalog.pods import match_pod

    pod = _pod("disagg-llama-0-frontend-x2x7b", {
        "app.kubernetes.io/component": "pcs-podclique", "app.kubernetes.io/part-of": "disagg-llama",
        "grove.io/podclique": "disagg-llama-0-frontend", "grove.io/podcliqueset-replica-index": "0",
        "grove.io/podgang": "disagg-llama-0", **labels})
    if hostname:
        pod["spec"]["hostname"] = hostname
    got = match_pod(catalog.get("podcliqueset"), pod)
    assert (got.component, got.instance, got.replica) == ("clique", "frontend", replica)


@pytest.mark.parametrize("spec, status, pods", [
    # manageJob's wantActive: min(parallelism, completions - succeeded), never below 0
    ({"parallelism": 4, "completions": 10}, {"succeeded": 0, "active": 4}, 4),
    ({"parallelism": 4, "completions": 10}, {"succeeded": 7, "active": 3}, 3),
    ({"parallelism": 4, "completions": 10}, {"succeeded": 10}, 0),
    # Indexed: succeeded counts the succeeded indexes, the same formula
    ({"parallelism": 4, "completions": 6, "completionMode": "Indexed"}, {"succeeded": 4, "active": 2,
                                                                         "completedIndexes": "0-3"}, 2),
    # no completions (work queue): parallelism until one pod succeeds, then those still active
    ({"parallelism": 3}, {"active": 3}, 3),
    ({"parallelism": 3}, {"succeeded": 1, "active": 2}, 2),
])
def test_job_near_its_end(catalog, spec, status, pods):
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "shard-eval", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-000000000007"},
           "spec": {**spec, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "eval", "image": "eval:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
           "status": status}
    resolved = catalog.resolve(job)
    assert (resolved.pods, resolved.total.gpu) == (pods, pods)


def _pytorchjob(conditions: list[dict], suspend: bool = False) -> dict:
    """A PyTorchJob (kubeflow.org/v1) of a master and 2 one-GPU workers with the given conditions."""
    def spec(n):
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "pytorch:2.5", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "mnist", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-000000000008"},
            "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {"Master": spec(1), "Worker": spec(2)}},
            "status": {"conditions": conditions}}


def _cond(type_, status, at, reason=""):
    return {"type": type_, "status": status, "reason": reason, "lastTransitionTime": at}


CREATED = _cond("Created", "True", "2026-12-01T10:00:00Z", "PyTorchJobCreated")


@pytest.mark.parametrize("conditions, suspend, expected", [
    # a worker failed and is recreated (restartPolicy OnFailure): Running gives way to Restarting
    ([CREATED, _cond("Running", "False", "2026-12-01T10:05:00Z"),
      _cond("Restarting", "True", "2026-12-01T10:05:00Z", "PyTorchJobRestarting")], False, "Degraded"),
    # suspended while restarting: the pods are deleted, Running False, Restarting left as it was
    ([CREATED, _cond("Restarting", "True", "2026-12-01T10:05:00Z", "PyTorchJobRestarting"),
      _cond("Suspended", "True", "2026-12-01T10:06:00Z", "PyTorchJobSuspended")], True, "Suspended"),
    # resumed: Suspended flips to False; the old Restarting is stale, the pods are coming back
    ([CREATED, _cond("Restarting", "True", "2026-12-01T10:05:00Z", "PyTorchJobRestarting"),
      _cond("Suspended", "False", "2026-12-01T11:00:00Z", "PyTorchJobResumed")], False, "Initializing"),
    ([CREATED, _cond("Restarting", "True", "2026-12-01T10:05:00Z", "PyTorchJobRestarting"),
      _cond("Suspended", "False", "2026-12-01T11:00:00Z", "PyTorchJobResumed"),
      _cond("Running", "True", "2026-12-01T11:02:00Z", "PyTorchJobRunning")], False, "Running"),
    # a restart after the resume is live again
    ([CREATED, _cond("Suspended", "False", "2026-12-01T11:00:00Z", "PyTorchJobResumed"),
      _cond("Restarting", "True", "2026-12-01T11:30:00Z", "PyTorchJobRestarting")], False, "Degraded"),
])
def test_pytorchjob_restarting_after_suspend_and_resume(catalog, conditions, suspend, expected):
    resolved = catalog.resolve(_pytorchjob(conditions, suspend))
    assert resolved.status == expected, resolved.statuses


def _rayjob_v1_0(deployment_status: str, job_status: str = "") -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "rayjob-sample", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-000000000009"},
            "spec": {"entrypoint": "python /home/ray/samples/sample_code.py", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                         {"name": "ray-head", "image": "rayproject/ray:2.9.0",
                          "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]}}}}},
            "status": {"jobDeploymentStatus": deployment_status, "jobStatus": job_status,
                       "rayClusterName": "rayjob-sample-raycluster-x2k9p"}}


@pytest.mark.parametrize("deployment_status, job_status, expected", [
    # KubeRay v1.0 JobDeploymentStatus values (ray-operator/apis/ray/v1/rayjob_types.go)
    ("Initializing", "", "Initializing"),
    ("WaitForDashboard", "", "Initializing"),
    ("WaitForDashboardReady", "", "Initializing"),
    ("WaitForK8sJob", "", "Initializing"),
    ("FailedToGetOrCreateRayCluster", "", "Degraded"),
    ("FailedJobDeploy", "", "Degraded"),
    ("FailedToGetJobStatus", "RUNNING", "Degraded"),
    ("Running", "RUNNING", "Running"),
    ("Complete", "SUCCEEDED", "Completed"),
    ("Complete", "FAILED", "Failed"),
])
def test_rayjob_v1_0_statuses(catalog, deployment_status, job_status, expected):
    resolved = catalog.resolve(_rayjob_v1_0(deployment_status, job_status))
    assert resolved.status == expected, resolved.statuses


def _raycluster_v1_1(state: str | None, reason: str = "", suspend: bool = False) -> dict:
    """A RayCluster written by KubeRay v1.1 (no status conditions; only .status.state)."""
    obj = _raycluster({"replicas": 2, "minReplicas": 1, "maxReplicas": 4})
    obj["spec"]["suspend"] = suspend
    obj["status"] = {"state": state, "reason": reason} if state is not None else {}
    return obj


@pytest.mark.parametrize("state, reason, suspend, expected", [
    # v1.1 raycluster_controller.go Reconcile: any reconcile error (here reconcilePods refused by a
    # ResourceQuota, the case of ray-project/kuberay#2357) writes state "failed" and requeues;
    # calculateStatus writes "ready" again once every pod runs. Retried, not terminal.
    ("failed", 'pods "raycluster-gpu-worker-gpu-mh9v2" is forbidden: exceeded quota: gpu-quota', False, "Degraded"),
    # v1.0/v1.1 calculateStatus: invalid head rayStartParams (object-store-memory above the head's
    # memory request) make the state "unhealthy" on every reconcile until the spec is fixed
    ("unhealthy", "", False, "Degraded"),
    ("ready", "", False, "Running"),
    (None, "", False, "Initializing"),
    ("failed", "", True, "Suspending"),   # suspend requested: pods being deleted
    ("suspended", "", True, "Suspended"),
])
def test_raycluster_states_of_operators_before_v1_2(catalog, state, reason, suspend, expected):
    resolved = catalog.resolve(_raycluster_v1_1(state, reason, suspend))
    assert resolved.status == expected, resolved.statuses
    assert resolved.total.gpu == 2   # the two worker pods the controller keeps trying to run


def _rayservice_v1_1(service_status: str) -> dict:
    """A RayService written by KubeRay v1.1 (no conditions, only serviceStatus), after
    ray-operator/config/samples/ray-service.sample.yaml with one 1-GPU worker."""
    obj = _raycluster({"replicas": 1, "minReplicas": 1, "maxReplicas": 5})
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "rayservice-sample", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-00000000000b"},
            "spec": {"serviceUnhealthySecondThreshold": 900, "deploymentUnhealthySecondThreshold": 300,
                     "serveConfigV2": "applications: []", "rayClusterConfig": obj["spec"]},
            "status": {"serviceStatus": service_status,
                       "activeServiceStatus": {"rayClusterName": "rayservice-sample-raycluster-6mj28"}}}


@pytest.mark.parametrize("service_status, expected", [
    # ServiceStatus values of KubeRay v1.0-v1.2 (ray-operator/apis/ray/v1/rayservice_types.go)
    ("", "Initializing"),
    ("WaitForDashboard", "Initializing"),              # v1.0 only
    ("WaitForServeDeploymentReady", "Initializing"),
    ("Running", "Running"),
    # rayservice_controller.go markRestartAndAddPendingClusterName: the serving cluster stayed
    # unhealthy past serviceUnhealthySecondThreshold; a new cluster is being prepared
    ("Restarting", "Degraded"),
    # updateState(..., err): a reconcile error, requeued and retried
    ("FailedToGetOrCreateRayCluster", "Degraded"),
    ("FailedToGetServeDeploymentStatus", "Degraded"),
    ("FailedToUpdateIngress", "Degraded"),             # v1.0 only
    ("FailedToUpdateServingPodLabel", "Degraded"),
    ("FailedToUpdateService", "Degraded"),
])
def test_rayservice_statuses_of_operators_before_v1_3(catalog, service_status, expected):
    resolved = catalog.resolve(_rayservice_v1_1(service_status))
    assert resolved.status == expected, resolved.statuses
    assert resolved.total.gpu == 1


def _rayservice_upgrading(active: str, pending: str, strategy: str | None = None, min_replicas: int = 2) -> dict:
    """ray-operator/config/samples/ray-service.deepseek.yaml (head 2 CPU / 32Gi, worker group gpu-group
    of 2 x 8 GPUs) with the status of a zero-downtime upgrade after its spec changed
    (rayservice_controller.go calculateConditions: UpgradeInProgress=True, BothActivePendingClustersExist)."""
    head = {"name": "ray-head", "image": "vllm/vllm-openai:v0.8.5",
            "resources": {"limits": {"cpu": "2", "memory": "32Gi"}, "requests": {"cpu": "2", "memory": "32Gi"}}}
    worker = {"name": "ray-worker", "image": "vllm/vllm-openai:v0.8.5", "resources": {
        "limits": {"cpu": "24", "memory": "500Gi", "nvidia.com/gpu": "8"},
        "requests": {"cpu": "24", "memory": "500Gi", "nvidia.com/gpu": "8"}}}
    both = bool(active and pending)
    obj = {"apiVersion": "ray.io/v1", "kind": "RayService",
           "metadata": {"name": "deepseek-r1", "namespace": "llm", "uid": "7c1e0f9a-0000-4000-8000-00000000000c"},
           "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": {
               "rayVersion": "2.46.0", "enableInTreeAutoscaling": strategy == "NewClusterWithIncrementalUpgrade",
               "headGroupSpec": {"rayStartParams": {"num-gpus": "0"}, "template": {"spec": {"containers": [head]}}},
               "workerGroupSpecs": [{"groupName": "gpu-group", "replicas": 2, "minReplicas": min_replicas,
                                     "maxReplicas": 2, "numOfHosts": 1, "rayStartParams": {},
                                     "template": {"spec": {"containers": [worker]}}}]}},
           "status": {"activeServiceStatus": {"rayClusterName": active} if active else {},
                      "pendingServiceStatus": {"rayClusterName": pending} if pending else {},
                      "numServeEndpoints": 3 if active else 0, "conditions": [
                          {"type": "Ready", "status": "True" if active else "False",
                           "reason": "NonZeroServeEndpoints" if active else "Initializing"},
                          {"type": "UpgradeInProgress", "status": "True" if both else "False",
                           "reason": "BothActivePendingClustersExist" if both else
                           ("NoPendingCluster" if active else "Initializing")}]}}
    if strategy:
        obj["spec"]["upgradeStrategy"] = {"type": strategy}
    return obj


@pytest.mark.parametrize("obj, pending_workers, gpus", [
    # NewCluster (the default strategy): the pending cluster is the whole current spec, beside the
    # active cluster that keeps serving until the pending one is promoted
    (_rayservice_upgrading("deepseek-r1-raycluster-h2x9k", "deepseek-r1-raycluster-q7d4m"), 2, 32),
    # NewClusterWithIncrementalUpgrade: constructRayClusterForRayService clears the pending cluster's
    # worker replicas, so its groups start at minReplicas and the autoscaler grows them
    (_rayservice_upgrading("deepseek-r1-raycluster-h2x9k", "deepseek-r1-raycluster-q7d4m",
                           "NewClusterWithIncrementalUpgrade", min_replicas=1), 1, 24),
    # first start: the first cluster is created as the pending one, there is no active cluster yet
    (_rayservice_upgrading("", "deepseek-r1-raycluster-h2x9k"), None, 16),
    # promoted: one cluster
    (_rayservice_upgrading("deepseek-r1-raycluster-q7d4m", ""), None, 16),
])
def test_rayservice_upgrade_counts_the_pending_cluster(catalog, obj, pending_workers, gpus):
    resolved = catalog.resolve(obj).to_dict()
    heads = [c for c in resolved["components"] if c["name"] == "head-pending"]
    workers = [c for c in resolved["components"] if c["name"] == "worker-pending"]
    if pending_workers is None:
        assert heads == [] and workers == []
    else:
        assert [h["instance"] for h in heads] == [obj["status"]["pendingServiceStatus"]["rayClusterName"]]
        assert heads[0]["perPod"]["cpu"] == pytest.approx(2 + (0.5 if obj["spec"].get("upgradeStrategy") else 0))
        assert [(w["instance"], w["pods"]) for w in workers] == [("gpu-group", pending_workers)]
    assert resolved["total"]["gpu"] == gpus
    assert resolved["status"] == ("Running" if obj["status"]["activeServiceStatus"] else "Initializing")


def test_a_pod_of_the_pending_ray_cluster_matches_head_or_worker(catalog):
    from workloadmap.catalog.pods import match_pod

    pod = _pod("deepseek-r1-raycluster-q7d4m-gpu-group-worker-8xk2p", {
        "ray.io/node-type": "worker", "ray.io/group": "gpu-group", "ray.io/cluster": "deepseek-r1-raycluster-q7d4m",
        "ray.io/is-ray-node": "yes", "ray.io/worker-group-replica-index": "0"})
    membership = match_pod(catalog.get("rayservice"), pod)
    assert (membership.component, membership.instance) == ("worker", "gpu-group")


@pytest.mark.parametrize("run_launcher_as_worker, label", [(True, "3"), (False, "2")])
def test_mpijob_worker_index_with_run_launcher_as_worker(catalog, run_launcher_as_worker, label):
    # mpi-operator v2beta1 newWorker: pod "<job>-worker-<i>", replica-index label i+1 when the
    # launcher runs as a worker (it takes "0"), i otherwise (workerReplicaIndexLabel)
    from workloadmap.catalog.pods import match_pod

    pod = _pod("pi-worker-2", {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "worker",
                               "training.kubeflow.org/operator-name": "mpi-operator",
                               "training.kubeflow.org/replica-index": label})
    got = match_pod(catalog.get("mpijob"), pod)
    assert (got.component, got.replica) == ("worker", "2")
    launcher = _pod("pi-launcher-x7k2p", {"training.kubeflow.org/job-name": "pi",
                                          "training.kubeflow.org/job-role": "launcher",
                                          "training.kubeflow.org/replica-index": "0"})
    assert match_pod(catalog.get("mpijob"), launcher).component == "launcher"


@pytest.mark.parametrize("annotations, replicas, minimum", [
    ({}, 1, None),                                                             # initial scale 1
    ({"autoscaling.knative.dev/min-scale": "0"}, 1, 0),                        # may scale to zero later
    ({"autoscaling.knative.dev/initial-scale": "3"}, 3, None),
    ({"autoscaling.knative.dev/initial-scale": "0", "autoscaling.knative.dev/min-scale": "0"}, 0, 0),
    ({"autoscaling.knative.dev/initial-scale": "2", "autoscaling.knative.dev/min-scale": "4"}, 4, 4),
    ({"autoscaling.knative.dev/initial-scale": "8", "autoscaling.knative.dev/max-scale": "5"}, 5, None),
    ({"autoscaling.knative.dev/initialScale": "2"}, 2, None),                  # the older spelling
])
def test_knative_revision_starts_at_initial_scale(catalog, annotations, replicas, minimum):
    ksvc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": "llm-chat", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-00000000000a"},
            "spec": {"template": {"metadata": {"annotations": annotations}, "spec": {"containers": [
                {"image": "vllm/vllm-openai:v0.8.0", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
    revision = next(c for c in catalog.resolve(ksvc).components if c.name == "revision")
    assert (revision.replicas, revision.min_replicas, revision.pods, revision.total.gpu) == (
        replicas, minimum, replicas, replicas)


@pytest.mark.parametrize("status, groups", [
    # rolling update with maxSurge 1: the leader StatefulSet runs replicas + 1 groups
    ({"replicas": 3, "updatedReplicas": 1, "readyReplicas": 2, "conditions": [
        {"type": "Available", "status": "True"}, {"type": "UpdateInProgress", "status": "True"}]}, 3),
    # done: the surge group is gone (status.replicas back to spec.replicas)
    ({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "conditions": [
        {"type": "Available", "status": "True"}, {"type": "UpdateInProgress", "status": "False"}]}, 2),
    # a lagging status.replicas outside an update does not count
    ({"replicas": 3, "updatedReplicas": 2, "readyReplicas": 2, "conditions": [
        {"type": "Available", "status": "True"}]}, 2),
])
def test_lws_surge_groups_counted_while_they_exist(catalog, status, groups):
    from workloadmap.catalog.pods import gang_groups

    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "vllm", "namespace": "ml", "uid": "7c1e0f9a-0000-4000-8000-00000000000b"},
           "spec": {"replicas": 2, "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {
               "maxUnavailable": 0, "maxSurge": 1}},
               "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [
                   {"name": "vllm", "image": "vllm/vllm-openai:v0.8.0",
                    "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}},
           "status": status}
    resolved = catalog.resolve(lws)
    assert (resolved.pods, resolved.total.gpu) == (2 * groups, 16 * groups)
    pods = [_pod(f"vllm-{g}" + (f"-{w}" if w else ""), {"leaderworkerset.sigs.k8s.io/name": "vllm",
                                                      "leaderworkerset.sigs.k8s.io/group-index": str(g),
                                                      "leaderworkerset.sigs.k8s.io/worker-index": str(w)})
            for g in range(groups) for w in range(2)]
    for p in pods:
        if not p["metadata"]["name"].count("-") == 1:
            p["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/leader-name": p["metadata"]["name"][:-2]}
    assert [(g.key, g.min_member) for g in gang_groups(catalog.get("leaderworkerset"), resolved, pods)] == [
        (f"vllm/{g}", 2) for g in range(groups)]


@pytest.mark.parametrize("extra, cpu, memory", [
    ({}, 1, 2 * 2**30),                                                             # no autoscaler
    ({"enableInTreeAutoscaling": True}, 1.5, 2 * 2**30 + 512 * 2**20),              # its default 500m/512Mi
    ({"enableInTreeAutoscaling": True, "autoscalerOptions": {"resources": {
        "requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}},
     1.25, 2 * 2**30 + 256 * 2**20),
])
def test_ray_head_counts_the_autoscaler_container(catalog, extra, cpu, memory):
    from workloadmap.catalog.updating import update_pod_specs

    obj = _raycluster({"replicas": 1, "minReplicas": 0, "maxReplicas": 2})
    obj["spec"].update(extra)
    head = next(c for c in catalog.resolve(obj).components if c.name == "head")
    assert (head.per_pod.cpu, head.per_pod.memory) == (cpu, memory)
    # a gang scheduler's name still goes to the head's pod template, and reads back
    out = update_pod_specs(catalog.get("raycluster"), obj, {"schedulerName": "kai-scheduler",
                                                            "labels": {"kai.scheduler/queue": "a"}})
    template = out["spec"]["headGroupSpec"]["template"]
    assert template["spec"]["schedulerName"] == "kai-scheduler"
    assert template["metadata"]["labels"] == {"kai.scheduler/queue": "a"}
    assert [c["name"] for c in template["spec"]["containers"]] == ["ray-head"]   # nothing added to the object
    assert {c.name: ((c.pod_template or {}).get("spec") or {}).get("schedulerName")
            for c in catalog.resolve(out).components} == {
        "raycluster": None, "head": "kai-scheduler", "worker": "kai-scheduler"}


@pytest.mark.parametrize("mode, head_cpu, submitter_pods", [
    ("SidecarMode", 1.5, 0),     # the ray-job-submitter container joins the head pod (500m requested)
    ("K8sJobMode", 1, 1),        # a submitter Job's pod of its own
    ("HTTPMode", 1, 0),          # the operator submits over HTTP: nothing added
])
def test_rayjob_submitter_by_submission_mode(catalog, mode, head_cpu, submitter_pods):
    from workloadmap.catalog.updating import update_pod_specs

    obj = _rayjob_v1_0("Running", "RUNNING")
    obj["spec"]["submissionMode"] = mode
    views = {c.name: c for c in catalog.resolve(obj).components}
    assert views["head"].per_pod.cpu == head_cpu
    assert views["submitter"].pods == submitter_pods
    out = update_pod_specs(catalog.get("rayjob"), obj, {"schedulerName": "kai-scheduler"}, components=["head"])
    assert out["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["schedulerName"] == "kai-scheduler"


def _isvc(predictor: dict, annotations: dict | None = None) -> dict:
    """A KServe v1beta1 InferenceService (kserve/kserve pkg/apis/serving/v1beta1) with this predictor."""
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "iris", "namespace": "serving", "uid": "1b2c3d4e-0000-4000-8000-0000000000aa",
                         "annotations": annotations or {}},
            "spec": {"predictor": predictor}}


@pytest.mark.parametrize("predictor, source, cpu", [
    # the model's container is merged onto the runtime's (MergeRuntimeContainers): what it leaves unset
    # comes from the ServingRuntime, which the object does not show
    ({"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "gs://kfserving-examples/models/sklearn/1.0/model"}},
     "ServingRuntime auto-selected for model format sklearn", 0),
    ({"model": {"modelFormat": {"name": "sklearn"}, "runtime": "kserve-sklearnserver",
                "resources": {"requests": {"cpu": "500m"}}}},
     "ServingRuntime kserve-sklearnserver", 0.5),
    ({"sklearn": {"storageUri": "gs://kfserving-examples/models/sklearn/1.0/model"}},
     "ServingRuntime auto-selected for model format sklearn", 0),
    ({"model": {"modelFormat": {"name": "sklearn"},
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}}},
     None, 1),
    ({"model": {"modelFormat": {"name": "xgboost"}, "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}},
     None, 2),
    # a custom container: no runtime, its own requests (none here) are all there is
    ({"containers": [{"name": "kserve-container", "image": "example.com/predictor:1"}]}, None, 0),
])
def test_inference_service_requests_from_the_serving_runtime(catalog, predictor, source, cpu):
    resolved = catalog.resolve(_isvc(predictor)).to_dict()
    (view,) = [c for c in resolved["components"] if c["name"] == "predictor"]
    assert view.get("requestsFrom") == source
    assert view["perPod"]["cpu"] == cpu


def test_inference_service_in_model_mesh_mode_has_no_runtime_requests_of_its_own(catalog):
    obj = _isvc({"model": {"modelFormat": {"name": "sklearn"}}}, {"serving.kserve.io/deploymentMode": "ModelMesh"})
    (view,) = [c for c in catalog.resolve(obj).to_dict()["components"] if c["name"] == "predictor"]
    assert "requestsFrom" not in view and view["pods"] == 0


def _canary(percent, rolled_out="iris-predictor-00001", created="iris-predictor-00002", mode=None):
    """An InferenceService in a canary rollout (kserve knative_service.go: the traffic split between
    the latest revision and LatestRolledoutRevision while canaryTrafficPercent < 100)."""
    obj = _isvc({"minReplicas": 2, "model": {
        "modelFormat": {"name": "sklearn"}, "storageUri": "gs://kfserving-examples/models/sklearn/1.0/model-2",
        "resources": {"requests": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}}}},
        {"serving.kserve.io/deploymentMode": mode} if mode else None)
    if percent is not None:
        obj["spec"]["predictor"]["canaryTrafficPercent"] = percent
    obj["status"] = {"components": {"predictor": {
        "latestCreatedRevision": created, "latestReadyRevision": created, "latestRolledoutRevision": rolled_out,
        "previousRolledoutRevision": rolled_out,
        "traffic": [{"latestRevision": True, "percent": percent or 100, "revisionName": created}]
        + ([{"latestRevision": False, "percent": 100 - percent, "revisionName": rolled_out, "tag": "prev"}]
           if percent is not None and percent < 100 else [])}}}
    return obj


@pytest.mark.parametrize("obj, previous, gpus", [
    (_canary(10), "iris-predictor-00001", 4),          # 2 pods of each revision while traffic is split
    (_canary(0), "iris-predictor-00001", 4),           # the new revision keeps its minimum at 0%
    (_canary(100), None, 2),                           # promoted: the previous revision gets no traffic
    (_canary(None), None, 2),                          # no canary: a blue-green rollout, 100% to the latest
    (_canary(10, rolled_out="iris-predictor-00002"), None, 2),   # no new revision yet: one revision
])
def test_inference_service_canary_counts_the_previous_revision(catalog, obj, previous, gpus):
    resolved = catalog.resolve(obj).to_dict()
    views = [c for c in resolved["components"] if c["name"] == "predictor-previous"]
    assert [v["instance"] for v in views] == ([previous] if previous else [])
    assert resolved["total"]["gpu"] == gpus


def test_a_pod_of_the_previous_revision_matches_the_predictor(catalog):
    from workloadmap.catalog.pods import match_pod

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "iris-predictor-00001-deployment-7d9f-abcde",
           "namespace": "serving", "labels": {"component": "predictor", "serving.kserve.io/inferenceservice": "iris",
                                              "serving.knative.dev/revision": "iris-predictor-00001"}}}
    membership = match_pod(catalog.get("inferenceservice"), pod)
    assert membership is not None and membership.component == "predictor"


def _scaled_isvc(min_replicas, annotations=None, status_mode=None, transformer=False):
    """kserve docs/samples/fluid/kserve-isvc.yaml: a huggingface predictor with minReplicas 0 and one GPU
    (scale to zero), in the deployment mode the annotations (or status.deploymentMode) give."""
    predictor = {"nodeSelector": {"node.kubernetes.io/instance-type": "g5.8xlarge"}, "model": {
        "runtime": "custom-kserve-huggingfaceserver", "modelFormat": {"name": "huggingface"},
        "storageUri": "pvc://s3-data/llama-31-8b-instruct",
        "resources": {"limits": {"cpu": "24", "memory": "48Gi", "nvidia.com/gpu": "1"},
                      "requests": {"cpu": "24", "memory": "48Gi", "nvidia.com/gpu": "1"}}}}
    if min_replicas is not None:
        predictor["minReplicas"] = min_replicas
    obj = _isvc(predictor, annotations)
    obj["metadata"]["name"] = "llama-31-8b-instruct"
    if transformer:
        obj["spec"]["transformer"] = {"minReplicas": min_replicas, "containers": [
            {"name": "kserve-container", "image": "example.com/tokenizer:1",
             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    if status_mode:
        obj["status"] = {"deploymentMode": status_mode}
    return obj


KNATIVE_MODE = {"serving.kserve.io/deploymentMode": "Knative"}
STANDARD_MODE = {"serving.kserve.io/deploymentMode": "Standard"}


@pytest.mark.parametrize("obj, pods, minimum", [
    # Knative/Serverless (the default mode of config/configmap/inferenceservice.yaml): min-scale is
    # minReplicas (knative utils SetAutoScalingAnnotations), the revision starts at initial-scale (1)
    pytest.param(_scaled_isvc(0), 1, 0, id="default-mode-scale-to-zero-starts-at-1"),
    pytest.param(_scaled_isvc(0, KNATIVE_MODE), 1, 0, id="knative-scale-to-zero-starts-at-1"),
    pytest.param(_scaled_isvc(0, {"serving.kserve.io/deploymentMode": "Serverless"}), 1, 0, id="serverless"),
    pytest.param(_scaled_isvc(0, {**KNATIVE_MODE, "autoscaling.knative.dev/initial-scale": "0"}), 0, 0,
                 id="knative-zero-initial-scale"),
    pytest.param(_scaled_isvc(1, {**KNATIVE_MODE, "autoscaling.knative.dev/initial-scale": "3"}), 3, 1,
                 id="knative-initial-scale-above-min"),
    pytest.param(_scaled_isvc(2, KNATIVE_MODE), 2, 2, id="knative-min-above-initial"),
    pytest.param(_scaled_isvc(None, KNATIVE_MODE), 1, 1, id="knative-default-min"),
    # Standard/RawDeployment: the HPA's minimum is at least 1 (hpa_reconciler.go createHPA)
    pytest.param(_scaled_isvc(0, STANDARD_MODE), 1, 0, id="standard-hpa-keeps-one"),
    pytest.param(_scaled_isvc(0, {"serving.kserve.io/deploymentMode": "RawDeployment"}), 1, 0, id="raw-hpa"),
    pytest.param(_scaled_isvc(0, None, status_mode="Standard"), 1, 0, id="status-mode-standard"),
    # ... KEDA scales to minReplicaCount = minReplicas; class none sets the Deployment's replicas to it
    pytest.param(_scaled_isvc(0, {**STANDARD_MODE, "serving.kserve.io/autoscalerClass": "keda"}), 0, 0, id="keda"),
    pytest.param(_scaled_isvc(0, {**STANDARD_MODE, "serving.kserve.io/autoscalerClass": "none"}), 0, 0, id="none"),
    pytest.param(_scaled_isvc(3, {**STANDARD_MODE, "serving.kserve.io/autoscalerClass": "none"}), 3, 3,
                 id="none-min-3"),
])
def test_inference_service_pods_at_start_by_mode_and_autoscaler(catalog, obj, pods, minimum):
    resolved = catalog.resolve(obj)
    predictor = next(c for c in resolved.components if c.name == "predictor")
    assert (predictor.pods, predictor.min_replicas) == (pods, minimum)
    assert resolved.total.gpu == pods
    assert resolved.total.cpu == 24 * pods


def test_inference_service_transformer_scale_to_zero_starts_at_one(catalog):
    resolved = catalog.resolve(_scaled_isvc(0, KNATIVE_MODE, transformer=True))
    transformer = next(c for c in resolved.components if c.name == "transformer")
    assert (transformer.pods, transformer.min_replicas) == (1, 0)
    assert resolved.total.cpu == 24 + 1


def _dgd_v1beta1_disagg_multinode() -> dict:
    """ai-dynamo/dynamo examples/backends/vllm/deploy/v1beta1/disagg-multinode.yaml: nvidia.com/v1beta1 (the
    storage version since the API graduated) lists .spec.components with a native podTemplate, where
    v1alpha1 had the .spec.services map (api/v1beta1/dynamographdeployment_types.go)."""
    def worker(name):
        return {"name": name, "type": "worker", "replicas": 1, "multinode": {"nodeCount": 2}, "podTemplate": {"spec": {
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
                            "command": ["python3", "-m", "dynamo.vllm"],
                            "args": ["--model", "Qwen/Qwen3-0.6B", "--tensor-parallel-size", "2"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": "vllm-disagg", "namespace": "dynamo", "uid": "7c1e0f9a-0000-4000-8000-00000000000d"},
            "spec": {"components": [
                {"name": "Frontend", "type": "frontend", "replicas": 1, "podTemplate": {"spec": {"containers": [
                    {"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
                     "command": ["python3", "-m", "dynamo.frontend"], "args": ["--http-port", "8000"]}]}}},
                worker("decode"), worker("prefill")]},
            "status": {"state": "successful", "conditions": [
                {"type": "Ready", "status": "True", "reason": "all_resources_are_ready"}]}}


def test_dynamo_v1beta1_components_list(catalog):
    resolved = catalog.resolve(_dgd_v1beta1_disagg_multinode())
    assert resolved.status == "Running"
    services = {c.instance: c for c in resolved.components if c.name == "service"}
    assert {k: (v.replicas, v.pods, v.total.gpu) for k, v in services.items()} == {
        "Frontend": (1, 1, 0), "decode": (1, 2, 2), "prefill": (1, 2, 2)}   # multinode: nodeCount pods per replica
    assert (resolved.pods, resolved.total.gpu) == (5, 4)


def test_dynamo_v1beta1_pod_labels_and_gang(catalog):
    """A decode pod on the Grove pathway (PCSG <dgd>-0-decode) matches its component by name, and the
    multinode replica is one gang of nodeCount pods, as for v1alpha1."""
    from workloadmap.catalog.pods import match_pod

    obj = _dgd_v1beta1_disagg_multinode()
    obj["spec"]["labels"] = {"team": "inference"}
    obj["spec"]["components"][1]["podTemplate"]["metadata"] = {"labels": {"tier": "decode"}}
    (decode,) = [c for c in catalog.resolve(obj).components if c.name == "service" and c.instance == "decode"]
    assert decode.pods == 2
    # DGD-level labels reach every pod template, the component's podTemplate.metadata adds its own
    assert decode.pod_template["metadata"]["labels"] == {"team": "inference", "tier": "decode"}
    pod = _pod("vllm-disagg-0-decode-0-ldr-x1", {
        "nvidia.com/dynamo-component": "decode", "nvidia.com/dynamo-graph-deployment-name": "vllm-disagg",
        "grove.io/podcliquescalinggroup": "vllm-disagg-0-decode",
        "grove.io/podcliquescalinggroup-replica-index": "0"})
    got = match_pod(catalog.get("dynamographdeployment-v1beta1"), pod)
    assert (got.component, got.instance, got.replica) == ("service", "decode", "0")


def test_dynamo_definition_is_picked_by_api_version(catalog):
    """Each served version has its definition (the catalog's exact-version rule): v1beta1's components
    list is not read by the v1alpha1 definition, nor the v1alpha1 services map by v1beta1's."""
    beta = _dgd_v1beta1_disagg_multinode()
    assert catalog.definition_for(beta).name == "dynamographdeployment-v1beta1"
    alpha = example_objects("dynamographdeployment")["vllm-disagg"]
    assert catalog.definition_for(alpha).name == "dynamographdeployment"
    mislabelled = {**beta, "apiVersion": "nvidia.com/v1alpha1"}
    assert [c for c in catalog.resolve(mislabelled).components if c.name == "service"] == []
    mislabelled = {**alpha, "apiVersion": "nvidia.com/v1beta1"}
    assert [c for c in catalog.resolve(mislabelled).components if c.name == "service"] == []


def _llmisvc(ready: dict | None, stop: str | None = None, presets: dict | None = None) -> dict:
    """An LLMInferenceService (kserve/kserve pkg/apis/serving/v1alpha2) with this Ready condition, as the
    controller's Knative living-condition roll-up writes it (llm_inference_service_lifecycle.go)."""
    obj = copy.deepcopy(example_objects("llminferenceservice")["qwen3-8b"])
    obj["metadata"]["annotations"] = {} if stop is None else {"serving.kserve.io/stop": stop}
    conditions = [presets or {"type": "PresetsCombined", "status": "True"}]
    if ready is not None:
        conditions.append({"type": "Ready", **ready})
    obj["status"] = {"conditions": conditions}
    return obj


@pytest.mark.parametrize("ready, stop, presets, status", [
    # created, no condition yet; then the Deployment is created (Progressing) and not yet available
    (None, None, None, "Initializing"),
    ({"status": "False", "reason": "Progressing"}, None, None, "Initializing"),
    ({"status": "False", "reason": "MinimumReplicasUnavailable"}, None, None, "Initializing"),
    ({"status": "False", "reason": "WaitingForGateway"}, None, None, "Initializing"),
    ({"status": "True"}, None, None, "Running"),
    # the controller could not create the Deployment (an invalid pod spec): reconcile error on Ready
    ({"status": "False", "reason": "ReconcileSingleNodeWorkloadError"}, None, None, "Failed"),
    ({"status": "False", "reason": "ProgressDeadlineExceeded"}, None, None, "Failed"),
    # a baseRef naming no LLMInferenceServiceConfig: PresetsCombined=False, Ready Unknown
    ({"status": "Unknown", "reason": "NewObservedGenFailure"}, None,
     {"type": "PresetsCombined", "status": "False", "reason": "ConfigNotFound"}, "Failed"),
    # the stop annotation (any case of "true"), before and after the controller acted
    ({"status": "True"}, "true", None, "Suspending"),
    ({"status": "False", "reason": "Stopped"}, "TRUE", None, "Suspended"),
    # the annotation lifted (or "false"): the controller has not recreated the workloads yet
    ({"status": "False", "reason": "Stopped"}, "false", None, "Resuming"),
    ({"status": "False", "reason": "Stopped"}, None, None, "Resuming"),
    # an error while a stop is asked: the stop wins (every workload is being deleted)
    ({"status": "False", "reason": "ReconcileSingleNodeWorkloadError"}, "true", None, "Suspending"),
])
def test_llm_inference_service_status_from_ready(catalog, ready, stop, presets, status):
    assert catalog.resolve(_llmisvc(ready, stop, presets)).status == status


def test_llm_inference_service_stop_annotation_is_its_suspend_and_resume(catalog):
    from workloadmap.catalog.updating import resume, suspend

    definition = catalog.get("llminferenceservice")
    running = _llmisvc({"status": "True"})
    stopped = suspend(definition, running)
    assert stopped["metadata"]["annotations"]["serving.kserve.io/stop"] == "true"
    assert catalog.resolve(stopped).pods == 0          # every workload is deleted while stopped
    assert catalog.resolve(running).pods == 1
    resumed = resume(definition, stopped)
    assert resumed["metadata"]["annotations"]["serving.kserve.io/stop"] == "false"
    assert catalog.resolve(resumed).pods == 1


def test_llm_inference_service_v1alpha1_is_served_by_the_one_definition(catalog):
    obj = example_objects("llminferenceservice")["deepseek-r1-dp"]
    assert obj["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert catalog.definition_for(obj).name == "llminferenceservice"
    assert catalog.definition_for({**obj, "apiVersion": "serving.kserve.io/v1alpha2"}).name == "llminferenceservice"


@pytest.mark.parametrize("parallelism, template, worker_pods_per_group", [
    ({"data": 16, "dataLocal": 8}, True, 1),     # size max(16 / 8, 1) = 2: the leader + 1 worker
    ({"data": 8, "dataLocal": 8}, True, 0),      # size 1: the leader alone
    ({"data": 4, "dataLocal": 8}, True, 0),      # 4 / 8 = 0 in integer division, raised to 1
    ({"pipeline": 4}, True, 3),                  # pipeline parallel: size = pipeline
    ({"tensor": 8}, True, 0),                    # tensor only: no size, the LWS default 1
    ({"data": 16, "dataLocal": 8}, False, 2),    # no leader template: the leader is a worker pod
])
def test_llm_inference_service_multi_node_group_size(catalog, parallelism, template, worker_pods_per_group):
    """ParallelismSpec.GetSize (llm_inference_service_types_func.go) is the LWS size."""
    obj = copy.deepcopy(example_objects("llminferenceservice")["deepseek-r1-dp"])
    obj["spec"]["parallelism"] = parallelism
    if not template:
        del obj["spec"]["template"]
    views = {c.name: c for c in catalog.resolve(obj).components}
    assert views["worker"].pods == 2 * worker_pods_per_group
    assert views["main"].pods == (2 if template else 0)


def _sandbox(mode: str | None, *conditions: tuple) -> dict:
    """A Sandbox (kubernetes-sigs/agent-sandbox api/v1beta1) with operatingMode `mode` (None: unset, the
    default Running) and the conditions computeReadyCondition / computeSuspendedCondition /
    computeFinishedCondition write (controllers/sandbox_controller.go), as (type, status, reason)."""
    obj = copy.deepcopy(example_objects("sandbox")["code-agent-7f3k"])
    obj["spec"].pop("operatingMode")
    if mode is not None:
        obj["spec"]["operatingMode"] = mode
    obj["status"] = {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]}
    return obj


@pytest.mark.parametrize("mode, conditions, status, pods", [
    # created, the controller not yet run; then the pod is pending
    ("Running", (), "Initializing", 1),
    (None, (("Ready", "False", "DependenciesNotReady"), ("Suspended", "False", "NotSuspended")), "Initializing", 1),
    (None, (("Ready", "True", "DependenciesReady"), ("Suspended", "False", "NotSuspended")), "Running", 1),
    # suspend asked: not yet acted on (Ready still True), then the pod terminating, then gone
    ("Suspended", (("Ready", "True", "DependenciesReady"), ("Suspended", "False", "NotSuspended")), "Suspending", 0),
    ("Suspended", (("Ready", "False", "SandboxSuspended"), ("Suspended", "False", "PodTerminating")), "Suspending", 0),
    ("Suspended", (("Ready", "False", "SandboxSuspended"), ("Suspended", "True", "PodTerminated")), "Suspended", 0),
    # resume asked: not yet acted on; then the new pod starting (Suspended reset to NotSuspended)
    ("Running", (("Ready", "False", "SandboxSuspended"), ("Suspended", "True", "PodTerminated")), "Resuming", 1),
    ("Running", (("Ready", "False", "DependenciesNotReady"), ("Suspended", "False", "NotSuspended")),
     "Initializing", 1),
    # a lingering Suspended=True once the pod is Ready again: Ready decides
    ("Running", (("Ready", "True", "DependenciesReady"), ("Suspended", "True", "PodTerminated")), "Running", 1),
    # the pod terminal; the shutdownTime reached (resources torn down)
    (None, (("Ready", "False", "PodSucceeded"), ("Finished", "True", "PodSucceeded")), "Completed", 0),
    (None, (("Ready", "False", "PodFailed"), ("Finished", "True", "PodFailed")), "Failed", 0),
    (None, (("Ready", "False", "SandboxExpired"),), "Completed", 0),
    # the controller cannot keep it ready
    (None, (("Ready", "False", "ReconcilerError"),), "Degraded", 1),
    (None, (("Ready", "False", "MultiplePods"),), "Degraded", 1),
])
def test_sandbox_has_all_eight_statuses(catalog, mode, conditions, status, pods):
    resolved = catalog.resolve(_sandbox(mode, *conditions))
    assert (resolved.status, resolved.pods) == (status, pods)


def test_sandbox_suspend_and_resume_write_the_operating_mode(catalog):
    from workloadmap.catalog.updating import resume, suspend

    definition = catalog.get("sandbox")
    running = _sandbox(None, ("Ready", "True", "DependenciesReady"))
    asked = suspend(definition, running)
    assert asked["spec"]["operatingMode"] == "Suspended"
    assert catalog.resolve(asked).status == "Suspending"     # the controller has not acted yet
    back = resume(definition, asked)
    assert back["spec"]["operatingMode"] == "Running"
    assert catalog.resolve(back).status == "Running"


@pytest.mark.parametrize("state, conditions, status, pods", [
    # reconcileNIMCache (NVIDIA/k8s-nim-operator internal/controller/nimcache_controller.go)
    (None, (), "Initializing", 1),
    ("PVC-Created", (("NIM_CACHE_PVC_CREATED", "True", "PVCCreated"),), "Initializing", 1),
    ("Started", (("NIM_CACHE_JOB_CREATED", "True", "JobCreated"),), "Initializing", 1),
    ("Pending", (("NIM_CACHE_JOB_PENDING", "True", "JobPending"),), "Initializing", 1),
    ("InProgress", (("NIM_CACHE_JOB_PENDING", "False", "JobRunning"),), "Running", 1),
    # a failed attempt (Failed), then the Job's retry pod active again: InProgress, JobFailed kept
    ("Failed", (("NIM_CACHE_JOB_COMPLETED", "False", "JobFailed"),), "Failed", 0),
    ("InProgress", (("NIM_CACHE_JOB_COMPLETED", "False", "JobFailed"),), "Degraded", 1),
    ("Ready", (("NIM_CACHE_JOB_COMPLETED", "True", "JobCompleted"),), "Completed", 0),
    # the only writer of NotReady is a reconcile error
    ("NotReady", (("NIM_CACHE_RECONCILE_FAILED", "True", "ReconcileFailed"),), "Failed", 1),
])
def test_nim_cache_states(catalog, state, conditions, status, pods):
    obj = copy.deepcopy(example_objects("nimcache")["meta-llama3-8b-instruct"])
    obj["status"] = {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]}
    if state is not None:
        obj["status"]["state"] = state
    resolved = catalog.resolve(obj)
    assert (resolved.status, resolved.pods) == (status, pods)


def test_nim_cache_pod_is_told_from_the_nim_service_pod_of_the_same_name(catalog):
    """NIMService pods carry app.kubernetes.io/name too (often the cache's name): only the caching
    Job's pod (app=k8s-nim-operator, job-name <name>-job) is the cache's."""
    from workloadmap.catalog.pods import match_pod

    definition = catalog.get("nimcache")
    service_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "meta-llama3-8b-instruct-6d9f", "labels": {
        "app": "meta-llama3-8b-instruct", "app.kubernetes.io/name": "meta-llama3-8b-instruct"}}, "spec": {}}
    assert match_pod(definition, service_pod) is None
    job_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "meta-llama3-8b-instruct-job-x", "labels": {
        "app": "k8s-nim-operator", "app.kubernetes.io/name": "meta-llama3-8b-instruct",
        "job-name": "meta-llama3-8b-instruct-job"}}, "spec": {}}
    assert match_pod(definition, job_pod).component == "caching-job"


def _milvus_cluster(dependencies: dict) -> dict:
    obj = copy.deepcopy(example_objects("milvus")["vectordb-prod"])
    obj["spec"]["dependencies"] = dependencies
    return obj


def _dependency_pods(catalog, obj) -> dict:
    names = ("etcd", "minio", "pulsar-zookeeper", "pulsar-bookkeeper", "pulsar-broker", "pulsar-proxy",
             "pulsar-autorecovery")
    return {c.name: c.pods for c in catalog.resolve(obj).components if c.name in names}


@pytest.mark.parametrize("dependencies, pods", [
    # an object written before the webhook merged the chart values: the milvus-helm defaults
    # (cluster: etcd 3, MinIO distributed 4, msgStreamType pulsar with chart pulsar-v3)
    ({}, {"etcd": 3, "minio": 4, "pulsar-zookeeper": 3, "pulsar-bookkeeper": 3, "pulsar-broker": 2,
          "pulsar-proxy": 2, "pulsar-autorecovery": 1}),
    # an object upgraded from an older operator keeps chart pulsar-v2 (broker 1, proxy 1)
    ({"pulsar": {"inCluster": {"chartVersion": "pulsar-v2"}}},
     {"etcd": 3, "minio": 4, "pulsar-zookeeper": 3, "pulsar-bookkeeper": 3, "pulsar-broker": 1,
      "pulsar-proxy": 1, "pulsar-autorecovery": 1}),
    # the values as the webhook stores them win; a part turned off in values.components runs nothing
    ({"etcd": {"inCluster": {"values": {"replicaCount": 5}}},
      "storage": {"inCluster": {"values": {"mode": "distributed", "zones": 2, "replicas": 4}}},
      "pulsar": {"inCluster": {"values": {"broker": {"replicaCount": 4}, "components": {"autorecovery": False}}}}},
     {"etcd": 5, "minio": 8, "pulsar-zookeeper": 3, "pulsar-bookkeeper": 3, "pulsar-broker": 4,
      "pulsar-proxy": 2, "pulsar-autorecovery": 0}),
    # external dependencies, a non-MinIO storage type, another message stream: nothing in the cluster
    ({"etcd": {"external": True}, "storage": {"type": "S3", "external": True}, "msgStreamType": "kafka"},
     {"etcd": 0, "minio": 0, "pulsar-zookeeper": 0, "pulsar-bookkeeper": 0, "pulsar-broker": 0,
      "pulsar-proxy": 0, "pulsar-autorecovery": 0}),
    ({"pulsar": {"external": True}}, {"etcd": 3, "minio": 4, "pulsar-zookeeper": 0, "pulsar-bookkeeper": 0,
                                      "pulsar-broker": 0, "pulsar-proxy": 0, "pulsar-autorecovery": 0}),
])
def test_milvus_in_cluster_dependencies(catalog, dependencies, pods):
    """zilliztech/milvus-operator milvus_webhook.go (defaults) and pkg/controllers/dependencies.go (the
    Helm releases); counts from zilliztech/milvus-helm's chart values."""
    assert _dependency_pods(catalog, _milvus_cluster(dependencies)) == pods


def test_milvus_dependency_pods_match_their_component_not_milvus_s(catalog):
    """A Pulsar proxy pod (app=pulsar, component=proxy) is the dependency's, a Milvus proxy pod
    (app.kubernetes.io/component=proxy) Milvus's own."""
    from workloadmap.catalog.pods import match_pod

    definition = catalog.get("milvus")

    def pod(labels):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels}, "spec": {}}

    assert match_pod(definition, pod({"app": "pulsar", "release": "vectordb-prod-pulsar",
                                      "component": "proxy"})).component == "pulsar-proxy"
    assert match_pod(definition, pod({"app": "pulsar", "component": "bookie"})).component == "pulsar-bookkeeper"
    assert match_pod(definition, pod({"app.kubernetes.io/name": "etcd",
                                      "app.kubernetes.io/instance": "vectordb-prod-etcd"})).component == "etcd"
    assert match_pod(definition, pod({"app": "minio", "release": "vectordb-prod-minio"})).component == "minio"
    assert match_pod(definition, pod({"app.kubernetes.io/name": "milvus", "app.kubernetes.io/instance": "vectordb-prod",
                                      "app.kubernetes.io/component": "proxy"})).component == "proxy"


def test_replicas_minus_one_means_an_autoscaler_owns_the_count(catalog):
    """Milvus's convention (components_types.go: replicas -1 = a user HPA controls the count), met
    through any definition that reads the field as is (upstream's Milvus definition does): no count,
    never an error; other negative counts stay errors."""
    from workloadmap.catalog import ResolveError, Resolver, load_definition

    doc = {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "plain-milvus"}, "spec": {
        "structureDefinition": {"rootComponent": {
            "name": "milvus", "kind": {"group": "milvus.io", "version": "v1beta1", "kind": "Milvus"},
            "statusDefinition": {"phaseDefinition": {"path": ".status.status"},
                                 "statusMappings": {"running": [{"byPhase": "Healthy"}]}}},
            "childComponents": [{
                "name": "proxy", "ownerRef": "milvus", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "specDefinition": {"fragmentedPodSpecDefinition": {"resourcesPath": ".spec.components.proxy.resources"}},
                "scaleDefinition": {"replicasPath": ".spec.components.proxy.replicas"}}]}}}
    definition = load_definition(doc, "file", "test")
    obj = copy.deepcopy(example_objects("milvus")["vectordb-prod"])
    obj["spec"]["components"]["proxy"]["replicas"] = -1
    for resolve in (Resolver().resolve, Resolver().reference):
        (proxy,) = [c for c in resolve(obj, definition).components if c.name == "proxy"]
        assert (proxy.replicas, proxy.pods) == (None, 1)
    obj["spec"]["components"]["proxy"]["replicas"] = -2
    with pytest.raises(ResolveError, match="replicasPath: count -2 out of range"):
        Resolver().resolve(obj, definition)
