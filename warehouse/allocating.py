"""What the pods hold and what the nodes have: pod and node records into intervals, in the writer's transaction.

Why intervals, as for the workloads: a pod holds its effective request from the first record that
binds it to a node until the first that ends it, and a node has its allocatable resources until
they change or it goes away, so GPU-hours allocated, allocatable and idle are exact sums over
intervals instead of samples.  The semantics (README: warehouse):

- a pod *holds* its request from the first record with state ``Bound`` until the first record whose
  state is ``Terminated`` or that is ``deleted``; it *pends* while its state is ``Pending``; a pod
  that ended never comes back (Succeeded and Failed are terminal, a deletion final), so any later
  record of it is dropped;
- a new interval opens when the state, the node, the request (GPUs by resource, CPU, memory) or the
  attribution (workload, component, instance, replica) changes; except that a pod first seen
  without its workload (an owner in its chain had not arrived) takes the workload into its open
  interval when it comes, instead of opening another;
- a node *has* its allocatable resources from its first record until it is deleted or a kept
  field changes (allocatable, capacity, unschedulable, ready, the grouping labels); a cordoned
  node still counts as allocatable (reported apart as unschedulable).

Flat cost, as for the workloads (writing.py): the closed intervals go to ``pod_history`` and
``node_history``, which a batch never reads; the open ones live in ``pod_current`` and
``node_current``, keyed, fetched with a join on the batch's keys (the live pods and the nodes: a set
that does not grow with the history).  The pods that ended are in ``ended_pods`` (64-bit keys, looked
up through a Bloom filter and the ART index, as ``deleted_workloads``).  A deleted node keeps its row
in ``node_current`` (its uid, when): nodes are few, and a late record of it must not bring it back.

Order: records of one pod (or node) come in order (their Kafka key is the pod's, or the node's, so
one partition carries them); one observed before the latest one kept is late and dropped, one equal
to it (same resourceVersion) is a duplicate.
"""

from __future__ import annotations

import hashlib
import operator

import pyarrow as pa

from workloadmap.catalog import records
from workloadmap.catalog.records import EVENT_TYPES

from .checking import EPOCH, MICROSECOND, MalformedRecord, timestamp_micros
from .deletions import DeletedWorkloads
from .scanning import arrow_over, execute_over
from .schema import NODE_COLUMNS, POD_COLUMNS

POD_STATES = ("Pending", "Bound", "Terminated")
TERMINATED = "Terminated"
BOUND = "Bound"
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
NODE_LABELS = ("gpuProduct", "instanceType", "nodePool", "zone")
_INT64_MAX = 2**63 - 1
ENDED_BITS_PER_KEY = 32


def _fail(what: str, field: str, reason: str, missing: bool = False):
    raise MalformedRecord(records.MISSING_FIELDS if missing else records.WRONG_TYPES, f"{what}: {field} {reason}")


def _string(d: dict, field: str, what: str, *, nullable: bool = True) -> str | None:
    v = d.get(field)
    if v is None and nullable:
        return None
    if type(v) is not str or not v:
        _fail(what, field, "must be a non-empty string" + (" or null" if nullable else ""))
    return v


def _amount(d: dict, field: str, what: str) -> float:
    v = d.get(field)
    if type(v) not in (int, float) or not v >= 0 or v > _INT64_MAX:  # (not v >= 0: NaN too)
        _fail(what, field, f"must be a non-negative number, not {str(v)[:20]!r}")
    return v


def _resources(d: dict, where: str, what: str) -> tuple[float, float, int, list]:
    """GPUs, CPU cores, memory bytes and GPUs by resource (sorted pairs) of a pod or a node's amounts."""
    gpus, cpu, memory = (_amount(d, f, what) for f in ("gpu", "cpu", "memory"))
    gres = d.get("gpuResources") or {}
    if type(gres) is not dict:
        _fail(what, f"{where}gpuResources", "must map GPU resource names to numbers")
    pairs = []
    for k, v in sorted(gres.items()):
        if type(v) not in (int, float) or not v >= 0:
            _fail(what, f"{where}gpuResources[{k!r}]", "must be a non-negative number")
        pairs.append((k, float(v)))
    return float(gpus), float(cpu), int(memory), pairs


