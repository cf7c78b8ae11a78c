"""The single writer of the DuckDB history: batches of records in, one transaction each.

Why one writer: DuckDB lets exactly one process open a file read-write (and,
while it does, no other process may open it at all, not even read-only: see
``snapshot``), and a single writer makes the bookkeeping simple and exact:
states are deduplicated, intervals advanced, transitions appended and the
Kafka offsets that cover them stored, all in ONE DuckDB transaction.  Either
the whole batch is in the file with the offsets after it, or none of it is and
the offsets still point before it.  So:

- a crash (even SIGKILL mid-transaction) loses nothing: the writer restarts at
  the stored offsets and reads the lost batch again;
- a replay duplicates nothing: the stored offsets skip what is in the file,
  and whatever is delivered twice anyway (a producer retry, a re-published
  event) is dropped by the dedup keys.

Batches go through Arrow: the columns are built once per batch and inserted
with ``INSERT ... SELECT FROM <arrow table>``; deduplication and the interval
bookkeeping are set-based SQL over the batch, never row-by-row.

``Warehouse`` is the writer over a file (used directly by the embedded demo);
``KafkaWarehouseWriter`` feeds it from the workloads and transitions topics.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import operator
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import msgspec
import orjson
import pyarrow as pa

from workloadmap.catalog import records
from workloadmap.catalog.records import (
    DEADLETTER_TOPIC, DELETED, EVENT_TYPES, NODES_TOPIC, PODS_TOPIC, TRANSITIONS_TOPIC, WORKLOADS_TOPIC, DeadLetter)

from . import allocating, costing, rolling
from .deletions import DeletedWorkloads
from .pricing import Pricing
from .schema import migrate

log = logging.getLogger(__name__)

DEFAULT_CONSUMER = "workloadmap-warehouse"
CHECKPOINT_WAL_BYTES = 32 * 2**20  # see Warehouse._checkpoint
WAL_AUTOCHECKPOINT = "1GB"  # DuckDB's own, only for a single batch larger than that
CATALOG = "warehouse"  # the name the writer's connection gives the file (see Warehouse.__init__)
ROW_GROUP_ROWS = 2048  # see Warehouse.__init__
WRITER_THREADS = 1  # DuckDB threads of the Kafka writer (see KafkaWarehouseWriter.__init__)
STAGE = "warehouse"


class MalformedRecord(ValueError):
    """A record or transition the warehouse cannot store (a dead-letter reason and a detail)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class WriteResult:
    inserted: int = 0  # new workload states
    duplicates: int = 0  # records already in the history (or twice in the batch)
    transitions_inserted: int = 0
    transition_duplicates: int = 0
    intervals_opened: int = 0
    pods: int = 0  # pod records that changed a pod's intervals (allocating.py)
    pod_duplicates: int = 0  # pod records dropped: repeated, late, or of a pod that ended
    nodes: int = 0
    node_duplicates: int = 0

    def __iadd__(self, other: "WriteResult") -> "WriteResult":
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


# --------------------------------------------------------------------------- validation


# Instants in the writer's rows are integer microseconds since the epoch (UTC): Arrow builds a
# timestamp column from integers ~20x faster than from datetimes with a time zone (each one asked
# for its UTC offset: ~0.5 us a value, ~2 us of a state with its interval and current row).
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)


def _micros(t: datetime) -> int:
    """An instant (naive: UTC) as integer microseconds since the epoch."""
    return ((t if t.tzinfo else t.replace(tzinfo=timezone.utc)) - _EPOCH) // _US


def _time(value, field: str) -> int:
    """A timestamp field as integer microseconds since the epoch, or MalformedRecord."""
    if not isinstance(value, str):
        raise MalformedRecord(records.WRONG_TYPES, f"{field} is {type(value).__name__}, not a timestamp string")
    try:
        t = records.parse_time(value)
    except ValueError:
        raise MalformedRecord(records.WRONG_TYPES, f"{field} {value[:40]!r} is not an RFC 3339 timestamp") from None
    return _micros(t)


def _require(d: dict, fields: tuple[str, ...], what: str) -> None:
    missing = [f for f in fields if f not in d]
    if missing:
        raise MalformedRecord(records.MISSING_FIELDS, f"{what} lacks {', '.join(missing)}")


def _text(d: dict, field: str, *, nullable: bool = True) -> str | None:
    v = d.get(field)
    if v is None and nullable:
        return None
    if not isinstance(v, str) or (not nullable and not v):
        raise MalformedRecord(records.WRONG_TYPES, f"{field} must be a{'' if nullable else ' non-empty'} string")
    return v


def _number(d: dict, field: str, what: str) -> float:
    v = d.get(field)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise MalformedRecord(records.WRONG_TYPES, f"{what}.{field} must be a non-negative number")
    return v


_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1   # the pods and memory columns' ranges
_RECORD_FIELDS = ("cluster", "uid", "kind", "status", "observedAt", "eventType", "deleted", "total")
_TRANSITION_FIELDS = ("cluster", "uid", "to", "at")


def check_record(record) -> tuple:
    """Validate one workload record; return its row of scalar columns or raise MalformedRecord."""
    if not isinstance(record, dict):
        raise MalformedRecord(records.WRONG_TYPES, f"a record is a JSON object, not {type(record).__name__}")
    _require(record, _RECORD_FIELDS, "workload record")
    cluster = _text(record, "cluster", nullable=False)
    uid = _text(record, "uid", nullable=False)
    kind = _text(record, "kind", nullable=False)
    status = _text(record, "status", nullable=False)
    event_type = record["eventType"]
    if event_type not in EVENT_TYPES:
        raise MalformedRecord(records.WRONG_TYPES, f"eventType {str(event_type)[:20]!r} is not one of {EVENT_TYPES}")
    deleted = record["deleted"]
    if not isinstance(deleted, bool):
        raise MalformedRecord(records.WRONG_TYPES, "deleted must be a boolean")
    observed = _time(record["observedAt"], "observedAt")
    created = record.get("creationTimestamp")
    created = _time(created, "creationTimestamp") if created is not None else None
    total = record["total"]
    if not isinstance(total, dict):
        raise MalformedRecord(records.WRONG_TYPES, "total must be an object")
    _require(total, ("gpu", "cpu", "memory"), "total")
    gpus, cpu, memory = (_number(total, f, "total") for f in ("gpu", "cpu", "memory"))
    pods = total.get("pods", 0)
    if isinstance(pods, bool) or not isinstance(pods, int) or not 0 <= pods <= _INT32_MAX:
        raise MalformedRecord(records.WRONG_TYPES, "total.pods must be an integer from 0 to 2^31-1")
    if memory > _INT64_MAX:
        raise MalformedRecord(records.WRONG_TYPES, "total.memory must be at most 2^63-1 bytes")
    gpu_resources = total.get("gpuResources") or {}
    if not isinstance(gpu_resources, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in gpu_resources.values()):
        raise MalformedRecord(records.WRONG_TYPES, "total.gpuResources must map names to numbers")
    rv = record.get("resourceVersion")
    rv = None if rv is None else str(rv)
    generation = record.get("generation")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
        raise MalformedRecord(records.WRONG_TYPES, "generation must be an integer")
    if deleted:  # a deleted workload holds nothing from then on
        status, pods, gpus, cpu, memory, gpu_resources = DELETED, 0, 0.0, 0.0, 0, {}
    return (
        cluster, uid, _text(record, "apiVersion"), kind, _text(record, "namespace"), _text(record, "name"),
        _text(record, "definition"), _text(record, "framework"),
        rv, rv if rv is not None else "@" + record["observedAt"], generation, _text(record, "origin"), created,
        observed, event_type, deleted, status, _text(record, "phase"),
        pods, float(gpus), float(cpu), int(memory), sorted((str(k), float(v)) for k, v in gpu_resources.items()),
    )


