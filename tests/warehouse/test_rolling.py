"""The writer's daily rollup (warehouse/rolling.py) and the report that reads it (cost_by_workload_daily.sql).

The rollup must never change a report: whenever the passes happen, and whatever arrives late, the
daily report by workload read from it gives the rows of the plan that computes them from the
intervals (cost_by_workload.sql, itself checked against a reference in test_costing.py).
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from workloadmap.catalog import records
from workloadmap.warehouse import costing, rolling
from workloadmap.warehouse.pricing import parse_pricing
from workloadmap.warehouse.querying import run_query_arrow
from workloadmap.warehouse.writing import Warehouse

from tests.warehouse.test_costing import _DEMANDS, _PLAN_PRICING, cost_report

UTC = timezone.utc
GiB = 2**30
T0 = datetime(2026, 11, 1, tzinfo=UTC)
DAY = timedelta(days=1)

# The demands and the pricing of test_cost's random histories (multi-resource, unpriced, unspecified
# and GPU-less demands; prices per cluster).
DEMANDS, PRICING = _DEMANDS, _PLAN_PRICING


def record(w: int, cluster: str, at: datetime, status: str, demand: int, version: int, *, deleted=False) -> dict:
    gpus, gmap, cpu, gib = DEMANDS[demand]
    return {
        "cluster": cluster, "uid": f"uid-{w}", "apiVersion": "ray.io/v1", "kind": ("RayJob", "JobSet")[w % 2],
        "namespace": f"team-{w % 3}", "name": f"job-{w}", "definition": "d", "framework": ("Ray", "JobSet")[w % 2],
        "resourceVersion": str(version), "observedAt": at.isoformat().replace("+00:00", "Z"),
        "eventType": "DELETED" if deleted else "MODIFIED", "deleted": deleted,
        "status": records.DELETED if deleted else status,
        "total": {"pods": 1, "gpu": gpus, "cpu": cpu, "memory": int(gib * GiB), "gpuResources": dict(gmap)},
    }


def history(workloads) -> list[dict]:
    """The records of the generated workloads, in the order of their instants."""
    out, version = [], 1000
    for w, (cluster, steps, deleted) in enumerate(workloads):
        at = T0 + timedelta(seconds=7 * w)
        for delta, status, demand in steps:
            at += timedelta(seconds=delta)
            version += 1
            out.append(record(w, cluster, at, status, demand, version))
        if deleted:
            out.append(record(w, cluster, at + timedelta(hours=3), "Running", steps[-1][2], version + 1, deleted=True))
            version += 1
    return sorted(out, key=lambda r: r["observedAt"])


def both_plans(conn, *, priced_with=None, **params):
    """The daily report by workload read from the rollup (and the kept rows, if `priced_with` says they
    were priced so), and computed from the intervals."""
    daily = costing._workload_rows(run_query_arrow(conn, "cost_by_workload_daily", **params,
                                                   priced_with=priced_with)).to_pylist()
    plan = costing._workload_rows(run_query_arrow(conn, "cost_by_workload", **params)).to_pylist()
    return daily, plan


def write_with_passes(wh, workloads, data) -> None:
    """The generated history written in batches, then records delivered late, with passes that keep
    the cost rows (``roll_up``: a snapshot's) between any of them, and the writer's own passes every
    few states (they roll up, and do not keep the cost rows)."""
    recs = history(workloads)
    late = data.draw(st.lists(st.integers(0, len(recs) - 1), max_size=2, unique=True), label="late")
    on_time = [r for i, r in enumerate(recs) if i not in late]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(on_time)), max_size=4), label="cuts"))
    batches = [on_time[a:b] for a, b in zip([0, *cuts], [*cuts, len(on_time)])] + [[recs[i] for i in late]]
    passes = data.draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)), label="passes")
    every = data.draw(st.sampled_from((rolling.ROLL_UP_STATES, 2, 5)), label="roll up every")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rolling, "ROLL_UP_STATES", every)
        for batch, roll in zip(batches, passes):
            if batch:
                wh.write(batch)
            if roll:
                wh.roll_up()


def rows_after_passes(path, workloads, data, *, kept_with=None, since_d, span_h, as_of_h, **params):
    """Both plans' rows, by UTC day from `since_d` days after T0, on a writer (keeping its cost rows
    priced with `kept_with`) that wrote the generated history with passes (write_with_passes)."""
    with Warehouse(path, pricing=kept_with) as wh:
        write_with_passes(wh, workloads, data)
        conn = wh.cursor()
        conn.execute("SET TimeZone = 'UTC'")
        since = T0 + since_d * DAY
        return both_plans(conn, since=since, until=since + timedelta(hours=span_h),
                          as_of=T0 + timedelta(hours=as_of_h), step=DAY, **params)


NUMBERS = ("gpu_hours", "cpu_core_hours", "memory_gib_hours", "gpu_cost", "cpu_cost", "memory_cost", "cost")
CLOSE = dict(rel=1e-9, abs=1e-9)


def assert_same_rows(daily, plan):
    key = ("period_start", "period_end", "cluster", "namespace", "framework", "uid", "kind", "name")
    assert [tuple(r[k] for k in key) for r in daily] == [tuple(r[k] for k in key) for r in plan]
    for d, p in zip(daily, plan):
        assert [d[k] is None for k in NUMBERS] == [p[k] is None for k in NUMBERS]
        assert [d[k] for k in NUMBERS if p[k] is not None] == pytest.approx([p[k] for k in NUMBERS if p[k] is not None],
                                                                             **CLOSE)
        assert dict(d["gpu_hours_by_resource"]) == pytest.approx(dict(p["gpu_hours_by_resource"]), **CLOSE)
        assert (d["unpriced"] is None) == (p["unpriced"] is None)
        assert {(e["cluster"], e["resource"]): e["hours"] for e in d["unpriced"] or []} == pytest.approx(
            {(e["cluster"], e["resource"]): e["hours"] for e in p["unpriced"] or []}, **CLOSE)


_workload = st.tuples(
    st.sampled_from(("c1", "c2")),
    st.lists(st.tuples(st.integers(0, 40 * 3600),  # seconds after the previous state
                       st.sampled_from(("Running", "Running", "Degraded", "Initializing", "Suspended", "Completed")),
                       st.integers(0, len(DEMANDS) - 1)), min_size=1, max_size=7),
    st.booleans())  # deleted at the end


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workloads=st.lists(_workload, min_size=1, max_size=5), data=st.data(),
       since_d=st.integers(0, 5), span_h=st.integers(1, 200), as_of_h=st.integers(0, 320), priced=st.booleans(),
       by=st.sampled_from((("workload",), ("namespace", "workload"), ("workload", "cluster"))),
       starting=st.booleans(), namespaces=st.sampled_from((None, ["team-0", "team-2"])))
def test_the_daily_report_from_the_rollup_is_the_plan_s(tmp_path_factory, workloads, data, since_d, span_h, as_of_h,
                                                        priced, by, starting, namespaces):
    """Written in batches with passes of the rollup between any of them (open intervals rolled up to a
    horizon a day behind), records delivered late (older than their workload's latest state, or inside
    its rolled-up days: the exact path drops its rollup rows), windows whose end is not at midnight, an
    as_of before the rolled-up days: the rows read from the rollup are the plan's."""
    pricing = parse_pricing(PRICING) if priced else None
    assert_same_rows(*rows_after_passes(
        tmp_path_factory.mktemp("rolling") / "w.duckdb", workloads, data, since_d=since_d, span_h=span_h,
        as_of_h=as_of_h, statuses=list(costing.consuming_statuses(starting)), by=list(costing.row_columns(by)),
        namespaces=namespaces, **costing.pricing_params(pricing)))


