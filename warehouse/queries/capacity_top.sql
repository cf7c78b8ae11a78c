-- The workloads requesting the most GPUs at one instant.
--
-- Answers "who holds the GPUs right now (or at $at)?".  From status_intervals, like capacity.sql;
-- ties are broken by CPU, then cluster / namespace / name.
-- Parameters:
--   $at          TIMESTAMPTZ, NULL = now (the open intervals)
--   $limit       BIGINT, how many workloads
--   $statuses    VARCHAR[] of statuses counted, NULL = Running and Degraded (holding their GPUs)
--   $clusters, $namespaces, $frameworks, $kinds
--                VARCHAR[] filters, NULL = no filter
SELECT cluster, namespace, name, kind, framework, status, valid_from AS since,
       pods, gpus, cpu, memory, gpu_resources
FROM status_intervals
WHERE status <> 'Deleted'
  AND CASE WHEN CAST($at AS TIMESTAMPTZ) IS NULL THEN valid_to IS NULL
           ELSE valid_from <= CAST($at AS TIMESTAMPTZ)
                AND (valid_to IS NULL OR valid_to > CAST($at AS TIMESTAMPTZ)) END
  AND list_contains(coalesce($statuses, ['Running', 'Degraded']), status)
  AND ($clusters IS NULL OR list_contains($clusters, cluster))
  AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
  AND ($frameworks IS NULL OR list_contains($frameworks, framework))
  AND ($kinds IS NULL OR list_contains($kinds, kind))
ORDER BY gpus DESC, cpu DESC, cluster, namespace, name
LIMIT $limit