def _common(record, kind: str) -> tuple[str, str, int, bool]:
    """cluster, what (for errors), observedAt (us), deleted of a pod or node record."""
    if type(record) is not dict:
        raise MalformedRecord(records.WRONG_TYPES, f"a {kind} record is a JSON object, not {type(record).__name__}")
    fields = ("cluster", "name", "uid", "observedAt", "eventType", "deleted") + (
        ("namespace", "state", "gpu", "cpu", "memory") if kind == "pod" else ("allocatable", "capacity"))
    missing = [f for f in fields if f not in record]
    what = f"{kind} {record.get('cluster')}/{record.get('namespace') + '/' if kind == 'pod' and isinstance(record.get('namespace'), str) else ''}{record.get('name')}"
    if missing:
        raise MalformedRecord(records.MISSING_FIELDS, f"{what} lacks {', '.join(missing)}")
    cluster = _string(record, "cluster", what, nullable=False)
    if record["eventType"] not in EVENT_TYPES:
        _fail(what, "eventType", f"{str(record['eventType'])[:20]!r} is not one of {', '.join(EVENT_TYPES)}")
    if type(record["deleted"]) is not bool:
        _fail(what, "deleted", "must be a boolean")
    try:
        observed = timestamp_micros(record["observedAt"], "observedAt")
    except MalformedRecord as exc:
        _fail(what, "observedAt", exc.detail.partition(" ")[2])
    return cluster, what, observed, record["deleted"]


def _version_key(record: dict, what: str) -> str:
    rv = record.get("resourceVersion")
    if rv is None:
        return "@" + record["observedAt"]
    if type(rv) is not str:
        _fail(what, "resourceVersion", "must be a string")
    return rv


# Row indexes of check_pod's tuples (the interval's identity first, in pod_history's column order).
_P_STATE, _P_OBS, _P_VK, _P_DEL, _P_GPUS = 15, 16, 17, 18, 19
_P_WL_UID, _P_ATTRIBUTION, _P_NODE = 8, slice(5, 14), 14


def check_pod(record) -> tuple:
    """Validate one pod record (catalog/schemas/pod-record.schema.json); its row, or MalformedRecord
    naming the pod, the field and the reason."""
    cluster, what, observed, deleted = _common(record, "pod")
    uid = _string(record, "uid", what, nullable=False)
    namespace = _string(record, "namespace", what, nullable=False)
    name = _string(record, "name", what, nullable=False)
    state = record["state"]
    if state not in POD_STATES:
        _fail(what, "state", f"{str(state)[:20]!r} is not one of {', '.join(POD_STATES)}")
    phase = record.get("phase")
    if phase is not None and phase not in PHASES:
        _fail(what, "phase", f"{str(phase)[:20]!r} is not one of {', '.join(PHASES)}")
    node = _string(record, "nodeName", what)
    if state == BOUND and node is None:
        _fail(what, "nodeName", "must name the node of a Bound pod")
    workload = record.get("workload")
    if workload is None:
        owner = (None, None, None, None)
    elif type(workload) is not dict:
        _fail(what, "workload", "must be an object {apiVersion, kind, name, uid} or null")
    else:
        owner = (_string(workload, "apiVersion", what), _string(workload, "kind", what, nullable=False),
                 _string(workload, "name", what, nullable=False), _string(workload, "uid", what, nullable=False))
    created = record.get("creationTimestamp")
    if created is not None:
        try:
            created = timestamp_micros(created, "creationTimestamp")
        except MalformedRecord as exc:
            _fail(what, "creationTimestamp", exc.detail.partition(" ")[2])
    gpus, cpu, memory, gres = _resources(record, "", what)
    return (cluster, uid, namespace, name, created, *owner,
            _string(record, "framework", what), _string(record, "definition", what),
            _string(record, "component", what), _string(record, "instance", what), _string(record, "replica", what),
            node, TERMINATED if deleted else state, observed, _version_key(record, what), deleted,
            gpus, cpu, memory, gres)


# Row indexes of check_node's tuples, and of node_current's rows (_NODE_CURRENT_COLUMNS).
_N_UID, _N_OBS, _N_VK, _N_DEL, _N_KEPT = 2, 3, 4, 5, slice(6, 20)
_NC_FROM, _NC_POOL, _NC_DELETED = 3, 16, 20


