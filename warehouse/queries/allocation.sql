-- GPUs the clusters have, the pods hold and wait for, and the workloads request, at one instant per group.
--
-- Answers "how many GPUs do we have, how many are allocated, how many idle, how many wait?" now (the
-- writer's keyed current pods, nodes and workloads) or at $at (the intervals open at the instant).
-- Columns (GPUs; a MIG slice counts as one, as in the records' `gpu`):
--   nodes          nodes that exist
--   allocatable    the nodes' status.allocatable (cordoned and not-ready nodes included)
--   schedulable    allocatable of the nodes Ready and not cordoned
--   unschedulable  allocatable of the cordoned nodes (spec.unschedulable)
--   allocated      the requests of the pods bound to a node (state Bound), on it, if a node record
--                  has the node then
--   unknown_node_allocated  the requests of the Bound pods on a node no node record has then (its
--                  events missing, or it was deleted): apart, never against a node's allocatable
--   idle           allocatable - allocated (never negative for want of a node: see above); only for
--                  groups of node-side columns (cluster, gpu_product, node_pool, node): a namespace
--                  has no nodes of its own
--   pending        the requests of the pods waiting for a node (state Pending)
--   requested      what the live workloads ask for (their records' total.gpu) while they want to
--                  run: Running, Degraded, Initializing, Resuming, Suspended, Suspending
--   bound_pods, pending_pods, workloads (that request)
-- Node-side columns of a pod are those of the node it is bound to (NULL while it pends); node-side
-- columns of a workload's request and pod-side columns (namespace, framework, workload) of a node
-- are NULL.
-- Parameters:
--   $at          TIMESTAMPTZ, NULL = now
--   $by          VARCHAR[] among cluster, gpu_product, node_pool, node, namespace, framework, workload
--                (workload: kind, name, uid); NULL or [] = one total row
--   $clusters, $namespaces, $frameworks, $node_pools, $gpu_products   VARCHAR[] filters, NULL = none
WITH nodes AS (
    SELECT cluster, name, gpus, unschedulable, ready, gpu_product, node_pool FROM node_current
    WHERE CAST($at AS TIMESTAMPTZ) IS NULL AND NOT deleted
    UNION ALL
    SELECT cluster, name, gpus, unschedulable, ready, gpu_product, node_pool FROM node_intervals
    WHERE CAST($at AS TIMESTAMPTZ) IS NOT NULL
      AND valid_from <= CAST($at AS TIMESTAMPTZ) AND (valid_to IS NULL OR valid_to > CAST($at AS TIMESTAMPTZ))
),
pods AS (
    SELECT cluster, node, state, gpus, namespace, framework, workload_kind, workload_name, workload_uid
    FROM pod_current WHERE CAST($at AS TIMESTAMPTZ) IS NULL
    UNION ALL
    SELECT cluster, node, state, gpus, namespace, framework, workload_kind, workload_name, workload_uid
    FROM pod_intervals WHERE CAST($at AS TIMESTAMPTZ) IS NOT NULL
      AND valid_from <= CAST($at AS TIMESTAMPTZ) AND (valid_to IS NULL OR valid_to > CAST($at AS TIMESTAMPTZ))
),
workloads AS (
    SELECT cluster, uid, kind, name, namespace, framework, status, gpus FROM workload_current
    WHERE CAST($at AS TIMESTAMPTZ) IS NULL
    UNION ALL
    SELECT cluster, uid, kind, name, namespace, framework, status, gpus FROM status_intervals
    WHERE CAST($at AS TIMESTAMPTZ) IS NOT NULL
      AND valid_from <= CAST($at AS TIMESTAMPTZ) AND (valid_to IS NULL OR valid_to > CAST($at AS TIMESTAMPTZ))
),
facts AS (
    SELECT cluster, gpu_product, node_pool, name AS node, NULL::VARCHAR AS namespace, NULL::VARCHAR AS framework,
           NULL::VARCHAR AS kind, NULL::VARCHAR AS wname, NULL::VARCHAR AS uid,
           1 AS nodes, gpus AS allocatable,
           CASE WHEN NOT unschedulable AND coalesce(ready, true) THEN gpus ELSE 0 END AS schedulable,
           CASE WHEN unschedulable THEN gpus ELSE 0 END AS unschedulable,
           0.0 AS allocated, 0.0 AS unknown_node_allocated, 0.0 AS pending, 0.0 AS requested, 0 AS bound_pods,
           0 AS pending_pods, 0 AS workloads
    FROM nodes
    UNION ALL
    SELECT p.cluster, n.gpu_product, n.node_pool, p.node, p.namespace, p.framework,
           p.workload_kind, p.workload_name, p.workload_uid, 0, 0.0, 0.0, 0.0,
           CASE WHEN p.state = 'Bound' AND n.name IS NOT NULL THEN p.gpus ELSE 0 END,
           CASE WHEN p.state = 'Bound' AND n.name IS NULL THEN p.gpus ELSE 0 END,
           CASE WHEN p.state = 'Pending' THEN p.gpus ELSE 0 END,
           0.0, (p.state = 'Bound')::INTEGER, (p.state = 'Pending')::INTEGER, 0
    FROM pods p LEFT JOIN nodes n ON n.cluster = p.cluster AND n.name = p.node
    UNION ALL
    SELECT cluster, NULL, NULL, NULL, namespace, framework, kind, name, uid, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, gpus, 0, 0, 1
    FROM workloads
    WHERE status IN ('Running', 'Degraded', 'Initializing', 'Resuming', 'Suspended', 'Suspending')
),
kept AS (
    SELECT * FROM facts
    WHERE ($clusters IS NULL OR list_contains($clusters, cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, framework))
      AND ($node_pools IS NULL OR list_contains($node_pools, node_pool))
      AND ($gpu_products IS NULL OR list_contains($gpu_products, gpu_product))
)
SELECT
    CASE WHEN list_contains(coalesce($by, []), 'cluster') THEN cluster END AS cluster,
    CASE WHEN list_contains(coalesce($by, []), 'gpu_product') THEN gpu_product END AS gpu_product,
    CASE WHEN list_contains(coalesce($by, []), 'node_pool') THEN node_pool END AS node_pool,
    CASE WHEN list_contains(coalesce($by, []), 'node') THEN node END AS node,
    CASE WHEN list_contains(coalesce($by, []), 'namespace') THEN namespace END AS namespace,
    CASE WHEN list_contains(coalesce($by, []), 'framework') THEN framework END AS framework,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN kind END AS kind,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN wname END AS name,
    CASE WHEN list_contains(coalesce($by, []), 'workload') THEN uid END AS uid,
    sum(nodes)::BIGINT AS nodes,
    sum(allocatable) AS allocatable, sum(schedulable) AS schedulable, sum(unschedulable) AS unschedulable,
    sum(allocated) AS allocated, sum(unknown_node_allocated) AS unknown_node_allocated,
    CASE WHEN NOT list_has_any(coalesce($by, []), ['namespace', 'framework', 'workload'])
         THEN sum(allocatable) - sum(allocated) END AS idle,
    sum(pending) AS pending, sum(requested) AS requested,
    sum(bound_pods)::BIGINT AS bound_pods, sum(pending_pods)::BIGINT AS pending_pods,
    sum(workloads)::BIGINT AS workloads
FROM kept
GROUP BY ALL
ORDER BY cluster NULLS FIRST, gpu_product NULLS FIRST, node_pool NULLS FIRST, node NULLS FIRST,
         namespace NULLS FIRST, framework NULLS FIRST, kind NULLS FIRST, name NULLS FIRST, uid NULLS FIRST
