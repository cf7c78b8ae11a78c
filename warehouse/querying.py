"""Reading the warehouse: read-only connections and the named SQL queries of ``queries/``.

Why named files: the questions users come for (capacity now, at an instant,
over a window; the event feed; exports) are SQL, and SQL is best read,
reviewed and reused as SQL.  Each ``queries/NAME.sql`` starts with a comment
header: what it answers, then its named parameters (``$name``).  Parameters
are always bound by DuckDB (``execute(sql, {name: value})``), never formatted
into the text; a parameter a caller leaves out is bound as NULL, which every
query reads as "no filter" / "the default".

Why read-only: DuckDB lets one process write a file, and while it does no
other process may open it at all (not even read-only).  Readers open either a
stopped warehouse or a snapshot the writer keeps (``run warehouse --snapshot
FILE``) with ``open_readonly``, which also disables file-system access from
SQL (no COPY TO, ATTACH, read_csv ...) and locks the configuration, so an
ad-hoc query can read the warehouse and nothing else.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import duckdb
import pyarrow as pa

from . import interrupting
from .schema import LATEST_VERSION, current_version

QUERIES_DIR = Path(__file__).resolve().parent / "queries"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class WarehouseUnavailable(RuntimeError):
    """The warehouse file cannot be opened for reading (missing, held by the writer, too old)."""


class ReadOnlyViolation(RuntimeError):
    """A statement tried to change the warehouse or touch files; DuckDB refused it."""


class QueryError(ValueError):
    """A query that cannot run as asked (unknown name, parameters that do not match, bad SQL)."""


# --------------------------------------------------------------------------- connections


def open_readonly(path: str | os.PathLike, *, sandbox: bool = True) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a warehouse file, with a clear error when it cannot be had.

    `sandbox` (default) also turns off DuckDB's access to other files and locks
    the configuration (for user SQL); the exporter passes False to write Parquet.
    """
    path = Path(path)
    if not path.exists():
        raise WarehouseUnavailable(f"{path}: no such warehouse file")
    try:
        conn = interrupting.track(duckdb.connect(str(path), read_only=True))
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            raise WarehouseUnavailable(
                f"{path} is held by a running writer (DuckDB lets no other process open it, not even "
                f"read-only): query a snapshot instead, kept by `workloadmap run warehouse --snapshot FILE`. "
                f"DuckDB said: {exc}") from None
        raise WarehouseUnavailable(f"{path}: {exc}") from None
    # DuckDB shares one database instance per file within a process: a connection
    # opened earlier (and maybe still cached) may have set and locked all this already.
    locked, external = conn.execute(
        "SELECT current_setting('lock_configuration'), current_setting('enable_external_access')").fetchone()
    if not locked:
        conn.execute("SET TimeZone = 'UTC'")  # timestamps and dates in UTC, whatever the machine's zone
        conn.execute("SET enable_progress_bar = false")  # DuckDB's bar would print over our output
        if sandbox:
            conn.execute("SET enable_external_access = false")
            conn.execute("SET lock_configuration = true")
    elif not sandbox and not external:
        conn.close()
        raise WarehouseUnavailable(f"{path} is open in this process without file access; close that connection first")
    version = current_version(conn)
    if version < LATEST_VERSION:
        conn.close()
        raise WarehouseUnavailable(
            f"{path} has schema version {version}, this workloadmap reads {LATEST_VERSION}: "
            f"open it once with the writer (`workloadmap run warehouse`) to migrate it")
    return conn


# --------------------------------------------------------------------------- results


