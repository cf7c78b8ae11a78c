"""The native jq evaluator agrees with libjq, and every evaluation is bounded.

Differential: hypothesis draws JSON documents and the expressions below are
run by both our evaluator and libjq; outputs (or the fact of an error) must
agree.  Bounds: hostile programs end with JqLimitError, quickly.
"""

from __future__ import annotations

import os
import time

import jq as libjq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadmap.catalog import jqlang
from workloadmap.catalog.jqlang import JqLimitError, JqRuntimeError, JqSyntaxError

EXPRESSIONS = [
    ".", ".a", ".a.b", '.["a"]', '."a-b"', ".[0]", ".[-1]", ".[1:]", ".[:2]", ".[]?", "[.[]?]", ".a?",
    ".a // 1", "(.a // .b) // \"none\"", ".a and .b", ".a or .b", "(.a | not)", "[.[]? | type]",
    "length?", "keys?", "[.[]?] | length", "to_entries?", "(.a, .b)", "[.a, .b] | add?",
    "if .a then .b elif .c then 1 else 2 end", "if .a then 1 end", ".a == .b", ".a != 1", "[.a < .b, .a >= .b]",
    "(.n // 0) + 1", "(.n // 0) * 2 - 1", "(.n // 1) / 2", "((.n // 7) | floor) % 3", "-(.n // 0)",
    "[.[]? | numbers] | sort", "[.[]? | strings] | unique", "[.[]? | select(. != null)] | length",
    "try error(\"boom\") catch .", "try (.a | .b | .c) catch \"err\"", "\"x\\(.a)y\"", "{a: .a, b: [.b]}",
    "{(.s // \"k\" | tostring): 1}", ".a as $x | [$x, .b]", "reduce (.[]? | numbers) as $x (0; . + $x)",
    "[.[]? | tostring]", "[.[]? | tojson]", "map(type)?", "any(.[]?; . == 1)", "all(.[]?; . != null)",
    "[limit(2; .[]?)]", "first(.[]?)", "[.[]? | objects | keys]", "with_entries(.value |= 1)?",
    "(.s // \"\") | ascii_downcase?", "(.s // \"a,b\") | tostring | split(\",\")", "[.[]? | strings] | join(\"-\")",
    "(.s // \"\") | tostring | test(\"^a\")", "(.s // \"abc\") | tostring | ltrimstr(\"a\") | rtrimstr(\"c\")",
    "[.[]? | arrays | length]", "min?", "max?", "sort_by(type)?", "group_by(type)?", "unique_by(type)?",
    "[.[]? | iterables] | length", "has(\"a\")?", "contains({a: 1})?", "[paths]?" , "getpath([\"a\", \"b\"])?",
    ".a[]?", "[.[]?[]?]", "(.a | length?) // 0", "[.[]? | scalars]", "flatten?", "add?", "tostring",
    "[.a, .b] | map(. // 0)", "(.n // 2) | tostring | tonumber", "[.[]? | numbers | . * 2] | max",
    ".a.b?.c?", "isempty(.[]?)", "[.[]? | booleans] | any", "reverse?", "keys_unsorted?", "[.[]? | values]",
]
# `[paths]` and `with_entries(.value |= 1)` are rejected by our safety rules; skip them differentially.
SAFE = [e for e in EXPRESSIONS if "paths" not in e and "|=" not in e]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 3))
    | st.text(alphabet="abc,-_ ", max_size=6),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["a", "b", "c", "n", "s", "a-b"]), children, max_size=4),
    max_leaves=12,
)


def _libjq(expr, value):
    try:
        return ("ok", libjq.compile(expr).input_value(value).all())
    except ValueError:
        return ("error", None)


def _ours(expr, value):
    try:
        return ("ok", jqlang.compile(expr).outputs(value))
    except JqRuntimeError:
        return ("error", None)


def _normalise(result):
    kind, values = result
    if kind != "ok":
        return result
    import json
    return kind, json.loads(json.dumps(values, sort_keys=True))


@pytest.mark.parametrize("expr", SAFE)
def test_native_compiles(expr):
    assert jqlang.compile(expr).native, expr


@settings(max_examples=int(os.environ.get("JQ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, expr=st.sampled_from(SAFE))
def test_agrees_with_libjq(value, expr):
    theirs, ours = _normalise(_libjq(expr, value)), _normalise(_ours(expr, value))
    assert ours == theirs, f"{expr} on {value!r}"


@pytest.mark.parametrize("expr, reason", [
    (".a = 1", "modifying operator"), (".a |= 1", "modifying operator"), ("del(.a)", "modifies"),
    ("..", "recursive descent"), ("[range(10)]", "excessive output"), ("[paths]", "excessive output"),
    ("repeat(.)", "excessive output"), ("recurse", "excessive output"), ("walk(.)", "excessive output"),
    ("env", "environment"), ("$ENV.HOME", "process state"), ("input", "other inputs"), ("halt", "stops"),
    ("[.[] | debug]", "log"), ("until(false; .)", "without bound"), ('import "x" as x; .', "modules"),
])
def test_unsafe_constructs_are_rejected(expr, reason):
    with pytest.raises(JqSyntaxError, match=reason):
        jqlang.compile(expr)


@pytest.mark.parametrize("expr", [".a.", "[.a", "{a:}", ".a | | .b", "if . then 1", '"unterminated'])
def test_syntax_errors(expr):
    with pytest.raises(JqSyntaxError):
        jqlang.compile(expr)


def test_key_named_like_a_forbidden_function_is_fine():
    assert jqlang.compile("{range: .a}").outputs({"a": 1}) == [{"range": 1}]


@pytest.mark.parametrize("expr", [
    "[.[] | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.)] | length",
    "[.[] as $a | .[] as $b | .[] as $c | .[] as $d | .[] as $e | [$a,$b,$c,$d,$e]] | length",
    ".[0] | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .) | (. + .)",
])
def test_exploding_programs_hit_a_bound(expr):
    value = ["abcdefghij" * 10] * 60
    started = time.perf_counter()
    with pytest.raises(JqLimitError):
        jqlang.compile(expr).outputs(value)
    assert time.perf_counter() - started < 5


def test_too_many_outputs_hit_a_bound():
    with pytest.raises(JqLimitError, match="outputs"):
        jqlang.compile(".[] | (.,.,.,.)").outputs(list(range(5000)))


def test_non_terminating_program_outside_the_subset_is_killed():
    program = jqlang.compile("def f: f; f")
    assert not program.native
    started = time.perf_counter()
    with pytest.raises(JqLimitError, match="time"):
        program.outputs({})
    assert time.perf_counter() - started < 5
    # the sandbox recovers for the next program
    assert jqlang.compile("def g: .a; g").outputs({"a": 2}) == [2]


def test_limit_errors_cannot_be_caught_by_the_program():
    with pytest.raises(JqLimitError):
        jqlang.compile("try ([.[] | (.,.,.,.,.,.,.,.) | (.,.,.,.,.,.,.,.) | (.,.,.,.,.,.,.,.)] | length) catch 0").outputs(
            list(range(2000)))


def test_deeply_nested_values_are_an_error_not_a_crash():
    value = []
    for _ in range(5000):
        value = [value]
    with pytest.raises(jqlang.JqError):
        jqlang.compile("tojson").outputs(value)


def test_deeply_nested_expression_is_rejected():
    with pytest.raises(JqSyntaxError):
        jqlang.compile("(" * 200 + "." + ")" * 200)


def test_compiled_once():
    assert jqlang.compile(".spec.replicas") is jqlang.compile(".spec.replicas")
