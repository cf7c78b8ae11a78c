"""`workloadmap cost` and warehouse/costing.py: hand-computed resource-hours and costs.

The warehouse is built from hand-made records (Warehouse.write with chosen
observedAt times), so every interval is known; each expectation below is
worked out by hand in the comments.  The HTML report is opened in a real
headless Chromium (Debian package `chromium`): the test fails when it is
missing unless WORKLOADMAP_NO_BROWSER=1.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections import Counter
from datetime import datetime, timedelta, timezone

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadmap.cli import cost_commands, pipeline_commands
from workloadmap.cli.cost_html import PALETTE
from workloadmap.warehouse.costing import CONSUMING as CONSUMING_STATUSES
from workloadmap.warehouse import costing
from workloadmap.warehouse.costing import consuming_statuses, row_columns
from workloadmap.warehouse.pricing import PricingError, load_pricing, parse_pricing
from workloadmap.warehouse.querying import open_readonly, run_query_arrow
from workloadmap.warehouse.values import parse_instant
from workloadmap.warehouse.writing import Warehouse

# A group of its own (the commands `workloadmap` registers), so the shared one is left as main.py builds it;
# with main.py's help options: click keeps a command's help option from the first context that asks for
# it, and docs/cli-reference.md (its test) must see -h.
cli = click.Group("workloadmap", commands=[pipeline_commands.demo],
                  context_settings={"help_option_names": ["-h", "--help"]})
cost_commands.register(cli)

GiB = 1 << 30
UTC = timezone.utc
SINCE = datetime(2026, 11, 2, tzinfo=UTC)
UNTIL = datetime(2026, 11, 4, tzinfo=UTC)
AS_OF = datetime(2026, 11, 5, tzinfo=UTC)


def cost_report(*args, **kwargs):
    """A report of the requested basis: these histories are workload records alone (no pods), billed by
    what they request while in a consuming status (allocated, the default, is test_allocation_analytics')."""
    return costing.cost_report(*args, **{"basis": costing.REQUESTED, **kwargs})


def t(day: int, hour: int) -> str:
    return f"2026-11-{day:02d}T{hour:02d}:00:00Z"


def states(uid, cluster, namespace, kind, framework, name, steps, *, gpus: dict, cpu: float, mem_gib: float):
    """Records of one workload: steps are (status, observedAt) with the same demand; 'DELETED' deletes."""
    out = []
    for i, (status, at) in enumerate(steps):
        deleted = status == "DELETED"
        out.append({
            "cluster": cluster, "uid": uid, "apiVersion": "example.io/v1", "kind": kind, "namespace": namespace,
            "name": name, "framework": framework, "definition": kind.lower(), "resourceVersion": str(100 + i),
            "status": "Completed" if deleted else status, "observedAt": at,
            "eventType": "DELETED" if deleted else ("ADDED" if i == 0 else "MODIFIED"), "deleted": deleted,
            "total": {"pods": 1, "gpu": sum(gpus.values()), "cpu": cpu, "memory": int(mem_gib * GiB),
                      "gpuResources": dict(gpus)},
        })
    return out


# The window is [11-02 00:00, 11-04 00:00); open intervals end at AS_OF (11-05 00:00).
#
# A  c1 team-a JobSet train-a, 4 nvidia.com/gpu, 8 cores, 32 GiB: Initializing 11-01 20:00, Running 22:00,
#    Completed 11-02 02:00.  In the window: Running 00:00-02:00 = 2 h -> 8 GPU-h, 16 core-h, 64 GiB-h
#    (its Initializing is before the window: 0 even with --include-initializing).
# B  c1 team-a Ray ray-b, 2 nvidia.com/mig-1g.10gb, 4 cores, 16 GiB: Initializing 11-02 10:00, Running 12:00,
#    Degraded 18:00, Running 11-03 06:00, Suspended 12:00 (open).  Consuming: 6 + 12 + 6 = 24 h -> 48 GPU-h
#    (11-02: 12 h = 24; 11-03: 12 h = 24); 96 core-h; Initializing 2 h = 4 GPU-h more when included; the
#    open Suspended interval (2 GPUs from 11-03 12:00) never counts.
# C  c2 team-b PyTorch pt-c, 8 nvidia.com/gpu, 16 cores, 64 GiB: Running 11-03 20:00, open.  Until the window
#    end: 4 h -> 32 GPU-h, 64 core-h, 256 GiB-h (with as_of 11-03 22:00: 2 h -> 16 GPU-h).
# D  c2 team-b PyTorch failed-d, 4 nvidia.com/gpu: Failed 11-02 00:00, deleted 11-03 00:00: never counts.
# E  c1 team-c JobSet long-e, 1 nvidia.com/mig-2g.20gb, 2 cores, 8 GiB: Running 11-01 00:00 .. Completed
#    11-05 00:00, across both edges: 48 h -> 48 GPU-h (24 a day), 96 core-h, 384 GiB-h.
# G  c2 team-b Kubernetes amd-g, 2 amd.com/gpu, 0 cores: Running 11-02 06:00, Completed 09:00 -> 6 GPU-h.
#
# Totals: GPU-h 8 + 48 + 32 + 48 + 6 = 142; by cluster c1 104, c2 38; by namespace team-a 56, team-b 38,
# team-c 48; by framework JobSet 56, Ray 48, PyTorch 32, Kubernetes 6; per day 11-02: 8 + 24 + 24 + 6 = 62,
# 11-03: 24 + 32 + 24 = 80.
RECORDS = (
    states("uid-a", "c1", "team-a", "JobSet", "JobSet", "train-a",
           [("Initializing", t(1, 20)), ("Running", t(1, 22)), ("Completed", t(2, 2))],
           gpus={"nvidia.com/gpu": 4}, cpu=8, mem_gib=32)
    + states("uid-b", "c1", "team-a", "RayCluster", "Ray", "ray-b",
             [("Initializing", t(2, 10)), ("Running", t(2, 12)), ("Degraded", t(2, 18)), ("Running", t(3, 6)),
              ("Suspended", t(3, 12))],
             gpus={"nvidia.com/mig-1g.10gb": 2}, cpu=4, mem_gib=16)
    + states("uid-c", "c2", "team-b", "PyTorchJob", "PyTorch", "pt-c", [("Running", t(3, 20))],
             gpus={"nvidia.com/gpu": 8}, cpu=16, mem_gib=64)
    + states("uid-d", "c2", "team-b", "PyTorchJob", "PyTorch", "failed-d",
             [("Failed", t(2, 0)), ("DELETED", t(3, 0))], gpus={"nvidia.com/gpu": 4}, cpu=8, mem_gib=8)
    + states("uid-e", "c1", "team-c", "JobSet", "JobSet", "long-e", [("Running", t(1, 0)), ("Completed", t(5, 0))],
             gpus={"nvidia.com/mig-2g.20gb": 1}, cpu=2, mem_gib=8)
    + states("uid-g", "c2", "team-b", "Deployment", "Kubernetes", "amd-g",
             [("Running", t(2, 6)), ("Completed", t(2, 9))], gpus={"amd.com/gpu": 2}, cpu=0, mem_gib=0)
)

PRICING = """
currency: EUR
default:
  gpu: {nvidia.com/gpu: 2.0, "nvidia.com/mig-*": 0.5, default: 1.0}
  cpu: 0.1
clusters:
  c2:
    gpu: {nvidia.com/gpu: 3.0}
    memory: 0.01
"""
# Costs: A c1 gpu 8 x 2.0 = 16 + cpu 16 x 0.1 = 1.6 (no memory price in c1)         = 17.60
#        B c1 mig-1g.10gb by the glob: 48 x 0.5 = 24 + cpu 96 x 0.1 = 9.6             = 33.60
#        C c2 gpu 32 x 3.0 = 96 + cpu 64 x 0.1 (default) = 6.4 + mem 256 x 0.01 = 2.56 = 104.96
#        E c1 mig-2g.20gb by the glob: 48 x 0.5 = 24 + cpu 96 x 0.1 = 9.6              = 33.60
#        G c2 amd.com/gpu: c2 has no match -> default section's `default` 1.0: 6 x 1.0 = 6.00
# total 195.76; c1 84.80, c2 110.96.


@pytest.fixture(scope="module")
def warehouse_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("cost") / "hand.duckdb"
    with Warehouse(path) as wh:
        wh.write(RECORDS)
    return path


@pytest.fixture
def conn(warehouse_path):
    c = open_readonly(warehouse_path)
    yield c
    c.close()


@pytest.fixture(scope="module")
def pricing_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pricing") / "pricing.yaml"
    path.write_text(PRICING)
    return path


def by_key(report, *dims):
    return {tuple(getattr(r, d) for d in dims): r for r in report.rows}


# --------------------------------------------------------------------------- hours and the status rule


def test_window_edges_and_default_statuses(conn):
    report = cost_report(conn, SINCE, UNTIL, by=("workload",), as_of=AS_OF)
    gpu = {r.uid: r.gpu_hours for r in report.rows}
    assert gpu == pytest.approx({"uid-a": 8, "uid-b": 48, "uid-c": 32, "uid-e": 48, "uid-g": 6})
    rows = {r.uid: r for r in report.rows}
    assert rows["uid-a"].cpu_core_hours == pytest.approx(16) and rows["uid-a"].memory_gib_hours == pytest.approx(64)
    assert rows["uid-c"].memory_gib_hours == pytest.approx(256)
    assert rows["uid-e"].cpu_core_hours == pytest.approx(96) and rows["uid-e"].memory_gib_hours == pytest.approx(384)
    assert rows["uid-b"].workload == "RayCluster/ray-b" and rows["uid-b"].namespace == "team-a"
    assert rows["uid-b"].cluster == "c1" and rows["uid-b"].framework == "Ray"
    assert report.totals().gpu_hours == pytest.approx(142)
    assert report.columns == ("cluster", "namespace", "framework", "workload")


def test_interval_crossing_the_start_counts_its_inside_part(conn):
    # A: 4 GPUs Running 11-01 22:00 -> 11-02 02:00; a window from 00:00 sees 2 h = 8 GPU-h,
    # a window from 11-01 23:00 sees 3 h = 12, one ending at 01:00 sees 1 h = 4.
    def a_hours(since, until):
        rows = cost_report(conn, since, until, by=("workload",), as_of=AS_OF).rows
        return sum(r.gpu_hours for r in rows if r.uid == "uid-a")
    assert a_hours(SINCE, UNTIL) == pytest.approx(8)
    assert a_hours(datetime(2026, 11, 1, 23, tzinfo=UTC), UNTIL) == pytest.approx(12)
    assert a_hours(SINCE, datetime(2026, 11, 2, 1, tzinfo=UTC)) == pytest.approx(4)
    assert a_hours(datetime(2026, 11, 2, 2, tzinfo=UTC), UNTIL) == 0


def test_open_interval_ends_at_as_of(conn):
    at = datetime(2026, 11, 3, 22, tzinfo=UTC)  # C opened at 20:00 with 8 GPUs: 2 h = 16 GPU-h
    rows = cost_report(conn, SINCE, UNTIL, by=("workload",), as_of=at).rows
    assert sum(r.gpu_hours for r in rows if r.uid == "uid-c") == pytest.approx(16)
    # E (closed 11-05) is not cut by as_of: only open intervals are.
    assert sum(r.gpu_hours for r in rows if r.uid == "uid-e") == pytest.approx(48)


def test_include_initializing_and_never_consuming_statuses(conn):
    assert consuming_statuses() == ("Running", "Degraded")
    assert set(consuming_statuses(True)) == {"Running", "Degraded", "Initializing", "Resuming"}
    report = cost_report(conn, SINCE, UNTIL, by=("workload",), statuses=consuming_statuses(True), as_of=AS_OF)
    gpu = {r.uid: r.gpu_hours for r in report.rows}
    # B gains its 2 h Initializing (2 GPUs); A's Initializing lies before the window; D (Failed, then
    # Deleted) and B's open Suspended interval never count.
    assert gpu == pytest.approx({"uid-a": 8, "uid-b": 52, "uid-c": 32, "uid-e": 48, "uid-g": 6})
    for status, expected in (("Suspended", 2 * 12), ("Failed", 4 * 24), ("Completed", 4 * 46 + 2 * 39)):
        # Suspended: B 11-03 12:00 -> window end (12 h x 2); Failed: D all of 11-02 (24 h x 4); Completed
        # (open): A 11-02 02:00 -> 11-04 00:00 (46 h x 4), G 11-02 09:00 -> 11-04 00:00 (39 h x 2); E's
        # Completed starts at 11-05, after the window.
        only = cost_report(conn, SINCE, UNTIL, statuses=(status,), as_of=AS_OF)
        assert only.totals().gpu_hours == pytest.approx(expected), status
    assert cost_report(conn, SINCE, UNTIL, statuses=("Deleted",), as_of=AS_OF).rows == []


def test_grouping_by_each_dimension(conn):
    def gpu(by):
        return {k: r.gpu_hours for k, r in by_key(cost_report(conn, SINCE, UNTIL, by=(by,), as_of=AS_OF), by).items()}
    assert gpu("cluster") == pytest.approx({("c1",): 104, ("c2",): 38})
    assert gpu("namespace") == pytest.approx({("team-a",): 56, ("team-b",): 38, ("team-c",): 48})
    assert gpu("framework") == pytest.approx({("JobSet",): 56, ("Ray",): 48, ("PyTorch",): 32, ("Kubernetes",): 6})
    two = cost_report(conn, SINCE, UNTIL, by=("namespace", "cluster"), as_of=AS_OF)
    assert two.columns == ("namespace", "cluster")
    assert {k: r.gpu_hours for k, r in by_key(two, "namespace", "cluster").items()} == pytest.approx(
        {("team-a", "c1"): 56, ("team-b", "c2"): 38, ("team-c", "c1"): 48})
    rows = cost_report(conn, SINCE, UNTIL, by=("cluster",), as_of=AS_OF).rows
    assert rows[0].namespace is None and rows[0].workload is None
    with pytest.raises(ValueError):
        cost_report(conn, SINCE, UNTIL, by=("kind",))


def test_step_day_and_hour(conn):
    daily = cost_report(conn, SINCE, UNTIL, by=("cluster",), step=timedelta(days=1), as_of=AS_OF)
    got = {(r.period_start.day, r.cluster): r.gpu_hours for r in daily.rows}
    # 11-02: c1 A 8 + B 24 + E 24 = 56, c2 G 6; 11-03: c1 B 24 + E 24 = 48, c2 C 32.
    assert got == pytest.approx({(2, "c1"): 56, (2, "c2"): 6, (3, "c1"): 48, (3, "c2"): 32})
    assert all(r.period_end - r.period_start == timedelta(days=1) for r in daily.rows)
    hourly = cost_report(conn, SINCE, UNTIL, step=timedelta(hours=1), as_of=AS_OF)
    per_hour = {}
    for r in hourly.rows:
        per_hour[r.period_start] = per_hour.get(r.period_start, 0) + r.gpu_hours
    # 11-02 00:00: A 4 + E 1; 12:00: B 2 + E 1; 11-03 21:00: C 8 + E 1 (B suspended at 12:00).
    assert per_hour[datetime(2026, 11, 2, 0, tzinfo=UTC)] == pytest.approx(5)
    assert per_hour[datetime(2026, 11, 2, 12, tzinfo=UTC)] == pytest.approx(3)
    assert per_hour[datetime(2026, 11, 3, 21, tzinfo=UTC)] == pytest.approx(9)
    assert sum(per_hour.values()) == pytest.approx(142)
    # Periods start at --since, and the last one is cut at --until.
    odd = cost_report(conn, datetime(2026, 11, 2, 12, tzinfo=UTC), datetime(2026, 11, 3, 18, tzinfo=UTC),
                      step=timedelta(days=1), as_of=AS_OF)
    assert [(r.period_start.hour, r.period_end - r.period_start) for r in odd.rows] == [
        (12, timedelta(days=1)), (12, timedelta(hours=6))]
    # 11-02 12:00 -> 11-03 12:00: B 24 h x 2 + E 24 = 72; 11-03 12:00 -> 18:00: E 6.
    assert [r.gpu_hours for r in odd.rows] == pytest.approx([72, 6])


# --------------------------------------------------------------------------- prices


def test_pricing_per_cluster_resource_and_default(conn):
    pricing = parse_pricing(__import__("yaml").safe_load(PRICING))
    assert pricing.gpu_price("c2", "nvidia.com/gpu") == 3.0  # the cluster's own
    assert pricing.gpu_price("c1", "nvidia.com/gpu") == 2.0  # no c1 section: the default section
    assert pricing.gpu_price("c2", "nvidia.com/mig-1g.10gb") == 0.5  # c2 has no match: default's glob
    assert pricing.gpu_price("c2", "amd.com/gpu") == 1.0  # default's default
    assert pricing.cpu_price("c2") == 0.1 and pricing.memory_price("c2") == 0.01 and pricing.memory_price("c1") is None
    report = cost_report(conn, SINCE, UNTIL, by=("workload",), pricing=pricing, as_of=AS_OF)
    cost = {r.uid: r.cost for r in report.rows}
    assert cost == pytest.approx({"uid-a": 17.6, "uid-b": 33.6, "uid-c": 104.96, "uid-e": 33.6, "uid-g": 6.0})
    c = next(r for r in report.rows if r.uid == "uid-c")
    assert (c.gpu_cost, c.cpu_cost, c.memory_cost) == pytest.approx((96, 6.4, 2.56))
    assert report.currency == "EUR" and report.unpriced == {}
    clusters = by_key(cost_report(conn, SINCE, UNTIL, pricing=pricing, as_of=AS_OF), "cluster")
    assert {k: r.cost for k, r in clusters.items()} == pytest.approx({("c1",): 84.8, ("c2",): 110.96})
    assert report.totals().cost == pytest.approx(195.76)


def test_pricing_lookup_order_and_unpriced(conn):
    pricing = parse_pricing({
        "default": {"gpu": {"nvidia.com/gpu": 2, "nvidia.com/mig-*": 0.5, "nvidia.com/mig-1g.*": 0.3}},
        "clusters": {"c1": {"gpu": {"default": 9}}, "c3": {"gpu": 4}},
    })
    assert pricing.currency == "USD"
    assert pricing.gpu_price("c1", "nvidia.com/gpu") == 9  # a cluster's default beats the default section
    assert pricing.gpu_price("c2", "nvidia.com/mig-1g.10gb") == 0.3  # the longer glob wins
    assert pricing.gpu_price("c2", "nvidia.com/mig-3g.40gb") == 0.5
    assert pricing.gpu_price("c3", "anything/gpu") == 4  # `gpu: 4` prices every resource alike
    assert pricing.gpu_price("c2", "amd.com/gpu") is None
    report = cost_report(conn, SINCE, UNTIL, pricing=pricing, as_of=AS_OF)
    assert report.unpriced == pytest.approx({("c2", "amd.com/gpu"): 6})  # G: counted, not costed
    c2 = by_key(report, "cluster")[("c2",)]
    assert c2.gpu_hours == pytest.approx(38) and c2.gpu_cost == pytest.approx(32 * 2)
    assert c2.cpu_cost == 0 and c2.memory_cost == 0  # no CPU/memory rates: not costed


@pytest.mark.parametrize("doc, message", [
    ({"currency": "EUR", "defaults": {}}, "unknown key(s) defaults"),
    ({"default": {"gpu": {"nvidia.com/gpu": -1}}}, "non-negative"),
    ({"default": {"gpus": {}}}, "unknown key(s) gpus"),
    ({"clusters": {"c1": {"cpu": "cheap"}}}, "clusters.c1.cpu"),
    ([1, 2], "expected a mapping"),
    ({"default": {"gpu": {"nvidia.com/mig-[12g.*": 1}}}, "unclosed '['"),
    ({"default": {"gpu": {"nvidia.com\\gpu": 1}}}, "no backslash"),
    # YAML's .inf and .nan (issue 27: an infinite price printed Infinity in `cost -o json`)
    ({"default": {"gpu": {"nvidia.com/gpu": float("inf")}}}, "default.gpu.nvidia.com/gpu: a price is a finite"),
    ({"clusters": {"c1": {"cpu": float("nan")}}}, "clusters.c1.cpu: a price is a finite non-negative number, not nan"),
    ({"default": {"memory": float("-inf")}}, "finite non-negative"),
])
def test_pricing_errors(doc, message):
    with pytest.raises(PricingError, match=re.escape(message)):
        parse_pricing(doc)


_KEYS = ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-*", "nvidia.com/mig-1g.*", "*gpu", "*/[a-m]*",
         "nvidia.com/mig-?g.[!1]*", "nvidia.com/*", "default")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sections=st.dictionaries(st.sampled_from(("default", "c1", "c2")),
                                st.dictionaries(st.sampled_from(_KEYS), st.sampled_from((0.5, 1.0, 2.0, 4.0)),
                                                max_size=4), max_size=3))
