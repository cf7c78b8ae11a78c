"""Regular expressions in definitions run in linear time and agree with libjq where RE2 can.

A pattern meets strings that whoever creates a workload controls, so a
catastrophic pattern ((a+)+$, or the innocent ^([a-z]+-?)+$ on a 31-character
label, 2^30 paths for a backtracking engine) must end within the bound of any
jq evaluation: in the evaluator, in resolve, in the processors and for a
definition read from a cluster.  What RE2 cannot do is refused with the reason
when the definition is validated, or when a computed pattern is evaluated.
"""

from __future__ import annotations

import copy
import json
import os
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.catalog.test_jqlang import _libjq
from workloadmap.catalog import jqlang, records
from workloadmap.catalog.registry import Catalog
from workloadmap.catalog.validating import load_definition, validate_document
from workloadmap.processors.processing import MemoryStates, Processor

BOUND = jqlang.LIMITS.seconds
# 30 letters then a character the class refuses: a backtracking engine tries every split
LABEL = "a" * 30 + "_"
HOSTILE = [
    ("(a+)+$", "a" * 40 + "!"),
    ("^([a-z]+-?)+$", LABEL),
    ("(a*)*b", "a" * 40),
    ("(a|aa)+$", "a" * 40 + "!"),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "a" * 40),
    ("(x+x+)+y", "x" * 40),
]


def _timed(program, value):
    # CPU time of this thread: the machine may be shared, and a backtracking engine would need
    # years of it here, not a fraction of the bound
    start = time.thread_time()
    out = program.outputs(value)
    return out, time.thread_time() - start


@pytest.mark.parametrize("pattern,subject", HOSTILE)
@pytest.mark.parametrize("template,expected", [
    ('test("{p}")', [False]),
    ('[match("{p}"; "g")]', [[]]),
    ('[capture("{p}")]', [[]]),
    ('[scan("{p}")]', [[]]),
    ('sub("{p}"; "x")', None),   # no match: the input unchanged
    ('gsub("{p}"; "x")', None),
    ('[splits("{p}")] | length', [1]),
])
def test_a_catastrophic_pattern_ends_within_the_evaluation_bound(pattern, subject, template, expected):
    program = jqlang.compile(template.replace("{p}", pattern))
    assert program.native
    out, took = _timed(program, subject)
    assert out == (expected if expected is not None else [subject])
    assert took < BOUND, f"{took:.3f}s"


def test_a_computed_catastrophic_pattern_ends_within_the_bound_too():
    program = jqlang.compile("(.p) as $p | .s | test($p)")
    out, took = _timed(program, {"p": "^([a-z]+-?)+$", "s": LABEL})
    assert out == [False] and took < BOUND


