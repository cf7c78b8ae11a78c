-- Status transitions in arrival order, after a cursor: the event feed read from the warehouse.
--
-- Answers "what changed state, where, and when?".  The transitions table is append-only, so its
-- rowid is the order rows arrived in: a follower passes the last rowid it printed as $after_row
-- and gets only what came since (even a transition of a late cluster with an older timestamp).
-- The first read ($after_row NULL) comes in time order.
-- Parameters:
--   $after_row   BIGINT, NULL = from the beginning
--   $since       TIMESTAMPTZ, NULL = any time: only transitions at or after it
--   $clusters, $namespaces, $kinds
--                VARCHAR[] filters, NULL = no filter
--   $statuses    VARCHAR[] of to-statuses, NULL = any
--   $limit       INTEGER, the first rows only (a reader that takes a bounded number per read), NULL = all
SELECT rowid AS row, cluster, namespace, name, kind, uid, framework, definition,
       from_status, to_status, transitioned_at, gpus, previous_duration_seconds
FROM transitions
WHERE ($after_row IS NULL OR rowid > $after_row)
  AND ($since IS NULL OR transitioned_at >= CAST($since AS TIMESTAMPTZ))
  AND ($clusters IS NULL OR list_contains($clusters, cluster))
  AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
  AND ($kinds IS NULL OR list_contains($kinds, kind))
  AND ($statuses IS NULL OR list_contains($statuses, to_status))
ORDER BY CASE WHEN $after_row IS NULL THEN transitioned_at END, rowid
LIMIT $limit
