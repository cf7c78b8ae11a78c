-- GPU-hours per framework over the whole history: held by the workloads' bound pods (allocated,
-- what `cost` bills by default) beside what their specs asked for while Running or Degraded.
--
-- Answers "which frameworks used the GPUs?" (the `demo` summary's second table), and shows where
-- a spec asked for more than its pods got (pods pending for capacity).  Open intervals count up
-- to the last observed workload state (not now), so a replayed or simulated history reads the
-- same whenever it is queried; rounded to 0.1 GPU-hour, the largest allocation first.
-- Parameters: none.
WITH bounds AS (SELECT max(observed_at) AS last FROM workload_states),
requested AS (
    SELECT framework, sum(gpus * epoch(coalesce(valid_to, last) - valid_from)) / 3600 AS gpu_hours
    FROM status_intervals, bounds
    WHERE status IN ('Running', 'Degraded')
    GROUP BY framework
),
allocated AS (
    SELECT framework,
           sum(gpus * greatest(0, epoch(least(coalesce(valid_to, last), last) - valid_from))) / 3600 AS gpu_hours
    FROM pod_intervals, bounds
    WHERE state = 'Bound' AND framework IS NOT NULL
    GROUP BY framework
)
SELECT coalesce(a.framework, r.framework) AS framework,
       round(coalesce(a.gpu_hours, 0), 1) AS allocated_gpu_hours,
       round(coalesce(r.gpu_hours, 0), 1) AS requested_gpu_hours
FROM allocated a FULL OUTER JOIN requested r ON a.framework = r.framework
ORDER BY allocated_gpu_hours DESC, requested_gpu_hours DESC, framework
