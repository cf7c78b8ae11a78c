"""Processing raw object events into workload, pod and node records, transitions and dead letters.

This is the whole of the processors' logic, free of any transport: the
embedded pipeline (embedding.py) calls :meth:`Processor.process` with a
message's key and bytes and a state store, and the faust app (app.py)
:meth:`Processor.process_batch` with a batch of messages and the state store
of each raw partition; both send what they return.  A batch is processed in
one pass, each message against the state the messages before it left, so it
gives exactly the outputs of its messages one by one, grouped by raw
partition in their order.

Why state per object: re-delivered or duplicated events (same cluster, uid,
resourceVersion) must produce no second record, and a status change needs the
previous status and since when it held.  The state of a workload is the summary
of its latest record (its resourceVersion, status and statusSince); in the faust
app it goes to the compacted state topic in the transaction of the record it
comes from (remembering.py), so a record and the state it implies cannot diverge
after a crash.  State is kept per raw partition and keyed by object
(cluster/uid); every event of an object is in one raw partition (the message key
is its cluster/namespace: ``records.raw_key``), so workers that split the
partitions split the state with them.  Pods, nodes and the owners pods point at
are attributing.py's; when deleted objects are forgotten is remembering.py's.

Every record carries ``previousStatus``, ``previousStatusSince`` and
``statusSince``; a transition is a record whose status differs from its
previous one (:func:`transition_of`), so the transitions stream needs no state
of its own.

Deletion ends a workload: its last record has ``deleted: true`` and status
``Deleted`` (it holds nothing from then on), and its last transition goes to
``Deleted``.

Objects that definitions' references name (a TrainJob's ClusterTrainingRuntime)
are no workloads: every worker keeps all of them (they are published with the
definitions), and a workload resolved without one waits for it
(``WaitingWorkloads``, per state store).  Such an object is keyed by its own
namespace or name, so it usually lands on another raw partition than the
workloads naming it; yet their new records must be written in their own
partition's transaction (with the state they imply).  So the worker
that processes the object's raw event also relays a copy of it, in the same
transaction, to every other raw partition (``Outputs.relays``); each
partition's owner processes the copy as an ordinary event of its partition and
resolves that partition's waiting workloads again, their records committed with
the copy's offset.  Why not learn it from the definitions topic and resolve
from there: a partition's transaction commits only with offsets of its own
events, so records made outside them would wait in an open transaction on a
quiet partition, and a timer committing them would race faust's commits.  The
relay is in the raw topic until its offset commits, so a worker killed before
the resolve finds it again; the waiting workloads survive the same way, as
their raw events in the state topic (``remembering.WAITING``), so a new
owner of the partition knows them.

A workload of a kind a cluster defines itself waits the same way for its definition: the watcher
publishes the WorkloadMap (keyed by its cluster) before the objects of its kind (keyed by their
namespace), so they usually reach another raw partition, whose worker may process them before
it learns the definition.  Such a workload is kept (``WaitingWorkloads``, under the
(cluster, group, kind) it lacks) instead of being dead-lettered unknown-kind at once; the
definition's event is relayed to every other raw partition like a referenced object, and each
partition resolves its workloads waiting for a kind it defines in that partition's transaction.
The wait is bounded: ``kind_wait`` seconds of the partition's event time (``KIND_WAIT`` for a
worker) and ``MAX_KIND_WAITING`` workloads per partition, the oldest given up first; a workload
given up is dead-lettered unknown-kind, saying it waited, with its raw bytes and the raw
partition and offset of its event.  The embedded pipeline waits for none: its one store sees
every event in feed order, so a definition published first is applied first.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from workloadmap.catalog import Catalog, DefinitionError, ObjectIndex, ResolveError, Resolver, UnknownKindError
from workloadmap.catalog import records
from workloadmap.catalog.jqlang import JqError
from workloadmap.catalog.records import DeadLetter, parse_time
from workloadmap.catalog.attributing import controller_of
from workloadmap.catalog.validating import load_definition

from .attributing import Attributing, PodStates, Rejected, is_node, is_pod, rv_newer
from .remembering import FORGET_AFTER, NODE, POD, WAITING, WORKLOAD, Forgetting, event_seconds, split_key, state_key

DEFINITION_KINDS = {("workloadmap.io/v1alpha1", "WorkloadMap")}
_NOTHING = ObjectIndex()   # the lookup of a cluster no referenced object came from yet
# How long (seconds of the partition's event time) a worker keeps a workload of an unknown kind
# waiting for its definition: the bound deleted objects are remembered by, as it too must outlast
# the lag between two partitions' workers (the definition's relay comes when its own partition's
# worker gets to it) and stay short, each waiting workload being memory and a state message.
KIND_WAIT = FORGET_AFTER
MAX_KIND_WAITING = 10_000  # workloads waiting for a definition per raw partition, at most


@dataclass
class Outputs:
    """What one message produced: (key, value bytes) pairs per topic."""

    records: list = field(default_factory=list)
    transitions: list = field(default_factory=list)  # transition_of(record) for each record that has one
    dead_letters: list = field(default_factory=list)
    definitions: list = field(default_factory=list)  # (cluster/name, WorkloadMap bytes or None when deleted)
    pods: list = field(default_factory=list)         # pod records (attributing.py)
    nodes: list = field(default_factory=list)        # node records
    state: list = field(default_factory=list)        # the state topic's messages (remembering.py), or tombstones
    relays: list = field(default_factory=list)       # referenced objects' events for every other raw partition


def definition_key(cluster: str, name: str) -> bytes:
    return f"{cluster}/{name}".encode()


def summary_of(record: dict) -> dict:
    """The state an object's latest record implies (`refs`: which referenced objects it was
    resolved with, for a definition with references)."""
    summary = {"rv": record.get("resourceVersion"), "status": record["status"],
               "since": record.get("statusSince"), "deleted": record.get("deleted", False)}
    if record.get("references"):
        summary["refs"] = references_found(record)
    return summary


def references_found(record: dict) -> str:
    """Which of a record's references were found, as "1"/"0" per reference."""
    return "".join("1" if r.get("found") else "0" for r in record.get("references") or [])


