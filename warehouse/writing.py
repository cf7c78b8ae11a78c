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

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pyarrow as pa

from workloadmap.catalog import records
from workloadmap.catalog.records import (
    DEADLETTER_TOPIC, DELETED, EVENT_TYPES, TRANSITIONS_TOPIC, WORKLOADS_TOPIC, DeadLetter)
from workloadmap.warehouse.schema import migrate

log = logging.getLogger(__name__)

DEFAULT_CONSUMER = "workloadmap-warehouse"
WAL_AUTOCHECKPOINT = "256MB"
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

    def __iadd__(self, other: "WriteResult") -> "WriteResult":
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


# --------------------------------------------------------------------------- validation


def _time(value, field: str) -> datetime:
    if not isinstance(value, str):
        raise MalformedRecord(records.WRONG_TYPES, f"{field} is {type(value).__name__}, not a timestamp string")
    try:
        t = records.parse_time(value)
    except ValueError:
        raise MalformedRecord(records.WRONG_TYPES, f"{field} {value[:40]!r} is not an RFC 3339 timestamp") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


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

# Why keyed tables: the history (workload_states, interval_history, transitions) only grows, so a
# batch must never read it on its usual path.  What a batch needs of the past is each touched
# workload's latest state and open interval: workload_current holds them for the live workloads
# (one row each, found with a join on the batch's keys; the live set does not grow with the
# history), and deleted_workloads knows, by a 64-bit key and its ART index, which workloads were
# deleted.  Only a state older than its workload's latest one, or one of a deleted workload (a
# late or repeated record), goes to the exact path that reads that workload's history.

_WKEY = "md5_number_lower(cluster || '/' || uid)"  # schema.WORKLOAD_KEY

# Batch rows, first occurrence of each dedup key, with their workload's latest state when it is live.
_CANDIDATES = f"""
CREATE OR REPLACE TEMP TABLE wm_cand AS
SELECT b.*, md5_number_lower(b.cluster || '/' || b.uid) AS wkey, c.uid IS NOT NULL AS live, c.observed_at AS cur_at, c.version_key AS cur_vk
FROM (
    SELECT * FROM wm_batch
    QUALIFY row_number() OVER (PARTITION BY cluster, uid, version_key, deleted ORDER BY pos) = 1
) b
LEFT JOIN workload_current c ON c.cluster = b.cluster AND c.uid = b.uid
"""

# Drop the live workloads' current state seen again; flag what needs the exact path: states older
# than their workload's latest, and states of workloads deleted before (keys given as literals, so
# that DuckDB looks them up in the ART index of deleted_workloads).
_NEW_STATES = """
CREATE OR REPLACE TEMP TABLE wm_new_states AS
SELECT * EXCLUDE (wkey, cur_at, cur_vk),
       (live AND observed_at < cur_at) OR (NOT live AND list_contains({seen}::UBIGINT[], wkey)) AS slow
FROM wm_cand
WHERE NOT (live AND version_key = cur_vk AND NOT deleted)
"""

# The exact path: a flagged state already in the history is a duplicate (reads the history of
# the flagged workloads only; rare: replays, late records).
_SLOW_DUPLICATES = """
DELETE FROM wm_new_states n
WHERE n.slow AND EXISTS (
    SELECT 1 FROM workload_states s
    WHERE s.cluster = n.cluster AND s.uid = n.uid AND s.version_key = n.version_key AND s.deleted = n.deleted)
"""

_INSERT_STATES = f"""
INSERT INTO workload_states BY NAME
SELECT ? + row_number() OVER (ORDER BY pos) AS seq, {_IDENT}, resource_version, version_key, generation, origin,
       creation_timestamp, observed_at, event_type, deleted, status, phase, {_DEMAND},
       json_extract(record, '$.components') AS components, record::JSON AS record
FROM wm_new_states
"""

# Per touched workload, in time order: its open interval (the anchor, from workload_current) and
# its new states; or, for a workload with a flagged new state (rebuilt), all its states.
_SEQUENCE = f"""
CREATE OR REPLACE TEMP TABLE wm_sequence AS
WITH new AS (
    SELECT *, ? + row_number() OVER (ORDER BY pos) AS seq FROM wm_new_states
),
rebuild AS (SELECT DISTINCT cluster, uid FROM new WHERE slow)
SELECT {_IDENT}, status, valid_from AS t, from_seq AS seq, NULL::VARCHAR AS version_key, {_DEMAND},
       true AS is_anchor, false AS rebuilt
FROM workload_current a
WHERE EXISTS (SELECT 1 FROM new n WHERE n.cluster = a.cluster AND n.uid = a.uid AND NOT n.slow)
  AND NOT EXISTS (SELECT 1 FROM rebuild r WHERE r.cluster = a.cluster AND r.uid = a.uid)
UNION ALL
SELECT {_IDENT}, status, observed_at, seq, version_key, {_DEMAND}, false, false
FROM new n
WHERE NOT EXISTS (SELECT 1 FROM rebuild r WHERE r.cluster = n.cluster AND r.uid = n.uid)
"""

