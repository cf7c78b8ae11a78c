"""Differential tests: the generated resolver against the reference resolver.

`Resolver.resolve` runs a definition's generated code (catalog/compiling.py,
catalog/jqlang/generating.py); `Resolver.reference` walks the definition's
model.  On every bundled example, every golden pod, hypothesis-mutated objects
and hypothesis-generated jq programs and definitions, both must give identical
records (status, statuses, phase, conditions, components, pod templates,
resources) or identical errors.  And the generated code must really run:
on the bundled examples it never hands an object back to the reference.
"""

from __future__ import annotations

import ast
import copy
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadmap.catalog import Catalog, ObjectIndex, Resolver, load_definition
from workloadmap.catalog.jqlang import compile as jq_compile
from workloadmap.catalog.jqlang import JqError
from workloadmap.catalog.jqlang.generating import Bail, Generator, build_function
from workloadmap.catalog.jqlang.errors import Unsupported
from workloadmap.catalog.registry import bundled_examples, bundled_related

CATALOG = Catalog.builtin()
EXAMPLES = bundled_examples()
GOLDEN_PODS = [case_pod["pod"]
               for path in sorted(Path(__file__).parents[1].joinpath("golden").glob("*.yaml"))
               for case in yaml.safe_load(path.read_text())["cases"]
               for case_pod in case.get("pods") or []]


def _outcome(fn, obj, definition, lookup=None):
    try:
        resolved = fn(obj, definition, lookup)
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return ("error", type(exc).__name__, str(exc))
    return ("ok", resolved, resolved.to_dict())


def _same(obj, definition, resolver=None, lookup=None):
    resolver = resolver or Resolver()
    fast = _outcome(resolver.resolve, obj, definition, lookup)
    reference = _outcome(resolver.reference, obj, definition, lookup)
    assert fast[0] == reference[0], (fast, reference)
    if fast[0] == "ok":
        assert fast[2] == reference[2]
        assert fast[1] == reference[1]  # the whole dataclass: pod templates and labels too
    else:
        assert fast == reference
    return fast


class _NoReference(Resolver):
    def reference(self, obj, definition, lookup=None):
        raise AssertionError(f"the generated code left {obj.get('kind')} {obj['metadata'].get('name')} aside")


@pytest.mark.parametrize("obj", EXAMPLES, ids=[f"{o['kind']}/{o['metadata']['name']}" for o in EXAMPLES])
def test_bundled_examples_resolve_identically(obj):
    definition = CATALOG.definition_for(obj)
    assert _same(obj, definition)[0] == "ok"


# the objects the examples' references name (the TrainJobs' runtimes), as `resolve -f` has them
RELATED = ObjectIndex(bundled_related())
REFERRING = [o for o in EXAMPLES if CATALOG.definition_for(o).references]


@pytest.mark.parametrize("obj", REFERRING, ids=[f"{o['kind']}/{o['metadata']['name']}" for o in REFERRING])
def test_examples_with_references_resolve_identically_with_their_objects_at_hand(obj):
    assert _same(obj, CATALOG.definition_for(obj), lookup=RELATED)[0] == "ok"


def test_the_examples_references_find_the_runtimes_at_hand():
    """The examples name torch-distributed (a ClusterTrainingRuntime, the default kind) and
    deepspeed-zero3 (a TrainingRuntime), both in examples/related; mnist-quick names
    torch-distributed-gpu, which is not there (it resolves without pods)."""
    found = {(ref["kind"], ref["objectName"]): ref["found"] for obj in REFERRING
             for ref in Resolver().resolve(obj, CATALOG.definition_for(obj), RELATED).to_dict()["references"]}
    assert found == {("ClusterTrainingRuntime", "torch-distributed"): True,
                     ("TrainingRuntime", "deepspeed-zero3"): True,
                     ("ClusterTrainingRuntime", "torch-distributed-gpu"): False}


@pytest.mark.parametrize("obj", EXAMPLES, ids=[f"{o['kind']}/{o['metadata']['name']}" for o in EXAMPLES])
def test_generated_code_resolves_every_example_itself(obj):
    """References included: a definition that reads other objects reads them in its generated
    code too, from [object, referenced objects...] as the reference evaluation does."""
    definition = CATALOG.definition_for(obj)
    resolved = _NoReference().resolve(obj, definition, RELATED)
    assert resolved.to_dict() == Resolver().reference(obj, definition, RELATED).to_dict()


