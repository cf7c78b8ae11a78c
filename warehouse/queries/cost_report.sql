-- Resource-hours and their cost per period and group: GPU-hours per GPU resource name, CPU core-hours, memory GiB-hours.
--
-- Answers "how many GPU-hours (CPU core-hours, memory GiB-hours) did we consume, where, when, and what did
-- they cost?" (warehouse/costing.py turns the rows into a CostReport).  Read from status_intervals
-- ($basis requested: what the workloads' specs request while in a billed status), or from the pod
-- intervals ($basis allocated: what the pods bound to a node hold, attributed to their workload, or
-- to the pod itself while its owner is unknown; every Bound interval is billed, as status Running).
-- Only intervals in a consuming status count ($statuses), and each counts only its part inside the
-- window: an interval from 22:00 to 02:00 over a window starting at 00:00 counts 2 hours.  An open
-- interval (valid_to NULL: the workload's current state) lasts until $as_of, never past it.
-- GPU-hours = GPUs x hours per GPU resource name (a record with GPUs but no resource names counts
-- them as 'unspecified'); CPU core-hours = cores x hours; memory GiB-hours = bytes / 2^30 x hours.
-- Periods: with $step, [$since + k*$step, $since + (k+1)*$step), the last one cut at $until (times
-- are computed in epoch seconds, so a day is always 24 h whatever the session's time zone); an
-- interval across period boundaries is split at them.  Without $step, one period: the whole window.
-- Speed: no per-period expansion of intervals.  Each interval is reduced to its first period k0,
-- its last k1 and its seconds in those two.  One spanning several periods joins a running level
-- of full periods at k0 and leaves it at k1 (its first period counts its seconds minus the full
-- period the level gives it).  Per group, GPU resource and period the seconds and the level
-- changes are summed (one aggregation over <= 2 rows per interval), the level is a running sum
-- over the group's periods, and only the periods between two changes of a group are generated:
-- the work follows the intervals and the rows of the result, not the intervals' days.  Rows
-- already keyed by cluster are priced as they are; others are summed over clusters first.
-- Prices: $gpu_prices are the pricing file's GPU rules as rows (warehouse/pricing.py gpu_rules),
-- matched to each (cluster, GPU resource) of the result once: the lowest rank that matches wins
-- (cluster section before the default one; exact name, then globs longest first, then default);
-- $rates the CPU and memory rates per section (cluster NULL: the default section).
-- Rows: one per period and group; gpu_hours_by_resource maps each GPU resource name to its GPU-hours,
-- unpriced to the GPU-hours no rule priced.  Costs are NULL without $gpu_prices.  Order: period,
-- then the largest cost (or GPU-hours without prices) first, then the group's columns in the
-- order of $by.
-- Parameters:
--   $since, $until  TIMESTAMPTZ, the window
--   $as_of          TIMESTAMPTZ, where open intervals end; NULL = now()
--   $step           INTERVAL, e.g. INTERVAL 1 DAY; NULL = one period
--   $statuses       VARCHAR[], the consuming statuses; NULL = Running and Degraded
--   $by             VARCHAR[], the group's columns among cluster, namespace, framework, workload
--                   (workload: uid, kind, name); NULL or [] = one group per period
--   $clusters, $namespaces, $frameworks
--                   VARCHAR[] filters, NULL = no filter
--   $basis          'requested' (NULL) or 'allocated'
--   $roles          BOOLEAN, allocated only: a workload's rows per role, the pods' component column
--                   (`role`; '-' for pods of no component), with $by's workload
--   $gpu_prices     STRUCT(cluster, name, pattern, rank, price)[]: NULL = no pricing
--   $rates          STRUCT(cluster, cpu, memory)[]: CPU per core-hour, memory per GiB-hour
WITH spans AS (  -- consuming intervals cut to the window: first and last period k0, k1, seconds in each
    SELECT *,
           least(s1, since_s + (k0 + 1) * step_s) - s0 AS first_s,
           CASE WHEN k1 > k0 THEN s1 - (since_s + k1 * step_s) ELSE 0 END AS last_s
    FROM (
        SELECT *, floor((s0 - since_s) / step_s)::BIGINT AS k0, (ceil((s1 - since_s) / step_s) - 1)::BIGINT AS k1
        FROM (
            SELECT i.cluster,
                   CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'namespace')
                          OR list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.namespace END AS namespace,
                   CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'framework')
                          OR list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.framework END AS framework,
                   CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.uid END AS uid,
                   CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.kind END AS kind,
                   CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.name END AS name,
                   CASE WHEN $roles THEN i.role END AS role,
                   greatest(epoch(i.valid_from), epoch(CAST($since AS TIMESTAMPTZ))) AS s0,
                   least(coalesce(epoch(i.valid_to), epoch(coalesce(CAST($as_of AS TIMESTAMPTZ), now()))),
                         epoch(CAST($until AS TIMESTAMPTZ))) AS s1,
                   epoch(CAST($since AS TIMESTAMPTZ)) AS since_s,
                   coalesce(epoch(CAST($step AS INTERVAL)),
                            epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))) AS step_s,
                   CASE WHEN cardinality(i.gpu_resources) = 0 AND i.gpus > 0
                        THEN MAP {'unspecified': i.gpus} ELSE i.gpu_resources END AS gpu_map,
                   i.cpu, i.memory / 1073741824.0 AS memory_gib
            FROM (
                SELECT cluster, namespace, framework, uid, kind, name, NULL AS role, status, valid_from, valid_to,
                       gpus, cpu, memory, gpu_resources
                FROM status_intervals WHERE coalesce(CAST($basis AS VARCHAR), 'requested') = 'requested'
                UNION ALL
                SELECT cluster, namespace, framework, coalesce(workload_uid, uid), coalesce(workload_kind, 'Pod'),
                       coalesce(workload_name, name), coalesce(component, '-'), 'Running', valid_from, valid_to, gpus, cpu, memory, gpu_resources
                FROM pod_intervals WHERE CAST($basis AS VARCHAR) = 'allocated' AND state = 'Bound'
            ) i
            WHERE list_contains(coalesce(CAST($statuses AS VARCHAR[]), ['Running', 'Degraded']), i.status)
              AND i.valid_from < CAST($until AS TIMESTAMPTZ)
              AND (i.valid_to IS NULL OR i.valid_to > CAST($since AS TIMESTAMPTZ))
              AND (i.gpus > 0 OR i.cpu > 0 OR i.memory > 0)
              AND ($clusters IS NULL OR list_contains($clusters, i.cluster))
              AND ($namespaces IS NULL OR list_contains($namespaces, i.namespace))
              AND ($frameworks IS NULL OR list_contains($frameworks, i.framework))
        )
        WHERE s1 > s0
    )
),
changes AS (  -- per group, resource and period where an interval starts or ends: seconds x demand, level changes
    -- An interval spanning periods k0 < k1 joins the running level of full periods at k0 and leaves it
    -- at k1: its first period counts its seconds minus the full period the level gives it, its last
    -- one its seconds.  An interval within one period only counts its seconds.
    SELECT k, cluster, namespace, framework, uid, role, resource, any_value(kind) AS kind, any_value(name) AS name,
           sum(p * g) AS pg, sum(p * c) AS pc, sum(p * m) AS pm, sum(d * g) AS dg, sum(d * c) AS dc,
           sum(d * m) AS dm, sum(d) AS dn
    FROM (  -- an interval's first period (side 0) and, if another, its last (side 1)
        SELECT CASE side WHEN 0 THEN k0 ELSE k1 END AS k, cluster, namespace, framework, uid, role, resource, kind, name,
               g, c, m,
               CASE WHEN side = 1 THEN last_s WHEN k1 > k0 THEN first_s - step_s ELSE first_s END AS p,
               CASE WHEN k1 = k0 THEN 0 WHEN side = 0 THEN 1 ELSE -1 END AS d
        FROM (  -- one row per interval and GPU resource; CPU and memory ride on the first (resource NULL: no GPUs)
            SELECT k0, k1, first_s, last_s, step_s, cluster, namespace, framework, uid, role, kind, name,
                   map_keys(gpu_map)[j] AS resource, coalesce(map_values(gpu_map)[j], 0.0) AS g,
                   CASE WHEN j = 1 THEN cpu ELSE 0.0 END AS c, CASE WHEN j = 1 THEN memory_gib ELSE 0.0 END AS m
            FROM (SELECT *, unnest(range(1, greatest(cardinality(gpu_map), 1)::BIGINT + 1)) AS j FROM spans)
        ), (VALUES (0), (1)) AS sides(side)
        WHERE side = 0 OR k1 > k0
    )
    GROUP BY k, cluster, namespace, framework, uid, role, resource
),
levels AS (  -- the running level of full periods at each change and up to the next one
    SELECT *, sum(dg) OVER w AS ag, sum(dc) OVER w AS ac, sum(dm) OVER w AS am, sum(dn) OVER w AS an,
           lead(k) OVER w AS next_k
    FROM changes
    WINDOW w AS (PARTITION BY cluster, namespace, framework, uid, role, resource ORDER BY k)
),
usage AS (  -- seconds x demand per period, group and resource: the changes' periods, then the full periods up to the next change
    SELECT k, cluster, namespace, framework, uid, role, kind, name, resource,
           pg + ag * step_s AS gs, pc + ac * step_s AS cs, pm + am * step_s AS ms
    FROM levels, (SELECT coalesce(epoch(CAST($step AS INTERVAL)), epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))) AS step_s)
    UNION ALL
    SELECT r.kk, cluster, namespace, framework, uid, role, kind, name, resource,
           ag * step_s, ac * step_s, am * step_s
    FROM levels, (SELECT coalesce(epoch(CAST($step AS INTERVAL)), epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))) AS step_s), unnest(range(k + 1, next_k)) AS r(kk)
    WHERE an > 0
),
prices AS (  -- each (cluster, GPU resource) of the result, priced once
    SELECT u.cluster, u.resource, arg_min(p.price, p.rank) AS price
    FROM (SELECT DISTINCT cluster, resource FROM usage WHERE resource IS NOT NULL) u
    LEFT JOIN unnest(CAST($gpu_prices AS STRUCT(cluster VARCHAR, name VARCHAR, pattern VARCHAR, rank INTEGER, price DOUBLE)[])) AS t(p)
      ON (p.cluster IS NULL OR p.cluster = u.cluster)
     AND (CASE WHEN p.name IS NOT NULL THEN u.resource = p.name
               WHEN p.pattern IS NOT NULL THEN u.resource GLOB p.pattern ELSE true END)
    GROUP BY u.cluster, u.resource
),
rates AS (
    SELECT c.cluster, coalesce(own.r.cpu, dflt.r.cpu) AS cpu, coalesce(own.r.memory, dflt.r.memory) AS memory
    FROM (SELECT DISTINCT cluster FROM usage) c
    LEFT JOIN unnest(CAST($rates AS STRUCT(cluster VARCHAR, cpu DOUBLE, memory DOUBLE)[])) AS own(r) ON own.r.cluster = c.cluster
    LEFT JOIN unnest(CAST($rates AS STRUCT(cluster VARCHAR, cpu DOUBLE, memory DOUBLE)[])) AS dflt(r) ON dflt.r.cluster IS NULL
),
priced AS (  -- per period, group and GPU resource: priced rows, and clusters merged unless the group has them
    SELECT k, u.cluster, namespace, framework, uid, role, u.resource, kind, name, gs, cs, ms,
           gs * coalesce(p.price, 0.0) AS gpu_cost_s, cs * coalesce(r.cpu, 0.0) AS cpu_cost_s,
           ms * coalesce(r.memory, 0.0) AS memory_cost_s,
           CASE WHEN u.resource IS NOT NULL AND p.price IS NULL
                THEN [{'cluster': u.cluster, 'resource': u.resource, 'hours': gs / 3600.0}] END AS unpriced
    FROM usage u
    LEFT JOIN prices p ON p.cluster = u.cluster AND p.resource = u.resource
    LEFT JOIN rates r ON r.cluster = u.cluster
    WHERE (list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'cluster') OR list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload'))
    UNION ALL
    SELECT k, NULL, namespace, framework, uid, role, u.resource, any_value(kind), any_value(name),
           sum(gs), sum(cs), sum(ms), sum(gs * coalesce(p.price, 0.0)),
           sum(cs * coalesce(r.cpu, 0.0)), sum(ms * coalesce(r.memory, 0.0)),
           list({'cluster': u.cluster, 'resource': u.resource, 'hours': gs / 3600.0})
               FILTER (WHERE u.resource IS NOT NULL AND p.price IS NULL)
    FROM usage u
    LEFT JOIN prices p ON p.cluster = u.cluster AND p.resource = u.resource
    LEFT JOIN rates r ON r.cluster = u.cluster
    WHERE NOT (list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'cluster') OR list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload'))
    GROUP BY k, namespace, framework, uid, role, u.resource
),
grouped AS (
    SELECT k, cluster, namespace, framework, uid, role, any_value(kind) AS kind, any_value(name) AS name,
           sum(gs) / 3600.0 AS gpu_hours,
           coalesce(map_from_entries(list({'key': resource, 'value': gs / 3600.0}) FILTER (WHERE resource IS NOT NULL)),
                    MAP {}::MAP(VARCHAR, DOUBLE)) AS gpu_resources_hours,
           sum(cs) / 3600.0 AS cpu_core_hours, sum(ms) / 3600.0 AS memory_gib_hours,
           sum(gpu_cost_s) / 3600.0 AS gpu_cost, sum(cpu_cost_s) / 3600.0 AS cpu_cost,
           sum(memory_cost_s) / 3600.0 AS memory_cost,
           flatten(list(unpriced) FILTER (WHERE unpriced IS NOT NULL)) AS unpriced
    FROM priced
    GROUP BY k, cluster, namespace, framework, uid, role
)
SELECT to_timestamp(epoch(CAST($since AS TIMESTAMPTZ)) + k * coalesce(epoch(CAST($step AS INTERVAL)), epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ)))) AS period_start,
       to_timestamp(least(epoch(CAST($since AS TIMESTAMPTZ)) + (k + 1) * coalesce(epoch(CAST($step AS INTERVAL)), epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))),
                          epoch(CAST($until AS TIMESTAMPTZ)))) AS period_end,
       cluster, namespace, framework, uid, kind, name, role, gpu_hours, gpu_resources_hours AS gpu_hours_by_resource,
       cpu_core_hours, memory_gib_hours,
       CASE WHEN $gpu_prices IS NOT NULL THEN gpu_cost END AS gpu_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN cpu_cost END AS cpu_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN memory_cost END AS memory_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN gpu_cost + cpu_cost + memory_cost END AS cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN unpriced END AS unpriced
FROM grouped
ORDER BY k, coalesce(cost, gpu_hours) DESC, gpu_hours DESC,  -- then the group's columns, in the order of $by
         coalesce(CASE CAST($by AS VARCHAR[])[1] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                  WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
         coalesce(CASE CAST($by AS VARCHAR[])[2] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                  WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
         coalesce(CASE CAST($by AS VARCHAR[])[3] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                  WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
         coalesce(CASE CAST($by AS VARCHAR[])[4] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                  WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
         uid, role
