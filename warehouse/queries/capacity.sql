-- Demand at one instant per group: GPUs, CPU cores and memory bytes, split by what the workloads are doing.
--
-- Answers "how many GPUs are requested right now (or at $at), where, and in which state?".
-- Now: from workload_current, the writer's keyed current state (every live workload's latest
-- state and open interval); at $at: from status_intervals, the intervals open at the instant.
-- Deleted workloads hold nothing and are left out.
-- Columns per resource R (gpus, cpu, memory):
--   running_R   Running + Degraded  (pods scheduled and holding their resources)
--   degraded_R  Degraded alone      (the unhealthy part of running_R)
--   starting_R  Initializing + Resuming (acquiring their resources)
--   queued_R    Suspended + Suspending  (asking, holding nothing)
--   all_R       every status but Deleted (also Completed/Failed/Undefined: what their specs still request)
-- Parameters:
--   $at          TIMESTAMPTZ, NULL = now (the open intervals)
--   $by          VARCHAR[] of grouping dimensions among cluster, namespace, framework, kind, status;
--                the others come out NULL (NULL or [] = one total row)
--   $clusters, $namespaces, $frameworks, $kinds, $statuses
--                VARCHAR[] filters, NULL = no filter
WITH live AS (
    SELECT cluster, namespace, framework, kind, status, gpus, cpu, memory
    FROM (  -- now: the keyed current state (one row per live workload); at $at: the intervals
        SELECT cluster, namespace, framework, kind, status, gpus, cpu, memory FROM workload_current
        WHERE CAST($at AS TIMESTAMPTZ) IS NULL
        UNION ALL
        SELECT cluster, namespace, framework, kind, status, gpus, cpu, memory FROM status_intervals
        WHERE CAST($at AS TIMESTAMPTZ) IS NOT NULL AND status <> 'Deleted'
          AND valid_from <= CAST($at AS TIMESTAMPTZ) AND (valid_to IS NULL OR valid_to > CAST($at AS TIMESTAMPTZ))
    )
    WHERE ($clusters IS NULL OR list_contains($clusters, cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, framework))
      AND ($kinds IS NULL OR list_contains($kinds, kind))
      AND ($statuses IS NULL OR list_contains($statuses, status))
)
SELECT
    CASE WHEN list_contains(coalesce($by, []), 'cluster') THEN cluster END AS cluster,
    CASE WHEN list_contains(coalesce($by, []), 'namespace') THEN namespace END AS namespace,
    CASE WHEN list_contains(coalesce($by, []), 'framework') THEN framework END AS framework,
    CASE WHEN list_contains(coalesce($by, []), 'kind') THEN kind END AS kind,
    CASE WHEN list_contains(coalesce($by, []), 'status') THEN status END AS status,
    count(*) AS workloads,
    coalesce(sum(gpus) FILTER (WHERE status IN ('Running', 'Degraded')), 0) AS running_gpus,
    coalesce(sum(gpus) FILTER (WHERE status = 'Degraded'), 0) AS degraded_gpus,
    coalesce(sum(gpus) FILTER (WHERE status IN ('Initializing', 'Resuming')), 0) AS starting_gpus,
    coalesce(sum(gpus) FILTER (WHERE status IN ('Suspended', 'Suspending')), 0) AS queued_gpus,
    coalesce(sum(gpus), 0) AS all_gpus,
    coalesce(sum(cpu) FILTER (WHERE status IN ('Running', 'Degraded')), 0) AS running_cpu,
    coalesce(sum(cpu) FILTER (WHERE status = 'Degraded'), 0) AS degraded_cpu,
    coalesce(sum(cpu) FILTER (WHERE status IN ('Initializing', 'Resuming')), 0) AS starting_cpu,
    coalesce(sum(cpu) FILTER (WHERE status IN ('Suspended', 'Suspending')), 0) AS queued_cpu,
    coalesce(sum(cpu), 0) AS all_cpu,
    coalesce(sum(memory) FILTER (WHERE status IN ('Running', 'Degraded')), 0)::BIGINT AS running_memory,
    coalesce(sum(memory) FILTER (WHERE status = 'Degraded'), 0)::BIGINT AS degraded_memory,
    coalesce(sum(memory) FILTER (WHERE status IN ('Initializing', 'Resuming')), 0)::BIGINT AS starting_memory,
    coalesce(sum(memory) FILTER (WHERE status IN ('Suspended', 'Suspending')), 0)::BIGINT AS queued_memory,
    coalesce(sum(memory), 0)::BIGINT AS all_memory
FROM live
GROUP BY ALL
ORDER BY cluster NULLS FIRST, namespace NULLS FIRST, framework NULLS FIRST, kind NULLS FIRST, status NULLS FIRST
