"""Tracking the pipeline's records into the current state of every workload, pod and node, as series.

The exporter is a reader of the topics the processors write, like the
warehouse writer, but it keeps only what is live: a workload's lines exist
from its first record to its deleted one, a pod's from its first to its
deleted one, a node's likewise, so memory follows the live objects.  Every
record re-writes the lines of its object (``families``) at once: a scrape
reads them as they are and computes nothing.

Pods add up into their workload's and component's allocated and pending pods
and GPUs (a pod holds its request while Bound and pends while Pending, as
the warehouse counts it).  Those sums are kept as counts a pod record moves
(its old contribution out, its new one in), never re-summed.  A deleted
workload takes its pod-derived series with it, even while its pods are still
terminating: they are remembered as detached until their own deletion, so a
late record of one does not bring the series back.

Transitions and dead letters only count (``Health``): by cluster, framework
and statuses, and by stage and reason.
"""

from __future__ import annotations

import gzip
import logging
import sys
import threading
import time
from collections import Counter as Tally
from datetime import datetime

import msgspec
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily

from workloadmap.catalog import records

from .families import (NODE_FAMILIES, POD_FAMILIES, STATES, WORKLOAD_FAMILIES, build, component_labels, labels, number,
                       part_of, resource_lines, workload_labels)

log = logging.getLogger(__name__)

# What a topic carries, for the tracker; the consumer maps its topic names onto these.
WORKLOADS, PODS, NODES, TRANSITIONS, DEADLETTERS = "workloads", "pods", "nodes", "transitions", "deadletters"
KINDS = (WORKLOADS, PODS, NODES, TRANSITIONS, DEADLETTERS)


# --------------------------------------------------------------------------- the fields read
# Only the fields the series need are decoded (msgspec skips the rest of a record unparsed).


# gc=False: a workload's state keeps its total and components (no cycle can form in decoded
# records), and untracked objects are 16 bytes smaller and never walked by the collector.
class Resources(msgspec.Struct, gc=False):
    gpu: float = 0
    cpu: float = 0
    memory: float = 0
    gpuResources: dict[str, float] | None = None
    pods: int = 0


class Component(msgspec.Struct, gc=False):
    name: str
    instance: str | None = None
    pods: int = 0
    total: Resources = msgspec.field(default_factory=Resources)


class WorkloadRecord(msgspec.Struct):
    cluster: str
    uid: str
    kind: str
    status: str
    deleted: bool
    namespace: str | None = None
    name: str | None = None
    framework: str | None = None
    definition: str | None = None
    statusSince: str | None = None
    creationTimestamp: str | None = None
    observedAt: str | None = None
    total: Resources = msgspec.field(default_factory=Resources)
    components: list[Component] = []


class Owner(msgspec.Struct):
    kind: str
    name: str
    uid: str


class PodRecord(msgspec.Struct):
    cluster: str
    uid: str
    namespace: str
    name: str
    state: str
    deleted: bool
    workload: Owner | None = None
    component: str | None = None
    instance: str | None = None
    replica: str | None = None
    gpu: float = 0
    observedAt: str | None = None


class NodeLabels(msgspec.Struct):
    gpuProduct: str | None = None
    instanceType: str | None = None
    nodePool: str | None = None
    zone: str | None = None


class NodeRecord(msgspec.Struct):
    cluster: str
    name: str
    deleted: bool
    allocatable: Resources = msgspec.field(default_factory=Resources)
    unschedulable: bool = False
    labels: NodeLabels = msgspec.field(default_factory=NodeLabels)
    observedAt: str | None = None


class Transition(msgspec.Struct, rename={"from_": "from"}):
    cluster: str
    to: str
    from_: str | None = None
    framework: str | None = None


class DeadLetter(msgspec.Struct):
    stage: str
    reason: str


_DECODERS = {WORKLOADS: msgspec.json.Decoder(WorkloadRecord), PODS: msgspec.json.Decoder(PodRecord),
             NODES: msgspec.json.Decoder(NodeRecord), TRANSITIONS: msgspec.json.Decoder(Transition),
             DEADLETTERS: msgspec.json.Decoder(DeadLetter)}
