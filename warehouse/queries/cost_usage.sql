-- Resource-hours consumed in a window: GPU-hours per GPU resource name, CPU core-hours, memory GiB-hours.
--
-- Answers "how many GPU-hours (CPU core-hours, memory GiB-hours) did we consume, where, and when?";
-- the cost report (warehouse/costing.py) multiplies them by the prices of a pricing file.
-- Read from status_intervals.  Only intervals in a consuming status count ($statuses), and each
-- counts only its part inside the window: an interval from 22:00 to 02:00 over a window starting
-- at 00:00 counts 2 hours.  An open interval (valid_to NULL: the workload's current state) lasts
-- until $as_of, never past it.  GPU-hours = GPUs x hours per GPU resource name (a record with GPUs
-- but no resource names counts them as 'unspecified'); CPU core-hours = cores x hours; memory
-- GiB-hours = bytes / 2^30 x hours.
-- Periods: with $step, [$since + k*$step, $since + (k+1)*$step), the last one cut at $until (times
-- are computed in epoch seconds, so a day is always 24 h whatever the session's time zone); an
-- interval across period boundaries is split at them.  Without $step, one period: the whole window.
-- Speed: one pass over the intervals and one aggregation.  Each interval is reduced to its first
-- period k0, last period k1 and its hours in those two; intervals are summed per (k0, k1, group,
-- GPU map) (the demand is linear, so a sum of hours times a map is the sum of GPU-hours), and
-- only those few sums are expanded to the full periods in between and unnested per GPU resource.
-- Rows: one per period, group and GPU resource name (gpu_resource NULL: the row carrying the CPU
-- and memory hours).  cluster is always a group key (prices depend on it); namespace, framework
-- and uid are keys when $by asks for them (else NULL), and 'workload' (uid) implies namespace
-- and framework, which are the workload's own.
-- Parameters:
--   $since, $until  TIMESTAMPTZ, the window
--   $as_of          TIMESTAMPTZ, where open intervals end; NULL = now()
--   $step           INTERVAL, e.g. INTERVAL 1 DAY; NULL = one period
--   $statuses       VARCHAR[], the consuming statuses; NULL = Running and Degraded
--   $by             VARCHAR[] among namespace, framework, workload; NULL or [] = per cluster only
--   $clusters, $namespaces, $frameworks
--                   VARCHAR[] filters, NULL = no filter
WITH clipped AS (  -- consuming intervals cut to the window, in epoch seconds [s0, s1)
    SELECT i.cluster,
           CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'namespace')
                  OR list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.namespace END AS namespace,
           CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'framework')
                  OR list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.framework END AS framework,
           CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.uid END AS uid,
           CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.kind END AS kind,
           CASE WHEN list_contains(coalesce(CAST($by AS VARCHAR[]), []), 'workload') THEN i.name END AS name,
           greatest(epoch(i.valid_from), epoch(CAST($since AS TIMESTAMPTZ))) AS s0,
           least(coalesce(epoch(i.valid_to), epoch(coalesce(CAST($as_of AS TIMESTAMPTZ), now()))),
                 epoch(CAST($until AS TIMESTAMPTZ))) AS s1,
           epoch(CAST($since AS TIMESTAMPTZ)) AS since_s,
           coalesce(epoch(CAST($step AS INTERVAL)),
                    epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))) AS step_s,
           CASE WHEN cardinality(i.gpu_resources) = 0 AND i.gpus > 0
                THEN MAP {'unspecified': i.gpus} ELSE i.gpu_resources END AS gpu_map,
           i.cpu, i.memory / 1073741824.0 AS memory_gib
    FROM status_intervals i
    WHERE list_contains(coalesce(CAST($statuses AS VARCHAR[]), ['Running', 'Degraded']), i.status)
      AND i.valid_from < CAST($until AS TIMESTAMPTZ)
      AND (i.valid_to IS NULL OR i.valid_to > CAST($since AS TIMESTAMPTZ))
      AND (i.gpus > 0 OR i.cpu > 0 OR i.memory > 0)
      AND ($clusters IS NULL OR list_contains($clusters, i.cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, i.namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, i.framework))
),
spans AS (  -- first and last period of each interval, and its seconds in each
    SELECT *,
           least(s1, since_s + (k0 + 1) * step_s) - s0 AS first_s,
           CASE WHEN k1 > k0 THEN s1 - (since_s + k1 * step_s) ELSE 0 END AS last_s
    FROM (SELECT *, floor((s0 - since_s) / step_s)::BIGINT AS k0,
                    (ceil((s1 - since_s) / step_s) - 1)::BIGINT AS k1
          FROM clipped WHERE s1 > s0)
),
summed AS (
    SELECT k0, k1, cluster, namespace, framework, uid, any_value(kind) AS kind, any_value(name) AS name, gpu_map,
           any_value(step_s) AS step_s,
           sum(first_s) AS first_s, sum(cpu * first_s) AS first_cpu, sum(memory_gib * first_s) AS first_mem,
           sum(last_s) AS last_s, sum(cpu * last_s) AS last_cpu, sum(memory_gib * last_s) AS last_mem,
           count(*) AS n, sum(cpu) AS cpu, sum(memory_gib) AS memory_gib
    FROM spans
    GROUP BY k0, k1, cluster, namespace, framework, uid, gpu_map
),
periods AS (  -- seconds (times the GPU map), core-seconds and GiB-seconds per period
    SELECT k, cluster, namespace, framework, uid, any_value(kind) AS kind, any_value(name) AS name, gpu_map,
           sum(seconds) AS seconds, sum(cpu_s) AS cpu_s, sum(mem_s) AS mem_s
    FROM (
        SELECT k0 AS k, cluster, namespace, framework, uid, kind, name, gpu_map,
               first_s AS seconds, first_cpu AS cpu_s, first_mem AS mem_s
        FROM summed
        UNION ALL
        SELECT k1, cluster, namespace, framework, uid, kind, name, gpu_map, last_s, last_cpu, last_mem
        FROM summed WHERE k1 > k0
        UNION ALL
        SELECT r.k, cluster, namespace, framework, uid, kind, name, gpu_map,
               n * step_s, cpu * step_s, memory_gib * step_s
        FROM summed, unnest(range(k0 + 1, k1)) AS r(k)
        WHERE k1 > k0 + 1
    )
    GROUP BY k, cluster, namespace, framework, uid, gpu_map
),
usage AS (
    SELECT k, cluster, namespace, framework, uid, kind, name, NULL::VARCHAR AS resource,
           0.0 AS gpu_hours, cpu_s / 3600.0 AS cpu_core_hours, mem_s / 3600.0 AS memory_gib_hours
    FROM periods
    UNION ALL
    SELECT p.k, p.cluster, p.namespace, p.framework, p.uid, p.kind, p.name, g.resource,
           g.gpus * p.seconds / 3600.0, 0.0, 0.0
    FROM periods p,
         LATERAL (SELECT unnest(map_keys(p.gpu_map)) AS resource, unnest(map_values(p.gpu_map)) AS gpus) g
)
SELECT to_timestamp(epoch(CAST($since AS TIMESTAMPTZ))
                    + k * coalesce(epoch(CAST($step AS INTERVAL)), 0)) AS period,
       cluster, namespace, framework, uid, any_value(kind) AS kind, any_value(name) AS name, resource AS gpu_resource,
       sum(gpu_hours) AS gpu_hours, sum(cpu_core_hours) AS cpu_core_hours, sum(memory_gib_hours) AS memory_gib_hours
FROM usage
GROUP BY k, cluster, namespace, framework, uid, resource
ORDER BY period, cluster, namespace NULLS FIRST, framework NULLS FIRST, uid NULLS FIRST, gpu_resource NULLS FIRST
