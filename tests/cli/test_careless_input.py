"""Careless input the command line must take calmly (issue 27 item 5).

A file name with a NUL character is a usage error, not a traceback.
Colliding definition names: a name is a definition's identity, so a later one
of equal or higher origin replaces the earlier one of that name whatever its
kind, and `catalog list` shows exactly what `resolve` uses.  What `catalog show`
prints is a definition file again.  Names carrying terminal escape sequences or
rich markup are shown, not obeyed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from workloadmap.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "catalog" / "examples"


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def widget_definition_named(name: str) -> dict:
    doc = yaml.safe_load((ROOT / "catalog" / "builtin" / "job.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["structureDefinition"]["rootComponent"]["kind"] = {"group": "example.com", "version": "v1",
                                                                   "kind": "Widget"}
    return doc


def test_a_file_definition_named_like_a_built_in_replaces_it_in_list_and_resolve_alike(tmp_path):
    path = tmp_path / "widget.yaml"
    path.write_text(yaml.safe_dump(widget_definition_named("job")))
    listed = json.loads(run("catalog", "list", "-d", str(path), "-o", "json").output)["items"]
    named_job = [(d["kind"], d["origin"]) for d in listed if d["name"] == "job"]
    assert named_job == [("Widget", "file")]
    assert not [d for d in listed if d["kind"] == "Job" and d["apiVersion"] == "batch/v1"]
    # resolve agrees: no definition resolves a batch/v1 Job any more
    result = CliRunner().invoke(cli, ["resolve", "-d", str(path), "-f", str(EXAMPLES / "job.yaml"), "-o", "json"])
    assert result.exit_code == 1 and "no definition for kind 'Job' (batch/v1)" in result.stderr
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"},
              "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
    resolved = json.loads(run("resolve", "-d", str(path), "-f", "-", "-o", "json", input=json.dumps(widget)).output)
    assert [(i["definition"], i["origin"]) for i in resolved["items"]] == [("job", "file")]


def test_two_files_with_one_name_the_later_wins_in_list_and_resolve(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump(widget_definition_named("mine")))
    doc = yaml.safe_load((ROOT / "catalog" / "builtin" / "job.yaml").read_text())
    doc["metadata"]["name"] = "mine"
    second.write_text(yaml.safe_dump(doc))
    listed = json.loads(run("catalog", "list", "-d", str(first), "-d", str(second), "-o", "json").output)["items"]
    assert [(d["kind"], d["origin"]) for d in listed if d["name"] == "mine"] == [("Job", "file")]
    assert "Widget" not in {d["kind"] for d in listed}
    resolved = json.loads(run("resolve", "-d", str(first), "-d", str(second), "-f", str(EXAMPLES / "job.yaml"),
                              "-o", "json").output)
    assert {i["definition"] for i in resolved["items"]} == {"mine"}


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_catalog_show_output_is_accepted_back_by_validate_and_d(tmp_path, fmt):
    shown = run("catalog", "show", "jobset", "-o", fmt).output
    path = tmp_path / f"jobset.{fmt}"
    path.write_text(shown)
    validated = run("catalog", "validate", str(path))
    assert validated.exit_code == 0, validated.output
    listed = json.loads(run("catalog", "list", "-d", str(path), "-o", "json").output)["items"]
    assert [(d["name"], d["origin"]) for d in listed if d["name"] == "jobset"] == [("jobset", "file")]


HOSTILE_NAME = "ok\x1b[2J\x1b]0;pwned\x07[bold]x[/]\r"


def test_escape_sequences_and_markup_in_names_are_shown_not_obeyed():
    obj = yaml.safe_load((EXAMPLES / "job.yaml").read_text().split("\n---")[0])
    obj["metadata"]["name"] = HOSTILE_NAME
    for fmt in ("table", "tree"):
        result = run("resolve", "-f", "-", "-o", fmt, input=json.dumps(obj))
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\x07" not in result.output and "\r" not in result.output
        assert "ok^[[2J^[]0;pwned^G[bold]x[/]\\r" in result.output.replace("\n", ""), fmt
    # JSON keeps the name exactly (escaped as JSON escapes it)
    assert json.loads(run("resolve", "-f", "-", "-o", "json", input=json.dumps(obj)).output)["items"][0]["name"] \
        == HOSTILE_NAME


def test_an_error_naming_a_hostile_object_is_escaped():
    obj = {"apiVersion": "example.com/v1", "kind": "Nope\x1b[31m", "metadata": {"name": "n\x1b[0m", "namespace": "x"}}
    result = CliRunner().invoke(cli, ["resolve", "-f", "-"], input=json.dumps(obj))
    assert result.exit_code == 1 and "\x1b" not in result.stderr and "Nope^[[31m" in result.stderr


@pytest.mark.parametrize("args", [
    ["resolve", "-f", "a\x00b"], ["resolve", "-d", "\x00", "--examples"], ["describe", "-f", "\x00"],
    ["query", "-f", "\x00"], ["cost", "--pricing", "x\x00"], ["export", "--parquet", "\x00"],
    ["replay", "--from-file", "\x00"],
], ids=lambda args: " ".join(a for a in args if "\x00" not in a))
def test_a_file_name_with_a_nul_character_is_a_usage_error(args):
    # the operating system's calls raise ValueError on it, which click leaves as a traceback
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "a file name cannot hold a NUL character" in result.output
