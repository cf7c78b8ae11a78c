"""Property tests: malformed objects and hostile definitions never crash or hang the resolver.

The resolver either returns a workload whose record is JSON, or raises one of
its clear errors (ResolveError naming definition, field and object;
UnknownKindError); definitions either load or raise DefinitionError.  Every
case finishes within a few seconds.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadmap.catalog import Catalog, DefinitionError, ObjectIndex, ResolveError, UnknownKindError, load_definition
from workloadmap.catalog.registry import bundled_examples, bundled_related

CATALOG = Catalog.builtin(lookup=ObjectIndex(bundled_related()))


EXAMPLES = bundled_examples()


def _deep(n):
    v = "x"
    for _ in range(n):
        v = [v]
    return v


WEIRD = st.sampled_from([
    None, True, 0, -1, 3.5, 10**30, "", "x", "500m", "-3", "NaN", [], {}, [None], [1, "a"], {"a": None},
    "x" * 200_000, list(range(20_000)), _deep(250), {"containers": "nope"}, [{"resources": 5}],
])


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:5]):
            yield from _paths(v, (*prefix, i))


def _mutate(obj, path, action, new):
    if not path:
        return new if action == "replace" else obj
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return obj


def _resolve_or_clear_error(obj):
    started = time.perf_counter()
    try:
        workload = CATALOG.resolve(obj)
    except (ResolveError, UnknownKindError) as exc:
        assert str(exc)
        return None
    finally:
        assert time.perf_counter() - started < 10, "resolution must be bounded"
    record = workload.to_dict()
    json.dumps(record)
    assert record["total"]["pods"] >= 0
    return record


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_malformed_objects_resolve_or_fail_clearly(data):
    obj = copy.deepcopy(data.draw(st.sampled_from(EXAMPLES)))
    for _ in range(data.draw(st.integers(1, 4))):
        paths = [p for p in _paths(obj) if len(p) >= 1 or True]
        path = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["delete", "replace"])) if path else "replace"
        obj = _mutate(obj, path, action, copy.deepcopy(data.draw(WEIRD)))
        if not isinstance(obj, dict):
            break
    _resolve_or_clear_error(obj)


RELATED = bundled_related()
TRAINJOBS = [e for e in EXAMPLES if e["kind"] == "TrainJob"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_malformed_referenced_objects_resolve_or_fail_clearly(data):
    """The object a reference names is another object of the cluster, as untrusted as the workload:
    a TrainJob resolved with a mangled runtime gets a record or a clear error, within the bounds."""
    runtime = copy.deepcopy(data.draw(st.sampled_from(RELATED)))
    for _ in range(data.draw(st.integers(1, 4))):
        # its identity stays (it is the object the TrainJob names), everything else may be anything
        paths = [p for p in _paths(runtime) if p and p[0] not in ("apiVersion", "kind", "metadata")]
        if not paths:
            break
        runtime = _mutate(runtime, data.draw(st.sampled_from(paths)), data.draw(st.sampled_from(["delete", "replace"])),
                          copy.deepcopy(data.draw(WEIRD)))
    job = copy.deepcopy(data.draw(st.sampled_from(TRAINJOBS)))
    job["spec"]["runtimeRef"] = {"name": runtime["metadata"]["name"], "kind": runtime["kind"]}
    job["metadata"]["namespace"] = runtime["metadata"].get("namespace") or job["metadata"]["namespace"]
    started = time.perf_counter()
    try:
        record = CATALOG.resolve(job, ObjectIndex([runtime])).to_dict()
    except ResolveError as exc:
        assert str(exc)
    else:
        json.dumps(record)
        assert record["total"]["pods"] >= 0
    finally:
        assert time.perf_counter() - started < 10, "resolution must be bounded"


def test_deeply_nested_object_fails_clearly():
    obj = copy.deepcopy(next(e for e in EXAMPLES if e["kind"] == "JobSet"))
    obj["status"] = {"conditions": _deep(50_000)}
    _resolve_or_clear_error(obj)


def _definition(**fields):
    """A minimal definition whose jq fields are replaced by `fields`."""
    root = {
        "name": "root",
        "kind": {"group": "example.com", "version": "v1", "kind": "Hostile"},
        "specDefinition": {"podTemplateSpecPath": fields.get("template", ".spec.template")},
        "scaleDefinition": {"replicasPath": fields.get("replicas", ".spec.replicas")},
        "statusDefinition": {
            "phaseDefinition": {"path": fields.get("phase", ".status.phase")},
            "statusMappings": {"running": [{"byExpression": {
                "expression": fields.get("expression", ".status.ok"), "expectedResult": "true"}}]},
        },
    }
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "hostile"},
            "spec": {"structureDefinition": {"rootComponent": root}}}


HOSTILE = [
    "def f: f; f",                                           # never terminates (sandboxed libjq)
    "def r: ., r; [r] | length",                              # unbounded outputs collected
    "def s: . + .; \"ab\" | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s | s",
    "[.spec.items[]? | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.) | (.,.)] | length",
    ".spec.items[]? as $a | .spec.items[]? as $b | .spec.items[]? as $c | .spec.items[]? as $d | [$a, $b, $c, $d]",
    "[limit(100000000; .spec.items[]? | (., ., ., ., ., ., ., ., ., .))] | length",
    "def fib: if . < 2 then . else (. - 1 | fib) + (. - 2 | fib) end; 40 | fib",
    "reduce .spec.items[]? as $x (\"x\"; . + . )",
    ".spec.items | tojson | tojson | tojson | tojson | tojson | tojson | tojson | tojson | tojson | tojson",
]


@pytest.mark.parametrize("expr", HOSTILE)
@pytest.mark.parametrize("field", ["template", "replicas", "phase", "expression"])
def test_hostile_jq_never_hangs(field, expr):
    obj = {"apiVersion": "example.com/v1", "kind": "Hostile", "metadata": {"name": "h", "namespace": "n"},
           "spec": {"replicas": 1, "items": ["abcdefghij" * 20] * 40,
                    "template": {"spec": {"containers": [{"name": "c"}]}}},
           "status": {"ok": True, "phase": "Running"}}
    started = time.perf_counter()
    try:
        definition = load_definition(_definition(**{field: expr}), "cluster", "cluster:hostile")
    except DefinitionError as exc:
        assert exc.problems and all(p.path for p in exc.problems)
        return
    try:
        Catalog([definition]).resolve(obj)
    except ResolveError as exc:
        assert "definition 'hostile'" in str(exc) and "Hostile n/h" in str(exc)
    assert time.perf_counter() - started < 15


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=st.text(alphabet=".[]|,()$ab?:/+*-=\"{}1 ", max_size=40))
def test_arbitrary_expressions_load_or_fail_clearly(expr):
    try:
        definition = load_definition(_definition(expression=expr), "cluster", "cluster:fuzz")
    except DefinitionError as exc:
        assert all(p.reason for p in exc.problems)
        return
    obj = {"apiVersion": "example.com/v1", "kind": "Hostile", "metadata": {"name": "h"},
           "spec": {"replicas": 1, "template": {"spec": {}}}, "status": {"ok": True, "a": [1, {"b": "c"}]}}
    try:
        Catalog([definition]).resolve(obj)
    except ResolveError:
        pass
