"""Attributing pods to workloads: pod and node records, and the owner chain they need.

A pod belongs to the workload at the top of its controller ownerReference chain (pod -> ReplicaSet
-> Deployment, pod -> Job -> JobSet, pod -> StatefulSet -> LeaderWorkerSet), and to the component,
instance and replica the workload's definition's pod selectors give it (``catalog.pods.match_pod``,
the code `tree` uses).  A pod without a controller is its own workload (kind Pod).

State, per raw partition (``PodStates``, part of processing.MemoryStates):

- owner links: every object other than a pod or node (workloads and intermediate owners) by
  cluster/uid: its apiVersion, kind, name and controller reference.  A chain is followed while its
  references are of kinds the catalog knows (``catalog.attributing.owner_kinds`` and the
  definitions' kinds: the watchers publish those); a reference of another kind (a DaemonSet, an
  operator's own CRD) ends it there, as the top;
- pending pods: a pod whose chain reaches an owner not seen yet waits for it (its raw event is
  kept, keyed by that owner); when the owner comes its pods are attributed at once, in the owner
  event's outputs, so no pod is lost for arriving first.  Meanwhile its records have workload null
  (or, for a pod attributed before, the workload it had: a terminating pod whose ReplicaSet was
  deleted first stays its Deployment's);
- pod and node summaries: the kept fields of their latest record (a record is emitted only when one
  of them changes), resourceVersion (repeats and older events produce nothing), state and since;
  a deleted pod or node keeps only its resourceVersion and deletion time until it is forgotten
  (processors/remembering.py: a deletion of a pod or node not known makes no record).

Why a pod's status churn is cheap: most pod events are the kubelet's status updates (containers
created, Running, Ready flipping), which change nothing a record keeps.  A pod's summary also holds
a digest of what its request and its attribution are computed from (its metadata but the
resourceVersion, its spec: ``_identity``), with the catalog and the owner links it was attributed
with; an event with the same digest, catalog and links (and a cluster whose pod selectors read no
status) needs only its state (phase, node) compared, not its request parsed, its owner chain
followed and its pod selectors evaluated again.  The digest is a cache in memory: a summary
recovered from the state topic has none, and its next event takes the whole path.

Why that fits the partitioning: the raw topic is keyed by cluster/namespace for namespaced objects
(``records.raw_key``), and ownerReferences never leave a namespace, so a pod and its whole chain
are in one raw partition, in order: the state is the partition's own, and an owner arriving after
its pods resolves them in the same partition's transaction.  In the faust app the state survives a
restart through the compacted state topic (``Outputs.state``, remembering.py): a pod's or node's
latest record, an owner link, a pending pod, or a tombstone when an owner is deleted, a pending
pod attributed or a deleted pod or node forgotten.
"""

from __future__ import annotations

import hashlib

import orjson

from workloadmap.catalog import Catalog, ResolveError, records
from workloadmap.catalog.attributing import (
    NODE, PHASES, POD, MalformedObject, controller_of, group_of, node_facts, owner_kinds, pod_facts, pod_state,
    workload_kinds)
from workloadmap.catalog.jqlang.reading import ANY, paths_read
from workloadmap.catalog.pods import match_pod

from . import remembering
from .remembering import event_seconds, state_key

MAX_CHAIN = 16   # owner links followed at most (a cycle of references must not hang a worker)

# The fields of a node record whose change is worth a record (the warehouse keeps them).
_NODE_KEPT = ("uid", "allocatable", "capacity", "unschedulable", "ready", "labels")


class Rejected(Exception):
    def __init__(self, reason: str, detail: str):
        self.reason = reason
        self.detail = detail
        super().__init__(detail)