def test_sql_prices_as_the_pricing_lookup(conn, sections):
    """The report's SQL picks, for every (cluster, GPU resource), the price Pricing.gpu_price gives (or none)."""
    doc = {"default": {"gpu": sections.get("default", {})},
           "clusters": {c: {"gpu": g} for c, g in sections.items() if c != "default"}}
    pricing = parse_pricing(doc)
    report = cost_report(conn, SINCE, UNTIL, by=("workload",), pricing=pricing, as_of=AS_OF)
    unpriced: dict = {}
    for row in report.rows:
        expected = 0.0
        for resource, hours in row.gpu_hours_by_resource.items():
            price = pricing.gpu_price(row.cluster, resource)
            if price is None:
                unpriced[(row.cluster, resource)] = unpriced.get((row.cluster, resource), 0.0) + hours
            else:
                expected += price * hours
        assert row.gpu_cost == pytest.approx(expected), (row.workload, doc)
    assert report.unpriced == pytest.approx(unpriced)


def test_example_pricing_file_loads():
    example = load_pricing(os.path.join(os.path.dirname(__file__), "..", "..", "warehouse", "pricing.example.yaml"))
    assert example.currency == "USD"
    assert example.gpu_price("prod-us-east", "nvidia.com/gpu") == 3.10
    assert example.gpu_price("prod-eu-west", "nvidia.com/mig-1g.10gb") == 0.40
    assert example.gpu_price("prod-eu-west", "nvidia.com/mig-7g.80gb") == 0.90
    assert example.gpu_price("research", "nvidia.com/mig-1g.10gb") == 1.10
    assert example.cpu_price("research") == 0.03


