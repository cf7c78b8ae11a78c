"""docs/cli-reference.md is every command's --help as the code prints it (docs/cli_reference.py)."""

from __future__ import annotations

import difflib
from pathlib import Path

from tests import docs_scripts

from workloadmap.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


reference = docs_scripts.load("cli_reference")
PAGE = reference.DEFAULT_PATH


def test_the_cli_reference_is_what_the_code_prints():
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    generated = reference.render()
    if committed != generated:
        diff = "".join(list(difflib.unified_diff(
            committed.splitlines(keepends=True), generated.splitlines(keepends=True),
            "docs/cli-reference.md (committed)", "generated"))[:60])
        raise AssertionError(
            f"docs/cli-reference.md is stale: run `{reference.REGENERATE}` "
            f"(python docs/cli_reference.py) and commit it.\n{diff}")


def test_every_command_and_subcommand_has_its_section():
    page = reference.render()
    # the tree as written here: the groups and their subcommands, one section each
    expected = {"workloadmap", "workloadmap catalog", "workloadmap catalog list", "workloadmap catalog show",
                "workloadmap catalog validate", "workloadmap run", "workloadmap run processors",
                "workloadmap run warehouse", "workloadmap run watchers"}
    sections = {line[3:] for line in page.splitlines() if line.startswith("## ")}
    assert expected <= sections
    assert sections == {"workloadmap"} | {"workloadmap " + " ".join(p) for p in reference.command_paths(cli)}
    for title in sections:
        assert f"Usage: {title} " in page, f"the section of {title!r} lacks its usage line"


def test_the_page_does_not_depend_on_the_terminal_or_the_environment(monkeypatch):
    before = reference.render()
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("WORKLOADMAP_DUCKDB", "elsewhere.duckdb")
    monkeypatch.setenv("WORKLOADMAP_BOOTSTRAP_SERVERS", "kafka.example:9092")
    assert reference.render() == before