class PodStates:
    """Owner links, pending pods and pod and node summaries of one raw partition."""

    def __init__(self, deleted=None):
        self.owners: dict[str, tuple] = {}        # cluster/uid -> (apiVersion, kind, name, controller ref or None)
        self.pending: dict[str, dict] = {}        # cluster/ownerUid -> {cluster/podUid: raw event}
        self.waiting: dict[str, str] = {}         # cluster/podUid -> the cluster/ownerUid it waits for
        self.pods: dict[str, dict] = {}           # cluster/podUid -> pod_summary
        self.nodes: dict[str, dict] = {}          # cluster/nodeName -> node_summary
        # owner links changed or removed so far: a pod attributed before a change is attributed again
        # at its next event (see the module docstring; a link added changes no attributed pod's chain)
        self.links_changed = 0
        # deleted(prefix, key, deletedAt, out): a pod or node recorded as deleted (the store
        # remembers it for a while: processing.MemoryStates.deleted)
        self.deleted = deleted or (lambda *args: None)

    # -- recovery (app.py): the latest state topic message of each key ----------------
    def recover(self, prefix: str, key: str, value: dict) -> None:
        if prefix == remembering.POD:
            self.pods[key] = _deleted_pod(value) if value["deleted"] else pod_summary(value)
        elif prefix == remembering.NODE:
            self.nodes[key] = _deleted_node(value) if value["deleted"] else node_summary(value)
        elif prefix == remembering.OWNER:
            self.owners[key] = _link_tuple(value["owner"])
        elif prefix == remembering.PENDING:
            self.waiting[key] = value["waitsFor"]
            self.pending.setdefault(value["waitsFor"], {})[key] = value["pod"]

    def recovered(self) -> None:
        for key in self.waiting:
            summary = self.pods.get(key)
            if summary is not None:
                summary.pending = True

    def keep(self, prefix: str, key: str, record: dict, value: bytes, out, summary) -> None:
        """A pod's or node's new record (`value`): the state topic's message, and in memory its summary or,
        deleted, what is remembered of it until it is forgotten (processing.MemoryStates.deleted)."""
        out.state.append((state_key(prefix, key), value))
        pod = prefix == remembering.POD
        table = self.pods if pod else self.nodes
        if record["deleted"]:
            table[key] = marker = _deleted_pod(record) if pod else _deleted_node(record)
            self.deleted(prefix, key, marker["deletedAt"], out)
        else:
            table[key] = summary

    def _unwait(self, pod_key: str) -> None:
        owner = self.waiting.pop(pod_key, None)
        if owner is not None:
            waiting = self.pending.get(owner)
            if waiting is not None:
                waiting.pop(pod_key, None)
                if not waiting:
                    del self.pending[owner]


def _deleted_pod(record: dict) -> dict:
    """What is remembered of a deleted pod until it is forgotten: that it is deleted, since when."""
    return {"rv": record.get("resourceVersion"), "deleted": True, "deletedAt": event_seconds(record["observedAt"])}


def _deleted_node(record: dict) -> dict:
    """A deleted node: its uid too (a node created again under its name is another one)."""
    return {"rv": record.get("resourceVersion"), "deleted": True, "kept": (record.get("uid"),),
            "deletedAt": event_seconds(record["observedAt"])}


def _link_tuple(link: dict) -> tuple:
    ref = link.get("controller")
    return (link.get("apiVersion"), link.get("kind"), link.get("name"),
            None if ref is None else (ref.get("apiVersion"), ref.get("kind"), ref.get("name"), ref.get("uid")))


def _pod_kept(state: str, r: dict, workload: dict | None) -> tuple:
    """The kept fields of a pod record (its facts and attribution): a record is emitted when they change."""
    gres = r.get("gpuResources")
    return (state, r.get("nodeName"), r["gpu"], tuple(sorted(gres.items())) if gres else None, r["cpu"], r["memory"],
            workload["uid"] if workload else None, r.get("component"), r.get("instance"), r.get("replica"))


class PodSummary:
    """What a live pod's latest record implies (a deleted pod's is ``_deleted_pod``'s dict): its
    resourceVersion, state and since when, the kept fields and attribution, whether it waits for an
    owner, and the status-churn cache (``_identity``'s digest, the catalog and owner-link changes it
    was attributed with).  A class with slots: a pod's summary is most of what a worker keeps per
    live pod, and a dict of these fields took a third more memory."""

    __slots__ = ("rv", "state", "since", "kept", "attribution", "pending", "identity", "catalog", "links")
    deleted = False

    def __init__(self, rv, state, since, kept, attribution, pending=False, identity=None, catalog=None, links=None):
        self.rv, self.state, self.since, self.kept, self.attribution = rv, state, since, kept, attribution
        self.pending, self.identity, self.catalog, self.links = pending, identity, catalog, links

    def get(self, name: str, default=None):
        """As a dict's (the code that reads any store's summaries: processing.MemoryStates)."""
        return getattr(self, name, default)


def pod_summary(record: dict) -> PodSummary:
    """The state a live pod's latest record implies."""
    return PodSummary(record.get("resourceVersion"), record["state"], record["stateSince"],
                      _pod_kept(record["state"], record, record.get("workload")),
                      {k: record.get(k) for k in ("workload", "framework", "definition", "component", "instance",
                                                  "replica")})


