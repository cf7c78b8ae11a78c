"""warehouse/README.md is the one description of the warehouse's tables: it must match the schema the code migrates to."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from workloadmap.warehouse import schema

ROOT = Path(__file__).resolve().parents[2]
WAREHOUSE_README = ROOT / "warehouse" / "README.md"
HEADING = re.compile(r"^### Tables \(schema version (\d+), `warehouse/schema\.py`\)$", re.MULTILINE)


def documented_version_and_names() -> tuple[int, set[str]]:
    """The version in the Tables heading, and every `name` in the first column of the table under it."""
    text = WAREHOUSE_README.read_text(encoding="utf-8")
    heading = HEADING.search(text)
    assert heading, "warehouse/README.md lost its heading '### Tables (schema version N, `warehouse/schema.py`)'"
    section = text[heading.end():].split("\n### ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split(" | ", 1)[0]
            names.update(re.findall(r"`([a-z_]+)`", first_cell))
    return int(heading.group(1)), names


def migrated_names() -> set[str]:
    """Every table and view of a fresh in-memory DuckDB file migrated to the latest version."""
    conn = duckdb.connect()
    try:
        schema.migrate(conn)
        tables = conn.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal").fetchall()
        views = conn.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    finally:
        conn.close()
    return {name for (name,) in tables + views}


def test_the_documented_schema_version_is_the_code_s():
    version, _ = documented_version_and_names()
    assert version == schema.LATEST_VERSION, (
        f"warehouse/README.md documents schema version {version}, the code migrates to {schema.LATEST_VERSION}: "
        "describe the new version's tables there and update the heading")


def test_every_table_and_view_of_a_migrated_file_is_described():
    _, documented = documented_version_and_names()
    missing = migrated_names() - documented
    assert not missing, f"warehouse/README.md 'Tables' does not describe: {sorted(missing)}"


def test_nothing_is_described_that_a_migrated_file_does_not_have():
    _, documented = documented_version_and_names()
    stale = documented - migrated_names()
    assert not stale, f"warehouse/README.md 'Tables' describes what the schema no longer has: {sorted(stale)}"
