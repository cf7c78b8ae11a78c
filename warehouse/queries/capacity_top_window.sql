-- The workloads that used the most GPU-hours over a window, with their average and peak GPUs.
--
-- Answers "who used the GPUs this week?".  GPU-hours = sum over the workload's intervals in the
-- counted statuses of gpus x (the part of the interval inside [$since, $until)) in hours; an open
-- interval lasts past $until.  avg_gpus = GPU-hours over the window's length; peak_gpus = the
-- most it requested in one interval of the window.
-- Parameters:
--   $since, $until  TIMESTAMPTZ, the window
--   $limit          BIGINT, how many workloads
--   $statuses       VARCHAR[] of statuses counted, NULL = Running and Degraded
--   $clusters, $namespaces, $frameworks, $kinds
--                   VARCHAR[] filters, NULL = no filter
SELECT cluster, namespace, name, kind, framework,
       sum(gpus * epoch(least(coalesce(valid_to, 'infinity'::TIMESTAMPTZ), CAST($until AS TIMESTAMPTZ))
                        - greatest(valid_from, CAST($since AS TIMESTAMPTZ)))) / 3600.0 AS gpu_hours,
       sum(gpus * epoch(least(coalesce(valid_to, 'infinity'::TIMESTAMPTZ), CAST($until AS TIMESTAMPTZ))
                        - greatest(valid_from, CAST($since AS TIMESTAMPTZ))))
           / epoch(CAST($until AS TIMESTAMPTZ) - CAST($since AS TIMESTAMPTZ)) AS avg_gpus,
       max(gpus) AS peak_gpus
FROM status_intervals
WHERE list_contains(coalesce($statuses, ['Running', 'Degraded']), status)
  AND valid_from < CAST($until AS TIMESTAMPTZ)
  AND (valid_to IS NULL OR valid_to > CAST($since AS TIMESTAMPTZ))
  AND ($clusters IS NULL OR list_contains($clusters, cluster))
  AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
  AND ($frameworks IS NULL OR list_contains($frameworks, framework))
  AND ($kinds IS NULL OR list_contains($kinds, kind))
GROUP BY cluster, uid, namespace, name, kind, framework
ORDER BY gpu_hours DESC, peak_gpus DESC, cluster, namespace, name
LIMIT $limit