# Longer lives, so that a pass leaves several finished days (a horizon days after the first state).
_long_workload = st.tuples(
    st.sampled_from(("c1", "c2")),
    st.lists(st.tuples(st.integers(0, 100 * 3600),
                       st.sampled_from(("Running", "Running", "Degraded", "Initializing", "Suspended", "Completed")),
                       st.integers(0, len(DEMANDS) - 1)), min_size=1, max_size=7),
    st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workloads=st.lists(_long_workload, min_size=1, max_size=5), data=st.data(),
       since_d=st.integers(0, 3), span_h=st.integers(1, 400), as_of_h=st.integers(0, 800),
       kept_priced=st.booleans(), priced=st.booleans())
def test_the_daily_report_from_the_kept_rows_is_the_plan_s(tmp_path_factory, workloads, data, since_d, span_h,
                                                           as_of_h, kept_priced, priced):
    """The kept cost rows (rolling.keep_costs) of a writer given a pricing file (or none), read by a
    report by workload billing Running and Degraded priced the same (or not: they are not read), after
    the same batches, late records and passes: the rows, in their order, are the plan's."""
    pricing = parse_pricing(PRICING) if priced else None
    assert_same_rows(*rows_after_passes(
        tmp_path_factory.mktemp("kept") / "w.duckdb", workloads, data,
        kept_with=parse_pricing(PRICING) if kept_priced else None, since_d=since_d, span_h=span_h,
        as_of_h=as_of_h, statuses=list(costing.CONSUMING), by=list(costing.row_columns(("workload",))),
        priced_with=costing.priced_with(pricing), **costing.pricing_params(pricing)))


