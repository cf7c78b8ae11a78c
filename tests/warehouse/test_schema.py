"""warehouse/schema.py: migrations from every earlier version keep the data, and a newer file is refused.

Every test uses a real DuckDB file in tmp_path."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import duckdb
import pytest

from workloadmap.warehouse import costing, schema
from workloadmap.warehouse.writing import Warehouse


from tests.warehouse.workload_records import (
    EXPECTED_LIFECYCLE, PYTORCHJOB, as_record, example_batch, intervals, lifecycle)


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
                      "DROP TABLE node_current", "DROP TABLE daily_allocation",
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
        daily = costing.cost_report(cur, since, until, by=("workload",), step=timedelta(days=1), as_of=until,
                                    basis=costing.REQUESTED)
        whole = costing.cost_report(cur, since, until, by=("workload",), as_of=until, basis=costing.REQUESTED)
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
