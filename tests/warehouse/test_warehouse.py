"""warehouse/: schema migrations, batch writes, dedup, intervals, offsets, crashes, and the
Kafka writer against a real broker (including SIGKILL mid-stream and restart).

Every test uses a real DuckDB file in tmp_path; the Kafka tests a real broker.
"""

from __future__ import annotations

import collections
import copy
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings, strategies as st

from workloadmap.catalog import Catalog, records
from workloadmap.catalog.registry import bundled_examples
from workloadmap.warehouse import costing, schema, writing
from workloadmap.warehouse.writing import KafkaWarehouseWriter, MalformedRecord, Warehouse

WORKLOADS, TRANSITIONS = records.WORKLOADS_TOPIC, records.TRANSITIONS_TOPIC

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- records


def resolved_examples() -> list[dict]:
    catalog = Catalog.builtin()
    return [catalog.resolve(d).to_dict() for d in bundled_examples()]


EXAMPLES = resolved_examples()
PYTORCHJOB = next(r for r in EXAMPLES if r["kind"] == "PyTorchJob" and r["total"]["gpu"] > 0)


def as_record(resolved: dict, cluster="c1", observed="2025-06-03T09:00:00Z", event="ADDED", **changes) -> dict:
    rec = copy.deepcopy(resolved)
    rec.update(cluster=cluster, observedAt=observed, eventType=event, deleted=event == "DELETED")
    if rec["deleted"]:
        rec["status"], rec["statuses"] = records.DELETED, [records.DELETED]
    rec.update(changes)
    return rec


def lifecycle(uid="uid-1", cluster="c1") -> list[dict]:
    """Initializing -> Running -> Running (same demand) -> scaled -> Completed -> deleted."""
    base = dict(PYTORCHJOB, uid=uid)
    scaled = copy.deepcopy(base["total"])
    scaled["pods"] += 2
    scaled["gpu"] += 16
    scaled["gpuResources"] = {"nvidia.com/gpu": scaled["gpu"]}
    steps = [
        ("ADDED", "Initializing", "09:00", base["total"]),
        ("MODIFIED", "Running", "09:05", base["total"]),
        ("MODIFIED", "Running", "09:20", base["total"]),
        ("MODIFIED", "Running", "10:00", scaled),
        ("MODIFIED", "Completed", "12:00", scaled),
        ("DELETED", "Completed", "13:00", scaled),
    ]
    return [as_record(base, cluster, f"2025-06-03T{hm}:00Z", event, status=status, statuses=[status],
                      total=copy.deepcopy(total), resourceVersion=str(100 + i))
            for i, (event, status, hm, total) in enumerate(steps)]


def intervals(wh: Warehouse, uid="uid-1") -> list[tuple]:
    return wh.cursor().execute("""
        SELECT status, strftime(valid_from, '%H:%M'), strftime(valid_to, '%H:%M'), pods, gpus, gpu_resources
        FROM status_intervals WHERE uid = ? ORDER BY valid_from, from_seq""", [uid]).fetchall()


EXPECTED_LIFECYCLE = [
    ("Initializing", "09:00", "09:05", 4, 32.0, {"nvidia.com/gpu": 32.0}),
    ("Running", "09:05", "10:00", 4, 32.0, {"nvidia.com/gpu": 32.0}),
    ("Running", "10:00", "12:00", 6, 48.0, {"nvidia.com/gpu": 48.0}),
    ("Completed", "12:00", "13:00", 6, 48.0, {"nvidia.com/gpu": 48.0}),
    ("Deleted", "13:00", None, 0, 0.0, {}),
]


# --------------------------------------------------------------------------- schema


