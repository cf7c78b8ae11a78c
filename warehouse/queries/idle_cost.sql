-- Allocatable, allocated and idle GPU-hours per period, cluster (or node pool) and GPU resource, and the idle cost.
--
-- Answers "how many GPU-hours did our nodes offer, how many did pods hold, and what did the idle
-- rest cost?" (OpenCost's idle).  Allocatable GPU-hours = a node interval's allocatable GPUs per
-- resource x its hours inside the period (cordoned nodes included: they are paid for); allocated =
-- the same for the Bound pod intervals (per the resource they request) while a node record has their
-- node: each overlap of a pod interval with one of its node's intervals counts, in that node
-- interval's pool (the labels valid then); idle = allocatable - allocated.  The rest of a Bound pod
-- interval (its node never seen, or deleted before the pod ended) is unknown_node_gpu_hours, apart:
-- no node the report offers holds it, so it never makes idle negative (by node pool, its pool is
-- NULL).  Open intervals last until $as_of.  Priced with the pricing file's GPU
-- rules per (cluster, GPU resource) as cost_report.sql prices them; idle_cost NULL without prices,
-- and for a resource no rule prices (unpriced_hours then says how many idle hours were not costed).
-- Speed: an interval is reduced to its first and last period and joins a running level of full
-- periods in between (cost_report.sql's way); the seconds are summed per GPU map (the few distinct
-- {resource: count} maps the pods and nodes have) before the maps are unnested.  With $rolled (the
-- window from a UTC midnight to a UTC midnight, periods of whole days) the closed pod intervals are
-- read from the writer's daily_allocation (their GPU-seconds per UTC day, cluster, node pool and
-- resource, kept in each batch's transaction: allocating.py) and only the open ones are computed.
-- Parameters:
--   $since, $until  TIMESTAMPTZ, the window
--   $as_of          TIMESTAMPTZ, where open intervals end; NULL = now()
--   $step           INTERVAL, NULL = one period
--   $by             VARCHAR[] among cluster, node_pool (NULL or [] = one row per period and resource)
--   $clusters       VARCHAR[] filter, NULL = none
--   $rolled         BOOLEAN: read daily_allocation (only for whole UTC days: costing.idle_report decides)
--   $gpu_prices     STRUCT(cluster, name, pattern, rank, price)[]: NULL = no pricing
WITH window_ AS (
    SELECT epoch(CAST($since AS TIMESTAMPTZ)) AS since_s,
           coalesce(epoch(CAST($step AS INTERVAL)),
                    epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))) AS step_s,
           epoch(CAST($until AS TIMESTAMPTZ)) AS until_s,
           epoch(coalesce(CAST($as_of AS TIMESTAMPTZ), now())) AS as_of_s,
           list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'node_pool') AS by_pool,
           coalesce(CAST($rolled AS BOOLEAN), false) AS rolled
),
pods AS (  -- the Bound pod intervals with GPUs in the window (the closed ones from daily_allocation when rolled)
    SELECT cluster, node, gpu_resources, epoch(valid_from) AS f, epoch(valid_to) AS t FROM pod_history, window_
    WHERE NOT rolled AND state = 'Bound' AND gpus > 0 AND valid_from < CAST($until AS TIMESTAMPTZ)
      AND valid_to > CAST($since AS TIMESTAMPTZ)
    UNION ALL
    SELECT cluster, node, gpu_resources, epoch(valid_from), as_of_s FROM pod_current, window_
    WHERE state = 'Bound' AND gpus > 0 AND valid_from < CAST($until AS TIMESTAMPTZ)
),
pieces AS (  -- each overlap of a pod interval with one of its node's intervals, in that interval's pool
    SELECT * FROM (
        SELECT p.cluster, n.node_pool, p.gpu_resources AS gmap, greatest(p.f, epoch(n.valid_from)) AS f,
               least(p.t, coalesce(epoch(n.valid_to), as_of_s)) AS t
        FROM pods p JOIN node_intervals n ON n.cluster = p.cluster AND n.name = p.node, window_
    ) WHERE t > f
),
facts AS (  -- (what, weight, cluster, node pool, GPU map, from, to) of every GPU interval in the window
    SELECT 'allocatable' AS what, 1 AS w, cluster, node_pool, gpu_resources AS gmap, epoch(valid_from) AS f,
           coalesce(epoch(valid_to), as_of_s) AS t
    FROM node_intervals, window_
    WHERE gpus > 0 AND valid_from < CAST($until AS TIMESTAMPTZ)
      AND (valid_to IS NULL OR valid_to > CAST($since AS TIMESTAMPTZ))
    UNION ALL
    SELECT 'allocated', 1, cluster, node_pool, gmap, f, t FROM pieces
    UNION ALL  -- on an unknown node: a pod interval less its overlaps with its node's intervals
    SELECT 'unknown', 1, cluster, NULL, gpu_resources, f, t FROM pods
    UNION ALL
    SELECT 'unknown', -1, cluster, NULL, gmap, f, t FROM pieces
),
spans AS (  -- clipped to the window: first and last period, seconds in each
    SELECT *, least(s1, since_s + (k0 + 1) * step_s) - s0 AS first_s,
           CASE WHEN k1 > k0 THEN s1 - (since_s + k1 * step_s) ELSE 0 END AS last_s
    FROM (
        SELECT *, floor((s0 - since_s) / step_s)::BIGINT AS k0, (ceil((s1 - since_s) / step_s) - 1)::BIGINT AS k1
        FROM (
            SELECT what, w, cluster, CASE WHEN by_pool THEN node_pool END AS node_pool, gmap,
                   greatest(f, since_s) AS s0, least(t, until_s) AS s1, since_s, step_s
            FROM facts, window_
            WHERE ($clusters IS NULL OR list_contains($clusters, cluster))
        )
        WHERE s1 > s0
    )
),
changes AS (  -- per period where an interval starts or ends: seconds, and the level of full periods (weighted)
    SELECT k0 AS k, what, cluster, node_pool, gmap,
           sum(w * CASE WHEN k1 > k0 THEN first_s - step_s ELSE first_s END) AS p,
           coalesce(sum(w) FILTER (WHERE k1 > k0), 0) AS d
    FROM spans GROUP BY ALL
    UNION ALL
    SELECT k1, what, cluster, node_pool, gmap, sum(w * last_s), -sum(w)
    FROM spans WHERE k1 > k0 GROUP BY ALL
),
levels AS (
    SELECT k, what, cluster, node_pool, gmap, sum(p) AS p, sum(d) AS d FROM changes GROUP BY ALL
),
running AS (
    SELECT *, sum(d) OVER w AS level, lead(k) OVER w AS next_k
    FROM levels
    WINDOW w AS (PARTITION BY what, cluster, node_pool, gmap ORDER BY k)
),
seconds AS (  -- interval-seconds per period and GPU map
    SELECT k, what, cluster, node_pool, gmap, p + level * step_s AS s FROM running, window_
    UNION ALL
    SELECT r.kk, what, cluster, node_pool, gmap, level * step_s
    FROM running, window_, unnest(range(k + 1, next_k)) AS r(kk)
    WHERE level > 0
),
hours AS (  -- per period, cluster, node pool and GPU resource
    SELECT k, cluster, node_pool, resource,
           sum(s * count) FILTER (WHERE what = 'allocatable') / 3600.0 AS allocatable_hours,
           coalesce(sum(s * count) FILTER (WHERE what = 'allocated'), 0) / 3600.0 AS allocated_hours,
           coalesce(sum(s * count) FILTER (WHERE what = 'unknown'), 0) / 3600.0 AS unknown_hours
    FROM (SELECT k, what, cluster, node_pool, unnest(map_keys(gmap)) AS resource,
                 unnest(map_values(gmap)) AS count, s
          FROM (SELECT k, what, cluster, node_pool, gmap, sum(s) AS s FROM seconds GROUP BY ALL)
          UNION ALL  -- the closed pod intervals' GPU-seconds per day, as the writer keeps them
          SELECT floor((epoch(d.day::TIMESTAMP AT TIME ZONE 'UTC') - since_s) / step_s)::BIGINT,
                 CASE WHEN d.known_node THEN 'allocated' ELSE 'unknown' END, d.cluster,
                 CASE WHEN by_pool AND d.known_node THEN nullif(d.node_pool, '') END, d.resource, 1.0, d.gpu_seconds
          FROM daily_allocation d, window_
          WHERE rolled AND d.day >= (CAST($since AS TIMESTAMPTZ) AT TIME ZONE 'UTC')::DATE
            AND d.day < (CAST($until AS TIMESTAMPTZ) AT TIME ZONE 'UTC')::DATE
            AND ($clusters IS NULL OR list_contains($clusters, d.cluster)))
    GROUP BY ALL
    -- an unknown-node row whose hours cancel out (every pod interval of it had its node) is no row
    HAVING sum(s * count) FILTER (WHERE what <> 'unknown') IS NOT NULL OR abs(sum(s * count)) > 1e-6
),
prices AS (
    SELECT u.cluster, u.resource, arg_min(p.price, p.rank) AS price
    FROM (SELECT DISTINCT cluster, resource FROM hours) u
    LEFT JOIN unnest(CAST($gpu_prices AS STRUCT(cluster VARCHAR, name VARCHAR, pattern VARCHAR, rank INTEGER, price DOUBLE)[])) AS t(p)
      ON (p.cluster IS NULL OR p.cluster = u.cluster)
     AND (CASE WHEN p.name IS NOT NULL THEN u.resource = p.name
               WHEN p.pattern IS NOT NULL THEN u.resource GLOB p.pattern ELSE true END)
    GROUP BY u.cluster, u.resource
)
SELECT to_timestamp(since_s + k * step_s) AS period_start,
       to_timestamp(least(since_s + (k + 1) * step_s, until_s)) AS period_end,
       CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'cluster') THEN h.cluster END AS cluster,
       node_pool, h.resource,
       sum(coalesce(allocatable_hours, 0)) AS allocatable_gpu_hours, sum(allocated_hours) AS allocated_gpu_hours,
       sum(unknown_hours) AS unknown_node_gpu_hours,
       sum(coalesce(allocatable_hours, 0) - allocated_hours) AS idle_gpu_hours,
       CASE WHEN $gpu_prices IS NOT NULL
            THEN sum((coalesce(allocatable_hours, 0) - allocated_hours) * p.price) END AS idle_cost,
       CASE WHEN $gpu_prices IS NOT NULL
            THEN coalesce(sum(coalesce(allocatable_hours, 0) - allocated_hours) FILTER (WHERE p.price IS NULL), 0)
       END AS unpriced_hours
FROM hours h LEFT JOIN prices p ON p.cluster = h.cluster AND p.resource = h.resource, window_
GROUP BY k, since_s, step_s, until_s, 3, node_pool, h.resource
ORDER BY period_start, cluster NULLS FIRST, node_pool NULLS FIRST, h.resource
