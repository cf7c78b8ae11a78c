-- The first and last instants of the history (observed_at of the workload states).
--
-- Answers "what period does this warehouse cover?"; the default end of a capacity time series.
-- Parameters: none.
SELECT min(observed_at) AS first_observed, max(observed_at) AS last_observed FROM workload_states
