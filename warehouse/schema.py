"""The warehouse's DuckDB schema, versioned, with forward migrations.

Why versioned: the DuckDB file outlives the code that wrote it (a history of
weeks), so a newer writer must upgrade an older file in place, never ask for a
fresh one.  ``migrate(conn)`` applies every pending numbered migration, each in
its own transaction together with its row in ``schema_migrations``: a crash
mid-migration leaves the file at the previous version, and re-running is a
no-op.  Migrations only ever move forward; a file newer than the code is
refused rather than written with the wrong layout.

The tables and views, their columns, keys and rules, are described once, in
``warehouse/README.md`` ("Tables"); a test checks that it names this module's
``LATEST_VERSION`` and every table and view of a migrated file.  Each
``Migration`` says what it adds; ``CHANGELOG.md`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

SCHEMA_VERSION_TABLE = "schema_migrations"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


_IDENTITY = """
    cluster          VARCHAR NOT NULL,
    uid              VARCHAR NOT NULL,
    api_version      VARCHAR,
    kind             VARCHAR NOT NULL,
    namespace        VARCHAR,
    name             VARCHAR,
    definition       VARCHAR,
    framework        VARCHAR,"""

_DEMAND = """
    pods             INTEGER NOT NULL,
    gpus             DOUBLE NOT NULL,
    cpu              DOUBLE NOT NULL,
    memory           BIGINT NOT NULL,
    gpu_resources    MAP(VARCHAR, DOUBLE) NOT NULL"""

# A workload's key in deleted_workloads: 64 bits of the md5 of "cluster/uid" (stable across DuckDB
# versions).  Only a hint: two workloads with the same key send the second to the exact (slow) path.
WORKLOAD_KEY = "md5_number_lower(cluster || '/' || uid)"
# What workload_states.components is (version 4): the record's components, read from the record.
COMPONENTS_OF_RECORD = "json_extract(record, '$.components')"
_INTERVAL_IDENTITY = "i.api_version, i.kind, i.namespace, i.name, i.definition, i.framework"
_INTERVAL_DEMAND = "i.pods, i.gpus, i.cpu, i.memory, i.gpu_resources"
_INTERVAL_COLUMNS = ("cluster, uid, api_version, kind, namespace, name, definition, framework, status, "
                     "valid_from, valid_to, pods, gpus, cpu, memory, gpu_resources, from_seq")


# workload_states' columns before components and record, the same in every version.
_STATES_HEAD = f"""
    seq              BIGINT NOT NULL,{_IDENTITY}
    resource_version VARCHAR,
    version_key      VARCHAR NOT NULL,
    generation       BIGINT,
    origin           VARCHAR,
    creation_timestamp TIMESTAMPTZ,
    observed_at      TIMESTAMPTZ NOT NULL,
    event_type       VARCHAR NOT NULL,
    deleted          BOOLEAN NOT NULL,
    status           VARCHAR NOT NULL,
    phase            VARCHAR,{_DEMAND},"""


def _states_table(name: str, record: str) -> str:
    """workload_states as of version 4 (components virtual), with `record` of the type given."""
    return f"""CREATE TABLE {name} ({_STATES_HEAD}
    components       JSON GENERATED ALWAYS AS ({COMPONENTS_OF_RECORD}) VIRTUAL,
    record           {record}
)"""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "history, intervals, transitions, offsets, current view", (
        f"""CREATE TABLE workload_states ({_STATES_HEAD}
    components       JSON,
    record           JSON NOT NULL
)""",
        f"""CREATE TABLE status_intervals ({_IDENTITY}
    status           VARCHAR NOT NULL,
    valid_from       TIMESTAMPTZ NOT NULL,
    valid_to         TIMESTAMPTZ,{_DEMAND},
    from_seq         BIGINT NOT NULL
)""",
        """CREATE TABLE transitions (
    cluster          VARCHAR NOT NULL,
    uid              VARCHAR NOT NULL,
    namespace        VARCHAR,
    name             VARCHAR,
    kind             VARCHAR,
    framework        VARCHAR,
    definition       VARCHAR,
    from_status      VARCHAR,
    to_status        VARCHAR NOT NULL,
    transitioned_at  TIMESTAMPTZ NOT NULL,
    gpus             DOUBLE,
    previous_duration_seconds DOUBLE
)""",
        """CREATE TABLE consumer_offsets (
    consumer         VARCHAR NOT NULL,
    topic            VARCHAR NOT NULL,
    partition        INTEGER NOT NULL,
    next_offset      BIGINT NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
)""",
        """CREATE VIEW current_workloads AS
