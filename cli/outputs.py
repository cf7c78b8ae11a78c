"""The one output dialect of every command: ``-o table|tree|json|yaml``.

Commands hand a list of JSON-ready items and, for the human formats, a
renderer; this module prints them.  JSON and YAML are always
``{"items": [...], "count": N}`` so scripts read every command the same way.
"""

from __future__ import annotations

import json
import sys

import click
import yaml
from rich.console import Console


def output_option(*formats: str, default: str):
    """The shared `-o/--output` option, restricted to the formats a command offers."""
    return click.option(
        "-o", "--output", "output", type=click.Choice(formats), default=default, show_default=True,
        help="Output format: " + ", ".join(formats) + ".",
    )


def console() -> Console:
    return Console(soft_wrap=False, highlight=False, width=None if sys.stdout.isatty() else 140)


def emit(fmt: str, items: list, *, table=None, tree=None) -> None:
    """Print items in a format; `table`/`tree` build rich renderables from the items."""
    if fmt == "json":
        click.echo(json.dumps({"items": items, "count": len(items)}, indent=2, ensure_ascii=False))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump({"items": items, "count": len(items)}, sort_keys=False, allow_unicode=True), nl=False)
    elif fmt == "table":
        console().print(table(items))
    elif fmt == "tree":
        out = console()
        for renderable in tree(items):
            out.print(renderable)
    else:  # pragma: no cover - click restricts the choices
        raise click.UsageError(f"unknown output format {fmt}")


def error(message: str) -> None:
    click.echo(f"error: {message}", err=True)