def check_node(record) -> tuple:
    """Validate one node record (catalog/schemas/node-record.schema.json); its row, or MalformedRecord."""
    cluster, what, observed, deleted = _common(record, "node")
    name = _string(record, "name", what, nullable=False)
    uid = _string(record, "uid", what, nullable=False)
    amounts = []
    for field in ("allocatable", "capacity"):
        value = record[field]
        if type(value) is not dict:
            _fail(what, field, "must be an object {gpu, gpuResources, cpu, memory}")
        missing = [f for f in ("gpu", "cpu", "memory") if f not in value]
        if missing:
            _fail(what, field, f"lacks {', '.join(missing)}", missing=True)
        gpus, cpu, memory, gres = _resources(value, field + ".", what)
        amounts += [gpus, gres, cpu, memory]
    unschedulable = record.get("unschedulable", False)
    if type(unschedulable) is not bool:
        _fail(what, "unschedulable", "must be a boolean")
    ready = record.get("ready")
    if ready is not None and type(ready) is not bool:
        _fail(what, "ready", "must be a boolean or null")
    labels = record.get("labels") or {}
    if type(labels) is not dict:
        _fail(what, "labels", "must be an object")
    return (cluster, name, uid, observed, _version_key(record, what), deleted, *amounts, unschedulable, ready,
            *(_string(labels, f, what) for f in NODE_LABELS))


# --------------------------------------------------------------------------- the writer's part


def pod_key(cluster: str, uid: str) -> int:
    """A pod's key in ended_pods: DuckDB's md5_number_lower(cluster || '/' || uid), as workload_key."""
    return int.from_bytes(hashlib.md5(f"{cluster}/{uid}".encode()).digest()[8:], "little")


_TS = pa.timestamp("us", tz="UTC")
_GRES = pa.map_(pa.string(), pa.float64())
_POD_TYPES = {"created": _TS, "valid_from": _TS, "valid_to": _TS, "observed_at": _TS, "gpus": pa.float64(),
              "cpu": pa.float64(), "memory": pa.int64(), "gpu_resources": _GRES}
_NODE_TYPES = {"valid_from": _TS, "valid_to": _TS, "observed_at": _TS, "gpus": pa.float64(), "cpu": pa.float64(),
               "memory": pa.int64(), "gpu_resources": _GRES, "capacity_gpus": pa.float64(),
               "capacity_gpu_resources": _GRES, "capacity_cpu": pa.float64(), "capacity_memory": pa.int64(),
               "unschedulable": pa.bool_(), "ready": pa.bool_(), "deleted": pa.bool_()}


def _schema(columns: str, types: dict) -> pa.Schema:
    return pa.schema([(c, types.get(c, pa.string())) for c in columns.split(", ")])


_POD_SCHEMA = _schema(POD_COLUMNS, _POD_TYPES)
_POD_CURRENT_SCHEMA = _schema(POD_COLUMNS.replace("valid_to, ", "") + ", observed_at, version_key", _POD_TYPES)
_NODE_SCHEMA = _schema(NODE_COLUMNS, _NODE_TYPES)
_NODE_CURRENT_SCHEMA = _schema(NODE_COLUMNS.replace("valid_to, ", "") + ", observed_at, version_key, deleted",
                               _NODE_TYPES)
_KEYS = pa.schema([("cluster", pa.string()), ("key", pa.string())])


def _table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    cols = list(zip(*rows)) if rows else [()] * len(schema)
    return pa.table({f.name: pa.array(c, type=f.type) for f, c in zip(schema, cols)})


def _pairs(value) -> list:
    """A GPU map as DuckDB hands it back (pairs or a dict) as check_pod's sorted pairs."""
    return sorted(value.items()) if isinstance(value, dict) else sorted((k, v) for k, v in value)


def _current(conn, table: str, key: str, columns: str, keys=None) -> dict[tuple, list]:
    """The batch's rows of a keyed *_current table (a join on the batch's keys), by (cluster, key); all
    its rows without `keys`."""
    selected = ", ".join(f"epoch_us({c})" if c in ("created", "valid_from", "observed_at") else c
                         for c in columns.split(", "))
    if keys is None:
        result = conn.sql(f"SELECT {selected} FROM {table}").to_arrow_table()
    else:
        result = arrow_over(conn, f"SELECT {selected} FROM {table} c WHERE EXISTS "
                                  f"(SELECT 1 FROM wm_rows k WHERE k.cluster = c.cluster AND k.key = c.{key})",
                            _table(sorted(keys), _KEYS))
    out = {}
    for row in zip(*[c.to_pylist() for c in result.columns]):
        out[(row[0], row[1])] = list(row)
    return out


