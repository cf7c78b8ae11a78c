-- Resource-hours and their cost per period and workload: cost_report.sql's rows when the group has a workload.
--
-- The same report as cost_report.sql (same intervals, window, periods, statuses, filters, prices,
-- figures and order) for groups that include `workload`: the group is then the workload, its
-- cluster, namespace and framework come with it, and a daily report over a year has millions of
-- rows.  warehouse/costing.py runs this query instead of cost_report.sql for those groups and
-- makes the report's table from its rows (below); it is not meant to be read as it is.
-- Why a plan of its own: a workload's intervals never overlap (the writer derives them from the
-- workload's states in time order, each closed at the next one's start), so a period strictly
-- inside an interval (k0 < k < k1) is that interval's alone.  Its row is the interval's demand x a
-- whole period, one value for all those periods: made by projection (an unnest of k0+1 .. k1-1),
-- with no aggregation, no running level and no merging of maps.  Only an interval's first and last
-- periods (k0, k1: its edges, <= 2 per interval) can be shared with the workload's other
-- intervals: they are summed per (period, workload) on integer keys.  Prices are looked up once
-- per distinct (cluster, GPU map) of the window, not per row.  The map of GPU-hours per resource:
-- a row whose intervals all hold the same one resource (nearly all) carries that resource's name;
-- an edge that mixes resources, or a demand with several resources or an unpriced one, carries
-- the map as entries (and its unpriced hours), summed per resource.
-- Order: period, then the largest cost (or GPU-hours without prices), GPU-hours, the group's
-- columns in the order of $by, uid, as cost_report.sql.  The group's columns are ranked once per
-- workload (wid), the values (cost, GPU-hours, wid) once per value (an interval's whole periods
-- share one), so the rows are sorted on two integers (k, rank) and carry no group strings and no
-- maps through the sort (still the largest part: 5 M rows of a one-year daily report; the
-- strings would cross it 5 million times instead of once a workload).
-- Rows: first the report's rows, in order:
--   period_start, period_end, wid, gpu_hours, resource (the one GPU resource of the row's map; NULL
--   for none, or when entries holds the map), entries ([{key, value}]: the map when it has several
--   resources or unpriced ones), cpu_core_hours, memory_gib_hours, gpu_cost, cpu_cost, memory_cost,
--   cost, unpriced (as in cost_report.sql);
-- then one row per workload (period_start NULL): wid, cluster, namespace, framework, uid, kind, name.
-- (UNION ALL keeps its branches' order; costing.py checks that the workload rows come last.)  A
-- workload is (cluster, uid): its namespace, framework, kind and name do not change.
-- costing.py turns wid into dictionary columns of the workloads' names and resource/entries into
-- the map column, in Arrow and without copying the rows (DuckDB's MAP constructor checks every
-- row's keys: ~2 s for 5 M rows).
-- Parameters: as in cost_report.sql
--   $since, $until  TIMESTAMPTZ, the window
--   $as_of          TIMESTAMPTZ, where open intervals end; NULL = now()
--   $step           INTERVAL, e.g. INTERVAL 1 DAY; NULL = one period
--   $statuses       VARCHAR[], the consuming statuses; NULL = Running and Degraded
--   $by             VARCHAR[], the group's columns, among them 'workload' (costing.row_columns)
--   $clusters, $namespaces, $frameworks
--                   VARCHAR[] filters, NULL = no filter
--   $gpu_prices     STRUCT(cluster, name, pattern, rank, price)[]: NULL = no pricing
--   $rates          STRUCT(cluster, cpu, memory)[]: CPU per core-hour, memory per GiB-hour
WITH spans AS (  -- consuming intervals cut to the window: first and last period k0, k1, seconds in each
    SELECT *,
           least(s1, since_s + (k0 + 1) * step_s) - s0 AS first_s,
           CASE WHEN k1 > k0 THEN s1 - (since_s + k1 * step_s) ELSE 0 END AS last_s
    FROM (
        SELECT *, floor((s0 - since_s) / step_s)::BIGINT AS k0, (ceil((s1 - since_s) / step_s) - 1)::BIGINT AS k1
        FROM (
            SELECT i.cluster, i.namespace, i.framework, i.uid, i.kind, i.name,
                   greatest(epoch(i.valid_from), epoch(CAST($since AS TIMESTAMPTZ))) AS s0,
                   least(coalesce(epoch(i.valid_to), epoch(coalesce(CAST($as_of AS TIMESTAMPTZ), now()))),
                         epoch(CAST($until AS TIMESTAMPTZ))) AS s1,
                   epoch(CAST($since AS TIMESTAMPTZ)) AS since_s,
                   coalesce(epoch(CAST($step AS INTERVAL)),
                            epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))) AS step_s,
                   CASE WHEN cardinality(i.gpu_resources) = 0 AND i.gpus > 0
                        THEN MAP {'unspecified': i.gpus} ELSE i.gpu_resources END AS gpu_map,
                   i.cpu, i.memory / 1073741824.0 AS memory_gib
            FROM status_intervals i
            WHERE list_contains(coalesce(CAST($statuses AS VARCHAR[]), ['Running', 'Degraded']), i.status)
              AND i.valid_from < CAST($until AS TIMESTAMPTZ)
              AND (i.valid_to IS NULL OR i.valid_to > CAST($since AS TIMESTAMPTZ))
              AND (i.gpus > 0 OR i.cpu > 0 OR i.memory > 0)
              AND ($clusters IS NULL OR list_contains($clusters, i.cluster))
              AND ($namespaces IS NULL OR list_contains($namespaces, i.namespace))
              AND ($frameworks IS NULL OR list_contains($frameworks, i.framework))
        )
        WHERE s1 > s0
    )
),
workloads AS (  -- one row per workload (cluster, uid); wid: its place in the order of $by's columns, then uid
    SELECT (row_number() OVER (ORDER BY
               coalesce(CASE CAST($by AS VARCHAR[])[1] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                        WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
               coalesce(CASE CAST($by AS VARCHAR[])[2] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                        WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
               coalesce(CASE CAST($by AS VARCHAR[])[3] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                        WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
               coalesce(CASE CAST($by AS VARCHAR[])[4] WHEN 'cluster' THEN cluster WHEN 'namespace' THEN namespace
                        WHEN 'framework' THEN framework WHEN 'workload' THEN kind || '/' || name END, ''),
               uid) - 1)::INTEGER AS wid, *
    FROM (SELECT cluster, uid, any_value(namespace) AS namespace, any_value(framework) AS framework,
                 any_value(kind) AS kind, any_value(name) AS name
          FROM spans GROUP BY cluster, uid)
),
demands AS (SELECT row_number() OVER () AS did, * FROM (SELECT DISTINCT cluster, gpu_map FROM spans)),
entries AS (  -- each GPU resource of each demand, priced: the rule of the lowest rank that matches
    SELECT e.did, e.cluster, e.resource, e.g, arg_min(p.price, p.rank) AS price
    FROM (SELECT did, cluster, unnest(map_keys(gpu_map)) AS resource, unnest(map_values(gpu_map)) AS g FROM demands) e
    LEFT JOIN unnest(CAST($gpu_prices AS STRUCT(cluster VARCHAR, name VARCHAR, pattern VARCHAR, rank INTEGER, price DOUBLE)[])) AS t(p)
      ON (p.cluster IS NULL OR p.cluster = e.cluster)
     AND (CASE WHEN p.name IS NOT NULL THEN e.resource = p.name
               WHEN p.pattern IS NOT NULL THEN e.resource GLOB p.pattern ELSE true END)
    GROUP BY e.did, e.cluster, e.resource, e.g
),
rates AS (
    SELECT c.cluster, coalesce(own.r.cpu, dflt.r.cpu) AS cpu, coalesce(own.r.memory, dflt.r.memory) AS memory
    FROM (SELECT DISTINCT cluster FROM demands) c
    LEFT JOIN unnest(CAST($rates AS STRUCT(cluster VARCHAR, cpu DOUBLE, memory DOUBLE)[])) AS own(r) ON own.r.cluster = c.cluster
    LEFT JOIN unnest(CAST($rates AS STRUCT(cluster VARCHAR, cpu DOUBLE, memory DOUBLE)[])) AS dflt(r) ON dflt.r.cluster IS NULL
),
demand_rates AS (  -- per demand: GPUs, its one resource and price, GPU cost of a second; special: several resources, or unpriced ones
    SELECT d.did, d.cluster, d.gpu_map, coalesce(e.gpus, 0.0) AS gpus, coalesce(e.gpu_rate, 0.0) AS gpu_rate,
           CASE WHEN cardinality(d.gpu_map) = 1 THEN map_keys(d.gpu_map)[1] END AS resource,
           CASE WHEN cardinality(d.gpu_map) = 1 THEN coalesce(e.price, 0.0) END AS gpu_price,  -- NULL: no resource
           cardinality(d.gpu_map) > 1 OR ($gpu_prices IS NOT NULL AND coalesce(e.unpriced, false)) AS special,
           coalesce(r.cpu, 0.0) AS cpu_price, coalesce(r.memory, 0.0) AS memory_price
    FROM demands d
    LEFT JOIN (SELECT did, sum(coalesce(g, 0.0)) AS gpus, sum(coalesce(g, 0.0) * coalesce(price, 0.0)) AS gpu_rate,
                      bool_or(price IS NULL) AS unpriced, any_value(price) AS price
               FROM entries GROUP BY did) e ON e.did = d.did
    LEFT JOIN rates r ON r.cluster = d.cluster
),
iv AS (  -- the intervals with their workload and demand
    SELECT w.wid, d.did, s.k0, s.k1, s.first_s, s.last_s, s.step_s, d.resource, d.special, d.gpus, s.cpu, s.memory_gib,
           d.gpu_price, d.gpu_rate, d.cpu_price, d.memory_price
    FROM spans s
    JOIN workloads w ON w.cluster = s.cluster AND w.uid = s.uid
    JOIN demand_rates d ON d.cluster = s.cluster AND d.gpu_map = s.gpu_map
),
edges AS (  -- per workload, the periods where its intervals start or end, summed (a workload's prices are its cluster's)
    SELECT k, wid, gs / 3600.0 AS gpu_hours, cs / 3600.0 AS cpu_core_hours, ms / 3600.0 AS memory_gib_hours,
           CASE WHEN general THEN gcs ELSE gs * coalesce(gpu_price, 0.0) END / 3600.0 AS gpu_cost,
           cs * cpu_price / 3600.0 AS cpu_cost, ms * memory_price / 3600.0 AS memory_cost, resource, general
    FROM (
    SELECT k, wid, sum(secs * gpus) AS gs, sum(secs * cpu) AS cs, sum(secs * memory_gib) AS ms, sum(secs * gpu_rate) AS gcs,
           min(gpu_price) AS gpu_price, min(cpu_price) AS cpu_price, min(memory_price) AS memory_price,
           min(resource) AS resource, bool_or(special) OR min(resource) <> max(resource) AS general
    FROM (  -- an interval's first period (side 0) and, if another, its last (side 1), with its seconds there
        SELECT CASE side WHEN 0 THEN k0 ELSE k1 END AS k, CASE side WHEN 0 THEN first_s ELSE last_s END AS secs, iv.*
        FROM iv, (VALUES (0), (1)) AS sides(side)
        WHERE side = 0 OR k1 > k0
    )
    GROUP BY k, wid)
),
general AS (  -- the map and unpriced hours of the edges that mix resources or hold special demands, per resource
    SELECT k, wid, list({'key': resource, 'value': hours}) AS entries,
           list({'cluster': cluster, 'resource': resource, 'hours': hours}) FILTER (WHERE price IS NULL) AS unpriced
    FROM (SELECT s.k, s.wid, e.cluster, e.resource, any_value(e.price) AS price,
                 sum(s.secs * coalesce(e.g, 0.0)) / 3600.0 AS hours
          FROM (SELECT CASE side WHEN 0 THEN k0 ELSE k1 END AS k, CASE side WHEN 0 THEN first_s ELSE last_s END AS secs, iv.*
                FROM iv, (VALUES (0), (1)) AS sides(side)
                WHERE side = 0 OR k1 > k0) s
          SEMI JOIN (SELECT k, wid FROM edges WHERE general) g ON g.k = s.k AND g.wid = s.wid
          JOIN entries e ON e.did = s.did
          GROUP BY s.k, s.wid, e.cluster, e.resource)
    GROUP BY k, wid
),
special_whole AS (  -- a special demand's map and unpriced hours over a whole period
    SELECT did, list({'key': resource, 'value': coalesce(g, 0.0) * step_s / 3600.0}) AS entries,
           list({'cluster': cluster, 'resource': resource, 'hours': coalesce(g, 0.0) * step_s / 3600.0})
               FILTER (WHERE price IS NULL) AS unpriced
    FROM entries, (SELECT coalesce(epoch(CAST($step AS INTERVAL)),
                                   epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))) AS step_s)
    WHERE did IN (SELECT did FROM demand_rates WHERE special)
    GROUP BY did
),
vals AS (  -- the rows' values: an interval's whole periods lo .. hi-1 (k0 < k < k1, one value for all), each edge
    SELECT k0 + 1 AS lo, k1 AS hi, wid, gpus * step_s / 3600.0 AS gpu_hours, cpu * step_s / 3600.0 AS cpu_core_hours,
           memory_gib * step_s / 3600.0 AS memory_gib_hours,
           CASE WHEN special THEN gpu_rate * step_s ELSE gpus * step_s * coalesce(gpu_price, 0.0) END / 3600.0 AS gpu_cost,
           cpu * step_s * cpu_price / 3600.0 AS cpu_cost, memory_gib * step_s * memory_price / 3600.0 AS memory_cost,
           CASE WHEN NOT special THEN resource END AS resource, w.entries, w.unpriced
    FROM iv LEFT JOIN special_whole w ON iv.special AND w.did = iv.did
    WHERE k1 > k0 + 1
    UNION ALL
    SELECT e.k, e.k + 1, e.wid, gpu_hours, cpu_core_hours, memory_gib_hours, gpu_cost, cpu_cost, memory_cost,
           CASE WHEN NOT e.general THEN e.resource END, g.entries, g.unpriced
    FROM edges e LEFT JOIN general g ON e.general AND g.k = e.k AND g.wid = e.wid
),
numbered AS (SELECT row_number() OVER () AS vid, * FROM vals),
ranks AS (  -- the order inside a period as one number, ranked once per value (2 M) rather than per row (5 M):
            -- the largest cost (GPU-hours without prices) first, then GPU-hours, then the group (wid).
            -- Two values of one workload never share a period (its intervals do not overlap).
    SELECT vid, row_number() OVER (ORDER BY coalesce(CASE WHEN $gpu_prices IS NOT NULL THEN gpu_cost + cpu_cost + memory_cost END,
                                                     gpu_hours) DESC, gpu_hours DESC, wid)::INTEGER AS rank
    FROM numbered
),
rows AS (
    SELECT r.k, n.* EXCLUDE (vid, lo, hi), x.rank
    FROM numbered n JOIN ranks x USING (vid), unnest(range(n.lo, n.hi)) AS r(k)
)
SELECT to_timestamp(epoch(CAST($since AS TIMESTAMPTZ)) + k * coalesce(epoch(CAST($step AS INTERVAL)), epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ)))) AS period_start,
       to_timestamp(least(epoch(CAST($since AS TIMESTAMPTZ)) + (k + 1) * coalesce(epoch(CAST($step AS INTERVAL)), epoch(CAST($until AS TIMESTAMPTZ)) - epoch(CAST($since AS TIMESTAMPTZ))),
                          epoch(CAST($until AS TIMESTAMPTZ)))) AS period_end,
       wid, gpu_hours, resource, entries, cpu_core_hours, memory_gib_hours,
       CASE WHEN $gpu_prices IS NOT NULL THEN gpu_cost END AS gpu_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN cpu_cost END AS cpu_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN memory_cost END AS memory_cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN gpu_cost + cpu_cost + memory_cost END AS cost,
       CASE WHEN $gpu_prices IS NOT NULL THEN unpriced END AS unpriced,
       NULL AS cluster, NULL AS namespace, NULL AS framework, NULL AS uid, NULL AS kind, NULL AS name
FROM (SELECT * FROM rows  -- the sort carries numbers, the resource name and the rare lists; the times are made after it
      ORDER BY k, rank)
UNION ALL
SELECT * FROM (SELECT NULL, NULL, wid, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                      cluster, namespace, framework, uid, kind, name
               FROM workloads ORDER BY wid)