SELECT * FROM workload_states
QUALIFY row_number() OVER (PARTITION BY cluster, uid ORDER BY observed_at DESC, seq DESC) = 1
    AND status <> 'Deleted'""",
    )),
    Migration(2, "interval_gpu_usage view: intervals per GPU resource name", (
        """CREATE VIEW interval_gpu_usage AS
SELECT i.cluster, i.uid, i.kind, i.namespace, i.name, i.definition, i.framework, i.status,
       i.valid_from, i.valid_to, g.resource AS gpu_resource, g.gpus,
       g.gpus * epoch(coalesce(i.valid_to, now()) - i.valid_from) / 3600.0 AS gpu_hours
FROM status_intervals i,
     LATERAL (SELECT unnest(map_keys(i.gpu_resources)) AS resource,
                     unnest(map_values(i.gpu_resources)) AS gpus) g""",
    )),
    Migration(3, "keyed current state and open intervals; intervals that no longer change in interval_history", (
        # The intervals that no longer change: closed ones, and the final Deleted interval of a
        # deleted workload (open, but never closed again).  Append-only for the writer.
        "ALTER TABLE status_intervals RENAME TO interval_history",
        f"""CREATE TABLE workload_current (
    cluster          VARCHAR NOT NULL,
    uid              VARCHAR NOT NULL,
    seq              BIGINT NOT NULL,
    observed_at      TIMESTAMPTZ NOT NULL,
    version_key      VARCHAR NOT NULL,
    api_version      VARCHAR,
    kind             VARCHAR NOT NULL,
    namespace        VARCHAR,
    name             VARCHAR,
    definition       VARCHAR,
    framework        VARCHAR,
    status           VARCHAR NOT NULL,
    valid_from       TIMESTAMPTZ NOT NULL,{_DEMAND},
    from_seq         BIGINT NOT NULL,
    PRIMARY KEY (cluster, uid)
)""",
        f"""INSERT INTO workload_current
SELECT i.cluster, i.uid, s.seq, s.observed_at, s.version_key, {_INTERVAL_IDENTITY},
       i.status, i.valid_from, {_INTERVAL_DEMAND}, i.from_seq
FROM interval_history i
JOIN (SELECT cluster, uid, seq, observed_at, version_key FROM workload_states
      QUALIFY row_number() OVER (PARTITION BY cluster, uid ORDER BY observed_at DESC, seq DESC) = 1) s
  ON s.cluster = i.cluster AND s.uid = i.uid
WHERE i.valid_to IS NULL AND i.status <> 'Deleted'""",
        "DELETE FROM interval_history WHERE valid_to IS NULL AND status <> 'Deleted'",
        "CREATE TABLE deleted_workloads (key UBIGINT PRIMARY KEY)",
        f"""INSERT INTO deleted_workloads
SELECT DISTINCT {WORKLOAD_KEY} FROM interval_history WHERE valid_to IS NULL AND status = 'Deleted'""",
        f"""CREATE VIEW status_intervals AS
SELECT {_INTERVAL_COLUMNS} FROM interval_history
UNION ALL
SELECT {_INTERVAL_COLUMNS.replace("valid_to", "NULL::TIMESTAMPTZ AS valid_to")} FROM workload_current""",
        """CREATE OR REPLACE VIEW current_workloads AS
