"""The one output dialect of every command: ``-o table|wide|tree|json|yaml|csv``.

Commands hand a list of JSON-ready items and, for the human formats, a
renderer; this module prints them.  JSON and YAML are always
``{"items": [...], "count": N}`` so scripts read every command the same way.
CSV (for commands whose items are flat rows) is one header line, the keys of
the items (or `columns`), then one line per item; nested values are JSON,
None is empty.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys

import click
import yaml
from rich.console import Console
from rich.text import Text


def output_option(*formats: str, default: str):
    """The shared `-o/--output` option, restricted to the formats a command offers."""
    return click.option(
        "-o", "--output", "output", type=click.Choice(formats), default=default, show_default=True,
        help="Output format: " + ", ".join(formats) + ".",
    )


def console() -> Console:
    # markup off: a name like "x[/]" or "[blink]" is text, never rich markup (nor a MarkupError)
    return Console(soft_wrap=False, highlight=False, markup=False, width=None if sys.stdout.isatty() else 140)


# Control characters of names, labels and messages (anyone who creates a workload chooses them):
# shown, not obeyed, as kubectl shows them (ESC as ^[, CR as \r), the other C0 ones in caret
# notation and the C1 ones as \xNN.  Tab and newline stay: tables lay them out.
_TERMINAL = {c: f"^{chr(c + 64)}" for c in range(0x20) if chr(c) not in "\t\n"}
_TERMINAL.update({0x0D: "\\r", 0x7F: "^?", **{c: f"\\x{c:02x}" for c in range(0x80, 0xA0)}})


def terminal_safe(value):
    """`value` (items, or a message) with every control character in its text made visible."""
    if isinstance(value, str):
        return value.translate(_TERMINAL)
    if isinstance(value, dict):
        return {terminal_safe(k): terminal_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [terminal_safe(v) for v in value]
    return value


def _csv_cell(value):
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def _finite(value):
    """`value` with every NaN or infinite number as null, what JSON can say of it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def emit(fmt: str, items: list, *, table=None, tree=None, wide=None, columns: list[str] | None = None) -> None:
    """Print items in a format; `table`/`wide`/`tree` build rich renderables from the items
    (`wide`: kubectl's ``-o wide``, the table with more columns).

    `columns` fixes the CSV header (default: the keys of the items, in first-seen order).
    """
    if fmt == "json":
        document = {"items": items, "count": len(items)}
        try:
            text = json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
        except ValueError:  # NaN or an infinity: JSON has neither (Python would print NaN, Infinity)
            text = json.dumps(_finite(document), indent=2, ensure_ascii=False)
        click.echo(text)
    elif fmt == "yaml":
        click.echo(yaml.safe_dump({"items": items, "count": len(items)}, sort_keys=False, allow_unicode=True), nl=False)
    elif fmt in ("table", "wide"):
        renderable = (table if fmt == "table" else wide)(terminal_safe(items))
        # a Text is a table laid out already (rendering.plain_table): its rows are never wrapped
        console().print(renderable, soft_wrap=isinstance(renderable, Text))
    elif fmt == "csv":
        if columns is None:
            columns = list(dict.fromkeys(key for item in items for key in item))
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        for item in items:
            writer.writerow([_csv_cell(item.get(c)) for c in columns])
        click.echo(buffer.getvalue(), nl=False)
    elif fmt == "tree":
        out = console()
        for renderable in tree(terminal_safe(items)):
            out.print(renderable)
    else:  # pragma: no cover - click restricts the choices
        raise click.UsageError(f"unknown output format {fmt}")


# Exit statuses, the same for every command, so a script can branch on them (README: exit codes).
EXIT_OK = 0              # done; an empty result too
EXIT_FAILED = 1          # the cluster (kubeconfig, connection, 401/403) or the input could not be used
EXIT_INVALID = 1         # what was read is invalid (a definition that does not validate, an object that
                         # does not resolve): said after printing the rest
EXIT_USAGE = 2           # click's usage errors: unknown option, bad value
EXIT_NOT_FOUND = 3       # no workload of that name (or its kind is not served by the cluster)
EXIT_NO_DEFINITION = 4   # no catalog definition reads that kind
EXIT_AMBIGUOUS = 5       # a name or type that means several workloads or kinds
EXIT_INTERRUPTED = 130   # 128 + SIGINT, as shells report a command Ctrl-C stopped

# The `error` field of a machine-readable error, per exit status.
ERROR_NAMES = {EXIT_FAILED: "failed", EXIT_USAGE: "usage", EXIT_NOT_FOUND: "not_found",
               EXIT_NO_DEFINITION: "no_definition", EXIT_AMBIGUOUS: "ambiguous"}


def error(message: str) -> None:
    click.echo(f"error: {terminal_safe(str(message))}", err=True)


def fail(exc: Exception | str, code: int = EXIT_FAILED, *, output: str | None = None, hint: str | None = None,
         name: str | None = None) -> None:
    """The error on stderr, then exit status `code` (the command could not do what was asked).

    With ``-o json|yaml`` the error is also an object on stdout, ``{error, message, hint}``, so a
    script that reads stdout learns what went wrong without parsing stderr; `name` overrides the
    `error` field (``forbidden``, ``unauthorized``, ``unreachable``)."""
    message = str(exc)
    if output in ("json", "yaml"):
        document = {"error": name or ERROR_NAMES.get(code, "failed"), "message": message, "hint": hint}
        if output == "json":
            click.echo(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            click.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)
    error(message)
    sys.exit(code)


def duration(seconds: float | None) -> str:
    """Seconds as a short human duration: 45s, 12m, 3h05m, 2d04h."""
    if seconds is None:
        return ""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
