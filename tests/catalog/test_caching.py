"""The resolver's per-generation cache of component trees, and the read analysis behind it."""

from __future__ import annotations

import copy

import pytest

from workloadmap.catalog import Catalog, Resolver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadmap.catalog.jqlang import JqError
from workloadmap.catalog.jqlang import compile as jq_compile
from workloadmap.catalog.jqlang.reading import ANY, paths_read, reads

from tests.conftest import example_objects


@pytest.mark.parametrize("source, expected", [
    (".spec.replicas", {"spec"}),
    (".spec.replicatedJobs[]?.name", {"spec"}),
    ("(.spec.a // .status.b) + 1", {"spec", "status"}),
    (".spec.x as $x | .metadata.labels[$x]", {"spec", "metadata"}),
    ("[.spec.items[] | select(.a == .b)] | length", {"spec"}),
    (".", ANY),
    ("keys", ANY),
    (".[]", ANY),
    ("if .spec.a then .spec.b end", ANY),  # no else: yields the whole input
    ("def f: .; f", ANY),
    ('.spec["a"][1:]', {"spec"}),
])
def test_reads(source, expected):
    assert reads(source) == expected


@pytest.mark.parametrize("source, expected", [
    (".spec.replicas", {("spec", "replicas")}),
    ("(.status.succeeded // 0) as $s | .spec.completions - $s", {("status", "succeeded"), ("spec", "completions")}),
    (". as $root | .spec.p as $p | $p.a + ($root | .metadata.annotations.x)",
     {("spec", "p", "a"), ("metadata", "annotations", "x")}),
    ("[(.status.conditions // [])[] | select(.type == \"X\")] | length", {("status", "conditions")}),
    (".spec.x | 1", {("spec", "x")}),                       # read for its shape: a string there fails
    ("if .spec.a then empty else .spec.b end", {("spec", "a"), ("spec", "b")}),
    (".spec as $s | [.status.items[] | $s.y]", {("spec", "y"), ("status", "items")}),
    (".status | length", {("status",)}),
    (". as $r | $r", ANY),
])
def test_paths_read(source, expected):
    assert paths_read(source) == expected


_PATHS = st.sampled_from([("a",), ("a", "b"), ("b",), ("b", "c"), ("c",), ("a", "b", "c"), ("s",), ("s", "a")])
_SOURCES = st.sampled_from([
    ".a.b", ".a | length", "(.b.c // 1) as $x | .a.b + $x", ". as $r | $r.s | .a", ".c as $c | [.b[]? | $c]",
    "if .a.b then .c else empty end", "[.s.a, .b] | map(. // 0)", ".s as $s | .a as $a | $s.a // $a",
    "{x: .a.b, y: (.c | tostring)}", "(.b | keys?) // .c", ". as $root | .a | .b // ($root | .c)",
])
_VALUES = st.recursive(st.one_of(st.none(), st.integers(-2, 3), st.sampled_from(["x", "", True])),
                       lambda inner: st.dictionaries(st.sampled_from(["a", "b", "c", "s"]), inner, max_size=3),
                       max_leaves=8)


def _set(obj, path, value):
    for key in path[:-1]:
        if not isinstance(obj.get(key), dict):
            obj[key] = {}
        obj = obj[key]
    obj[path[-1]] = value


def _outputs(program, value):
    try:
        return ("ok", program.outputs(value))
    except JqError as exc:
        return ("error", str(exc))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_SOURCES, obj=_VALUES.filter(lambda v: isinstance(v, dict)), path=_PATHS, value=_VALUES)
def test_changing_what_a_program_does_not_read_changes_nothing(source, obj, path, value):
    """The cache's soundness: a change at a path disjoint from every path read leaves the
    outputs as they were (values, or the error)."""
    read = paths_read(source)
    assert read is not ANY
    if any(path[:len(p)] == p or p[:len(path)] == path for p in read):
        return   # the change touches what is read
    if any(not isinstance(_walk(obj, path[:i]), (dict, type(None))) for i in range(1, len(path))):
        return   # the path goes through a scalar: not a change a cache key could miss
    program = jq_compile(source)
    changed = copy.deepcopy(obj)
    _set(changed, path, value)
    assert _outputs(program, changed) == _outputs(program, obj)


def _walk(obj, path):
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _cached_catalog():
    return Catalog(Catalog.builtin(), resolver=Resolver(cache_size=100))