def test_a_pass_rolls_up_closed_intervals_and_open_ones_to_the_horizon(tmp_path):
    """Hand-computed: 8 GPUs Running from 11-01 12:00, scaled to 4 at 11-03 06:00, still running when a
    record of 11-05 10:00 comes (the horizon: 11-04 00:00)."""
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([record(0, "c1", T0 + timedelta(hours=12), "Running", 1, 1),
                  record(0, "c1", T0 + timedelta(days=2, hours=6), "Running", 0, 2),
                  record(1, "c2", T0 + timedelta(days=4, hours=10), "Running", 6, 3)])
        cur = wh.cursor()
        assert cur.execute("SELECT count(*) FROM daily_usage").fetchone()[0] == 0
        wh.roll_up()
        rows = cur.execute("""SELECT day, w.uid, starting, resource, gpu_seconds / 3600, cpu_seconds / 3600,
                                     memory_gib_seconds / 3600, shared
                              FROM daily_usage JOIN usage_workloads w USING (workload) ORDER BY uid, day""").fetchall()
        d = [(T0 + n * DAY).date() for n in range(4)]
        assert rows == [
            (d[0], "uid-0", False, "nvidia.com/gpu", 8 * 12, 16 * 12, 64 * 12, False),
            (d[1], "uid-0", False, "nvidia.com/gpu", 8 * 24, 16 * 24, 64 * 24, False),
            # the closed interval's 6 hours and the open one's 18: one (day, workload, class, resource)
            (d[2], "uid-0", False, "nvidia.com/gpu", 8 * 6 + 4 * 18, 16 * 6 + 8 * 18, 64 * 6 + 32 * 18, False),
        ]
        horizon = T0 + 3 * DAY
        assert cur.execute("SELECT uid, rolled_to FROM workload_current ORDER BY uid").fetchall() == [
            ("uid-0", horizon), ("uid-1", None)]  # uid-1 started after the horizon
        assert cur.execute("SELECT rolled_seq, horizon FROM usage_rollup").fetchall() == [(3, horizon)]
        # The open interval closes after the horizon: the next pass rolls up its part from the horizon on,
        # into a day that already has a row (shared from then on).
        wh.write([record(0, "c1", T0 + timedelta(days=3, hours=2), "Suspended", 0, 4)])
        assert cur.execute("SELECT valid_from, valid_to, rolled_to FROM interval_history WHERE uid = 'uid-0' "
                           "ORDER BY valid_from").fetchall() == [
            (T0 + timedelta(hours=12), T0 + timedelta(days=2, hours=6), None),
            (T0 + timedelta(days=2, hours=6), T0 + timedelta(days=3, hours=2), horizon)]
        wh.roll_up()
        assert cur.execute("SELECT day, gpu_seconds / 3600, shared FROM daily_usage JOIN usage_workloads USING (workload) "
                           "WHERE uid = 'uid-0' AND day >= ? ORDER BY day", [d[3]]).fetchall() == [(d[3], 4 * 2, False)]


