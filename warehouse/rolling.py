"""Rolling up: each UTC day's usage per workload, kept by the writer for the cost reports.

Why: a daily cost report by workload over a year is millions of rows (5 M on the bench's 10 M
states).  Computed from the intervals at every report (clipping each to the window, summing per
period and workload, ranking, ordering) it took seconds; read from rows that already hold each day's
GPU-, CPU core- and memory GiB-seconds per workload, stored in about day order, it is a scan, a
price lookup and a sort (``queries/cost_by_workload_daily.sql``).

What ``roll_up`` adds to ``daily_usage`` (one row per UTC day, workload, class of status and GPU
resource; a demand with several GPU resources gives a row per resource, its CPU and memory on the
first).  The classes are what a report bills: Running and Degraded (``costing.CONSUMING``), and
with ``include_initializing`` also Initializing and Resuming (``starting``); a report that bills
another set of statuses does not read the rollup.  What a pass rolls up:

- the closed intervals the writer appended since the last pass (``appended_seq`` in
  ``(rolled_seq, to_seq]``), from where their rollup stopped while they were open (``rolled_to``,
  else ``valid_from``) to ``valid_to``;
- the open intervals (``workload_current``) from there up to the **horizon**, a UTC midnight one
  day behind the latest ``observed_at`` the writer has seen, or its clock if earlier (``horizon_of``);
  their ``rolled_to`` moves there.  So a workload running for months is rolled up day by day, not only when it stops.

Only intervals with a demand in those statuses (``ROLLED_STATUSES``).

What keeps it exact (the reports read the rollup for whole days before their cut and compute the
rest from the intervals, so a pass can happen at any time):

- a state observed before its workload's ``rolled_to`` (a record later than the one-day lag) goes
  to the writer's exact path, which rebuilds that workload's intervals from its history
  (``rolled_to`` NULL, a new ``appended_seq``) and drops its rollup rows (``DROP_ROLLED``), in the
  batch's transaction; the next pass rolls it up again;
- ``shared`` marks the rows whose (day, workload) has other rows of their class (another GPU
  resource, or an interval rolled up in another pass), ``shared_across`` those whose (day, workload)
  has rows of the other class: a report sums those it bills together, and takes the others as they
  are (a day of Running and Degraded is one row; Initializing then Running, two).

The writer runs a pass (one transaction) when ``ROLL_UP_STATES`` states arrived since the last
one, before each snapshot, and when it closes (its cost per state is in bench/RESULTS.md).

``keep_costs`` goes one step further for the largest report, a year by UTC day and workload: even
from the rollup its 5 M rows are priced and sorted by cost at every report.  Before a snapshot and
when the writer closes, it keeps the report rows of the finished days (``daily_costs``), priced
with the writer's pricing file, in order; a report priced the same reads them as they are.  A pass
that adds rows to a kept day, or a rebuild that drops some, brings ``costs_to`` back to that day.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc

from .costing import (
    CONSUMING, STARTING, UNSPECIFIED_GPU, priced_with, pricing_params, row_columns)
from .pricing import Pricing
from .querying import run_query_arrow

ROLLED_STATUSES = CONSUMING + STARTING
ROLL_UP_STATES = 100_000  # states between two passes of the writer
HORIZON_LAG_US = 86_400_000_000  # the horizon stays a day behind the latest observed_at
_DAY_US = 86_400_000_000

# The parts of intervals a pass rolls up: the closed ones appended since the last pass, the open
# ones up to the horizon; s0, s1 in epoch seconds.
_PORTIONS = """
CREATE OR REPLACE TEMP TABLE wm_portions AS
SELECT cluster, uid, namespace, framework, kind, name, status, gpus, cpu, memory, gpu_resources,
       epoch(coalesce(rolled_to, valid_from)) AS s0, epoch(valid_to) AS s1
FROM interval_history
WHERE appended_seq > $from_seq AND appended_seq <= $to_seq AND valid_to IS NOT NULL
  AND list_contains($statuses, status) AND (gpus > 0 OR cpu > 0 OR memory > 0)
