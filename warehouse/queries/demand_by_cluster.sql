-- GPU demand per cluster at the end of the history, by what the workloads are doing.
--
-- Answers "how many GPUs does each cluster's work hold, wait for or ask for now?" (the
-- `demo` summary's first table).  From current_workloads (the latest state of each workload
-- still there): running = Running and Degraded, starting = Initializing, queued = Suspended
-- and Suspending, requested = every status; NULL where no workload is in those states.
-- Parameters: none.
SELECT cluster,
       count(*) AS workloads,
       sum(gpus) FILTER (WHERE status IN ('Running', 'Degraded')) AS running,
       sum(gpus) FILTER (WHERE status = 'Initializing') AS starting,
       sum(gpus) FILTER (WHERE status IN ('Suspended', 'Suspending')) AS queued,
       sum(gpus) AS requested
FROM current_workloads GROUP BY cluster ORDER BY cluster
