"""The simulator's nodes and pods: what a cluster's controllers and scheduler would make of the simulated workloads.

Why: pods and nodes are what the clusters *have* and *hold* (issue 25), and the warehouse's
allocation, idle and wait answers need a stream of them consistent with the workloads'.  Given the
workload events of ``simulating.simulate`` (time-ordered, each with its object), this module
plays, per cluster, the controllers and a first-fit scheduler:

- **nodes**: per cluster, node pools of 8-GPU H100 nodes, A100 nodes partitioned into MIG slices
  (one pool per profile the workloads ask for, as the GPU operator's "mixed" strategy exposes them:
  seven ``nvidia.com/mig-1g.10gb``, three ``2g.20gb`` or two ``3g.40gb`` per A100) and CPU nodes. A platform team buys for its usual load, not its
  worst hour: each GPU pool holds ``FILL`` of the cluster's peak demand for its resource (a first
  pass over the workload events finds the peaks), so pods wait for capacity at the peaks and after
  a cordon or a lost node, and the allocation stays below what the clusters have; one node of the
  first cluster is cordoned on the second day, one node of the second cluster is lost on the third
  (deleted: its pods are evicted);
- **owners**: the intermediate objects real controllers create between a workload and its pods
  (a ReplicaSet for a Deployment, a Job per CronJob run or JobSet, a StatefulSet of a LeaderWorkerSet,
  a RayCluster of a RayJob, ...), each with a controller ownerReference to its parent;
- **pods**: while a workload's status is one whose pods exist (Initializing, Running, Degraded),
  the pods its resolved spec asks for (per component, the per-pod request, the component's pod
  template labels), created Pending, bound to the first node with room after a scheduling delay,
  or left Pending until room frees up; when the workload completes, fails, is suspended or deleted,
  or scales down, its pods end (Succeeded or Failed, then deleted);
- **the kubelet's updates** (``kubelet=True``): between the binding and the end, the status updates
  a kubelet really makes, each a watch event of its own: the scheduler's binding (still Pending, on
  its node), the containers being created (Pending, started, not ready), Running not ready yet,
  then Ready; and the deletion's first step (deletionTimestamp set) before the pod is gone.  They
  change nothing the warehouse keeps, so they are what a pod stream has most of and what the
  processors must drop cheaply: the pipeline bench streams them; the demo does not need them.

Every object is a plain Kubernetes object in the raw event envelope, as the watchers publish
them (pods as the projection of the interface: metadata, nodeName, containers' resources,
phase, conditions).  Deterministic: all choices come from the events and a seeded ``random.Random``.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from workloadmap.catalog import Catalog, ResolveError, records
from workloadmap.catalog.jqlang import JqError

# (pool, GPU product, instance type, GPU resource, GPU resources per node, share of the nodes when their number
# is given): an 8-GPU A100 node partitioned into one MIG profile exposes 8 x (7, 3 or 2) slices.
POOLS = (("h100", "NVIDIA-H100-80GB-HBM3", "p5.48xlarge", "nvidia.com/gpu", 8, 0.7),
         ("a100-mig-1g", "NVIDIA-A100-SXM4-80GB", "p4d.24xlarge", "nvidia.com/mig-1g.10gb", 56, 0.05),
         ("a100-mig-2g", "NVIDIA-A100-SXM4-80GB", "p4d.24xlarge", "nvidia.com/mig-2g.20gb", 24, 0.05),
         ("a100-mig-3g", "NVIDIA-A100-SXM4-80GB", "p4d.24xlarge", "nvidia.com/mig-3g.40gb", 16, 0.05),
         ("cpu", None, "m7i.16xlarge", None, 0, 0.15))
# The intermediate owners real controllers put between a workload of this kind and its pods.
CHAINS = {"Deployment": (("apps/v1", "ReplicaSet"),), "CronJob": (("batch/v1", "Job"),),
          "JobSet": (("batch/v1", "Job"),), "LeaderWorkerSet": (("apps/v1", "StatefulSet"),),
          "RayJob": (("ray.io/v1", "RayCluster"),), "RayService": (("ray.io/v1", "RayCluster"),),
          "PodCliqueSet": (("grove.io/v1alpha1", "PodClique"),),
          "InferenceService": (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
          "NIMService": (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
          "Service": (("serving.knative.dev/v1", "Revision"), ("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet"))}
RUNNING = frozenset({"Initializing", "Running", "Degraded"})
FILL = 0.9   # a GPU pool's share of its cluster's peak demand for that GPU resource
_S = 1000


@dataclass(eq=False)
class _Node:
    name: str
    uid: str
    pool: str
    product: str | None
    instance_type: str
    resource: str | None
    gpus: int
    free: float = 0.0
    unschedulable: bool = False
    gone: bool = False
    pods: set = field(default_factory=set)


@dataclass(eq=False)  # a pod is itself: hashed by identity (node.pods is a set)
class _Pod:
    uid: str
    name: str
    namespace: str
    owner: dict
    labels: dict
    component: str
    resource: str | None
    gpus: float
    cpu: float
    memory: int
    created: str
    node: _Node | None = None
    settled: int | None = None   # (kubelet) when its last status update so far is observed


def _text(start_ms: int, ms: int) -> str:
    import time
    seconds, millis = divmod(start_ms + ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class _Cluster:
    """One cluster's nodes, owners and pods, and the events they make."""

    def __init__(self, name: str, index: int, sizes: dict[str, int], rng: random.Random, start_ms: int,
                 kubelet: bool = False):
        self.name, self.rng, self.start_ms, self.kubelet = name, rng, start_ms, kubelet
        self.rv = 50_000_000 + 1_000_000 * index
        self.nodes: list[_Node] = []
        for pool, product, instance_type, resource, gpus, _ in POOLS:
            for i in range(sizes[pool]):
                self.nodes.append(_Node(f"{name}-{pool}-{i:03d}", self._uid(), pool, product, instance_type,
                                        resource, gpus, float(gpus)))
        self.pending: list[_Pod] = []
        self.pods: dict[str, list[_Pod]] = {}     # workload uid -> its live pods
        self.owners: dict[str, dict] = {}         # workload uid -> the owner its pods point at

    def _uid(self) -> str:
        return "%08x-%04x-4%03x-8%03x-%012x" % (self.rng.getrandbits(32), self.rng.getrandbits(16),
                                                  self.rng.getrandbits(12), self.rng.getrandbits(12),
                                                  self.rng.getrandbits(48))

    def _event(self, at: int, etype: str, obj: dict) -> tuple:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return (at, records.raw_event(self.name, etype, obj, _text(self.start_ms, at)))

    # ------------------------------------------------------------------ nodes

    def node_object(self, n: _Node) -> dict:
        amounts = {"cpu": "192" if n.gpus else "64", "memory": "2048Gi" if n.gpus else "256Gi"}
        if n.resource:
            amounts[n.resource] = str(n.gpus)
        labels = {"node.kubernetes.io/instance-type": n.instance_type, "eks.amazonaws.com/nodegroup": n.pool,
                  "topology.kubernetes.io/zone": "zone-a"}
        if n.product:
            labels["nvidia.com/gpu.product"] = n.product
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": n.name, "uid": n.uid, "creationTimestamp": _text(self.start_ms, 0)[:19] + "Z",
                             "labels": labels},
                "spec": {"unschedulable": True} if n.unschedulable else {},
                "status": {"allocatable": dict(amounts), "capacity": dict(amounts),
                           "conditions": [{"type": "Ready", "status": "True"}]}}

    def start(self) -> list[tuple]:
        return [self._event(0, "ADDED", self.node_object(n)) for n in self.nodes]

    def cordon(self, at: int) -> list[tuple]:
        n = next(n for n in self.nodes if n.gpus and not n.gone)
        n.unschedulable = True
        return [self._event(at, "MODIFIED", self.node_object(n))]

    def lose(self, at: int) -> list[tuple]:
        """A node goes away: its pods are evicted (Failed, deleted) and pend again as new pods."""
        n = next(n for n in reversed(self.nodes) if n.gpus and not n.gone and n.pods)
        out = []
        for pod in sorted(n.pods, key=lambda p: p.name):
            out += self._end(at, pod, "Failed", reason="Evicted")
            for pods in self.pods.values():
                if pod in pods:
                    pods.remove(pod)
                    pods.append(self._new_pod(pod.owner, pod.namespace, pod.labels, pod.component, pod.resource,
                                              pod.gpus, pod.cpu, pod.memory, at, out))
        n.gone = True
        out.append(self._event(at, "DELETED", self.node_object(n)))
        return out + self.schedule(at + 5 * _S)

    # ------------------------------------------------------------------ pods

    def pod_object(self, p: _Pod, phase: str, reason: str | None = None, *, started: str | None = None,
                   ready: bool | None = None) -> dict:
        """The pod's projection; `started` and `ready` (the kubelet's updates): its startTime and its
        Initialized, ContainersReady and Ready conditions."""
        requests = {"cpu": f"{int(p.cpu * 1000)}m", "memory": str(p.memory)}
        if p.resource and p.gpus:
            requests[p.resource] = str(int(p.gpus))
        status = {"phase": phase}
        if reason:
            status["reason"] = reason
        if p.node is not None:
            status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            if ready is not None:
                status["conditions"] += [{"type": "Initialized", "status": "True"},
                                         {"type": "ContainersReady", "status": str(ready)},
                                         {"type": "Ready", "status": str(ready)}]
            if started is not None:
                status["startTime"] = started
        elif phase == "Pending":
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        spec = {"containers": [{"name": "main", "resources": {"requests": requests, "limits": dict(requests)}}]}
        if p.node is not None:
            spec["nodeName"] = p.node.name
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid, "creationTimestamp": p.created,
                             "labels": dict(p.labels), "ownerReferences": [p.owner]},
                "spec": spec, "status": status}

    def _new_pod(self, owner, namespace, labels, component, resource, gpus, cpu, memory, at, out) -> _Pod:
        suffix = "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        pod = _Pod(self._uid(), f"{owner['name']}-{component}-{suffix}", namespace, owner, labels, component,
                   resource, gpus, cpu, memory, _text(self.start_ms, at)[:19] + "Z")
        out.append(self._event(at, "ADDED", self.pod_object(pod, "Pending")))
        self.pending.append(pod)
        return pod

    def _end(self, at: int, pod: _Pod, phase: str, reason: str | None = None) -> list[tuple]:
        if pod.settled is not None:
            at = max(at, pod.settled + 1)   # after the kubelet's updates of its start
        out = [self._event(at, "MODIFIED", self.pod_object(pod, phase, reason))]
        if pod.node is not None:
            pod.node.free += pod.gpus
            pod.node.pods.discard(pod)
        elif pod in self.pending:
            self.pending.remove(pod)
        deleting = _text(self.start_ms, at + 30 * _S)[:19] + "Z"
        if self.kubelet:   # the deletion asked for (graceful): the pod goes a moment later
            asked = self.pod_object(pod, phase, reason)
            asked["metadata"]["deletionTimestamp"] = deleting
            out.append(self._event(at + 30 * _S - 500, "MODIFIED", asked))
        deleted = self.pod_object(pod, phase, reason)
        deleted["metadata"]["deletionTimestamp"] = deleting
        out.append(self._event(at + 30 * _S, "DELETED", deleted))
        return out

    def _start(self, at: int, pod: _Pod) -> list[tuple]:
        """The kubelet's updates of a pod bound at `at`: containers created, Running, then Ready."""
        creating = at + self.rng.randint(1 * _S, 3 * _S)
        running = creating + self.rng.randint(3 * _S, 40 * _S)
        ready = running + self.rng.randint(2 * _S, 15 * _S)
        started = _text(self.start_ms, creating)[:19] + "Z"
        pod.settled = ready
        return [self._event(creating, "MODIFIED", self.pod_object(pod, "Pending", started=started, ready=False)),
                self._event(running, "MODIFIED", self.pod_object(pod, "Running", started=started, ready=False)),
                self._event(ready, "MODIFIED", self.pod_object(pod, "Running", started=started, ready=True))]

    def schedule(self, at: int) -> list[tuple]:
        """First fit, in creation order: a pod binds to the first schedulable node of its GPU resource
        with room (CPU-only pods to the CPU pool), a few seconds to minutes after `at`."""
        out, waiting = [], []
        for pod in self.pending:
            fits = [n for n in self.nodes if not n.gone and not n.unschedulable and n.resource == (
                pod.resource if pod.gpus else None) and n.free >= pod.gpus]
            if not fits:
                waiting.append(pod)
                continue
            node = fits[0]
            node.free -= pod.gpus
            node.pods.add(pod)
            pod.node = node
            bound = at + self.rng.randint(2 * _S, 90 * _S)
            if self.kubelet:   # the binding, then the kubelet's updates
                out.append(self._event(bound, "MODIFIED", self.pod_object(pod, "Pending")))
                out += self._start(bound, pod)
            else:
                out.append(self._event(bound, "MODIFIED", self.pod_object(pod, "Running")))
        self.pending = waiting
        return out

    def owner_of(self, at: int, workload: dict, out: list) -> dict:
        """The controller reference the workload's pods carry, creating its intermediate owners once."""
        uid = workload["metadata"]["uid"]
        ref = self.owners.get(uid)
        if ref is not None:
            return ref
        parent = workload
        for api_version, kind in CHAINS.get(workload["kind"], ()):
            meta = parent["metadata"]
            child = {"apiVersion": api_version, "kind": kind,
                     "metadata": {"name": f"{meta['name']}-{kind.lower()[:3]}", "namespace": meta["namespace"],
                                  "uid": self._uid(), "creationTimestamp": _text(self.start_ms, at)[:19] + "Z",
                                  "ownerReferences": [_controller(parent)]},
                     "spec": {}}
            out.append(self._event(at, "ADDED", child))
            parent = child
        ref = self.owners[uid] = _controller(parent)
        return ref

    def follow(self, at: int, event: dict, wanted: list[tuple]) -> list[tuple]:
        """The pods of one workload event: `wanted` is (component, labels, resource, gpus, cpu, memory) per pod
        its status and spec ask for now (empty when its pods do not run)."""
        obj = event["object"]
        uid = obj["metadata"]["uid"]
        out: list[tuple] = []
        live = self.pods.setdefault(uid, [])
        if not wanted:
            finished = event["type"] == "DELETED" or obj.get("kind") is None
            for pod in sorted(live, key=lambda p: p.name):
                out += self._end(at, pod, "Failed" if finished else "Succeeded")
            live.clear()
            return out
        owner = self.owner_of(at, obj, out) if obj["kind"] != "Pod" else None
        if owner is None:
            return out  # a bare Pod is its own workload: its events are the pod's already
        have: dict[tuple, list] = {}
        for pod in live:
            have.setdefault((pod.component, pod.resource, pod.gpus), []).append(pod)
        keep = []
        for component, labels, resource, gpus, cpu, memory in wanted:
            same = have.get((component, resource, gpus))
            if same:
                keep.append(same.pop(0))
            else:
                keep.append(self._new_pod(owner, obj["metadata"]["namespace"], labels, component, resource, gpus,
                                          cpu, memory, at, out))
        for extra in have.values():
            for pod in extra:
                out += self._end(at, pod, "Succeeded")
        self.pods[uid] = keep
        return out + self.schedule(at + self.rng.randint(1 * _S, 20 * _S))