UNION ALL
SELECT cluster, uid, namespace, framework, kind, name, status, gpus, cpu, memory, gpu_resources,
       epoch(coalesce(rolled_to, valid_from)), epoch(CAST($horizon AS TIMESTAMPTZ))
FROM workload_current
WHERE $horizon IS NOT NULL AND coalesce(rolled_to, valid_from) < $horizon
  AND list_contains($statuses, status) AND (gpus > 0 OR cpu > 0 OR memory > 0)
"""

# New workloads get the next numbers (in (cluster, uid) order, so a pass is deterministic).
_NEW_WORKLOADS = """
INSERT INTO usage_workloads
SELECT (SELECT coalesce(max(workload), 0) FROM usage_workloads) + row_number() OVER (ORDER BY cluster, uid),
       cluster, uid, any_value(namespace), any_value(framework), any_value(kind), any_value(name)
FROM wm_portions p
WHERE NOT EXISTS (SELECT 1 FROM usage_workloads w WHERE w.cluster = p.cluster AND w.uid = p.uid)
GROUP BY cluster, uid
"""

# Each portion per GPU resource of its demand (a demand with GPUs and no resource name counts them as
# costing.UNSPECIFIED_GPU, as the reports do; CPU and memory on the first), split at UTC midnights,
# summed per key.  (Unnests in the select list: a LATERAL join here cost 3x the whole statement.)
_DAYS = f"""
CREATE OR REPLACE TEMP TABLE wm_days AS
SELECT (DATE '1970-01-01' + d::INTEGER) AS day, workload, starting, e.resource,
       sum((least(s1, (d + 1) * 86400.0) - greatest(s0, d * 86400.0)) * e.g) AS gpu_seconds,
       sum(CASE WHEN e.first THEN (least(s1, (d + 1) * 86400.0) - greatest(s0, d * 86400.0)) * cpu ELSE 0.0 END)
           AS cpu_seconds,
       sum(CASE WHEN e.first THEN (least(s1, (d + 1) * 86400.0) - greatest(s0, d * 86400.0)) * memory_gib ELSE 0.0 END)
           AS memory_gib_seconds
FROM (SELECT *, unnest(range(floor(s0 / 86400)::BIGINT, ceil(s1 / 86400)::BIGINT)) AS d
      FROM (SELECT w.workload, list_contains($starting, p.status) AS starting, p.s0, p.s1, p.cpu,
                   p.memory / 1073741824.0 AS memory_gib,
                   unnest(CASE WHEN cardinality(p.gpu_resources) > 0
                               THEN list_transform(range(1, cardinality(p.gpu_resources)::BIGINT + 1),
                                                   lambda j: {{'resource': map_keys(p.gpu_resources)[j],
                                                              'g': map_values(p.gpu_resources)[j], 'first': j = 1}})
                               WHEN p.gpus > 0 THEN [{{'resource': '{UNSPECIFIED_GPU}', 'g': p.gpus, 'first': true}}]
                               ELSE [{{'resource': NULL::VARCHAR, 'g': 0.0, 'first': true}}] END) AS e
            FROM wm_portions p JOIN usage_workloads w ON w.cluster = p.cluster AND w.uid = p.uid
            WHERE p.s1 > p.s0))
GROUP BY ALL
"""

# Rows already there whose (day, workload) gets more rows: shared (same class) or shared across (the
# other class) from now on.  $from_day, the pass's first day, a constant, lets DuckDB skip the row
# groups of older days (the table is in about day order), so a pass does not read the whole rollup.
_MARK_SHARED = """
UPDATE daily_usage u
SET shared = u.shared OR CASE WHEN u.starting THEN n.has_starting ELSE n.has_consuming END,
    shared_across = u.shared_across OR CASE WHEN u.starting THEN n.has_consuming ELSE n.has_starting END
FROM (SELECT day, workload, bool_or(starting) AS has_starting, bool_or(NOT starting) AS has_consuming
      FROM wm_days GROUP BY day, workload) n