def test_golden_pods_resolve_identically():
    assert GOLDEN_PODS
    for pod in GOLDEN_PODS:
        assert _same(pod, CATALOG.definition_for(pod))[0] == "ok"


def test_cached_components_are_the_same_through_both_paths():
    resolver = Resolver(cache_size=1000)
    for obj in EXAMPLES:
        definition = CATALOG.definition_for(obj)
        first = resolver.resolve(obj, definition).to_dict()
        update = dict(obj, metadata=dict(obj["metadata"], resourceVersion="999", generation=7))
        assert resolver.resolve(update, definition).to_dict() == resolver.reference(update, definition).to_dict()
        assert first["components"] == resolver.resolve(update, definition).to_dict()["components"]


# -- mutated objects ------------------------------------------------------------------------------
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**33), st.floats(allow_nan=True),
                    st.sampled_from(["", "x", "500m", "2", "-3", "True", "Running", "Failed", "cluster", "1Gi"]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "name", "replicas", "type", "status",
                                                                  "resources", "spec", "requests"]),
                                                 inner, max_size=3)), max_leaves=6)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _mutate(obj, path, action, value):
    parent = obj
    for step in path[:-1]:
        parent = parent[step]
    key = path[-1]
    if action == "delete" and isinstance(parent, dict):
        del parent[key]
    elif action == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))
    else:
        parent[key] = value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_objects_resolve_identically(data):
    obj = copy.deepcopy(data.draw(st.sampled_from(EXAMPLES)))
    for _ in range(data.draw(st.integers(1, 4))):
        paths = [p for p in _paths(obj) if p and p[0] not in ("apiVersion", "kind")]
        path = data.draw(st.sampled_from(paths))
        _mutate(obj, path, data.draw(st.sampled_from(["replace", "delete", "duplicate"])), data.draw(JSON))
    _same(obj, CATALOG.definition_for(obj))


# -- generated programs ---------------------------------------------------------------------------
FIELDS = ["a", "b", "items", "name", "replicas", "phase", "conditions", "type", "status"]
ATOMS = st.one_of(
    st.builds(lambda f: f".{f}", st.sampled_from(FIELDS)),
    st.builds(lambda f, g: f".{f}.{g}", st.sampled_from(FIELDS), st.sampled_from(FIELDS)),
    st.sampled_from([".", "null", "true", "false", "0", "1", "2.5", "-1", '"x"', '"Running"', "[]", "{}",
                     ".items[]", ".items[]?", ".[]?", ".a?", '.["a"]', ".items[0]", ".items[1:]", "$v",
                     "length", "tostring", "not", "add", "first", "last", "to_entries", "type", "keys",
                     "empty", "tonumber", "floor", "ascii_downcase"]),
)