def test_status_is_fresh_while_components_come_from_the_cache():
    catalog = _cached_catalog()
    obj = copy.deepcopy(example_objects("jobset")["llama-pretrain"])
    first = catalog.resolve(obj)
    assert first.status == "Running"
    obj["status"]["conditions"].append({"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "x"})
    obj["metadata"]["resourceVersion"] = "999"
    second = catalog.resolve(obj)
    assert second.status == "Failed"
    assert second.components is first.components  # served from the cache
    assert second.resource_version == "999"


def test_a_new_generation_recomputes_the_components():
    catalog = _cached_catalog()
    obj = copy.deepcopy(example_objects("jobset")["llama-pretrain"])
    before = catalog.resolve(obj).pods
    obj["spec"]["replicatedJobs"][1]["replicas"] += 1
    stale = catalog.resolve(obj).pods
    assert stale == before  # same generation: the controller has not seen the change either
    obj["metadata"]["generation"] += 1
    after = catalog.resolve(obj)
    assert after.pods > before
    assert after.to_dict() == Catalog.builtin().resolve(obj).to_dict()


def test_cached_and_uncached_resolution_agree_on_every_example():
    cached, plain = _cached_catalog(), Catalog.builtin()
    for name in ("jobset", "raycluster", "milvus", "pod", "rayjob", "inferenceservice"):
        for obj in example_objects(name).values():
            for _ in range(2):
                assert cached.resolve(obj).to_dict() == plain.resolve(obj).to_dict()


def test_a_value_read_outside_the_spec_joins_the_key():
    """A Job's pods follow .status.succeeded (the controller's wantActive), in one generation."""
    catalog = _cached_catalog()
    obj = copy.deepcopy(example_objects("job")["bert-distill"])
    obj["spec"].update({"completions": 4, "parallelism": 4})
    obj["status"] = {"succeeded": 1, "active": 3}
    first = catalog.resolve(obj)
    obj["metadata"]["resourceVersion"] = "1000"
    obj["status"]["ready"] = 2                        # not read by the components
    assert catalog.resolve(obj).components is first.components
    obj["status"]["succeeded"] = 3                   # read: recomputed
    third = catalog.resolve(obj)
    assert third.components is not first.components
    assert third.pods == 1 and third.to_dict() == Catalog.builtin().resolve(obj).to_dict()


def test_an_annotation_read_by_the_components_joins_the_key():
    catalog = _cached_catalog()
    obj = copy.deepcopy(next(iter(example_objects("inferenceservice").values())))
    first = catalog.resolve(obj)
    assert first.pods > 0
    obj["metadata"].setdefault("annotations", {})["serving.kserve.io/deploymentMode"] = "ModelMesh"
    again = catalog.resolve(obj)
    assert again.to_dict() == Catalog.builtin().resolve(obj).to_dict()
    assert again.pods < first.pods


def test_no_cache_without_uid_or_generation():
    resolver = Resolver(cache_size=10)
    catalog = Catalog(Catalog.builtin(), resolver=resolver)
    obj = copy.deepcopy(example_objects("jobset")["llama-pretrain"])
    del obj["metadata"]["generation"]
    catalog.resolve(obj)
    assert len(resolver._cache) == 0


def test_cache_is_bounded():
    resolver = Resolver(cache_size=3)
    catalog = Catalog(Catalog.builtin(), resolver=resolver)
    base = example_objects("jobset")["llama-pretrain"]
    for i in range(10):
        obj = copy.deepcopy(base)
        obj["metadata"]["uid"] = f"uid-{i}"
        catalog.resolve(obj)
    assert len(resolver._cache) == 3


def test_the_cache_follows_the_live_objects():
    """An object's trees are of its current generation only (a new one replaces them), and forget(uid)
    drops them (the processors call it when the object is deleted); the LRU bound still holds."""
    resolver = Resolver(cache_size=3)
    catalog = Catalog(Catalog.builtin(), resolver=resolver)
    obj = copy.deepcopy(example_objects("job")["bert-distill"])
    obj["status"] = {"succeeded": 1}
    catalog.resolve(obj)
    obj["status"]["succeeded"] = 2                  # read by the components: a second tree, same generation
    catalog.resolve(obj)
    assert len(resolver._cache) == 2
    obj["metadata"]["generation"] += 1
    catalog.resolve(obj)
    assert [key[2] for key in resolver._cache] == [obj["metadata"]["generation"]]
    other = copy.deepcopy(obj)
    other["metadata"]["uid"] = "another"
    catalog.resolve(other)
    resolver.forget(obj["metadata"]["uid"])
    assert [key[1] for key in resolver._cache] == ["another"]
    for i in range(5):
        other["metadata"]["uid"] = f"uid-{i}"
        catalog.resolve(other)
    assert [key[1] for key in resolver._cache] == ["uid-2", "uid-3", "uid-4"]
    assert sorted(resolver._keys) == ["uid-2", "uid-3", "uid-4"]