WHERE u.day >= $from_day AND u.day = n.day AND u.workload = n.workload
  AND (NOT u.shared AND CASE WHEN u.starting THEN n.has_starting ELSE n.has_consuming END
       OR NOT u.shared_across AND CASE WHEN u.starting THEN n.has_consuming ELSE n.has_starting END)
"""

_INSERT_DAYS = """
INSERT INTO daily_usage
SELECT d.day, d.workload, d.starting, d.resource, d.gpu_seconds, d.cpu_seconds, d.memory_gib_seconds,
       count(*) OVER (PARTITION BY d.day, d.workload, d.starting) > 1 OR coalesce(o.same, false),
       count(*) OVER (PARTITION BY d.day, d.workload) > count(*) OVER (PARTITION BY d.day, d.workload, d.starting)
       OR coalesce(o.other, false)
FROM wm_days d
LEFT JOIN (SELECT u.day, u.workload, bool_or(u.starting) AS has_starting, bool_or(NOT u.starting) AS has_consuming
           FROM daily_usage u SEMI JOIN wm_days n ON n.day = u.day AND n.workload = u.workload
           WHERE u.day >= $from_day
           GROUP BY u.day, u.workload) e ON e.day = d.day AND e.workload = d.workload,
     LATERAL (SELECT CASE WHEN d.starting THEN e.has_starting ELSE e.has_consuming END AS same,
                     CASE WHEN d.starting THEN e.has_consuming ELSE e.has_starting END AS other) o
ORDER BY d.day, d.workload
"""

_ADVANCE_OPEN = """
UPDATE workload_current SET rolled_to = $horizon
WHERE $horizon IS NOT NULL AND coalesce(rolled_to, valid_from) < $horizon
  AND list_contains($statuses, status) AND (gpus > 0 OR cpu > 0 OR memory > 0)
"""

# How far the pass went; costs_to back to $from_day, its first day (NULL: none), whose kept report rows
# are no longer read: the rollup rows of their days changed.
_ADVANCE = """
UPDATE usage_rollup SET rolled_seq = $to_seq, horizon = coalesce($horizon, horizon), costs_to = least(costs_to, $from_day)
"""

# The exact path (a workload's intervals rebuilt from its history): its rollup rows go too, and the
# kept report rows of their days are no longer read (costs_to comes back to the first).
DROP_ROLLED = ("""
UPDATE usage_rollup SET costs_to = least(costs_to, (
    SELECT min(day) FROM daily_usage
    WHERE workload IN (SELECT w.workload FROM usage_workloads w JOIN wm_rebuild r ON r.cluster = w.cluster AND r.uid = w.uid)))