_SEQUENCE_REBUILT = f"""
INSERT INTO wm_sequence
SELECT {_IDENT}, status, observed_at, seq, version_key, {_DEMAND}, false, true
FROM workload_states s
WHERE EXISTS (SELECT 1 FROM wm_new_states n WHERE n.slow AND n.cluster = s.cluster AND n.uid = s.uid)
"""

# Interval starts: the first state, and every state whose status or demand differs from the
# previous one; each lasts until the next start (NULL for the last).  `latest` marks the
# workload's latest state (what workload_current keeps).
_STARTS = """
CREATE OR REPLACE TEMP TABLE wm_starts AS
SELECT *, lead(t) OVER (PARTITION BY cluster, uid ORDER BY t, seq) AS valid_to
FROM (
    SELECT *, lag(status) OVER w AS p_status, lag(pods) OVER w AS p_pods, lag(gpus) OVER w AS p_gpus,
              lag(cpu) OVER w AS p_cpu, lag(memory) OVER w AS p_memory, lag(gpu_resources) OVER w AS p_gpu_res,
              row_number() OVER w AS n,
              last_value(seq) OVER l AS latest_seq, last_value(t) OVER l AS latest_at,
              last_value(version_key) OVER l AS latest_vk
    FROM wm_sequence
    WINDOW w AS (PARTITION BY cluster, uid ORDER BY t, seq),
           l AS (PARTITION BY cluster, uid ORDER BY t, seq ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
)
WHERE n = 1 OR status IS DISTINCT FROM p_status OR pods IS DISTINCT FROM p_pods OR gpus IS DISTINCT FROM p_gpus
   OR cpu IS DISTINCT FROM p_cpu OR memory IS DISTINCT FROM p_memory OR gpu_resources IS DISTINCT FROM p_gpu_res
"""

_DELETE_REBUILT = """
DELETE FROM interval_history i
WHERE EXISTS (SELECT 1 FROM wm_new_states n WHERE n.slow AND n.cluster = i.cluster AND n.uid = i.uid)
"""

# Intervals that will not change again: the closed ones (anchors included) and final Deleted ones.
_INSERT_HISTORY = f"""
INSERT INTO interval_history BY NAME
SELECT {_IDENT}, status, t AS valid_from, valid_to, {_DEMAND}, seq AS from_seq
FROM wm_starts WHERE valid_to IS NOT NULL OR status = '{DELETED}'
"""

_INSERT_DELETED = f"""
INSERT OR IGNORE INTO deleted_workloads
SELECT DISTINCT {_WKEY} FROM wm_starts WHERE valid_to IS NULL AND status = '{DELETED}'
"""

_DELETE_CURRENT = """
DELETE FROM workload_current c
WHERE EXISTS (SELECT 1 FROM wm_starts s WHERE s.cluster = c.cluster AND s.uid = c.uid)
"""

# The latest state and open interval of every touched workload that is not deleted.
_INSERT_CURRENT = f"""
INSERT INTO workload_current BY NAME
SELECT {_IDENT}, latest_seq AS seq, latest_at AS observed_at, latest_vk AS version_key,
       status, t AS valid_from, {_DEMAND}, seq AS from_seq
FROM wm_starts WHERE valid_to IS NULL AND status <> '{DELETED}'
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

_UPSERT_OFFSET = """
INSERT INTO consumer_offsets VALUES (?, ?, ?, ?, ?)
ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = excluded.next_offset,
                                                       updated_at = excluded.updated_at