def _controller(owner: dict) -> dict:
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _wanted(catalog: Catalog, obj: dict, status: str, cap: int) -> list[tuple]:
    """The pods a workload's object asks for while `status` runs pods: per pod (component, labels, GPU
    resource, GPUs, CPU cores, memory bytes), at most `cap`."""
    if status not in RUNNING or obj.get("kind") == "Pod":
        return []
    try:
        resolved = catalog.resolve(obj)
    except (ResolveError, JqError):
        return []
    out = []
    for comp in resolved.components:
        per = comp.per_pod
        resource = next(iter(sorted(per.gpus)), None) if per.gpus else None
        labels = dict(((comp.pod_template or {}).get("metadata") or {}).get("labels") or {})
        for _ in range(comp.pods):
            out.append((comp.name, labels, resource, float(per.gpu), float(per.cpu), int(per.memory)))
    return out[:cap]


def _pool_sizes(nodes: int | None, peaks: dict[str | None, float]) -> dict[str, int]:
    """Nodes per pool: `nodes` split by the pools' shares, or (None) each GPU pool sized to FILL of the
    cluster's peak demand for its resource and the CPU pool to the GPU pools' share of CPU nodes."""
    if nodes is not None:
        return {pool: max(1, round(nodes * share)) for pool, _, _, _, _, share in POOLS}
    sizes = {pool: max(1, math.ceil(FILL * peaks.get(resource, 0.0) / gpus))
             for pool, _, _, resource, gpus, _ in POOLS if gpus}
    gpu_share = sum(share for *_, gpus, share in POOLS if gpus)
    for pool, *_, gpus, share in POOLS:
        if not gpus:
            sizes[pool] = max(1, round(sum(sizes.values()) * share / gpu_share))
    return sizes


