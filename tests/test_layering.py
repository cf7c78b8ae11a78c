"""The import contract: data flows one way and only the catalog is shared by all.

catalog imports nothing else of workloadmap; ingest, processors, warehouse and
the exporter (a reader of the records beside the warehouse) import only the catalog (they meet through Kafka topics and the record
format, never through each other's code); the modules of the `workloadmap`
folder compose them (the embedded pipeline, the services, their settings,
the event feed); the CLI sits on top of all of them, and `python -m
workloadmap` runs the CLI.  The contracts themselves live in `.importlinter`
(import-linter reads the source, so they hold for code no test imports); the
tests here run them, show that each one bites, and keep the two rules a
contract file cannot say: how imports are written, and what the CLI may not do.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("catalog", "cli", "exporter", "ingest", "processors", "warehouse")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path, *contracts: str) -> subprocess.CompletedProcess:
    args = [str(LINT_IMPORTS), "--no-cache", "--no-logo"]
    for contract in contracts:
        args += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(root)}   # the tree at root, not the installed package
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    """Layers, the stages' independence, jqlang's independence and third-party containment (.importlinter)."""
    run = _lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout, run.stdout


# (contract, file, line added to it): one import each contract exists to refuse
VIOLATIONS = [
    ("layers", "ingest/publishing.py", "from workloadmap.warehouse import values"),   # stage -> stage
    ("layers", "catalog/records.py", "from workloadmap import settings"),             # up the layers
    ("layers", "warehouse/querying.py", "from workloadmap.cli import outputs"),       # up to the CLI
    ("jqlang", "catalog/jqlang/values.py", "from .. import records"),
    ("duckdb", "processors/processing.py", "import duckdb"),
    ("duckdb", "cli/outputs.py", "import pyarrow"),
    ("kubernetes", "warehouse/values.py", "import kubernetes"),
    ("click", "warehouse/querying.py", "import click"),
    ("click", "workloadmap/embedding.py", "import rich"),
    ("faust", "ingest/publishing.py", "import faust"),
    ("layers", "exporter/tracking.py", "from workloadmap.warehouse import values"),    # exporter -> stage
    ("prometheus", "warehouse/writing.py", "import prometheus_client"),
    ("prometheus", "workloadmap/running.py", "from prometheus_client import Counter"),
    ("warehouse-kafka", "warehouse/writing.py", "from kafka import KafkaConsumer"),
]


@pytest.mark.parametrize("contract, path, line", VIOLATIONS, ids=[f"{c}:{p}" for c, p, _ in VIOLATIONS])
def test_each_contract_refuses_the_import_it_exists_for(tmp_path, contract, path, line):
    """A copy of the source with one forbidden import added breaks exactly the contract that forbids it."""
    for stage in STAGES:
        shutil.copytree(ROOT / stage, tmp_path / stage, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "workloadmap", tmp_path / "workloadmap", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    assert _lint_imports(tmp_path, contract).returncode == 0   # the copy keeps it before the change
    with open(tmp_path / path, "a") as f:
        f.write(f"\n{line}\n")
    run = _lint_imports(tmp_path, contract)
    assert run.returncode == 1 and "BROKEN" in run.stdout, run.stdout + run.stderr


def test_every_stage_folder_is_a_package_linked_into_workloadmap():
    """The stage folders stay at the root; workloadmap/<stage> are relative links, so a checkout imports as is."""
    for stage in STAGES:
        assert (ROOT / stage / "__init__.py").exists(), stage
        link = ROOT / "workloadmap" / stage
        assert link.is_symlink() and os.readlink(link) == f"../{stage}", f"workloadmap/{stage}"


# --------------------------------------------------------------------------- how imports are written

def _source_modules():
    """(path, dotted module name, unit) for every module; a unit is a stage or the composing modules."""
    for stage in STAGES:
        for path in sorted((ROOT / stage).rglob("*.py")):
            parts = ["workloadmap", stage, *path.relative_to(ROOT / stage).with_suffix("").parts]
            yield path, ".".join(parts[:-1] if parts[-1] == "__init__" else parts), stage
    for path in sorted((ROOT / "workloadmap").glob("*.py")):
        yield path, "workloadmap" if path.stem == "__init__" else f"workloadmap.{path.stem}", "workloadmap"


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else "workloadmap"


@pytest.mark.parametrize("unit", STAGES + ("workloadmap",))
def test_imports_are_relative_inside_a_stage_and_absolute_across(unit):
    """`from .pricing import Pricing` inside warehouse/, `from workloadmap.catalog import records` across.

    A reader sees at the import which stage a name comes from; a relative import that climbs out of
    its stage (`from ..warehouse import x`) would hide a crossing from that reader.
    """
    for path, module, own in _source_modules():
        if own != unit:
            continue
        package = module if path.stem == "__init__" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                assert _unit(target) == unit or (unit == "workloadmap" and target == "workloadmap"), (
                    f"{where}: relative import of {target} leaves {unit}: import it absolutely")
            elif isinstance(node, (ast.ImportFrom, ast.Import)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for name in names:
                    if name and name.startswith("workloadmap.") and unit != "workloadmap":
                        assert _unit(name) != unit, f"{where}: {name} is in {unit}: import it relatively"


def test_mypy_resolves_every_project_import_from_the_checkout():
    """Static tools read the package as Python does: mypy, run from the checkout, finds every module.

    Only the project's own imports are judged here; missing third-party stubs and type errors are not.
    """
    run = subprocess.run([sys.executable, "-m", "mypy", "-p", "workloadmap", "--show-error-codes"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if k != "MYPYPATH"})
    unresolved = [line for line in run.stdout.splitlines() if re.search(r'module named "workloadmap\b', line)]
    assert not unresolved, "\n".join(unresolved)
    assert "Can't find package" not in run.stdout + run.stderr, run.stdout + run.stderr
    checked = re.search(r"\bchecked (\d+) source files?\b", run.stdout)
    modules = sum(1 for _ in _source_modules())   # mypy counts the data folders as namespace packages too
    assert checked and int(checked.group(1)) >= modules, (modules, run.stdout[-500:])


# --------------------------------------------------------------------------- the command line stays thin

CLI = ROOT / "cli"
# SQL as the warehouse runs it: a query (SELECT ... FROM) or a statement that changes something
_SQL = re.compile(r"\bSELECT\b[\s\S]*\bFROM\b|^\s*(INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE|ALTER|DROP|"
                  r"COPY|ATTACH|DETACH|PRAGMA|SET \w+ ?=)\b", re.MULTILINE)


def _cli_modules() -> dict[str, Path]:
    return {p.stem: p for p in sorted(CLI.glob("*.py")) if p.stem != "__init__"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


@pytest.mark.parametrize("name", sorted(_cli_modules()))
def test_the_cli_runs_no_sql_of_its_own(name):
    """Every statement the commands run is a named query of warehouse/queries/ (or the user's own)."""
    path = _cli_modules()[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            assert not _SQL.search(node.value), f"cli/{path.name}:{node.lineno}: SQL in the CLI: {node.value[:60]!r}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in ("execute", "executemany", "sql"), (
                f"cli/{path.name}:{node.lineno}: .{node.func.attr}() in the CLI: run a named query instead")


def _cli_imports(path: Path) -> set[str]:
    """The cli modules a module imports, at the top or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                out.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif node.level == 0 and node.module and node.module.startswith("workloadmap.cli"):
                rest = node.module.split(".")[2:]
                out.update(rest[:1] or [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith("workloadmap.cli."))
    return out & set(_cli_modules())


def test_no_import_circle_among_the_cli_modules():
    """main.py imports the command modules to register them; nothing imports main or a command module back."""
    graph = {name: _cli_imports(path) for name, path in _cli_modules().items()}
    for name, targets in graph.items():
        if name != "main":
            shared = {t for t in targets if t == "main" or t.endswith("_commands")}
            assert not shared, f"cli/{name}.py imports {sorted(shared)}: shared helpers belong in a module " \
                               f"that imports no command module (catalogs, options, outputs, ...)"
    state: dict[str, str] = {}

    def visit(name, path):
        state[name] = "open"
        for target in sorted(graph[name]):
            assert state.get(target) != "open", "import circle: " + " -> ".join(path + [target])
            if target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
