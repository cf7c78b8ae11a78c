-- Resource-hours and their cost per UTC day and workload, from the daily rollup: cost_by_workload.sql's rows.
--
-- The report of cost_by_workload.sql (same rows, same order, same columns) when the periods are
-- UTC days: $since at 00:00 UTC, $step one day, $statuses Running and Degraded, with or without
-- Initializing and Resuming (the classes of status the rollup keeps).  warehouse/costing.py runs it then, instead of the plan
-- that clips every interval: a year of days is millions of rows, and the writer keeps each day's
-- usage per workload in daily_usage (warehouse/rolling.py), so most rows are read, priced and
-- sorted as they are, in the table's day order.
-- What the rollup does not hold is computed from the intervals, as cost_by_workload.sql does:
-- the intervals appended since the last pass, the open intervals after their rolled_to, and
-- every interval's part from the cut on.  The cut is the first UTC midnight at or after which
-- the rollup is not used: the day of $until (a last, partial period) or of $as_of (open intervals
-- end there, and the rollup may hold their days after it), whichever is earlier.
-- Rows of a (day, workload) that has several (daily_usage.shared: other GPU resources, passes;
-- shared_across: the other class, when both are billed; or days also computed here) are summed;
-- the others are taken as they are.
-- Faster still, the days whose report rows the writer keeps (daily_costs, rolling.keep_costs: the
-- days before usage_rollup.costs_to, priced as $priced_with says, in order) are read as they are:
-- when the report bills Running and Degraded, groups by costing.row_columns(['workload']) and is
-- priced as they were, up to the first day that has a part computed here.  The others are
-- computed from the rollup and the intervals, and ordered by cost, GPU-hours, then the order of
-- $by's columns and uid.
-- Rows: as cost_by_workload.sql: first the report's rows, in order:
--   period_start, period_end, wid, gpu_hours, resource, entries, cpu_core_hours, memory_gib_hours,
--   gpu_cost, cpu_cost, memory_cost, cost, unpriced;
-- then one row per workload (period_start NULL): wid, cluster, namespace, framework, uid, kind, name.
-- wid: the workload's number in usage_workloads - 1; the workloads not rolled up yet come after.
-- Parameters: as in cost_by_workload.sql
--   $since, $until  TIMESTAMPTZ, the window ($since at 00:00 UTC)
--   $as_of          TIMESTAMPTZ, where open intervals end; NULL = now()
--   $step           INTERVAL: one day
--   $statuses       VARCHAR[], Running and Degraded (NULL: the same), or those and Initializing and Resuming
--   $by             VARCHAR[], the group's columns, among them 'workload' (costing.row_columns)
--   $clusters, $namespaces, $frameworks
--                   VARCHAR[] filters, NULL = no filter
--   $gpu_prices     STRUCT(cluster, name, pattern, rank, price)[]: NULL = no pricing
--   $rates          STRUCT(cluster, cpu, memory)[]: CPU per core-hour, memory per GiB-hour
--   $priced_with    VARCHAR, costing.priced_with($gpu_prices, $rates): the kept rows are read if
--                   they were priced so; NULL: they are not read
WITH bounds AS (
    SELECT since_s, until_s, as_of_s, floor(since_s / 86400)::BIGINT AS day0,
           floor(least(until_s, as_of_s) / 86400)::BIGINT AS cut_day, rolled_seq, statuses,
           list_has_any(statuses, ['Initializing', 'Resuming']) AS starting,
           CASE WHEN priced_with = CAST($priced_with AS VARCHAR) AND NOT list_has_any(statuses, ['Initializing', 'Resuming'])
                     AND CAST($by AS VARCHAR[]) = ['cluster', 'namespace', 'framework', 'workload']
                     AND $clusters IS NULL AND $namespaces IS NULL AND $frameworks IS NULL
                THEN costs_to END AS kept_to  -- days before it: read from daily_costs
    FROM (SELECT epoch(CAST($since AS TIMESTAMPTZ)) AS since_s, epoch(CAST($until AS TIMESTAMPTZ)) AS until_s,
                 epoch(coalesce(CAST($as_of AS TIMESTAMPTZ), now())) AS as_of_s,
                 (SELECT rolled_seq FROM usage_rollup) AS rolled_seq, (SELECT priced_with FROM usage_rollup) AS priced_with,
                 (SELECT costs_to - DATE '1970-01-01' FROM usage_rollup) AS costs_to,
                 list_sort(list_distinct(coalesce(CAST($statuses AS VARCHAR[]), ['Running', 'Degraded']))) AS statuses)
    WHERE CASE WHEN statuses NOT IN (['Degraded', 'Running'], ['Degraded', 'Initializing', 'Resuming', 'Running'])
               THEN error('cost_by_workload_daily: the statuses must be Running and Degraded, with or without '
                          || 'Initializing and Resuming (the rollup''s classes), not ' || statuses::VARCHAR)
               ELSE true END
      AND CASE WHEN since_s % 86400 <> 0 OR epoch(CAST($step AS INTERVAL)) <> 86400
               THEN error('cost_by_workload_daily: $since must be at 00:00 UTC and $step one day') ELSE true END
),
live AS (  -- intervals, clipped: s0 .. s1 is what the rollup does not hold (r: where the rolled-up part ends)
    SELECT i.*, greatest(epoch(i.valid_from), b.since_s, least(i.r, b.cut_day * 86400)) AS s0,
           least(coalesce(epoch(i.valid_to), b.as_of_s), b.until_s) AS s1,
           CASE WHEN cardinality(i.gpu_resources) > 0 THEN i.gpu_resources
                WHEN i.gpus > 0 THEN MAP {'unspecified': i.gpus} END AS gpu_map
    FROM (SELECT cluster, uid, namespace, framework, kind, name, status, valid_from, valid_to, gpus, cpu, memory,
                 gpu_resources, epoch(coalesce(rolled_to, valid_from)) AS r
          FROM interval_history  -- closed since the last pass: rolled up only while it was open
          WHERE appended_seq > (SELECT rolled_seq FROM bounds)
          UNION ALL
          SELECT cluster, uid, namespace, framework, kind, name, status, valid_from, valid_to, gpus, cpu, memory,
                 gpu_resources, epoch(valid_to)
          FROM interval_history  -- rolled up whole: its part from the cut on
          WHERE appended_seq <= (SELECT rolled_seq FROM bounds)
            AND valid_to > to_timestamp((SELECT cut_day FROM bounds) * 86400)
          UNION ALL
          SELECT cluster, uid, namespace, framework, kind, name, status, valid_from, NULL, gpus, cpu, memory,
                 gpu_resources, epoch(coalesce(rolled_to, valid_from))
          FROM workload_current) i, bounds b
    WHERE list_contains(b.statuses, i.status)
      AND (i.gpus > 0 OR i.cpu > 0 OR i.memory > 0)
      AND i.valid_from < CAST($until AS TIMESTAMPTZ)
      AND (i.valid_to IS NULL OR i.valid_to > CAST($since AS TIMESTAMPTZ))
      AND ($clusters IS NULL OR list_contains($clusters, i.cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, i.namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, i.framework))
      AND greatest(epoch(i.valid_from), b.since_s, least(i.r, b.cut_day * 86400))
          < least(coalesce(epoch(i.valid_to), b.as_of_s), b.until_s)
),
named AS (  -- the rolled-up workloads (wid: their number - 1) and those only here (numbered after them)
    SELECT workload - 1 AS wid, workload, cluster, uid, namespace, framework, kind, name FROM usage_workloads w
    WHERE ($clusters IS NULL OR list_contains($clusters, w.cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, w.namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, w.framework))
    UNION ALL
    SELECT ((SELECT coalesce(max(workload), 0) FROM usage_workloads) + row_number() OVER (ORDER BY cluster, uid) - 1)::INTEGER,
           NULL, *
    FROM (SELECT cluster, uid, any_value(namespace), any_value(framework), any_value(kind), any_value(name)
          FROM live l WHERE NOT EXISTS (SELECT 1 FROM usage_workloads w WHERE w.cluster = l.cluster AND w.uid = l.uid)
          GROUP BY cluster, uid)
),
span AS (  -- from_day: the first day computed here, from the rollup and the intervals; before it, the kept rows
    SELECT b.*, greatest(b.day0, least(b.cut_day, coalesce(b.kept_to, b.day0),
                                       coalesce((SELECT min(floor(s0 / 86400))::BIGINT FROM live), b.cut_day))) AS from_day
    FROM bounds b
),
kept AS (  -- the writer's report rows of the days before from_day (rolling.keep_costs), in the table's order
           -- (theirs: DuckDB keeps a table's order through a scan, WHERE, scalar subqueries and UNION ALL)
    SELECT (c.day - DATE '1970-01-01' - (SELECT day0 FROM bounds))::INTEGER AS k, c.place, c.workload - 1 AS wid, c.gpu_hours, c.resource,
           c.entries, c.cpu_core_hours, c.memory_gib_hours, c.gpu_cost, c.cpu_cost, c.memory_cost, c.unpriced
    FROM daily_costs c
    WHERE c.day >= DATE '1970-01-01' + (SELECT day0 FROM span)::INTEGER
      AND c.day < DATE '1970-01-01' + (SELECT from_day FROM span)::INTEGER
),
workloads AS (  -- those of the rows computed here (all when none is kept), with their place in the order of $by's
                -- columns, then uid, and their cluster's among the clusters (cid)
    SELECT list_position((SELECT list(DISTINCT cluster ORDER BY cluster) FROM named), cluster)::INTEGER AS cid,
           row_number() OVER (ORDER BY
                   coalesce(CASE CAST($by AS VARCHAR[])[1] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                            WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
                   coalesce(CASE CAST($by AS VARCHAR[])[2] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                            WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
                   coalesce(CASE CAST($by AS VARCHAR[])[3] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                            WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
                   coalesce(CASE CAST($by AS VARCHAR[])[4] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                            WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
                   uid) AS place, *
    FROM named n
    WHERE (SELECT from_day = day0 FROM span) OR n.workload IS NULL
       OR n.workload IN (SELECT u.workload FROM daily_usage u
                         WHERE (SELECT from_day > day0 FROM span)
                           AND u.day >= DATE '1970-01-01' + (SELECT from_day FROM span)::INTEGER
                           AND u.day < DATE '1970-01-01' + (SELECT cut_day FROM bounds)::INTEGER)
       OR (n.cluster, n.uid) IN (SELECT cluster, uid FROM live WHERE (SELECT from_day > day0 FROM span))
),
live_usage AS (  -- the live parts per day (k: the period) and GPU resource (CPU and memory on the first)
    SELECT (d - day0)::INTEGER AS k, wid, cid, place, e.resource,
           (least(s1, (d + 1) * 86400.0) - greatest(s0, d * 86400.0)) * e.g AS gs,
           CASE WHEN e.first THEN (least(s1, (d + 1) * 86400.0) - greatest(s0, d * 86400.0)) * cpu ELSE 0.0 END AS cs,
           CASE WHEN e.first THEN (least(s1, (d + 1) * 86400.0) - greatest(s0, d * 86400.0)) * memory_gib ELSE 0.0 END
               AS ms
    FROM (SELECT *, unnest(range(floor(s0 / 86400)::BIGINT, ceil(s1 / 86400)::BIGINT)) AS d
          FROM (SELECT w.wid, w.cid, w.place, b.day0, l.s0, l.s1, l.cpu, l.memory / 1073741824.0 AS memory_gib,
                       unnest(CASE WHEN l.gpu_map IS NULL THEN [{'resource': NULL::VARCHAR, 'g': 0.0, 'first': true}]
                                   ELSE list_transform(range(1, cardinality(l.gpu_map)::BIGINT + 1),
                                                       lambda j: {'resource': map_keys(l.gpu_map)[j],
                                                                  'g': map_values(l.gpu_map)[j], 'first': j = 1}) END) AS e
                FROM live l JOIN workloads w ON w.cluster = l.cluster AND w.uid = l.uid, bounds b))
),
rolled AS NOT MATERIALIZED (  -- the rollup's rows of whole days from from_day to the cut; summed: shared, or also in live_usage
    SELECT (u.day - DATE '1970-01-01' - (SELECT day0 FROM bounds))::INTEGER AS k, w.wid, w.cid, w.place, u.resource,
           u.gpu_seconds AS gs, u.cpu_seconds AS cs, u.memory_gib_seconds AS ms,
           u.shared OR ((SELECT starting FROM bounds) AND u.shared_across) AS shared
    FROM daily_usage u JOIN workloads w ON w.workload = u.workload
    WHERE u.day >= DATE '1970-01-01' + (SELECT from_day FROM span)::INTEGER
      AND u.day < DATE '1970-01-01' + (SELECT cut_day FROM bounds)::INTEGER
      AND ((SELECT starting FROM bounds) OR NOT u.starting)
),
lone AS (  -- rows that are their (day, workload)'s only one
    SELECT * EXCLUDE (shared) FROM rolled r
    WHERE NOT r.shared AND NOT EXISTS (SELECT 1 FROM live_usage l WHERE l.k = r.k AND l.wid = r.wid)
),
several AS (
    SELECT * EXCLUDE (shared) FROM rolled r
    WHERE r.shared OR EXISTS (SELECT 1 FROM live_usage l WHERE l.k = r.k AND l.wid = r.wid)
    UNION ALL
    SELECT * FROM live_usage
),
summed AS (
    SELECT k, wid, cid, place, sum(gs) AS gs, sum(cs) AS cs, sum(ms) AS ms, min(resource) AS resource,
           min(resource) <> max(resource) AS mixed
    FROM several GROUP BY k, wid, cid, place
),
clusters AS (  -- every cluster, numbered as cid (the prices' lists hold them all, in that order)
    SELECT (row_number() OVER (ORDER BY cluster))::INTEGER AS cid, cluster FROM (SELECT DISTINCT cluster FROM named)
),
resources AS (SELECT NULL::VARCHAR AS resource  -- no GPU: every cluster's rates
              UNION SELECT DISTINCT resource FROM daily_usage UNION SELECT DISTINCT resource FROM live_usage),
prices AS (  -- per (cluster, GPU resource): the rule of the lowest rank that matches (NULL: none), and the rates
    SELECT c.cid, c.cluster, r.resource, arg_min(p.price, p.rank) AS price,
           any_value(coalesce(own.r.cpu, dflt.r.cpu, 0.0)) AS cpu, any_value(coalesce(own.r.memory, dflt.r.memory, 0.0)) AS memory
    FROM clusters c CROSS JOIN resources r
    LEFT JOIN unnest(CAST($gpu_prices AS STRUCT(cluster VARCHAR, name VARCHAR, pattern VARCHAR, rank INTEGER, price DOUBLE)[])) AS t(p)
      ON (p.cluster IS NULL OR p.cluster = c.cluster)
     AND (CASE WHEN p.name IS NOT NULL THEN r.resource = p.name
               WHEN p.pattern IS NOT NULL THEN r.resource GLOB p.pattern ELSE true END)
    LEFT JOIN unnest(CAST($rates AS STRUCT(cluster VARCHAR, cpu DOUBLE, memory DOUBLE)[])) AS own(r) ON own.r.cluster = c.cluster
    LEFT JOIN unnest(CAST($rates AS STRUCT(cluster VARCHAR, cpu DOUBLE, memory DOUBLE)[])) AS dflt(r) ON dflt.r.cluster IS NULL
    GROUP BY c.cid, c.cluster, r.resource
),
mixed AS (  -- the map and unpriced hours of the (day, workload)s that hold several GPU resources, per resource
    SELECT k, wid, list({'key': resource, 'value': hours}) AS entries,
           list({'cluster': cluster, 'resource': resource, 'hours': hours}) FILTER (WHERE price IS NULL) AS unpriced,
           sum(hours * coalesce(price, 0.0)) AS gpu_cost
    FROM (SELECT s.k, s.wid, p.cluster, s.resource, any_value(p.price) AS price, sum(s.gs) / 3600.0 AS hours
          FROM several s SEMI JOIN (SELECT k, wid FROM summed WHERE mixed) m ON m.k = s.k AND m.wid = s.wid
          JOIN prices p ON p.cid = s.cid AND p.resource = s.resource
          GROUP BY s.k, s.wid, p.cluster, s.resource)
    GROUP BY k, wid
),
lookup AS (  -- the prices as lists, at (cid - 1) * (resources + 1) + the resource's place in names (0: none) + 1
    SELECT coalesce(list_sort(list(DISTINCT resource) FILTER (WHERE resource IS NOT NULL)), []) AS names,  -- [] when no GPU at all
           list(cluster ORDER BY cid) FILTER (WHERE resource IS NULL) AS clusters
    FROM prices
),
price_lists AS (
    SELECT l.names, l.clusters, list(p.price ORDER BY p.cid, p.place) AS gpu, list(p.cpu ORDER BY p.cid, p.place) AS cpu,
           list(p.memory ORDER BY p.cid, p.place) AS memory
    FROM lookup l, (SELECT *, coalesce(list_position((SELECT names FROM lookup), resource), 0) AS place FROM prices) p
    GROUP BY l.names, l.clusters
),
priced AS (  -- the rows priced: one resource, priced (or no pricing): its name; else the map as entries, with the unpriced hours
    SELECT r.k, r.wid, r.place, r.gs / 3600.0 AS gpu_hours, r.cs / 3600.0 AS cpu_core_hours, r.ms / 3600.0 AS memory_gib_hours,
           r.gs * coalesce(r.gpu[r.i], 0.0) / 3600.0 AS gpu_cost, r.cs * r.cpu[r.i] / 3600.0 AS cpu_cost,
           r.ms * r.memory[r.i] / 3600.0 AS memory_cost,
           CASE WHEN $gpu_prices IS NULL OR r.resource IS NULL OR r.gpu[r.i] IS NOT NULL THEN r.resource END AS resource,
           CASE WHEN $gpu_prices IS NOT NULL AND r.resource IS NOT NULL AND r.gpu[r.i] IS NULL
                THEN [{'key': r.resource, 'value': r.gs / 3600.0}] END AS entries,
           CASE WHEN $gpu_prices IS NOT NULL AND r.resource IS NOT NULL AND r.gpu[r.i] IS NULL
                THEN [{'cluster': r.clusters[r.cid], 'resource': r.resource, 'hours': r.gs / 3600.0}] END AS unpriced
    FROM (SELECT r.*, l.*, (r.cid - 1) * (len(l.names) + 1) + coalesce(list_position(l.names, r.resource), 0) + 1 AS i
          FROM lone r, price_lists l) r
    UNION ALL
    SELECT r.k, r.wid, r.place, r.gs / 3600.0, r.cs / 3600.0, r.ms / 3600.0,
           CASE WHEN r.mixed THEN m.gpu_cost ELSE r.gs * coalesce(p.price, 0.0) / 3600.0 END,
           r.cs * p.cpu / 3600.0, r.ms * p.memory / 3600.0,
           CASE WHEN NOT r.mixed AND ($gpu_prices IS NULL OR r.resource IS NULL OR p.price IS NOT NULL) THEN r.resource END,
           CASE WHEN r.mixed THEN m.entries
                WHEN $gpu_prices IS NOT NULL AND r.resource IS NOT NULL AND p.price IS NULL
                THEN [{'key': r.resource, 'value': r.gs / 3600.0}] END,
           CASE WHEN r.mixed THEN m.unpriced
                WHEN $gpu_prices IS NOT NULL AND r.resource IS NOT NULL AND p.price IS NULL
                THEN [{'cluster': p.cluster, 'resource': r.resource, 'hours': r.gs / 3600.0}] END
    FROM summed r JOIN prices p ON p.cid = r.cid AND p.resource IS NOT DISTINCT FROM r.resource
    LEFT JOIN mixed m ON r.mixed AND m.k = r.k AND m.wid = r.wid
)
SELECT to_timestamp(((SELECT day0 FROM bounds) + k) * 86400) AS period_start,
       to_timestamp(least(((SELECT day0 FROM bounds) + k + 1) * 86400, (SELECT until_s FROM bounds))) AS period_end,
       wid, gpu_hours, resource, entries, cpu_core_hours, memory_gib_hours,
       CASE WHEN $gpu_prices IS NOT NULL THEN gpu_cost END AS gpu_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN cpu_cost END AS cpu_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN memory_cost END AS memory_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN gpu_cost + cpu_cost + memory_cost END AS cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN unpriced END AS unpriced,
       NULL AS cluster, NULL AS namespace, NULL AS framework, NULL AS uid, NULL AS kind, NULL AS name
FROM (SELECT * FROM (SELECT k, wid, gpu_hours, resource, entries, cpu_core_hours, memory_gib_hours, gpu_cost, cpu_cost,
                            memory_cost, unpriced
                     FROM kept)
      UNION ALL  -- then the days computed here: the sort carries numbers, the resource name and the rare lists
      SELECT * FROM (SELECT p.k, p.wid, p.gpu_hours, p.resource, p.entries, p.cpu_core_hours, p.memory_gib_hours, p.gpu_cost,
                            p.cpu_cost, p.memory_cost, p.unpriced
                     FROM priced p
                     ORDER BY p.k, coalesce(CASE WHEN $gpu_prices IS NOT NULL THEN p.gpu_cost + p.cpu_cost + p.memory_cost END,
                                            p.gpu_hours) DESC,
                              p.gpu_hours DESC, p.place))
UNION ALL
SELECT * FROM (SELECT NULL, NULL, wid, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                      cluster, namespace, framework, uid, kind, name
               FROM named ORDER BY wid)