def related_ident(cluster: str, obj: dict) -> tuple:
    """A referenced object as the workloads waiting for it name it: (cluster, group, kind, namespace, name)."""
    meta = obj.get("metadata") or {}
    return (cluster, str(obj.get("apiVersion") or "").rpartition("/")[0], obj.get("kind"),
            meta.get("namespace") or None, meta.get("name"))


class WaitingWorkloads:
    """The workloads of one state store resolved without an object their references name: the latest
    raw event of each, under every object it lacks, to resolve it again when that object comes.

    A workload of a kind no definition describes waits the same way, under the (cluster, group, kind)
    of its definition (a 3-tuple: never a related_ident), with since when it waits and where its
    latest raw event is (``since``: event seconds, raw partition and offset, for its dead letter)."""

    def __init__(self):
        self.events: dict[str, dict] = {}          # state key -> the workload's latest raw event
        self.lacks: dict[str, tuple] = {}          # state key -> the related_idents it was resolved without
        self.by_object: dict[tuple, dict] = {}     # related_ident -> {state key: None}, in arrival order
        self.since: dict[str, tuple] = {}          # state key -> (since, raw partition, offset): kind waits only
        self._oldest: list[tuple[float, str]] = []  # heap of (since, state key) of the kind waits (some stale)

    def wait(self, state_key: str, event: dict, lacks: tuple) -> None:
        self.drop(state_key)
        self.events[state_key] = event
        self.lacks[state_key] = lacks
        for ident in lacks:
            self.by_object.setdefault(ident, {})[state_key] = None

    def wait_for_kind(self, state_key: str, event: dict, ident: tuple, since: tuple) -> None:
        """Keep a workload of a kind no definition describes yet (`ident`: cluster, group, kind) with
        since when it waits and where its event is (`since`: event seconds, raw partition, offset)."""
        known = self.since.get(state_key)
        self.wait(state_key, event, (ident,))
        self.since[state_key] = since
        if known is None or known[0] != since[0]:   # a newer event keeps its place in the order
            heapq.heappush(self._oldest, (since[0], state_key))

    def overdue(self, horizon: float | None, at_most: int) -> list[str]:
        """The kind waits that began at `horizon` or before (None: none by time), then the oldest
        beyond `at_most`, taken out of the order (the caller drops them)."""
        heap, due = self._oldest, []
        while heap and (len(self.since) - len(due) > at_most or (horizon is not None and heap[0][0] <= horizon)):
            since, key = heapq.heappop(heap)
            current = self.since.get(key)
            if current is not None and current[0] == since and key not in due:
                due.append(key)
        return due

    def drop(self, state_key: str) -> bool:
        """Forget a workload; whether it was waiting."""
        if self.events.pop(state_key, None) is None:
            return False
        self.since.pop(state_key, None)
        for ident in self.lacks.pop(state_key):
            keys = self.by_object.get(ident)
            if keys is not None:
                keys.pop(state_key, None)
                if not keys:
                    del self.by_object[ident]
        return True

    def waiting_for(self, ident: tuple) -> list[tuple[str, dict]]:
        """(state key, raw event) of the workloads that lack this object."""
        return [(key, self.events[key]) for key in self.by_object.get(ident, ())]

    def message(self, key: str) -> tuple[bytes, bytes]:
        """The state topic message that keeps a waiting workload (``recover`` reads it back)."""
        lacks = [list(ident[1:]) for ident in self.lacks[key]]
        value = {"workload": self.events[key], "lacks": lacks}
        if key in self.since:
            value["since"] = list(self.since[key])
        return state_key(WAITING, key), records.encode(value)

    def recover(self, state_key: str, value: dict) -> None:
        """A waiting workload's latest state topic message."""
        event = value["workload"]
        lacks = tuple((event["cluster"], *ident) for ident in value["lacks"])
        if "since" in value:
            self.wait_for_kind(state_key, event, lacks[0], tuple(value["since"]))
        else:
            self.wait(state_key, event, lacks)


