"""Pods and nodes as the pipeline carries them: what a watcher publishes of them, which objects can
own pods, and the fields of pod and node records.

Why in the catalog: the watchers (ingest) publish a pod's projection and the owner kinds, and the
processors attribute pods and build records from the same facts; neither may import the other,
and both follow the definitions, which live here.

- The owner kinds (``owner_kinds``) are what a definition names as the kind of a child component
  (a JobSet's Jobs, a LeaderWorkerSet's StatefulSets, a Grove PodCliqueSet's PodCliques) or in its
  ``additionalChildKinds`` (a Deployment's ReplicaSets, a RayJob's RayCluster, a Dynamo graph's
  DynamoComponentDeployments): the kinds through which a pod's controller chain reaches a workload.
  Pods, Secrets and ConfigMaps are never owner kinds (the latter two are never read at all).
- A pod is published as a projection (``project_pod``): what attribution, placement, requests and
  state read, plus every pod path a definition's pod selectors and gang keys read (the catalog's
  read analysis, ``pod_paths``), never env, volumes, command or args: a pod's environment often
  carries credentials, and a watch of every pod of a fleet must stay small.  Containers keep only
  name, resources and restartPolicy (a restartable init container is a sidecar, which changes the
  pod's effective request), whatever a definition reads inside them.
- A node is published as a projection too (``project_node``): what the node record keeps.
- An owner kind without a definition of its own (a ReplicaSet, a PodClique) is published as its
  identity and owner references only (``project_owner``): that is all the processors read of it,
  and its pod template (env values included) need not travel.
"""

from __future__ import annotations

from .jqlang.reading import ANY, paths_read
from .quantities import QuantityError, milli_value
from .registry import Catalog
from .requests import DEFAULT_GPUS, GpuMatcher, RequestError, Resources, effective_request, to_resources

NEVER_READ = frozenset({("", "Secret"), ("", "ConfigMap")})
POD, NODE = ("", "Pod"), ("", "Node")
TERMINAL_PHASES = ("Succeeded", "Failed")
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# Node labels users group capacity by (the node record's `labels`); the node pool is the first of several
# providers' labels.
GPU_PRODUCT = "nvidia.com/gpu.product"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
NODE_POOL_LABELS = ("cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup", "karpenter.sh/nodepool",
                    "kubernetes.azure.com/agentpool", "node-pool", "nodepool")

# What a pod projection keeps besides the pod paths definitions read.
_POD_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels",
             "ownerReferences")
_POD_SPEC = ("nodeName", "schedulerName", "priorityClassName", "overhead", "resourceClaims", "resources")
_POD_STATUS = ("phase", "conditions", "reason", "startTime")
_CONTAINER = ("name", "resources", "restartPolicy")
_NEVER = frozenset({"env", "envFrom", "volumes", "volumeMounts", "command", "args"})


def group_of(api_version: str | None) -> str:
    return (api_version or "").rpartition("/")[0]


def owner_kinds(catalog: Catalog) -> frozenset[tuple[str, str]]:
    """(group, kind) of every kind the catalog names as a child of a workload (see the module docstring)."""
    kinds = set()
    for definition in catalog:
        for component in definition.components[1:]:
            if component.kind is not None:
                kinds.add((component.kind.group, component.kind.kind))
        kinds.update((k.group, k.kind) for k in definition.additional_child_kinds)
    return frozenset(kinds - NEVER_READ - {POD})


def workload_kinds(catalog: Catalog) -> frozenset[tuple[str, str]]:
    """(group, kind) of every kind the catalog has a definition for."""
    return frozenset((d.gvk.group, d.gvk.kind) for d in catalog)


def controller_of(obj: dict) -> dict | None:
    """The ownerReference with ``controller: true`` (at most one, by the API's rules), or None."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if isinstance(refs, list):
        for ref in refs:
            if isinstance(ref, dict) and ref.get("controller") is True:
                return ref
    return None


def pod_paths(catalog: Catalog) -> tuple[tuple, ...]:
    """The pod paths the catalog's pod selectors and gang keys read, besides what every projection keeps.

    An expression whose reads cannot be proven (``paths_read`` gives ANY) adds the pod's metadata
    (labels and annotations are what selectors read in practice); paths under a container, env,
    volumes, command or args are never added (the module docstring says why)."""
    paths: set[tuple] = set()
    for definition in catalog:
        for expr in definition.pod_expressions():
            read = paths_read(expr.source)
            if read is ANY:
                paths.add(("metadata", "annotations"))
                paths.add(("metadata", "labels"))
                continue
            for path in read:
                if not path or path[0] not in ("metadata", "spec", "status"):
                    continue
                if path[0] == "spec" and len(path) > 1 and path[1] in ("containers", "initContainers",
                                                                      "ephemeralContainers", *_NEVER):
                    continue
                if len(path) == 1 or _kept_anyway(path):
                    continue    # a whole section (its projected fields are what can be read), or kept
                paths.add(path)
    return tuple(sorted(paths))


def _kept_anyway(path: tuple) -> bool:
    """Whether every projection keeps this path (its labels, its node name, ...): copying it again is waste."""
    section, key = path[0], path[1]
    return key in {"metadata": _POD_META, "spec": _POD_SPEC, "status": _POD_STATUS}[section]


def _containers(containers) -> list | object:
    if not isinstance(containers, list):
        return containers   # left as it is: the processors dead-letter it with the field named
    return [{k: c[k] for k in _CONTAINER if k in c} if isinstance(c, dict) else c for c in containers]


def _copy_path(source: dict, target: dict, path: tuple) -> None:
    node = source
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return
        node = node[key]
    for key in path[:-1]:
        target = target.setdefault(key, {})
        if not isinstance(target, dict):
            return
    if path[-1] not in target:
        target[path[-1]] = node


def project_pod(pod: dict, paths: tuple[tuple, ...] = ()) -> dict:
    """The pod as the watchers publish it (see the module docstring); `paths` from ``pod_paths``."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    out = {"apiVersion": pod.get("apiVersion", "v1"), "kind": pod.get("kind", "Pod"),
           "metadata": {k: meta[k] for k in _POD_META if k in meta}}
    projected_spec = {k: spec[k] for k in _POD_SPEC if k in spec}
    for field in ("containers", "initContainers"):
        if field in spec:
            projected_spec[field] = _containers(spec[field])
    out["spec"] = projected_spec
    if status:
        out["status"] = {k: status[k] for k in _POD_STATUS if k in status}
    for path in paths:
        _copy_path(pod, out, path)
    return out