# --------------------------------------------------------------------------- the command


def run_cost(warehouse_path, *args):
    # the hand-computed answers below bill the workloads' requests (these histories have no pods)
    result = CliRunner().invoke(cli, ["cost", "--duckdb", str(warehouse_path), "--since", "2026-11-02",
                                      "--until", "2026-11-04T00:00Z", "--basis", "requested", *args],
                                catch_exceptions=False)
    return result


def test_an_infinite_price_in_the_file_is_a_usage_error_naming_it(warehouse_path, tmp_path):
    path = tmp_path / "inf.yaml"
    path.write_text("currency: USD\ndefault:\n  gpu:\n    nvidia.com/gpu: .inf\n")
    result = run_cost(warehouse_path, "--pricing", str(path), "-o", "json")
    assert result.exit_code == 1 and "default.gpu.nvidia.com/gpu: a price is a finite non-negative number, not inf" \
        in result.output and "Infinity" not in result.output


def test_json_output_never_prints_nan_or_infinity():
    from workloadmap.cli.outputs import emit
    cli = click.Command("x", callback=lambda: emit("json", [{"a": float("inf"), "b": [float("nan"), 1.5]}]))
    result = CliRunner().invoke(cli, [])
    assert json.loads(result.output) == {"items": [{"a": None, "b": [None, 1.5]}], "count": 1}