SELECT s.* FROM workload_states s SEMI JOIN workload_current c ON s.seq = c.seq""",
    )),
    # The record already holds its components: storing them a second time cost the writer a JSON
    # extraction and their bytes per row (in the batch and again in the WAL at commit).  They become a
    # virtual column, computed from `record` when read.  DuckDB cannot add a generated column to a
    # table, so the table is rebuilt (the one copy of the history this migration costs); the views
    # over it bind by name and keep working.
    Migration(4, "workload_states.components computed from record (virtual column), not stored twice", (
        _states_table("workload_states_v4", record="JSON NOT NULL"),
        "INSERT INTO workload_states_v4 BY NAME SELECT * EXCLUDE (components) FROM workload_states",
        "DROP TABLE workload_states",
        "ALTER TABLE workload_states_v4 RENAME TO workload_states",
    )),
    # The record text is most of a row (1.7 KB of JSON) and of the checkpoints' work: DuckDB's
    # default string compressions (dictionary, FSST) fit it poorly.  zstd on that column alone
    # (numeric scans got slower with zstd forced on every column) shrinks the file and the
    # checkpoints.  A column's compression is fixed when its table is created, so the table is
    # rebuilt as in version 4, in one transaction, keeping the virtual `components`.
    Migration(5, "workload_states.record compressed with zstd", (
        _states_table("workload_states_v5", record="JSON USING COMPRESSION zstd NOT NULL"),
        "INSERT INTO workload_states_v5 BY NAME SELECT * EXCLUDE (components) FROM workload_states",
        "DROP TABLE workload_states",
        "ALTER TABLE workload_states_v5 RENAME TO workload_states",
    )),
    # DuckDB computes a virtual column once per inserted row (it checks that it can be computed):
    # json_extract parsed and wrote out every record again.  A view computes it only when read.  The states are kept in state_history (as the
    # intervals are in interval_history) and workload_states is a view over it with the same
    # columns in the same order; dropping a virtual column and renaming touch no row.
    Migration(6, "workload_states a view over state_history: components computed when read, not at each insert", (
        "ALTER TABLE workload_states DROP COLUMN components",
        "ALTER TABLE workload_states RENAME TO state_history",
        f"""CREATE VIEW workload_states AS
