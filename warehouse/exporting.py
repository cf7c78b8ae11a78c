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
    refused unless `overwrite`, which removes it first (an export is whole or absent), and
    only when it holds nothing but an earlier export's files.
    """
    dest = Path(dest)
    unknown = [t for t in tables if t not in EXPORTED]
    if unknown:
        raise QueryError(f"cannot export {', '.join(unknown)}: tables are {', '.join(EXPORTED)}")
    targets = [(t, dest / t) for t in tables]
    existing = [p for _, p in targets if p.exists() or p.is_symlink()]
    if existing and not overwrite:
        raise ExportExists(f"{', '.join(map(str, existing))} already exist (use --overwrite to replace)")
    ours = {path: _export_files(path) for path in existing}   # all checked before anything is removed
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for table, path in targets:
        if path in ours:
            _remove_export(path, ours[path])
        conn.execute("SET TimeZone = 'UTC'")  # the date of a row is its UTC date
        rows = run_query(conn, f"export_{table}", dest=str(path)).rows[0][0]
        partitions = sum(1 for d in path.glob("date=*/cluster=*") if d.is_dir()) if path.exists() else 0
        done.append(Exported(table, path, rows, partitions))
    return done


def _export_files(path: Path) -> list[Path]:
    """The files of an earlier export in `path` (``date=*/cluster=*/*.parquet``); ExportExists
    when `path` holds anything else: --overwrite replaces an export, never a user's files."""
    if path.is_symlink() or not path.is_dir():
        raise ExportExists(f"{path} is not an export directory: not replacing it")
    files, foreign = [], []
    for entry in path.rglob("*"):
        parts = entry.relative_to(path).parts
        shaped = (len(parts) >= 1 and parts[0].startswith("date=")
                  and (len(parts) < 2 or parts[1].startswith("cluster=")))
        if entry.is_dir() and not entry.is_symlink() and (not shaped or len(parts) > 2):
            if not any(entry.iterdir()):
                foreign.append(entry)   # (one that holds files is named by them)
        elif entry.is_symlink() or not shaped or len(parts) > 3:
            foreign.append(entry)
        elif len(parts) == 3:
            (files if entry.is_file() and entry.suffix == ".parquet" else foreign).append(entry)
        elif not entry.is_dir():
            foreign.append(entry)
    if foreign:
        shown = ", ".join(str(f.relative_to(path)) for f in sorted(foreign)[:3])
        raise ExportExists(f"{path} holds files an export did not write ({shown}"
                           f"{', ...' if len(foreign) > 3 else ''}): not replacing it")
    return files


def _remove_export(path: Path, files: list[Path]) -> None:
    for f in files:
        f.unlink()
    for directory in sorted((d for d in path.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        directory.rmdir()
    path.rmdir()
