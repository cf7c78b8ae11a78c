"""The resolver's per-generation cache of component trees, and the read analysis behind it."""

from __future__ import annotations

import copy

import pytest

from workloadmap.catalog import Catalog, Resolver
from workloadmap.catalog.jqlang.reading import ANY, reads

from .conftest import example_objects


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
