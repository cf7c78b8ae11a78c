"""`workloadmap query`: one read-only statement, bound parameters, and the writer's lock explained."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.analytics_history import build
from workloadmap.cli import analytics_commands
from workloadmap.warehouse.querying import (
    QueryError, ReadOnlyViolation, WarehouseUnavailable, load_query, open_readonly, query_names, run_sql)


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return build(tmp_path_factory.mktemp("query") / "h.duckdb")


def invoke(*args):
    group = click.Group("workloadmap")
    analytics_commands.register(group)
    return CliRunner().invoke(group, list(args))


def test_select_with_bound_parameters_as_json(history):
    result = invoke("query", "--duckdb", history, "-o", "json", "-p", "ns=ml", "-p", "min=5",
                    "SELECT name, to_status, gpus, transitioned_at FROM transitions "
                    "WHERE namespace = $ns AND gpus >= $min ORDER BY transitioned_at, name")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [(i["name"], i["to_status"], i["gpus"]) for i in out["items"]] == [
        ("train", "Initializing", 8), ("train", "Running", 8), ("big", "Running", 16), ("big", "Failed", 32),
        ("train", "Completed", 8)]
    assert out["items"][0]["transitioned_at"] == "2026-11-01T00:00:00Z" and out["count"] == 5


def test_a_parameter_is_a_value_never_sql(history):
    # an injection attempt is just a string that matches nothing
    result = invoke("query", "--duckdb", history, "-o", "json", "-p", "ns=ml' OR '1'='1",
                    "SELECT count(*) AS n FROM transitions WHERE namespace = $ns")
    assert json.loads(result.output)["items"] == [{"n": 0}]


def test_csv_and_table_and_file(history, tmp_path):
    sql = tmp_path / "q.sql"
    sql.write_text("SELECT cluster, count(*) AS n FROM status_intervals GROUP BY cluster ORDER BY cluster")
    result = invoke("query", "--duckdb", history, "--file", str(sql), "-o", "csv")
    assert list(csv.reader(io.StringIO(result.output))) == [["cluster", "n"], ["a", "6"], ["b", "6"]]
    result = invoke("query", "--duckdb", history, "--file", str(sql))
    assert result.exit_code == 0 and result.output.split()[:6] == ["CLUSTER", "N", "a", "6", "b", "6"]
    empty = invoke("query", "--duckdb", history, "-o", "csv", "SELECT name FROM transitions WHERE false")
    assert empty.output == "name\n"


@pytest.mark.parametrize("statement, says", [
    ("INSERT INTO transitions (cluster, uid, to_status, transitioned_at) VALUES ('x', 'y', 'Running', now())",
     'statement of type "INSERT"'),
    ("DELETE FROM transitions", 'statement of type "DELETE"'),
    ("UPDATE state_history SET gpus = 0", 'statement of type "UPDATE"'),
    ("CREATE TABLE t AS SELECT 1", 'statement of type "CREATE"'),
    ("DROP VIEW current_workloads", 'statement of type "DROP"'),
    ("COPY transitions TO '/tmp/wm-should-not-exist.csv'", "file system operations are disabled"),
    ("ATTACH '/tmp/wm-should-not-exist.duckdb' AS other", "file system operations are disabled"),
    ("SELECT * FROM read_csv('/etc/hostname')", "file system operations are disabled"),
    ("SET enable_external_access = true", "configuration has been locked"),
])
def test_writes_and_file_access_are_refused_by_duckdb(history, statement, says):
    result = invoke("query", "--duckdb", history, statement)
    assert result.exit_code == 1
    assert "refused: the warehouse is opened read-only" in result.output and says in result.output
    conn = open_readonly(history)
    assert conn.execute("SELECT count(*) FROM transitions").fetchone()[0] == 11  # nothing changed


def test_duckdb_itself_rejects_insert_on_a_read_only_connection(history):
    """The guarantee is DuckDB's, not a parser of ours: the raw read-only connection refuses too."""
    import duckdb

    raw = duckdb.connect(history, read_only=True)
    with pytest.raises(duckdb.InvalidInputException, match="read-only mode"):
        raw.execute("INSERT INTO consumer_offsets VALUES ('c', 't', 0, 1, now())")
    raw.close()
    with pytest.raises(ReadOnlyViolation, match="read-only"):
        run_sql(open_readonly(history), "INSERT INTO consumer_offsets VALUES ('c', 't', 0, 1, now())")