def node_summary(record: dict) -> dict:
    return {"rv": record.get("resourceVersion"), "deleted": record["deleted"],
            "kept": tuple(_freeze(record.get(f)) for f in _NODE_KEPT)}


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _identity(meta: dict, spec) -> bytes | None:
    """A digest of what a pod's request and attribution are computed from: its metadata but the
    resourceVersion, and its spec (None when they cannot be encoded: the whole path decides)."""
    try:
        text = orjson.dumps((meta if "resourceVersion" not in meta else
                             {k: v for k, v in meta.items() if k != "resourceVersion"}, spec))
    except TypeError:
        return None
    return hashlib.blake2b(text, digest_size=16).digest()


def reads_status(catalog: Catalog) -> bool:
    """Whether any pod selector or gang key of a catalog may read a pod's status (then a pod's status
    churn may change its attribution)."""
    for definition in catalog:
        for expr in definition.pod_expressions():
            read = paths_read(expr.source)
            if read is ANY or any(not path or path[0] == "status" for path in read):
                return True
    return False


def rv_newer(new, old) -> bool:
    """Whether resourceVersion `new` is newer than `old` (etcd revisions compare as integers)."""
    if old is None:
        return True
    if new is None:
        return False
    if new.isdigit() and old.isdigit():
        return int(new) > int(old)
    return new != old


