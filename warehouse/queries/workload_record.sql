-- One workload's latest record, as the writer holds it now (a deleted workload's last one).
--
-- Answers "what is this workload, and what does it hold?" for the HTTP API's workload endpoint.
-- The newest state by observation time (then arrival) among the workload's states; its uid
-- names its history (workload_history).
-- Parameters:
--   $cluster, $kind, $object_name   VARCHAR (the object's metadata.name)
--   $namespace               VARCHAR, NULL for a cluster-scoped kind
SELECT cluster, uid, api_version, kind, namespace, name, definition, framework, status, phase,
       observed_at, deleted, pods, gpus, cpu, memory, record
FROM state_history
WHERE cluster = $cluster AND kind = $kind AND name = $object_name
  AND namespace IS NOT DISTINCT FROM $namespace
ORDER BY observed_at DESC, seq DESC
LIMIT 1
