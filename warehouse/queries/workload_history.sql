-- One workload's status history: its intervals in time order, the open one last.
--
-- Answers "when did this workload start, wait, run, stop, and with how much?".
-- Parameters:
--   $cluster, $uid   VARCHAR: the workload (workload_record gives its uid)
--   $limit           INTEGER: the most recent intervals to return
SELECT status, valid_from, valid_to, pods, gpus, cpu, memory
FROM (
    SELECT * FROM status_intervals
    WHERE cluster = $cluster AND uid = $uid
    ORDER BY valid_from DESC
    LIMIT $limit
)
ORDER BY valid_from