"""


class Warehouse:
    """The DuckDB history, opened read-write and migrated to the latest schema.

    One instance per file and process (DuckDB's rule).  ``write`` is the only
    mutation; queries from the same process go through ``cursor()``; other
    processes read a ``snapshot``.
    """

    def __init__(self, path: str | os.PathLike, *, consumer: str = DEFAULT_CONSUMER,
                 wal_autocheckpoint: str = WAL_AUTOCHECKPOINT):
        self.path = Path(path)
        self.consumer = consumer
        self.conn = duckdb.connect(str(self.path))
        # DuckDB's default (16MB of WAL) checkpoints every few batches, which cost
        # more than the batches themselves and fragments the file; a larger WAL
        # only lengthens the replay after a crash.
        self.conn.execute(f"SET wal_autocheckpoint = '{wal_autocheckpoint}'")
        migrate(self.conn)
        self._next_seq = self.conn.execute("SELECT coalesce(max(seq), 0) FROM workload_states").fetchone()[0]
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ writing

    def write(self, records: list[dict] = (), transitions: list[dict] = (),
              offsets: dict[tuple[str, int], int] | None = None, *,
              texts: list[str] | None = None) -> WriteResult:
        """Insert one batch in one transaction; return what was new and what was a duplicate.

        `records` are workload records, `transitions` status transitions (both
        as published on their topics); `offsets` maps (topic, partition) to the
        next offset to read after this batch, stored for ``self.consumer``.
        `texts` optionally gives each record's JSON text as received (saves
        re-encoding; it is what ``record`` stores).  Raises MalformedRecord,
        before touching the file, if any record or transition is malformed.
        """
        state_rows = [check_record(r) for r in records]
        transition_rows = [check_transition(t) for t in transitions]
        if texts is None:
            texts = [json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in records]
        elif len(texts) != len(records):
            raise ValueError("texts must give one JSON text per record")
        return self.write_checked(state_rows, texts, transition_rows, offsets)

    def write_checked(self, state_rows: list[tuple], texts: list[str], transition_rows: list[tuple],
                      offsets: dict[tuple[str, int], int] | None = None) -> WriteResult:
        """``write`` for rows already validated by check_record / check_transition (the Kafka path)."""
        with self._lock:
            return self._write(state_rows, texts, transition_rows, offsets or {})

    def _write(self, state_rows, texts, transition_rows, offsets) -> WriteResult:
        result = WriteResult()
        conn = self.conn
        conn.execute("BEGIN TRANSACTION")
        try:
            if state_rows:
                cols = _columns(state_rows, _STATE_SCHEMA)
                cols["record"] = pa.array(texts, type=pa.string())
                cols["pos"] = pa.array(range(len(state_rows)), type=pa.int64())
                conn.register("wm_batch", pa.table(cols))
                try:
                    self._apply_states(result, len(state_rows))
                finally:
                    conn.unregister("wm_batch")
            if transition_rows:
                cols = _columns(transition_rows, _TRANSITION_SCHEMA)
                cols["pos"] = pa.array(range(len(transition_rows)), type=pa.int64())
                conn.register("wm_transitions", pa.table(cols))
                try:
                    at = [r[9] for r in transition_rows]
                    n = conn.execute(_INSERT_TRANSITIONS, {"lo": min(at), "hi": max(at)}).fetchone()[0]
                finally:
                    conn.unregister("wm_transitions")
                result.transitions_inserted = n
                result.transition_duplicates = len(transition_rows) - n
            now = datetime.now(timezone.utc)
            for (topic, partition), next_offset in sorted(offsets.items()):
                conn.execute(_UPSERT_OFFSET, [self.consumer, topic, int(partition), int(next_offset), now])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self._next_seq += result.inserted
        return result

    def _apply_states(self, result: WriteResult, batch_len: int) -> None:
        conn = self.conn
        conn.execute(_CANDIDATES).fetchall()
        # Workloads not live: brand new, or deleted before (then the exact path); the ART index
        # of deleted_workloads answers for the batch's keys, given as literals.
        keys = [k for (k,) in conn.execute("SELECT DISTINCT wkey FROM wm_cand WHERE NOT live").fetchall()]
        seen = []
        if keys:
            seen = [k for (k,) in conn.execute(
                f"SELECT key FROM deleted_workloads WHERE key IN ({', '.join(map(str, keys))})").fetchall()]
        conn.execute(_NEW_STATES.format(seen="[" + ", ".join(map(str, seen)) + "]")).fetchall()
        slow, n = conn.execute("SELECT count(*) FILTER (WHERE slow), count(*) FROM wm_new_states").fetchall()[0]
        if slow:
            conn.execute(_SLOW_DUPLICATES).fetchall()
            slow, n = conn.execute("SELECT count(*) FILTER (WHERE slow), count(*) FROM wm_new_states").fetchall()[0]
        result.duplicates = batch_len - n
        if not n:
            return
        result.inserted = conn.execute(_INSERT_STATES, [self._next_seq]).fetchall()[0][0]
        conn.execute(_SEQUENCE, [self._next_seq]).fetchall()
        if slow:
            conn.execute(_SEQUENCE_REBUILT).fetchall()
        conn.execute(_STARTS).fetchall()
        if slow:
            conn.execute(_DELETE_REBUILT).fetchall()
        opened, deletions = conn.execute(
            f"SELECT count(*) FILTER (WHERE NOT is_anchor), count(*) FILTER (WHERE valid_to IS NULL AND status = "
            f"'{DELETED}') FROM wm_starts").fetchall()[0]
        result.intervals_opened = opened
        conn.execute(_INSERT_HISTORY).fetchall()
        if deletions:
            conn.execute(_INSERT_DELETED).fetchall()
        conn.execute(_DELETE_CURRENT).fetchall()
        conn.execute(_INSERT_CURRENT).fetchall()

    # ------------------------------------------------------------------ reading

    def offsets(self, consumer: str | None = None) -> dict[tuple[str, int], int]:
        """(topic, partition) -> next offset to read, as stored for `consumer`."""
        rows = self.conn.execute(
            "SELECT topic, partition, next_offset FROM consumer_offsets WHERE consumer = ?",
            [consumer or self.consumer]).fetchall()
        return {(t, p): o for t, p, o in rows}

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection for queries in this process (sees committed batches)."""
        return self.conn.cursor()

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
            self.conn.execute("ATTACH ? AS snapshot_copy", [str(tmp)])
            try:
                name = self.conn.execute("SELECT current_database()").fetchone()[0]
                self.conn.execute(f'COPY FROM DATABASE "{name.replace(chr(34), chr(34) * 2)}" TO snapshot_copy')
            finally:
                self.conn.execute("DETACH snapshot_copy")
        os.replace(tmp, dest)
        return dest

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> "Warehouse":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------- Kafka


