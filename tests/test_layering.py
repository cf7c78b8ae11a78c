"""The import contract: data flows one way and only the catalog is shared by all.

catalog imports nothing else of workloadmap; ingest, processors and warehouse
import only the catalog (they meet through Kafka topics and the record
format, never through each other's code); the modules of the `workloadmap`
folder compose them (the embedded pipeline, the services, their settings,
the event feed); the CLI sits on top of all of them, and `python -m
workloadmap` runs the CLI.  Checked on the source with `ast`, so it holds for
code no test imports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "catalog": set(),
    "ingest": {"catalog"},
    "processors": {"catalog"},
    "warehouse": {"catalog"},
    "workloadmap": {"catalog", "ingest", "processors", "warehouse"},   # the composing modules
    "cli": {"catalog", "ingest", "processors", "warehouse", "workloadmap"},
}
MAIN = {"cli"}   # workloadmap/__main__.py
COMPOSING = {p.stem for p in (ROOT / "workloadmap").glob("*.py")} - {"__init__", "__main__"}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "workloadmap":
            for alias in node.names:   # from workloadmap import running
                yield node.lineno, f"workloadmap.{alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer):
    for path in sorted((ROOT / layer).rglob("*.py")):
        for lineno, module in _imports(path):
            parts = module.split(".")
            if parts[0] != "workloadmap" or len(parts) < 2:
                continue
            target = "workloadmap" if parts[1] in COMPOSING else parts[1]
            if target == layer or target == "__version__":
                continue
            allowed = MAIN if path == ROOT / "workloadmap" / "__main__.py" else ALLOWED[layer]
            assert target in allowed, (
                f"{path.relative_to(ROOT)}:{lineno} imports workloadmap.{parts[1]}; "
                f"{layer} may import only {sorted(allowed) or 'nothing of workloadmap'}")


def test_every_layer_folder_is_a_package():
    for layer in ALLOWED:
        assert (ROOT / layer / "__init__.py").exists(), layer


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