@contextlib.contextmanager
def _no_cyclic_collection():
    """Python's cyclic collector off for a batch.  A batch allocates some ten objects per record
    (parsed values, rows, steps, interval rows), and the collector walked them again and again
    (~5-10 us per record while parsing, with the services' thresholds; ~4% of a write): none of
    them makes a cycle, so reference counting frees them all."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class _Slow(Exception):
    """The batch's fast check met something it does not decide: check_record decides, record by record."""


_REQUIRED = operator.itemgetter("cluster", "uid", "kind", "status", "eventType", "deleted", "observedAt", "total")
_TOTAL_REQUIRED = operator.itemgetter("gpu", "cpu", "memory")
_NUMBER = (int, float)


def _fast_rows(values) -> list[tuple]:
    """check_record over a batch, inlined: the same rows for records it accepts; raises _Slow (or
    any other exception) at the first value it does not accept outright, never accepting what
    check_record refuses (its type tests are exact types, stricter than check_record's isinstance).
    ~3x faster than calling check_record per record: the batch's usual case, all valid."""
    out = []
    parse = datetime.fromisoformat
    times: dict[str, int] = {}  # a batch repeats instants (creation timestamps, observedAt)
    for r in values:
        if type(r) is not dict:
            raise _Slow
        g = r.get
        cluster, uid, kind, status, event_type, deleted, observed_text, total = _REQUIRED(r)  # KeyError: slow
        if not (type(cluster) is str and type(uid) is str and type(kind) is str and type(status) is str
                and cluster and uid and kind and status):
            raise _Slow
        if type(event_type) is not str or event_type not in EVENT_TYPES or type(deleted) is not bool:
            raise _Slow
        observed = times.get(observed_text)
        if observed is None:
            if type(observed_text) is not str:
                raise _Slow
            observed = _micros(parse(observed_text.replace("Z", "+00:00")))
            times[observed_text] = observed
        created = g("creationTimestamp")
        if created is not None:
            text, created = created, times.get(created)
            if created is None:
                if type(text) is not str:
                    raise _Slow
                created = _micros(parse(text.replace("Z", "+00:00")))
                times[text] = created
        if type(total) is not dict:
            raise _Slow
        gpus, cpu, memory = _TOTAL_REQUIRED(total)
        pods = total.get("pods", 0)
        if not (type(gpus) in _NUMBER and type(cpu) in _NUMBER and type(memory) in _NUMBER and type(pods) is int
                and gpus >= 0 and cpu >= 0 and 0 <= memory <= _INT64_MAX and 0 <= pods <= _INT32_MAX):
            raise _Slow
        gres = total.get("gpuResources") or None
        if gres is not None:
            if type(gres) is not dict:
                raise _Slow
            gres = sorted(gres.items())
            for k, v in gres:
                if type(k) is not str or type(v) not in _NUMBER:
                    raise _Slow
        rv, generation = g("resourceVersion"), g("generation")
        if not ((rv is None or type(rv) is str) and (generation is None or type(generation) is int)):
            raise _Slow
        api_version, namespace, name, definition = g("apiVersion"), g("namespace"), g("name"), g("definition")
        framework, origin, phase = g("framework"), g("origin"), g("phase")
        if not ((api_version is None or type(api_version) is str) and (namespace is None or type(namespace) is str)
                and (name is None or type(name) is str) and (definition is None or type(definition) is str)
                and (framework is None or type(framework) is str) and (origin is None or type(origin) is str)
                and (phase is None or type(phase) is str)):
            raise _Slow
        if deleted:
            status, pods, gpus, cpu, memory, gres = DELETED, 0, 0.0, 0.0, 0, None
        out.append((
            cluster, uid, api_version, kind, namespace, name, definition, framework,
            rv, rv if rv is not None else "@" + observed_text, generation, origin, created,
            observed, event_type, deleted, status, phase,
            pods, float(gpus), float(cpu), int(memory), [(k, float(v)) for k, v in gres] if gres else [],
        ))
    return out


def check_records(values: list) -> list:
    """check_record over a batch: per value its row, or the ValueError that refuses it (a
    MalformedRecord with its reason, or what else check_record raised, e.g. a NaN of memory).

    The batch's usual case (all valid) takes the fast inlined check; any batch it does not accept
    outright goes record by record through check_record, which decides and gives the reasons."""
    try:
        return _fast_rows(values)
    except Exception:
        pass
    out = []
    for v in values:
        try:
            out.append(check_record(v))
        except ValueError as exc:
            out.append(exc)
    return out


