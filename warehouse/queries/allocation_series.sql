-- GPUs allocatable, allocated, pending and idle over a window, step by step: time-weighted averages and peaks.
--
-- Answers "how full were the clusters each hour / day, and how much stood idle?".  Steps are
-- [$since + k*$step, $since + (k+1)*$step), the last one cut at $until.  Per group each quantity is
-- a step function of time: a node interval adds its allocatable GPUs, a Bound pod interval its
-- GPUs to allocated, a Pending one to pending, from valid_from to valid_to (an open interval lasts
-- past $until).  avg_* = the integral over the step / the step's length; peak_* = the highest value at
-- any instant of the step; avg_idle = avg_allocatable - avg_allocated (NULL when grouped by a
-- pod-side column).  A Bound pod counts as allocated while a node record has its node, with the
-- node-side columns of that node's interval then (the labels valid at each time); the rest of its
-- interval (its node never seen, or deleted before the pod ended) is avg_unknown_node_allocated,
-- apart (node-side columns NULL), never against a node's allocatable.  Every group present in the
-- window gets every step.
-- Parameters:
--   $since, $until  TIMESTAMPTZ, the window
--   $step           INTERVAL of a fixed length (steps computed in epoch seconds)
--   $by             VARCHAR[] among cluster, gpu_product, node_pool, namespace, framework
--   $clusters, $namespaces, $frameworks, $node_pools, $gpu_products   VARCHAR[] filters, NULL = none
WITH nodes AS (
    SELECT * FROM node_intervals
    WHERE valid_from < CAST($until AS TIMESTAMPTZ) AND (valid_to IS NULL OR valid_to > CAST($since AS TIMESTAMPTZ))
),
pods AS (
    SELECT * FROM pod_intervals
    WHERE valid_from < CAST($until AS TIMESTAMPTZ) AND (valid_to IS NULL OR valid_to > CAST($since AS TIMESTAMPTZ))
      AND gpus > 0
),
pieces AS (  -- each overlap of a Bound pod interval with one of its node's intervals (NULL: open)
    SELECT p.cluster, n.gpu_product, n.node_pool, p.namespace, p.framework, p.gpus,
           greatest(p.valid_from, n.valid_from) AS valid_from,
           CASE WHEN p.valid_to IS NULL THEN n.valid_to WHEN n.valid_to IS NULL THEN p.valid_to
                ELSE least(p.valid_to, n.valid_to) END AS valid_to
    FROM pods p JOIN node_intervals n ON n.cluster = p.cluster AND n.name = p.node
    WHERE p.state = 'Bound' AND n.valid_from < coalesce(p.valid_to, CAST($until AS TIMESTAMPTZ))
      AND (n.valid_to IS NULL OR n.valid_to > p.valid_from)
),
clipped AS (
    SELECT
        CASE WHEN list_contains(coalesce($by, []), 'cluster') THEN cluster END AS cluster,
        CASE WHEN list_contains(coalesce($by, []), 'gpu_product') THEN gpu_product END AS gpu_product,
        CASE WHEN list_contains(coalesce($by, []), 'node_pool') THEN node_pool END AS node_pool,
        CASE WHEN list_contains(coalesce($by, []), 'namespace') THEN namespace END AS namespace,
        CASE WHEN list_contains(coalesce($by, []), 'framework') THEN framework END AS framework,
        greatest(valid_from, CAST($since AS TIMESTAMPTZ)) AS f,
        least(coalesce(valid_to, 'infinity'::TIMESTAMPTZ), CAST($until AS TIMESTAMPTZ)) AS t,
        a, b, p, u
    FROM (
        SELECT cluster, gpu_product, node_pool, NULL::VARCHAR AS namespace, NULL::VARCHAR AS framework,
               valid_from, valid_to, gpus AS a, 0.0 AS b, 0.0 AS p, 0.0 AS u FROM nodes
        UNION ALL
        SELECT cluster, gpu_product, node_pool, namespace, framework, valid_from, valid_to, 0.0, gpus, 0.0, 0.0
        FROM pieces
        UNION ALL  -- on an unknown node: a Bound pod interval less its overlaps with its node's intervals
        SELECT cluster, NULL, NULL, namespace, framework, valid_from, valid_to, 0.0, 0.0,
               CASE WHEN state = 'Pending' THEN gpus ELSE 0 END, CASE WHEN state = 'Bound' THEN gpus ELSE 0 END
        FROM pods
        UNION ALL
        SELECT cluster, NULL, NULL, namespace, framework, valid_from, valid_to, 0.0, 0.0, 0.0, -gpus FROM pieces
    )
    WHERE ($clusters IS NULL OR list_contains($clusters, cluster))
      AND ($namespaces IS NULL OR list_contains($namespaces, namespace))
      AND ($frameworks IS NULL OR list_contains($frameworks, framework))
      AND ($node_pools IS NULL OR list_contains($node_pools, node_pool))
      AND ($gpu_products IS NULL OR list_contains($gpu_products, gpu_product))
),
changes AS (  -- deltas per group and instant (none where they cancel: a pod on a known node adds no unknown)
    SELECT cluster, gpu_product, node_pool, namespace, framework, t0, sum(da) AS da, sum(db) AS db, sum(dp) AS dp,
           sum(du) AS du
    FROM (
        SELECT cluster, gpu_product, node_pool, namespace, framework, f AS t0, a AS da, b AS db, p AS dp, u AS du
        FROM clipped
        UNION ALL
        SELECT cluster, gpu_product, node_pool, namespace, framework, t, -a, -b, -p, -u FROM clipped
        WHERE t < CAST($until AS TIMESTAMPTZ)
    )
    GROUP BY ALL
    HAVING sum(da) <> 0 OR sum(db) <> 0 OR sum(dp) <> 0 OR sum(du) <> 0
),
segments AS (  -- constant values from t0 to upto
    SELECT cluster, gpu_product, node_pool, namespace, framework, t0,
           coalesce(lead(t0) OVER w, CAST($until AS TIMESTAMPTZ)) AS upto,
           sum(da) OVER w AS a, sum(db) OVER w AS b, sum(dp) OVER w AS p, sum(du) OVER w AS u
    FROM changes
    WINDOW w AS (PARTITION BY cluster, gpu_product, node_pool, namespace, framework ORDER BY t0)
),
steps AS (
    SELECT k, to_timestamp(since_s + k * step_s) AS step_start,
           to_timestamp(least(since_s + (k + 1) * step_s, until_s)) AS step_end
    FROM (SELECT epoch(CAST($since AS TIMESTAMPTZ)) AS since_s, epoch(CAST($until AS TIMESTAMPTZ)) AS until_s,
                 epoch(CAST($step AS INTERVAL)) AS step_s),
         range(0, CAST(ceil((until_s - since_s) / step_s) AS BIGINT)) AS r(k)
),
groups AS (SELECT DISTINCT cluster, gpu_product, node_pool, namespace, framework FROM changes),
measured AS (  -- each segment split at the steps it overlaps
    SELECT k, cluster, gpu_product, node_pool, namespace, framework,
           sum(a * seconds) AS a_s, sum(b * seconds) AS b_s, sum(p * seconds) AS p_s, sum(u * seconds) AS u_s,
           max(a) AS peak_a, max(b) AS peak_b, max(p) AS peak_p
    FROM (
        SELECT k, cluster, gpu_product, node_pool, namespace, framework, a, b, p, u,
               least(upto_s, since_s + (k + 1) * step_s) - greatest(f, since_s + k * step_s) AS seconds
        FROM (
            SELECT *, unnest(range(CAST(floor((f - since_s) / step_s) AS BIGINT),
                                   CAST(ceil((upto_s - since_s) / step_s) AS BIGINT))) AS k
            FROM (SELECT cluster, gpu_product, node_pool, namespace, framework, a, b, p, u,
                         epoch(t0) AS f, epoch(upto) AS upto_s, epoch(CAST($since AS TIMESTAMPTZ)) AS since_s,
                         epoch(CAST($step AS INTERVAL)) AS step_s
                  FROM segments WHERE upto > t0)
        )
    )
    GROUP BY ALL
)
SELECT st.step_start, st.step_end, gr.cluster, gr.gpu_product, gr.node_pool, gr.namespace, gr.framework,
       coalesce(m.a_s, 0) / epoch(st.step_end - st.step_start) AS avg_allocatable,
       coalesce(m.b_s, 0) / epoch(st.step_end - st.step_start) AS avg_allocated,
       CASE WHEN NOT list_has_any(coalesce($by, []), ['namespace', 'framework'])
            THEN (coalesce(m.a_s, 0) - coalesce(m.b_s, 0)) / epoch(st.step_end - st.step_start) END AS avg_idle,
       coalesce(m.p_s, 0) / epoch(st.step_end - st.step_start) AS avg_pending,
       coalesce(m.u_s, 0) / epoch(st.step_end - st.step_start) AS avg_unknown_node_allocated,
       coalesce(m.peak_a, 0) AS peak_allocatable, coalesce(m.peak_b, 0) AS peak_allocated,
       coalesce(m.peak_p, 0) AS peak_pending
FROM steps st CROSS JOIN groups gr
LEFT JOIN measured m ON m.k = st.k
    AND m.cluster IS NOT DISTINCT FROM gr.cluster AND m.gpu_product IS NOT DISTINCT FROM gr.gpu_product
    AND m.node_pool IS NOT DISTINCT FROM gr.node_pool AND m.namespace IS NOT DISTINCT FROM gr.namespace
    AND m.framework IS NOT DISTINCT FROM gr.framework
ORDER BY st.step_start, gr.cluster NULLS FIRST, gr.gpu_product NULLS FIRST, gr.node_pool NULLS FIRST,
         gr.namespace NULLS FIRST, gr.framework NULLS FIRST