def test_a_record_inside_the_rolled_up_days_rebuilds_the_workload(tmp_path):
    """A record observed before its workload's rolled_to (later than the horizon's one-day lag) goes to the
    exact path: the workload's intervals are rebuilt, its rollup rows dropped; the report stays the plan's."""
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([record(0, "c1", T0 + timedelta(hours=1), "Running", 1, 1),
                  record(1, "c1", T0 + timedelta(days=6), "Running", 0, 2)])
        wh.roll_up()
        cur = wh.cursor()
        assert cur.execute("SELECT rolled_to FROM workload_current WHERE uid = 'uid-0'").fetchone()[0] == T0 + 5 * DAY
        rolled = cur.execute("SELECT count(*) FROM daily_usage JOIN usage_workloads USING (workload) "
                             "WHERE uid = 'uid-0'").fetchone()[0]
        assert rolled == 5
        # uid-0 was suspended on 11-03 at noon: we learn it only now.
        wh.write([record(0, "c1", T0 + timedelta(days=2, hours=12), "Suspended", 1, 3)])
        assert cur.execute("SELECT count(*) FROM daily_usage JOIN usage_workloads USING (workload) "
                           "WHERE uid = 'uid-0'").fetchone()[0] == 0
        assert cur.execute("SELECT valid_to, rolled_to FROM interval_history WHERE uid = 'uid-0'").fetchall() == [
            (T0 + timedelta(days=2, hours=12), None)]
        params = dict(since=T0, until=T0 + 7 * DAY, as_of=T0 + 7 * DAY, step=DAY, statuses=["Running", "Degraded"],
                      by=list(costing.row_columns(("workload",))))
        for _ in range(2):  # before and after the next pass
            daily, plan = both_plans(cur, **params)
            assert_same_rows(daily, plan)
            assert sum(r["gpu_hours"] for r in daily if r["uid"] == "uid-0") == pytest.approx(8 * (2 * 24 + 11))
            wh.roll_up()


def test_cost_report_reads_the_rollup_for_utc_days_in_rolled_up_statuses(tmp_path, monkeypatch):
    names = []
    real = costing.run_query_arrow
    monkeypatch.setattr(costing, "run_query_arrow", lambda conn, name, **kw: names.append(name) or real(conn, name, **kw))
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([record(0, "c1", T0 + timedelta(hours=1), "Running", 1, 1)])
        conn = wh.cursor()
        cost_report(conn, T0, T0 + 3 * DAY, by=("workload",), step=DAY)
        cost_report(conn, T0, T0 + 3 * DAY, by=("workload",), step=DAY, statuses=costing.consuming_statuses(True))
        cost_report(conn, T0 + timedelta(hours=1), T0 + 3 * DAY, by=("workload",), step=DAY)  # not at midnight
        cost_report(conn, T0, T0 + 3 * DAY, by=("workload",), step=timedelta(hours=6))
        cost_report(conn, T0, T0 + 3 * DAY, by=("workload",), step=DAY, statuses=("Running", "Completed"))
        cost_report(conn, T0, T0 + 3 * DAY, by=("namespace",), step=DAY)
    assert names == ["cost_by_workload_daily", "cost_by_workload_daily", "cost_by_workload", "cost_by_workload",
                     "cost_by_workload", "cost_report"]


def test_the_writer_rolls_up_every_so_many_states_before_a_snapshot_and_when_it_closes(tmp_path, monkeypatch):
    monkeypatch.setattr(rolling, "ROLL_UP_STATES", 3)
    path = tmp_path / "w.duckdb"
    recs = [record(w, "c1", T0 + timedelta(hours=w), "Running", 0, w + 1) for w in range(5)]
    with Warehouse(path) as wh:
        cur = wh.cursor()
        wh.write(recs[:1])
        assert cur.execute("SELECT rolled_seq FROM usage_rollup").fetchone()[0] == -1  # none yet (a new file)
        wh.write(recs[1:2])  # 3 past the last pass (-1)
        assert cur.execute("SELECT rolled_seq FROM usage_rollup").fetchone()[0] == 2
        wh.write(recs[2:3])
        assert cur.execute("SELECT rolled_seq FROM usage_rollup").fetchone()[0] == 2
        wh.snapshot(tmp_path / "snap.duckdb")
        assert cur.execute("SELECT rolled_seq FROM usage_rollup").fetchone()[0] == 3
        wh.write(recs[3:])
    with Warehouse(path) as wh:
        assert wh.cursor().execute("SELECT rolled_seq FROM usage_rollup").fetchone()[0] == 5


