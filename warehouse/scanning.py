"""Statements over a batch's Arrow table, which they read by the name ``wm_rows``.

Why not ``conn.register``: registering a view over an Arrow table and dropping it again are catalog
changes, and in DuckDB 2.0 the pair costs about as much CPU as the small statement that reads the
table; the writer reads a dozen such tables a batch, so the pairs were a fifth of its fixed cost per
batch (bench/RESULTS.md).  DuckDB also finds a table a statement names among the local variables of
the Python frame that runs it (its replacement scan), at no cost beyond the scan: these functions
hold the table in such a variable, ``wm_rows``, for the one statement they run.  A statement that
reads two tables, or a table read by several statements, still registers them.

``prepare`` has the connection look for the name in every frame up the stack, not only the one that
calls ``execute``: a wrapper around the connection (a test's, a profiler's) then still finds it.
"""

from __future__ import annotations

import pyarrow as pa

ROWS = "wm_rows"   # the name the statements give the table


def prepare(conn) -> None:
    """Let `conn`'s statements find ``wm_rows`` in the frames above a wrapper's (see the module)."""
    conn.execute("SET python_scan_all_frames = true")


def execute_over(conn, sql: str, rows: pa.Table, params=None):
    """Run `sql`, which reads `rows` as the table ``wm_rows``; returns the connection (for fetching)."""
    wm_rows = rows  # noqa: F841 (read by the statement, by name)
    return conn.execute(sql, params) if params is not None else conn.execute(sql)


def arrow_over(conn, sql: str, rows: pa.Table) -> pa.Table:
    """The result of the query `sql`, which reads `rows` as the table ``wm_rows``, as an Arrow table."""
    wm_rows = rows  # noqa: F841 (read by the statement, by name)
    return conn.sql(sql).to_arrow_table()