def tables(conn) -> set[str]:
    return {t for (t,) in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def test_migrate_from_empty_then_idempotent(tmp_path):
    path = str(tmp_path / "w.duckdb")
    conn = duckdb.connect(path)
    assert schema.migrate(conn) == [m.version for m in schema.MIGRATIONS]
    assert schema.migrate(conn) == []
    assert {"workload_states", "status_intervals", "transitions", "consumer_offsets", "schema_migrations",
            "current_workloads", "interval_gpu_usage"} <= tables(conn)
    conn.close()
    conn = duckdb.connect(path)  # reopened: still at the latest version, nothing re-applied
    assert schema.migrate(conn) == []
    assert schema.current_version(conn) == schema.LATEST_VERSION
    assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(schema.MIGRATIONS)


def test_migrate_v1_to_v2_keeps_data(tmp_path):
    path = tmp_path / "w.duckdb"
    conn = duckdb.connect(str(path))
    assert schema.migrate(conn, target=1) == [1]
    assert "interval_gpu_usage" not in tables(conn)
    conn.execute("""INSERT INTO status_intervals VALUES ('c1', 'u1', 'v1', 'Job', 'ns', 'j', 'job', 'Kubernetes',
        'Running', TIMESTAMPTZ '2025-06-03 09:00:00+00', TIMESTAMPTZ '2025-06-03 11:00:00+00',
        2, 3, 4, 1024, MAP {'nvidia.com/gpu': 2.0, 'nvidia.com/mig-1g.10gb': 1.0}, 1)""")
    conn.close()
    with Warehouse(path) as wh:  # opening migrates to the latest
        assert schema.current_version(wh.conn) == schema.LATEST_VERSION
        usage = wh.cursor().execute(
            "SELECT gpu_resource, gpus, gpu_hours FROM interval_gpu_usage ORDER BY gpu_resource").fetchall()
    assert usage == [("nvidia.com/gpu", 2.0, 4.0), ("nvidia.com/mig-1g.10gb", 1.0, 2.0)]


def test_migrate_v2_to_v3_keys_current_state_and_open_intervals(tmp_path):
    """A file written with the version-2 layout (one status_intervals table, open ones with valid_to
    NULL) opens with its live workloads' open intervals in workload_current, the Deleted ones kept
    in interval_history and their keys in deleted_workloads; the writer then carries on."""
    path = tmp_path / "w.duckdb"
    conn = duckdb.connect(str(path))
    assert schema.migrate(conn, target=2) == [1, 2]
    conn.close()
    recs, other = lifecycle(), lifecycle(uid="uid-2", cluster="c2")
    with Warehouse(path) as wh:  # the version-3 writer writes the same facts as version 2 did
        wh.write(recs + other[:3])
        expected = sorted(map(str, wh.cursor().execute("SELECT * FROM status_intervals").fetchall()))
        states = sorted(map(str, wh.cursor().execute("SELECT * FROM current_workloads").fetchall()))
    # Rewrite the file as version 2 had it: intervals in one table, no keyed tables, the states in
    # a table with their components.
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE v2_intervals AS SELECT * FROM status_intervals")
    for statement in ("DROP VIEW workload_states", "ALTER TABLE state_history RENAME TO workload_states",
                      "ALTER TABLE workload_states ADD COLUMN components JSON",
                      "DROP VIEW status_intervals", "DROP VIEW current_workloads", "DROP TABLE interval_history",
                      "DROP TABLE workload_current", "DROP TABLE deleted_workloads", "DROP TABLE usage_workloads",
                      "DROP TABLE daily_usage", "DROP TABLE usage_rollup", "DROP TABLE daily_costs",
                      "DROP VIEW pod_intervals", "DROP VIEW node_intervals", "DROP TABLE pod_history",
                      "DROP TABLE pod_current", "DROP TABLE ended_pods", "DROP TABLE node_history",
                      "DROP TABLE node_current",
                      "ALTER TABLE v2_intervals RENAME TO status_intervals",
                      schema.MIGRATIONS[0].statements[-1], "DELETE FROM schema_migrations WHERE version >= 3"):
        conn.execute(statement)
    assert schema.current_version(conn) == 2
    conn.close()
    with Warehouse(path) as wh:
        assert schema.current_version(wh.conn) == schema.LATEST_VERSION
        cur = wh.cursor()
        assert sorted(map(str, cur.execute("SELECT * FROM status_intervals").fetchall())) == expected
        assert sorted(map(str, cur.execute("SELECT * FROM current_workloads").fetchall())) == states
        assert cur.execute("SELECT uid, status FROM workload_current").fetchall() == [("uid-2", "Running")]
        assert cur.execute("SELECT count(*) FROM deleted_workloads").fetchone()[0] == 1
        # The writer carries on from the migrated tables; a replay of the deleted workload adds nothing.
        res = wh.write(other[3:] + recs[-2:])
        assert (res.inserted, res.duplicates) == (3, 2)
        assert intervals(wh) == EXPECTED_LIFECYCLE and intervals(wh, "uid-2") == EXPECTED_LIFECYCLE


# What a migration must keep: every table and view a reader sees, compared as sorted rows.
MIGRATED = ("workload_states", "current_workloads", "status_intervals", "consumer_offsets")


def contents(cur, tables) -> dict[str, list[str]]:
    return {t: sorted(map(str, cur.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}


def test_migrate_v3_to_v4_computes_components_from_the_record(tmp_path):
    """A version-3 file (components stored as a column of their own) opens with the same rows,
    components now read from the record; the writer carries on from it."""
    written, old = tmp_path / "written.duckdb", tmp_path / "v3.duckdb"
    recs = example_batch()
    with Warehouse(written) as wh:
        wh.write(recs[:40], offsets={("t", 0): 40})
        cur = wh.cursor()
        expected = contents(cur, MIGRATED)
    assert all(expected.values())
    conn = duckdb.connect(str(old))
    assert schema.migrate(conn, target=3) == [1, 2, 3]
    conn.execute("ATTACH ? AS w (READ_ONLY)", [str(written)])
    for table in ("workload_states", "workload_current", "interval_history", "deleted_workloads", "transitions",
                  "consumer_offsets"):  # the version-3 layout: components stored, in their column's place
        copy_columns(conn, table)
    assert conn.execute("SELECT count(*) FROM workload_states WHERE components IS NOT NULL").fetchone()[0] > 0
    conn.execute("DETACH w")
    conn.close()
    with Warehouse(old) as wh:
        assert schema.current_version(wh.conn) == schema.LATEST_VERSION >= 4
        cur = wh.cursor()
        assert contents(cur, MIGRATED) == expected
        assert_components_virtual(cur)
        res = wh.write(recs, offsets={("t", 0): len(recs)})  # the first 40 again: duplicates
        assert res.duplicates >= 40 and res.inserted == len({(r["cluster"], r["uid"], r["resourceVersion"])
                                                             for r in recs[40:]} - {
            (r["cluster"], r["uid"], r["resourceVersion"]) for r in recs[:40]})
        rec = recs[-1]
        assert cur.execute("SELECT json_array_length(components) FROM workload_states WHERE uid = ? AND cluster = ? "
                           "ORDER BY seq DESC LIMIT 1", [rec["uid"], rec["cluster"]]).fetchone()[0] == len(
            rec["components"])


def assert_components_virtual(cur) -> None:
    """workload_states.components is computed from the record when read (schema 6: in the view
    workload_states over state_history), neither stored nor computed at each insert."""
    stored = {c for (c,) in cur.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'state_history'").fetchall()}
    assert "record" in stored and "components" not in stored
    view = cur.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'workload_states'").fetchone()
    assert view is not None and "json_extract" in view[0]


def record_compressions(cur, table: str = "state_history") -> set[str]:
    """The compressions of the states' record's data segments (not its validity mask)."""
    return {c for (c,) in cur.execute(
        f"SELECT DISTINCT compression FROM pragma_storage_info('{table}') "
        "WHERE column_name = 'record' AND segment_type <> 'VALIDITY'").fetchall()}


def copy_columns(conn, table: str) -> None:
    """Copy `table` from the attached file `w` into this older layout: the columns this layout has
    (later versions added some, e.g. version 7's rollup bookkeeping)."""
    columns = [c for (c,) in conn.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() AND table_name = ? "
        "ORDER BY column_index", [table]).fetchall()]
    conn.execute(f"INSERT INTO {table} SELECT {', '.join(columns)} FROM w.{table}")


def at_version(version: int, path, written) -> duckdb.DuckDBPyConnection:
    """A file at schema `version` (4 or later) holding the rows of `written`."""
    conn = duckdb.connect(str(path))
    assert schema.migrate(conn, target=version) == list(range(1, version + 1))
    conn.execute("ATTACH ? AS w (READ_ONLY)", [str(written)])
    states = "state_history" if version >= 6 else "workload_states"  # version 6: workload_states a view
    conn.execute(f"INSERT INTO {states} BY NAME SELECT * EXCLUDE (components) FROM w.workload_states")
    for table in ("workload_current", "interval_history", "deleted_workloads", "transitions", "consumer_offsets"):
        copy_columns(conn, table)
    conn.execute("DETACH w")
    conn.execute("CHECKPOINT")
    return conn


def test_migrate_v4_to_v5_compresses_the_record_with_zstd(tmp_path):
    """A version-4 file keeps every row when its workload_states is rebuilt with the record column
    compressed with zstd (as a fresh warehouse has it), and the writer carries on from it."""
    written, old = tmp_path / "written.duckdb", tmp_path / "v4.duckdb"
    recs = example_batch()
    with Warehouse(written) as wh:
        wh.write(recs[:40], offsets={("t", 0): 40})
        cur = wh.cursor()
        cur.execute("CHECKPOINT")
        assert record_compressions(cur) == {"ZSTD"}  # a fresh warehouse has it from the start
        expected = contents(cur, MIGRATED)
    assert all(expected.values())
    conn = at_version(4, old, written)
    assert "ZSTD" not in record_compressions(conn, "workload_states")  # the version-4 layout: DuckDB's choice
    conn.close()
    with Warehouse(old) as wh:
        assert schema.current_version(wh.conn) == schema.LATEST_VERSION >= 5
        cur = wh.cursor()
        assert contents(cur, MIGRATED) == expected
        assert_components_virtual(cur)
        cur.execute("CHECKPOINT")
        assert record_compressions(cur) == {"ZSTD"}
        res = wh.write(recs, offsets={("t", 0): len(recs)})  # the first 40 again: duplicates
        assert res.duplicates >= 40 and res.inserted > 0
    conn = duckdb.connect(str(old), read_only=True)  # persisted: reopened, and the new rows too
    assert record_compressions(conn) == {"ZSTD"}
    assert conn.execute("SELECT count(*) FROM workload_states").fetchone()[0] == len(expected["workload_states"]) + res.inserted
    conn.close()


def test_migrate_v5_to_v6_keeps_the_states_in_state_history_under_the_workload_states_view(tmp_path):
    """A version-5 file (workload_states a table with a virtual components column) opens with the
    same rows in every table and view, the states now in state_history (record still zstd) and
    workload_states a view over it with the same columns in the same order; the writer carries on."""
    written, old = tmp_path / "written.duckdb", tmp_path / "v5.duckdb"
    recs = example_batch()
    with Warehouse(written) as wh:
        wh.write(recs[:40], offsets={("t", 0): 40})
        cur = wh.cursor()
        expected = contents(cur, MIGRATED)
        columns = [d[0] for d in cur.execute("SELECT * FROM workload_states LIMIT 0").description]
    assert all(expected.values()) and columns.index("components") == len(columns) - 2
    at_version(5, old, written).close()
    with Warehouse(old) as wh:
        assert schema.current_version(wh.conn) == schema.LATEST_VERSION >= 6
        cur = wh.cursor()
        assert contents(cur, MIGRATED) == expected
        assert [d[0] for d in cur.execute("SELECT * FROM workload_states LIMIT 0").description] == columns
        assert_components_virtual(cur)
        assert record_compressions(cur) == {"ZSTD"}
        res = wh.write(recs, offsets={("t", 0): len(recs)})  # the first 40 again: duplicates
        assert res.duplicates >= 40 and res.inserted > 0
        assert cur.execute("SELECT count(*) FROM workload_states").fetchone()[0] == len(
            expected["workload_states"]) + res.inserted


def test_migrate_v6_to_v7_rolls_up_the_history_when_the_writer_opens_it(tmp_path):
    """A version-6 file (no rollup) opens with the same rows in every table and view and its history
    rolled up at once (closed intervals, open ones up to the horizon); a daily report by workload, read
    from the rollup, gives the hours of the report computed from the intervals; the writer carries on."""
    written, old = tmp_path / "written.duckdb", tmp_path / "v6.duckdb"
    base = dict(PYTORCHJOB)
    recs = [as_record(base, f"c{w}", f"2025-06-0{day}T{10 + w}:00:00Z", "MODIFIED", uid=f"uid-{w}", status=status,
                      statuses=[status], resourceVersion=str(10 * day + w))
            for day, status in ((1, "Running"), (3, "Degraded"), (4, "Running"), (6, "Running")) for w in range(3)]
    with Warehouse(written) as wh:
        wh.write(recs, offsets={("t", 0): len(recs)})
        expected = contents(wh.cursor(), MIGRATED)
    at_version(6, old, written).close()
    with Warehouse(old) as wh:
        assert schema.current_version(wh.conn) == schema.LATEST_VERSION >= 7
        cur = wh.cursor()
        assert contents(cur, MIGRATED) == expected
        assert cur.execute("SELECT rolled_seq, horizon FROM usage_rollup").fetchall() == [
            (len(recs), datetime(2025, 6, 5, tzinfo=timezone.utc))]  # a day behind the last state
        assert cur.execute("SELECT count(DISTINCT workload), min(day), max(day) FROM daily_usage").fetchall() == [
            (3, date(2025, 6, 1), date(2025, 6, 4))]
        # and the finished days' cost rows kept (schema 8), unpriced: the writer was given no pricing file
        assert cur.execute("SELECT count(DISTINCT workload), min(day), max(day), count(gpu_cost) FROM daily_costs"
                           ).fetchall() == [(3, date(2025, 6, 1), date(2025, 6, 4), 0)]
        assert cur.execute("SELECT costs_to, priced_with FROM usage_rollup").fetchall() == [
            (date(2025, 6, 5), costing.priced_with(None))]
        since, until = datetime(2025, 6, 1, tzinfo=timezone.utc), datetime(2025, 6, 7, tzinfo=timezone.utc)
        daily = costing.cost_report(cur, since, until, by=("workload",), step=timedelta(days=1), as_of=until)
        whole = costing.cost_report(cur, since, until, by=("workload",), as_of=until)
        hours = sum(r.gpu_hours for r in whole.rows)
        assert hours > 0 and sum(r.gpu_hours for r in daily.rows) == pytest.approx(hours)
        res = wh.write([as_record(base, "c0", "2025-06-06T12:00:00Z", "MODIFIED", uid="uid-0", status="Completed",
                                  statuses=["Completed"], resourceVersion="99")])
        assert res.inserted == 1


def test_deleted_workloads_leave_the_keyed_table_and_late_records_take_the_exact_path(tmp_path):
    recs = lifecycle()
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write(recs)
        cur = wh.cursor()
        assert cur.execute("SELECT count(*) FROM workload_current").fetchone()[0] == 0
        assert cur.execute("SELECT count(*) FROM deleted_workloads").fetchone()[0] == 1
        # The deletion again, then an older state again: duplicates found in the history.
        assert wh.write([recs[-1]]).duplicates == 1 and wh.write([recs[2]]).duplicates == 1
        # A state of the deleted workload never seen (late): inserted, intervals rebuilt.
        late = dict(recs[1], resourceVersion="101a", observedAt="2025-06-03T09:10:00Z")
        assert wh.write([late]).inserted == 1
        assert intervals(wh) == EXPECTED_LIFECYCLE
        assert cur.execute("SELECT count(*) FROM workload_current").fetchone()[0] == 0


def test_a_newer_file_is_refused(tmp_path):
    conn = duckdb.connect(str(tmp_path / "w.duckdb"))
    schema.migrate(conn)
    conn.execute("INSERT INTO schema_migrations VALUES (99, 'future', now())")
    with pytest.raises(schema.SchemaTooNewError):
        schema.migrate(conn)


# --------------------------------------------------------------------------- writing


def example_batch() -> list[dict]:
    return [as_record(r, cluster=f"c{i % 3}", observed=f"2025-06-03T09:{i % 60:02d}:00Z")
            for i, r in enumerate(EXAMPLES)]


def test_a_large_batch_is_written_into_the_file_not_the_wal(tmp_path):
    """A batch as the Kafka writer takes them at ~5,000 events/s (~2,500 records: more than a row
    group, ROW_GROUP_ROWS) is written straight into the file at its commit (DuckDB's optimistic
    writes): the WAL holds pointers to it, not its records; a small batch still goes through the
    WAL.  Both read back whole, after a restart too."""
    path = tmp_path / "w.duckdb"
    big = [as_record(r, cluster="c1", uid=f"u-{n}", observed=f"2025-06-03T09:{n % 60:02d}:00Z")
           for n, r in zip(range(2500), itertools.cycle(EXAMPLES))]
    small = [as_record(r, cluster="c2", uid=f"v-{n}") for n, r in zip(range(200), itertools.cycle(EXAMPLES))]
    text_bytes = sum(len(json.dumps(r)) for r in big)
    with Warehouse(path) as wh:
        wal = path.with_name(path.name + ".wal")
        assert wh.write(big).inserted == len(big)
        assert wal.stat().st_size < text_bytes / 20
        before = wal.stat().st_size
        assert wh.write(small).inserted == len(small)
        assert wal.stat().st_size - before > sum(len(json.dumps(r)) for r in small) / 2
    conn = duckdb.connect(str(path), read_only=True)
    assert conn.execute("SELECT count(*), count(DISTINCT uid) FROM workload_states").fetchone() == (
        len(big) + len(small),) * 2
    assert conn.execute("SELECT count(*) FROM workload_current").fetchone()[0] == len(big) + len(small)
    conn.close()


def test_batch_of_resolved_examples(tmp_path):
    batch = example_batch()
    keys = {(r["cluster"], r["uid"], r["resourceVersion"]) for r in batch}
    with Warehouse(tmp_path / "w.duckdb") as wh:
        res = wh.write(batch)
        assert res.inserted == len(keys) and res.duplicates == len(batch) - len(keys)
        cur = wh.cursor()
        assert cur.execute("SELECT count(DISTINCT kind) FROM workload_states").fetchone()[0] == len(
            {r["kind"] for r in batch})
        # Columns hold what the records say; the whole record is kept as JSON.
        rec = batch[0]
        row = cur.execute("""SELECT kind, framework, status, pods, gpus, cpu, memory, gpu_resources,
                                    json_array_length(components), record->>'$.name', observed_at
                             FROM workload_states WHERE uid = ? AND cluster = ?""",
                          [rec["uid"], rec["cluster"]]).fetchone()
        t = rec["total"]
        assert row[:8] == (rec["kind"], rec["framework"], rec["status"], t["pods"], t["gpu"], t["cpu"], t["memory"],
                           {k: float(v) for k, v in (t.get("gpuResources") or {}).items()})
        assert row[8] == len(rec["components"]) and row[9] == rec["name"]
        assert row[10].isoformat().startswith("2025-06-03T09:00:00")
        # Capacity by framework matches the records.
        gpus = dict(cur.execute("SELECT framework, sum(gpus) FROM current_workloads GROUP BY ALL").fetchall())
        expected: dict[str, float] = {}
        latest = {}
        for r in batch:
            latest[(r["cluster"], r["uid"])] = r
        for r in latest.values():
            expected[r["framework"]] = expected.get(r["framework"], 0) + r["total"]["gpu"]
        assert gpus == pytest.approx(expected)
        # Every workload has exactly one open interval.
        assert cur.execute("""SELECT count(*) FROM (SELECT cluster, uid FROM status_intervals
                              WHERE valid_to IS NULL GROUP BY ALL HAVING count(*) <> 1)""").fetchone()[0] == 0


def test_replay_of_a_batch_adds_nothing(tmp_path):
    batch = example_batch() + lifecycle()
    with Warehouse(tmp_path / "w.duckdb") as wh:
        first = wh.write(batch)
        snap = lambda: sorted(map(str, wh.cursor().execute("SELECT * FROM status_intervals").fetchall()))  # noqa: E731
        before = snap()
        states = wh.cursor().execute("SELECT count(*) FROM workload_states").fetchone()[0]
        second = wh.write(batch)
        assert second.inserted == 0 and second.duplicates == len(batch)
        assert wh.cursor().execute("SELECT count(*) FROM workload_states").fetchone()[0] == states == first.inserted
        assert snap() == before
        # Replaying a suffix, a prefix, one record: still nothing new.
        assert wh.write(batch[5:]).inserted == 0 and wh.write(batch[:3]).inserted == 0
        assert snap() == before


@pytest.mark.parametrize("split", [None, 1, 2, 3, 5])
def test_intervals_through_a_lifecycle(tmp_path, split):
    recs = lifecycle()
    with Warehouse(tmp_path / "w.duckdb") as wh:
        if split is None:
            wh.write(recs)
        else:
            wh.write(recs[:split])
            wh.write(recs[split:])
        assert intervals(wh) == EXPECTED_LIFECYCLE
        assert wh.cursor().execute("SELECT count(*) FROM current_workloads").fetchone()[0] == 0
        # GPU-hours of the workload: 32 x 1h + 48 x 3h (the Deleted interval holds nothing).
        hours = wh.cursor().execute("SELECT sum(gpu_hours) FROM interval_gpu_usage").fetchone()[0]
        assert hours == pytest.approx(32 * 1 + 48 * 3)


def test_intervals_rebuilt_when_a_state_arrives_late(tmp_path):
    recs = lifecycle()
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([recs[0], recs[2], recs[3]])
        wh.write([recs[4], recs[5]])
        wh.write([recs[1]])  # older than the open interval: rebuilt from the history
        assert intervals(wh) == EXPECTED_LIFECYCLE


def test_current_state_view_and_open_intervals(tmp_path):
    recs = lifecycle()
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write(recs[:4] + lifecycle(uid="uid-2", cluster="c2")[:2])
        rows = wh.cursor().execute(
            "SELECT cluster, uid, status, pods, gpus FROM current_workloads ORDER BY uid").fetchall()
        assert rows == [("c1", "uid-1", "Running", 6, 48.0), ("c2", "uid-2", "Running", 4, 32.0)]
        # Demand at an instant, from intervals.
        at = wh.cursor().execute("""SELECT sum(gpus) FROM status_intervals
            WHERE valid_from <= TIMESTAMPTZ '2025-06-03 09:30:00+00'
              AND coalesce(valid_to, 'infinity'::TIMESTAMPTZ) > TIMESTAMPTZ '2025-06-03 09:30:00+00'""").fetchone()[0]
        assert at == 64.0


def test_checkpoints_change_no_row(tmp_path, monkeypatch):
    """The writer's checkpoint (here after every batch, each compacting workload_current as when
    that table stores more than twice its live rows) changes no row."""
    stored_query = writing._CURRENT_STORED
    batches = [[as_record(PYTORCHJOB, uid=f"u{w}", observed=f"2025-06-03T{9 + b // 60:02d}:{b % 60:02d}:00Z",
                          event="ADDED" if b == 0 else "MODIFIED", status=("Running", "Degraded")[b % 2],
                          resourceVersion=str(100 + b)) for w in range(50)] for b in range(30)]

    def contents(path):
        with Warehouse(path) as wh:
            for batch in batches:
                wh.write(batch)
            cur = wh.cursor()
            stored = cur.execute("SELECT sum(count) FROM pragma_storage_info('workload_current') "
                                 "WHERE column_path = '[0]'").fetchone()[0]
            assert cur.execute(stored_query).fetchone() == (stored, 50)  # what the writer reads
            return stored, [cur.execute(f"SELECT {columns} FROM {t} ORDER BY ALL").fetchall() for t, columns in (
                ("workload_states", "* EXCLUDE (record, gpu_resources)"), ("status_intervals", "*"),
                ("workload_current", "*"))]

    _, expected = contents(tmp_path / "plain.duckdb")
    monkeypatch.setattr(writing, "CHECKPOINT_WAL_BYTES", 0)
    monkeypatch.setattr(writing, "_CURRENT_STORED", "SELECT 3 * count(*), count(*) FROM workload_current")
    stored, rows = contents(tmp_path / "checkpointed.duckdb")
    assert rows == expected
    assert len(rows[2]) == 50 and stored <= 2 * 50


def test_transitions_are_deduplicated(tmp_path):
    t = {"cluster": "c1", "namespace": "ns", "name": "j", "kind": "Job", "uid": "u1", "framework": "Kubernetes",
         "definition": "job", "from": None, "to": "Initializing", "at": "2025-06-03T09:00:00Z", "gpus": 8,
         "previousDurationSeconds": None}
    t2 = dict(t, **{"from": "Initializing", "to": "Running", "at": "2025-06-03T09:05:00Z",
                    "previousDurationSeconds": 300})
    with Warehouse(tmp_path / "w.duckdb") as wh:
        res = wh.write([], [t, t2, t])
        assert (res.transitions_inserted, res.transition_duplicates) == (2, 1)
        assert wh.write([], [t2]).transitions_inserted == 0
        rows = wh.cursor().execute("""SELECT from_status, to_status, gpus, previous_duration_seconds
                                      FROM transitions ORDER BY transitioned_at""").fetchall()
    assert rows == [(None, "Initializing", 8.0, None), ("Initializing", "Running", 8.0, 300.0)]


def test_malformed_records_are_refused_before_writing(tmp_path):
    good = lifecycle()[0]
    bad = [dict(good, observedAt="yesterday"), {k: v for k, v in good.items() if k != "uid"},
           dict(good, deleted="no"), dict(good, total={"gpu": -1, "cpu": 0, "memory": 0}), "not a dict",
           # beyond the columns' ranges (int32 pods, int64 bytes): refused, not an Arrow overflow
           dict(good, total={"gpu": 0, "cpu": 0, "memory": 0, "pods": 2**31}),
           dict(good, total={"gpu": 0, "cpu": 0, "memory": 2**63, "pods": 1})]
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for b in bad:
            with pytest.raises(MalformedRecord):
                wh.write([good, b])
        assert wh.cursor().execute("SELECT count(*) FROM workload_states").fetchone()[0] == 0


def test_the_batch_check_gives_check_records_rows_and_its_reasons():
    """check_records' fast path gives exactly check_record's rows; a batch it does not accept outright
    is checked record by record, each malformed one with check_record's reason."""
    good = [as_record(r, cluster=f"c{i % 3}", observed=f"2025-06-03T09:{i % 60:02d}:00.5+02:00",
                      event="DELETED" if i % 7 == 0 else "MODIFIED", uid=f"u{i}", creationTimestamp="2025-06-01")
            for i, r in enumerate(EXAMPLES * 2)]
    assert writing._fast_rows(good) == [writing.check_record(r) for r in good] == writing.check_records(good)
    odd = [dict(good[0], resourceVersion=7), dict(good[1], total=dict(good[1]["total"], gpuResources={"b": 1, "a": 2.5}))]
    assert writing.check_records(odd) == [writing.check_record(r) for r in odd]  # accepted, as before
    bad = [dict(good[0], observedAt="yesterday"), {k: v for k, v in good[1].items() if k != "uid"},
           dict(good[2], deleted="no"), dict(good[3], total={"gpu": -1, "cpu": 0, "memory": 0}), "not a dict",
           dict(good[4], total={"gpu": 0, "cpu": 0, "memory": 0, "pods": True}), dict(good[5], eventType=["x"])]
    checked = writing.check_records(good[:3] + bad + good[3:6])
    assert checked[:3] == [writing.check_record(r) for r in good[:3]]
    assert checked[-3:] == [writing.check_record(r) for r in good[3:6]]
    assert [(e.reason, type(e)) for e in checked[3:-3]] == [
        (records.WRONG_TYPES, MalformedRecord), (records.MISSING_FIELDS, MalformedRecord)] + [
        (records.WRONG_TYPES, MalformedRecord)] * 5


Message = collections.namedtuple("Message", "topic partition offset key value")
_SCALAR = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.integers(-3, 3)
           | st.floats(allow_nan=False) | st.text(max_size=8)
           | st.sampled_from(["2025-06-03T09:00:00Z", "2025-06-03", "ADDED", "DELETED", "Running", ""]))
_JSONISH = _SCALAR | st.lists(_SCALAR, max_size=2) | st.dictionaries(st.text(max_size=4), _SCALAR, max_size=2)
_FIELDS = [*writing._RECORD_FIELDS, "apiVersion", "namespace", "name", "definition", "framework", "origin",
           "phase", "resourceVersion", "generation", "creationTimestamp"]
_TOTAL_FIELDS = ["gpu", "cpu", "memory", "pods", "gpuResources"]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_batch_check_never_accepts_what_check_record_refuses(data):
    """Any record (a valid one with fields replaced, removed, or its total's): the fast batch check
    either gives check_record's row or declines the batch (which check_record then decides)."""
    rec = copy.deepcopy(data.draw(st.sampled_from(lifecycle())))
    for field in data.draw(st.lists(st.sampled_from(_FIELDS), max_size=3)):
        if data.draw(st.booleans()):
            rec.pop(field, None)
        else:
            rec[field] = data.draw(_JSONISH)
    if isinstance(rec.get("total"), dict):
        for field in data.draw(st.lists(st.sampled_from(_TOTAL_FIELDS), max_size=2)):
            rec["total"][field] = data.draw(_JSONISH | st.dictionaries(st.text(max_size=4), st.floats(-1, 8)))
    try:
        expected = writing.check_record(rec)
    except (ValueError, TypeError, OverflowError) as exc:
        expected = exc
    try:
        fast = writing._fast_rows([rec])
    except Exception:
        fast = None  # declined: check_record decides
    assert fast in (None, [expected]), f"the fast check accepted {rec!r}; check_record gave {expected!r}"
    # The Kafka writer's path from the message's bytes (only the read fields decoded) agrees with
    # check_record on the message's whole value (as JSON gives it: orjson reads a 65-bit integer
    # as a float, for one).
    message = Message(writing.WORKLOADS_TOPIC, 0, 7, None, json.dumps(rec).encode())
    try:
        expected = writing.check_record(writing._whole(message.value)[0])
    except (ValueError, TypeError, OverflowError) as exc:
        expected = exc
    rows, texts, _, dead, offsets, _ = writing.check_messages([message])
    assert offsets == {(writing.WORKLOADS_TOPIC, 0): 8}
    if isinstance(expected, MalformedRecord):
        assert rows == [] and [(d.reason, d.detail) for d in dead] == [(expected.reason, expected.detail)]
    elif isinstance(expected, Exception):
        assert rows == [] and len(dead) == 1
    else:
        assert rows == [expected] and dead == [] and texts == [message.value.decode()]


def test_check_messages_dead_letters_with_reasons_and_keeps_json_checks(tmp_path):
    """The Kafka writer's batch (check_messages): offsets past every message, dead letters with
    reasons, and texts that only the standard library parses (NaN) still go through DuckDB's JSON cast."""
    Message = collections.namedtuple("Message", "topic partition offset key value")
    recs = lifecycle()
    msgs = [Message(WORKLOADS, 0, 10 + i, b"k", json.dumps(r).encode()) for i, r in enumerate(recs)]
    msgs += [Message(WORKLOADS, 1, 3, b"k", b"{not json"), Message(WORKLOADS, 1, 4, b"k", b'{"cluster": "c1"}'),
             Message(WORKLOADS, 1, 5, None, None),
             Message(TRANSITIONS, 0, 7, b"k", json.dumps({"cluster": "c1", "uid": "u", "to": "Running",
                                                           "at": "2025-06-03T09:00:00Z"}).encode())]
    assert gc.isenabled()
    rows, texts, transitions, dead, offsets, strict = writing.check_messages(msgs, TRANSITIONS)
    assert gc.isenabled()  # off while the batch was parsed, on again
    assert rows == [writing.check_record(r) for r in recs] and texts == [m.value.decode() for m in msgs[:len(recs)]]
    assert len(transitions) == 1 and strict
    assert offsets == {(WORKLOADS, 0): 10 + len(recs), (WORKLOADS, 1): 6, (TRANSITIONS, 0): 8}
    assert [(d.reason, d.offset) for d in dead] == [
        (records.MALFORMED_JSON, 3), (records.MISSING_FIELDS, 4), (records.WRONG_TYPES, 5)]
    nan = Message(WORKLOADS, 0, 99, b"k", json.dumps(as_record(recs[0], uid="u-nan", phase=None))
                  .replace('"phase": null', '"phase": null, "extra": NaN').encode())
    nan_memory = as_record(recs[0], uid="u-nan-2")
    nan_memory["total"]["memory"] = float("nan")  # written NaN by the standard library
    nan_memory = Message(WORKLOADS, 0, 100, b"k", json.dumps(nan_memory).encode())
    rows, texts, _, dead, _, strict = writing.check_messages([nan, nan_memory], TRANSITIONS)
    assert len(rows) == 1 and not strict  # parsed by the standard library: not strict JSON
    assert [(d.reason, d.offset) for d in dead] == [(records.MALFORMED_JSON, 100)]  # as before the batch check
    with Warehouse(tmp_path / "w.duckdb") as wh:  # stored as before: DuckDB's JSON takes NaN
        assert wh.write_checked(rows, texts, [], {}, texts_are_json=strict).inserted == 1
        assert wh.cursor().execute("SELECT record->>'$.extra' FROM workload_states").fetchone() == ("NaN",)


def test_offsets_are_stored_with_the_rows(tmp_path):
    recs = lifecycle()
    with Warehouse(tmp_path / "w.duckdb", consumer="g1") as wh:
        wh.write(recs[:3], offsets={("wl", 0): 3, ("wl", 1): 7})
        wh.write(recs[3:], offsets={("wl", 0): 6})
        assert wh.offsets() == {("wl", 0): 6, ("wl", 1): 7}
        assert wh.offsets("other") == {}
        # A batch that fails mid-transaction (after its states went in) leaves nothing behind.
        with pytest.raises((ValueError, TypeError)):
            wh.write(lifecycle(uid="uid-9"), offsets={("wl", "not-a-partition"): 9})
        assert wh.cursor().execute("SELECT count(*) FROM workload_states WHERE uid = 'uid-9'").fetchone()[0] == 0
        assert wh.offsets() == {("wl", 0): 6, ("wl", 1): 7}


def test_killed_before_commit_leaves_nothing_partial(tmp_path):
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.write(lifecycle()[:2], offsets={("wl", 0): 2})
    # A child process writes a big batch and is SIGKILLed at COMMIT: everything of the
    # batch had been executed inside the transaction.
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.warehouse.test_warehouse import lifecycle, EXAMPLES, as_record
        from workloadmap.warehouse.writing import Warehouse
        wh = Warehouse({str(path)!r})
        real = wh.conn
        class Dying:
            def __getattr__(self, name): return getattr(real, name)
            def execute(self, sql, *args):
                if sql.strip() == "COMMIT":
                    os.kill(os.getpid(), signal.SIGKILL)
                return real.execute(sql, *args)
        wh.conn = Dying()
        batch = lifecycle()[2:] + [as_record(EXAMPLES[i % len(EXAMPLES)], uid=f"big-{{i}}", resourceVersion="1")
                                   for i in range(20000)]
        wh.write(batch, [], {{("wl", 0): 99}})
        print("not killed")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with Warehouse(path) as wh:
        assert wh.cursor().execute("SELECT count(*) FROM workload_states").fetchone()[0] == 2
        assert wh.offsets() == {("wl", 0): 2}
        assert [r[0] for r in intervals(wh)] == ["Initializing", "Running"]
        wh.write(lifecycle()[2:], offsets={("wl", 0): 6})  # the retried batch completes the history
        assert intervals(wh) == EXPECTED_LIFECYCLE


def test_another_process_cannot_open_the_file_while_the_writer_holds_it(tmp_path):
    """DuckDB's rule, which `snapshot` exists for: readers use a copy."""
    path = tmp_path / "w.duckdb"
    read = "import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=True); " \
           "print(c.execute('SELECT count(*) FROM workload_states').fetchone()[0])"
    with Warehouse(path) as wh:
        wh.write(lifecycle())
        proc = subprocess.run([sys.executable, "-c", read, str(path)], capture_output=True, text=True)
        assert proc.returncode != 0 and "lock" in proc.stderr.lower()
        snap = wh.snapshot(tmp_path / "snap.duckdb")
        wh.write(lifecycle(uid="uid-2"))  # the writer goes on; the snapshot stays as it was
        proc = subprocess.run([sys.executable, "-c", read, str(snap)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "6"
    proc = subprocess.run([sys.executable, "-c", read, str(path)], capture_output=True, text=True)
    assert proc.stdout.strip() == "12"  # once the writer is gone, read-only opens work


# --------------------------------------------------------------------------- Kafka


def create_topics(bootstrap: str, partitions: int = 3) -> dict[str, str]:
    from kafka.admin import KafkaAdminClient, NewTopic
    suffix = uuid.uuid4().hex[:8]
    names = {"workloads": f"wl-{suffix}", "transitions": f"tr-{suffix}", "deadletter": f"dl-{suffix}"}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="wm-test-admin")
    try:
        admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names.values()])
    finally:
        admin.close()
    return names


def publish(bootstrap: str, topic: str, values: list) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for v in values:
            if isinstance(v, dict):
                key = records.record_key(v.get("cluster", "?"), str(v.get("uid", "?")))
                producer.send(topic, key=key, value=records.encode(v))
            else:
                producer.send(topic, key=b"bad", value=v)
        producer.flush()
    finally:
        producer.close()


def end_offsets(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t)]
        return {(tp.topic, tp.partition): o for tp, o in consumer.end_offsets(tps).items() if o}
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, n: int, timeout: float = 30) -> list[dict]:
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(timeout * 1000))
    out = []
    try:
        for m in consumer:
            out.append(json.loads(m.value))
            if len(out) >= n:
                break
    finally:
        consumer.close()
    return out


