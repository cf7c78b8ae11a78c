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
with ``INSERT ... SELECT FROM <arrow table>``.  What a batch needs of the past
is read by key, never by scanning the history; the bookkeeping of the batch's
own rows (dedup, interval starts) is a plain loop in Python, cheaper than a
window statement over a few hundred rows.

``Warehouse`` is the writer over a file, fed rows already checked
(``checking.py``); ``consuming.KafkaWarehouseWriter`` feeds it from the topics.
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from workloadmap.catalog.records import DELETED

from . import allocating, costing, interrupting, rolling, scanning
from .checking import EPOCH, MICROSECOND, check_records, check_transition, no_cyclic_collection
from .deletions import DeletedWorkloads
from .pricing import Pricing
from .querying import WarehouseUnavailable
from .scanning import arrow_over, execute_over
from .schema import migrate

log = logging.getLogger(__name__)

DEFAULT_CONSUMER = "workloadmap-warehouse"
CHECKPOINT_WAL_BYTES = 32 * 2**20  # see Warehouse._checkpoint
WAL_AUTOCHECKPOINT = "1GB"  # DuckDB's own, only for a single batch larger than that
CATALOG = "warehouse"  # the name the writer's connection gives the file (see Warehouse.__init__)
ROW_GROUP_ROWS = 2048  # see Warehouse.__init__


@dataclass
class WriteResult:
    inserted: int = 0  # new workload states
    duplicates: int = 0  # records already in the history (or twice in the batch)
    transitions_inserted: int = 0
    transition_duplicates: int = 0
    pods: int = 0  # pod records that changed a pod's intervals (allocating.py)
    pod_duplicates: int = 0  # pod records dropped: repeated, late, or of a pod that ended
    nodes: int = 0
    node_duplicates: int = 0

    def __iadd__(self, other: "WriteResult") -> "WriteResult":
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


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
# is a plain loop in Python: a window statement costs more than the whole loop on so few rows
# (bench/RESULTS.md).

_CURRENT_COLUMNS = (f"cluster, uid, seq, epoch_us(observed_at), version_key, api_version, kind, namespace, name, "
                    f"definition, framework, status, epoch_us(valid_from), {_DEMAND}, from_seq, epoch_us(rolled_to)")
_CURRENT_OF_BATCH = f"""
SELECT {_CURRENT_COLUMNS} FROM workload_current c
WHERE EXISTS (SELECT 1 FROM wm_rows k WHERE k.cluster = c.cluster AND k.uid = c.uid)
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
FROM wm_rows
"""

_DELETE_CURRENT = """
DELETE FROM workload_current c
WHERE EXISTS (SELECT 1 FROM wm_rows t WHERE t.cluster = c.cluster AND t.uid = c.uid)
"""

