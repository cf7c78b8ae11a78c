"""`workloadmap export --parquet DIR`: hive layout by UTC date and cluster, readable back by pyarrow and DuckDB."""

from __future__ import annotations

import json
from datetime import date

import click
import duckdb
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from tests.analytics_history import records_and_transitions
from workloadmap.cli import analytics_commands
from workloadmap.warehouse.writing import Warehouse


def invoke(*args):
    group = click.Group("workloadmap")
    analytics_commands.register(group)
    return CliRunner().invoke(group, list(args))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """The hand-built day, plus b/ml/big seen again on the next day at 23:30 (states 13, intervals 7 in b)."""
    records, transitions = records_and_transitions()
    late = dict(records[-1], resourceVersion="99", observedAt="2026-11-02T23:30:00Z", status="Running")
    path = tmp_path_factory.mktemp("export") / "h.duckdb"
    with Warehouse(path) as wh:
        wh.write(records + [late], transitions)
    return str(path)


def partitions(root):
    return sorted(str(p.relative_to(root)) for p in root.glob("date=*/cluster=*"))


def test_layout_and_row_counts(history, tmp_path):
    out = tmp_path / "parquet"
    result = invoke("export", "--parquet", str(out), "--duckdb", history, "-o", "json")
    assert result.exit_code == 0, result.output
    summary = {i["table"]: (i["rows"], i["partitions"]) for i in json.loads(result.output)["items"]}
    # states: a 6 + b 6 on 11-01, b 1 on 11-02; intervals: a 6, b 6 (the scale change opens one) on 11-01,
    # b 1 (Failed -> Running) on 11-02; transitions: 11 on 11-01 (none written for the late record)
    assert summary == {"workload_states": (13, 3), "status_intervals": (13, 3), "transitions": (11, 2)}
    assert partitions(out / "workload_states") == [
        "date=2026-11-01/cluster=a", "date=2026-11-01/cluster=b", "date=2026-11-02/cluster=b"]
    assert partitions(out / "transitions") == ["date=2026-11-01/cluster=a", "date=2026-11-01/cluster=b"]
    assert all(f.suffix == ".parquet" for f in (out / "workload_states").rglob("*") if f.is_file())

    states = ds.dataset(out / "workload_states", format="parquet", partitioning="hive")
    assert states.count_rows() == 13
    per = states.to_table(columns=["date", "cluster", "uid"]).group_by(["date", "cluster"]).aggregate(
        [("uid", "count")]).to_pylist()
    assert sorted((r["date"], r["cluster"], r["uid_count"]) for r in per) == [
        ("2026-11-01", "a", 6), ("2026-11-01", "b", 6), ("2026-11-02", "b", 1)]

    conn = duckdb.connect()
    rows = conn.execute(
        "SELECT date, cluster, count(*), sum(gpus), any_value(typeof(gpu_resources)) "
        "FROM read_parquet($glob, hive_partitioning = true) GROUP BY ALL ORDER BY ALL",
        {"glob": str(out / "status_intervals" / "**" / "*.parquet")}).fetchall()
    # a on 11-01: train 8 x 3 intervals, serve 4 x 3; b: infer 2 + 2 + 0 (Deleted), big 16 + 32 + 32
    assert rows == [(date(2026, 11, 1), "a", 6, 36.0, "MAP(VARCHAR, DOUBLE)"),
                    (date(2026, 11, 1), "b", 6, 84.0, "MAP(VARCHAR, DOUBLE)"),
                    (date(2026, 11, 2), "b", 1, 32.0, "MAP(VARCHAR, DOUBLE)")]
    # the JSON record survives as text
    record = conn.execute("SELECT record FROM read_parquet($glob, hive_partitioning = true) WHERE resource_version = '99'",
                          {"glob": str(out / "workload_states" / "**" / "*.parquet")}).fetchone()[0]
    assert json.loads(record)["observedAt"] == "2026-11-02T23:30:00Z"


def test_existing_directory_is_refused_unless_overwrite(history, tmp_path):
    out = tmp_path / "p"
    assert invoke("export", "--parquet", str(out), "--duckdb", history, "--table", "transitions").exit_code == 0
    again = invoke("export", "--parquet", str(out), "--duckdb", history, "--table", "transitions")
    assert again.exit_code == 1 and "already exist" in again.output
    # an earlier export's shape (a partition this history no longer has): replaced
    stale = out / "transitions" / "date=2020-01-01" / "cluster=gone" / "data_0.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    again = invoke("export", "--parquet", str(out), "--duckdb", history, "--table", "transitions", "--overwrite",
                   "-o", "json")
    assert again.exit_code == 0 and json.loads(again.output)["items"][0]["rows"] == 11
    assert not stale.exists() and not stale.parent.parent.exists()
    assert sorted(p.name for p in out.iterdir()) == ["transitions"]


@pytest.mark.parametrize("foreign", ["notes.txt", "date=2026-11-01/README", "date=2026-11-01/cluster=a/keep.csv",
                                     "other/data.parquet"])
def test_overwrite_never_deletes_files_an_export_did_not_write(history, tmp_path, foreign):
    """issue 27: --overwrite removed the whole table directory, whatever else it held."""
    out = tmp_path / "p"
    assert invoke("export", "--parquet", str(out), "--duckdb", history, "--table", "transitions").exit_code == 0
    theirs = out / "transitions" / foreign
    theirs.parent.mkdir(parents=True, exist_ok=True)
    theirs.write_text("mine")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    again = invoke("export", "--parquet", str(out), "--duckdb", history, "--table", "transitions", "--overwrite")
    assert again.exit_code == 1
    assert again.output == (f"error: {out / 'transitions'} holds files an export did not write ({foreign}): "
                            f"not replacing it\n")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before and theirs.read_text() == "mine"


def test_overwrite_refuses_a_file_where_the_table_directory_goes(history, tmp_path):
    out = tmp_path / "p"
    out.mkdir()
    (out / "transitions").write_text("a file")
    again = invoke("export", "--parquet", str(out), "--duckdb", history, "--table", "transitions", "--overwrite")
    assert again.exit_code == 1 and "is not an export directory" in again.output
    assert (out / "transitions").read_text() == "a file"


def test_table_output(history, tmp_path):
    result = invoke("export", "--parquet", str(tmp_path / "t"), "--duckdb", history)
    assert result.exit_code == 0
    assert [line.split()[:3] for line in result.output.splitlines()[2:5]] == [
        ["workload_states", "13", "3"], ["status_intervals", "13", "3"], ["transitions", "11", "2"]]