@pytest.mark.parametrize("source,reason", [
    (r'test("(a)\\1")', "backreferences are not supported"),
    (r'test("(?<x>a)\\k<x>")', "backreferences are not supported"),
    ('match("a(?=b)")', "lookahead is not supported"),
    ('match("a(?!b)")', "lookahead is not supported"),
    ('gsub("(?<=a)b"; "c")', "lookbehind is not supported"),
    ('sub("(?<!a)b"; "c"; "g")', "lookbehind is not supported"),
    ('capture("(?>a)")', "atomic groups are not supported"),
    ('split("a++"; null)', "possessive quantifiers are not supported"),
    ('[scan("(")]', "missing )"),
    ('test("a"; "q")', "q is not a valid modifier string"),
])
def test_what_re2_cannot_run_is_refused_when_compiled_with_the_reason(source, reason):
    with pytest.raises(jqlang.JqSyntaxError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        jqlang.compile(source)


def test_a_computed_pattern_re2_cannot_run_is_a_runtime_error_with_the_reason():
    with pytest.raises(jqlang.JqRuntimeError, match="backreferences are not supported"):
        jqlang.compile("(.p) as $p | .s | test($p)").outputs({"p": r"(a)\1", "s": "aa"})
    # `try` catches it like any jq error
    assert jqlang.compile('try ((.p) as $p | .s | test($p)) catch "refused"').outputs(
        {"p": "a(?=b)", "s": "ab"}) == ["refused"]
    assert jqlang.compile("(.p) as $p | .s | test($p)").outputs({"p": "a", "s": "ba"}) == [True]


def test_split_with_one_argument_is_a_plain_string_split_not_a_regex():
    # jq: split/1 splits on the literal string, so "a(" is fine there
    assert jqlang.compile('split("a(")').outputs("xa(y") == [["x", "y"]]


# -- differential: the native regex builtins against libjq (Oniguruma) ----------
REGEX_EXPRESSIONS = [
    'test("a")', 'test("^a+$")', 'test("A"; "i")', 'test("a b"; "x")', 'test(["B", "i"])',
    '[match("a+"; "g") | [.offset, .length, .string]]', '[match("(a)(b)?")]', '[match("(?<x>a)|(?<y>b)"; "g")]',
    '[match(""; "g") | .offset]', '[match("a|"; "g") | .offset]', '[match("a*"; "gn") | .string]',
    '[match("a|ab"; "l") | .string]', '[capture("(?<first>[ab])(?<rest>.*)")]', '[scan("[ab]")]',
    '[scan("(a)(-)?")]', '[scan("B"; "i")]', 'split(", *"; null)', 'split("-"; "g")', '[splits("a")]',
    '[splits("")]', 'sub("a"; "X")', 'gsub("a"; "X")', 'gsub(""; "-")', 'gsub("^"; "-")',
    'sub("(?<x>[ab])"; "<\\(.x)>")', 'gsub("(?<x>[ab])"; "<\\(.x)>")', '[gsub("(?<x>a)"; "1", "2")]',
    '[sub("(?<x>[ab])"; if .x == "a" then "1", "2" else "3" end; "g")]', 'gsub("\\\\s+"; " ")',
    'gsub("[^a-z0-9-]"; "")', 'test("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")', 'gsub("A"; "z"; "i")',
    '[match("(a)|b"; "g") | .captures]', 'test("a.b"; "p")', 'test("a$"; "s")', 'ascii_downcase | test("^ab")',
]

subjects = st.text(alphabet="aAb- ,1", max_size=8)


def _ours(expr, value):
    try:
        return ("ok", json.loads(json.dumps(jqlang.compile(expr).outputs(value))))
    except jqlang.JqRuntimeError:
        return ("error", None)


@pytest.mark.parametrize("expr", REGEX_EXPRESSIONS)
def test_every_regex_builtin_runs_natively(expr):
    assert jqlang.compile(expr).native, expr


@settings(max_examples=int(os.environ.get("JQ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(value=subjects | st.integers(0, 3) | st.none(), expr=st.sampled_from(REGEX_EXPRESSIONS))
def test_regex_builtins_agree_with_libjq(value, expr):
    assert _ours(expr, value) == _libjq(expr, value), (expr, value)


# -- through resolve, the processors and a definition read from a cluster ------
def _job_definition_testing_a_label(pattern: str, name: str = "job") -> dict:
    with open("catalog/builtin/job.yaml") as f:
        doc = yaml.safe_load(f)
    doc["metadata"] = {"name": name, "uid": f"{name}-uid", "resourceVersion": "1"}
    failed = doc["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]["statusMappings"]["failed"]
    failed.insert(0, {"byExpression": {
        "expression": f'(.metadata.labels.team // "") | test("{pattern}")', "expectedResult": "true"}})
    return doc


def _job_labelled(label: str) -> dict:
    from tests.conftest import example_objects
    job = copy.deepcopy(next(iter(example_objects("job").values())))
    job["metadata"].setdefault("labels", {})["team"] = label
    job["metadata"]["resourceVersion"] = "7"
    return job


def test_resolve_with_a_catastrophic_pattern_on_a_label_ends_within_the_bound():
    definition = load_definition(_job_definition_testing_a_label("^([a-z]+-?)+$"), "file", "hostile.yaml")
    catalog = Catalog([definition])
    catalog.resolve(_job_labelled("warm-up"))   # the definition's code is generated at its first object
    start = time.thread_time()
    resolved = catalog.resolve(_job_labelled(LABEL))
    took = time.thread_time() - start
    assert resolved.status != "Failed"  # the label does not match: the mapping does not apply
    assert took < BOUND, f"{took:.3f}s"
    # and the same pattern does apply to a label it matches
    assert catalog.resolve(_job_labelled("team-a")).status == "Failed"


def test_a_cluster_definition_with_a_catastrophic_pattern_keeps_the_processor_within_the_bound():
    processor = Processor()
    definition = _job_definition_testing_a_label("^([a-z]+-?)+$", name="lab-job")
    out = processor.process(None, records.encode(records.raw_event("lab", "ADDED", definition, "2026-11-01T00:00:00Z")),
                            MemoryStates())
    assert not out.dead_letters
    processor.process(None, records.encode(records.raw_event("lab", "ADDED", _job_labelled("warm-up"),
                                                             "2026-11-01T00:00:00Z")), MemoryStates())
    start = time.thread_time()
    out = processor.process(None, records.encode(records.raw_event("lab", "ADDED", _job_labelled(LABEL),
                                                                   "2026-11-01T00:00:00Z")), MemoryStates())
    took = time.thread_time() - start
    (record,) = [json.loads(v) for _, v in out.records]
    assert record["definition"] == "lab-job" and record["status"] != "Failed"
    assert took < BOUND, f"{took:.3f}s"


def test_a_cluster_definition_re2_cannot_run_is_dead_lettered_naming_the_field_and_reason():
    processor = Processor()
    definition = _job_definition_testing_a_label(r"^(a)\\1$", name="lab-job")
    out = processor.process(None, records.encode(records.raw_event("lab", "ADDED", definition, "2026-11-01T00:00:00Z")),
                            MemoryStates())
    (letter,) = [json.loads(v) for _, v in out.dead_letters]
    assert letter["reason"] == records.INVALID_DEFINITION
    assert "statusMappings.failed[0].byExpression.expression" in letter["detail"]
    assert "backreferences are not supported" in letter["detail"]


def test_catalog_validate_names_the_field_and_the_reason():
    problems = validate_document(_job_definition_testing_a_label("a(?=b)"), "hostile.yaml")
    (problem,) = problems
    assert problem.path.endswith("statusMappings.failed[0].byExpression.expression")
    assert "lookahead is not supported" in problem.reason