@dataclass
class Result:
    """Column names and rows of one query."""

    columns: list[str]
    rows: list[tuple] = field(default_factory=list)

    def dicts(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def _run(conn, sql: str, params: dict, arrow: bool = False):
    """Execute and fetch a Result of Python rows (or, with `arrow`, an Arrow table), with DuckDB's
    errors turned into ours."""
    try:
        if arrow:
            return conn.sql(sql, params=params or None).to_arrow_table()
        cur = conn.execute(sql, params or None)
        columns = [d[0] for d in cur.description] if cur.description else []
        rows = cur.fetchall() if cur.description else []
    except (duckdb.InvalidInputException, duckdb.PermissionException) as exc:
        text = str(exc)
        if "read-only mode" in text or "disabled by configuration" in text or "configuration has been locked" in text:
            raise ReadOnlyViolation(
                f"refused: the warehouse is opened read-only and without file access, and DuckDB rejected "
                f"the statement ({text.splitlines()[0]})") from None
        raise QueryError(text) from None
    except duckdb.Error as exc:
        raise QueryError(str(exc)) from None
    return Result(columns, rows)


def run_sql(conn, sql: str, params: dict | None = None) -> Result:
    """Run ONE statement of user SQL with its named parameters bound.

    Every ``$name`` in the statement must be given and nothing else: a typo
    in a parameter name fails loudly instead of silently binding nothing.
    Writes are refused by the connection (see ``open_readonly``), not by
    parsing: DuckDB itself is the judge.
    """
    params = dict(params or {})
    try:
        statements = conn.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(str(exc)) from None
    if len(statements) != 1:
        raise QueryError(f"give exactly one SQL statement (got {len(statements)})")
    wanted = set(statements[0].named_parameters)
    missing, unknown = sorted(wanted - params.keys()), sorted(params.keys() - wanted)
    if missing:
        raise QueryError(f"parameters without a value: {', '.join('$' + m for m in missing)} (use -p NAME=VALUE)")
    if unknown:
        raise QueryError(f"parameters the query does not use: {', '.join(unknown)}")
    return _run(conn, sql, params)


# --------------------------------------------------------------------------- named queries


@dataclass(frozen=True)
class NamedQuery:
    name: str
    sql: str
    summary: str  # the first line of the header comment
    parameters: frozenset[str]


@lru_cache(maxsize=None)
def load_query(name: str) -> NamedQuery:
    """The query in ``queries/NAME.sql`` with its header's first line and its parameters."""
    if not _NAME.match(name):
        raise QueryError(f"{name!r} is not a query name")
    path = QUERIES_DIR / f"{name}.sql"
    try:
        sql = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise QueryError(f"no named query {name!r} (known: {', '.join(query_names())})") from None
    header = [line[2:].strip() for line in sql.splitlines() if line.startswith("--")]
    statements = duckdb.connect().extract_statements(sql)  # parse only: names of the parameters
    if len(statements) != 1:
        raise QueryError(f"{path.name}: a named query is one statement")
    return NamedQuery(name, sql, header[0] if header else "", frozenset(statements[0].named_parameters))


def query_names() -> list[str]:
    return sorted(p.stem for p in QUERIES_DIR.glob("*.sql"))


# The most steps a time series query may have: each step is a row per group (and a join over
# the intervals that overlap it), so one option (`--since 1900-01-01 --step 15m`) could ask for
# millions and take the machine's memory.  A year in 15-minute steps is 35,040.
MAX_STEPS = 50_000


def _check_steps(params: dict) -> None:
    step, since, until = params.get("step"), params.get("since"), params.get("until")
    if not isinstance(step, dt.timedelta) or since is None or until is None or step <= dt.timedelta(0):
        return
    steps = -(-(until - since) // step)
    if steps > MAX_STEPS:
        raise QueryError(f"from {since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} in steps of {_step_text(step)} is "
                         f"{steps:,} steps, more than {MAX_STEPS:,}: take a larger step or a shorter window")


def _step_text(step: dt.timedelta) -> str:
    seconds = int(step.total_seconds())
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _bound(name: str, params: dict) -> tuple[str, dict]:
    query = load_query(name)
    unknown = sorted(params.keys() - query.parameters)
    if unknown:
        raise QueryError(f"query {name} has no parameter {', '.join('$' + u for u in unknown)}")
    _check_steps(params)
    return query.sql, {p: params.get(p) for p in query.parameters}


def run_query(conn, name: str, **params) -> Result:
    """Run a named query; parameters it declares but the caller omits are bound as NULL."""
    return _run(conn, *_bound(name, params))


def run_query_arrow(conn, name: str, **params) -> pa.Table:
    """Run a named query and fetch its result as an Arrow table (large results: no Python object per row)."""
    return _run(conn, *_bound(name, params), arrow=True)


class EmptyHistory(QueryError):
    """The history holds no workload state yet, so a window has no end to default to."""


def history_end(conn) -> dt.datetime:
    """The end of the history (its last observed state): where a window given no end stops."""
    end = run_query(conn, "history_bounds").rows[0][1]
    if end is None:
        raise EmptyHistory("the history is empty: give the end of the window")
    return end
