"""The Bloom filter of deleted workloads: never misses a key of the table, rarely says maybe."""

from __future__ import annotations

import random

import duckdb
from hypothesis import given, settings, strategies as st

from workloadmap.warehouse.deletions import DeletedWorkloads
from workloadmap.warehouse.schema import migrate
from workloadmap.warehouse.writing import Warehouse, workload_key

KEYS = st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=300, unique=True)


def table_with(keys) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect()
    migrate(conn)
    if keys:
        conn.execute(f"INSERT INTO deleted_workloads VALUES ({'), ('.join(map(str, keys))})").fetchall()
    return conn


@settings(max_examples=40, deadline=None)
@given(loaded=KEYS, added=KEYS)
def test_every_key_loaded_or_added_may_be_contained(loaded, added):
    """Loaded from the table (positions computed by Arrow, OR-ed by DuckDB) or added in Python: the same bits."""
    conn = table_with(loaded)
    f = DeletedWorkloads(conn)
    for key in added:
        f.add(key)
    assert all(f.may_contain(k) for k in loaded + added)
    if added:  # written to the table: a filter loaded again knows them too
        conn.execute(f"INSERT OR IGNORE INTO deleted_workloads VALUES ({'), ('.join(map(str, added))})").fetchall()
        assert all(map(DeletedWorkloads(conn).may_contain, loaded + added))


def test_loaded_and_added_bits_are_the_same():
    rng = random.Random(7)
    keys = [rng.getrandbits(64) for _ in range(2000)]
    f = DeletedWorkloads(table_with(keys))
    g = DeletedWorkloads(table_with([]))
    for key in keys:
        g.add(key)
    assert (f._shift, f.count) == (g._shift, g.count) and f._bits == g._bits


def test_false_positives_are_rare_and_a_full_filter_grows():
    rng = random.Random(11)
    conn = table_with([])
    f = DeletedWorkloads(conn)
    members = [rng.getrandbits(64) for _ in range(f._capacity)]
    for key in members:
        f.add(key)
    assert not f.full
    others = [rng.getrandbits(64) for _ in range(20_000)]
    assert sum(map(f.may_contain, others)) / len(others) < 0.01  # ~0.5% at 16 bits a key
    f.add(rng.getrandbits(64))
    assert f.full
    conn.execute(f"INSERT INTO deleted_workloads VALUES ({'), ('.join(map(str, members))})").fetchall()
    shift = f._shift
    f.load(conn)
    assert f._shift == shift - 1 and not f.full  # sized for twice the keys: twice the bits
    assert all(map(f.may_contain, members))


def test_a_reopened_writer_knows_the_deletions_of_the_file(tmp_path):
    """A late state of a workload deleted before the restart still takes the exact path."""
    base = {"cluster": "c1", "uid": "u1", "kind": "Job", "namespace": "ns", "name": "j", "total":
            {"gpu": 1, "cpu": 1, "memory": 1, "pods": 1}}
    running = dict(base, status="Running", observedAt="2025-06-03T09:00:00Z", eventType="ADDED",
                   deleted=False, resourceVersion="1")
    deleted = dict(base, status="Deleted", observedAt="2025-06-03T10:00:00Z", eventType="DELETED",
                   deleted=True, resourceVersion="2")
    late = dict(running, resourceVersion="0", observedAt="2025-06-03T08:00:00Z")
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([running, deleted])
    with Warehouse(tmp_path / "w.duckdb") as wh:
        assert wh._deleted.may_contain(workload_key("c1", "u1"))
        assert wh.write([running]).duplicates == 1  # found in the history, not taken for new
        assert wh.write([late]).inserted == 1
        rows = wh.cursor().execute("SELECT status, valid_from, valid_to IS NULL FROM status_intervals "
                                   "WHERE uid = 'u1' ORDER BY valid_from").fetchall()
    assert [r[0] for r in rows] == ["Running", "Deleted"] and rows[-1][2]