SELECT * EXCLUDE (record), {COMPONENTS_OF_RECORD} AS components, record FROM state_history""",
    )),
    # The daily rollup (warehouse/rolling.py): a year of daily cost by workload is millions of rows,
    # and computing them from the intervals at every report costs seconds; the rollup keeps each
    # day's usage per workload, so a report reads it.  New columns say what is rolled up already.
    Migration(7, "daily usage rollup for cost reports: daily_usage, usage_workloads, usage_rollup", (
        "ALTER TABLE interval_history ADD COLUMN appended_seq BIGINT DEFAULT 0",
        "ALTER TABLE interval_history ADD COLUMN rolled_to TIMESTAMPTZ",
        "ALTER TABLE workload_current ADD COLUMN rolled_to TIMESTAMPTZ",
        """CREATE TABLE usage_workloads (
    workload         INTEGER NOT NULL,
    cluster          VARCHAR NOT NULL,
    uid              VARCHAR NOT NULL,
    namespace        VARCHAR,
    framework        VARCHAR,
    kind             VARCHAR,
    name             VARCHAR,
    PRIMARY KEY (cluster, uid)
)""",
        """CREATE TABLE daily_usage (
    day              DATE NOT NULL,
    workload         INTEGER NOT NULL,
    starting         BOOLEAN NOT NULL,
    resource         VARCHAR,
    gpu_seconds      DOUBLE NOT NULL,
    cpu_seconds      DOUBLE NOT NULL,
    memory_gib_seconds DOUBLE NOT NULL,
    shared           BOOLEAN NOT NULL,
    shared_across    BOOLEAN NOT NULL
)""",
        "CREATE TABLE usage_rollup (rolled_seq BIGINT NOT NULL, horizon TIMESTAMPTZ)",
        "INSERT INTO usage_rollup VALUES (-1, NULL)",
    )),
    # The report rows of the finished days (warehouse/rolling.py, keep_costs): even from the rollup,
    # a year of daily cost by workload is 5 M rows to price and sort by cost at every report.
    Migration(8, "daily cost report rows kept by the writer: daily_costs", (
        """CREATE TABLE daily_costs (
    day              DATE NOT NULL,
    place            INTEGER NOT NULL,
    workload         INTEGER NOT NULL,
    gpu_hours        DOUBLE,
    resource         VARCHAR,
    entries          STRUCT("key" VARCHAR, "value" DOUBLE)[],
    cpu_core_hours   DOUBLE,
    memory_gib_hours DOUBLE,
    gpu_cost         DOUBLE,
    cpu_cost         DOUBLE,
    memory_cost      DOUBLE,
    unpriced         STRUCT("cluster" VARCHAR, resource VARCHAR, hours DOUBLE)[]
)""",
        "ALTER TABLE usage_rollup ADD COLUMN priced_with VARCHAR",
        "ALTER TABLE usage_rollup ADD COLUMN costs_to DATE",
    )),
)


# Version 9: pods and nodes (warehouse/allocating.py).  The columns of a pod interval and of a node
# interval; the open ones live in the keyed *_current tables with what dedup needs.
_POD_INTERVAL = """
    cluster          VARCHAR NOT NULL,
    uid              VARCHAR NOT NULL,
    namespace        VARCHAR,
    name             VARCHAR,
    created          TIMESTAMPTZ,
    workload_api_version VARCHAR,
    workload_kind    VARCHAR,
    workload_name    VARCHAR,
    workload_uid     VARCHAR,
    framework        VARCHAR,
    definition       VARCHAR,
    component        VARCHAR,
    instance         VARCHAR,
    replica          VARCHAR,
    node             VARCHAR,
    state            VARCHAR NOT NULL,
    valid_from       TIMESTAMPTZ NOT NULL,"""
_POD_DEMAND = """
    gpus             DOUBLE NOT NULL,
    cpu              DOUBLE NOT NULL,
    memory           BIGINT NOT NULL,
    gpu_resources    MAP(VARCHAR, DOUBLE) NOT NULL"""
_NODE_INTERVAL = """
    cluster          VARCHAR NOT NULL,
    name             VARCHAR NOT NULL,
    uid              VARCHAR,
    valid_from       TIMESTAMPTZ NOT NULL,
    gpus             DOUBLE NOT NULL,
    gpu_resources    MAP(VARCHAR, DOUBLE) NOT NULL,
    cpu              DOUBLE NOT NULL,
    memory           BIGINT NOT NULL,
    capacity_gpus    DOUBLE NOT NULL,
    capacity_gpu_resources MAP(VARCHAR, DOUBLE) NOT NULL,
    capacity_cpu     DOUBLE NOT NULL,
    capacity_memory  BIGINT NOT NULL,
    unschedulable    BOOLEAN NOT NULL,
    ready            BOOLEAN,
    gpu_product      VARCHAR,
    instance_type    VARCHAR,
    node_pool        VARCHAR,
    zone             VARCHAR"""
POD_COLUMNS = ("cluster, uid, namespace, name, created, workload_api_version, workload_kind, workload_name, "
               "workload_uid, framework, definition, component, instance, replica, node, state, valid_from, "
               "valid_to, gpus, cpu, memory, gpu_resources")
NODE_COLUMNS = ("cluster, name, uid, valid_from, valid_to, gpus, gpu_resources, cpu, memory, capacity_gpus, "
                "capacity_gpu_resources, capacity_cpu, capacity_memory, unschedulable, ready, gpu_product, "
                "instance_type, node_pool, zone")

MIGRATIONS += (
    # Pods and nodes (issue 25): what the pods hold and the nodes have, as intervals, kept as the
    # workloads' are: closed ones appended to a history the writer never reads, open ones keyed.
    Migration(9, "pod allocation and node intervals: pod_history, pod_current, ended_pods, node_history, node_current", (
        f"CREATE TABLE pod_history ({_POD_INTERVAL}\n    valid_to         TIMESTAMPTZ NOT NULL,{_POD_DEMAND}\n)",
        f"""CREATE TABLE pod_current ({_POD_INTERVAL}{_POD_DEMAND},
    observed_at      TIMESTAMPTZ NOT NULL,
    version_key      VARCHAR NOT NULL,
    PRIMARY KEY (cluster, uid)
)""",
        "CREATE TABLE ended_pods (key UBIGINT PRIMARY KEY)",
        f"CREATE TABLE node_history ({_NODE_INTERVAL},\n    valid_to         TIMESTAMPTZ NOT NULL\n)",
        # a deleted node keeps its row (deleted, its uid and when): a late record of it is recognised
        f"""CREATE TABLE node_current ({_NODE_INTERVAL},
    observed_at      TIMESTAMPTZ NOT NULL,
    version_key      VARCHAR NOT NULL,
    deleted          BOOLEAN NOT NULL,
    PRIMARY KEY (cluster, name)
)""",
        f"""CREATE VIEW pod_intervals AS
