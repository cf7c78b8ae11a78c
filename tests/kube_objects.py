"""Creating workload objects in a test API server, from the bundled examples.

The examples (catalog/examples/*.yaml) are live objects modelled on the
frameworks' published examples, status included.  The API server sets uid,
resourceVersion and creation time itself and ignores a status sent with a
create (status subresource), so an example goes in as spec first, then its
status through ``/status``, as the framework's controller would write it.
"""

from __future__ import annotations

import copy
import uuid

from workloadmap.catalog.registry import bundled_examples

# set by the API server, or by controllers that do not run here (finalizers: nothing would remove them,
# so a deleted object would stay)
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "ownerReferences",
                 "selfLink", "deletionTimestamp", "finalizers")


def example(kind: str, name: str | None = None) -> dict:
    """A deep copy of a bundled example object of `kind` (the first one, or the one named)."""
    for obj in bundled_examples():
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name):
            return copy.deepcopy(obj)
    raise KeyError(f"no bundled example of kind {kind!r}" + (f" named {name!r}" if name else ""))


def plural_path(obj: dict, namespace: str | None) -> str:
    """The collection path of an object's kind (plurals as the test CRDs and core API define them); a
    cluster-scoped kind's (a Node's) with namespace None."""
    group_version = obj["apiVersion"]
    plural = PLURALS[obj["kind"], group_version.rpartition("/")[0]]
    base = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    return f"{base}/{plural}" if namespace is None else f"{base}/namespaces/{namespace}/{plural}"


JOB_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")

PLURALS = {
    ("Pod", ""): "pods", ("Node", ""): "nodes", ("Deployment", "apps"): "deployments", ("StatefulSet", "apps"): "statefulsets",
    ("Job", "batch"): "jobs", ("CronJob", "batch"): "cronjobs", ("JobSet", "jobset.x-k8s.io"): "jobsets",
    ("PyTorchJob", "kubeflow.org"): "pytorchjobs", ("MPIJob", "kubeflow.org"): "mpijobs",
    ("RayCluster", "ray.io"): "rayclusters", ("RayJob", "ray.io"): "rayjobs", ("RayService", "ray.io"): "rayservices",
    ("InferenceService", "serving.kserve.io"): "inferenceservices", ("Service", "serving.knative.dev"): "services",
    ("NIMService", "apps.nvidia.com"): "nimservices", ("LeaderWorkerSet", "leaderworkerset.x-k8s.io"): "leaderworkersets",
    ("Milvus", "milvus.io"): "milvuses", ("PodCliqueSet", "grove.io"): "podcliquesets",
    ("DynamoGraphDeployment", "nvidia.com"): "dynamographdeployments",
    ("LLMInferenceService", "serving.kserve.io"): "llminferenceservices",
    ("Sandbox", "agents.x-k8s.io"): "sandboxes", ("NIMCache", "apps.nvidia.com"): "nimcaches",
    ("ReplicaSet", "apps"): "replicasets", ("PodClique", "grove.io"): "podcliques",
    ("PodCliqueScalingGroup", "grove.io"): "podcliquescalinggroups",
    ("TrainJob", "trainer.kubeflow.org"): "trainjobs", ("TrainingRuntime", "trainer.kubeflow.org"): "trainingruntimes",
}


