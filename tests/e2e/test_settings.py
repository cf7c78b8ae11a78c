"""Settings of the pipeline services (workloadmap.settings): given over environment over file over defaults."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from workloadmap.cli.main import cli
from workloadmap.settings import Settings, SettingsError, load


def test_given_over_environment_over_file_over_defaults(tmp_path, monkeypatch):
    config = tmp_path / "settings.yaml"
    config.write_text("bootstrap-servers: file:9092\nclient_id: from-file\npartitions: 6\n"
                      "clusters: [a=ctx-a, b=ctx-b]\nsasl_password: s3cret\n")
    monkeypatch.setenv("WORKLOADMAP_CLIENT_ID", "from-env")
    monkeypatch.setenv("WORKLOADMAP_PARTITIONS", "9")
    s = load(str(config), {"partitions": 12, "duckdb": None, "clusters": ()})
    assert (s.bootstrap_servers, s.client_id, s.partitions, s.clusters) == ("file:9092", "from-env", 12, ("a=ctx-a", "b=ctx-b"))
    assert s.duckdb == Settings().duckdb
    assert s.public()["sasl_password"] == "***" and "s3cret" not in repr(s.public())
    monkeypatch.setenv("WORKLOADMAP_CLUSTERS", "x=in-cluster,y=ctx")
    assert load(None).clusters == ("x=in-cluster", "y=ctx")


@pytest.mark.parametrize("text, reason", [("[1, 2]", "expected a mapping of settings"),
                                          ("colour: blue", "unknown setting 'colour'")])
def test_a_config_file_that_is_not_one(tmp_path, text, reason):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(SettingsError, match=reason):
        load(str(config))
    with pytest.raises(SettingsError, match="No such file"):
        load(str(tmp_path / "missing.yaml"))
    # the command line shows it as a usage error of --config
    result = CliRunner().invoke(cli, ["run", "warehouse", "--config", str(config)])
    assert result.exit_code == 2 and f"Invalid value for --config: {config}: {reason}" in result.output


def test_the_writer_s_pricing_file_is_the_cost_command_s(tmp_path, monkeypatch):
    """WORKLOADMAP_PRICING (also `cost --pricing`'s variable) or `run warehouse --pricing`: the file the
    writer keeps the daily cost rows with; a broken one stops the writer before it starts, naming it."""
    from workloadmap import running
    from workloadmap.warehouse.pricing import PricingError

    good, bad = tmp_path / "prices.yaml", tmp_path / "bad.yaml"
    good.write_text("currency: EUR\ndefault:\n  gpu: {nvidia.com/gpu: 2.5}\n")
    bad.write_text("default:\n  gpu: {nvidia.com/gpu: -1}\n")
    assert running.pricing_of(load(None)) is None
    monkeypatch.setenv("WORKLOADMAP_PRICING", str(good))
    assert running.pricing_of(load(None)).gpu_price("c1", "nvidia.com/gpu") == 2.5
    with pytest.raises(PricingError, match="bad.yaml"):
        running.pricing_of(load(None, {"pricing": str(bad)}))
    monkeypatch.delenv("WORKLOADMAP_PRICING")
    result = CliRunner().invoke(cli, ["run", "warehouse", "--pricing", str(bad), "--bootstrap-servers", "127.0.0.1:1"])
    assert result.exit_code == 2 and "Invalid value for --pricing" in result.output and "bad.yaml" in result.output


def test_the_writer_s_memory_limit_is_a_setting_and_a_bad_one_stops_it_before_kafka(monkeypatch):
    """WORKLOADMAP_DUCKDB_MEMORY_LIMIT or `run warehouse --memory-limit`: DuckDB's bound in the writer
    (warehouse/writing.py limit_memory); one that is not a size is a usage error naming it, before the
    broker is asked for (none answers at 127.0.0.1:1)."""
    assert load(None).duckdb_memory_limit is None   # DuckDB's default
    monkeypatch.setenv("WORKLOADMAP_DUCKDB_MEMORY_LIMIT", "2GB")
    assert load(None).duckdb_memory_limit == "2GB"
    assert load(None, {"duckdb_memory_limit": "512MiB"}).duckdb_memory_limit == "512MiB"
    result = CliRunner().invoke(cli, ["run", "warehouse", "--memory-limit", "lots", "--bootstrap-servers", "127.0.0.1:1"])
    assert result.exit_code == 2 and "Invalid value for --memory-limit" in result.output and "'lots'" in result.output
