"""The reference documents name files that exist and link to headings that exist.

Why: the READMEs point at modules, queries, tests and the CLI reference by path; files move
(tests grouped by stage, a module split in three) and a pointer that leads nowhere is the
drift a reader notices first.  The history documents (CHANGELOG.md, bench/RESULTS.md) are left
out: they name files as they were.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import docs_scripts

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_DOCS = ("README.md", "warehouse/README.md", "docs/cli-reference.md")

CODE_SPAN = re.compile(r"`([^`\n]+)`")
# a path of another repository is written owner/name:path (the ":" keeps it out)
PATH_TOKEN = re.compile(r"(?<![\w.~/$:-])([\w.-]+(?:/[\w.*-]+)+/?)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[A-Z]{3,}|<|\$")


def _exists(token: str, doc: Path) -> bool:
    for base in (ROOT, doc.parent):
        if any(base.glob(token.rstrip("/"))):
            return True
    return False


def named_paths(doc: Path) -> set[str]:
    """Paths in the document's code spans whose first folder is a folder of the repository or of the document."""
    folders = {p.name for p in ROOT.iterdir() if p.is_dir()} | {p.name for p in doc.parent.iterdir() if p.is_dir()}
    paths = set()
    for span in CODE_SPAN.findall(doc.read_text(encoding="utf-8")):
        for token in PATH_TOKEN.findall(span):
            if token.split("/", 1)[0] in folders and not PLACEHOLDER.search(token):
                paths.add(token)
    return paths


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


@pytest.mark.parametrize("name", REFERENCE_DOCS)
def test_every_path_a_reference_document_names_exists(name):
    doc = ROOT / name
    missing = sorted(p for p in named_paths(doc) if not _exists(p, doc))
    assert not missing, (f"{name} names paths that do not exist: {missing} "
                         "(a path of another repository is written owner/name:path)")


@pytest.mark.parametrize("name", REFERENCE_DOCS)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(name):
    doc = ROOT / name
    broken = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # an URL
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(target)
        elif anchor and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{name} has links that lead nowhere: {broken}"


def test_the_checks_see_paths_links_and_anchors():
    """The extraction itself, on the README: what these tests rely on finding."""
    readme = ROOT / "README.md"
    paths = named_paths(readme)
    assert {"warehouse/pricing.example.yaml", "catalog/builtin/jobset.yaml"} <= paths
    assert "nvidia.com/gpu" not in paths and "batch/v1" not in paths  # resource names and API versions
    assert "docs/catalog/" not in paths  # upstream's, written dsx-ai-factory/workload-map:docs/catalog/
    assert "docs/cli-reference.md#workloadmap-capacity" in LINK.findall(readme.read_text(encoding="utf-8"))
    assert slug("workloadmap run watchers") == "workloadmap-run-watchers"
    assert slug("`workloadmap cost`: GPU-hours and what they cost") == "workloadmap-cost-gpu-hours-and-what-they-cost"


def _states_table():
    """docs/states_table.py, the generator of the README's table of controller states."""
    return docs_scripts.load("states_table")


def test_the_readme_s_states_table_is_the_definitions_headers():
    states_table = _states_table()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if states_table.with_table(readme) != readme:
        raise AssertionError(
            f"README.md's table of controller states is not what catalog/builtin/*.yaml's headers say: "
            f"run `{states_table.REGENERATE}` (python docs/states_table.py) and commit README.md")


def test_the_states_table_reads_each_state_of_a_header_block(tmp_path, monkeypatch):
    states_table = _states_table()
    (tmp_path / "kind.yaml").write_text(
        "# Kind (example.io/v1).\n"
        "# - a fact of the header, not a state: ignored\n"
        "# States handled (README \"Controller states\", `make docs`):\n"
        "# - Paused: Counts no pods, as the\n"
        "#   controller deletes them | all.\n"
        "# - Draining: Degraded.\n"
        "#\n"
        "# - after the block: ignored\n"
        "apiVersion: workloadmap.io/v1alpha1\n", encoding="utf-8")
    monkeypatch.setattr(states_table, "BUILTIN", tmp_path)
    assert states_table.states(tmp_path / "kind.yaml") == [
        ("Paused", "Counts no pods, as the controller deletes them | all."), ("Draining", "Degraded.")]
    assert states_table.render_table().splitlines()[2:] == [
        "| [`kind`](catalog/builtin/kind.yaml) | Paused | Counts no pods, as the controller deletes them \\| all. |",
        "| [`kind`](catalog/builtin/kind.yaml) | Draining | Degraded. |"]


def test_bench_results_list_their_runs_newest_first():
    """Each entry of bench/RESULTS.md opens with `## YYYY-MM-DD [HH:MM]`; a new run goes on top."""
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    keys = []
    for heading in headings:
        m = re.match(r"## (\d{4}-\d\d-\d\d)(?: ~?(\d\d:\d\d))?", heading)
        assert m, f"bench/RESULTS.md: an entry must open with its date (## YYYY-MM-DD HH:MM · ...): {heading!r}"
        keys.append((m.group(1), m.group(2) or "00:00"))
    assert len(keys) > 20
    out_of_order = [headings[i + 1] for i in range(len(keys) - 1) if keys[i + 1] > keys[i]]
    assert not out_of_order, f"bench/RESULTS.md: newer than the entry above them: {out_of_order}"