def _insert(conn, table: str, rows: list[tuple], schema: pa.Schema, verb: str = "INSERT") -> None:
    if rows:
        execute_over(conn, f"{verb} INTO {table} BY NAME SELECT * FROM wm_rows", _table(rows, schema)).fetchall()


def _delete(conn, table: str, key: str, keys) -> None:
    if keys:
        execute_over(conn, f"DELETE FROM {table} c WHERE EXISTS "
                           f"(SELECT 1 FROM wm_rows k WHERE k.cluster = c.cluster AND k.key = c.{key})",
                     _table(sorted(keys), _KEYS)).fetchall()


_POD_CURRENT_COLUMNS = POD_COLUMNS.replace("valid_to, ", "") + ", observed_at, version_key"
_NODE_CURRENT_COLUMNS = NODE_COLUMNS.replace("valid_to, ", "") + ", observed_at, version_key, deleted"
_OBS_POS = operator.itemgetter(_P_OBS)

# The closed Bound intervals' GPU-seconds per UTC day, added to daily_allocation (the idle report reads
# it for whole days instead of every closed interval: queries/idle_cost.sql), split by the intervals of
# their nodes the writer has (the batch's node records are applied first: writing.py), in their pools.
# The split is computed in Python (``daily_allocation``), not with schema.DAILY_ALLOCATION_OF (which the
# migration runs over a whole history): on a batch's hundred closed intervals that statement's planning
# and aggregate tables cost several times the rest of the batch's pods.  Of the node intervals it needs,
# the writer's copy of node_current (``Allocations``) has the open ones, and node_history is read only
# for a node whose open interval began after a closed pod interval did, or that was deleted.
# The sums are added to the rows the table has with an UPDATE, and the others inserted: the writer
# knows the table's keys (a few rows a day), and an upsert's conflict handling cost more than both.
_NODE_HISTORY_OF = """
SELECT cluster, name, epoch_us(valid_from), epoch_us(valid_to), coalesce(node_pool, '') FROM node_history n
WHERE valid_to > $since AND EXISTS (SELECT 1 FROM wm_rows k WHERE k.cluster = n.cluster AND k.key = n.name)
"""
_ADD_DAILY = """
UPDATE daily_allocation d SET gpu_seconds = d.gpu_seconds + b.gpu_seconds FROM wm_rows b
WHERE d.day = b.day AND d.cluster = b.cluster AND d.node_pool = b.node_pool AND d.known_node = b.known_node
  AND d.resource = b.resource
"""
_DAILY_KEYS = "SELECT day - DATE '1970-01-01', cluster, node_pool, known_node, resource FROM daily_allocation"
_DAILY_SCHEMA = pa.schema([("day", pa.date32()), ("cluster", pa.string()), ("node_pool", pa.string()),
                           ("known_node", pa.bool_()), ("resource", pa.string()), ("gpu_seconds", pa.float64())])
DAY_US = 86_400_000_000
_H_FROM, _H_TO, _H_GPUS, _H_GRES = 16, 17, 18, 21  # of a closed interval (pod_history's columns)