def _planned(events: Iterable, clusters: list[str], start_ms: int, catalog: Catalog, max_pods: int):
    """The workload events with the pods each asks for, and each cluster's peak GPU demand by resource
    (the sum over its workloads of what their latest events ask for, at its highest)."""
    plan, peaks = [], {name: {} for name in clusters}
    demand: dict[str, dict] = {name: {} for name in clusters}     # cluster -> resource -> GPUs now
    asks: dict[tuple, dict] = {}                                  # (cluster, uid) -> resource -> GPUs
    for item in events:
        event = getattr(item, "event", item)
        if event is None:
            continue
        at = int(records.parse_time(event["observedAt"]).timestamp() * 1000) - start_ms
        cluster = event["cluster"]
        status = getattr(item, "expected_status", None) or ""
        wanted = [] if event["type"] == "DELETED" or cluster not in demand else \
            _wanted(catalog, event["object"], status, max_pods)
        plan.append((at, event, wanted))
        if cluster not in demand:
            continue
        now = {}
        for _, _, resource, gpus, _, _ in wanted:
            if gpus:
                now[resource] = now.get(resource, 0.0) + gpus
        key = (cluster, event["object"]["metadata"]["uid"])
        for resource in set(now) | set(asks.get(key, {})):
            total = demand[cluster][resource] = (demand[cluster].get(resource, 0.0) + now.get(resource, 0.0)
                                                 - asks.get(key, {}).get(resource, 0.0))
            peaks[cluster][resource] = max(peaks[cluster].get(resource, 0.0), total)
        asks[key] = now
    return plan, peaks


