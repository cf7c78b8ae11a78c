"""The README's examples of `demo` and the analytics commands give what they show (issue 27 item 6).

docs/readme_examples.py runs `workloadmap demo` and then every command of those examples on the
warehouse it wrote, as a user would after `make demo`; a change that moves a figure fails here
until `make docs` rewrites the README.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tests import docs_scripts

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    return docs_scripts.load("readme_examples")


def test_the_readme_examples_show_what_the_demo_gives():
    generator = _generator()
    text = (ROOT / "README.md").read_text()
    assert len(generator._BLOCK.findall(text)) > 0
    ours = [b for b in generator._BLOCK.findall(text) if generator._commands(b)]
    assert len(ours) >= 8, "the demo's and the analytics commands' examples are found"
    current = generator.regenerate(text)
    diff = "".join(difflib.unified_diff(text.splitlines(True), current.splitlines(True), "README.md", "now", n=1))
    assert current == text, f"stale README examples (run `make docs`):\n{diff[:4000]}"


def test_the_examples_use_the_one_default_warehouse_file():
    from workloadmap.settings import DEFAULT_DUCKDB, Settings
    from workloadmap.cli.main import cli
    text = (ROOT / "README.md").read_text()
    assert "demo.duckdb" not in text and DEFAULT_DUCKDB == Settings().duckdb == "workloadmap.duckdb"
    demo = cli.commands["demo"].params
    capacity = cli.commands["capacity"].params
    default = {p.name: p.default for p in demo}["duckdb_path"]
    assert default == {p.name: p.default for p in capacity}["duckdb_path"] == DEFAULT_DUCKDB
