"""The writer's DuckDB memory bound (issue 30: the writer's memory grew within each life, its buffer
pool keeping the blocks of the file it touched, toward DuckDB's default of 80% of the machine)."""

from __future__ import annotations

import pytest

from workloadmap.warehouse.writing import MemoryLimitError, Warehouse, check_memory_limit

POOL = "SELECT memory_usage, memory_limit FROM pragma_database_size() WHERE database_name = current_database()"
MIB = 2**20


def _mib(text: str) -> float:
    """DuckDB's sizes as it prints them ('61.0 MiB', '1.2 GiB', '512.0 KiB', '0 bytes'), in MiB."""
    number, unit = text.split()
    return float(number) * {"bytes": 1 / MIB, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def _file_larger_than(path, mib: int) -> None:
    """A table of `mib` MiB and more in the warehouse file (md5 texts compress poorly)."""
    with Warehouse(path) as wh:
        wh.conn.execute(f"CREATE TABLE filler AS SELECT i, md5(i::VARCHAR) || md5((i + 1)::VARCHAR) AS t "
                        f"FROM range({mib * MIB // 64}) r(i)")
        wh.conn.execute("CHECKPOINT")
    assert path.stat().st_size > mib * MIB


def test_the_writer_s_buffer_pool_stays_under_its_limit_reading_more_than_it(tmp_path):
    path = tmp_path / "w.duckdb"
    _file_larger_than(path, 48)
    # Without a limit, scanning the file leaves its blocks cached: the pool passes 16 MiB ...
    with Warehouse(path) as wh:
        wh.conn.execute("SELECT count(*), sum(length(t)) FROM filler").fetchall()
        used, _ = wh.conn.execute(POOL).fetchone()
        assert _mib(used) > 16
    # ... with 16 MiB (16,777,216 bytes, "16.0 MiB" as DuckDB prints it), the same scan stays under it.
    with Warehouse(path, memory_limit="16MiB") as wh:
        assert wh.conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "16.0 MiB"
        (count, _), = wh.conn.execute("SELECT count(*), sum(length(t)) FROM filler").fetchall()
        assert count == 48 * MIB // 64
        used, limit = wh.conn.execute(POOL).fetchone()
        assert limit == "16.0 MiB" and _mib(used) <= 16


def test_a_query_needing_more_than_the_limit_spills_beside_the_file_not_into_the_working_directory(
        tmp_path, monkeypatch):
    path = tmp_path / "w.duckdb"
    _file_larger_than(path, 48)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with Warehouse(path, memory_limit="64MiB") as wh:
        assert wh.conn.execute("SELECT current_setting('temp_directory')").fetchone()[0] == f"{path}.tmp"
        # the distinct 64-character texts (786,432: one a row) take more than 64 MiB to hash
        assert wh.conn.execute("SELECT count(*) FROM (SELECT DISTINCT t FROM filler)").fetchone()[0] == 48 * MIB // 64
        assert (tmp_path / "w.duckdb.tmp").is_dir() and not list(cwd.iterdir())


def test_a_memory_limit_in_decimal_units_is_duckdb_s(tmp_path):
    # 64MB = 64,000,000 bytes = 61.04 MiB
    with Warehouse(tmp_path / "w.duckdb", memory_limit="64MB") as wh:
        assert wh.conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "61.0 MiB"


@pytest.mark.parametrize("value", ["lots", "GB", "2 parsecs"])
def test_a_memory_limit_that_is_not_a_size_is_refused_naming_it(tmp_path, value):
    with pytest.raises(MemoryLimitError, match=f"memory limit '{value}' is not a size DuckDB takes"):
        check_memory_limit(value)
    with pytest.raises(MemoryLimitError, match=f"'{value}'"):
        Warehouse(tmp_path / "w.duckdb", memory_limit=value)
    # the refused writer let go of its file: another one opens it
    with Warehouse(tmp_path / "w.duckdb") as wh:
        assert wh.conn.execute("SELECT count(*) FROM state_history").fetchone()[0] == 0
