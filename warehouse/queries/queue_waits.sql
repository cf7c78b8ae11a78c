-- Queue wait of workloads: from creation to the first instant all the pods they ask for are bound; summaries.
--
-- Answers "how long does work wait for GPUs, where, and who is waiting now?".  A workload's wait
-- runs from its metadata.creationTimestamp to the first instant at which as many of its pods are
-- Bound as its record asks for at that instant (total.pods, from its status intervals; at least
-- one).  Bound pods are counted from the pod intervals attributed to the workload.  A workload that
-- never got there is waiting while it is live and not Completed or Failed (its wait so far runs to
-- $as_of), and is left out otherwise (it ended, or was deleted, before its pods were all bound).
-- Rows: one per group of $by; `workload` makes each workload its own group (with its created,
-- ready_at and status).  Per group: workloads, waiting (of them, still waiting), and the p50, p90
-- and max of the waits in seconds (waiting ones counted with their wait so far).
-- Parameters:
--   $since, $until  TIMESTAMPTZ: only workloads created in [$since, $until); NULL = no bound
--   $as_of          TIMESTAMPTZ, the end of the waits still running; NULL = now()
--   $by             VARCHAR[] among cluster, namespace, framework, workload; NULL or [] = one row
--   $waiting        BOOLEAN: true = only the workloads waiting at $as_of
--   $clusters, $namespaces, $frameworks   VARCHAR[] filters, NULL = none
WITH workloads AS (  -- every workload with its creation (its first state that has one) and latest identity
    SELECT cluster, uid, arg_max(namespace, seq) AS namespace, arg_max(name, seq) AS name,
           arg_max(kind, seq) AS kind, arg_max(framework, seq) AS framework,
           min(creation_timestamp) AS created
    FROM state_history
    WHERE ($clusters IS NULL OR list_contains($clusters, cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, framework))
    GROUP BY cluster, uid
    HAVING min(creation_timestamp) >= coalesce(CAST($since AS TIMESTAMPTZ), '-infinity'::TIMESTAMPTZ)
       AND min(creation_timestamp) < coalesce(CAST($until AS TIMESTAMPTZ), 'infinity'::TIMESTAMPTZ)
),
events AS (  -- per workload and instant: the change of its bound pods, and the pods it asks for from then
    SELECT cluster, uid, t, sum(d) AS d, max(asks) AS asks
    FROM (
        SELECT cluster, workload_uid AS uid, valid_from AS t, 1 AS d, NULL::INTEGER AS asks
        FROM pod_intervals WHERE state = 'Bound' AND workload_uid IS NOT NULL
        UNION ALL
        SELECT cluster, workload_uid, valid_to, -1, NULL FROM pod_intervals
        WHERE state = 'Bound' AND workload_uid IS NOT NULL AND valid_to IS NOT NULL
        UNION ALL
        SELECT cluster, uid, valid_from, 0, pods FROM status_intervals
    )
    WHERE (cluster, uid) IN (SELECT (cluster, uid) FROM workloads)
    GROUP BY cluster, uid, t
),
levels AS (
    SELECT cluster, uid, t,
           sum(d) OVER w AS bound,
           last_value(asks IGNORE NULLS) OVER w AS asks
    FROM events
    WINDOW w AS (PARTITION BY cluster, uid ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
ready AS (
    SELECT l.cluster, l.uid, min(l.t) AS ready_at
    FROM levels l JOIN workloads w ON w.cluster = l.cluster AND w.uid = l.uid
    WHERE l.bound >= greatest(l.asks, 1) AND l.t >= w.created
    GROUP BY l.cluster, l.uid
),
waits AS (
    SELECT w.*, r.ready_at, c.status,
           r.ready_at IS NULL AS waiting,
           epoch(coalesce(r.ready_at, coalesce(CAST($as_of AS TIMESTAMPTZ), now())) - w.created) AS wait_s
    FROM workloads w
    LEFT JOIN ready r ON r.cluster = w.cluster AND r.uid = w.uid
    LEFT JOIN workload_current c ON c.cluster = w.cluster AND c.uid = w.uid
    WHERE r.ready_at IS NOT NULL OR (c.uid IS NOT NULL AND c.status NOT IN ('Completed', 'Failed'))
)
SELECT
    CASE WHEN list_contains(coalesce($by, []), 'cluster') OR list_contains(coalesce($by, []), 'workload') THEN cluster END AS cluster,
    CASE WHEN list_contains(coalesce($by, []), 'namespace') OR list_contains(coalesce($by, []), 'workload') THEN namespace END AS namespace,
    CASE WHEN list_contains(coalesce($by, []), 'framework') OR list_contains(coalesce($by, []), 'workload') THEN framework END AS framework,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN kind END AS kind,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN name END AS name,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN uid END AS uid,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN any_value(created) END AS created,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN any_value(ready_at) END AS ready_at,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN any_value(status) END AS status,
    count(*) AS workloads, count(*) FILTER (WHERE waiting) AS waiting,
    quantile_cont(wait_s, 0.5) AS p50_wait_s, quantile_cont(wait_s, 0.9) AS p90_wait_s, max(wait_s) AS max_wait_s
FROM waits
WHERE NOT coalesce($waiting, false) OR waiting
GROUP BY ALL
ORDER BY max_wait_s DESC, cluster NULLS FIRST, namespace NULLS FIRST, framework NULLS FIRST, name NULLS FIRST
