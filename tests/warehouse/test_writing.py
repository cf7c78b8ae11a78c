"""warehouse/writing.py: batch writes, dedup, intervals, checkpoints, offsets, crashes, and the
writer's hold on its file.

Every test uses a real DuckDB file in tmp_path."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from workloadmap.warehouse import writing
from workloadmap.warehouse.checking import MalformedRecord
from workloadmap.warehouse.writing import Warehouse


from tests.warehouse.workload_records import (
    EXAMPLES, EXPECTED_LIFECYCLE, PYTORCHJOB, as_record, example_batch, intervals, lifecycle)

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_batch_of_transitions_keeps_its_arrival_order(tmp_path):
    """The rowid is the transitions feed's cursor: rows of one batch are stored in the order they
    came in (the deduplicating window function alone would shuffle a large batch)."""
    t = {"cluster": "c1", "namespace": "ns", "kind": "Job", "framework": "Kubernetes", "definition": "job",
         "from": None, "to": "Running", "gpus": 1, "previousDurationSeconds": None}
    batch = [dict(t, uid=f"u{n}", name=f"j{n}", at=f"2025-06-03T{n % 24:02d}:{n % 60:02d}:00Z")
             for n in range(20_000)]
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([], batch)
        names = [r[0] for r in wh.cursor().execute("SELECT name FROM transitions ORDER BY rowid").fetchall()]
    assert names == [b["name"] for b in batch]


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


def test_offsets_of_new_partitions_beside_known_ones_and_after_a_rollback_are_all_stored(tmp_path, monkeypatch):
    # The writer updates the partitions the file has and inserts the others (writing._UPDATE_OFFSETS):
    # a partition first seen in a batch that rolls back must still be inserted by the next one, and a
    # reopened file knows its partitions.
    recs = lifecycle()
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.write(recs[:1], offsets={("wl", 0): 1})
        with monkeypatch.context() as m:
            m.setattr(writing, "_INSERT_STATES", "SELECT no_such_column FROM wm_rows")
            with pytest.raises(Exception):
                wh.write(recs[1:2], offsets={("wl", 0): 2, ("wl", 1): 5})
        assert wh.offsets() == {("wl", 0): 1}
        wh.write(recs[1:2], offsets={("wl", 0): 2, ("wl", 1): 5, ("tr", 0): 3})
        assert wh.offsets() == {("wl", 0): 2, ("wl", 1): 5, ("tr", 0): 3}
    with Warehouse(path) as wh:
        wh.write(recs[2:3], offsets={("wl", 1): 6, ("tr", 1): 1})
        assert wh.offsets() == {("wl", 0): 2, ("wl", 1): 6, ("tr", 0): 3, ("tr", 1): 1}


def test_killed_before_commit_leaves_nothing_partial(tmp_path):
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.write(lifecycle()[:2], offsets={("wl", 0): 2})
    # A child process writes a big batch and is SIGKILLed at COMMIT: everything of the
    # batch had been executed inside the transaction.
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.warehouse.workload_records import lifecycle, EXAMPLES, as_record
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