# Transitions are deduplicated on (cluster, uid, transitioned_at, to_status): inside the batch in
# Python (the first of each key: a window statement's hash tables cost more than the whole loop), then
# against the history, where the batch's range of instants ($lo, $hi, constants) lets DuckDB skip the
# row groups outside it (transitions arrive in about time order), so only recent row groups are read.
# The rows go in in arrival order: the transitions feed's cursor is the rowid and promises it.
_INSERT_TRANSITIONS = """
INSERT INTO transitions BY NAME
SELECT * EXCLUDE (pos) FROM wm_rows b
WHERE NOT EXISTS (
    SELECT 1 FROM transitions t
    WHERE t.transitioned_at >= $lo AND t.transitioned_at <= $hi
      AND t.cluster = b.cluster AND t.uid = b.uid AND t.transitioned_at = b.transitioned_at
      AND t.to_status = b.to_status)
ORDER BY pos
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
    """A table's rows as tuples: column by column through Arrow, cheaper than DuckDB's fetchall."""
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


# One statement for all the batch's partitions, since each statement has a fixed cost and a writer
# reads a dozen partitions: an UPDATE of those the file has already (an upsert's conflict handling
# costs more than the update itself), an upsert for a partition's first batch ({rows} is
# "(?, ?, ?, ?, ?)" once per partition, no partition twice).
_UPDATE_OFFSETS = """
UPDATE consumer_offsets o SET next_offset = b.next_offset, updated_at = $now FROM wm_rows b
WHERE o.consumer = $consumer AND o.topic = b.topic AND o.partition = b.partition
"""
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



def _unavailable(path: Path, exc: Exception) -> str:
    """Why the writer cannot open `path`, in one line: held by another process, not writable,
    not a DuckDB file (or a damaged one)."""
    text = str(exc).splitlines()[0]
    if "lock" in text.lower():
        return f"{path} is held by another process (DuckDB lets one process write a file): {text}"
    if not os.access(path.parent if not path.exists() else path, os.W_OK) or "read-only" in text.lower():
        return f"{path} cannot be written: {text}"
    if path.exists():
        return f"{path} is not a workloadmap warehouse this DuckDB can open (damaged, or another kind of file): {text}"
    return f"{path}: {text}"

class MemoryLimitError(ValueError):
    """A memory limit DuckDB does not take (not a size)."""


def limit_memory(conn, memory_limit: str) -> None:
    """Bound DuckDB's memory on `conn`'s database (``memory_limit``, e.g. ``2GB``); MemoryLimitError
    naming the value when it is not a size.

    Why: DuckDB keeps the blocks a process read or wrote in its buffer pool up to its memory_limit,
    80% of the machine's memory by default, and the writer touches new blocks of the history with
    every batch, so a long-running writer's memory grows with the file toward that default
    (bench/writer_bench.py --minutes).  Under the limit DuckDB evicts them (written blocks are in
    the file; what a query needs beyond it spills to a temporary file)."""
    try:
        conn.execute("SET memory_limit = ?", [str(memory_limit)])
    except duckdb.Error as exc:
        raise MemoryLimitError(f"memory limit {memory_limit!r} is not a size DuckDB takes (e.g. 2GB, 512MiB): "
                               f"{str(exc).splitlines()[0]}") from None


def check_memory_limit(memory_limit: str | None) -> None:
    """MemoryLimitError now, before a service connects to anything, for a limit Warehouse would refuse."""
    if memory_limit:
        with duckdb.connect() as conn:
            limit_memory(conn, memory_limit)


class Warehouse:
    """The DuckDB history, opened read-write and migrated to the latest schema.

    One instance per file and process (DuckDB's rule).  ``write`` is the only
    mutation; queries from the same process go through ``cursor()``; other
    processes read a ``snapshot``.  `memory_limit` bounds DuckDB's memory
    (``limit_memory``); None keeps DuckDB's default.
    """

    def __init__(self, path: str | os.PathLike, *, consumer: str = DEFAULT_CONSUMER, pricing: Pricing | None = None,
                 memory_limit: str | None = None):
        self.path = Path(path)
        self.consumer = consumer
        self.pricing = pricing  # what the kept daily cost rows are priced with (rolling.keep_costs)
        # Row groups of ROW_GROUP_ROWS (DuckDB's smallest): a batch under load fills one, so DuckDB
        # writes its rows straight into the file at commit instead of into the WAL and then the file
        # again at the next checkpoint (the cost to readers is in bench/RESULTS.md).
        began, wal = time.monotonic(), self._wal_bytes()
        self.conn = interrupting.track(duckdb.connect())
        try:
            self.conn.execute(f"ATTACH ? AS {CATALOG} (ROW_GROUP_SIZE {ROW_GROUP_ROWS})", [str(self.path)])
        except duckdb.Error as exc:
            self.conn.close()
            raise WarehouseUnavailable(_unavailable(self.path, exc)) from None
        self.conn.execute(f"USE {CATALOG}")
        # Where DuckDB spills what a query needs beyond its memory limit: beside the file, as for a file
        # it opens itself (attached to an in-memory database, it would be ./.tmp, in whatever the
        # working directory is: read-only in the chart's containers).
        self.conn.execute("SET temp_directory = ?", [f"{self.path}.tmp"])
        if memory_limit:
            try:
                limit_memory(self.conn, memory_limit)
            except MemoryLimitError:
                self.conn.close()
                raise
        # Checkpoints are the writer's (``_checkpoint``, after a batch), not DuckDB's automatic
        # one inside a commit, and without its vacuum (see ``_checkpoint``).
        self.conn.execute(f"SET wal_autocheckpoint = '{WAL_AUTOCHECKPOINT}'")
        self.conn.execute("SET max_vacuum_tasks = 0")
        scanning.prepare(self.conn)
        migrate(self.conn)
        self._next_seq = self.conn.execute("SELECT coalesce(max(seq), 0) FROM state_history").fetchone()[0]
        # The daily rollup (rolling.py): how far it is, and the latest observed_at seen (its horizon).
        self._rolled_seq, self._horizon = self.conn.execute(rolling.STATE).fetchone()
        self._latest_observed = self.conn.execute(
            "SELECT epoch_us(max(observed_at)) FROM workload_current").fetchone()[0]
        self._deleted = DeletedWorkloads(self.conn)
        self._allocations = allocating.Allocations(self.conn)
        self._offset_partitions = set(self.offsets())  # the partitions whose offsets the file has (_store_offsets)
        self._lock = threading.Lock()
        # how long a restart's open took, and the WAL it replayed (a killed writer's: up to CHECKPOINT_WAL_BYTES)
        log.info("opened %s in %.2f s (WAL of %d bytes replayed)", self.path, time.monotonic() - began, wal)
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
        with self._lock, no_cyclic_collection():
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
        committed and visible, and without DuckDB's vacuum: the vacuum merges the small row groups
        earlier checkpoints left, rewriting up to a whole row group of the history at a time, and
        those checkpoints were the pipeline's latency tail (bench/RESULTS.md).

        Without the vacuum, a row group of workload_current (whose rows a batch deletes and inserts
        again) would live on, mostly deleted rows, as long as one of its workloads stays untouched,
        and its scans would grow with the history.  So once it stores more than twice its live
        rows, they are written again first (the live set, not the history), and the checkpoint
        drops its old row groups, wholly deleted."""
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
                    for name in ("wm_slow", "wm_rebuild"):  # the exact path's (scanning.py for the others)
                        conn.unregister(name)
            # nodes first: the pod intervals a batch closes are split by their nodes' intervals (allocating.py)
            if node_rows:
                result.nodes, result.node_duplicates = self._allocations.apply_nodes(conn, node_rows)
            if pod_rows:
                result.pods, result.pod_duplicates = self._allocations.apply_pods(conn, pod_rows)
            if transition_rows:
                seen: set[tuple] = set()
                first = [r for r in transition_rows if not ((r[0], r[1], r[9], r[8]) in seen
                                                            or seen.add((r[0], r[1], r[9], r[8])))]
                cols = _columns(first, _TRANSITION_SCHEMA)
                cols["pos"] = pa.array(range(len(first)), type=pa.int64())
                at = [r[9] for r in first]
                bounds = {"lo": EPOCH + min(at) * MICROSECOND, "hi": EPOCH + max(at) * MICROSECOND}
                n = execute_over(conn, _INSERT_TRANSITIONS, pa.table(cols), bounds).fetchone()[0]
                result.transitions_inserted = n
                result.transition_duplicates = len(transition_rows) - n
            stored = {(topic, int(partition)): int(next_offset)
                      for (topic, partition), next_offset in sorted(offsets.items())}
            if stored:
                self._store_offsets(stored)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            self._allocations.after_rollback(conn)
            raise
        self._allocations.after_commit(conn)
        self._offset_partitions.update(stored)
        if self._deleted.full:
            self._deleted.load(conn)
        return result

    def _store_offsets(self, stored: dict[tuple[str, int], int]) -> None:
        """Store the offsets after the batch, in its transaction (see _UPDATE_OFFSETS)."""
        conn, now = self.conn, datetime.now(timezone.utc)
        known = [(key, offset) for key, offset in stored.items() if key in self._offset_partitions]
        if known:
            rows = pa.table({"topic": pa.array([t for (t, _), _ in known], pa.string()),
                             "partition": pa.array([p for (_, p), _ in known], pa.int32()),
                             "next_offset": pa.array([o for _, o in known], pa.int64())})
            (updated,), = execute_over(conn, _UPDATE_OFFSETS, rows, {"now": now, "consumer": self.consumer}).fetchall()
            if updated == len(known):  # (else a partition's first row went with a batch rolled back: upsert all)
                stored = {key: offset for key, offset in stored.items() if key not in self._offset_partitions}
        if stored:
            params = []
            for (topic, partition), next_offset in stored.items():
                params += [self.consumer, topic, partition, next_offset, now]
            conn.execute(_UPSERT_OFFSETS.format(rows=", ".join(["(?, ?, ?, ?, ?)"] * len(stored))), params)

    def _apply_states(self, result: WriteResult, rows: list[tuple], texts: list[str],
                      texts_are_json: bool = False) -> None:
        conn = self.conn
        # Dedup inside the batch: the first occurrence of each (cluster, uid, version_key, deleted).
        first: dict[tuple, int] = {}
        for i, r in enumerate(rows):
            first.setdefault((r[_C], r[_U], r[_VK], r[_DEL]), i)
        keys = {(r[_C], r[_U]) for r in rows}
        current = {(c[0], c[1]): c for c in _tuples(
            arrow_over(conn, _CURRENT_OF_BATCH, pa.table(_columns(sorted(keys), _KEY_SCHEMA))))}
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
        # JSON without parsing them again (a string array wrapped as one: pa.array builds it slower).
        record = pa.array([texts[i] for i in new] if len(new) < len(texts) else texts, type=pa.string())
        cols["record"] = pa.ExtensionArray.from_storage(pa.json_(), record) if texts_are_json else record
        cols["seq"] = pa.array(range(seq0 + 1, seq0 + 1 + len(new)), type=pa.int64())
        new_states = pa.table(cols)
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
        closed, latest_rows, deleted_keys = [], [], []
        for key, workload_steps in steps.items():
            starts = _intervals(workload_steps)  # sorts the steps by (t, seq)
            latest = workload_steps[-1]
            for (t, seq, _, ident, status, demand, _, rolled_to), valid_to in starts:
                row = (*ident, status, t, valid_to, *demand, seq, rolled_to)
                if valid_to is not None or status == DELETED:
                    closed.append(row)  # no longer changes (a final Deleted interval stays open)
                else:
                    latest_rows.append((latest[1], latest[0], latest[6], *row))
            if starts[-1][0][4] == DELETED:
                deleted_keys.append(workload_key(*key))
        execute_over(conn, _INSERT_STATES, new_states).fetchall()
        self._next_seq = seq0 + len(new)
        latest_observed = max(rows[i][_OBS] for i in new)
        if self._latest_observed is None or latest_observed > self._latest_observed:
            self._latest_observed = latest_observed
        if closed:
            execute_over(conn, "INSERT INTO interval_history BY NAME SELECT *, $seq AS appended_seq FROM wm_rows",
                         pa.table(_columns(closed, _INTERVAL_SCHEMA)), {"seq": self._next_seq}).fetchall()
        touched = [k for k in steps if k in current or k in rebuild]
        if touched:
            execute_over(conn, _DELETE_CURRENT, pa.table(_columns(touched, _KEY_SCHEMA))).fetchall()
        if latest_rows:
            execute_over(conn, "INSERT INTO workload_current BY NAME SELECT * EXCLUDE (valid_to) FROM wm_rows",
                         pa.table(_columns(latest_rows, _CURRENT_SCHEMA))).fetchall()
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
                    execute_over(conn, f"{verb} INTO deleted_workloads SELECT key FROM wm_rows",
                                 pa.table({"key": pa.array(keys, type=pa.uint64())})).fetchall()

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