""", """
DELETE FROM daily_usage
WHERE workload IN (SELECT w.workload FROM usage_workloads w JOIN wm_rebuild r ON r.cluster = w.cluster AND r.uid = w.uid)
""")

STATE = "SELECT rolled_seq, epoch_us(horizon) FROM usage_rollup"


def horizon_of(latest_observed_us: int | None, previous_us: int | None, now_us: int) -> int | None:
    """The horizon (epoch microseconds) for the latest observed_at seen: the UTC midnight at or before
    a day earlier, never behind the previous horizon.  An observed_at later than this machine's clock
    (`now_us`) counts as now: one record from a watcher whose clock runs ahead must not roll the open
    intervals into the future, which would send every later record of those workloads to the exact
    path (a state before its workload's rolled_to)."""
    if latest_observed_us is None:
        return previous_us
    h = (min(latest_observed_us, now_us) - HORIZON_LAG_US) // _DAY_US * _DAY_US
    return h if previous_us is None else max(h, previous_us)


def roll_up(conn, *, from_seq: int, to_seq: int, horizon_us: int | None) -> int:
    """One pass, inside the caller's transaction: what is new up to `to_seq` and the open intervals up
    to `horizon_us` go into daily_usage.  Returns the rows added."""
    horizon = None if horizon_us is None else datetime.fromtimestamp(horizon_us / 1e6, timezone.utc)
    statuses = list(ROLLED_STATUSES)
    conn.execute(_PORTIONS, {"from_seq": from_seq, "to_seq": to_seq, "horizon": horizon, "statuses": statuses})
    conn.execute(_NEW_WORKLOADS).fetchall()
    conn.execute(_DAYS, {"starting": list(STARTING)}).fetchall()
    added = 0
    from_day, = conn.execute("SELECT min(day) FROM wm_days").fetchone()
    if from_day is not None:
        conn.execute(_MARK_SHARED, {"from_day": from_day}).fetchall()  # the rows already there, before the new ones join
        added = conn.execute(_INSERT_DAYS, {"from_day": from_day}).fetchone()[0]
    conn.execute(_ADVANCE_OPEN, {"horizon": horizon, "statuses": statuses}).fetchall()
    conn.execute(_ADVANCE, {"to_seq": to_seq, "horizon": horizon, "from_day": from_day}).fetchall()
    conn.execute("DROP TABLE wm_portions")
    conn.execute("DROP TABLE wm_days")
    return added


_KEEP = """
INSERT INTO daily_costs
SELECT DATE '1970-01-01' + floor(epoch(period_start) / 86400)::INTEGER, place, wid + 1, gpu_hours, resource, entries,
       cpu_core_hours, memory_gib_hours, gpu_cost, cpu_cost, memory_cost, unpriced
FROM wm_costs
"""


def _places(period_start) -> pa.Array:
    """Each row's place in its period, for rows that come in order, period by period."""
    day = period_start.combine_chunks().cast(pa.int64())
    if len(day) == 0:
        return pa.array([], pa.int32())
    index = pc.subtract(pc.cumulative_sum(pc.cast(pc.is_valid(day), pa.int64())), 1)
    ends = pc.run_end_encode(day).run_ends  # where each period's rows end
    starts = pa.concat_arrays([pa.array([0], ends.type), ends.slice(0, len(ends) - 1)])
    first = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, starts.cast(pa.int64())))
    return pc.subtract(index, first).cast(pa.int32())


def keep_costs(conn, pricing: Pricing | None) -> int:
    """Inside the caller's transaction, after a pass: the daily cost report by workload of the finished
    days (before the horizon) whose rollup changed since they were kept, or of every day when `pricing`
    is not what they were priced with, into daily_costs.  Returns the rows written.

    Why: the report of a year by day and workload is 5 M rows; computed, even from the rollup, they
    are priced and sorted by cost at every report, most of its time; kept, a report reads them in order
    (``queries/cost_by_workload_daily.sql``).  The rows are that query's, for the days
    [costs_to, horizon), billing Running and Degraded, grouped by workload (``row_columns``), with
    their place in their day.  A finished day changes only when a pass adds rows to it (a lagging
    cluster, a rebuilt workload) or a rebuild drops its rows; both bring costs_to back to that day.
    """
    key = priced_with(pricing)
    kept_with, costs_to, horizon, first = conn.execute(
        "SELECT priced_with, costs_to, horizon, (SELECT min(day) FROM daily_usage) FROM usage_rollup").fetchall()[0]
    if horizon is None:
        return 0
    end = horizon.astimezone(timezone.utc).date()  # a UTC midnight
    if kept_with != key:
        conn.execute("DELETE FROM daily_costs").fetchall()
        costs_to = None
    start = first if costs_to is None else costs_to
    written = 0
    if start is not None and start < end:
        conn.execute("DELETE FROM daily_costs WHERE day >= $start", {"start": start}).fetchall()
        since, until = (datetime.combine(d, time(), timezone.utc) for d in (start, end))
        table = run_query_arrow(conn, "cost_by_workload_daily", since=since, until=until, as_of=until,
                                step=timedelta(days=1), statuses=list(CONSUMING), by=list(row_columns(("workload",))),
                                priced_with=None, **pricing_params(pricing))
        rows = table.filter(pc.is_valid(table.column("period_start")))
        conn.register("wm_costs", rows.append_column("place", _places(rows.column("period_start"))))
        written = conn.execute(_KEEP).fetchall()[0][0]
        conn.unregister("wm_costs")
    conn.execute("UPDATE usage_rollup SET priced_with = $key, costs_to = $end", {"key": key, "end": end}).fetchall()
    return written