def test_the_daily_query_refuses_what_the_rollup_cannot_answer(tmp_path):
    from workloadmap.warehouse.querying import QueryError
    with Warehouse(tmp_path / "w.duckdb") as wh:
        conn = wh.cursor()
        base = dict(since=T0, until=T0 + DAY, step=DAY, by=["cluster", "namespace", "framework", "workload"])
        with pytest.raises(QueryError, match="00:00 UTC"):
            run_query_arrow(conn, "cost_by_workload_daily", **{**base, "since": T0 + timedelta(hours=1)})
        with pytest.raises(QueryError, match="Running and Degraded, with or without"):
            run_query_arrow(conn, "cost_by_workload_daily", **base, statuses=["Running", "Completed"])


def test_the_horizon_stays_a_day_behind_and_never_passes_the_clock():
    day = 86_400_000_000
    t = int(T0.timestamp()) * 1_000_000
    assert rolling.horizon_of(None, None, t) is None
    assert rolling.horizon_of(t + 30 * 3600 * 10**6, None, t + 40 * day) == t  # 11-02 06:00 -> 11-01 00:00
    assert rolling.horizon_of(t + 30 * 3600 * 10**6, t + day, t + 40 * day) == t + day  # never backwards
    # A record stamped a year ahead of the clock: the horizon follows the clock.
    assert rolling.horizon_of(t + 365 * day, None, t + 5 * day + 7) == t + 4 * day


def test_a_record_from_a_clock_ahead_does_not_roll_the_open_intervals_into_the_future(tmp_path):
    now = datetime.now(UTC)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([record(0, "c1", now - 3 * DAY, "Running", 1, 1),
                  record(1, "c1", now + 365 * DAY, "Running", 0, 2)])  # a watcher whose clock runs a year ahead
        wh.roll_up()
        cur = wh.cursor()
        rolled_to = cur.execute("SELECT rolled_to FROM workload_current WHERE uid = 'uid-0'").fetchall()[0][0]
        assert rolled_to <= now - DAY
        rows = "SELECT count(*) FROM daily_usage JOIN usage_workloads USING (workload) WHERE uid = 'uid-0'"
        rolled = cur.execute(rows).fetchall()
        assert rolled[0][0] >= 2
        # so the workload's next record takes the fast path (the exact path would drop its rollup rows)
        wh.write([record(0, "c1", now - DAY / 2, "Degraded", 1, 3)])
        assert cur.execute(rows).fetchall() == rolled
        assert cur.execute("SELECT count(*) FROM interval_history WHERE uid = 'uid-0'").fetchall() == [(1,)]


def kept_rows(cur) -> list[tuple]:
    return cur.execute("""SELECT day, place, uid, gpu_hours, round(cost, 6) FROM (
                              SELECT *, gpu_cost + cpu_cost + memory_cost AS cost FROM daily_costs)
                          JOIN usage_workloads USING (workload) ORDER BY day, place""").fetchall()