_VOCABULARY = frozenset(STATES) | {records.DELETED}
_POD_STATES = frozenset({"Pending", "Bound", "Terminated"})
# Per status, the status lines after their common head: `state"} 1` for it and `state"} 0` for the others.
_STATE_LINES = {current: [f'{state}"}} {1 if state == current else 0}\n' for state in STATES] for current in STATES}


class Rejected(ValueError):
    """A record the exporter cannot read: `reason` is one of the dead-letter reasons."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def decode(kind: str, value: bytes):
    """The fields of a `kind` record; Rejected naming the field and why."""
    try:
        return _DECODERS[kind].decode(value)
    except msgspec.ValidationError as exc:
        text = str(exc)
        reason = records.MISSING_FIELDS if "missing required field" in text else records.WRONG_TYPES
        raise Rejected(reason, text) from None
    except msgspec.DecodeError as exc:
        raise Rejected(records.MALFORMED_JSON, str(exc)) from None


def unix_seconds(text: str | None) -> float | None:
    """An RFC 3339 instant as Unix seconds (None when absent or unreadable: the series is left out)."""
    if not text:
        return None
    at = _SECONDS.get(text, _UNREAD)
    if at is not _UNREAD:
        return at
    try:
        at = datetime.fromisoformat(text).timestamp()
    except ValueError:
        at = None
    if len(_SECONDS) >= _SECONDS_KEPT:
        _SECONDS.clear()
    _SECONDS[text] = at
    return at


# Instants repeat (a batch's observation times, a rollout's creation times): each read once while
# it recurs.  Bounded: cleared when full.
_SECONDS: dict[str, float | None] = {}
_SECONDS_KEPT = 8192
_UNREAD = object()


def _time_line(family, key: tuple, i: int, prefix: str, text: str | None) -> None:
    """A workload's line of a Unix-time family, or none when the instant is absent or unreadable."""
    at = unix_seconds(text)
    if at is None:
        family.drop(key)
    else:
        family.set(key, f"{family.name}{{{prefix}}} {number(at)}\n".encode(), i)


# --------------------------------------------------------------------------- pipeline health


# No `_created` series beside each counter and histogram: kube-state-metrics serves none, and a
# restart that rebuilds the counters from the topics would make them say when the process started.
disable_created_metrics()


class Health:
    """The pipeline's own metrics: few series, as prometheus_client metrics in their own registry."""

    LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

    def __init__(self, consumer: str = "exporter"):
        self.consumer = consumer
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records = Counter("workloadmap_records", "Records read from the pipeline's topics, by cluster and topic.",
                               ["cluster", "topic"], registry=r)
        self.dead_letters = Counter("workloadmap_dead_letters", "Dead letters of the pipeline, by stage and reason.",
                                    ["stage", "reason"], registry=r)
        self.transitions = Counter("workloadmap_transitions",
                                   "Status transitions of workloads, by cluster, framework and statuses.",
                                   ["cluster", "framework", "from_status", "to_status"], registry=r)
        self.rejected = Counter("workloadmap_exporter_rejected_records",
                                "Records the exporter could not read (the writer dead-letters them), by topic and "
                                "reason.", ["topic", "reason"], registry=r)
        self.last_event = Gauge("workloadmap_cluster_last_event_timestamp_seconds",
                                "Unix time a watcher observed the newest event of the cluster that reached the "
                                "exporter (freshness: time() minus this).", ["cluster"], registry=r)
        self.delay = Histogram("workloadmap_record_delay_seconds",
                               "From a watcher observing an event to its record reaching the consumer, once caught up.",
                               ["consumer", "topic"], buckets=self.LATENCY_BUCKETS, registry=r)
        self.batch = Histogram("workloadmap_batch_duration_seconds", "Time a consumer took to apply one batch.",
                               ["consumer"], buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                               registry=r)
        self.lag = Gauge("workloadmap_consumer_lag_records", "Records in the topic the consumer has not read yet.",
                         ["consumer", "topic"], registry=r)
        self.objects = Gauge("workloadmap_exporter_objects", "Live objects the exporter holds series for, by kind.",
                             ["kind"], registry=r)

    def count_watchers(self, counts) -> None:
        """Serve the watchers' counters: `counts()` gives ``(cluster, kind, counts)`` as the watchers keep
        them (``ingest.watching.Watching.counts``): events by type, relists, expired versions, errors."""
        self.registry.register(WatcherCounts(counts))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class WatcherCounts:
    """The watchers' own counters as counter families (the watchers count on events; a scrape reads them)."""

    FAMILIES = (("workloadmap_watcher_events", "Object events a watcher published, by cluster, kind and type.",
                 ("ADDED", "MODIFIED", "DELETED")),
                ("workloadmap_watcher_relists", "Full lists a watcher made (at start, after errors or an "
                                                "expired version).", ("relists",)),
                ("workloadmap_watcher_expired", "Watches ended by an expired resourceVersion (410 Gone).", ("gone",)),
                ("workloadmap_watcher_errors", "Failed list or watch requests of a watcher.", ("errors",)))

    def __init__(self, counts):
        self.counts = counts

    def collect(self):
        rows = self.counts()
        for name, text, keys in self.FAMILIES:
            by_type = keys[0] == "ADDED"
            family = CounterMetricFamily(name, text, labels=["cluster", "kind", "type"] if by_type
                                         else ["cluster", "kind"])
            for cluster, kind, counts in rows:
                for key in keys:
                    family.add_metric([cluster, kind, key] if by_type else [cluster, kind], counts.get(key, 0))
            yield family