def check_transition(transition) -> tuple:
    """Validate one transition; return its row or raise MalformedRecord."""
    if not isinstance(transition, dict):
        raise MalformedRecord(records.WRONG_TYPES, f"a transition is a JSON object, not {type(transition).__name__}")
    _require(transition, _TRANSITION_FIELDS, "transition")
    gpus = transition.get("gpus")
    duration = transition.get("previousDurationSeconds")
    for field, v in (("gpus", gpus), ("previousDurationSeconds", duration)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise MalformedRecord(records.WRONG_TYPES, f"{field} must be a number")
    return (
        _text(transition, "cluster", nullable=False), _text(transition, "uid", nullable=False),
        _text(transition, "namespace"), _text(transition, "name"), _text(transition, "kind"),
        _text(transition, "framework"), _text(transition, "definition"),
        _text(transition, "from"), _text(transition, "to", nullable=False), _time(transition["at"], "at"),
        None if gpus is None else float(gpus), None if duration is None else float(duration),
    )


_STATE_SCHEMA = pa.schema([
    ("cluster", pa.string()), ("uid", pa.string()), ("api_version", pa.string()), ("kind", pa.string()),
    ("namespace", pa.string()), ("name", pa.string()), ("definition", pa.string()), ("framework", pa.string()),
    ("resource_version", pa.string()), ("version_key", pa.string()), ("generation", pa.int64()),
    ("origin", pa.string()), ("creation_timestamp", pa.timestamp("us", tz="UTC")),
    ("observed_at", pa.timestamp("us", tz="UTC")), ("event_type", pa.string()), ("deleted", pa.bool_()),
    ("status", pa.string()), ("phase", pa.string()),
    ("pods", pa.int32()), ("gpus", pa.float64()), ("cpu", pa.float64()), ("memory", pa.int64()),
    ("gpu_resources", pa.map_(pa.string(), pa.float64())),
])
_TRANSITION_SCHEMA = pa.schema([
    ("cluster", pa.string()), ("uid", pa.string()), ("namespace", pa.string()), ("name", pa.string()),
    ("kind", pa.string()), ("framework", pa.string()), ("definition", pa.string()),
    ("from_status", pa.string()), ("to_status", pa.string()), ("transitioned_at", pa.timestamp("us", tz="UTC")),
    ("gpus", pa.float64()), ("previous_duration_seconds", pa.float64()),
])


def _columns(rows: list[tuple], schema: pa.Schema) -> dict[str, pa.Array]:
    cols = list(zip(*rows)) if rows else [()] * len(schema)
    return {f.name: pa.array(col, type=f.type) for f, col in zip(schema, cols)}


# --------------------------------------------------------------------------- the SQL of one batch

_IDENT = "cluster, uid, api_version, kind, namespace, name, definition, framework"
_DEMAND = "pods, gpus, cpu, memory, gpu_resources"

# Why keyed tables: the history (state_history, interval_history, transitions) only grows, so a
# batch must never read it on its usual path.  What a batch needs of the past is each touched
# workload's latest state and open interval: workload_current holds them for the live workloads
# (one row each, PRIMARY KEY (cluster, uid), fetched with a join on the batch's keys; the live set
# does not grow with the history), and deleted_workloads knows, by a 64-bit key looked up in its
# ART index, which workloads were deleted.  Only a state older than its workload's latest one, or
# one of a deleted workload (a late or repeated record), goes to the exact path that reads that
# workload's history.  The bookkeeping of the batch's few hundred rows (dedup, interval starts)
# is a plain loop in Python: DuckDB's window operator costs ~10 ms of CPU per statement even on a
# few hundred rows, more than the whole loop.

_CURRENT_COLUMNS = (f"cluster, uid, seq, epoch_us(observed_at), version_key, api_version, kind, namespace, name, "
                    f"definition, framework, status, epoch_us(valid_from), {_DEMAND}, from_seq, epoch_us(rolled_to)")
_CURRENT_OF_BATCH = f"""
SELECT {_CURRENT_COLUMNS} FROM workload_current c
WHERE EXISTS (SELECT 1 FROM wm_keys k WHERE k.cluster = c.cluster AND k.uid = c.uid)
"""

# The exact path: which flagged states are already in the history (reads the flagged workloads only).
_HISTORY_DUPLICATES = """
SELECT s.cluster, s.uid, s.version_key, s.deleted FROM state_history s
WHERE EXISTS (SELECT 1 FROM wm_slow n WHERE s.cluster = n.cluster AND s.uid = n.uid
                                        AND s.version_key = n.version_key AND s.deleted = n.deleted)
"""
_HISTORY_OF = f"""
SELECT cluster, uid, api_version, kind, namespace, name, definition, framework, status, epoch_us(observed_at), seq,
       version_key, {_DEMAND}
FROM state_history s
WHERE EXISTS (SELECT 1 FROM wm_rebuild r WHERE r.cluster = s.cluster AND r.uid = s.uid)
"""
_DELETE_REBUILT = """
DELETE FROM interval_history i
WHERE EXISTS (SELECT 1 FROM wm_rebuild r WHERE r.cluster = i.cluster AND r.uid = i.uid)
"""

_INSERT_STATES = f"""
INSERT INTO state_history BY NAME
SELECT seq, {_IDENT}, resource_version, version_key, generation, origin,
       creation_timestamp, observed_at, event_type, deleted, status, phase, {_DEMAND}, record::JSON AS record
FROM wm_new_states
"""

_DELETE_CURRENT = """
DELETE FROM workload_current c
WHERE EXISTS (SELECT 1 FROM wm_touched t WHERE t.cluster = c.cluster AND t.uid = c.uid)
"""

# Transitions are deduplicated on (cluster, uid, transitioned_at, to_status): the batch's range
# of instants ($lo, $hi, constants) lets DuckDB skip the row groups of the history outside it
# (transitions arrive in about time order), so only recent row groups are read.
_INSERT_TRANSITIONS = """
INSERT INTO transitions BY NAME
SELECT * EXCLUDE (pos) FROM (
    SELECT * FROM wm_transitions
    QUALIFY row_number() OVER (PARTITION BY cluster, uid, transitioned_at, to_status ORDER BY pos) = 1
) b
WHERE NOT EXISTS (
    SELECT 1 FROM transitions t
    WHERE t.transitioned_at >= $lo AND t.transitioned_at <= $hi
      AND t.cluster = b.cluster AND t.uid = b.uid AND t.transitioned_at = b.transitioned_at
      AND t.to_status = b.to_status)
"""


def workload_key(cluster: str, uid: str) -> int:
    """The key of a workload in deleted_workloads: DuckDB's md5_number_lower(cluster || '/' || uid)."""
    return int.from_bytes(hashlib.md5(f"{cluster}/{uid}".encode()).digest()[8:], "little")


# Row indexes of check_record's tuples.
_C, _U, _VK, _OBS, _DEL, _ST, _PODS = 0, 1, 9, 13, 15, 16, 18
_ROLLED_TO = 19  # of a workload_current row (_CURRENT_COLUMNS)
_IDENT_SCHEMA = pa.schema([f for f in _STATE_SCHEMA if f.name in
                           ("cluster", "uid", "api_version", "kind", "namespace", "name", "definition", "framework")])
_INTERVAL_SCHEMA = pa.schema(list(_IDENT_SCHEMA) + [
    ("status", pa.string()), ("valid_from", pa.timestamp("us", tz="UTC")), ("valid_to", pa.timestamp("us", tz="UTC")),
    ("pods", pa.int32()), ("gpus", pa.float64()), ("cpu", pa.float64()), ("memory", pa.int64()),
    ("gpu_resources", pa.map_(pa.string(), pa.float64())), ("from_seq", pa.int64()),
    ("rolled_to", pa.timestamp("us", tz="UTC"))])
_CURRENT_SCHEMA = pa.schema([("seq", pa.int64()), ("observed_at", pa.timestamp("us", tz="UTC")),
                             ("version_key", pa.string())] + list(_INTERVAL_SCHEMA))
_KEY_SCHEMA = pa.schema([("cluster", pa.string()), ("uid", pa.string())])
_SLOW_SCHEMA = pa.schema([("cluster", pa.string()), ("uid", pa.string()), ("version_key", pa.string()),
                          ("deleted", pa.bool_())])


def _tuples(table: pa.Table):
    """A table's rows as tuples: column by column through Arrow, ~2x faster than DuckDB's fetchall."""
    return zip(*[column.to_pylist() for column in table.columns])


def _gpu_map(value) -> list:
    """A gpu_resources value (list of pairs, dict or DuckDB's map) as a sorted list of pairs, as
    check_record gives it (so that a row's demand, ``row[_PODS:]``, compares equal)."""
    if isinstance(value, dict):
        return sorted(value.items())
    return sorted((k, v) for k, v in value)


_TIME_SEQ = operator.itemgetter(0, 1)


def _intervals(steps: list[tuple]) -> list[list]:
    """Interval starts of one workload's steps, each step (t, seq, is_anchor, ident, status, demand, vk,
    rolled_to).

    A start is the first step and every step whose status or demand differs from the previous one;
    it lasts until the next start.  Returns [start step, valid_to] pairs.
    """
    steps.sort(key=_TIME_SEQ)
    starts, prev = [], None
    for step in steps:
        if prev is None or step[4] != prev[4] or step[5] != prev[5]:
            if starts:
                starts[-1][1] = step[0]
            starts.append([step, None])
        prev = step
    return starts


# One statement for all the batch's partitions (each statement costs ~1.5 ms; a writer reads
# a dozen partitions); {rows} is "(?, ?, ?, ?, ?)" once per partition, no partition twice.
_UPSERT_OFFSETS = """
INSERT INTO consumer_offsets VALUES {rows}
ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = excluded.next_offset,
                                                       updated_at = excluded.updated_at
"""


# Rows workload_current stores (deleted ones included: see Warehouse._checkpoint), and its live rows.
_CURRENT_STORED = """
SELECT (SELECT estimated_size FROM duckdb_tables()
        WHERE database_name = current_database() AND schema_name = 'main' AND table_name = 'workload_current'),
       (SELECT count(*) FROM workload_current)
"""


class Warehouse:
    """The DuckDB history, opened read-write and migrated to the latest schema.

    One instance per file and process (DuckDB's rule).  ``write`` is the only
    mutation; queries from the same process go through ``cursor()``; other
    processes read a ``snapshot``.
    """

    def __init__(self, path: str | os.PathLike, *, consumer: str = DEFAULT_CONSUMER, pricing: Pricing | None = None):
        self.path = Path(path)
        self.consumer = consumer
        self.pricing = pricing  # what the kept daily cost rows are priced with (rolling.keep_costs)
        # The file is attached with row groups of ROW_GROUP_ROWS (2,048, DuckDB's smallest): once a
        # transaction appends at least a row group's rows, DuckDB writes them straight into the
        # file, compressed, at its commit (its "optimistic writes"), instead of into the WAL first
        # and into the file again at the next checkpoint.  With the default row group (122,880)
        # no batch gets there; with 2,048 the batches under load do (the Kafka writer's batches
        # at 5,000 events/s hold ~2,500 records), so their 1.7 KB records are written once.
        # Measured, bench `texts` (batches of 5,000), back to back: 36,000 -> 40,500 rows per
        # CPU-second; the commit and the checkpoints went from ~8.3 to ~4.5 us per state.  Smaller
        # batches take the WAL as before.  The size is not a property of the file, only of how
        # this writer appends: the history is stored in row groups of 2,048 rows, whose finer
        # min/max let scans skip more, but cost some per-group work (analytics on 10 M states,
        # CPU: the yearly cost report by namespace +7%, capacity at an instant 31 -> 40 ms).
        self.conn = duckdb.connect()
        self.conn.execute(f"ATTACH ? AS {CATALOG} (ROW_GROUP_SIZE {ROW_GROUP_ROWS})", [str(self.path)])
        self.conn.execute(f"USE {CATALOG}")
        # Checkpoints are the writer's (``_checkpoint``, after a batch), not DuckDB's automatic
        # one inside a commit, and without its vacuum (see ``_checkpoint``).
        self.conn.execute(f"SET wal_autocheckpoint = '{WAL_AUTOCHECKPOINT}'")
        self.conn.execute("SET max_vacuum_tasks = 0")
        migrate(self.conn)
        self._next_seq = self.conn.execute("SELECT coalesce(max(seq), 0) FROM state_history").fetchone()[0]
        # The daily rollup (rolling.py): how far it is, and the latest observed_at seen (its horizon).
        self._rolled_seq, self._horizon = self.conn.execute(rolling.STATE).fetchone()
        self._latest_observed = self.conn.execute(
            "SELECT epoch_us(max(observed_at)) FROM workload_current").fetchone()[0]
        self._deleted = DeletedWorkloads(self.conn)
        self._allocations = allocating.Allocations(self.conn)
        self._lock = threading.Lock()
        [(kept_with,)] = self.conn.execute("SELECT priced_with FROM usage_rollup").fetchall()
        if self._next_seq > 0 and (self._rolled_seq < 0 or kept_with != costing.priced_with(pricing)):
            # a history from before the rollup (schema 7) or the kept cost rows (schema 8), or priced
            # otherwise: now, not in the first batch
            log.info("rolling up the history of %s (%d states) and keeping its daily cost rows for the cost "
                     "reports", self.path, self._next_seq)
            self._roll_up(keep_costs=True)

    # ------------------------------------------------------------------ writing

    def write(self, records: list[dict] = (), transitions: list[dict] = (),
              offsets: dict[tuple[str, int], int] | None = None, *,
              texts: list[str] | None = None, texts_are_json: bool = False,
              pods: list[dict] = (), nodes: list[dict] = ()) -> WriteResult:
        """Insert one batch in one transaction; return what was new and what was a duplicate.

        `records` are workload records, `transitions` status transitions (both
        as published on their topics); `offsets` maps (topic, partition) to the
        next offset to read after this batch, stored for ``self.consumer``.
        `texts` optionally gives each record's JSON text as received (saves
        re-encoding; it is what ``record`` stores); DuckDB checks that they are JSON
        unless `texts_are_json` says they were parsed as strict JSON already.
        `pods` and `nodes` are pod and node records (allocating.py).
        Raises MalformedRecord, before touching the file, if any record,
        transition, pod or node is malformed.
        """
        state_rows = check_records(records)
        for row in state_rows:
            if isinstance(row, ValueError):
                raise row
        transition_rows = [check_transition(t) for t in transitions]
        pod_rows, node_rows = [allocating.check_pod(p) for p in pods], [allocating.check_node(n) for n in nodes]
        if texts is None:
            try:  # orjson writes strict JSON (it refuses what JSON cannot say)
                texts, texts_are_json = [orjson.dumps(r).decode() for r in records], True
            except TypeError:  # integers beyond 64 bits, keys that are not strings
                texts, texts_are_json = [json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in records], False
        elif len(texts) != len(records):
            raise ValueError("texts must give one JSON text per record")
        return self.write_checked(state_rows, texts, transition_rows, offsets, texts_are_json=texts_are_json,
                                  pod_rows=pod_rows, node_rows=node_rows)

    def write_checked(self, state_rows: list[tuple], texts: list[str], transition_rows: list[tuple],
                      offsets: dict[tuple[str, int], int] | None = None, *,
                      texts_are_json: bool = False, pod_rows: list[tuple] = (),
                      node_rows: list[tuple] = ()) -> WriteResult:
        """``write`` for rows already validated by check_records / check_transition / allocating's
        check_pod and check_node (the Kafka path)."""
        with self._lock, _no_cyclic_collection():
            result = self._write(state_rows, texts, transition_rows, offsets or {}, texts_are_json,
                                 pod_rows, node_rows)
            if self._next_seq - self._rolled_seq >= rolling.ROLL_UP_STATES:
                self._roll_up()
            if self._wal_bytes() >= CHECKPOINT_WAL_BYTES:
                self._checkpoint()
            return result

    def roll_up(self) -> int:
        """Bring the daily rollup (rolling.py) and the kept daily cost rows up to date now; returns the
        rollup rows added.  The writer also rolls up every rolling.ROLL_UP_STATES states, and does both
        before a snapshot and when it closes (the kept rows are for readers)."""
        with self._lock:
            return self._roll_up(keep_costs=True)

    def _roll_up(self, *, keep_costs: bool = False) -> int:
        conn = self.conn
        horizon = rolling.horizon_of(self._latest_observed, self._horizon, time.time_ns() // 1000)
        conn.execute("BEGIN TRANSACTION")
        try:
            added = rolling.roll_up(conn, from_seq=self._rolled_seq, to_seq=self._next_seq, horizon_us=horizon)
            if keep_costs:
                rolling.keep_costs(conn, self.pricing)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self._rolled_seq, self._horizon = self._next_seq, horizon
        return added

    def _wal_bytes(self) -> int:
        try:
            return os.path.getsize(f"{self.path}.wal")
        except FileNotFoundError:
            return 0

    def _checkpoint(self) -> None:
        """Write the WAL into the file, in a time that does not grow with the history.

        The writer checkpoints after a batch once the WAL passes CHECKPOINT_WAL_BYTES, the batch
        committed and visible.  Measured (batches of 200 records of 1.7 KB, one thread): writing
        the WAL into the file costs ~11 us of CPU per state, but DuckDB's checkpoint then vacuums:
        it merges the small row groups earlier checkpoints left, rewriting them, up to a whole
        row group of 122,880 states (~2 s), in a binary-counter pattern.  At 256MB of WAL (DuckDB
        checkpointing in a commit) every checkpoint took 1.3-1.5 s, the pipeline's latency tail;
        at 16MB most took 0.1-0.3 s but one in 2-4 took 0.5-1.8 s.  Without the vacuum
        (max_vacuum_tasks = 0) every checkpoint of 32MB took 0.13-0.28 s.  The history's row
        groups then hold what one checkpoint wrote (~12,000 states; the file ~9% larger).

        Without the vacuum, though, a row group of workload_current (whose rows a batch deletes
        and inserts again) lives on, mostly deleted rows, as long as one of its workloads stays
        untouched: scans of it grow with the history (measured: 143,000 rows stored for 16,666
        live after 200,000 states).  So once it stores more than twice its live rows, they are
        written again first (one transaction, ~9 us per live row: the live set, not the history),
        and its old row groups, wholly deleted, are dropped by the checkpoint (2 row groups left
        in that measurement).  With all this, over 200,000 states in batches of 200: the slowest
        batch 0.40 s against 1.46 s with DuckDB's checkpoints at 256MB (p99 of the batches 0.25
        s against 0.07: small checkpoints, more often)."""
        conn = self.conn
        stored, live = conn.execute(_CURRENT_STORED).fetchone()
        if (stored or 0) > 2 * live:
            self._compact_current()
        allocating.compact(conn)  # the same for pod_current and node_current
        conn.execute("CHECKPOINT")

    def _compact_current(self) -> None:
        conn = self.conn
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute("CREATE TEMP TABLE wm_live AS SELECT * FROM workload_current")
            conn.execute("DELETE FROM workload_current")
            conn.execute("INSERT INTO workload_current SELECT * FROM wm_live")
            conn.execute("DROP TABLE wm_live")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _write(self, state_rows, texts, transition_rows, offsets, texts_are_json=False, pod_rows=(),
               node_rows=()) -> WriteResult:
        result = WriteResult()
        conn = self.conn
        conn.execute("BEGIN TRANSACTION")
        try:
            if state_rows:
                try:
                    self._apply_states(result, state_rows, texts, texts_are_json)
                finally:
                    for name in ("wm_keys", "wm_slow", "wm_rebuild", "wm_new_states", "wm_touched",
                                 "wm_intervals", "wm_current", "wm_deleted"):
                        conn.unregister(name)
            if pod_rows:
                result.pods, result.pod_duplicates = self._allocations.apply_pods(conn, pod_rows)
            if node_rows:
                result.nodes, result.node_duplicates = self._allocations.apply_nodes(conn, node_rows)
            if transition_rows:
                cols = _columns(transition_rows, _TRANSITION_SCHEMA)
                cols["pos"] = pa.array(range(len(transition_rows)), type=pa.int64())
                conn.register("wm_transitions", pa.table(cols))
                try:
                    at = [r[9] for r in transition_rows]
                    n = conn.execute(_INSERT_TRANSITIONS, {"lo": _EPOCH + min(at) * _US,
                                                           "hi": _EPOCH + max(at) * _US}).fetchone()[0]
                finally:
                    conn.unregister("wm_transitions")
                result.transitions_inserted = n
                result.transition_duplicates = len(transition_rows) - n
            now = datetime.now(timezone.utc)
            stored = {(topic, int(partition)): int(next_offset)
                      for (topic, partition), next_offset in sorted(offsets.items())}
            if stored:
                params = []
                for (topic, partition), next_offset in stored.items():
                    params += [self.consumer, topic, partition, next_offset, now]
                conn.execute(_UPSERT_OFFSETS.format(rows=", ".join(["(?, ?, ?, ?, ?)"] * len(stored))), params)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self._allocations.after_commit(conn)
        if self._deleted.full:
            self._deleted.load(conn)
        return result

    def _apply_states(self, result: WriteResult, rows: list[tuple], texts: list[str],
                      texts_are_json: bool = False) -> None:
        conn = self.conn
        # Dedup inside the batch: the first occurrence of each (cluster, uid, version_key, deleted).
        first: dict[tuple, int] = {}
        for i, r in enumerate(rows):
            first.setdefault((r[_C], r[_U], r[_VK], r[_DEL]), i)
        keys = {(r[_C], r[_U]) for r in rows}
        conn.register("wm_keys", pa.table(_columns(sorted(keys), _KEY_SCHEMA)))
        current = {(c[0], c[1]): c for c in _tuples(conn.sql(_CURRENT_OF_BATCH).to_arrow_table())}
        # Not live: brand new, or deleted before (then the exact path): the filter rules out most
        # (deletions.py), the ART index of deleted_workloads answers for the others, given as literals.
        seen: set[int] = set()
        others = {workload_key(*k): k for k in keys if k not in current}
        maybe = [k for k in others if self._deleted.may_contain(k)]  # the rest: certainly not deleted
        if maybe:
            seen = {k for (k,) in conn.execute(
                f"SELECT key FROM deleted_workloads WHERE key IN ({', '.join(map(str, maybe))})").fetchall()}
        deleted_before = {others[k] for k in seen}
        new, slow = [], []
        for i in sorted(first.values()):
            r = rows[i]
            c = current.get((r[_C], r[_U]))
            if c is not None:
                if r[_VK] == c[4] and not r[_DEL]:
                    continue  # the workload's current state again
                if r[_OBS] < c[3] or (c[_ROLLED_TO] is not None and r[_OBS] < c[_ROLLED_TO]):
                    slow.append(i)  # older than the workload's latest state, or inside its rolled-up days
                    continue
            elif (r[_C], r[_U]) in deleted_before:
                slow.append(i)
                continue
            new.append(i)
        rebuild: set[tuple] = set()
        if slow:  # the exact path: the history of these workloads decides
            conn.register("wm_slow", pa.table(_columns(
                [(rows[i][_C], rows[i][_U], rows[i][_VK], rows[i][_DEL]) for i in slow], _SLOW_SCHEMA)))
            known = set(conn.execute(_HISTORY_DUPLICATES).fetchall())
            fresh = [i for i in slow if (rows[i][_C], rows[i][_U], rows[i][_VK], rows[i][_DEL]) not in known]
            rebuild = {(rows[i][_C], rows[i][_U]) for i in fresh}
            new = sorted(new + fresh)
        result.inserted, result.duplicates = len(new), len(rows) - len(new)
        if not new:
            return
        seq0 = self._next_seq
        cols = _columns([rows[i] for i in new] if len(new) < len(rows) else rows, _STATE_SCHEMA)
        # Texts already parsed as strict JSON go in as Arrow's JSON type, which DuckDB takes as its
        # JSON without parsing them again (its cast from VARCHAR parses each, ~10% of a batch).
        # (pa.array builds the JSON type ~5x slower than a string array wrapped as one.)
        record = pa.array([texts[i] for i in new] if len(new) < len(texts) else texts, type=pa.string())
        cols["record"] = pa.ExtensionArray.from_storage(pa.json_(), record) if texts_are_json else record
        cols["seq"] = pa.array(range(seq0 + 1, seq0 + 1 + len(new)), type=pa.int64())
        conn.register("wm_new_states", pa.table(cols))
        # Each touched workload's steps: its open interval (the anchor) and its new states; all its
        # states when rebuilt.  A step: (t, seq, is_anchor, identity, status, demand, version_key,
        # rolled_to), demand as in a row: (pods, gpus, cpu, memory, [(GPU resource, count), ...]);
        # rolled_to: the anchor's (where the daily rollup of its interval stops), None for the others.
        steps: dict[tuple, list] = {}
        if rebuild:
            conn.register("wm_rebuild", pa.table(_columns(sorted(rebuild), _KEY_SCHEMA)))
            for h in conn.execute(_HISTORY_OF).fetchall():
                steps.setdefault((h[0], h[1]), []).append(
                    (h[9], h[10], False, h[:8], h[8], (*h[12:16], _gpu_map(h[16])), h[11], None))
            conn.execute(_DELETE_REBUILT).fetchall()
            for statement in rolling.DROP_ROLLED:
                conn.execute(statement).fetchall()
        for seq, i in enumerate(new, start=seq0 + 1):
            r = rows[i]
            steps.setdefault((r[_C], r[_U]), []).append((r[_OBS], seq, False, r[:8], r[_ST], r[_PODS:], r[_VK], None))
        for key, c in current.items():
            if key in steps and key not in rebuild:
                steps[key].append((c[12], c[18], True, (c[0], c[1], *c[5:11]), c[11],
                                   (*c[13:17], _gpu_map(c[17])), c[4], c[_ROLLED_TO]))
        closed, latest_rows, deleted_keys, opened = [], [], [], 0
        for key, workload_steps in steps.items():
            starts = _intervals(workload_steps)  # sorts the steps by (t, seq)
            latest = workload_steps[-1]
            for (t, seq, is_anchor, ident, status, demand, _, rolled_to), valid_to in starts:
                opened += not is_anchor
                row = (*ident, status, t, valid_to, *demand, seq, rolled_to)
                if valid_to is not None or status == DELETED:
                    closed.append(row)  # no longer changes (a final Deleted interval stays open)
                else:
                    latest_rows.append((latest[1], latest[0], latest[6], *row))
            if starts[-1][0][4] == DELETED:
                deleted_keys.append(workload_key(*key))
        result.intervals_opened = opened
        conn.execute(_INSERT_STATES).fetchall()
        self._next_seq = seq0 + len(new)
        latest_observed = max(rows[i][_OBS] for i in new)
        if self._latest_observed is None or latest_observed > self._latest_observed:
            self._latest_observed = latest_observed
        if closed:
            conn.register("wm_intervals", pa.table(_columns(closed, _INTERVAL_SCHEMA)))
            conn.execute("INSERT INTO interval_history BY NAME SELECT *, $seq AS appended_seq FROM wm_intervals",
                         {"seq": self._next_seq}).fetchall()
        touched = [k for k in steps if k in current or k in rebuild]
        if touched:
            conn.register("wm_touched", pa.table(_columns(touched, _KEY_SCHEMA)))
            conn.execute(_DELETE_CURRENT).fetchall()
        if latest_rows:
            conn.register("wm_current", pa.table(_columns(latest_rows, _CURRENT_SCHEMA)))
            conn.execute("INSERT INTO workload_current BY NAME SELECT * EXCLUDE (valid_to) FROM wm_current").fetchall()
        if deleted_keys:
            # Keys the filter rules out are certainly not in the table yet: a plain insert (the
            # ART check of OR IGNORE costs twice as much); the others may be (a deleted workload's
            # history rebuilt).
            fresh, known = [], []
            for key in deleted_keys:
                (known if self._deleted.may_contain(key) else fresh).append(key)
                self._deleted.add(key)
            for keys, verb in ((fresh, "INSERT"), (known, "INSERT OR IGNORE")):
                if keys:
                    conn.register("wm_deleted", pa.table({"key": pa.array(keys, type=pa.uint64())}))
                    conn.execute(f"{verb} INTO deleted_workloads SELECT key FROM wm_deleted").fetchall()

    # ------------------------------------------------------------------ reading

    def offsets(self, consumer: str | None = None) -> dict[tuple[str, int], int]:
        """(topic, partition) -> next offset to read, as stored for `consumer`."""
        rows = self.conn.execute(
            "SELECT topic, partition, next_offset FROM consumer_offsets WHERE consumer = ?",
            [consumer or self.consumer]).fetchall()
        return {(t, p): o for t, p, o in rows}

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection for queries in this process (sees committed batches), on the warehouse file."""
        cursor = self.conn.cursor()
        cursor.execute(f"USE {CATALOG}")
        return cursor

    def snapshot(self, dest: str | os.PathLike) -> Path:
        """Write a consistent copy of the file to `dest` (atomically replaced) for readers.

        Other processes cannot open the file while this writer holds it, not even
        read-only (DuckDB locks it); they open the snapshot instead, read-only, as
        many at a time as they like.  Between batches (under the writer's lock)
        DuckDB itself copies the database into a fresh file.  (Copying the file
        with the OS would open and close it, and closing any descriptor of a file
        drops this process's POSIX lock on it: other processes could then open
        the live file while we write it.)
        """
        dest = Path(dest)
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        with self._lock:
            self._roll_up(keep_costs=True)  # readers get the rollup and the kept cost rows up to date
            self.conn.execute("ATTACH ? AS snapshot_copy", [str(tmp)])
            try:
                name = self.conn.execute("SELECT current_database()").fetchone()[0]
                self.conn.execute(f'COPY FROM DATABASE "{name.replace(chr(34), chr(34) * 2)}" TO snapshot_copy')
            finally:
                self.conn.execute("DETACH snapshot_copy")
        os.replace(tmp, dest)
        return dest

    def close(self) -> None:
        """Roll up what is new and keep the finished days' cost rows (for readers of the stopped file), and close."""
        with self._lock:
            try:
                if self._next_seq > 0:
                    self._roll_up(keep_costs=True)
            finally:
                self.conn.close()

    def __enter__(self) -> "Warehouse":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------- Kafka


def check_messages(messages, transitions_topic: str = TRANSITIONS_TOPIC, *, allocations: dict | None = None):
    """A batch of Kafka messages as the writer takes them: (state rows, their texts, transition
    rows, dead letters, offsets after the batch, whether every text was parsed as strict JSON).

    `allocations` maps the pods and nodes topics to their check and the list their rows go to
    (``allocation_topics``); without it every message that is not a transition is taken for a
    workload record.

    Each value is parsed once: a workload record only for the fields the writer reads
    (``_ReadFields``), a transition whole (orjson: strict JSON; the standard library when it
    refuses, so what is malformed is what that rejects); the records are checked together
    (``_fast_rows``, and check_record on their whole values whenever it declines); what cannot be
    stored becomes a dead letter with its reason."""
    rows, texts, transitions, dead, offsets = [], [], [], [], {}
    values, kept = [], []  # the workload records, checked together

    def dead_letter(m, exc):
        if isinstance(exc, MalformedRecord):
            reason, detail = exc.reason, exc.detail
        else:
            reason, detail = records.MALFORMED_JSON, str(exc)[:200]
        dead.append(DeadLetter(STAGE, reason, detail, m.value or b"", key=m.key, topic=m.topic,
                               partition=m.partition, offset=m.offset))

    with _no_cyclic_collection():
        _parse_messages(messages, transitions_topic, transitions, values, kept, offsets, dead_letter,
                        allocations or {})
        try:
            checked = _fast_rows(values)  # the batch's usual case: every record valid
        except Exception:  # check_record decides, on the whole records (the read fields lack what it reports)
            checked = _check_whole(kept)
        values.clear()  # freed now: the collector, back on, does not walk them
    texts_are_json = all(strict for _, _, strict in kept)
    for row, (m, text, _) in zip(checked, kept):
        if isinstance(row, ValueError):  # as when records were checked one by one
            dead_letter(m, row)
        else:
            rows.append(row)
            texts.append(text)
    return rows, texts, transitions, dead, offsets, texts_are_json


_ABSENT = object()  # a required field the record lacks (_fast_rows declines it: not of its type)


class _ReadFields(msgspec.Struct):
    """The fields of a workload record the writer reads (check_record's), and only those.

    Why: parsing a whole record builds ~100 objects (its components, their pods and requests),
    and building and freeing them was most of the Kafka writer's parse (orjson ~20 us a record
    with the freeing, against ~4 us here); the record's text is stored as received anyway.  The
    decoder still reads the whole text, so what it accepts is strict JSON (NaN, control
    characters, lone surrogates refused; it leaves invalid UTF-8 in fields it skips to the text's
    own decoding, which refuses it).  A field absent from the record is None here, as ``dict.get``
    gives it, or _ABSENT for a required one.
    """

    cluster: object = _ABSENT
    uid: object = _ABSENT
    kind: object = _ABSENT
    status: object = _ABSENT
    eventType: object = _ABSENT
    deleted: object = _ABSENT
    observedAt: object = _ABSENT
    total: object = _ABSENT
    apiVersion: object = None
    namespace: object = None
    name: object = None
    definition: object = None
    framework: object = None
    origin: object = None
    phase: object = None
    resourceVersion: object = None
    generation: object = None
    creationTimestamp: object = None


_READ_FIELDS = msgspec.json.Decoder(_ReadFields)


def _whole(data: bytes) -> tuple[object, bool]:
    """A message's whole value and whether it is strict JSON: orjson's, else the standard library's
    (NaN...: strict False), else its ValueError."""
    try:
        return orjson.loads(data), True
    except orjson.JSONDecodeError:
        return json.loads(data), False


def allocation_topics(pods: list, nodes: list, pods_topic: str = PODS_TOPIC, nodes_topic: str = NODES_TOPIC) -> dict:
    """check_messages' `allocations`: pod records checked into `pods`, node records into `nodes`."""
    return {pods_topic: (allocating.check_pod, pods), nodes_topic: (allocating.check_node, nodes)}


def _parse_messages(messages, transitions_topic, transitions, values, kept, offsets, dead_letter,
                    allocations) -> None:
    """Each value parsed once: a workload record's read fields (``_ReadFields``, as a dict) when it
    is strict JSON, else the whole value (strict False: DuckDB checks its text); a transition, a pod
    or a node record whole."""
    read_fields, asdict = _READ_FIELDS.decode, msgspec.structs.asdict
    for m in messages:
        key = (m.topic, m.partition)
        if offsets.get(key, -1) <= m.offset:
            offsets[key] = m.offset + 1
        data = m.value
        try:
            if m.topic == transitions_topic:
                transitions.append(check_transition(None if data is None else _whole(data)[0]))
                continue
            allocation = allocations.get(m.topic)
            if allocation is not None:
                check, into = allocation
                into.append(check(None if data is None else _whole(data)[0]))
                continue
            if data is None:
                value, strict = None, True
            else:
                try:
                    value, strict = asdict(read_fields(data)), True
                except msgspec.DecodeError:  # not strict JSON, or not an object
                    value, strict = _whole(data)  # raises what the standard library rejects
            text = data.decode() if data is not None else ""  # (None is refused by check_record)
            values.append(value)
            kept.append((m, text, strict))
        except (ValueError, UnicodeDecodeError) as exc:
            dead_letter(m, exc)


def _check_whole(kept) -> list:
    """check_records over the kept messages' whole values (a row, or the ValueError refusing it)."""
    values, errors = [], {}
    for n, (m, _, _) in enumerate(kept):
        try:
            values.append(None if m.value is None else _whole(m.value)[0])
        except ValueError as exc:
            values.append(None)
            errors[n] = exc
    return [errors.get(n, row) for n, row in enumerate(check_records(values))]


CAUGHT_UP_POLL_S = 0.02  # a poll this long that brings nothing: the writer has caught up


ASSIGN_EVERY_S = 10.0  # how often the writer looks for partitions it does not read yet


class KafkaWarehouseWriter:
    """Consumes the workloads, transitions, pods and nodes topics into a Warehouse, exactly once.

    Kafka's own committed offsets are NOT the source of truth: the consumer
    reads every partition of the topics (``_assign``), each from the offset stored in DuckDB
    (or from the beginning when the file has none), and each batch is written
    with the offsets after it in the same transaction.  After that commit the
    offsets are also committed to Kafka, only so that lag shows up in the usual
    tools.  Malformed messages are dead-lettered (stage ``warehouse``) before
    the batch commits (at-least-once: a crash in between may repeat a dead
    letter) and their offsets advance with the batch.

    `security`: extra kafka-python settings for a secured cluster
    (``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username``,
    ``ssl_cafile``, ...), passed to the consumer and the dead-letter producer.
    `pricing`: what the Warehouse keeps the daily cost rows with (rolling.keep_costs).
    """

    def __init__(self, bootstrap_servers, path, topics=(WORKLOADS_TOPIC, TRANSITIONS_TOPIC, PODS_TOPIC, NODES_TOPIC), *,
                 group_id: str = DEFAULT_CONSUMER, batch_size: int = 5000, max_wait_ms: int = 500,
                 security: dict | None = None, client_id: str = "workloadmap-warehouse",
                 commit_to_kafka: bool = True, deadletter_topic: str = DEADLETTER_TOPIC,
                 transitions_topic: str = TRANSITIONS_TOPIC, pods_topic: str = PODS_TOPIC,
                 nodes_topic: str = NODES_TOPIC,
                 snapshot_path: str | os.PathLike | None = None, snapshot_every_s: float = 60.0,
                 on_batch=None, pricing: Pricing | None = None):
        self.bootstrap_servers = bootstrap_servers
        self.topics = tuple(topics)
        self.group_id = group_id
        self.batch_size = batch_size
        self.max_wait_ms = max_wait_ms
        self.security = dict(security or {})
        self.client_id = client_id
        self.commit_to_kafka = commit_to_kafka
        self.deadletter_topic = deadletter_topic
        self.transitions_topic = transitions_topic
        self.pods_topic, self.nodes_topic = pods_topic, nodes_topic
        self.snapshot_path = snapshot_path
        self.snapshot_every_s = snapshot_every_s
        self.on_batch = on_batch  # called with (WriteResult, message count) after each commit
        self.warehouse = Warehouse(path, consumer=group_id, pricing=pricing)
        # One DuckDB thread: a batch is a dozen small statements, and spread over threads
        # they cost more CPU and wait for cores the processors and the broker also want.
        # Measured on 2 cores, 40,000 records: CPU per row 0.166 ms (one thread) against
        # 0.186 (two) in batches of 500, 0.065 against 0.078 in batches of 5,000; at 1,000
        # events/s through the whole pipeline, p99 publish-to-visible 1.67 s against 2.97 s.
        self.warehouse.conn.execute(f"SET threads = {WRITER_THREADS}")
        self.totals = WriteResult()
        self.dead_letters = 0
        self._stop = threading.Event()
        self._pending: list = []
        self._consumer = None
        self._producer = None
        self._last_snapshot = 0.0
        self._closed = False

    # ------------------------------------------------------------------ Kafka clients

    def _connect(self):
        from kafka import KafkaConsumer
        self._consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, group_id=self.group_id, client_id=self.client_id,
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=self.batch_size,
            isolation_level="read_committed",  # the processors publish in transactions
            # a partition with records still buffered is left out of the next fetch, and new
            # records for it wait until that fetch returns: hold fetches 100 ms, not 500
            fetch_max_wait_ms=100,
            **self.security)
        self._assigned = frozenset()
        self._assign()

    def _assign(self) -> None:
        """Read every partition of the topics, each from the offset DuckDB stores for it.

        Why assigned, not subscribed: a warehouse file has one writer (DuckDB allows one), so
        there is nothing to balance, and a group's rebalancing only cost: a writer restarted
        after a crash waited for the dead member's session to expire (45 s) before reading,
        and kafka-python (3.0.12) now and then never finished joining when the topics were
        new.  The group id still names the offsets committed to Kafka (for lag monitoring).
        Partitions the broker does not know yet (a topic still to be created, partitions
        added later) are picked up by later calls (``poll_batch``, every ASSIGN_EVERY_S).
        """
        from kafka.structs import TopicPartition
        partitions = frozenset(TopicPartition(t, p) for t in self.topics
                               for p in self._consumer.partitions_for_topic(t) or ())
        self._assign_checked = time.monotonic()
        if partitions <= self._assigned:
            return
        self._flush()  # what was read so far is written, so DuckDB's offsets are where reading stands
        self._consumer.assign(sorted(partitions))
        stored = self.warehouse.offsets()
        for tp in partitions:
            offset = stored.get((tp.topic, tp.partition))
            if offset is None:
                self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, offset)
        self._assigned = partitions
        log.info("warehouse writer reads %s", sorted((tp.topic, tp.partition) for tp in partitions))

    def _dead_letter_producer(self):
        if self._producer is None:
            from kafka import KafkaProducer
            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all",
                                           client_id=self.client_id + "-deadletter",
                                           max_request_size=records.MAX_OUTPUT_MESSAGE_BYTES, **self.security)
        return self._producer

    # ------------------------------------------------------------------ batches

    def poll_batch(self) -> WriteResult | None:
        """Read up to batch_size messages and write them.

        A batch ends when it is full, after max_wait_ms, or as soon as the writer has caught
        up (a short poll brings nothing more): the processors' records become readable a
        transaction at a time, so waiting for more after a transaction's records only adds
        latency, while under load the polls keep bringing records and batches grow large.
        """
        if self._consumer is None:
            self._connect()
        elif time.monotonic() - self._assign_checked >= ASSIGN_EVERY_S or not self._assigned:
            self._assign()
        if not self._assigned:  # none of the topics exists yet
            self._stop.wait(self.max_wait_ms / 1000)
            return None
        deadline = time.monotonic() + self.max_wait_ms / 1000
        while len(self._pending) < self.batch_size and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            timeout = min(left, CAUGHT_UP_POLL_S) if self._pending else left
            polled = self._consumer.poll(timeout_ms=max(1, int(timeout * 1000)),
                                         max_records=self.batch_size - len(self._pending))
            if not polled and self._pending:
                break
            for messages in polled.values():
                self._pending.extend(messages)
        result = self._flush()
        self._maybe_snapshot()
        return result

    def _flush(self) -> WriteResult | None:
        if not self._pending:
            return None
        messages, self._pending = self._pending, []
        pods, nodes = [], []
        rows, texts, transitions, dead, offsets, texts_are_json = check_messages(
            messages, self.transitions_topic,
            allocations=allocation_topics(pods, nodes, self.pods_topic, self.nodes_topic))
        if dead:
            producer = self._dead_letter_producer()
            for letter in dead:
                producer.send(self.deadletter_topic, key=letter.key, value=records.encode(letter.to_dict()))
            producer.flush()
            self.dead_letters += len(dead)
        result = self.warehouse.write_checked(rows, texts, transitions, offsets, texts_are_json=texts_are_json,
                                              pod_rows=pods, node_rows=nodes)
        self.totals += result
        if self.commit_to_kafka:
            self._commit_kafka(offsets)
        if self.on_batch is not None:
            self.on_batch(result, len(messages))
        return result

    def _commit_kafka(self, offsets) -> None:
        from kafka.structs import OffsetAndMetadata, TopicPartition
        try:
            self._consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                   for (t, p), o in offsets.items()})
        except Exception as exc:  # monitoring only: DuckDB holds the truth
            log.warning("committing offsets to Kafka failed (DuckDB has them): %s", exc)

    def _maybe_snapshot(self) -> None:
        if self.snapshot_path is None:
            return
        now = time.monotonic()
        if now - self._last_snapshot >= self.snapshot_every_s:
            self.warehouse.snapshot(self.snapshot_path)
            self._last_snapshot = now

    # ------------------------------------------------------------------ lifecycle

    def run(self, stop_event: threading.Event | None = None) -> WriteResult:
        """Write batches until `stop_event` is set or stop() is called; then close."""
        try:
            while not self._stop.is_set() and not (stop_event is not None and stop_event.is_set()):
                self.poll_batch()
        finally:
            self.close()
        return self.totals

    def stop(self) -> None:
        """Ask run() to finish the batch in hand and close (safe from a signal handler)."""
        self._stop.set()

    def close(self) -> None:
        """Write what is in hand and release everything; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._flush()
        finally:
            if self._consumer is not None:
                self._consumer.close(autocommit=False)
                self._consumer = None
            if self._producer is not None:
                self._producer.close()
                self._producer = None
            if self.snapshot_path is not None:
                self.warehouse.snapshot(self.snapshot_path)
            self.warehouse.close()