def stream(n_workloads: int, prefix: str) -> list[dict]:
    """Lifecycles of n workloads interleaved as a stream (each workload in order)."""
    per = [lifecycle(uid=f"{prefix}-{i}", cluster=f"c{i % 3}") for i in range(n_workloads)]
    return [per[i][k] for k in range(6) for i in range(n_workloads)]


def test_kafka_writer_end_to_end(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap_servers
    topics = create_topics(bootstrap)
    recs = stream(50, "e2e")
    transition = {"cluster": "c1", "namespace": "ns", "name": "j", "kind": "Job", "uid": "e2e-0",
                  "from": None, "to": "Initializing", "at": "2025-06-03T09:00:00Z", "gpus": 32,
                  "previousDurationSeconds": None}
    publish(bootstrap, topics["workloads"], recs[:150] + [b"{not json", {"cluster": "c1"}] + recs[150:] + recs[:20])
    publish(bootstrap, topics["transitions"], [transition, transition])
    ends = end_offsets(bootstrap, [topics["workloads"], topics["transitions"]])

    path = tmp_path / "w.duckdb"
    writer = KafkaWarehouseWriter(bootstrap, path, topics=(topics["workloads"], topics["transitions"]),
                                  group_id="wm-e2e", batch_size=64, max_wait_ms=200,
                                  transitions_topic=topics["transitions"], deadletter_topic=topics["deadletter"])
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,))
    thread.start()
    deadline = time.monotonic() + 60
    while (writer.totals.inserted + writer.totals.duplicates + writer.dead_letters
           + writer.totals.transitions_inserted + writer.totals.transition_duplicates) < sum(ends.values()):
        assert time.monotonic() < deadline, writer.totals
        time.sleep(0.1)
    writer.stop()
    thread.join(30)
    assert not thread.is_alive()

    with Warehouse(path, consumer="wm-e2e") as wh:
        cur = wh.cursor()
        assert cur.execute("SELECT count(*) FROM workload_states").fetchone()[0] == len(recs)
        assert cur.execute("SELECT count(*) FROM transitions").fetchone()[0] == 1
        assert wh.offsets() == ends
        assert intervals(wh, "e2e-7") == EXPECTED_LIFECYCLE
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="wm-test-admin")
    try:  # the offsets are also committed to Kafka under the group id, for lag monitoring
        committed = admin.list_group_offsets("wm-e2e")["wm-e2e"]
    finally:
        admin.close()
    assert {(tp.topic, tp.partition): o.offset for tp, o in committed.items()} == ends
    letters = read_all(bootstrap, topics["deadletter"], 2)
    assert sorted(d["reason"] for d in letters) == [records.MALFORMED_JSON, records.MISSING_FIELDS]
    assert {d["stage"] for d in letters} == {"warehouse"}


