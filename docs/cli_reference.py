"""The CLI reference: every command's ``--help``, as one Markdown page (``docs/cli-reference.md``).

Why generated: options documented by hand drift from the code; this page is the help text
itself, so it cannot (the idea of sqlite-utils' ``docs/cli-reference.rst``).  The suite
regenerates it and fails when the committed page differs; ``make docs`` rewrites it.

The output is the same on every machine: a fixed terminal width, the program name
``workloadmap``, and no ``WORKLOADMAP_*`` variable of the caller's environment (defaults a
variable would change are shown as the code sets them).

    python docs/cli_reference.py [PATH]      # default: docs/cli-reference.md, beside this script

A script beside the page, not a module of ``cli/``: it imports the command group
(``cli/main.py``), which no module of ``cli/`` may import back (tests/test_layering.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from workloadmap.cli.main import cli

WIDTH = 100  # the help's line width, fixed so the page does not depend on the terminal
DEFAULT_PATH = Path(__file__).resolve().parent / "cli-reference.md"
REGENERATE = "make docs"  # or: python docs/cli_reference.py

HEADER = f"""# CLI reference

<!-- Generated from each command's --help by `{REGENERATE}` (docs/cli_reference.py): do not edit.
     The suite fails when this page is not what the code prints. -->

Every `workloadmap` command and subcommand with its `--help`, as the code prints it. What the
commands are for, with examples and real output: [README.md](../README.md).
"""


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command under ``group`` as the words that name it, groups before their subcommands."""
    paths = []
    ctx = click.Context(group, info_name=" ".join(prefix) or "workloadmap")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = (*prefix, name)
        paths.append(path)
        if isinstance(command, click.Group):
            paths.extend(command_paths(command, path))
    return paths


def help_text(path: tuple[str, ...]) -> str:
    """The ``--help`` of one command (``()``: the top level), at the fixed width, in a clean environment."""
    clean = {name: None for name in os.environ if name.startswith("WORKLOADMAP_")}
    result = CliRunner(env=clean).invoke(cli, [*path, "--help"], prog_name="workloadmap", terminal_width=WIDTH)
    if result.exit_code != 0:
        raise RuntimeError(f"workloadmap {' '.join(path)} --help exited {result.exit_code}: {result.output}")
    return result.output.rstrip() + "\n"


def render() -> str:
    """The whole page."""
    parts = [HEADER]
    for path in [(), *command_paths(cli)]:
        title = " ".join(("workloadmap", *path))
        parts.append(f"\n## {title}\n\n```text\n{help_text(path)}```\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DEFAULT_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