def _programs():
    def extend(inner):
        return st.one_of(
            st.builds(lambda a, b: f"({a}) | ({b})", inner, inner),
            st.builds(lambda a, b: f"({a}) , ({b})", inner, inner),
            st.builds(lambda a, b: f"({a}) // ({b})", inner, inner),
            st.builds(lambda a, b, op: f"({a}) {op} ({b})", inner, inner,
                      st.sampled_from(["and", "or", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"])),
            st.builds(lambda a, b, c: f"if ({a}) then ({b}) else ({c}) end", inner, inner, inner),
            st.builds(lambda a, b: f"if ({a}) then ({b}) end", inner, inner),
            st.builds(lambda a, b: f"({a}) as $v | ({b})", inner, inner),
            st.builds(lambda a: f"[{a}]", inner),
            st.builds(lambda a, b: f"{{name: ({a}), b: ({b})}}", inner, inner),
            st.builds(lambda a: f"select({a})", inner),
            st.builds(lambda a: f"map({a})", inner),
            st.builds(lambda a: f"any({a})", inner),
            st.builds(lambda a: f"all({a})", inner),
            st.builds(lambda a: f"-({a})", inner),
            st.builds(lambda a: f'"n-\\({a})"', inner),
            st.builds(lambda a: f"({a}) | length", inner),
            st.builds(lambda a, b: f"({a}) | test({b})", inner, st.sampled_from(['"^R"', '"a"', '"x"'])),
            st.builds(lambda a, b: f"({a}) | startswith({b})", inner, st.sampled_from(['"R"', '"a"'])),
            st.builds(lambda a: f"({a}) | split(\"-\")", inner),
            st.builds(lambda a: f"({a}) | tonumber?", inner),
            st.builds(lambda a, b: f"({a})? // ({b})", inner, inner),
            st.builds(lambda a, b: f"try ({a}) catch ({b})", inner, inner),
        )
    return st.recursive(ATOMS, extend, max_leaves=6)


PROGRAMS = _programs()


PROGRAM_INPUTS = st.fixed_dictionaries({}, optional={
    f: JSON for f in FIELDS
}).map(lambda d: dict(d, items=d.get("items", [{"name": "w", "replicas": 2}, {"name": "x"}, 3])))


def _program_outcome(fn, value):
    try:
        return ("ok", fn(value))
    except (JqError, RecursionError) as exc:
        return ("error", type(exc).__name__)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=PROGRAMS, value=PROGRAM_INPUTS)
def test_generated_programs_compute_what_the_closures_compute(source, value):
    try:
        program = jq_compile(source)
    except JqError:
        return
    namespace: dict = {}
    gen = Generator(namespace)
    try:
        code = gen.program(program)
    except Unsupported:
        return
    result = code.value if not code.one else ast.List(elts=[code.value], ctx=ast.Load())
    fn = build_function("program", ["obj"], gen.prologue() + code.stmts + [ast.Return(value=result)], namespace)
    expected = _program_outcome(program.outputs, value)
    try:
        got = fn(value)
    except Bail:
        return  # left to the reference evaluation: always exact
    except (JqError, RecursionError):
        assert expected[0] == "error", source   # an error of jq's: the reference fails as well
        return
    assert expected == ("ok", got), source
    assert repr(expected[1]) == repr(got), source   # 1 and 1.0, True and 1 told apart


@pytest.mark.parametrize(("source", "expected"), [
    # jq's truthiness: everything but null and false is true, 0 and "" included (jq manual, "if-then-else")
    ("select(0)", [{"a": 0}]),
    ("if 0 then 1 else 2 end", [1]),
    ('if "" then 1 end', [1]),
    ('"" // 1', [""]),
    ("null // 1", [1]),
    ("0 and .a", [True]),
    ("0 and null", [False]),
    ('"x" or .a', [True]),
    ("false or 0", [True]),
    ("[.a, 3] | map(select(1))", [[0, 3]]),
])
def test_literals_tested_for_truth_compile_without_a_python_warning(source, expected):
    """A literal's truthiness is decided while generating: `0 is not None` in generated code
    would be an identity test on a literal, which Python's compiler warns about (SyntaxWarning)
    each time a definition is compiled."""
    program = jq_compile(source)
    namespace: dict = {}
    gen = Generator(namespace)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = gen.program(program)
        result = code.value if not code.one else ast.List(elts=[code.value], ctx=ast.Load())
        fn = build_function("program", ["obj"], gen.prologue() + code.stmts + [ast.Return(value=result)], namespace)
    assert fn({"a": 0}) == expected == program.outputs({"a": 0})


# -- generated definitions ------------------------------------------------------------------------
def _definition(template, replicas, phase, expression, instances):
    child = {"name": "worker", "ownerRef": "root", "instanceIdPath": instances,
             "specDefinition": {"podTemplateSpecPath": template},
             "scaleDefinition": {"replicasPath": replicas}}
    root = {
        "name": "root",
        "kind": {"group": "example.com", "version": "v1", "kind": "Generated"},
        "statusDefinition": {
            "phaseDefinition": {"path": phase},
            "conditionsDefinition": {"path": ".status.conditions"},
            "statusMappings": {
                "running": [{"byExpression": {"expression": expression, "expectedResult": "true"}},
                            {"byConditions": [{"type": "Ready", "status": "True"}]}],
                "failed": [{"byPhase": "Failed"}],
                "initializing": [{"byPhase": "Pending", "byConditions": [{"type": "Ready", "status": "False"}]}],
            },
        },
    }
    return {"apiVersion": "workloadmap.io/v1alpha1", "kind": "WorkloadMap", "metadata": {"name": "generated"},
            "spec": {"structureDefinition": {"rootComponent": root, "childComponents": [child]}}}


OBJECTS = st.builds(
    lambda spec, status: {"apiVersion": "example.com/v1", "kind": "Generated",
                          "metadata": {"name": "g", "namespace": "n", "uid": "u", "generation": 1},
                          "spec": spec, "status": status},
    st.fixed_dictionaries({"items": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["a", "b", 1]), "replicas": st.one_of(st.integers(0, 4), JSON), "template": st.sampled_from([{"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": 2, "cpu": "500m"}}}]}}, {}, None])}), max_size=3)}, optional={"a": JSON, "replicas": JSON}),
    st.fixed_dictionaries({}, optional={"phase": st.sampled_from(["Running", "Failed", "Pending", 3, None]),
                                        "conditions": st.one_of(JSON, st.lists(st.fixed_dictionaries(
                                            {"type": st.sampled_from(["Ready", "Other"]),
                                             "status": st.sampled_from(["True", "False", True, 1])})))}),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=OBJECTS, template=st.sampled_from([".spec.items[].template", ".spec.items[0].template",
                                              ".spec.template", "(.spec.items[] | .template) // {}"]),
       replicas=st.one_of(st.sampled_from([".spec.items[].replicas", ".spec.replicas // 1", "[.spec.items[]?.replicas] | add",
                                           ".spec.items | length"]), PROGRAMS),
       phase=st.one_of(st.just(".status.phase"), PROGRAMS),
       expression=PROGRAMS,
       instances=st.sampled_from([".spec.items[].name", ".spec.items[]?.name // empty", '"one"', ".spec.a"]))