SELECT {POD_COLUMNS} FROM pod_history
UNION ALL
SELECT {POD_COLUMNS.replace("valid_to", "NULL::TIMESTAMPTZ AS valid_to")} FROM pod_current""",
        f"""CREATE VIEW node_intervals AS
SELECT {NODE_COLUMNS} FROM node_history
UNION ALL
SELECT {NODE_COLUMNS.replace("valid_to", "NULL::TIMESTAMPTZ AS valid_to")} FROM node_current WHERE NOT deleted""",
    )),
)

MIGRATIONS += (
    # ended_pods' PRIMARY KEY made every batch insert its ended pods into an ART index of all the pods
    # that ever ended, loaded from disk node by node: the batch cost grew with the history.  The
    # table becomes a plain append-only list of keys (the writer asks it only about the few keys its
    # Bloom filter cannot rule out, with a scan: allocating.py).
    Migration(10, "ended_pods without an index: append-only keys", (
        "CREATE TABLE ended_pods_v10 (key UBIGINT NOT NULL)",
        "INSERT INTO ended_pods_v10 SELECT key FROM ended_pods",
        "DROP TABLE ended_pods",
        "ALTER TABLE ended_pods_v10 RENAME TO ended_pods",
    )),
)

# Version 11's daily_allocation rows of a pod interval (kept as it was: the migration's own text): its
# GPU-seconds per UTC day and GPU resource, in its node's latest pool.
_DAILY_ALLOCATION_V11 = """
SELECT (to_timestamp(d * 86400) AT TIME ZONE 'UTC')::DATE AS day, p.cluster, coalesce(n.node_pool, '') AS node_pool,
       resource, sum((least(t, (d + 1) * 86400) - greatest(f, d * 86400)) * count) AS gpu_seconds
FROM (SELECT cluster, node, epoch(valid_from) AS f, epoch(valid_to) AS t,
             unnest(map_keys(gpu_resources)) AS resource, unnest(map_values(gpu_resources)) AS count
      FROM {source} WHERE state = 'Bound' AND gpus > 0 AND valid_to > valid_from) p
LEFT JOIN node_current n ON n.cluster = p.cluster AND n.name = p.node,
     range(floor(f / 86400)::BIGINT, ceil(t / 86400)::BIGINT) r(d)
GROUP BY ALL
"""

MIGRATIONS += (
    # A year of daily idle GPU-hours read every closed pod interval (10 M: seconds); the writer keeps
    # their GPU-seconds per UTC day instead, in each batch's transaction (allocating.py), and the idle
    # report computes only the open ones.
    Migration(11, "daily GPU-seconds of the closed pod intervals: daily_allocation", (
        """CREATE TABLE daily_allocation (
    day              DATE NOT NULL,
    cluster          VARCHAR NOT NULL,
    node_pool        VARCHAR NOT NULL,
    resource         VARCHAR NOT NULL,
    gpu_seconds      DOUBLE NOT NULL,
    PRIMARY KEY (day, cluster, node_pool, resource)
)""",
        "INSERT INTO daily_allocation " + _DAILY_ALLOCATION_V11.format(source="pod_history"),
    )),
)

# A closed pod interval's GPU-seconds per UTC day (days from floor(from / 86400) to ceil(to / 86400) - 1)
# and GPU resource, the rows daily_allocation keeps: each overlap with one of its node's intervals in
# that node interval's pool (the labels valid then; '' when it has none), and the rest (no node record
# had its node then: never seen, or deleted before the pod ended) apart, known_node false and pool ''.
# The rest is the whole interval less the overlaps (a node's intervals never overlap one another).
DAILY_ALLOCATION_OF = """
SELECT (to_timestamp(d * 86400) AT TIME ZONE 'UTC')::DATE AS day, cluster, node_pool, known_node, resource,
       sum(w * (least(t, (d + 1) * 86400) - greatest(f, d * 86400)) * count) AS gpu_seconds