class MemoryStates(dict):
    """A raw partition's state: workload summaries by cluster/uid in the dict itself, the pod, node and
    owner state (``pods``, attributing.PodStates), the waiting workloads, and the deleted objects still
    remembered (``forgetting``, remembering.py).  The faust app keeps one per raw partition, the
    embedded pipeline one in all; each change it makes goes out as a state topic message
    (``Outputs.state``) and ``recover`` reads those back."""

    def __init__(self, *args, forgetting: Forgetting | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.forgetting = Forgetting() if forgetting is None else forgetting
        self.pods = PodStates(self.deleted)
        self.waiting = WaitingWorkloads()
        self._tables = {WORKLOAD: self, POD: self.pods.pods, NODE: self.pods.nodes}

    def remember(self, key: str, record: dict, out: Outputs) -> None:
        """A workload's new record: its summary, in memory and in the state topic."""
        summary = summary_of(record)
        if summary["deleted"]:
            summary = {"rv": summary["rv"], "status": summary["status"], "since": summary["since"],
                       "deleted": True, "deletedAt": event_seconds(record["observedAt"])}
        self[key] = summary
        out.state.append((state_key(WORKLOAD, key), records.encode(summary)))
        if summary["deleted"]:
            self.deleted(WORKLOAD, key, summary["deletedAt"], out)

    # -- forgetting deleted objects (remembering.py) -------------------------------------
    def deleted(self, prefix: str, key: str, at: float, out: Outputs) -> None:
        """An object just recorded as deleted (its summary has ``deletedAt`` `at`): remembered for a
        while; the oldest deleted objects forgotten now if there are too many."""
        self.forgetting.add(at, prefix, key)
        for entry in self.forgetting.over():
            self._forget(entry, out)

    def expire(self, observed: str, out: Outputs) -> None:
        """Forget the objects deleted long enough before this event (its observedAt)."""
        if self.forgetting.may_be_due(observed):
            for entry in self.forgetting.due(event_seconds(observed)):
                self._forget(entry, out)

    def _forget(self, entry: tuple, out: Outputs) -> None:
        at, prefix, key = entry
        table = self._tables[prefix]
        summary = table.get(key)
        # a node deleted and created again under its name is no longer the deletion remembered
        if summary is not None and summary.get("deleted") and summary.get("deletedAt") == at:
            del table[key]
            out.state.append((state_key(prefix, key), None))

    # -- what a worker holds (app.py) ---------------------------------------------------
    def objects(self) -> int:
        """The entries held: one per state topic key the partition keeps (its tombstoned keys none)."""
        pods = self.pods
        return (len(self) + len(self.waiting.events) + len(pods.pods) + len(pods.nodes) + len(pods.owners)
                + len(pods.waiting))

    def uids(self) -> set[str]:
        """The uids of the objects a resolver may hold component trees of for this store: its workloads
        (deleted ones still remembered included), the workloads waiting, and the owners pods point at."""
        uids = set()
        for table in (self, self.waiting.events, self.pods.owners):
            for key in table:
                uids.add(key.rpartition("/")[2])
        return uids

    # -- recovery (app.py) ---------------------------------------------------------------
    @classmethod
    def from_state(cls, messages) -> "MemoryStates":
        """A store rebuilt from a raw partition's state topic messages, ``(key, value bytes or None)``
        in their order: the latest value of each key, none for a key whose latest is a tombstone."""
        latest: dict[bytes, bytes] = {}
        for key, value in messages:
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = value
        state = cls()
        for key, value in latest.items():
            state.recover(key.decode(), records.decode(value))
        state.pods.recovered()
        return state

    def recover(self, key: str, value: dict) -> None:
        """A state topic message (the latest of its key; tombstoned keys are never given): into memory."""
        prefix, rest = split_key(key)
        if prefix == WORKLOAD:
            self[rest] = value
        elif prefix == WAITING:
            self.waiting.recover(rest, value)
        else:
            self.pods.recover(prefix, rest, value)
        summary = self._tables[prefix].get(rest) if prefix in self._tables else None
        if summary is not None and summary.get("deleted"):
            self.forgetting.add(summary["deletedAt"], prefix, rest)


def transition_of(record: dict) -> dict | None:
    """The status transition a record makes, or None when its status did not change."""
    if record.get("previousStatus") == record["status"]:
        return None
    since = record.get("previousStatusSince")
    duration = None
    if since is not None:
        duration = max(0.0, (parse_time(record["observedAt"]) - parse_time(since)).total_seconds())
    return {
        "cluster": record["cluster"], "namespace": record["namespace"], "name": record["name"],
        "kind": record["kind"], "uid": record["uid"], "framework": record["framework"],
        "definition": record["definition"], "from": record.get("previousStatus"), "to": record["status"],
        "at": record["observedAt"], "gpus": 0 if record["deleted"] else record["total"]["gpu"],
        "previousDurationSeconds": duration, "statuses": list(record.get("statuses") or ()),
    }


def _parse(value: bytes) -> dict:
    try:
        event = records.decode(value)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise Rejected(records.MALFORMED_JSON, f"not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise Rejected(records.WRONG_TYPES, f"an event must be a JSON object, got {type(event).__name__}")
    missing = [k for k in ("cluster", "type", "object") if k not in event]
    if missing:
        raise Rejected(records.MISSING_FIELDS, f"event lacks {', '.join(missing)}")
    if not isinstance(event["cluster"], str) or not event["cluster"]:
        raise Rejected(records.WRONG_TYPES, "cluster must be a non-empty string")
    if event["type"] not in records.EVENT_TYPES:
        raise Rejected(records.WRONG_TYPES, f"type {event['type']!r} is not one of {', '.join(records.EVENT_TYPES)}")
    obj = event["object"]
    if not isinstance(obj, dict):
        raise Rejected(records.WRONG_TYPES, f"object must be a JSON object, got {type(obj).__name__}")
    meta = obj.get("metadata")
    if meta is None or "kind" not in obj or "apiVersion" not in obj:
        raise Rejected(records.MISSING_FIELDS, "object lacks apiVersion, kind or metadata")
    if not isinstance(meta, dict):
        raise Rejected(records.WRONG_TYPES, "object.metadata must be a JSON object")
    if not meta.get("uid") or not isinstance(meta["uid"], str):
        # named as far as it can be: the uid is what every later stage keys the object by
        what = "/".join(str(meta.get(k))[:120] for k in ("namespace", "name") if meta.get(k) is not None)
        what = f"{str(obj['kind'])[:60]} {event['cluster']}/{what or '(no name)'}"
        if not meta.get("uid"):
            raise Rejected(records.MISSING_FIELDS, f"{what}: object.metadata lacks uid")
        raise Rejected(records.WRONG_TYPES, f"{what}: object.metadata.uid must be a string")
    observed = event.get("observedAt")
    if not isinstance(observed, str):
        raise Rejected(records.MISSING_FIELDS if observed is None else records.WRONG_TYPES,
                       "observedAt must be an RFC 3339 timestamp")
    try:
        parse_time(observed)
    except ValueError:
        raise Rejected(records.WRONG_TYPES, f"observedAt {observed[:40]!r} is not an RFC 3339 timestamp") from None
    return event


class Processor:
    """Resolves events through per-cluster catalogs: built-ins overridden by the
    cluster's own WorkloadMap definitions (which arrive as raw events too)."""

    def __init__(self, catalog: Catalog | None = None, cache_size: int = 200_000, kind_wait: float = 0.0):
        """`kind_wait`: seconds of event time a workload of an unknown kind waits for its definition
        (a worker's: KIND_WAIT); 0, dead-lettered at once (the embedded pipeline's)."""
        # the per-generation component cache makes status-only updates cheap
        self.kind_wait = kind_wait
        self.base = catalog or Catalog.builtin(resolver=Resolver(cache_size=cache_size))
        self._cluster_catalogs: dict[str, Catalog] = {}
        # cluster -> name -> (resourceVersion, Definition, or None once deleted)
        self._cluster_definitions: dict[str, dict] = {}
        # cluster -> the objects definitions' references name (a TrainJob's runtime), newest version
        # of each: every worker keeps all of them, as they learn the definitions (see apply_related)
        self._related: dict[str, ObjectIndex] = {}
        self._related_versions: dict[str, dict] = {}
        self.attributing = Attributing(self.catalog_for)

    def forget_objects(self, uids) -> None:
        """Drop the resolver's cached trees of these objects (a raw partition this worker no longer
        owns: its objects' events go to another worker, their deletions too, so nothing else would)."""
        forget = self.base.resolver.forget
        for uid in uids:
            forget(uid)

    def cached_uids(self) -> set[str]:
        """The uids of the objects whose component trees the resolver holds (every catalog shares it)."""
        return self.base.resolver.cached_uids()

    # -- definitions from clusters ------------------------------------------
    def catalog_for(self, cluster: str) -> Catalog:
        catalog = self._cluster_catalogs.get(cluster)
        if catalog is None:
            catalog = Catalog(self.base, resolver=self.base.resolver)
            for _, definition in self._cluster_definitions.get(cluster, {}).values():
                if definition is not None:
                    catalog.add(definition)
            self._cluster_catalogs[cluster] = catalog
        return catalog

    def apply_definition(self, event: dict) -> bool:
        """Apply a cluster's WorkloadMap event (a raw event); whether it changed anything.

        The newest resourceVersion per (cluster, name) wins, deletions included (a tie too), so events
        read from several partitions in any order (see app.py) end in the same catalog.
        DefinitionError if the definition is invalid.
        """
        if self.is_related(event):   # a referenced object, shared through the same topic
            return self.apply_related(event)
        cluster, obj = event["cluster"], event["object"]
        meta = obj["metadata"]
        name = meta.get("name") or meta["uid"]
        rv = meta.get("resourceVersion")
        rv = None if rv is None else str(rv)
        entries = self._cluster_definitions.setdefault(cluster, {})
        current = entries.get(name)
        deleted = event["type"] == "DELETED"
        if (current is not None and rv is not None and current[0] is not None
                and not (rv_newer(rv, current[0]) or (deleted and rv == current[0]))):
            return False    # older than what is applied (a deletion wins a tie)
        definition = None
        if not deleted:
            definition = load_definition(obj, "cluster", f"cluster:{cluster}/{name}")
        entries[name] = (rv, definition)
        self._cluster_catalogs.pop(cluster, None)
        return True

    def is_related(self, event: dict) -> bool:
        """Whether the event's object is one that definitions' references name (not a workload)."""
        obj = event["object"]
        return self.catalog_for(event["cluster"]).is_referenced_kind(str(obj.get("apiVersion") or ""),
                                                                     str(obj.get("kind") or ""))

    def apply_related(self, event: dict) -> bool:
        """Keep (or forget, when deleted) an object a reference names; newest resourceVersion wins,
        as for definitions, so events from several partitions in any order end the same."""
        cluster, obj = event["cluster"], event["object"]
        meta = obj.get("metadata") or {}
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        ident = (group, obj.get("kind"), meta.get("namespace"), meta.get("name"))
        rv = meta.get("resourceVersion")
        rv = None if rv is None else str(rv)
        versions = self._related_versions.setdefault(cluster, {})
        current = versions.get(ident)
        deleted = event["type"] == "DELETED"
        if current is not None and rv is not None and not (rv_newer(rv, current) or (deleted and rv == current)):
            return False
        versions[ident] = rv
        index = self._related.setdefault(cluster, ObjectIndex())
        if deleted:
            index.remove(obj)
        else:
            index.add(obj)
        return True

    def _related_event(self, key, event: dict, out: Outputs, state):
        """A referenced object: kept for the workloads that name it, published with the cluster's
        definitions so that every worker has it, and relayed to the other raw partitions so that the
        workloads waiting for it there are resolved again in their partition's transaction (see the
        module docstring); a relayed copy does only the latter."""
        meta = event["object"].get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise Rejected(records.MISSING_FIELDS, "a referenced object needs metadata.name")
        self.apply_related(event)
        deleted = event["type"] == "DELETED"
        if event.get("relayed") is not True:
            ident = "/".join((str(event["object"].get("kind")), str(meta.get("namespace") or ""), meta["name"]))
            out.definitions.append((definition_key(event["cluster"], f"related:{ident}"), records.encode(event)))
            if not deleted:   # a deletion resolves nothing again: the definitions topic tells the workers
                out.relays.append((key, records.encode({**event, "relayed": True})))
        if not deleted:
            # whether or not this version was new here: the worker may have learnt it from the
            # definitions topic before its waiting workloads' partition got this event
            self._resolve_waiting(event, state, out)

    def _resolve_waiting(self, event: dict, state, out: Outputs) -> None:
        """The store's workloads resolved without this object, resolved again now (same resourceVersion,
        a new record: the warehouse tells it apart by what it was resolved with, checking.version_key);
        one that fails to resolve with it is dead-lettered, the others go on."""
        for state_key, workload_event in state.waiting.waiting_for(related_ident(event["cluster"], event["object"])):
            try:
                self._workload_event({**workload_event, "observedAt": event["observedAt"]}, state, out, again=True)
            except Rejected as exc:
                value = records.encode(workload_event)
                detail = f"resolved again with {event['object'].get('kind')} {event['object']['metadata']['name']}: "
                letter = DeadLetter("processor", exc.reason, (detail + exc.detail)[:2000], value,
                                    key=records.raw_key(workload_event["cluster"], workload_event["object"]))
                out.dead_letters.append((letter.key, records.encode(letter.to_dict())))

    def _note_waiting(self, event: dict, key: str, record: dict, state, out: Outputs) -> None:
        """Keep (or drop) a workload's latest event under each referenced object it was resolved without,
        in the store and in the state topic (so that a restarted or new owner of the partition has it)."""
        lacks = () if record.get("deleted") else tuple(
            (event["cluster"], ref["apiVersion"].rpartition("/")[0], ref["kind"], ref["namespace"] or None,
             ref["objectName"])
            for ref in record.get("references") or () if not ref["found"] and ref["kind"] is not None)
        waiting = state.waiting
        if lacks:
            waiting.wait(key, event, lacks)
            out.state.append(waiting.message(key))
        elif waiting.drop(key):
            out.state.append((state_key(WAITING, key), None))

    def _definition_event(self, key, event: dict, state, out: Outputs):
        """A cluster's WorkloadMap: applied, published for the other workers (and for this one after a
        restart, see app.py) and, when workloads may wait for it, relayed to the other raw partitions
        and the workloads waiting for its kind resolved (see the module docstring); a relayed copy
        does only the latter."""
        try:
            self.apply_definition(event)
        except DefinitionError as exc:
            raise Rejected(records.INVALID_DEFINITION, str(exc)) from None
        cluster, meta = event["cluster"], event["object"]["metadata"]
        name = meta.get("name") or meta["uid"]
        if event.get("relayed") is not True:
            out.definitions.append((definition_key(cluster, name), records.encode(event)))
            if self.kind_wait and event["type"] != "DELETED":
                out.relays.append((key, records.encode({**event, "relayed": True})))
        # the definition now applied under its name (this event's, or a newer one learnt before it)
        definition = self._cluster_definitions.get(cluster, {}).get(name, (None, None))[1]
        if definition is None or not state.waiting.since:
            return
        for wait_key, workload_event in state.waiting.waiting_for((cluster, definition.gvk.group, definition.gvk.kind)):
            # its own observedAt: it was in that state then; the definition only says what it is
            try:
                self._workload_event(workload_event, state, out)
            except Rejected as exc:
                self._give_up(wait_key, state, out, exc.reason, f"resolved with the definition {name}: {exc.detail}")

    def _wait_for_kind(self, event: dict, state, out: Outputs, partition, offset) -> None:
        """A workload of a kind no definition describes: kept until its definition comes (or its wait
        ends); a newer event of it replaces the waiting one."""
        obj = event["object"]
        wait_key = f"{event['cluster']}/{obj['metadata']['uid']}"
        waiting = state.waiting
        waited = waiting.events.get(wait_key)
        if waited is not None and not rv_newer(obj["metadata"].get("resourceVersion"),
                                               waited["object"]["metadata"].get("resourceVersion")):
            return   # a re-delivery, or older than the event waiting
        known = waiting.since.get(wait_key)
        # a newer event waits since the first did: the bound is on the wait, not on each event; the
        # event it replaces gets nothing (the warehouse keeps states, the newer one is its state)
        since = (known[0] if known else event_seconds(event["observedAt"]), partition, offset)
        ident = (event["cluster"], str(obj.get("apiVersion") or "").rpartition("/")[0], obj.get("kind"))
        waiting.wait_for_kind(wait_key, event, ident, since)
        out.state.append(waiting.message(wait_key))
        for over in waiting.overdue(None, MAX_KIND_WAITING):
            self._give_up(over, state, out, records.UNKNOWN_KIND,
                          f"{MAX_KIND_WAITING} workloads of this partition waited for a definition of their kind; "
                          f"the oldest given up")

    def _give_up_waiting(self, observed: str, state, out: Outputs) -> None:
        """Dead-letter the workloads that waited `kind_wait` seconds of event time for their kind."""
        for wait_key in state.waiting.overdue(event_seconds(observed) - self.kind_wait, MAX_KIND_WAITING):
            self._give_up(wait_key, state, out, records.UNKNOWN_KIND,
                          f"waited {self.kind_wait:g} s of event time for a definition of its kind")

    def _give_up(self, wait_key: str, state, out: Outputs, reason: str, why: str) -> None:
        """A workload waiting for its kind's definition, dead-lettered (its raw event's bytes, partition
        and offset) and forgotten."""
        waiting = state.waiting
        event = waiting.events[wait_key]
        _, partition, offset = waiting.since[wait_key]
        detail = why
        if reason == records.UNKNOWN_KIND:
            try:
                self.catalog_for(event["cluster"]).definition_for(event["object"])
            except UnknownKindError as exc:
                detail = f"{exc}; {why}"
        letter = DeadLetter("processor", reason, detail[:2000], records.encode(event),
                            key=records.raw_key(event["cluster"], event["object"]), topic=records.RAW_TOPIC,
                            partition=partition, offset=offset)
        out.dead_letters.append((letter.key, records.encode(letter.to_dict())))
        waiting.drop(wait_key)
        out.state.append((state_key(WAITING, wait_key), None))

    # -- events -----------------------------------------------------------------
    def process(self, key: bytes | None, value: bytes, state, *, topic: str = records.RAW_TOPIC,
                partition: int | None = None, offset: int | None = None) -> Outputs:
        """Outputs of one raw message.

        `state` gives an object's summary by key (`get`) and `remember`s each new
        record (MemoryStates: the worker keeps one per raw partition).
        """
        out = Outputs()
        self._process_into(out, key, value, state, topic, partition, offset)
        return out

    def process_batch(self, messages, state_of) -> dict[int, Outputs]:
        """Outputs of a batch of raw messages, in one pass: one Outputs per raw partition.

        `messages` are ``(key, value, topic, partition, offset)`` tuples;
        `state_of(partition)` is the state store of that partition (see
        ``process``).  Each message is processed against the state the
        messages before it left, so a batch gives exactly the outputs of its
        messages processed one by one, and within a partition in the same
        order (an object's records stay in order; the worker sends each
        partition's outputs to the same partition number).
        """
        by_partition: dict[int, Outputs] = {}
        current = None   # (partition, Outputs, state) of the run of messages in hand
        process_into = self._process_into
        for key, value, topic, partition, offset in messages:
            if current is None or current[0] != partition:
                out = by_partition.get(partition)
                if out is None:
                    out = by_partition[partition] = Outputs()
                current = (partition, out, state_of(partition))
            process_into(current[1], key, value, current[2], topic, partition, offset)
        return by_partition

    def _process_into(self, out: Outputs, key, value, state, topic, partition, offset) -> None:
        event = None
        try:
            event = _parse(value)
            state.expire(event["observedAt"], out)
            if state.waiting.since:
                self._give_up_waiting(event["observedAt"], state, out)
            obj = event["object"]
            if (obj.get("apiVersion"), obj.get("kind")) in DEFINITION_KINDS:
                self._definition_event(key, event, state, out)
                return
            if self.is_related(event):
                self._related_event(key, event, out, state)
                return
            if event.get("relayed") is True:
                raise Rejected(records.WRONG_TYPES, f"a relayed event is for an object definitions' references "
                                                    f"name; {str(obj.get('kind'))[:60]} is not one")
            if is_node(obj):
                self.attributing.node_event(event, state.pods, out)
                return
            if is_pod(obj):
                orphan = self.attributing.pod_event(event, state.pods, out)
            else:
                orphan = controller_of(obj) is None
                self.attributing.owner_event(event, state.pods, out)
                if orphan and not self.attributing.is_workload(event["cluster"], obj):
                    return   # an intermediate owner kind without a definition (a ReplicaSet of its own)
            if orphan:
                self._workload_event(event, state, out)
            else:
                self._part_of_another(event, state, out)
        except Rejected as exc:
            if exc.reason == records.UNKNOWN_KIND and self.kind_wait and event and event["type"] != "DELETED":
                self._wait_for_kind(event, state, out, partition, offset)
                return
            letter = DeadLetter("processor", exc.reason, exc.detail[:2000], value, key=key, topic=topic,
                                partition=partition, offset=offset)
            out.dead_letters.append((key, records.encode(letter.to_dict())))

    def _part_of_another(self, event: dict, state, out: Outputs) -> None:
        """An object a controller owns is part of its owner's workload: no record of its own, and a
        workload of its own until now (a Job a JobSet adopted) ends there."""
        meta = event["object"]["metadata"]
        previous = state.get(f"{event['cluster']}/{meta['uid']}")
        if previous is not None and not previous.get("deleted"):
            self._workload_event({**event, "type": "DELETED"}, state, out)

    def _workload_event(self, event: dict, state, out: Outputs, again: bool = False):
        """`again`: the same version resolved again, once an object its references name arrived."""
        cluster, obj = event["cluster"], event["object"]
        meta = obj["metadata"]
        uid = meta["uid"]
        key = records.record_key(cluster, uid)
        state_key = key.decode()
        if event["type"] == "DELETED" and state_key in state.waiting.since:   # its wait for its kind ends
            state.waiting.drop(state_key)
            out.state.append(((WAITING + state_key).encode(), None))
        previous = state.get(state_key)
        rv = meta.get("resourceVersion")
        rv = None if rv is None else str(rv)
        if previous is not None and (previous.get("deleted") or not rv_newer(rv, previous.get("rv"))):
            if not (again and not previous.get("deleted") and rv == previous.get("rv")):
                return  # a re-delivery, or older than what was already processed
        if previous is None and event["type"] == "DELETED":
            return  # forgotten, or never seen alive: nothing of it to end (remembering.py)
        try:
            resolved = self.catalog_for(cluster).resolve(obj, self._related.get(cluster) or _NOTHING)
        except UnknownKindError as exc:
            raise Rejected(records.UNKNOWN_KIND, str(exc)) from None
        except ResolveError as exc:
            reason = records.JQ_ERROR if isinstance(exc.__context__, JqError) else records.RESOLVE_ERROR
            raise Rejected(reason, str(exc)) from None
        record = resolved.to_dict()
        if again and previous is not None and previous.get("refs") == references_found(record):
            return  # resolved with the same objects as its record: nothing new
        deleted = event["type"] == "DELETED"
        if deleted:
            record["status"] = records.DELETED
            record["statuses"] = [records.DELETED]
        at = event["observedAt"]
        old_status = previous["status"] if previous else None
        old_since = previous["since"] if previous else None
        record.update(cluster=cluster, observedAt=at, eventType=event["type"], deleted=deleted,
                      previousStatus=old_status, previousStatusSince=old_since,
                      statusSince=old_since if old_status == record["status"] else at)
        value = records.encode(record)
        out.records.append((key, value))
        transition = transition_of(record)
        if transition is not None:
            out.transitions.append((key, records.encode(transition)))
        state.remember(state_key, record, out)
        if deleted:   # no event of it will need its component trees
            self.catalog_for(cluster).resolver.forget(uid)
        if "references" in record or state_key in state.waiting.events:
            self._note_waiting(event, state_key, record, state, out)