WRITER_SCRIPT = textwrap.dedent("""
    import json, signal, sys, threading
    from workloadmap.warehouse.writing import KafkaWarehouseWriter
    bootstrap, path, workloads, transitions, deadletter = sys.argv[1:6]
    def report(result, n):
        print(json.dumps({"messages": n, "inserted": result.inserted, "duplicates": result.duplicates}), flush=True)
    writer = KafkaWarehouseWriter(bootstrap, path, topics=(workloads, transitions), group_id="wm-crash",
                                  batch_size=50, max_wait_ms=100, transitions_topic=transitions,
                                  deadletter_topic=deadletter, on_batch=report,
                                  commit_to_kafka=False)  # so only DuckDB's offsets can say where to resume
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    writer.run(stop)
    print("stopped", flush=True)
""")


class WriterProcess:
    def __init__(self, *args: str):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.batches: list[dict] = []
        self.lines: list[str] = []
        # stderr is drained as it comes: left in its pipe, ~64 KB of a client library's warnings
        # would block the writer on its next write (a stall that looks like the writer's own)
        self.errors: collections.deque[str] = collections.deque(maxlen=200)
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_errors, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("{"):
                self.batches.append(json.loads(line))

    def _read_errors(self):
        for line in self.proc.stderr:
            self.errors.append(line.rstrip())

    def messages(self) -> int:
        return sum(b["messages"] for b in self.batches)

    def wait_for(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.messages() < n:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait(10)
                self._readers[1].join(10)
                raise AssertionError(f"writer exited or stalled at {self.messages()}/{n}; its stderr:\n"
                                     + "\n".join(self.errors))
            time.sleep(0.05)


def test_kafka_writer_killed_mid_stream_and_restarted(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap_servers
    topics = create_topics(bootstrap)
    args = (bootstrap, str(tmp_path / "w.duckdb"), topics["workloads"], topics["transitions"], topics["deadletter"])
    first, second = stream(400, "a"), stream(100, "b")  # 2400 + 600 records
    publish(bootstrap, topics["workloads"], first)

    writer = WriterProcess(*args)
    writer.wait_for(600)  # some batches committed, more in flight
    writer.proc.send_signal(signal.SIGKILL)
    writer.proc.wait(10)
    written_before = writer.messages()
    assert written_before < len(first)

    republished = first[:100]  # a producer replaying what it already sent
    publish(bootstrap, topics["workloads"], second + republished)
    restarted = WriterProcess(*args)
    restarted.wait_for(len(first) + len(second) + len(republished) - written_before)
    restarted.proc.send_signal(signal.SIGTERM)
    assert restarted.proc.wait(30) == 0
    assert "stopped" in restarted.lines

    # The restart began exactly where the committed batches ended: it read nothing twice,
    # and its only duplicates are the re-published records.
    assert restarted.messages() == len(first) + len(second) + len(republished) - written_before
    assert sum(b["duplicates"] for b in restarted.batches) == len(republished)
    with Warehouse(args[1], consumer="wm-crash") as wh:
        cur = wh.cursor()
        assert cur.execute("SELECT count(*) FROM workload_states").fetchone()[0] == len(first) + len(second)
        assert cur.execute("""SELECT count(*) FROM (SELECT cluster, uid, resource_version FROM workload_states
                              GROUP BY ALL HAVING count(*) > 1)""").fetchone()[0] == 0
        assert wh.offsets() == end_offsets(bootstrap, [topics["workloads"]])
        for uid in ("a-0", "a-399", "b-99"):
            assert intervals(wh, uid) == EXPECTED_LIFECYCLE
