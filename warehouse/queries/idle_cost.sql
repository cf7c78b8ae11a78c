-- Allocatable, allocated and idle GPU-hours per period, cluster (or node pool) and GPU resource, and the idle cost.
--
-- Answers "how many GPU-hours did our nodes offer, how many did pods hold, and what did the idle
-- rest cost?" (OpenCost's idle).  Allocatable GPU-hours = a node interval's allocatable GPUs per
-- resource x its hours inside the period (cordoned nodes included: they are paid for); allocated =
-- the same for the Bound pod intervals (per the resource they request, on the node they are bound
-- to); idle = allocatable - allocated.  Open intervals last until $as_of.  A pod's node pool is its
-- node's (the node's latest record, kept after it is deleted).  Priced with the pricing file's GPU
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
facts AS (  -- (allocatable?, cluster, node pool, GPU map, from, to) of every GPU interval in the window
    SELECT true AS offered, cluster, node_pool, gpu_resources AS gmap, epoch(valid_from) AS f,
           coalesce(epoch(valid_to), as_of_s) AS t
    FROM node_intervals, window_
    WHERE gpus > 0 AND valid_from < CAST($until AS TIMESTAMPTZ)
      AND (valid_to IS NULL OR valid_to > CAST($since AS TIMESTAMPTZ))
    UNION ALL
    SELECT false, p.cluster, n.node_pool, p.gpu_resources, epoch(p.valid_from), coalesce(epoch(p.valid_to), as_of_s)
    FROM (SELECT cluster, node, gpu_resources, valid_from, valid_to FROM pod_history, window_
          WHERE NOT rolled AND state = 'Bound' AND gpus > 0 AND valid_from < CAST($until AS TIMESTAMPTZ)
            AND valid_to > CAST($since AS TIMESTAMPTZ)
          UNION ALL
          SELECT cluster, node, gpu_resources, valid_from, NULL FROM pod_current
          WHERE state = 'Bound' AND gpus > 0 AND valid_from < CAST($until AS TIMESTAMPTZ)) p
    CROSS JOIN window_
    LEFT JOIN node_current n ON by_pool AND n.cluster = p.cluster AND n.name = p.node
),
spans AS (  -- clipped to the window: first and last period, seconds in each
    SELECT *, least(s1, since_s + (k0 + 1) * step_s) - s0 AS first_s,
           CASE WHEN k1 > k0 THEN s1 - (since_s + k1 * step_s) ELSE 0 END AS last_s
    FROM (
        SELECT *, floor((s0 - since_s) / step_s)::BIGINT AS k0, (ceil((s1 - since_s) / step_s) - 1)::BIGINT AS k1
        FROM (
            SELECT offered, cluster, CASE WHEN by_pool THEN node_pool END AS node_pool, gmap,
                   greatest(f, since_s) AS s0, least(t, until_s) AS s1, since_s, step_s
            FROM facts, window_
            WHERE ($clusters IS NULL OR list_contains($clusters, cluster))
        )
        WHERE s1 > s0
    )
),
changes AS (  -- per period where an interval starts or ends: seconds, and the level of full periods
    SELECT k0 AS k, offered, cluster, node_pool, gmap,
           sum(CASE WHEN k1 > k0 THEN first_s - step_s ELSE first_s END) AS p,
           count(*) FILTER (WHERE k1 > k0) AS d
    FROM spans GROUP BY ALL
    UNION ALL
    SELECT k1, offered, cluster, node_pool, gmap, sum(last_s), -count(*)
    FROM spans WHERE k1 > k0 GROUP BY ALL
),
levels AS (
    SELECT k, offered, cluster, node_pool, gmap, sum(p) AS p, sum(d) AS d FROM changes GROUP BY ALL
),
running AS (
    SELECT *, sum(d) OVER w AS level, lead(k) OVER w AS next_k
    FROM levels
    WINDOW w AS (PARTITION BY offered, cluster, node_pool, gmap ORDER BY k)
),
seconds AS (  -- interval-seconds per period and GPU map
    SELECT k, offered, cluster, node_pool, gmap, p + level * step_s AS s FROM running, window_
    UNION ALL
    SELECT r.kk, offered, cluster, node_pool, gmap, level * step_s
    FROM running, window_, unnest(range(k + 1, next_k)) AS r(kk)
    WHERE level > 0
),
hours AS (  -- per period, cluster, node pool and GPU resource
    SELECT k, cluster, node_pool, resource,
           sum(s * count) FILTER (WHERE offered) / 3600.0 AS allocatable_hours,
           coalesce(sum(s * count) FILTER (WHERE NOT offered), 0) / 3600.0 AS allocated_hours
    FROM (SELECT k, offered, cluster, node_pool, unnest(map_keys(gmap)) AS resource,
                 unnest(map_values(gmap)) AS count, s
          FROM (SELECT k, offered, cluster, node_pool, gmap, sum(s) AS s FROM seconds GROUP BY ALL)
          UNION ALL  -- the closed pod intervals' GPU-seconds per day, as the writer keeps them
          SELECT floor((epoch(d.day::TIMESTAMP AT TIME ZONE 'UTC') - since_s) / step_s)::BIGINT, false, d.cluster,
                 CASE WHEN by_pool THEN nullif(d.node_pool, '') END, d.resource, 1.0, d.gpu_seconds
          FROM daily_allocation d, window_
          WHERE rolled AND d.day >= (CAST($since AS TIMESTAMPTZ) AT TIME ZONE 'UTC')::DATE
            AND d.day < (CAST($until AS TIMESTAMPTZ) AT TIME ZONE 'UTC')::DATE
            AND ($clusters IS NULL OR list_contains($clusters, d.cluster)))
    GROUP BY ALL
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
       sum(coalesce(allocatable_hours, 0) - allocated_hours) AS idle_gpu_hours,
       CASE WHEN $gpu_prices IS NOT NULL
            THEN sum((coalesce(allocatable_hours, 0) - allocated_hours) * p.price) END AS idle_cost,
       CASE WHEN $gpu_prices IS NOT NULL
            THEN coalesce(sum(coalesce(allocatable_hours, 0) - allocated_hours) FILTER (WHERE p.price IS NULL), 0)
       END AS unpriced_hours
FROM hours h LEFT JOIN prices p ON p.cluster = h.cluster AND p.resource = h.resource, window_
GROUP BY k, since_s, step_s, until_s, 3, node_pool, h.resource
ORDER BY period_start, cluster NULLS FIRST, node_pool NULLS FIRST, h.resource