def test_cli_json_shape(warehouse_path, pricing_file):
    result = run_cost(warehouse_path, "--by", "namespace", "--pricing", str(pricing_file), "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["count"] == 3 == len(doc["items"])
    first = doc["items"][0]  # sorted by cost: team-b (C 104.96 + G 6)
    assert list(first) == ["periodStart", "periodEnd", "namespace", "gpuHours", "cpuCoreHours", "memoryGiBHours",
                           "gpuHoursByResource", "gpuCost", "cpuCost", "memoryCost", "cost", "currency"]
    assert first["namespace"] == "team-b" and first["cost"] == pytest.approx(110.96)
    assert first["gpuHoursByResource"] == {"amd.com/gpu": 6.0, "nvidia.com/gpu": 32.0}
    assert first["periodStart"] == "2026-11-02T00:00:00Z" and first["periodEnd"] == "2026-11-04T00:00:00Z"
    without = json.loads(run_cost(warehouse_path, "--by", "workload", "-o", "json").output)["items"]
    assert "cost" not in without[0] and {"cluster", "namespace", "framework", "workload", "uid"} <= set(without[0])


def test_cli_csv_shape_with_step_day(warehouse_path, pricing_file):
    result = run_cost(warehouse_path, "--by", "cluster", "--step", "day", "--pricing", str(pricing_file),
                      "-o", "csv", "--include-initializing")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert list(rows[0]) == ["periodStart", "periodEnd", "cluster", "gpuHours", "cpuCoreHours", "memoryGiBHours",
                             "gpuCost", "cpuCost", "memoryCost", "cost", "currency"]
    got = {(r["periodStart"][:10], r["cluster"]): float(r["gpuHours"]) for r in rows}
    # with Initializing: B's 10:00-12:00 on 11-02 adds 4 GPU-h to c1
    assert got == pytest.approx({("2026-11-02", "c1"): 60, ("2026-11-02", "c2"): 6,
                                 ("2026-11-03", "c1"): 48, ("2026-11-03", "c2"): 32})


def test_cli_table_filters_and_errors(warehouse_path, pricing_file, tmp_path):
    result = run_cost(warehouse_path, "--by", "framework", "--cluster", "c1", "--pricing", str(pricing_file))
    assert result.exit_code == 0, result.output
    assert "JobSet" in result.output and "Ray" in result.output and "PyTorch" not in result.output
    assert re.search(r"total\s.*104\.0", result.output) and "84.80" in result.output
    bad = run_cost(warehouse_path, "--by", "kind")
    assert bad.exit_code == 2 and "choose among" in bad.output
    missing = CliRunner().invoke(cli, ["cost", "--duckdb", str(tmp_path / "none.duckdb"), "--since", "1d"])
    assert missing.exit_code == 1 and "no such warehouse file" in missing.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("default: {gpu: {nvidia.com/gpu: free}}\n")
    res = run_cost(warehouse_path, "--pricing", str(broken))
    assert res.exit_code == 1 and "non-negative number" in res.output
    partial = tmp_path / "partial.yaml"
    partial.write_text("default: {gpu: {nvidia.com/gpu: 1}}\n")
    res = CliRunner().invoke(cli, ["cost", "--duckdb", str(warehouse_path), "--since", "2026-11-02", "--until",
                                   "2026-11-04", "--basis", "requested", "--pricing", str(partial), "-o", "json"])
    assert "no price for amd.com/gpu in cluster c2" in res.stderr


def test_cli_refuses_a_warehouse_held_by_the_writer(tmp_path):
    path = tmp_path / "held.duckdb"
    code = ("import sys, time; from workloadmap.warehouse.writing import Warehouse; "
            f"w = Warehouse({str(path)!r}); print('open', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        result = CliRunner().invoke(cli, ["cost", "--duckdb", str(path), "--since", "1d"])
        assert result.exit_code == 1
        assert "held by a running writer" in result.output and "--snapshot" in result.output
    finally:
        holder.kill()
        holder.wait()


def test_time_arguments():
    now = datetime(2026, 11, 10, 12, tzinfo=UTC)
    assert parse_instant("2026-11-01", now=now) == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_instant("2026-11-01T02:00+02:00", now=now) == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_instant("7d", now=now) == datetime(2026, 11, 3, 12, tzinfo=UTC)
    assert parse_instant("-12h", now=now) == datetime(2026, 11, 10, tzinfo=UTC)
    assert parse_instant("now", now=now) == now
    assert row_columns(("framework", "workload")) == ("framework", "cluster", "namespace", "workload")


# --------------------------------------------------------------------------- plausibility on the demo


def test_demo_warehouse_plausible(tmp_path):
    path = tmp_path / "demo.duckdb"
    result = CliRunner().invoke(cli, ["demo", "--duckdb", str(path), "--clusters", "2", "--workloads", "30",
                                      "--days", "2"])
    assert result.exit_code == 0, result.output
    conn = open_readonly(path)
    try:
        since, until = datetime(2026, 11, 1, 6, tzinfo=UTC), datetime(2026, 11, 2, 18, tzinfo=UTC)
        report = cost_report(conn, since, until, by=("cluster", "namespace"), step=timedelta(hours=1), as_of=AS_OF)
        # an independent computation in Python over the raw intervals
        expected = 0.0
        for status, start, end, gpus in conn.execute(
                "SELECT status, valid_from, valid_to, gpus FROM status_intervals").fetchall():
            if status in ("Running", "Degraded"):
                end = min(end or AS_OF, until)
                start = max(start, since)
                expected += max(0.0, (end - start).total_seconds()) / 3600 * gpus
        total = report.totals().gpu_hours
        assert total > 0 and total == pytest.approx(expected)
        whole = cost_report(conn, since, until, by=("workload",), as_of=AS_OF)
        assert whole.totals().gpu_hours == pytest.approx(total)
        assert whole.totals().cpu_core_hours == pytest.approx(report.totals().cpu_core_hours)
        assert len({r.cluster for r in report.rows}) == 2
    finally:
        conn.close()


# --------------------------------------------------------------------------- the HTML report in Chromium


def chromium() -> str | None:
    found = os.environ.get("WORKLOADMAP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("WORKLOADMAP_NO_BROWSER") != "1":
        pytest.fail("chromium is not installed (apt-get install -y chromium); set WORKLOADMAP_NO_BROWSER=1 to run "
                    "without the browser checks")
    return found


def browse(browser: str, page, tmp_path, *, mode: str) -> subprocess.CompletedProcess:
    """Run headless Chromium on a local file: mode 'dom' (prints the DOM after scripts ran) or 'screenshot'."""
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
            f"--user-data-dir={tmp_path / ('profile-' + mode)}", "--enable-logging=stderr", "--v=0",
            "--window-size=1280,2000"]
    args += ["--dump-dom"] if mode == "dom" else [f"--screenshot={tmp_path / 'shot.png'}"]
    return subprocess.run(args + [page.as_uri()], capture_output=True, text=True, timeout=120)


def console_messages(stderr: str) -> list[str]:
    """What the page logged: Chromium prints console messages and uncaught errors as CONSOLE lines."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def read_png(path) -> tuple[int, int, list[bytes], int]:
    """Width, height, unfiltered rows and bytes per pixel of an 8-bit RGB(A) non-interlaced PNG (stdlib only)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat.append(chunk)
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and interlace == 0 and colour in (2, 6), header
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + (((line[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def test_chromium_harness_sees_script_errors(tmp_path):
    browser = chromium()
    if browser is None:
        return  # WORKLOADMAP_NO_BROWSER=1
    page = tmp_path / "broken.html"
    page.write_text("<html><body><p>x</p><script>null.x;</script></body></html>")
    result = browse(browser, page, tmp_path, mode="dom")
    assert any("Uncaught TypeError" in line for line in console_messages(result.stderr)), result.stderr[-2000:]


def test_html_report_renders_in_chromium(warehouse_path, pricing_file, tmp_path):
    out = tmp_path / "report.html"
    result = run_cost(warehouse_path, "--by", "namespace,cluster", "--step", "day", "--pricing", str(pricing_file),
                      "-o", "html", "--out", str(out))
    assert result.exit_code == 0 and result.output == ""
    text = out.read_text()
    # self-contained: nothing to fetch (the only URL is the SVG namespace)
    assert not re.search(r"""(src|href)\s*=|@import|url\(""", text)
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) == {"http://www.w3.org/2000/svg"}
    assert text.count("<svg") == 3 and "195.76" in text and "team-a" in text
    # stdout is the default
    again = run_cost(warehouse_path, "--by", "namespace", "-o", "html")
    assert again.output.startswith("<!DOCTYPE html>") and again.output.count("<svg") == 3

    browser = chromium()
    if browser is None:
        return  # WORKLOADMAP_NO_BROWSER=1: the checks above still ran
    dom = browse(browser, out, tmp_path, mode="dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert 'data-report="ready"' in body  # the script ran to its end
    bars = int(re.search(r'data-charts="(\d+)"', body).group(1))
    # time chart: 11-02 has 4 (ns, cluster) stacks... by first dimension namespace: 11-02 team-a, team-b,
    # team-c; 11-03 team-a, team-b, team-c = 6 rects; top workloads 5; clusters 2.
    assert bars == 6 + 5 + 2
    assert len(re.findall(r'<svg class="chart"', dom.stdout)) == 3

    shot = browse(browser, out, tmp_path, mode="screenshot")
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert console_messages(shot.stderr) == []
    width, height, rows, bpp = read_png(tmp_path / "shot.png")
    assert (width, height) == (1280, 2000)
    colours = Counter()
    for row in rows:
        colours.update(row[i:i + 3] for i in range(0, len(row), bpp))
    white = colours.get(b"\xff\xff\xff", 0)
    assert white < 0.97 * width * height, "the page is (almost) blank"
    assert len(colours) > 50
    # the charts' bar colours are on screen, each over a real area (a bar, not a stray pixel)
    for hex_colour in PALETTE[:5]:
        rgb = bytes.fromhex(hex_colour[1:])
        assert colours.get(rgb, 0) > 300, f"no {hex_colour} bars on the screenshot"


def test_cli_until_defaults_to_the_end_of_the_history(warehouse_path):
    # The last state is E's Completed at 11-05 00:00, so the window is [11-02, 11-05): 142 GPU-h as above plus
    # 11-04: C (open, 8 GPUs) 24 h = 192 and E 24 h x 1 = 24 -> 358.
    result = CliRunner().invoke(cli, ["cost", "--duckdb", str(warehouse_path), "--since", "2026-11-02",
                                      "--basis", "requested", "-o", "json"])
    assert result.exit_code == 0, result.output
    items = json.loads(result.output)["items"]
    assert sum(i["gpuHours"] for i in items) == pytest.approx(358)
    assert {i["periodEnd"] for i in items} == {"2026-11-05T00:00:00Z"}


# --------------------------------------------------------------------------- the workload plan against a reference

# Demands of the random histories: (gpus, gpu_resources, cores, GiB).  An empty map with GPUs counts them as
# 'unspecified'; odd/x has no price; one demand holds two resources; one holds no GPU.
_DEMANDS = ((4, {"nvidia.com/gpu": 4}, 8, 32), (8, {"nvidia.com/gpu": 8}, 16, 64), (2, {"nvidia.com/mig-1g.10gb": 2}, 2, 8),
            (3, {"nvidia.com/gpu": 1, "amd.com/gpu": 2}, 4, 16), (2, {}, 1, 4), (1, {"odd/x": 1}, 0.5, 2),
            (0, {}, 2, 8), (2, {"amd.com/gpu": 2}, 0, 0))
_PLAN_PRICING = {"default": {"gpu": {"nvidia.com/gpu": 2.5, "nvidia.com/mig-*": 0.75, "amd.com/gpu": 2.1,
                                     "unspecified": 1.3}, "cpu": 0.03, "memory": 0.004},
                 "clusters": {"c2": {"gpu": {"nvidia.com/gpu": 3.1}, "cpu": 0.05}}}
_T0 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def plan_warehouse(tmp_path_factory):
    with Warehouse(tmp_path_factory.mktemp("plan") / "plan.duckdb") as wh:
        yield wh


_workload = st.tuples(
    st.sampled_from(("c1", "c2")),
    st.lists(st.tuples(st.integers(0, 50 * 3600),  # seconds from the previous interval's start (0: same instant)
                       st.sampled_from(("Running", "Running", "Degraded", "Suspended", "Initializing")),
                       st.integers(0, len(_DEMANDS) - 1)), min_size=1, max_size=7),
    st.booleans())  # the last interval open


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workloads=st.lists(_workload, min_size=1, max_size=6), since_h=st.integers(0, 72), span_h=st.integers(1, 120),
       step_h=st.sampled_from((None, 1, 6, 24)), as_of_h=st.integers(0, 200), priced=st.booleans(),
       by=st.sampled_from((("workload",), ("namespace", "workload"), ("workload", "cluster"), ("framework", "workload"))),
       namespaces=st.sampled_from((None, ["team-0", "team-2"])))
def test_workload_plan_as_a_reference_and_the_general_query(plan_warehouse, workloads, since_h, span_h, step_h, as_of_h,
                                                             priced, by, namespaces):
    """cost_by_workload.sql gives the rows computed here interval by interval, period by period (within 1e-9), in
    the report's order, and the same rows as cost_report.sql: intervals sharing a period, multi-resource and
    unpriced GPUs, open intervals, windows and as_of that cut intervals, a namespace filter."""
    conn = plan_warehouse.cursor()
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("DELETE FROM interval_history")
    intervals = []  # (cluster, uid, namespace, framework, kind, name, status, valid_from, valid_to, gpus, map, cpu, GiB)
    for w, (cluster, steps, open_end) in enumerate(workloads):
        start = _T0 + timedelta(seconds=7 * w)
        ident = (cluster, f"uid-{w}", f"team-{w % 3}", ("Ray", "JobSet")[w % 2], ("RayJob", "JobSet")[w % 2], f"job-{w}")
        starts = []
        for delta, status, demand in steps:
            start += timedelta(seconds=delta)
            starts.append((start, status, demand))
        ends = [s[0] for s in starts[1:]] + [None if open_end else start + timedelta(hours=5)]
        for (begin, status, demand), end in zip(starts, ends):
            gpus, gmap, cpu, gib = _DEMANDS[demand]
            intervals.append((*ident, status, begin, end, gpus, gmap, cpu, gib))
    conn.executemany(
        "INSERT INTO interval_history (cluster, uid, api_version, kind, namespace, name, definition, framework, status, "
        "valid_from, valid_to, pods, gpus, cpu, memory, gpu_resources, from_seq) "
        "VALUES (?, ?, 'v1', ?, ?, ?, 'd', ?, ?, ?, ?, 1, ?, ?, ?, MAP(?::VARCHAR[], ?::DOUBLE[]), ?)",
        [(c, u, k, ns, n, fw, status, begin, end, gpus, cpu, int(gib * GiB), list(gmap), list(gmap.values()), i)
         for i, (c, u, ns, fw, k, n, status, begin, end, gpus, gmap, cpu, gib) in enumerate(intervals)])
    since = _T0 + timedelta(hours=since_h)
    until = since + timedelta(hours=span_h)
    as_of = _T0 + timedelta(hours=as_of_h)
    step = None if step_h is None else timedelta(hours=step_h)
    pricing = parse_pricing(_PLAN_PRICING) if priced else None

    report = cost_report(conn, since, until, by=by, step=step, pricing=pricing, as_of=as_of, namespaces=namespaces)

    # The reference: each consuming interval's part in the window, split at the periods.
    length = (step or (until - since)).total_seconds()
    expected: dict = {}
    for c, u, ns, fw, k, n, status, begin, end, gpus, gmap, cpu, gib in intervals:
        s0, s1 = max(begin, since), min(end or as_of, until)
        if status not in ("Running", "Degraded") or s1 <= s0 or not (gpus > 0 or cpu > 0 or gib > 0) or (
                namespaces is not None and ns not in namespaces):
            continue
        gmap = gmap or ({"unspecified": gpus} if gpus > 0 else {})
        p = int((s0 - since).total_seconds() // length)
        while since + timedelta(seconds=p * length) < s1:
            p0 = since + timedelta(seconds=p * length)
            seconds = (min(s1, p0 + timedelta(seconds=length)) - max(s0, p0)).total_seconds()
            row = expected.setdefault((p0, c, u), {"namespace": ns, "framework": fw, "workload": f"{k}/{n}", "map": {},
                                                   "gpu": 0.0, "cpu": 0.0, "mem": 0.0, "gc": 0.0, "cc": 0.0, "mc": 0.0})
            for resource, g in gmap.items():
                row["map"][resource] = row["map"].get(resource, 0.0) + g * seconds / 3600
                row["gpu"] += g * seconds / 3600
                row["gc"] += g * seconds / 3600 * ((pricing and pricing.gpu_price(c, resource)) or 0.0)
            row["cpu"] += cpu * seconds / 3600
            row["mem"] += gib * seconds / 3600
            row["cc"] += cpu * seconds / 3600 * ((pricing and pricing.cpu_price(c)) or 0.0)
            row["mc"] += gib * seconds / 3600 * ((pricing and pricing.memory_price(c)) or 0.0)
            p += 1

    rows = report.rows
    assert {(r.period_start, r.cluster, r.uid) for r in rows} == set(expected)
    assert len(rows) == len(expected)
    close = dict(rel=1e-9, abs=1e-9)
    for r in rows:
        e = expected[(r.period_start, r.cluster, r.uid)]
        assert (r.namespace, r.framework, r.workload) == (e["namespace"], e["framework"], e["workload"])
        assert r.gpu_hours == pytest.approx(e["gpu"], **close)
        assert r.gpu_hours_by_resource == pytest.approx(e["map"], **close)
        assert (r.cpu_core_hours, r.memory_gib_hours) == pytest.approx((e["cpu"], e["mem"]), **close)
        if pricing is None:
            assert (r.gpu_cost, r.cpu_cost, r.memory_cost, r.cost) == (None, None, None, None)
        else:
            assert (r.gpu_cost, r.cpu_cost, r.memory_cost) == pytest.approx((e["gc"], e["cc"], e["mc"]), **close)
    # The report's order: period, the largest cost (GPU-hours without prices), GPU-hours, the group's columns, uid.
    columns = report.columns

    def order(r):
        return (r.period_start, -(r.cost if pricing else r.gpu_hours), -r.gpu_hours,
                *(getattr(r, d) or "" for d in columns), r.uid)
    assert [order(r) for r in rows] == sorted(order(r) for r in rows)
    unpriced: dict = {}
    for (p0, c, u), e in expected.items():
        for resource, hours in e["map"].items():
            if pricing is not None and pricing.gpu_price(c, resource) is None:
                unpriced[(c, resource)] = unpriced.get((c, resource), 0.0) + hours
    assert report.unpriced == pytest.approx(unpriced, **close)

    # The general query gives the same rows, in the same order (values equal within 1e-9).
    general = run_query_arrow(
        conn, "cost_report", since=since, until=until, as_of=as_of, step=step, statuses=list(CONSUMING_STATUSES),
        by=list(columns), namespaces=namespaces, gpu_prices=None if pricing is None else pricing.gpu_rules(),
        rates=None if pricing is None else pricing.rate_rows()).to_pylist()
    mine = report.table.to_pylist()
    assert [(g["period_start"], g["cluster"], g["uid"]) for g in general] == \
           [(m["period_start"], m["cluster"], m["uid"]) for m in mine]
    numbers = ("gpu_hours", "cpu_core_hours", "memory_gib_hours", "gpu_cost", "cpu_cost", "memory_cost", "cost")
    for g, m in zip(general, mine):
        assert g.pop("role") is None   # (the general query's column for roles: pods only)
        assert {k: v for k, v in m.items() if k not in (*numbers, "gpu_hours_by_resource", "unpriced")} == \
               {k: v for k, v in g.items() if k not in (*numbers, "gpu_hours_by_resource", "unpriced")}
        assert [m[k] is None for k in numbers] == [g[k] is None for k in numbers]
        assert [m[k] for k in numbers if g[k] is not None] == pytest.approx(
            [g[k] for k in numbers if g[k] is not None], **close)
        assert dict(m["gpu_hours_by_resource"]) == pytest.approx(dict(g["gpu_hours_by_resource"]), **close)
        assert (m["unpriced"] is None) == (g["unpriced"] is None)
        hours = {(e["cluster"], e["resource"]): e["hours"] for e in m["unpriced"] or []}
        assert hours == pytest.approx({(e["cluster"], e["resource"]): e["hours"] for e in g["unpriced"] or []}, **close)