def project_owner(obj: dict) -> dict:
    """An intermediate owner as the watchers publish it: identity and owner references (see the docstring)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
                                             "deletionTimestamp", "ownerReferences") if k in meta}}


def project_node(node: dict) -> dict:
    """The node as the watchers publish it: identity, labels, cordon, taints, amounts and the Ready condition."""
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    out = {"apiVersion": node.get("apiVersion", "v1"), "kind": node.get("kind", "Node"),
           "metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion", "creationTimestamp",
                                            "deletionTimestamp", "labels") if k in meta},
           "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec}}
    projected = {k: status[k] for k in ("allocatable", "capacity") if k in status}
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        projected["conditions"] = [c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"]
    out["status"] = projected
    return out


# --------------------------------------------------------------------------- record fields


class MalformedObject(ValueError):
    """A pod or node whose fields cannot be read: names the field and the reason."""

    def __init__(self, field: str, reason: str):
        self.field = field
        super().__init__(f"{field} {reason}")


def pod_state(phase, node_name, deleted: bool) -> str:
    """Pending (no node, not terminal), Bound (on a node, not terminal: it holds its request) or Terminated."""
    if deleted or phase in TERMINAL_PHASES:
        return "Terminated"
    return "Bound" if node_name else "Pending"


def pod_facts(pod: dict, gpus: GpuMatcher = DEFAULT_GPUS) -> dict:
    """The kept fields a pod's record takes from the pod itself: node, phase and its effective request.

    MalformedObject names a field of the wrong type or a request that cannot be read."""
    spec = pod.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise MalformedObject("spec", "must be an object")
    status = pod.get("status")
    if status is None:
        status = {}
    if not isinstance(status, dict):
        raise MalformedObject("status", "must be an object")
    node = spec.get("nodeName")
    if node is not None and (not isinstance(node, str)):
        raise MalformedObject("spec.nodeName", "must be a string")
    phase = status.get("phase")
    if phase is not None and phase not in PHASES:
        raise MalformedObject("status.phase", f"{str(phase)[:40]!r} is not one of {', '.join(PHASES)}")
    if "containers" in spec and not isinstance(spec["containers"], list):
        raise MalformedObject("spec.containers", "must be a list")
    try:
        request = effective_request(spec, gpus, "spec") if spec.get("containers") is not None else Resources()
    except RequestError as exc:   # "<field>: <reason>"
        field, _, reason = str(exc).partition(": ")
        raise MalformedObject(field, reason) from None
    return {"nodeName": node or None, "phase": phase, **request.to_dict()}


def _amounts(values, field: str, gpus: GpuMatcher) -> dict:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise MalformedObject(field, "must map resource names to quantities")
    milli = {}
    for name, value in values.items():
        try:
            milli[name] = milli_value(value)
        except QuantityError as exc:
            raise MalformedObject(f"{field}[{name!r}]", str(exc)) from None
        if milli[name] < 0:   # a node offering -8 GPUs would make idle and capacity negative
            raise MalformedObject(f"{field}[{name!r}]", f"{value!r} is negative (a node's amounts must not be)")
    return to_resources(milli, gpus).to_dict()


def node_facts(node: dict, gpus: GpuMatcher = DEFAULT_GPUS) -> dict:
    """The kept fields of a node record: amounts, cordon, readiness and grouping labels.

    MalformedObject names a field of the wrong type or a quantity that cannot be read."""
    meta, spec, status = (node.get(k) if node.get(k) is not None else {} for k in ("metadata", "spec", "status"))
    for name, value in (("metadata", meta), ("spec", spec), ("status", status)):
        if not isinstance(value, dict):
            raise MalformedObject(name, "must be an object")
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise MalformedObject("metadata.labels", "must be an object")
    unschedulable = spec.get("unschedulable", False)
    if unschedulable is None:
        unschedulable = False
    if not isinstance(unschedulable, bool):
        raise MalformedObject("spec.unschedulable", "must be a boolean")
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise MalformedObject("status.conditions", "must be a list")
    ready = None
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == "Ready":
            ready = {"True": True, "False": False}.get(c.get("status"))

    def label(key):
        value = labels.get(key)
        return value if isinstance(value, str) and value else None

    return {
        "allocatable": _amounts(status.get("allocatable"), "status.allocatable", gpus),
        "capacity": _amounts(status.get("capacity"), "status.capacity", gpus),
        "unschedulable": unschedulable, "ready": ready,
        "labels": {"gpuProduct": label(GPU_PRODUCT), "instanceType": label(INSTANCE_TYPE),
                   "nodePool": next((label(k) for k in NODE_POOL_LABELS if label(k)), None), "zone": label(ZONE)},
    }