# --------------------------------------------------------------------------- the state


class WorkloadState:
    """What a workload's lines were written from, so that a record rewrites only the lines it changes.

    It is kept for every live workload: the texts a fleet repeats (namespaces, kinds, frameworks,
    definitions, statuses, component names) are interned, and what a record does not change is
    kept from the previous state (`old`) rather than the record's equal copy."""

    __slots__ = ("ident", "prefix", "framework", "definition", "status", "since", "created", "total", "components")

    def __init__(self, r: WorkloadRecord, prefix: str, old: WorkloadState | None):
        self.prefix, self.since, self.created = prefix, r.statusSince, r.creationTimestamp
        if old is None:
            self.ident = (_interned(r.namespace), r.name, _interned(r.kind))
            self.framework, self.definition = _interned(r.framework), _interned(r.definition)
            self.status, self.total, self.components = _interned(r.status), r.total, _interned_names(r.components)
            return
        self.ident = old.ident
        self.framework = old.framework if old.framework == r.framework else _interned(r.framework)
        self.definition = old.definition if old.definition == r.definition else _interned(r.definition)
        self.status = old.status if old.status == r.status else _interned(r.status)
        self.total = old.total if old.total == r.total else r.total
        self.components = old.components if old.components == r.components else _interned_names(r.components)


def _interned(text: str | None) -> str | None:
    return text if text is None else sys.intern(text)


def _interned_names(components: list) -> list:
    for c in components:
        c.name = sys.intern(c.name)
        if c.instance is not None:
            c.instance = sys.intern(c.instance)
    return components


class PodState:
    """What one pod contributes: to which workload and component, how (Bound/Pending/other), how many GPUs."""

    __slots__ = ("workload", "component", "state", "gpu")

    def __init__(self, workload, component, state, gpu):
        self.workload, self.component, self.state, self.gpu = workload, component, state, gpu


class Sums:
    """Allocated and pending pods and GPUs of a workload or a component, and how many pods (not deleted)
    are in it; a workload's also knows which (its deletion detaches them)."""

    __slots__ = ("prefix", "members", "pods", "allocated_pods", "allocated_gpus", "pending_pods", "pending_gpus")

    def __init__(self, prefix: str, *, keep_pods: bool):
        self.prefix = prefix
        self.members = 0
        self.pods: set | None = set() if keep_pods else None
        self.allocated_pods = self.pending_pods = 0
        self.allocated_gpus = self.pending_gpus = 0.0

    def add(self, state: str, gpu: float, sign: int) -> None:
        if state == "Bound":
            self.allocated_pods += sign
            self.allocated_gpus += sign * gpu
        elif state == "Pending":
            self.pending_pods += sign
            self.pending_gpus += sign * gpu


