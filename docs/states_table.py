"""README's table of the controller states the built-in definitions follow, from their YAML headers.

Why generated: what a framework's controller does in a given state lives beside the definition
that models it (``catalog/builtin/<name>.yaml``, its header, with the upstream sources); the
README only shows it gathered in one table, so the two cannot drift.  The suite regenerates the
table and fails when the README's differs; ``make docs`` rewrites it.

A definition lists its states in a block at the end of its header comment:

    # States handled (README "Controller states", `make docs`):
    # - Title: what workloadmap counts in that state, and why
    #   (continued on lines indented by two more spaces).

    python docs/states_table.py [README]      # default: README.md beside this folder
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILTIN = ROOT / "catalog" / "builtin"
README = ROOT / "README.md"
REGENERATE = "make docs"  # or: python docs/states_table.py
BLOCK_START = "# States handled"
BEGIN = f"<!-- states-table: generated from the headers of catalog/builtin/*.yaml by `{REGENERATE}`; do not edit -->"
END = "<!-- end of states-table -->"


def header(path: Path) -> list[str]:
    """The comment lines before the definition's first line of YAML."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def states(path: Path) -> list[tuple[str, str]]:
    """(title, text) of each state in the header's "States handled" block, in order."""
    lines = header(path)
    start = next((i for i, line in enumerate(lines) if line.startswith(BLOCK_START)), None)
    if start is None:
        return []
    items: list[list[str]] = []
    for line in lines[start + 1:]:
        if line.startswith("# - "):
            items.append([line[4:].strip()])
        elif line.startswith("#   ") and items:
            items[-1].append(line[4:].strip())
        else:
            break
    out = []
    for item in items:
        title, sep, text = " ".join(item).partition(": ")
        if not sep:
            raise ValueError(f"{path.name}: state {title!r} has no ': ' between its title and its text")
        out.append((title, text))
    return out


def render_table() -> str:
    rows = ["| definition | state | what workloadmap counts |", "|---|---|---|"]
    for path in sorted(BUILTIN.glob("*.yaml")):
        for title, text in states(path):
            cell = text.replace("|", "\\|")
            rows.append(f"| [`{path.stem}`](catalog/builtin/{path.name}) | {title} | {cell} |")
    return "\n".join(rows) + "\n"


def with_table(readme: str) -> str:
    """The README text with the table between its markers replaced by the generated one."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README.md lacks the markers of the states table ({BEGIN!r} ... {END!r})")
    before, rest = readme.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return f"{before}{BEGIN}\n{render_table()}{END}{after}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else README
    text = path.read_text(encoding="utf-8")
    path.write_text(with_table(text), encoding="utf-8")
    print(f"wrote the states table into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