def test_generated_definitions_resolve_identically(obj, template, replicas, phase, expression, instances):
    try:
        definition = load_definition(_definition(template, replicas, phase, expression, instances),
                                     "cluster", "cluster:generated")
    except Exception:  # noqa: BLE001 - programs libjq refuses, or unsafe ones: not this test's subject
        return
    _same(obj, definition)
    _same(obj, definition, Resolver(cache_size=10))


def _requests_from_definition(path):
    return {"apiVersion": "workloadmap.io/v1alpha1", "kind": "WorkloadMap", "metadata": {"name": "served"},
            "spec": {"structureDefinition": {"rootComponent": {
                "name": "server", "kind": {"group": "example.com", "version": "v1", "kind": "Served"},
                "instanceIdPath": ".spec.models[].name",
                "podSelector": {"componentInstanceSelector": {"idPath": '.metadata.labels["model"]'}},
                "specDefinition": {"podSpecPath": ".spec.models[].pod", "requestsFromPath": path},
                "statusDefinition": {"phaseDefinition": {"path": ".status.phase"},
                                     "statusMappings": {"running": [{"byPhase": "Ready"}]}}}}}}


def _served(models):
    return {"apiVersion": "example.com/v1", "kind": "Served", "metadata": {"name": "s", "namespace": "n"},
            "spec": {"models": models}}


def test_requests_from_path_per_instance_through_both_resolvers():
    definition = load_definition(_requests_from_definition(
        '.spec.models[] | if .pod.containers[0].resources == null then "ServingRuntime " + .runtime else null end'),
        "file", "served.yaml")
    obj = _served([{"name": "a", "runtime": "rt-a", "pod": {"containers": [{"name": "c"}]}},
                   {"name": "b", "runtime": "rt-b", "pod": {"containers": [
                       {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}])
    resolved = _same(obj, definition)[2]
    assert [c.get("requestsFrom") for c in resolved["components"]] == ["ServingRuntime rt-a", None]


def test_requests_from_path_must_give_text():
    definition = load_definition(_requests_from_definition(".spec.models[] | 3"), "file", "served.yaml")
    outcome = _same(_served([{"name": "a", "pod": {"containers": []}}]), definition)
    assert outcome[0] == "error" and "requestsFromPath: must be a string or null, got int" in outcome[2]


def test_a_definition_python_cannot_compile_is_resolved_the_reference_way():
    """Loops nested beyond Python's static block limit (20) make its compiler refuse the code:
    the definition is then resolved the reference way, with the same record."""
    from workloadmap.catalog.compiling import compile_definition

    nested = " | ".join(f".spec.models[] as $m{i}" for i in range(25)) + " | $m0.name"
    doc = _requests_from_definition("null")
    doc["spec"]["structureDefinition"]["rootComponent"]["instanceIdPath"] = nested
    definition = load_definition(doc, "file", "deep.yaml")
    assert compile_definition(definition) is None
    obj = _served([{"name": "a", "pod": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}])
    resolved = _same(obj, definition)
    assert resolved[0] == "ok" and resolved[2]["total"]["gpu"] == 1
