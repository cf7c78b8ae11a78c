-- GPU-hours consumed while Running or Degraded, per framework, over the whole history.
--
-- Answers "which frameworks used the GPUs?" (the `demo` summary's second table).  An open
-- interval counts up to the last observed state (not now), so a replayed or simulated history
-- reads the same whenever it is queried; rounded to 0.1 GPU-hour, the largest first.
-- Parameters: none.
SELECT framework, round(sum(gpus * epoch(coalesce(valid_to, last) - valid_from)) / 3600, 1) AS gpu_hours
FROM status_intervals, (SELECT max(observed_at) AS last FROM workload_states)
WHERE status IN ('Running', 'Degraded')
GROUP BY framework ORDER BY gpu_hours DESC
