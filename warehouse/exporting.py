"""Exporting the history as Parquet, partitioned by date and cluster, for other engines.

Why Parquet with a hive layout: Spark, Trino, pandas/pyarrow and DuckDB itself
read ``DIR/TABLE/date=.../cluster=.../*.parquet`` natively and prune
partitions on ``date`` and ``cluster``, so a long history stays cheap to
query elsewhere, and the export can be read while the writer keeps writing
(it is taken from a read-only connection to a stopped warehouse or a snapshot).
Each table is one DuckDB ``COPY ... (FORMAT PARQUET, PARTITION_BY (date,
cluster))`` (the named queries ``export_<table>.sql``), run in UTC so a row's
date is its UTC date.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .querying import QueryError, run_query

# table -> the timestamp whose UTC date partitions it
EXPORTED = {
    "workload_states": "observed_at",
    "status_intervals": "valid_from",
    "transitions": "transitioned_at",
}


class ExportExists(FileExistsError):
    """The export directory of a table is already there (pass overwrite=True to replace it)."""


@dataclass(frozen=True)
class Exported:
    table: str
    path: Path
    rows: int
    partitions: int  # (date, cluster) directories written


def exporting_tables(conn, dest: str | os.PathLike, tables=tuple(EXPORTED), *, overwrite: bool = False) -> list[Exported]:
    """Write each table to ``dest/<table>/date=YYYY-MM-DD/cluster=NAME/``; return what was written.

    `conn` reads the warehouse (read-only is enough, but it needs file access:
    ``open_readonly(path, sandbox=False)``).  An existing table directory is
    refused unless `overwrite`, which removes it first (an export is whole or absent).
    """
    dest = Path(dest)
    unknown = [t for t in tables if t not in EXPORTED]
    if unknown:
        raise QueryError(f"cannot export {', '.join(unknown)}: tables are {', '.join(EXPORTED)}")
    targets = [(t, dest / t) for t in tables]
    existing = [str(p) for _, p in targets if p.exists()]
    if existing and not overwrite:
        raise ExportExists(f"{', '.join(existing)} already exist (use --overwrite to replace)")
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for table, path in targets:
        if path.exists():
            shutil.rmtree(path)
        conn.execute("SET TimeZone = 'UTC'")  # the date of a row is its UTC date
        rows = run_query(conn, f"export_{table}", dest=str(path)).rows[0][0]
        partitions = sum(1 for d in path.glob("date=*/cluster=*") if d.is_dir()) if path.exists() else 0
        done.append(Exported(table, path, rows, partitions))
    return done
