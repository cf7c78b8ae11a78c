"""No option value or input makes a command end in a traceback (issue 27).

Hypothesis draws invocations of the commands that read files and the warehouse (every option the
command declares, from its own parameters, so a new option is fuzzed too) with values careless or
hostile users type: empty, huge, negative, NaN, far past and future times, control characters,
markup, paths that are not there.  A command may refuse (usage error 2, error 1); it may not raise
anything else than what `workloadmap`'s main turns into one line (cli.main.UNAVAILABLE).
Kept bounded for CI: FUZZ_EXAMPLES examples (default 100), well under a minute.
"""

from __future__ import annotations

import os

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.analytics_history import build
from workloadmap.cli.main import UNAVAILABLE, cli

HOSTILE = ["", " ", "0", "-1", "1", "3", "1e309", "nan", "inf", "-inf", "99999999999d", "-99999999999d",
           "99999999999999999999999", "1900-01-01", "0001-01-01", "9999-12-31T23:59:59Z", "2026-11-01",
           "2026-11-01T03:00:00Z", "2026-13-45", "now", "yesterday", "7d", "12h", "30m", "15m", "0m", "1w",
           "1y", "x" * 300, "\x1b[31mred", "[bold]x[/]", "a,b,,", ",", "none", "cluster", "cluster,cluster",
           "namespace,framework", "workload", "day", "hour", "json", "csv", "table", "yaml", "gpus", "{}", "[",
           "../..", "/dev/null", "/", "\u00e9\u4e2d\U0001f4a5", "SELECT 1", "SELECT * FROM workload_states",
           "a=1", "=", "x=", "$x", "nvidia.com/gpu", "Running", "Failed", "Deleted", "-", "--", "--help"]
# what would wait, follow, serve or reach a broker rather than answer
SKIPPED = {"follow", "poll_interval", "idle_timeout", "metrics", "bootstrap_servers", "config", "help", "version",
           "kubeconfig", "context", "duckdb_path"}
COMMANDS = ["capacity", "cost", "wait", "query", "feed", "export", "resolve", ("catalog", "list"),
            ("catalog", "show"), ("catalog", "validate")]

# mostly the hostile list (three branches of five), else anything
values = st.one_of(st.sampled_from(HOSTILE), st.sampled_from(HOSTILE), st.sampled_from(HOSTILE), st.text(max_size=16),
                   st.integers(-10**12, 10**12).map(str) | st.floats(allow_nan=True, allow_infinity=True).map(repr))


def command_of(path):
    command = cli
    for name in (path if isinstance(path, tuple) else (path,)):
        command = command.commands[name]
    return command


@st.composite
def invocations(draw, warehouse):
    path = draw(st.sampled_from(COMMANDS))
    command = command_of(path)
    args = list(path) if isinstance(path, tuple) else [path]
    options = [p for p in command.params if isinstance(p, click.Option) and p.name not in SKIPPED]
    for option in draw(st.lists(st.sampled_from(options), max_size=3)) if options else []:
        flag = draw(st.sampled_from(option.opts))
        args += [flag] if option.is_flag or option.count else [flag, draw(values)]
    if any(p.name == "duckdb_path" for p in command.params):
        args += ["--duckdb", draw(st.sampled_from([warehouse] * 5 + ["missing.duckdb", "/dev/null"]))]
    for argument in [p for p in command.params if isinstance(p, click.Argument)]:
        if argument.required or draw(st.booleans()):
            args.append(draw(values))
    return args


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    return build(tmp_path_factory.mktemp("fuzz") / "h.duckdb")


def test_no_invocation_ends_in_a_traceback(warehouse, tmp_path):
    runner = CliRunner()

    @settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "100")), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def check(data):
        args = data.draw(invocations(str(warehouse)), label="args")
        with runner.isolated_filesystem(temp_dir=tmp_path):
            result = runner.invoke(cli, args, input="")
        exc = result.exception
        if exc is None or isinstance(exc, SystemExit) or isinstance(exc, UNAVAILABLE):
            return
        raise AssertionError(f"workloadmap {args!r} raised {type(exc).__name__}: {exc}") from exc

    check()
