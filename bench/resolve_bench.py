"""Benchmark: resolving a corpus of realistic objects across all definitions, on one core.

The corpus is every bundled example object (all frameworks, several states),
repeated with distinct names and uids up to --objects.  Prints one JSON line:
objects/s over the timed rounds (best and median), after a warm-up round.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from importlib import resources

import yaml

from workloadmap.catalog import Catalog


def corpus(n: int) -> list[dict]:
    folder = resources.files("workloadmap.catalog").joinpath("examples")
    base = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            base.extend(d for d in yaml.safe_load_all(entry.read_text()) if d)
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
    rates = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        for obj in objects:
            catalog.resolve(obj)
        rates.append(len(objects) / (time.perf_counter() - started))
    print(json.dumps({
        "benchmark": "catalog.resolve",
        "objects": len(objects),
        "definitions": len(catalog),
        "distinct_example_objects": len({o["metadata"]["name"].rsplit("-", 1)[0] for o in objects}),
        "cores": 1,
        "rounds": args.rounds,
        "objects_per_second_best": round(max(rates)),
        "objects_per_second_median": round(statistics.median(rates)),
        "target_objects_per_second": 20000,
    }))


if __name__ == "__main__":
    main()
