"""Benchmark: resolving a corpus of realistic objects across all definitions, on one core.

The corpus is every bundled example object (all frameworks, several states),
repeated with distinct names and uids up to --objects.  Two figures:

- cold: every object resolved from scratch (distinct objects);
- watch stream: the same objects re-delivered as status updates (new
  resourceVersion, same generation), as a watcher sees them, through a
  Resolver with its per-generation component cache.

Prints one JSON line: objects/s (best and median over the rounds, after a
warm-up) and the per-kind cold rate.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time


from workloadmap.catalog import Catalog, Resolver
from workloadmap.catalog.registry import bundled_examples


def corpus(n: int) -> list[dict]:
    base = bundled_examples()
    out = []
    for i in range(n):
        obj = copy.deepcopy(base[i % len(base)])
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{i}"
        obj["metadata"]["uid"] = f"00000000-0000-4000-8000-{i:012d}"
        out.append(obj)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    catalog = Catalog.builtin()
    objects = corpus(args.objects)
    for obj in objects[:2000]:
        catalog.resolve(obj)  # warm-up: caches, branch predictors, allocator
    rates = _rates(catalog, objects, args.rounds)
    per_kind = {}
    for kind in sorted({o["kind"] for o in objects}):
        same = [o for o in objects if o["kind"] == kind][:500]
        per_kind[kind] = round(max(_rates(catalog, same, 2)))
    stream_catalog = Catalog(catalog, resolver=Resolver(cache_size=len(objects)))
    updates = []
    for i, obj in enumerate(objects):
        update = dict(obj)
        update["metadata"] = dict(obj["metadata"], resourceVersion=str(10_000_000 + i))
        updates.append(update)
    for obj in objects:
        stream_catalog.resolve(obj)  # the ADDED events fill the cache
    stream = _rates(stream_catalog, updates, args.rounds)
    print(json.dumps({
        "benchmark": "catalog.resolve",
        "objects": len(objects),
        "definitions": len(catalog),
        "distinct_example_objects": len({o["metadata"]["name"].rsplit("-", 1)[0] for o in objects}),
        "cores": 1,
        "rounds": args.rounds,
        "objects_per_second_best": round(max(rates)),
        "objects_per_second_median": round(statistics.median(rates)),
        "watch_stream_updates_per_second_best": round(max(stream)),
        "watch_stream_updates_per_second_median": round(statistics.median(stream)),
        "cold_objects_per_second_by_kind": per_kind,
        "target_objects_per_second": 20000,
    }))


def _rates(catalog, objects, rounds):
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for obj in objects:
            catalog.resolve(obj)
        rates.append(len(objects) / (time.perf_counter() - started))
    return rates


if __name__ == "__main__":
    main()
