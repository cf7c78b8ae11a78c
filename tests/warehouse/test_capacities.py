"""`workloadmap capacity` and the capacity queries, against hand-computed answers (tests/analytics_history.py)."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import click
import pytest
from click.testing import CliRunner

from tests.analytics_history import GIB, at, build
from workloadmap.cli import analytics_commands
from workloadmap.warehouse.querying import open_readonly, run_query
from workloadmap.warehouse.values import parse_instant


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return build(tmp_path_factory.mktemp("capacity") / "h.duckdb")


def cli():
    group = click.Group("workloadmap")
    analytics_commands.register(group)
    return group


def run(*args) -> dict:
    result = CliRunner().invoke(cli(), list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def by_key(items, *keys):
    return {tuple(i[k] for k in keys) if len(keys) > 1 else i[keys[0]]: i for i in items}


def test_now_by_cluster_uses_each_workloads_latest_state(history):
    # now: train Completed 8, serve Running 4, infer deleted (left out), big Failed 32
    out = run("capacity", "--duckdb", history, "-o", "json")
    items = by_key(out["items"], "cluster")
    assert out["count"] == 2
    a, b = items["a"], items["b"]
    assert (a["workloads"], a["running_gpus"], a["degraded_gpus"], a["starting_gpus"], a["queued_gpus"],
            a["all_gpus"]) == (2, 4, 0, 0, 0, 12)
    assert (b["workloads"], b["running_gpus"], b["all_gpus"]) == (1, 0, 32)
    assert (a["running_cpu"], a["all_cpu"], a["running_memory_gib"], a["all_memory_gib"]) == (4, 20, 8, 72)


def test_at_an_instant_where_intervals_start_and_end(history):
    # 03:00: train Running 8, serve Degraded 4 (starts exactly at 03:00), infer Suspended 2, big Running 32
    items = by_key(run("capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "-o", "json")["items"],
                   "cluster")
    a, b = items["a"], items["b"]
    assert (a["workloads"], a["running_gpus"], a["degraded_gpus"], a["queued_gpus"], a["all_gpus"]) == (2, 12, 4, 0, 12)
    assert (b["workloads"], b["running_gpus"], b["queued_gpus"], b["all_gpus"]) == (2, 32, 2, 34)
    assert a["degraded_cpu"] == 4 and b["running_memory_gib"] == 64
    # 00:45: train Initializing (starting), infer Suspended (queued)
    items = by_key(run("capacity", "--duckdb", history, "--at", "2026-11-01 00:45", "-o", "json")["items"], "cluster")
    assert (items["a"]["starting_gpus"], items["a"]["running_gpus"]) == (8, 0)
    assert (items["b"]["queued_gpus"], items["b"]["workloads"]) == (2, 1)
    # 06:00: infer is deleted at 06:00 exactly, its Running interval ends there (end excluded)
    items = by_key(run("capacity", "--duckdb", history, "--at", "2026-11-01T06:00:00Z", "-o", "json")["items"], "cluster")
    assert items["b"]["workloads"] == 1 and items["b"]["all_gpus"] == 32
    # before the history: nothing
    assert run("capacity", "--duckdb", history, "--at", "2026-10-31", "-o", "json")["count"] == 0


def test_group_by_several_dimensions_and_filters(history):
    items = run("capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "--by", "cluster,namespace,status",
                "-o", "json")["items"]
    got = {(i["cluster"], i["namespace"], i["status"]): (i["workloads"], i["all_gpus"]) for i in items}
    assert got == {("a", "ml", "Degraded"): (1, 4), ("a", "ml", "Running"): (1, 8),
                   ("b", "ml", "Running"): (1, 32), ("b", "web", "Suspended"): (1, 2)}
    assert set(items[0]) >= {"cluster", "namespace", "status"} and "framework" not in items[0]
    # -n ml leaves out b/web/infer
    b = by_key(run("capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "-n", "ml", "-o", "json")["items"],
               "cluster")["b"]
    assert (b["workloads"], b["all_gpus"], b["queued_gpus"]) == (1, 32, 0)
    # framework, kind and status filters; several values comma-separated or repeated
    only = run("capacity", "--duckdb", history, "--framework", "Ray", "--by", "none", "-o", "json")["items"]
    assert [(i["workloads"], i["running_gpus"]) for i in only] == [(1, 4)]
    only = run("capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "--kind", "JobSet,PyTorchJob",
               "--by", "kind", "-o", "json")["items"]
    assert {i["kind"]: i["running_gpus"] for i in only} == {"JobSet": 8, "PyTorchJob": 32}
    only = run("capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "--status", "Suspended",
               "--status", "Degraded", "--by", "none", "-o", "json")["items"]
    assert [(i["workloads"], i["all_gpus"], i["queued_gpus"], i["degraded_gpus"]) for i in only] == [(2, 6, 2, 4)]
    assert run("capacity", "--duckdb", history, "--cluster", "nowhere", "-o", "json")["count"] == 0


def test_time_series_average_and_peak_per_step(history):
    # Running+Degraded, steps of 2h over 00:00..06:00 (see the module docstring of analytics_history):
    # a: train 8 from 01:00 to 05:00, serve 4 from 02:00 on
    # b: big 16 01:30-02:30 then 32 until 04:30 (the change is one instant), infer 2 from 03:30 to 06:00
    out = run("capacity", "--duckdb", history, "--since", "2026-11-01T00:00:00Z", "--until", "2026-11-01T06:00:00Z",
              "--step", "2h", "-o", "json")
    steps = {(i["start"], i["cluster"]): (i["avg_gpus"], i["peak_gpus"]) for i in out["items"] if i["step"] == "2h"}
    assert steps == {
        ("2026-11-01T00:00:00Z", "a"): (4, 8), ("2026-11-01T02:00:00Z", "a"): (12, 12),
        ("2026-11-01T04:00:00Z", "a"): (8, 12),
        ("2026-11-01T00:00:00Z", "b"): (4, 16), ("2026-11-01T02:00:00Z", "b"): (28.5, 34),
        ("2026-11-01T04:00:00Z", "b"): (10, 34),
    }
    whole = {i["cluster"]: (i["avg_gpus"], i["peak_gpus"]) for i in out["items"] if i["step"] == "window"}
    assert whole == {"a": (8, 12), "b": (round(85 / 6, 3), 34)}
    first = next(i for i in out["items"] if i["start"] == "2026-11-01T02:00:00Z" and i["cluster"] == "b")
    # CPU: big 8 for 0.5h + 16 for 1.5h, infer 2 for 0.5h -> (4 + 24 + 1) / 2; memory: (16 + 96 + 2) / 2 GiB
    assert (first["avg_cpu"], first["peak_cpu"], first["avg_memory_gib"], first["peak_memory_gib"]) == (14.5, 18, 57, 68)


def test_time_series_window_edges_inside_intervals_and_status_choice(history):
    # 00:30..05:30 by 1h for b only: big 16 from 01:30, 32 from 02:30 to 04:30, infer 2 from 03:30;
    # the last step is cut at 05:30 (00:30+5h), nothing runs in b during it except infer
    out = run("capacity", "--duckdb", history, "--since", "2026-11-01T00:30:00Z", "--until", "2026-11-01T05:00:00Z",
              "--step", "1h", "--cluster", "b", "-o", "json")
    steps = [(i["start"], i["end"], i["avg_gpus"], i["peak_gpus"]) for i in out["items"] if i["step"] == "1h"]
    assert steps == [
        ("2026-11-01T00:30:00Z", "2026-11-01T01:30:00Z", 0, 0),
        ("2026-11-01T01:30:00Z", "2026-11-01T02:30:00Z", 16, 16),
        ("2026-11-01T02:30:00Z", "2026-11-01T03:30:00Z", 32, 32),
        ("2026-11-01T03:30:00Z", "2026-11-01T04:30:00Z", 34, 34),
        ("2026-11-01T04:30:00Z", "2026-11-01T05:00:00Z", 2, 2),  # cut at --until
    ]
    # --status picks what the series counts: infer is Suspended 00:30-03:30
    out = run("capacity", "--duckdb", history, "--since", "2026-11-01T00:00:00Z", "--until", "2026-11-01T06:00:00Z",
              "--step", "2h", "--status", "Suspended", "-o", "json")
    steps = [(i["cluster"], i["avg_gpus"], i["peak_gpus"]) for i in out["items"] if i["step"] == "2h"]
    assert steps == [("b", 1.5, 2), ("b", 1.5, 2), ("b", 0, 0)]


def test_top_workloads_now_at_and_over_a_window(history):
    assert [(i["name"], i["gpus"]) for i in run("capacity", "--duckdb", history, "--top", "5", "-o", "json")["items"]] \
        == [("serve", 4)]
    top = run("capacity", "--duckdb", history, "--top", "2", "--at", "2026-11-01T03:00:00Z", "-o", "json")["items"]
    assert [(i["name"], i["status"], i["gpus"], i["since"]) for i in top] == [
        ("big", "Running", 32, "2026-11-01T02:30:00Z"), ("train", "Running", 8, "2026-11-01T01:00:00Z")]
    top = run("capacity", "--duckdb", history, "--top", "9", "--since", "2026-11-01T00:00:00Z",
              "--until", "2026-11-01T06:00:00Z", "-o", "json")["items"]
    # GPU-hours: big 16*1 + 32*2, train 8*4, serve 4*4, infer 2*2.5
    assert [(i["name"], i["gpu_hours"], i["peak_gpus"]) for i in top] == [
        ("big", 80, 32), ("train", 32, 8), ("serve", 16, 4), ("infer", 5, 2)]
    assert top[0]["avg_gpus"] == round(80 / 6, 3)


def test_run_query_binds_parameters_directly(history):
    conn = open_readonly(history)
    rows = run_query(conn, "capacity", at=at("03:00"), by=["cluster"], namespaces=["ml"]).dicts()
    assert [(r["cluster"], r["all_gpus"], r["all_memory"]) for r in rows] == [("a", 12, 72 * GIB), ("b", 32, 64 * GIB)]


def test_table_and_csv_outputs(history):
    result = CliRunner().invoke(cli(), ["capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "GPUs requested at 2026-11-01T03:00:00Z, by cluster" in lines[0]
    assert lines[-1].split() == ["TOTAL", "4", "44", "4", "0", "2", "46"]
    result = CliRunner().invoke(cli(), ["capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "-o", "csv"])
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert [(r["cluster"], r["running_gpus"], r["queued_gpus"]) for r in rows] == [("a", "12", "0"), ("b", "32", "2")]


def test_usage_errors(history):
    result = CliRunner().invoke(cli(), ["capacity", "--duckdb", history, "--by", "team"])
    assert result.exit_code == 2 and "group by cluster, namespace" in result.output
    result = CliRunner().invoke(cli(), ["capacity", "--duckdb", history, "--since", "2026-11-01", "--step", "1y"])
    assert result.exit_code == 2 and "not a step" in result.output
    result = CliRunner().invoke(cli(), ["capacity", "--duckdb", history, "--at", "yesterday-ish"])
    assert result.exit_code == 2 and "not a time" in result.output


def test_a_series_of_too_many_steps_is_refused_at_once_with_the_count(history):
    """`--since 1900-01-01 --step 15m` asked for ~4.4 million steps and took 6.2 GB (issue 27)."""
    import resource
    import time
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    result = CliRunner().invoke(cli(), ["capacity", "--duckdb", history, "--since", "1900-01-01",
                                        "--until", "2026-11-02", "--step", "15m"])
    assert time.perf_counter() - start < 5 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000
    # 1900-01-01 .. 2026-11-02: 46,326 days x 96 steps a day
    assert result.exit_code == 1, result.output
    assert result.output == ("error: from 1900-01-01 00:00 to 2026-11-02 00:00 in steps of 15m is 4,447,296 steps, "
                             "more than 50,000: take a larger step or a shorter window\n")
    # the allocation series and the cost reports go through the same named queries' guard
    result = CliRunner().invoke(cli(), ["capacity", "--allocation", "--duckdb", history, "--since", "1900-01-01",
                                        "--until", "2026-11-02", "--step", "15m"])
    assert result.exit_code == 1 and "4,447,296 steps, more than 50,000" in result.output
    # at the cap itself it runs: 50,000 steps of 1m from 2026-10-01
    assert run("capacity", "--duckdb", history, "--since", "2026-10-01T00:00:00Z", "--until",
               "2026-11-04T17:20:00Z", "--step", "1m", "-o", "json") is not None


def test_demo_warehouse_is_plausible(tmp_path):
    """The demo history: current demand equals the latest states, series peaks bound averages."""
    from workloadmap.cli.pipeline_commands import demo

    path = str(tmp_path / "demo.duckdb")
    result = CliRunner().invoke(demo, ["--duckdb", path, "--workloads", "30", "--days", "2"])
    assert result.exit_code == 0, result.output
    items = run("capacity", "--duckdb", path, "--by", "cluster", "-o", "json")["items"]
    conn = open_readonly(path)
    expected = dict(conn.execute("SELECT cluster, sum(gpus) FROM current_workloads GROUP BY ALL").fetchall())
    assert {i["cluster"]: i["all_gpus"] for i in items} == expected
    for i in items:
        assert i["running_gpus"] >= i["degraded_gpus"] and i["all_gpus"] >= i["running_gpus"] + i["starting_gpus"] + i["queued_gpus"]
    first, last = conn.execute("SELECT min(observed_at), max(observed_at) FROM workload_states").fetchone()
    series = run("capacity", "--duckdb", path, "--since", first.isoformat(), "--step", "6h", "-o", "json")["items"]
    assert series and all(0 <= s["avg_gpus"] <= s["peak_gpus"] for s in series)


def test_capacity_takes_the_time_grammar_of_every_command(history):
    """`--at now`, `--since 7d --until now` and `yesterday` (warehouse/values.parse_instant), as `cost` takes them.

    The history ends on 2026-11-01 (tests/analytics_history.py) with serve (cluster a) Running on 4 GPUs,
    4 CPU, 8 GiB ever since, and nothing else Running or Degraded: over the last 7 days every daily step
    of cluster a, and the whole window, average and peak at exactly that, and cluster b has no row.
    """
    assert run("capacity", "--duckdb", history, "--at", "now", "-o", "json") == \
        run("capacity", "--duckdb", history, "-o", "json")   # no change since the history's end
    before = datetime.now(timezone.utc)
    items = run("capacity", "--duckdb", history, "--since", "7d", "--until", "now", "--step", "1d", "-o", "json")["items"]
    after = datetime.now(timezone.utc)
    whole = [i for i in items if i["step"] == "window"]
    steps = [i for i in items if i["step"] == "1d"]
    assert len(steps) == 7 and [i["cluster"] for i in whole] == ["a"]
    demand = {"avg_gpus": 4, "peak_gpus": 4, "avg_cpu": 4, "peak_cpu": 4, "avg_memory_gib": 8, "peak_memory_gib": 8}
    assert all({k: i[k] for k in demand} == demand for i in steps + whole)
    start, end = (parse_instant(whole[0][k]) for k in ("start", "end"))
    assert end - start == timedelta(days=7)   # one reading of the clock for both options
    assert before - timedelta(milliseconds=1) <= end <= after
    # yesterday is a midnight (UTC); the top workloads by GPU-hours from the history's start to it
    top = run("capacity", "--duckdb", history, "--since", "2026-11-01", "--until", "yesterday", "--top", "1",
              "-o", "json")["items"]
    assert [(t["name"], t["peak_gpus"]) for t in top] == [("serve", 4)]
    # a window that ends before it starts says so, as a usage error
    result = CliRunner().invoke(cli(), ["capacity", "--duckdb", history, "--since", "7d"])
    assert result.exit_code == 2 and "the window is empty: until (2026-11-01T06:00:00Z) is not after since" \
        in result.output


def test_a_notebook_gets_the_items_the_command_prints(history):
    """capacity_report / allocation_report (warehouse/capacities.py) are the command's library: same items."""
    from workloadmap.warehouse import capacities

    at, since, until = parse_instant("2026-11-01T03:00:00Z"), parse_instant("2026-11-01"), parse_instant("2026-11-02")
    conn = open_readonly(history)
    try:
        assert capacities.capacity_report(conn, at=at, by=["cluster", "framework"]) == run(
            "capacity", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "--by", "cluster,framework",
            "-o", "json")["items"]
        assert capacities.capacity_report(conn, since=since, until=until, step="6h") == run(
            "capacity", "--duckdb", history, "--since", "2026-11-01", "--until", "2026-11-02", "--step", "6h",
            "-o", "json")["items"]
        assert capacities.capacity_report(conn, since=since, top=2) == run(
            "capacity", "--duckdb", history, "--since", "2026-11-01", "--top", "2", "-o", "json")["items"]
        assert capacities.allocation_report(conn, at=at) == run(
            "capacity", "--allocation", "--duckdb", history, "--at", "2026-11-01T03:00:00Z", "-o", "json")["items"]
        with pytest.raises(ValueError, match="at is an instant, since a window"):
            capacities.capacity_report(conn, at=at, since=since)
        with pytest.raises(ValueError, match="cannot group by team"):
            capacities.capacity_report(conn, by=["team"])
    finally:
        conn.close()
