-- Demand over a window, step by step: time-weighted average and peak per step and group.
--
-- Answers "how many GPUs did we use each hour / day, on average and at the peak?".
-- Steps are [$since + k*$step, $since + (k+1)*$step), the last one cut at $until.  Per group the
-- demand is a step function of time: each interval adds its demand from valid_from to valid_to
-- (an open interval lasts past $until).  avg_R = integral of the demand over the step / the
-- step's length; peak_R = the highest demand at any instant of the step (peaks of GPUs, CPU and
-- memory are each their own maximum, maybe at different instants).  Every group present in the
-- window gets every step (0 where it had nothing).
-- Parameters:
--   $since, $until  TIMESTAMPTZ, the window
--   $step           INTERVAL of a fixed length, e.g. INTERVAL 1 HOUR (steps are computed in epoch
--                   seconds: a day is 24 h, and a month is not a step)
--   $statuses       VARCHAR[] of statuses counted, NULL = Running and Degraded (holding their resources)
--   $by             VARCHAR[] of grouping dimensions among cluster, namespace, framework, kind, status
--   $clusters, $namespaces, $frameworks, $kinds
--                   VARCHAR[] filters, NULL = no filter
WITH clipped AS (
    SELECT
        CASE WHEN list_contains(coalesce($by, []), 'cluster') THEN cluster END AS cluster,
        CASE WHEN list_contains(coalesce($by, []), 'namespace') THEN namespace END AS namespace,
        CASE WHEN list_contains(coalesce($by, []), 'framework') THEN framework END AS framework,
        CASE WHEN list_contains(coalesce($by, []), 'kind') THEN kind END AS kind,
        CASE WHEN list_contains(coalesce($by, []), 'status') THEN status END AS status,
        greatest(valid_from, CAST($since AS TIMESTAMPTZ)) AS f,
        least(coalesce(valid_to, 'infinity'::TIMESTAMPTZ), CAST($until AS TIMESTAMPTZ)) AS t,
        gpus, cpu, memory
    FROM status_intervals
    WHERE list_contains(coalesce($statuses, ['Running', 'Degraded']), status)
      AND valid_from < CAST($until AS TIMESTAMPTZ)
      AND (valid_to IS NULL OR valid_to > CAST($since AS TIMESTAMPTZ))
      AND ($clusters IS NULL OR list_contains($clusters, cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, framework))
      AND ($kinds IS NULL OR list_contains($kinds, kind))
),
changes AS (  -- demand deltas per group and instant
    SELECT cluster, namespace, framework, kind, status, t0,
           sum(dg) AS dg, sum(dc) AS dc, sum(dm) AS dm
    FROM (
        SELECT cluster, namespace, framework, kind, status, f AS t0, gpus AS dg, cpu AS dc, memory AS dm FROM clipped
        UNION ALL
        SELECT cluster, namespace, framework, kind, status, t, -gpus, -cpu, -memory FROM clipped
        WHERE t < CAST($until AS TIMESTAMPTZ)
    )
    GROUP BY ALL
),
segments AS (  -- constant demand from `t0` to `upto`
    SELECT cluster, namespace, framework, kind, status, t0,
           coalesce(lead(t0) OVER w, CAST($until AS TIMESTAMPTZ)) AS upto,
           sum(dg) OVER w AS gpus, sum(dc) OVER w AS cpu, sum(dm) OVER w AS memory
    FROM changes  -- one row per group and instant: the default frame (up to the row's t0) is the running sum
    WINDOW w AS (PARTITION BY cluster, namespace, framework, kind, status ORDER BY t0)
),
steps AS (  -- k, [step_start, step_end)
    SELECT k, to_timestamp(since_s + k * step_s) AS step_start,
           to_timestamp(least(since_s + (k + 1) * step_s, until_s)) AS step_end
    FROM (SELECT epoch(CAST($since AS TIMESTAMPTZ)) AS since_s, epoch(CAST($until AS TIMESTAMPTZ)) AS until_s,
                 epoch(CAST($step AS INTERVAL)) AS step_s),
         range(0, CAST(ceil((until_s - since_s) / step_s) AS BIGINT)) AS r(k)
),
groups AS (SELECT DISTINCT cluster, namespace, framework, kind, status FROM changes),
measured AS (  -- each segment split at the steps it overlaps (arithmetic on epoch seconds, no range join)
    SELECT k, cluster, namespace, framework, kind, status,
           sum(gpus * seconds) AS gpu_seconds, sum(cpu * seconds) AS cpu_seconds,
           sum(memory * seconds) AS memory_seconds,
           max(gpus) AS peak_gpus, max(cpu) AS peak_cpu, max(memory) AS peak_memory
    FROM (
        SELECT k, cluster, namespace, framework, kind, status, gpus, cpu, memory,
               least(u, since_s + (k + 1) * step_s) - greatest(f, since_s + k * step_s) AS seconds
        FROM (
            SELECT *, unnest(range(CAST(floor((f - since_s) / step_s) AS BIGINT),
                                   CAST(ceil((u - since_s) / step_s) AS BIGINT))) AS k
            FROM (SELECT cluster, namespace, framework, kind, status, gpus, cpu, memory,
                         epoch(t0) AS f, epoch(upto) AS u, epoch(CAST($since AS TIMESTAMPTZ)) AS since_s,
                         epoch(CAST($step AS INTERVAL)) AS step_s
                  FROM segments WHERE upto > t0)
        )
    )
    GROUP BY ALL
)
SELECT st.step_start, st.step_end, gr.cluster, gr.namespace, gr.framework, gr.kind, gr.status,
       coalesce(m.gpu_seconds, 0) / epoch(st.step_end - st.step_start) AS avg_gpus,
       coalesce(m.peak_gpus, 0) AS peak_gpus,
       coalesce(m.cpu_seconds, 0) / epoch(st.step_end - st.step_start) AS avg_cpu,
       coalesce(m.peak_cpu, 0) AS peak_cpu,
       coalesce(m.memory_seconds, 0) / epoch(st.step_end - st.step_start) AS avg_memory,
       coalesce(m.peak_memory, 0)::BIGINT AS peak_memory
FROM steps st CROSS JOIN groups gr
LEFT JOIN measured m ON m.k = st.k
    AND m.cluster IS NOT DISTINCT FROM gr.cluster AND m.namespace IS NOT DISTINCT FROM gr.namespace
    AND m.framework IS NOT DISTINCT FROM gr.framework AND m.kind IS NOT DISTINCT FROM gr.kind
    AND m.status IS NOT DISTINCT FROM gr.status
ORDER BY st.step_start, gr.cluster NULLS FIRST, gr.namespace NULLS FIRST, gr.framework NULLS FIRST,
         gr.kind NULLS FIRST, gr.status NULLS FIRST
