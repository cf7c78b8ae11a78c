"""Allocation against the nodes of the time: pods bound to a node no node record has, and a node that moves
to another pool, every answer worked out by hand (the comments).

The history (cluster u, day 11-02 [00:00, 24:00), open intervals ending at 11-03 00:00):

    a  8 GPUs, pool old from 00:00, relabelled to pool new at 12:00 (its labels of the time count);
    b  8 GPUs, pool old from 00:00, lost (deleted) at 08:00;
    x  4 GPUs Bound on a 06:00-18:00: 6 h in pool old, 6 h in pool new (24 + 24 GPU-h);
    y  2 GPUs Bound on ghost (a node whose records never came) 00:00-10:00: 20 GPU-h on an unknown node;
    z  1 GPU Bound on b from 04:00, never ended (its eviction missing): 4 GPU-h while b existed, then
       16 GPU-h (08:00-24:00) on a node no record has any more.

Allocatable: a 8 x 24 = 192 (old 96, new 96), b 8 x 8 = 64 (old): 256.  Allocated: x 48 + z 4 = 52
(old 24 + 4 = 28, new 24).  Idle 256 - 52 = 204 (old 132, new 72).  On unknown nodes: y 20 + z 16 = 36,
apart: counted against a node's allocatable, they made idle 168 (and by pool, x's 48 all in new).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.allocation_records import node, pod
from workloadmap.warehouse import capacities, costing
from workloadmap.warehouse.querying import open_readonly
from workloadmap.warehouse.schema import DAILY_ALLOCATION_OF
from workloadmap.warehouse.writing import Warehouse

UTC = timezone.utc
DAY, NEXT = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC)


def at(hour: int) -> str:
    return f"2026-11-02T{hour:02d}:00:00Z"


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    path = tmp_path_factory.mktemp("nodes") / "w.duckdb"
    nodes = [node("a", at(0), cluster="u", pool="old"), node("b", at(0), cluster="u", pool="old"),
             node("b", at(8), cluster="u", pool="old", deleted=True), node("a", at(12), cluster="u", pool="new")]
    pods = [pod("x", at(6), "Bound", cluster="u", node="a", gpu=4),
            pod("y", at(0), "Bound", cluster="u", node="ghost", gpu=2), pod("z", at(4), "Bound", cluster="u", node="b", gpu=1),
            pod("y", at(10), "Terminated", cluster="u", node="ghost", gpu=2),
            pod("x", at(18), "Terminated", cluster="u", node="a", gpu=4)]
    with Warehouse(path) as wh:   # one batch: its nodes are applied before its pods close intervals
        wh.write(nodes=nodes, pods=pods)
    c = open_readonly(path)
    yield c
    c.close()


def idle(conn, by, step=None):
    """(node pool, allocatable, allocated, idle, unknown) summed over the periods, per group."""
    out = {}
    for r in costing.idle_report(conn, DAY, NEXT, by=by, step=step, as_of=NEXT):
        key = r.node_pool
        sums = out.setdefault(key, [0.0] * 4)
        for i, v in enumerate((r.allocatable_gpu_hours, r.allocated_gpu_hours, r.idle_gpu_hours,
                               r.unknown_node_gpu_hours)):
            sums[i] += v
    return {k: tuple(v) for k, v in out.items()}


@pytest.mark.parametrize("step", [None, timedelta(hours=1)], ids=["kept daily rows", "every interval"])
def test_idle_never_counts_pods_on_unknown_nodes_and_reports_them_apart(conn, step):
    assert idle(conn, ("cluster",), step) == {None: pytest.approx((256, 52, 204, 36))}


@pytest.mark.parametrize("step", [None, timedelta(hours=1)], ids=["kept daily rows", "every interval"])
def test_a_pods_hours_go_to_the_pool_its_node_had_then(conn, step):
    # by pool, the unknown-node hours have no pool (NULL)
    assert idle(conn, ("node_pool",), step) == {"old": pytest.approx((160, 28, 132, 0)),
                                               "new": pytest.approx((96, 24, 72, 0)),
                                               None: pytest.approx((0, 0, 0, 36))}


def test_the_kept_daily_rows_split_a_pod_by_its_nodes_intervals(conn):
    kept = conn.execute("SELECT node_pool, known_node, gpu_seconds / 3600 FROM daily_allocation ORDER BY ALL").fetchall()
    # closed intervals only: x (24 old + 24 new) and y (20 unknown); z is open
    assert kept == [("", False, 20.0), ("new", True, 24.0), ("old", True, 24.0)]


def test_allocation_at_an_instant_and_now_keeps_unknown_nodes_apart(conn):
    (nine,) = capacities.allocation(conn, at=datetime(2026, 11, 2, 9, tzinfo=UTC), by=[])
    # 09:00: a alone (b lost at 08:00); x holds 4 on it; y (ghost) and z (on the lost b) 2 + 1 elsewhere
    assert (nine["allocatable_gpus"], nine["allocated_gpus"], nine["idle_gpus"], nine["unknown_node_allocated_gpus"],
            nine["bound_pods"]) == (8, 4, 4, 3, 3)
    (now,) = capacities.allocation(conn, by=[])
    # now: x and y ended; z still bound to b, which is gone
    assert (now["allocatable_gpus"], now["allocated_gpus"], now["idle_gpus"], now["unknown_node_allocated_gpus"]) == (
        8, 0, 8, 1)


def test_the_series_averages_known_and_unknown_allocation_apart(conn):
    # (items carry 3 decimals)
    (day,) = capacities.allocation_series(conn, DAY, NEXT, timedelta(days=1), step_name="1d", by=[])
    assert (day["avg_allocatable_gpus"], day["avg_allocated_gpus"], day["avg_idle_gpus"],
            day["avg_unknown_node_allocated_gpus"]) == pytest.approx((256 / 24, 52 / 24, 204 / 24, 36 / 24), abs=1e-3)
    pools = {i["node_pool"]: i for i in capacities.allocation_series(conn, DAY, NEXT, timedelta(days=1),
                                                                     step_name="1d", by=["node_pool"])}
    assert {p: (i["avg_allocatable_gpus"], i["avg_allocated_gpus"], i["avg_unknown_node_allocated_gpus"])
            for p, i in pools.items()} == {"old": pytest.approx((160 / 24, 28 / 24, 0), abs=1e-3),
                                          "new": pytest.approx((96 / 24, 24 / 24, 0), abs=1e-3),
                                          None: pytest.approx((0, 0, 36 / 24), abs=1e-3)}


# ---------------------------------------------------------------------------- the writer's daily split

HOURS = 72   # three UTC days from DAY on


def stamp(minute: int) -> str:
    return (DAY + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


@st.composite
def histories(draw):
    """Node records of a few nodes (pools changing, deletions, a node of the same name coming back with
    another uid), then Bound pod intervals on them and on a node no record has, over three UTC days."""
    nodes = []
    for name in ("a", "b"):
        minute, generation = draw(st.integers(0, 600)), 0
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["pool", "pool", "deleted"]))
            if kind == "deleted":
                nodes.append(node(name, stamp(minute), cluster="u", uid=f"{name}-{generation}", deleted=True))
                generation += 1
            else:
                nodes.append(node(name, stamp(minute), cluster="u", uid=f"{name}-{generation}",
                                  pool=draw(st.sampled_from(["p1", "p2", None]))))
            minute += draw(st.integers(1, 24 * 60))
    pods = []
    for i in range(draw(st.integers(1, 8))):
        start = draw(st.integers(0, HOURS * 60 - 2))
        end = draw(st.integers(start + 1, HOURS * 60))
        gpus = draw(st.sampled_from([{}, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 3}]))
        where = draw(st.sampled_from(["a", "b", "ghost"]))
        cpu = draw(st.sampled_from([0.0, 0.5, 8.0]))   # (a GPU pod may ask no CPU: only limits of GPUs)
        common = dict(cluster="u", node=where, gpu=sum(gpus.values()), gpu_resources=gpus or None, cpu=cpu)
        pods += [pod(f"p{i}", stamp(start), "Bound", **common), pod(f"p{i}", stamp(end), "Terminated", **common)]
    cuts = sorted(draw(st.lists(st.integers(0, len(pods)), max_size=3)))
    return nodes, pods, cuts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_the_writers_daily_split_is_the_migrations_sql_over_the_closed_intervals(tmp_path_factory, history):
    # The writer splits each batch's closed pod intervals in Python; the migration of schema 12 computes the
    # same rows in SQL over the whole pod_history (schema.DAILY_ALLOCATION_OF).  With every node record
    # written before the pods end (the writer splits by the node intervals it has), both must agree.
    nodes, pods, cuts = history
    path = tmp_path_factory.mktemp("daily") / "w.duckdb"
    with Warehouse(path) as wh:
        wh.write(nodes=nodes)
        for lo, hi in zip([0, *cuts], [*cuts, len(pods)]):
            wh.write(pods=pods[lo:hi])
        conn = wh.cursor()
        kept = conn.execute("SELECT day, cluster, node_pool, known_node, resource, gpu_seconds FROM daily_allocation "
                            "ORDER BY ALL").fetchall()
        computed = conn.execute(f"SELECT * FROM ({DAILY_ALLOCATION_OF.format(source='pod_history')}) ORDER BY ALL"
                                ).fetchall()
        conn.close()
    assert [r[:5] for r in kept] == [r[:5] for r in computed]
    assert [r[5] for r in kept] == pytest.approx([r[5] for r in computed], rel=1e-9, abs=1e-6)


def test_a_batch_rolled_back_leaves_the_writers_nodes_as_the_file_has_them(tmp_path, monkeypatch):
    # The writer keeps node_current in memory too (allocating.Allocations); a batch that fails after its
    # nodes were applied is rolled back, and the same batch written again must find the nodes new.
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write(nodes=[node("a", at(0), cluster="u", pool="old")])
        batch = dict(nodes=[node("a", at(12), cluster="u", pool="new")],
                     pods=[pod("x", at(13), "Bound", cluster="u", node="a", gpu=4)])

        def failing(conn, rows):
            raise RuntimeError("the disk is full")

        with monkeypatch.context() as m:
            m.setattr(wh._allocations, "apply_pods", failing)
            with pytest.raises(RuntimeError):
                wh.write(**batch)
        result = wh.write(**batch)
        pods_after = wh.write(pods=[pod("x", at(15), "Terminated", cluster="u", node="a", gpu=4)])
        kept = wh.cursor().execute("SELECT node_pool, known_node, gpu_seconds / 3600 FROM daily_allocation"
                                   ).fetchall()
    assert (result.nodes, result.node_duplicates, result.pods, pods_after.pods) == (1, 0, 1, 1)
    # x held 4 GPUs 13:00-15:00 on a, in the pool a had then (new): 8 GPU-h
    assert kept == [("new", True, 8.0)]


def test_a_day_first_kept_by_a_batch_rolled_back_is_kept_once_when_written_again(tmp_path, monkeypatch):
    # The writer adds to the daily rows it knows with an UPDATE and inserts the others (allocating._ADD_DAILY);
    # a batch that inserted a day's row and then failed must leave that row unknown, the retry insert it
    # once, and a later batch add to it.
    from workloadmap.warehouse import writing
    transition = {"cluster": "u", "namespace": "ml", "name": "train", "kind": "JobSet", "uid": "wl-1",
                  "framework": "JobSet", "definition": "jobset", "from": None, "to": "Running", "at": at(1),
                  "gpus": 4, "previousDurationSeconds": None}
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write(nodes=[node("a", at(0), cluster="u", pool="p")],
                 pods=[pod("x", at(1), "Bound", cluster="u", node="a", gpu=4),
                       pod("y", at(1), "Bound", cluster="u", node="a", gpu=2)])
        ended = dict(pods=[pod("x", at(3), "Terminated", cluster="u", node="a", gpu=4)], transitions=[transition])
        with monkeypatch.context() as m:   # the batch fails after its pods, at its transitions
            m.setattr(writing, "_INSERT_TRANSITIONS", "SELECT no_such_column FROM wm_rows")
            with pytest.raises(Exception):
                wh.write(**ended)
        wh.write(**ended)
        wh.write(pods=[pod("y", at(4), "Terminated", cluster="u", node="a", gpu=2)])
        kept = wh.cursor().execute("SELECT node_pool, known_node, gpu_seconds / 3600 FROM daily_allocation"
                                   ).fetchall()
    # x: 4 GPUs 01:00-03:00 (8 GPU-h), then y: 2 GPUs 01:00-04:00 (6 GPU-h), both on a in pool p
    assert kept == [("p", True, 14.0)]