class Tracker:
    """The live state of the records read so far, as the lines of the metric families.

    ``apply(kind, value)`` takes one record (bytes) of a topic of `kind`
    (``WORKLOADS``, ``PODS``, ``NODES``, ``TRANSITIONS``, ``DEADLETTERS``);
    ``apply_batch`` takes many under one lock, so a scrape sees whole batches.
    ``exposition()`` is the ``/metrics`` body.  With ``pod_series=False`` no
    per-pod series is kept (``workloadmap_pod_workload_info``, one per pod,
    the largest family of a big fleet); the sums by workload and component stay.
    """

    def __init__(self, *, pod_series: bool = True, health: Health | None = None):
        self.pod_series = pod_series
        self.health = health or Health()
        self.lock = threading.Lock()
        self._refreshing = threading.Lock()
        self.families = f = build(WORKLOAD_FAMILIES, POD_FAMILIES, NODE_FAMILIES)
        self._workload_families = [f[name] for name, _, _ in WORKLOAD_FAMILIES]
        self._pod_info = f["workloadmap_pod_workload_info"]
        self._node_families = [f[name] for name, _, _ in NODE_FAMILIES]
        self.workloads: dict[tuple, WorkloadState] = {}  # (cluster, uid) -> what its lines say
        self.pods: dict[tuple, PodState] = {}           # (cluster, uid) -> contribution
        self.sums: dict[tuple, Sums] = {}               # (cluster, workload uid) -> sums
        self.component_sums: dict[tuple, Sums] = {}     # (cluster, workload uid, component, instance) -> sums
        self.detached: dict[tuple, set] = {}            # deleted workload -> its pods not deleted yet
        self.nodes: set[tuple] = set()
        self.newest: dict[str, float] = {}              # cluster -> Unix time of its newest observation

    # ------------------------------------------------------------------ in

    def apply(self, kind: str, value: bytes) -> object:
        """Apply one record; returns what was decoded.  Rejected when it cannot be read."""
        record = decode(kind, value)
        if kind == WORKLOADS:
            self._workload(record)
        elif kind == PODS:
            self._pod(record)
        elif kind == NODES:
            self._node(record)
        elif kind == TRANSITIONS:
            self.health.transitions.labels(record.cluster, record.framework or "", record.from_ or "",
                                           record.to).inc()
        else:
            self.health.dead_letters.labels(record.stage, record.reason).inc()
        return record

    def apply_batch(self, messages, *, topic_names: dict[str, str] | None = None, caught_up: bool = True) -> int:
        """Apply ``(kind, value bytes, key bytes|None)`` messages under the lock; returns how many were rejected.

        Counts records by cluster and topic, the newest observation per cluster and, once
        `caught_up` (records arrive as they happen, not replayed from the topic's start),
        each record's delay since its observation.  `topic_names` names a kind's topic in
        the counters (default: the kind).
        """
        health, names = self.health, topic_names or {}
        counts, newest, rejected = Tally(), {}, 0
        delays = Tally()   # (kind, observedAt) -> records: a batch's records share a few instants
        started = time.perf_counter()
        with self.lock:
            for kind, value, key in messages:
                try:
                    record = self.apply(kind, value)
                except Rejected as exc:
                    rejected += 1
                    topic = names.get(kind, kind)
                    health.rejected.labels(topic, exc.reason).inc()
                    log.warning("%s record %s rejected: %s: %s", topic, (key or b"?").decode("utf-8", "replace"),
                                exc.reason, exc)
                    continue
                cluster = getattr(record, "cluster", None)
                if cluster is None:
                    continue
                counts[cluster, kind] += 1
                observed = getattr(record, "observedAt", None)
                if observed and observed > newest.get(cluster, ""):
                    newest[cluster] = observed
                if caught_up and observed:
                    delays[kind, observed] += 1
        now = time.time()
        for (cluster, kind), n in counts.items():
            health.records.labels(cluster, names.get(kind, kind)).inc(n)
        for cluster, observed in newest.items():
            at = unix_seconds(observed)
            if at is not None and at > self.newest.get(cluster, 0.0):
                self.newest[cluster] = at
                health.last_event.labels(cluster).set(at)
        children: dict = {}
        for (kind, observed), n in delays.items():
            at = unix_seconds(observed)
            if at is not None:
                child = children.get(kind)
                if child is None:
                    child = children[kind] = health.delay.labels(health.consumer, names.get(kind, kind))
                delay = max(0.0, now - at)
                for _ in range(n):
                    child.observe(delay)
        health.batch.labels(health.consumer).observe(time.perf_counter() - started)
        health.objects.labels("workload").set(len(self.workloads))
        health.objects.labels("pod").set(len(self.pods))
        health.objects.labels("node").set(len(self.nodes))
        return rejected

    # ------------------------------------------------------------------ workloads

    def _workload(self, r: WorkloadRecord) -> None:
        if r.status not in _VOCABULARY:
            raise Rejected(records.WRONG_TYPES, f"workload {r.cluster}/{r.uid}: status {r.status!r} is not in the "
                                                f"shared vocabulary")
        key = (r.cluster, r.uid)
        if r.deleted or r.status == records.DELETED:
            self._drop_workload(key)
            return
        old = self.workloads.get(key)
        if old is None:
            key = (sys.intern(r.cluster), r.uid)   # the key every family keeps for the workload
        if old is None or old.ident != (r.namespace, r.name, r.kind):
            old = None   # a first record (a uid's namespace, name and kind never change): every line written
            prefix = workload_labels(r.cluster, r.namespace, r.name, r.kind)
        else:
            prefix = old.prefix
        state = self.workloads[key] = WorkloadState(r, prefix, old)
        i = part_of(key)   # the same part in every family
        (info, status, since, created, pods, gpus, resources,
         c_pods, c_gpus, c_resources) = self._workload_families
        # Only the lines whose inputs changed are written again: most records change the status alone.
        if old is None or (old.framework, old.definition) != (r.framework, r.definition):
            info.set(key, f"workloadmap_workload_info{{{labels(prefix, framework=r.framework, definition=r.definition)}"
                          f"}} 1\n".encode(), i)
        if old is None or old.status != r.status:
            head = f'workloadmap_workload_status{{{prefix},status="'
            status.set(key, (head + head.join(_STATE_LINES[r.status])).encode(), i)
        if old is None or r.statusSince != old.since:
            _time_line(since, key, i, prefix, r.statusSince)
        if old is None or r.creationTimestamp != old.created:
            _time_line(created, key, i, prefix, r.creationTimestamp)
        total = r.total
        if old is None or state.total is not old.total:   # (kept from the old state when equal)
            pods.set(key, f"workloadmap_workload_requested_pods{{{prefix}}} {total.pods}\n".encode(), i)
            gpus.set(key, f"workloadmap_workload_requested_gpus{{{prefix}}} {number(total.gpu)}\n".encode(), i)
            resources.set(key, resource_lines("workloadmap_workload_resource_requests", prefix, total.cpu,
                                              total.memory, total.gpuResources).encode(), i)
        if old is not None and state.components is old.components:
            return
        if not r.components:
            for family in (c_pods, c_gpus, c_resources):
                family.drop(key)
            return
        merged: dict[tuple, list] = {}   # (name, instance) -> [pods, gpu, cpu, memory, gpuResources]
        for c in r.components:
            m = merged.get((c.name, c.instance))
            if m is None:
                m = merged[c.name, c.instance] = [0, 0.0, 0.0, 0.0, {}]
            t = c.total
            m[0] += c.pods
            m[1] += t.gpu
            m[2] += t.cpu
            m[3] += t.memory
            if t.gpuResources:
                for name, n in t.gpuResources.items():
                    m[4][name] = m[4].get(name, 0) + n
        p_lines, g_lines, r_lines = [], [], []
        for (name, instance), (n_pods, gpu, cpu, memory, by_resource) in merged.items():
            cp = component_labels(prefix, name, instance)
            p_lines.append(f"workloadmap_component_requested_pods{{{cp}}} {n_pods}\n")
            g_lines.append(f"workloadmap_component_requested_gpus{{{cp}}} {number(gpu)}\n")
            r_lines.append(resource_lines("workloadmap_component_resource_requests", cp, cpu, memory, by_resource))
        c_pods.set(key, "".join(p_lines).encode(), i)
        c_gpus.set(key, "".join(g_lines).encode(), i)
        c_resources.set(key, "".join(r_lines).encode(), i)

    def _drop_workload(self, key: tuple) -> None:
        self.workloads.pop(key, None)
        for family in self._workload_families:
            family.drop(key)
        sums = self.sums.pop(key, None)
        if sums is None:
            return
        self._write_sums(key, None, workload=True)
        for pod_key in sums.pods:
            pod = self.pods[pod_key]
            if pod.component is not None:
                ckey = key + pod.component
                if self.component_sums.pop(ckey, None) is not None:
                    self._write_sums(ckey, None, workload=False)
            pod.workload = pod.component = None
            self._pod_info.drop(pod_key)
        self.detached[key] = set(sums.pods)

    # ------------------------------------------------------------------ pods

    def _pod(self, r: PodRecord) -> None:
        if r.state not in _POD_STATES:
            raise Rejected(records.WRONG_TYPES, f"pod {r.cluster}/{r.namespace}/{r.name}: state {r.state!r} is not "
                                                f"Pending, Bound or Terminated")
        key = (r.cluster, r.uid)
        old = self.pods.pop(key, None)
        if old is not None:
            self._leave(key, old)
        owner = r.workload
        wkey = None if owner is None else (r.cluster, owner.uid)
        if r.deleted:
            self._pod_info.drop(key)
            if wkey is not None:
                self._forget_detached(wkey, key)
            return
        if wkey is not None and wkey in self.detached:
            self.detached[wkey].add(key)
            self.pods[key] = PodState(None, None, r.state, r.gpu)
            self._pod_info.drop(key)
            return
        if wkey is None:
            self.pods[key] = PodState(None, None, r.state, r.gpu)
            self._pod_info.drop(key)
            return
        component = None if r.component is None else (r.component, r.instance)
        pod = self.pods[key] = PodState(wkey, component, r.state, r.gpu)
        prefix = labels(cluster=r.cluster, namespace=r.namespace, workload=owner.name, kind=owner.kind)
        sums = self.sums.get(wkey)
        if sums is None:
            sums = self.sums[wkey] = Sums(prefix, keep_pods=True)
        self._join(sums, key, pod, wkey, workload=True)
        if component is not None:
            ckey = wkey + component
            csums = self.component_sums.get(ckey)
            if csums is None:
                csums = self.component_sums[ckey] = Sums(
                    labels(prefix, component=r.component, component_instance=r.instance), keep_pods=False)
            self._join(csums, key, pod, ckey, workload=False)
        if self.pod_series:
            self._pod_info.set(key, ("workloadmap_pod_workload_info{" + labels(
                cluster=r.cluster, namespace=r.namespace, pod=r.name, workload=owner.name, kind=owner.kind,
                component=r.component, component_instance=r.instance, replica=r.replica) + "} 1\n").encode())

    def _join(self, sums: Sums, key: tuple, pod: PodState, skey: tuple, *, workload: bool) -> None:
        sums.members += 1
        if sums.pods is not None:
            sums.pods.add(key)
        sums.add(pod.state, pod.gpu, 1)
        self._write_sums(skey, sums, workload=workload)

    def _leave(self, key: tuple, pod: PodState) -> None:
        """Take a pod's previous contribution out of its sums (dropping sums left without pods)."""
        if pod.workload is None:
            return
        for skey, table, workload in ((pod.workload, self.sums, True),
                                      (None if pod.component is None else pod.workload + pod.component,
                                       self.component_sums, False)):
            if skey is None:
                continue
            sums = table.get(skey)
            if sums is None:
                continue
            sums.members -= 1
            if sums.pods is not None:
                sums.pods.discard(key)
            sums.add(pod.state, pod.gpu, -1)
            if not sums.members:
                del table[skey]
                sums = None
            self._write_sums(skey, sums, workload=workload)

    def _forget_detached(self, wkey: tuple, key: tuple) -> None:
        pods = self.detached.get(wkey)
        if pods is not None:
            pods.discard(key)
            if not pods:
                del self.detached[wkey]

    def _write_sums(self, skey: tuple, sums: Sums | None, *, workload: bool) -> None:
        scope = "workload" if workload else "component"
        f = self.families
        for what, attr in (("allocated_pods", "allocated_pods"), ("allocated_gpus", "allocated_gpus"),
                           ("pending_pods", "pending_pods"), ("pending_gpus", "pending_gpus")):
            family = f[f"workloadmap_{scope}_{what}"]
            if sums is None:
                family.drop(skey)
            else:
                family.set(skey, f"{family.name}{{{sums.prefix}}} {number(getattr(sums, attr))}\n".encode())

    # ------------------------------------------------------------------ nodes

    def _node(self, r: NodeRecord) -> None:
        key = (r.cluster, r.name)
        info, allocatable, unschedulable = self._node_families
        if r.deleted:
            self.nodes.discard(key)
            for family in self._node_families:
                family.drop(key)
            return
        self.nodes.add(key)
        prefix = labels(cluster=r.cluster, node=r.name)
        n = r.labels
        info.set(key, ("workloadmap_node_info{" + labels(prefix, gpu_product=n.gpuProduct, instance_type=n.instanceType,
                                                         node_pool=n.nodePool, zone=n.zone) + "} 1\n").encode())
        a = r.allocatable
        allocatable.set(key, resource_lines("workloadmap_node_resource_allocatable", prefix, a.cpu, a.memory,
                                            a.gpuResources).encode())
        unschedulable.set(key, f"workloadmap_node_unschedulable{{{prefix}}} {int(r.unschedulable)}\n".encode())

    # ------------------------------------------------------------------ out

    def series(self) -> int:
        """Series of the per-object families (lines), for the figures."""
        with self.lock:
            return sum(block.count(b"\n") for family in self.families.values() for block in family.blocks())

    def exposition(self) -> bytes:
        """The /metrics body: the health metrics, then each family's lines as the last events left them."""
        return b"".join(self.exposition_parts())

    def exposition_parts(self):
        """The /metrics body in pieces (a family's header, then its lines part by part), for a server to
        send as they come: the whole text of a big fleet is hundreds of megabytes.  The lock is held
        only to take a part's lines (references); they are joined after it."""
        yield self.health.exposition()
        for family in list(self.families.values()):
            if not family.size:
                continue
            yield family.header()
            for i in range(len(family.parts)):
                with self.lock:
                    part = family.parts[i]
                    blocks = list(part.values()) if part else None
                if blocks:
                    yield b"".join(blocks)

    def refresh(self) -> None:
        """Make again the gzip member of every part changed since its last one (see families.Family).

        The parts' lines are taken under the lock and compressed after it; scrapes run this one
        at a time.  The consumer calls it once caught up, so the first scrape finds it done.
        """
        with self._refreshing:
            with self.lock:
                work = []
                for family in self.families.values():
                    dirty, family.dirty = family.dirty, set()
                    work.extend((family, i, list(family.parts[i].values()) if family.parts[i] else ())
                                for i in dirty)
            for family, i, blocks in work:
                family.zipped[i] = gzip.compress(b"".join(blocks), compresslevel=1, mtime=0) if blocks else None

    def exposition_gzip(self) -> bytes:
        """The /metrics body gzip-compressed: a series of gzip members, one per part of each family,
        made again only for the parts that changed since the last scrape (``refresh``)."""
        self.refresh()
        out = [gzip.compress(self.health.exposition(), compresslevel=1, mtime=0)]
        with self.lock:
            families = [(f, list(f.zipped)) for f in self.families.values() if f.size]
        for family, members in families:
            out.append(gzip.compress(family.header(), compresslevel=1, mtime=0))
            out.extend(m for m in members if m)
        return b"".join(out)