CAUGHT_UP_POLL_S = 0.02  # a poll this long that brings nothing: the writer has caught up


class KafkaWarehouseWriter:
    """Consumes the workloads and transitions topics into a Warehouse, exactly once.

    Kafka's own committed offsets are NOT the source of truth: on every
    partition assignment the consumer seeks to the offsets stored in DuckDB
    (or to the beginning when the file has none), and each batch is written
    with the offsets after it in the same transaction.  After that commit the
    offsets are also committed to Kafka, only so that lag shows up in the usual
    tools.  Malformed messages are dead-lettered (stage ``warehouse``) before
    the batch commits (at-least-once: a crash in between may repeat a dead
    letter) and their offsets advance with the batch.

    `security`: extra kafka-python settings for a secured cluster
    (``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username``,
    ``ssl_cafile``, ...), passed to the consumer and the dead-letter producer.
    """

    def __init__(self, bootstrap_servers, path, topics=(WORKLOADS_TOPIC, TRANSITIONS_TOPIC), *,
                 group_id: str = DEFAULT_CONSUMER, batch_size: int = 5000, max_wait_ms: int = 500,
                 security: dict | None = None, client_id: str = "workloadmap-warehouse",
                 commit_to_kafka: bool = True, deadletter_topic: str = DEADLETTER_TOPIC,
                 transitions_topic: str = TRANSITIONS_TOPIC,
                 snapshot_path: str | os.PathLike | None = None, snapshot_every_s: float = 60.0,
                 on_batch=None):
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
        self.snapshot_path = snapshot_path
        self.snapshot_every_s = snapshot_every_s
        self.on_batch = on_batch  # called with (WriteResult, message count) after each commit
        self.warehouse = Warehouse(path, consumer=group_id)
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
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        writer = self

        class Seeker(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                writer._flush()  # write what was read from them before they go

            def on_partitions_assigned(self, assigned):
                stored = writer.warehouse.offsets()
                for tp in assigned:
                    offset = stored.get((tp.topic, tp.partition))
                    if offset is None:
                        writer._consumer.seek_to_beginning(tp)
                    else:
                        writer._consumer.seek(tp, offset)
                log.info("warehouse writer assigned %s", sorted((tp.topic, tp.partition) for tp in assigned))

        self._consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, group_id=self.group_id, client_id=self.client_id,
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=self.batch_size,
            isolation_level="read_committed",  # the processors publish in transactions
            # a partition with records still buffered is left out of the next fetch, and new
            # records for it wait until that fetch returns: hold fetches 100 ms, not 500
            fetch_max_wait_ms=100,
            **self.security)
        self._consumer.subscribe(list(self.topics), listener=Seeker())

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
        rows, texts, transitions, dead, offsets = [], [], [], [], {}
        for m in messages:
            key = (m.topic, m.partition)
            offsets[key] = max(offsets.get(key, 0), m.offset + 1)
            try:
                value = records.decode(m.value) if m.value is not None else None
                if m.topic == self.transitions_topic:
                    transitions.append(check_transition(value))
                else:
                    rows.append(check_record(value))
                    texts.append(m.value.decode())
            except (ValueError, UnicodeDecodeError) as exc:
                if isinstance(exc, MalformedRecord):
                    reason, detail = exc.reason, exc.detail
                else:
                    reason, detail = records.MALFORMED_JSON, str(exc)[:200]
                dead.append(DeadLetter(STAGE, reason, detail, m.value or b"", key=m.key, topic=m.topic,
                                       partition=m.partition, offset=m.offset))
        if dead:
            producer = self._dead_letter_producer()
            for letter in dead:
                producer.send(self.deadletter_topic, key=letter.key, value=records.encode(letter.to_dict()))
            producer.flush()
            self.dead_letters += len(dead)
        result = self.warehouse.write_checked(rows, texts, transitions, offsets)
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