def test_parameter_and_statement_mistakes(history):
    conn = open_readonly(history)
    with pytest.raises(QueryError, match=r"without a value: \$ns"):
        run_sql(conn, "SELECT * FROM transitions WHERE namespace = $ns")
    with pytest.raises(QueryError, match="does not use: typo"):
        run_sql(conn, "SELECT 1", {"typo": 1})
    with pytest.raises(QueryError, match="exactly one SQL statement"):
        run_sql(conn, "SELECT 1; SELECT 2")
    result = invoke("query", "--duckdb", history, "SELEC 1")
    assert result.exit_code == 1 and "syntax error" in result.output
    assert invoke("query", "--duckdb", history).exit_code == 2
    assert invoke("query", "--duckdb", history, "-p", "novalue", "SELECT 1").exit_code == 2


def test_parameter_types():
    from workloadmap.cli.analytics_commands import parse_param

    assert [parse_param(p) for p in ("a=5", "b=2.5", "c=true", "d=null", "e=ml", "$f=x=y")] == [
        ("a", 5), ("b", 2.5), ("c", True), ("d", None), ("e", "ml"), ("f", "x=y")]


def test_a_file_held_by_the_writer_points_at_the_snapshot(tmp_path):
    # built and held by another process (this one never opens the file: DuckDB caches
    # database instances per process, which would hide the other process's lock)
    path = str(tmp_path / "held.duckdb")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import shutil, sys
        from tests.analytics_history import build
        from workloadmap.warehouse.writing import Warehouse
        build({path!r})
        shutil.copyfile({path!r}, {str(tmp_path / 'snap.duckdb')!r})  # what the writer's snapshot() keeps
        wh = Warehouse({path!r})  # (no wh.snapshot() here: copying closes an fd of the file, which drops
                                  # the process's POSIX lock on it; reported)
        print('ready', flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        assert holder.stdout.readline().strip() == "ready"
        result = invoke("query", "--duckdb", path, "SELECT 1")
        assert result.exit_code == 1
        assert "held by a running writer" in result.output and "run warehouse --snapshot FILE" in result.output
        with pytest.raises(WarehouseUnavailable, match="Conflicting lock"):
            open_readonly(path)
        # the snapshot the writer keeps opens read-only meanwhile
        result = invoke("query", "--duckdb", str(tmp_path / "snap.duckdb"), "-o", "json",
                        "SELECT count(*) AS n FROM workload_states")
        assert json.loads(result.output)["items"] == [{"n": 12}]
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_missing_file(tmp_path):
    result = invoke("query", "--duckdb", str(tmp_path / "none.duckdb"), "SELECT 1")
    assert result.exit_code == 1 and "no such warehouse file" in result.output


def test_every_named_query_has_a_header_and_parses():
    names = query_names()
    assert {"capacity", "capacity_series", "capacity_top", "capacity_top_window", "transitions_feed",
            "export_workload_states", "history_bounds"} <= set(names)
    for name in names:
        q = load_query(name)
        header = list(itertools.takewhile(lambda line: line.startswith("--"), q.sql.splitlines()))
        assert q.summary and any("Parameters:" in line for line in header), name
        # The header's Parameters section names exactly the parameters the statement uses.
        section = "\n".join(header).split("Parameters:", 1)[1]
        assert set(re.findall(r"\$([a-z_]+)", section)) == q.parameters, name
