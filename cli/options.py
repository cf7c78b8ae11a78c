"""Options shared by the command modules: the warehouse file (and opening it), filters, instants, settings.

A module of its own so that no command module imports another one (main.py
imports them all to register them): what two commands share lives here or in
outputs.py, never in a command module.
"""

from __future__ import annotations

import datetime as dt

import click

from workloadmap.settings import DEFAULT_DUCKDB, Settings, SettingsError, load
from workloadmap.warehouse.querying import WarehouseUnavailable, open_readonly
from workloadmap.warehouse.values import parse_instant

from .outputs import fail


class _NoNul:
    """A file name type on which a name with a NUL character is a usage error: the operating
    system's calls would raise ValueError, which click leaves as a traceback."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and "\x00" in value:
            self.fail(f"{value!r}: a file name cannot hold a NUL character", param, ctx)
        return super().convert(value, param, ctx)


class FilePath(_NoNul, click.Path):
    """A file name, as ``click.Path`` (see _NoNul)."""


class File(_NoNul, click.File):
    """An open file, as ``click.File`` (see _NoNul)."""


class Instant(click.ParamType):
    """A time option in the one grammar of ``warehouse.values.parse_instant`` (2026-11-03T10:00:00Z, now,
    yesterday, 7d, 12h ...), as a usage error when malformed."""

    name = "TIME"

    def convert(self, value, param, ctx):
        if isinstance(value, dt.datetime):
            return value
        try:
            return parse_instant(value, now=invocation_now(ctx))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def invocation_now(ctx: click.Context | None = None) -> dt.datetime:
    """"Now" for one command line: read from the clock once, so that `--since 7d --until now` and the
    end of an open interval are the same instant."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is None:
        return dt.datetime.now(dt.timezone.utc)
    return ctx.meta.setdefault("workloadmap.now", dt.datetime.now(dt.timezone.utc))


def split_values(values) -> list[str] | None:
    """Repeatable options that also take comma-separated lists; None when not given."""
    out = [v.strip() for value in values or () for v in value.split(",") if v.strip()]
    return out or None


def duckdb_option(f):
    return click.option("--duckdb", "duckdb_path", default=DEFAULT_DUCKDB, show_default=True,
                        envvar="WORKLOADMAP_DUCKDB", type=FilePath(dir_okay=False),
                        help="Warehouse file to read (a stopped warehouse or a --snapshot copy), read-only.")(f)


def connect(path, *, sandbox: bool = True):
    """The --duckdb file opened read-only (``open_readonly``), or the reason it cannot be and exit status 1."""
    try:
        return open_readonly(path, sandbox=sandbox)
    except WarehouseUnavailable as exc:
        fail(exc)


def filter_options(f):
    for decl, name, help_text in reversed([
        (("--cluster",), "clusters", "Only these clusters (repeatable, or comma-separated)."),
        (("-n", "--namespace"), "namespaces", "Only these namespaces."),
        (("--framework",), "frameworks", "Only these frameworks (as in the records: JobSet, Ray, ...)."),
        (("--kind",), "kinds", "Only these kinds (JobSet, RayCluster, ...)."),
        (("--status",), "statuses", "Only these statuses."),
    ]):
        f = click.option(*decl, name, multiple=True, help=help_text)(f)
    return f


def settings_options(f):
    """The pipeline services' options (``workloadmap.settings``); flags win over environment and config file."""
    for decl, name, help_text in reversed([
        ("--config", "config", "YAML file of settings (see README: the full mode)."),
        ("--bootstrap-servers", "bootstrap_servers", "Kafka bootstrap servers, host:port[,host:port]."),
        ("--duckdb", "duckdb", "DuckDB file of the warehouse."),
        ("--client-id", "client_id", "Kafka client id (prefix)."),
        ("--partitions", "partitions", "Partitions of topics the pipeline creates."),
        ("--security-protocol", "security_protocol", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
        ("--sasl-mechanism", "sasl_mechanism", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."),
        ("--sasl-username", "sasl_username", "SASL user (the password comes from WORKLOADMAP_SASL_PASSWORD or --config)."),
    ]):
        f = click.option(decl, name, default=None, help=help_text,
                         type=int if name == "partitions" else str)(f)
    return f


def from_options(options: dict) -> Settings:
    """The settings of a command's options (settings_options and any other setting it takes)."""
    config = options.pop("config", None)
    try:
        return load(config, options)
    except SettingsError as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from None

