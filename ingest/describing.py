"""`describe`: one workload on one screen, broken parts first.

Why its own view: a 500-pod job's `tree` is 500 lines with the broken pods somewhere inside.
`describe_view` turns a resolved record (and, live, the workload's pods) into what a person
checks first: the header with every status the workload matched, each component instance's
ready/actual/desired pods, the pods with phase, reason, node and GPUs, the resources per
component (GPUs requested by the spec; allocated to bound pods that still run; pending on pods
no node holds yet), and the gang groups with the minimum each needs.  Pods and component
instances carry `unhealthy` (and the view is ordered by it) so a renderer that shows only the
first N shows the ones that matter; `-o json` prints the same dict.

Without pods (``describe -f``: a manifest never submitted) the live fields are null, not zero:
zero would read as a workload whose pods are all gone.

Which pods are the workload's and where they belong is the catalog's (``catalog.pods``:
``match_pod``, ``gang_groups``); a pod's state (Bound, Pending, Terminated) is
``catalog.attributing.pod_state``, what the pipeline's pod records say too.
"""

from __future__ import annotations

from workloadmap.catalog.attributing import pod_state
from workloadmap.catalog.pods import gang_groups

from .inspecting import Inspector, live_view

HEALTHY_PHASES = ("Succeeded",)


def pod_reason(pod: dict) -> str | None:
    """Why a pod is not simply running, as kubectl's STATUS column says it: the pod's reason
    (Evicted), a container's waiting reason (CrashLoopBackOff, ImagePullBackOff; an init
    container's as Init:...), a container's reason for ending badly (OOMKilled, Error), the
    scheduler's (Unschedulable), Terminating."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if status.get("reason"):
        return status["reason"]
    containers = [("Init:", c) for c in status.get("initContainerStatuses") or []]
    containers += [("", c) for c in status.get("containerStatuses") or []]
    for prefix, c in containers:   # an init container's reason is prefixed, as kubectl shows it
        state = c.get("state") or {}
        waiting, ended = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating", "PodInitializing"):
            return prefix + waiting["reason"]
        if ended and ended.get("exitCode") not in (0, None):
            return prefix + (ended.get("reason") or f"ExitCode:{ended['exitCode']}")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("reason") or "Unschedulable"
    if meta.get("deletionTimestamp"):
        return "Terminating"
    return None


def pod_detail(pod: dict, info: dict) -> dict:
    """`pod_info`'s fields plus reason, state (Bound, Pending, Terminated) and unhealthy."""
    meta = pod.get("metadata") or {}
    state = pod_state(info["phase"], info["node"], bool(meta.get("deletionTimestamp")))
    reason = pod_reason(pod)
    healthy = info["phase"] in HEALTHY_PHASES or (info["phase"] == "Running" and info["ready"] and not reason)
    return dict(info, reason=reason, state=state, unhealthy=not healthy)


def _label(c: dict) -> str:
    return c["name"] if c["instance"] is None else f"{c['name']}/{c['instance']}"


def _rank(c: dict) -> int:
    """0: an unhealthy pod; 1: pods missing; 2: as desired (or no pods of its own)."""
    if c.get("unhealthyPods"):
        return 0
    return 1 if c.get("missingPods") else 2


def _gangs(definition, workload, raw_pods: list[dict] | None, states: dict) -> list[dict]:
    out = []
    for g in gang_groups(definition, workload, raw_pods or []):
        if raw_pods is None and not g.min_member:
            continue
        out.append({
            "podGroup": g.pod_group, "key": g.key, "minMember": g.min_member,
            "pods": None if raw_pods is None else len(g.pods),
            "bound": None if raw_pods is None else sum(1 for p in g.pods if states.get(p) == "Bound"),
            "subGroups": [{"name": s.name, "minMember": s.min_member,
                           "pods": None if raw_pods is None else len(s.pods)} for s in g.sub_groups],
        })
    return out