def scheduling(events: Iterable, *, clusters: list[str], start_ms: int, days: float, seed=7,
               nodes_per_cluster: int | None = None, max_pods: int = 64,
               catalog: Catalog | None = None, kubelet: bool = False) -> Iterator[dict]:
    """The workload events (``SimulatedEvent``s or raw events, time-ordered) merged with the nodes, owners and
    pods they make, as raw events in time order.  Each cluster has `nodes_per_cluster` nodes, or (None) pools
    sized from its peak demand; `kubelet`: with the kubelet's status updates of every bound pod (see the
    module docstring)."""
    catalog = catalog or Catalog.builtin()
    plan, peaks = _planned(events, clusters, start_ms, catalog, max_pods)
    rng = random.Random(f"workloadmap-sim:{seed}:scheduling")
    state = {name: _Cluster(name, i, _pool_sizes(nodes_per_cluster, peaks[name]), rng, start_ms, kubelet)
             for i, name in enumerate(clusters)}
    heap: list = []
    order = 0

    def push(items):
        nonlocal order
        for at, event in items:
            heapq.heappush(heap, (at, order, event))
            order += 1

    for c in state.values():
        push(c.start())
    names = list(state)
    if len(names) >= 1:
        push(state[names[0]].cordon(int(1.5 * 86_400_000)))
    lost_at = int(2.5 * 86_400_000) if len(names) >= 2 and days > 2.5 else None
    for at, event, wanted in plan:
        while heap and heap[0][0] <= at:
            yield heapq.heappop(heap)[2]
        if lost_at is not None and at >= lost_at:
            push(state[names[1]].lose(lost_at))
            lost_at = None
            while heap and heap[0][0] <= at:
                yield heapq.heappop(heap)[2]
        yield event
        cluster = state.get(event["cluster"])
        if cluster is not None:
            push(cluster.follow(at, event, wanted))
    while heap:
        yield heapq.heappop(heap)[2]


def simulate_clusters(clusters: int = 3, workloads: int = 200, days: float = 7, seed=7,
                      start: str = "2026-11-01T00:00:00Z", nodes_per_cluster: int | None = None,
                      kubelet: bool = False) -> Iterator[dict]:
    """``simulating.simulate``'s workloads with their owners, pods and the clusters' nodes: raw events in time
    order (the embedded demo's stream)."""
    from .simulating import cluster_names, simulate

    return scheduling(simulate(clusters, workloads, days, seed, start), clusters=cluster_names(clusters),
                      start_ms=int(records.parse_time(start).timestamp() * 1000), days=days, seed=seed,
                      nodes_per_cluster=nodes_per_cluster, kubelet=kubelet)