def test_the_writer_keeps_the_finished_days_cost_rows_in_order(tmp_path):
    """Hand-computed: 8 GPUs (c1, 2.50 an hour) from 11-01 12:00, 4 GPUs (c2, 3.10) from 11-01 00:00 and a
    GPU-less workload (2 cores, 8 GiB) from 06:00, a record of 11-04 10:00 (the horizon: 11-03 00:00): the
    days 11-01 and 11-02 are kept, each ordered by cost."""
    pricing = parse_pricing(PRICING)
    with Warehouse(tmp_path / "w.duckdb", pricing=pricing) as wh:
        wh.write([record(1, "c2", T0, "Running", 0, 1), record(0, "c1", T0 + timedelta(hours=12), "Running", 1, 2),
                  record(2, "c1", T0 + timedelta(hours=6), "Running", 6, 3),
                  record(3, "c1", T0 + timedelta(days=3, hours=10), "Suspended", 0, 4)])
        cur = wh.cursor()
        assert kept_rows(cur) == []  # a pass of the writer's own (every so many states) does not keep them
        wh.roll_up()
        d0, d1 = T0.date(), (T0 + DAY).date()
        c1 = lambda gpus, cores, gib, h: round(h * (gpus * 2.5 + cores * 0.03 + gib * 0.004), 6)  # noqa: E731
        c2 = lambda gpus, cores, gib, h: round(h * (gpus * 3.1 + cores * 0.05 + gib * 0.004), 6)  # noqa: E731
        assert kept_rows(cur) == [
            (d0, 0, "uid-1", 96.0, c2(4, 8, 32, 24)), (d0, 1, "uid-0", 96.0, c1(8, 16, 64, 12)),
            (d0, 2, "uid-2", 0.0, c1(0, 2, 8, 18)),
            (d1, 0, "uid-0", 192.0, c1(8, 16, 64, 24)), (d1, 1, "uid-1", 96.0, c2(4, 8, 32, 24)),
            (d1, 2, "uid-2", 0.0, c1(0, 2, 8, 24))]
        assert cur.execute("SELECT priced_with, costs_to FROM usage_rollup").fetchall() == [
            (costing.priced_with(pricing), (T0 + 2 * DAY).date())]


def test_a_report_reads_the_kept_rows_only_when_they_answer_it(tmp_path):
    """The kept rows are read by a daily report by workload billing Running and Degraded, unfiltered,
    priced with the writer's pricing; any other report computes its rows (here: the kept rows are
    tampered with, so a report that read them would show it)."""
    pricing = parse_pricing(PRICING)
    with Warehouse(tmp_path / "w.duckdb", pricing=pricing) as wh:
        wh.write([record(0, "c1", T0, "Running", 1, 1), record(1, "c2", T0 + timedelta(days=4), "Running", 0, 2)])
        wh.roll_up()
        cur = wh.cursor()
        cur.execute("UPDATE daily_costs SET gpu_hours = gpu_hours + 1000")
        day = dict(since=T0, until=T0 + 2 * DAY, by=("workload",), step=DAY, as_of=T0 + 5 * DAY)
        hours = lambda **kw: [r.gpu_hours for r in cost_report(cur, **{**day, **kw}).rows]  # noqa: E731
        assert hours(pricing=pricing) == [1192.0, 1192.0]
        assert hours() == hours(pricing=parse_pricing({"default": {"gpu": {"nvidia.com/gpu": 1.0}}})) == [192.0, 192.0]
        assert hours(pricing=pricing, statuses=costing.consuming_statuses(True)) == [192.0, 192.0]
        assert hours(pricing=pricing, clusters=["c1"]) == hours(pricing=pricing, by=("namespace", "workload")) == [192.0] * 2
        # as_of inside the kept days: its day is computed (the open interval ends there), the one before is read
        assert hours(pricing=pricing, as_of=T0 + timedelta(days=1, hours=6)) == [1192.0, 48.0]