def namespace(kube, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def owner_reference(owner: dict) -> dict:
    """A controller ownerReference to `owner` (as its controller would set it)."""
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def create(kube, obj: dict, ns: str, *, name: str | None = None, with_status: bool = True,
           owner: dict | None = None) -> dict:
    """Create `obj` (an example) in namespace `ns` (owned by `owner` if given), then write its status;
    returns the server's object."""
    body = copy.deepcopy(obj)
    status = body.pop("status", None)
    meta = body["metadata"]
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    meta["namespace"] = ns
    if name:
        meta["name"] = name
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    if body["kind"] == "Job":   # the API server generates the selector and these labels itself
        body["spec"].pop("selector", None)
        labels = body["spec"]["template"].get("metadata", {}).get("labels", {})
        for label in JOB_LABELS:
            labels.pop(label, None)
    created = kube.request("POST", plural_path(body, ns), body)
    if with_status and status:
        created = set_status(kube, created, status)
    return created


def set_status(kube, obj: dict, status: dict) -> dict:
    body = copy.deepcopy(obj)
    body["status"] = status
    meta = body["metadata"]
    return kube.request("PUT", f"{plural_path(body, meta['namespace'])}/{meta['name']}/status", body)


def update(kube, obj: dict, change) -> dict:
    """GET the object, apply `change(obj)` to it, PUT it back (the spec: scale, suspend, a cordon, ...)."""
    meta = obj["metadata"]
    path = f"{plural_path(obj, meta.get('namespace'))}/{meta['name']}"
    current = kube.request("GET", path)
    change(current)
    return kube.request("PUT", path, current)


def delete(kube, obj: dict) -> None:
    """Delete at once: grace period 0, as a kubelet confirms a pod's end (no kubelet runs here, so a bound
    pod's graceful deletion would only set its deletionTimestamp)."""
    meta = obj["metadata"]
    kube.request("DELETE", f"{plural_path(obj, meta.get('namespace'))}/{meta['name']}?gracePeriodSeconds=0")


# A definition for any kind whose objects carry `spec.replicas` and `spec.template` (a PodTemplateSpec):
# format() with name, group (a YAML scalar: '""' for the core group), version and kind.
DEFINITION_TEMPLATE = """
apiVersion: workloadmap.io/v1alpha1
kind: WorkloadMap
metadata:
  name: {name}
spec:
  framework: Widgets
  structureDefinition:
    rootComponent:
      name: widget
      kind: {{group: {group}, version: {version}, kind: {kind}}}
      specDefinition:
        podTemplateSpecPath: .spec.template
      scaleDefinition:
        replicasPath: .spec.replicas
      statusDefinition:
        phaseDefinition:
          path: .status.phase
        statusMappings:
          running:
          - byPhase: Running
"""

# A CRD no built-in definition reads: kinds added by definitions applied to the cluster.
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


# -- pods and nodes, as their controllers and a kubelet would write them (no scheduler or kubelet runs) --
def pod(name: str, *, owner: dict | None = None, labels: dict | None = None, gpus: int = 0, cpu: str = "1",
        memory: str = "1Gi", secret_env: str = "hunter2") -> dict:
    """A Pod body (one container; an env value, a volume, a command and args a projection must drop)."""
    requests = {"cpu": cpu, "memory": memory}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
                                     "command": ["python"], "args": ["train.py"],
                                     "env": [{"name": "TOKEN", "value": secret_env}],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                     "resources": {"requests": requests, "limits": limits}}],
                     "volumes": [{"name": "data", "emptyDir": {}}]}}
    if owner is not None:
        body["metadata"]["ownerReferences"] = [owner_reference(owner)]
    return body


def create_pod(kube, body: dict, ns: str) -> dict:
    return kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body)


def bind(kube, pod: dict, node: str, phase: str = "Running") -> dict:
    """Bind a pod to a node through the binding subresource (as the scheduler does), then write its status
    (as the kubelet does); returns the pod."""
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    kube.request("POST", f"{path}/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                                            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    return set_pod_phase(kube, kube.request("GET", path), phase)


def set_pod_phase(kube, pod: dict, phase: str) -> dict:
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    current = kube.request("GET", path)
    current["status"] = {**(current.get("status") or {}), "phase": phase,
                         "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}]}
    return kube.request("PUT", f"{path}/status", current)


def node(kube, name: str, *, gpus: int = 8, labels: dict | None = None, ready: bool = True) -> dict:
    """A Node with its status written as a kubelet would (allocatable, capacity, Ready)."""
    created = kube.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                   "metadata": {"name": name, "labels": dict(labels or {})}})
    amounts = {"cpu": "96", "memory": "1Ti", "pods": "110", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    created["status"] = {"allocatable": amounts, "capacity": amounts,
                         "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                         "reason": "KubeletReady", "message": "kubelet is posting ready status"}]}
    return kube.request("PUT", f"/api/v1/nodes/{name}/status", created)