def daily_allocation(closed: list[tuple], node_intervals: dict[tuple, list]) -> list[tuple]:
    """daily_allocation's rows (day as days since 1970-01-01, cluster, node_pool, known_node, resource,
    gpu_seconds) of closed pod intervals (pod_history's columns, instants in microseconds), as
    schema.DAILY_ALLOCATION_OF computes them: each Bound interval with GPUs split by the intervals of its
    node (`node_intervals`: (cluster, node) -> [(valid_from, valid_to or None, pool)], pool '' without one)
    in their pools, its time on no known node apart (known_node false, pool ''), both by UTC day."""
    sums: dict[tuple, float] = {}

    def add(cluster, pool, known, f, t, gres, sign):
        day = f // DAY_US
        while day * DAY_US < t:
            us = sign * (min(t, (day + 1) * DAY_US) - max(f, day * DAY_US))
            for resource, count in gres:
                key = (day, cluster, pool, known, resource)
                sums[key] = sums.get(key, 0.0) + us * count
            day += 1

    for row in closed:
        f, t, gres = row[_H_FROM], row[_H_TO], row[_H_GRES]
        if row[_P_STATE] != BOUND or not row[_H_GPUS] > 0 or not t > f:
            continue
        cluster = row[0]
        add(cluster, "", False, f, t, gres, 1)
        for node_from, node_to, pool in node_intervals.get((cluster, row[_P_NODE]), ()):
            lo, hi = max(f, node_from), t if node_to is None else min(t, node_to)
            if hi > lo:
                add(cluster, pool, True, lo, hi, gres, 1)
                add(cluster, "", False, lo, hi, gres, -1)
    # (an unknown-node sum that cancels out, every part of the intervals on a known node, is no row)
    return [(*key, us / 1e6) for key, us in sums.items() if key[3] or abs(us / 1e6) > 1e-6]