def test_kept_rows_whose_days_change_are_not_read_until_kept_again(tmp_path, monkeypatch):
    """A record inside the rolled-up days (the workload rebuilt) and a lagging cluster's workload that
    started in a kept day (a pass of the writer's own rolls it up there): costs_to comes back to the
    first such day, the reports stay the plan's, and the next keep brings it to the horizon again."""
    monkeypatch.setattr(rolling, "ROLL_UP_STATES", 1)
    pricing = parse_pricing(PRICING)
    params = dict(since=T0, until=T0 + 7 * DAY, as_of=T0 + 7 * DAY, step=DAY, statuses=list(costing.CONSUMING),
                  by=list(costing.row_columns(("workload",))), priced_with=costing.priced_with(pricing),
                  **costing.pricing_params(pricing))
    with Warehouse(tmp_path / "w.duckdb", pricing=pricing) as wh:
        wh.write([record(0, "c1", T0 + timedelta(hours=1), "Running", 1, 1),
                  record(1, "c1", T0 + timedelta(days=6), "Running", 0, 2)])
        wh.roll_up()
        cur = wh.cursor()
        costs_to = lambda: cur.execute("SELECT costs_to FROM usage_rollup").fetchall()[0][0]  # noqa: E731
        assert costs_to() == (T0 + 5 * DAY).date()
        wh.write([record(0, "c1", T0 + timedelta(days=2, hours=12), "Suspended", 1, 3)])  # rebuilt
        assert costs_to() == T0.date()
        assert_same_rows(*both_plans(cur, **params))
        wh.roll_up()
        assert costs_to() == (T0 + 5 * DAY).date()
        wh.write([record(7, "c2", T0 + timedelta(days=1, hours=3), "Running", 0, 4)])  # a lagging cluster
        assert costs_to() == (T0 + DAY).date()
        daily, plan = both_plans(cur, **params)
        assert_same_rows(daily, plan)
        assert sum(r["gpu_hours"] for r in daily if r["uid"] == "uid-7") == pytest.approx(4 * (5 * 24 + 21))
        wh.roll_up()
        assert costs_to() == (T0 + 5 * DAY).date()
        assert ("uid-7" in {r[2] for r in kept_rows(cur) if r[0] == (T0 + DAY).date()})
        assert_same_rows(*both_plans(cur, **params))


def test_the_writer_keeps_the_cost_rows_again_when_its_pricing_changes(tmp_path):
    path = tmp_path / "w.duckdb"
    first, second = parse_pricing(PRICING), parse_pricing({"default": {"gpu": {"nvidia.com/gpu": 1.0}}})
    with Warehouse(path, pricing=first) as wh:
        wh.write([record(0, "c1", T0, "Running", 1, 1), record(1, "c2", T0 + timedelta(days=3), "Running", 0, 2)])
    with Warehouse(path, pricing=first) as wh:  # the same prices: kept as they were (tampered: still so)
        wh.cursor().execute("UPDATE daily_costs SET gpu_cost = -1")
    with Warehouse(path, pricing=first) as wh:
        assert {r[0] for r in wh.cursor().execute("SELECT gpu_cost FROM daily_costs").fetchall()} == {-1}
    with Warehouse(path, pricing=second) as wh:  # other prices: every day kept again, at once
        cur = wh.cursor()
        assert cur.execute("SELECT day, gpu_cost FROM daily_costs ORDER BY day").fetchall() == [
            (T0.date(), 192.0), ((T0 + DAY).date(), 192.0)]
        assert cur.execute("SELECT priced_with FROM usage_rollup").fetchone()[0] == costing.priced_with(second)
    with Warehouse(path) as wh:  # no pricing file: hours, no cost
        assert wh.cursor().execute("SELECT gpu_hours, gpu_cost FROM daily_costs").fetchall() == [(192.0, None)] * 2


def test_a_priced_day_without_any_gpu_has_its_cpu_and_memory_cost(tmp_path):
    """Found by the hypothesis test: when the rows computed from the rollup held no GPU resource at all,
    the price lists' names were NULL, not empty, and CPU and memory went unpriced."""
    pricing = parse_pricing(PRICING)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write([record(0, "c1", T0 + timedelta(hours=6), "Running", 6, 1),  # 2 cores, 8 GiB, no GPU
                  record(0, "c1", T0 + timedelta(days=2), "Completed", 6, 2)])
        wh.roll_up()
        report = cost_report(wh.cursor(), T0 + DAY, T0 + 2 * DAY, by=("workload",), step=DAY, pricing=pricing)
    [row] = report.rows
    assert (row.gpu_hours, row.cpu_cost, row.memory_cost) == (0.0, pytest.approx(24 * 2 * 0.03),
                                                              pytest.approx(24 * 8 * 0.004))