class Attributing:
    """The pod, node and owner part of a Processor (processing.py), for one catalog per cluster."""

    def __init__(self, catalog_for):
        self.catalog_for = catalog_for
        # cluster -> (its catalog, known kinds, workload kinds, whether its pod selectors read status)
        self._kinds: dict[str, tuple] = {}

    def kinds(self, cluster: str, catalog: Catalog) -> tuple[frozenset, frozenset]:
        """(kinds a chain is followed through, kinds with a definition) of a cluster's catalog, computed
        again when the cluster's catalog changes (a definition applied to it)."""
        entry = self._entry(cluster, catalog)
        return entry[1], entry[2]

    def _entry(self, cluster: str, catalog: Catalog) -> tuple:
        entry = self._kinds.get(cluster)
        if entry is None or entry[0] is not catalog:
            workloads = workload_kinds(catalog)
            entry = self._kinds[cluster] = (catalog, (owner_kinds(catalog) | workloads) - {POD}, workloads,
                                            reads_status(catalog))
        return entry

    def is_workload(self, cluster: str, obj: dict) -> bool:
        """Whether an object is of a kind with a definition, or of no kind the catalog knows at all
        (then resolving it says so: an unknown-kind dead letter); not an owner kind without one."""
        known, workloads = self.kinds(cluster, self.catalog_for(cluster))
        kind = (group_of(obj.get("apiVersion")), obj.get("kind"))
        return kind in workloads or kind not in known

    # -- owners --------------------------------------------------------------------------
    def owner_event(self, event: dict, states: PodStates, out) -> None:
        """Remember (or forget) an object's owner link; attribute the pods that waited for it."""
        cluster, obj = event["cluster"], event["object"]
        meta = obj["metadata"]
        key = f"{cluster}/{meta['uid']}"
        if event["type"] == "DELETED":
            if states.owners.pop(key, None) is not None:
                states.links_changed += 1
                out.state.append((state_key(remembering.OWNER, key), None))
            return
        ref = controller_of(obj)
        link = (obj.get("apiVersion"), obj.get("kind"), meta.get("name"),
                None if ref is None else (ref.get("apiVersion"), ref.get("kind"), ref.get("name"), ref.get("uid")))
        known = states.owners.get(key)
        if known != link:
            if known is not None:
                states.links_changed += 1
            states.owners[key] = link
            value = {"owner": {"apiVersion": link[0], "kind": link[1], "name": link[2], "controller": None if ref is None
                               else {"apiVersion": link[3][0], "kind": link[3][1], "name": link[3][2],
                                     "uid": link[3][3]}}}
            out.state.append((state_key(remembering.OWNER, key), records.encode(value)))
        waiting = states.pending.pop(key, None)
        if waiting:
            for pod_key, pod_event in list(waiting.items()):
                states.waiting.pop(pod_key, None)
                # attributed now (or waiting for the next owner up): the pod as it was, seen again when
                # its owner was (never earlier than the pod's own last record)
                at = max(event["observedAt"], pod_event["observedAt"], key=records.parse_time)
                self.pod_event(pod_event, states, out, attributing_at=at)

    # -- pods ------------------------------------------------------------------------------
    def _chain(self, cluster: str, obj: dict, states: PodStates, known: frozenset):
        """(top reference, None) or (None, cluster/uid of the first owner not seen yet)."""
        ref = controller_of(obj)
        if ref is None:
            return None, None
        for _ in range(MAX_CHAIN):
            uid = ref.get("uid")
            if (group_of(ref.get("apiVersion")), ref.get("kind")) not in known or not isinstance(uid, str):
                return ref, None
            link = states.owners.get(f"{cluster}/{uid}")
            if link is None:
                return None, f"{cluster}/{uid}"
            if link[3] is None:
                return {"apiVersion": link[0] or ref.get("apiVersion"), "kind": link[1] or ref.get("kind"),
                        "name": link[2] or ref.get("name"), "uid": uid}, None
            parent = link[3]
            ref = {"apiVersion": parent[0], "kind": parent[1], "name": parent[2], "uid": parent[3]}
        return ref, None

    def _attribution(self, cluster: str, pod: dict, top: dict | None, workloads: frozenset, catalog: Catalog):
        meta = pod["metadata"]
        if top is None:    # no controller: the pod is its own workload
            top = {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind"), "name": meta.get("name"),
                   "uid": meta["uid"]}
        workload = {k: top.get(k) for k in ("apiVersion", "kind", "name", "uid")}
        out = {"workload": workload, "framework": None, "definition": None, "component": None, "instance": None,
               "replica": None}
        if (group_of(workload["apiVersion"]), workload["kind"]) in workloads:
            definition = catalog.find(str(workload["apiVersion"] or ""), str(workload["kind"]))
            out["framework"], out["definition"] = definition.framework, definition.name
            try:
                membership = match_pod(definition, pod)
            except ResolveError:
                membership = None   # a selector failing on this pod places it nowhere; it still counts
            if membership is not None:
                out.update(component=membership.component, instance=membership.instance, replica=membership.replica)
        return out

    def pod_event(self, event: dict, states: PodStates, out, *, attributing_at: str | None = None) -> bool:
        """A pod's record when a kept field changed; whether the pod has no controller (it is a workload)."""
        cluster, obj = event["cluster"], event["object"]
        meta = obj["metadata"]
        key = f"{cluster}/{meta['uid']}"
        previous = states.pods.get(key)
        rv = meta.get("resourceVersion")
        rv = None if rv is None else str(rv)
        if attributing_at is None and previous is not None and (
                previous.__class__ is not PodSummary or not rv_newer(rv, previous.rv)):
            return False   # deleted (its summary is _deleted_pod's), a re-delivery, or older than what was processed
        deleted = event["type"] == "DELETED"
        if deleted and previous is None:
            return controller_of(obj) is None   # forgotten, or never seen alive: nothing to end
        catalog = self.catalog_for(cluster)
        identity = None
        if (previous is not None and attributing_at is None and not deleted and not previous.pending
                and key not in states.waiting):
            # status churn (see the module docstring): the same pod on the same node, its state alone compared
            identity = _identity(meta, obj.get("spec"))
            status = obj.get("status")
            if (identity is not None and identity == previous.identity and catalog is previous.catalog
                    and states.links_changed == previous.links and type(status) is dict
                    and status.get("phase") in PHASES and not self._entry(cluster, catalog)[3]
                    and pod_state(status["phase"], previous.kept[1], False) == previous.state):
                previous.rv = rv
                return controller_of(obj) is None
        what = f"pod {cluster}/{meta.get('namespace')}/{meta.get('name')}"
        for field in ("namespace", "name"):
            if not isinstance(meta.get(field), str) or not meta.get(field):
                raise Rejected(records.MALFORMED_POD, f"{what}: metadata.{field} must be a non-empty string")
        try:
            facts = pod_facts(obj, self.catalog_for(cluster).resolver.gpus)
        except MalformedObject as exc:
            raise Rejected(records.MALFORMED_POD, f"{what}: {exc}") from None
        known, workloads = self.kinds(cluster, catalog)
        states._unwait(key)
        if deleted and previous is not None and previous.attribution["workload"] is not None:
            attribution = previous.attribution   # its owners may be gone already: it ends as what it was
        else:
            top, missing = self._chain(cluster, obj, states, known)
            if missing is not None and not deleted:
                states.waiting[key] = missing
                states.pending.setdefault(missing, {})[key] = event
                out.state.append((state_key(remembering.PENDING, key), records.encode({"pod": event, "waitsFor": missing})))
                attribution = (previous.attribution if previous is not None
                               and previous.attribution["workload"] is not None
                               else {"workload": None, "framework": None, "definition": None, "component": None,
                                     "instance": None, "replica": None})
            elif missing is not None:   # deleted before its owner came
                attribution = {"workload": None, "framework": None, "definition": None, "component": None,
                               "instance": None, "replica": None}
            else:
                attribution = self._attribution(cluster, obj, top, workloads, catalog)
        if previous is not None and previous.pending and key not in states.waiting:
            out.state.append((state_key(remembering.PENDING, key), None))   # no longer pending
        state = pod_state(facts["phase"], facts["nodeName"], deleted)
        kept = _pod_kept(state, {**facts, **attribution}, attribution["workload"])
        pending = key in states.waiting
        if not pending and not deleted and identity is None:
            identity = _identity(meta, obj.get("spec"))
        if pending or deleted:
            identity = None
        if previous is not None and kept == previous.kept and not deleted:
            # status churn: nothing the warehouse keeps changed
            previous.rv, previous.pending, previous.identity = rv, pending, identity
            if identity is not None:
                previous.catalog, previous.links = catalog, states.links_changed
            return controller_of(obj) is None
        at = attributing_at or event["observedAt"]
        record = {
            "cluster": cluster, "observedAt": at, "eventType": event["type"], "deleted": deleted,
            "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"], "resourceVersion": rv,
            "creationTimestamp": meta.get("creationTimestamp"), "nodeName": facts["nodeName"], "phase": facts["phase"],
            "state": state, **attribution, "gpu": facts["gpu"], "cpu": facts["cpu"], "memory": facts["memory"],
            "previousState": previous.state if previous else None,
            "stateSince": previous.since if previous and previous.state == state else at,
        }
        if facts.get("gpuResources"):
            record["gpuResources"] = facts["gpuResources"]
        value = records.encode(record)
        out.pods.append((key.encode(), value))
        states.keep(remembering.POD, key, record, value, out, None if deleted else PodSummary(
            rv, state, record["stateSince"], kept, attribution, pending, identity,
            catalog if identity is not None else None, states.links_changed if identity is not None else None))
        return controller_of(obj) is None

    # -- nodes -----------------------------------------------------------------------------
    def node_event(self, event: dict, states: PodStates, out) -> None:
        cluster, obj = event["cluster"], event["object"]
        meta = obj["metadata"]
        name = meta.get("name")
        what = f"node {cluster}/{name}"
        if not isinstance(name, str) or not name:
            raise Rejected(records.MALFORMED_NODE, f"{what}: metadata.name must be a non-empty string")
        key = f"{cluster}/{name}"
        previous = states.nodes.get(key)
        rv = meta.get("resourceVersion")
        rv = None if rv is None else str(rv)
        deleted = event["type"] == "DELETED"
        if previous is not None and not rv_newer(rv, previous["rv"]):
            return
        if previous is not None and previous["deleted"] and previous["kept"][0] == meta["uid"]:
            return   # the node was deleted: a late event of it must not bring it back
        if deleted and (previous is None or previous["deleted"]):
            return   # forgotten, or never seen alive: nothing to end
        try:
            facts = node_facts(obj, self.catalog_for(cluster).resolver.gpus)
        except MalformedObject as exc:
            raise Rejected(records.MALFORMED_NODE, f"{what}: {exc}") from None
        record = {"cluster": cluster, "observedAt": event["observedAt"], "eventType": event["type"],
                  "deleted": deleted, "name": name, "uid": meta["uid"], "resourceVersion": rv,
                  "creationTimestamp": meta.get("creationTimestamp"), **facts}
        summary = node_summary(record)
        if previous is None or summary["kept"] != previous["kept"] or deleted != previous["deleted"]:
            value = records.encode(record)
            out.nodes.append((key.encode(), value))
            states.keep(remembering.NODE, key, record, value, out, summary)
        else:
            previous["rv"] = rv


def is_pod(obj: dict) -> bool:
    return (group_of(obj.get("apiVersion")), obj.get("kind")) == POD


def is_node(obj: dict) -> bool:
    return (group_of(obj.get("apiVersion")), obj.get("kind")) == NODE