FROM (
    WITH p AS (SELECT cluster, node, epoch(valid_from) AS f, epoch(valid_to) AS t,
                      unnest(map_keys(gpu_resources)) AS resource, unnest(map_values(gpu_resources)) AS count
               FROM {source} WHERE state = 'Bound' AND gpus > 0 AND valid_to > valid_from),
    pieces AS (SELECT * FROM (SELECT p.cluster, coalesce(n.node_pool, '') AS node_pool, greatest(p.f, epoch(n.valid_from)) AS f,
                                     least(p.t, coalesce(epoch(n.valid_to), p.t)) AS t, p.resource, p.count
                              FROM p JOIN node_intervals n ON n.cluster = p.cluster AND n.name = p.node)
               WHERE t > f)
    SELECT cluster, node_pool, true AS known_node, 1 AS w, f, t, resource, count FROM pieces
    UNION ALL
    SELECT cluster, '', false, 1, f, t, resource, count FROM p
    UNION ALL
    SELECT cluster, '', false, -1, f, t, resource, count FROM pieces
), range(floor(f / 86400)::BIGINT, ceil(t / 86400)::BIGINT) r(d)
GROUP BY ALL
HAVING known_node OR abs(sum(w * (least(t, (d + 1) * 86400) - greatest(f, d * 86400)) * count)) > 1e-6
"""

MIGRATIONS += (
    # Idle counted a pod on a node no node record had against its cluster's allocatable (idle went
    # negative) and gave a pod's hours its node's latest pool: the daily rows split each closed pod
    # interval by its node's intervals instead (DAILY_ALLOCATION_OF), the rest kept apart.
    Migration(12, "daily_allocation by the node intervals: pools of the time, known_node", (
        "DROP TABLE daily_allocation",
        """CREATE TABLE daily_allocation (
    day              DATE NOT NULL,
    cluster          VARCHAR NOT NULL,
    node_pool        VARCHAR NOT NULL,
    known_node       BOOLEAN NOT NULL,
    resource         VARCHAR NOT NULL,
    gpu_seconds      DOUBLE NOT NULL,
    PRIMARY KEY (day, cluster, node_pool, known_node, resource)
)""",
        "INSERT INTO daily_allocation " + DAILY_ALLOCATION_OF.format(source="pod_history"),
    )),
)

LATEST_VERSION = MIGRATIONS[-1].version


class SchemaTooNewError(RuntimeError):
    """The file was migrated by a newer workloadmap than this one."""


def applied_versions(conn) -> list[int]:
    exists = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'",
        [SCHEMA_VERSION_TABLE]).fetchone()[0]
    if not exists:
        return []
    return [v for (v,) in conn.execute(f"SELECT version FROM {SCHEMA_VERSION_TABLE} ORDER BY version").fetchall()]


def current_version(conn) -> int:
    versions = applied_versions(conn)
    return versions[-1] if versions else 0


def migrate(conn, target: int | None = None) -> list[int]:
    """Apply pending migrations up to `target` (default: latest); return the versions applied.

    Each migration runs in its own transaction with its bookkeeping row, so the
    file is always at a whole version.  Idempotent.
    """
    target = LATEST_VERSION if target is None else target
    conn.execute(f"""CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} (
        version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMPTZ NOT NULL)""")
    done = set(applied_versions(conn))
    newest = max(done, default=0)
    if newest > LATEST_VERSION:
        raise SchemaTooNewError(
            f"warehouse schema version {newest} is newer than this workloadmap knows ({LATEST_VERSION})")
    applied = []
    for migration in MIGRATIONS:
        if migration.version in done or migration.version > target:
            continue
        conn.execute("BEGIN TRANSACTION")
        try:
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(f"INSERT INTO {SCHEMA_VERSION_TABLE} VALUES (?, ?, ?)",
                         [migration.version, migration.name, datetime.now(timezone.utc)])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(migration.version)
    return applied
