"""The import contract: data flows one way and only the catalog is shared by all.

catalog imports nothing else of workloadmap; ingest, processors and warehouse
import only the catalog (they meet through Kafka topics and the record
format, never through each other's code); the CLI sits on top of all of them.
Checked on the source with `ast`, so it holds for code no test imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "catalog": set(),
    "ingest": {"catalog"},
    "processors": {"catalog"},
    "warehouse": {"catalog"},
    "cli": {"catalog", "ingest", "processors", "warehouse"},
    "workloadmap": {"cli"},
}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer):
    for path in sorted((ROOT / layer).rglob("*.py")):
        for lineno, module in _imports(path):
            parts = module.split(".")
            if parts[0] != "workloadmap" or len(parts) < 2:
                continue
            target = parts[1]
            if target == layer or target == "__version__":
                continue
            assert target in ALLOWED[layer], (
                f"{path.relative_to(ROOT)}:{lineno} imports workloadmap.{target}; "
                f"{layer} may import only {sorted(ALLOWED[layer]) or 'nothing of workloadmap'}")


def test_every_layer_folder_is_a_package():
    for layer in ALLOWED:
        assert (ROOT / layer / "__init__.py").exists(), layer