def describe(inspector: Inspector, text: str, namespace: str | None, *, chunk_size: int = 500) -> dict:
    """The live describe view of one workload (`Inspector.find`'s TYPE/NAME or NAME)."""
    _, definition, workload, raw, infos = inspector.workload_with_pods(text, namespace, chunk_size=chunk_size)
    return describe_view(workload.to_dict(), definition, workload, raw, infos)


def describe_object(catalog, obj: dict, lookup=None) -> dict:
    """The describe view of a manifest alone (``describe -f``): no cluster, no pods."""
    definition = catalog.definition_for(obj)
    workload = catalog.resolve(obj, lookup)
    return describe_view(workload.to_dict(), definition, workload)


def describe_view(record: dict, definition, workload, raw_pods: list[dict] | None = None,
                  infos: list[dict] | None = None) -> dict:
    """The describe view of a resolved record (`workload` is the ResolvedWorkload, `record` its
    dict); live: the workload's raw pods and their `pod_info` (same order), else None for both."""
    live = raw_pods is not None
    details = [pod_detail(p, i) for p, i in zip(raw_pods, infos)] if live else []
    view = live_view(record, details) if live else dict(record, livePods=None, live=None)
    view["definitionSource"] = definition.source
    components = []
    for c in view["components"]:
        c = dict(c)
        if live:
            mine = [p for p in view["livePods"] if p["expected"] and p["component"] == c["name"]
                    and (c["instance"] is None or p["instance"] == c["instance"])]
            c["unhealthyPods"] = sum(1 for p in mine if p["unhealthy"])
            c["missingPods"] = max(0, c["pods"] - c["actualPods"])
            c["allocatedGpu"] = sum(p["gpu"] or 0 for p in mine if p["state"] == "Bound")
            c["pendingGpu"] = sum(p["gpu"] or 0 for p in mine if p["state"] == "Pending")
        else:
            c.update(actualPods=None, readyPods=None, unhealthyPods=None, missingPods=None,
                     allocatedGpu=None, pendingGpu=None)
        c["unhealthy"] = live and _rank(c) < 2
        components.append(c)
    view["components"] = components
    if live:
        # broken first, then in the tree's order (sorted() is stable)
        view["livePods"] = sorted(view["livePods"], key=lambda p: not p["unhealthy"])
    view["resources"] = resource_rows(view)
    states = {p["name"]: p["state"] for p in details}
    view["gangGroups"] = _gangs(definition, workload, raw_pods, states)
    return view


def resource_rows(view: dict) -> list[dict]:
    """Per component instance with pods (a tree level without any is left out), then TOTAL:
    desired / actual / ready pods, the spec's GPU, CPU and memory requests, GPUs allocated
    (bound pods not ended) and pending (pods without a node); live ones None without pods."""
    rows = []
    live = view["live"] is not None
    for c in view["components"]:
        if c["pods"] == 0 and not c["actualPods"] and c["replicas"] is None:
            continue
        rows.append({"component": _label(c), "desired": c["pods"], "actual": c["actualPods"],
                     "ready": c["readyPods"], "gpu": c["total"]["gpu"], "cpu": c["total"]["cpu"],
                     "memory": c["total"]["memory"], "allocatedGpu": c["allocatedGpu"],
                     "pendingGpu": c["pendingGpu"]})
    pods = view["livePods"] or []
    total = view["total"]
    rows.append({"component": "TOTAL", "desired": total["pods"],
                 "actual": view["live"]["pods"] if live else None, "ready": view["live"]["ready"] if live else None,
                 "gpu": total["gpu"], "cpu": total["cpu"], "memory": total["memory"],
                 "allocatedGpu": sum(p["gpu"] or 0 for p in pods if p["state"] == "Bound") if live else None,
                 "pendingGpu": sum(p["gpu"] or 0 for p in pods if p["state"] == "Pending") if live else None})
    return rows


def component_rank(c: dict) -> int:
    """Sort key of component instances among their siblings: unhealthy pods, then missing pods, then the rest."""
    return _rank(c) if c.get("unhealthy") else 2