class Allocations:
    """The writer's bookkeeping of pod and node intervals (one per Warehouse; batches under its lock)."""

    def __init__(self, conn):
        # 32 bits a key (~0.07% false positives): a key the filter cannot rule out costs a scan of
        # ended_pods (it has no index: an ART of every pod that ever ended made each batch's inserts
        # grow with the history), so the filter must rule out nearly all.
        self._ended = DeletedWorkloads(conn, table="ended_pods", bits_per_key=ENDED_BITS_PER_KEY)
        # node_current, whole (nodes are few: one row per node ever seen), kept in step with the table by
        # apply_nodes, so that a batch reads neither its nodes' rows nor, for the daily split of the pod
        # intervals it closes, the open node intervals (see _keep_daily).  Changed inside the batch's
        # transaction: after_rollback reads it again.
        self._nodes = _current(conn, "node_current", "name", _NODE_CURRENT_COLUMNS)
        # daily_allocation's keys (see _ADD_DAILY); those a batch inserts join them when it commits
        self._daily_keys = set(conn.execute(_DAILY_KEYS).fetchall())
        self._daily_added: list[tuple] = []

    # ------------------------------------------------------------------ pods

    def apply_pods(self, conn, rows: list[tuple]) -> tuple[int, int]:
        """Write a batch of check_pod rows inside the caller's transaction; (records kept, dropped)."""
        by_pod: dict[tuple, list] = {}
        for r in rows:
            by_pod.setdefault((r[0], r[1]), []).append(r)
        current = _current(conn, "pod_current", "uid", _POD_CURRENT_COLUMNS, by_pod)
        # Only a pod's non-terminal record could reopen it; a terminal one of a pod that ended already
        # (its deletion after it succeeded: the usual case) changes nothing, so is not looked up.
        others = {pod_key(*k): k for k, pod_rows in by_pod.items()
                  if k not in current and any(r[_P_STATE] != TERMINATED for r in pod_rows)}
        maybe = [k for k in others if self._ended.may_contain(k)]
        ended = set()
        if maybe:
            ended = {others[k] for (k,) in conn.execute(
                f"SELECT key FROM ended_pods WHERE key IN ({', '.join(map(str, maybe))})").fetchall()}
        closed, opened, ended_now, kept = [], [], [], 0
        for key, pod_rows in by_pod.items():
            if key in ended:
                continue
            pod_rows.sort(key=_OBS_POS)  # stable: the batch's order among equal instants
            c = current.get(key)
            # the open interval: identity (cluster .. state), valid_from, demand; then observed_at, version_key
            open_ = None if c is None else [*c[:17], c[17], c[18], c[19], _pairs(c[20])]
            seen = None if c is None else (c[21], c[22])
            done, changed, held = False, False, False
            for r in pod_rows:
                if done or (seen is not None and (r[_P_OBS] < seen[0] or (
                        r[_P_VK] == seen[1] and not r[_P_DEL]
                        and not (open_ is not None and open_[_P_WL_UID] is None and r[_P_WL_UID] is not None)))):
                    # after the pod ended, late, or the latest record again; except the same version
                    # bringing the workload of a pod seen before its owner (the processors attribute it
                    # when the owner comes: the pod itself did not change)
                    continue
                kept += 1
                changed = True
                seen = (r[_P_OBS], r[_P_VK])
                if r[_P_STATE] == TERMINATED:
                    if open_ is not None:
                        closed.append((*open_[:17], r[_P_OBS], *open_[17:]))
                    open_, done = None, True
                    continue
                new = [*r[:_P_STATE + 1], r[_P_OBS], *r[_P_GPUS:]]
                held = True
                if open_ is None:
                    open_ = new
                elif new[_P_ATTRIBUTION] != open_[_P_ATTRIBUTION] or new[_P_NODE:_P_STATE + 1] != open_[_P_NODE:_P_STATE + 1] \
                        or new[17:] != open_[17:]:
                    if (open_[_P_WL_UID] is None and new[_P_WL_UID] is not None
                            and new[_P_NODE:_P_STATE + 1] == open_[_P_NODE:_P_STATE + 1] and new[17:] == open_[17:]):
                        open_[_P_ATTRIBUTION] = new[_P_ATTRIBUTION]  # the workload of a pod seen before its owner
                    else:
                        closed.append((*open_[:17], r[_P_OBS], *open_[17:]))
                        open_ = new
            if done and (c is not None or held):  # a pod first seen ended never held anything: no key
                ended_now.append(key)
            if changed and (c is not None or open_ is not None):
                opened.append((key, None if open_ is None else (*open_, *seen)))
        if closed:
            _insert(conn, "pod_history", closed, _POD_SCHEMA)
            self._keep_daily(conn, closed)
        _delete(conn, "pod_current", "uid", [k for k, _ in opened if k in current])
        _insert(conn, "pod_current", [row for _, row in opened if row is not None], _POD_CURRENT_SCHEMA)
        if ended_now:
            keys = [pod_key(*k) for k in ended_now]
            for k in keys:
                self._ended.add(k)
            execute_over(conn, "INSERT INTO ended_pods SELECT key FROM wm_rows",
                         pa.table({"key": pa.array(keys, type=pa.uint64())})).fetchall()
        return kept, len(rows) - kept

    def _keep_daily(self, conn, closed: list[tuple]) -> None:
        """Add the closed intervals' GPU-seconds to daily_allocation (see _ADD_DAILY)."""
        bound = [r for r in closed if r[_P_STATE] == BOUND and r[_H_GPUS] > 0 and r[_H_TO] > r[_H_FROM]]
        if not bound:
            return
        nodes: dict[tuple, list] = {}   # (cluster, node) -> its intervals (valid_from, valid_to, pool)
        before: dict[tuple, int] = {}   # nodes whose closed intervals count: since when
        for r in bound:
            key = (r[0], r[_P_NODE])
            c = self._nodes.get(key)
            if c is None:
                continue   # no record ever had the node: all of the interval on an unknown node
            if key not in nodes:
                nodes[key] = [] if c[_NC_DELETED] else [(c[_NC_FROM], None, c[_NC_POOL] or "")]
            if c[_NC_DELETED] or r[_H_FROM] < c[_NC_FROM]:
                before[key] = min(before.get(key, r[_H_FROM]), r[_H_FROM])
        if before:
            since = EPOCH + min(before.values()) * MICROSECOND
            for cluster, name, f, t, pool in execute_over(conn, _NODE_HISTORY_OF, _table(sorted(before), _KEYS),
                                                          {"since": since}).fetchall():
                nodes[(cluster, name)].append((f, t, pool))
        rows = daily_allocation(bound, nodes)
        if rows:
            known = [r for r in rows if r[:5] in self._daily_keys]
            if known:
                (updated,), = execute_over(conn, _ADD_DAILY, _table(known, _DAILY_SCHEMA)).fetchall()
                if updated != len(known):  # never: the keys are the table's (the batch rolls back, the keys are read)
                    raise RuntimeError(f"daily_allocation has {updated} of the {len(known)} rows the writer knows")
            fresh = [r for r in rows if r[:5] not in self._daily_keys]
            if fresh:
                execute_over(conn, "INSERT INTO daily_allocation SELECT * FROM wm_rows",
                             _table(fresh, _DAILY_SCHEMA)).fetchall()
                self._daily_added += [r[:5] for r in fresh]

    def after_commit(self, conn) -> None:
        if self._ended.full:
            self._ended.load(conn)
        self._daily_keys.update(self._daily_added)
        self._daily_added.clear()

    def after_rollback(self, conn) -> None:
        """The batch's transaction was rolled back: forget what it changed in the copies of node_current
        and of daily_allocation's keys."""
        self._nodes = _current(conn, "node_current", "name", _NODE_CURRENT_COLUMNS)
        self._daily_keys = set(conn.execute(_DAILY_KEYS).fetchall())
        self._daily_added.clear()

    # ------------------------------------------------------------------ nodes

    def apply_nodes(self, conn, rows: list[tuple]) -> tuple[int, int]:
        """Write a batch of check_node rows inside the caller's transaction; (records kept, dropped)."""
        by_node: dict[tuple, list] = {}
        for r in rows:
            by_node.setdefault((r[0], r[1]), []).append(r)
        current = {key: self._nodes[key] for key in by_node if key in self._nodes}
        closed, latest, changed, kept = [], [], [], 0
        for key, node_rows in by_node.items():
            node_rows.sort(key=operator.itemgetter(_N_OBS))
            c = current.get(key)
            # open_: [uid, valid_from, kept fields...] of the open interval, or None;
            # seen: (observed_at, version_key, deleted, uid) of the latest record kept
            if c is None:
                open_, seen = None, None
            else:
                fields = list(c[4:18])
                fields[1], fields[5] = _pairs(fields[1]), _pairs(fields[5])
                open_ = None if c[20] else [c[2], c[3], *fields]
                seen = (c[18], c[19], c[20], c[2])
            last = None
            for r in node_rows:
                if seen is not None and (r[_N_OBS] < seen[0] or (r[_N_VK] == seen[1] and r[_N_DEL] == seen[2])
                                         or (seen[2] and r[_N_UID] == seen[3])):
                    continue  # late, the latest record again, or a record of the node deleted already
                kept += 1
                last = r
                fields = list(r[_N_KEPT])
                if open_ is not None and (r[_N_DEL] or r[_N_UID] != open_[0] or fields != open_[2:]):
                    closed.append((key[0], key[1], open_[0], open_[1], r[_N_OBS], *open_[2:]))
                    open_ = None
                if not r[_N_DEL] and open_ is None:
                    open_ = [r[_N_UID], r[_N_OBS], *fields]
                seen = (r[_N_OBS], r[_N_VK], r[_N_DEL], r[_N_UID])
            if last is None:
                continue
            changed.append(key)
            if open_ is None:  # deleted: a tombstone with the last fields it had
                latest.append((key[0], key[1], last[_N_UID], last[_N_OBS], *last[_N_KEPT], *seen[:3]))
            else:
                latest.append((key[0], key[1], *open_, *seen[:3]))
        _insert(conn, "node_history", closed, _NODE_SCHEMA)
        _delete(conn, "node_current", "name", [k for k in changed if k in current])
        _insert(conn, "node_current", latest, _NODE_CURRENT_SCHEMA)
        for row in latest:
            self._nodes[(row[0], row[1])] = list(row)
        return kept, len(rows) - kept


# Rows the keyed tables store (deleted ones included) against their live rows: see compact.
_STORED = """
SELECT (SELECT estimated_size FROM duckdb_tables()
        WHERE database_name = current_database() AND schema_name = 'main' AND table_name = $table),
       (SELECT count(*) FROM query_table($table))
"""


def compact(conn) -> None:
    """Write pod_current and node_current again when they store more than twice their live rows.

    Why: the writer runs without DuckDB's vacuum (writing.Warehouse._checkpoint says why), so a row
    group whose rows a batch deleted lives on as long as one of its rows is untouched, and scans of
    the keyed tables would grow with the history.  Rewriting the live rows (the live set, not the
    history) lets the checkpoint drop the old row groups."""
    for table in ("pod_current", "node_current"):
        stored, live = conn.execute(_STORED, {"table": table}).fetchone()
        if (stored or 0) <= 2 * live:
            continue
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(f"CREATE TEMP TABLE wm_alloc_live AS SELECT * FROM {table}")
            conn.execute(f"DELETE FROM {table}")
            conn.execute(f"INSERT INTO {table} SELECT * FROM wm_alloc_live")
            conn.execute("DROP TABLE wm_alloc_live")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
