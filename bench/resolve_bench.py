"""Benchmark: resolving a corpus of realistic objects across all definitions, on one core.

The corpus is every bundled example object (all frameworks, several states),
repeated with distinct names and uids up to --objects; the objects their references
name (the TrainJobs' runtimes) are at hand, as `resolve -f` has them.  Figures, all from one
run, one JSON line:

- cold: every object resolved from scratch (distinct objects) by the resolver
  as the pipeline runs it: the definitions' generated code (catalog/compiling.py);
- reference: the same corpus through the reference resolver (the definition's
  model walked per object, the jq closures): the resolver before the generated
  code, and the ratio between the two;
- libjq: the same corpus with every jq program evaluated by libjq (the `jq`
  package, one compiled program per expression, as a plain port of the upstream
  library would), on a slice of the corpus (it is slow), and ours / libjq;
- watch stream: the objects re-delivered as status updates (new
  resourceVersion, same generation), as a watcher sees them, through a
  Resolver with its per-generation component cache;
- per kind: the cold rate of each kind alone (500 objects).

Rates are objects per second of the process's CPU time (median and best of
the rounds, after a warm-up), pinned to one core: this machine is shared, and
wall time would also count the time the scheduler gave to others; the wall
clock rates are printed beside them.  The cyclic garbage collector is tuned as
the pipeline's services tune it (startup objects frozen, rare collections).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import time

import jq as libjq

from workloadmap.catalog import Catalog, ObjectIndex, Resolver
from workloadmap.catalog.jqlang import Program
from workloadmap.catalog.registry import bundled_examples, bundled_related


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
    parser.add_argument("--libjq-objects", type=int, default=730, help="corpus slice resolved through libjq")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    # the objects the examples' references name (the TrainJobs' runtimes), at hand as in `resolve -f`
    catalog = Catalog.builtin(lookup=ObjectIndex(bundled_related()))
    objects = corpus(args.objects)
    gc.freeze()                          # as the services do (workloadmap/running.py)
    gc.set_threshold(50_000, 20, 100)

    def generated(obj):
        return catalog.resolve(obj)

    reference_resolver = Resolver()

    def reference(obj):
        return reference_resolver.reference(obj, catalog.definition_for(obj), catalog.lookup)

    for obj in objects[:2000]:
        generated(obj)  # warm-up: compiles each definition's code, fills caches
        reference(obj)
    cold_cpu, cold_wall = _rates(generated, objects, args.rounds)
    ref_cpu, ref_wall = _rates(reference, objects, max(1, args.rounds // 2))
    per_kind = {}
    for kind in sorted({o["kind"] for o in objects}):
        same = [o for o in objects if o["kind"] == kind][:500]
        per_kind[kind] = round(max(_rates(generated, same, 2)[0]))

    stream_catalog = Catalog(catalog, resolver=Resolver(cache_size=len(objects)))
    updates = []
    for i, obj in enumerate(objects):
        update = dict(obj)
        update["metadata"] = dict(obj["metadata"], resourceVersion=str(10_000_000 + i))
        updates.append(update)
    for obj in objects:
        stream_catalog.resolve(obj)  # the ADDED events fill the cache
    stream_cpu, stream_wall = _rates(stream_catalog.resolve, updates, args.rounds)

    sliced = objects[:args.libjq_objects]
    libjq_cpu = _through_libjq(reference, sliced)
    ours_on_slice = max(_rates(generated, sliced, 2)[0])

    print(json.dumps({
        "benchmark": "catalog.resolve",
        "objects": len(objects),
        "definitions": len(catalog),
        "distinct_example_objects": len({o["metadata"]["name"].rsplit("-", 1)[0] for o in objects}),
        "cores": 1,
        "rounds": args.rounds,
        "rate": "objects per CPU-second of the process",
        "objects_per_second_median": round(statistics.median(cold_cpu)),
        "objects_per_second_best": round(max(cold_cpu)),
        "objects_per_second_wall_median": round(statistics.median(cold_wall)),
        "reference_objects_per_second_median": round(statistics.median(ref_cpu)),
        "reference_objects_per_second_wall_median": round(statistics.median(ref_wall)),
        "generated_to_reference_ratio": round(statistics.median(cold_cpu) / statistics.median(ref_cpu), 2),
        "watch_stream_updates_per_second_median": round(statistics.median(stream_cpu)),
        "watch_stream_updates_per_second_best": round(max(stream_cpu)),
        "watch_stream_updates_per_second_wall_median": round(statistics.median(stream_wall)),
        "cold_objects_per_second_by_kind": per_kind,
        "slowest_kind": min(per_kind, key=per_kind.get),
        "libjq_objects": len(sliced),
        "libjq_objects_per_second": round(libjq_cpu),
        "ours_to_libjq_ratio": round(ours_on_slice / libjq_cpu, 1),
        "target_objects_per_second": 20000,
        "target_watch_stream_updates_per_second": 50000,
        "target_min_kind_objects_per_second": 5000,
    }))


def _rates(resolve, objects, rounds):
    """(CPU-time rates, wall-clock rates) over `rounds` passes."""
    cpu, wall = [], []
    for _ in range(rounds):
        started_cpu, started = time.process_time(), time.perf_counter()
        for obj in objects:
            resolve(obj)
        cpu.append(len(objects) / max(time.process_time() - started_cpu, 1e-9))
        wall.append(len(objects) / (time.perf_counter() - started))
    return cpu, wall


def _through_libjq(reference, objects) -> float:
    """Objects/s of the reference resolution with every program evaluated by libjq."""
    programs: dict = {}

    def outputs(self, value, variables=None):
        compiled = programs.get(self.source)
        if compiled is None:
            compiled = programs[self.source] = libjq.compile(self.source)
        return compiled.input_value(value).all()

    native = Program.outputs
    Program.outputs = outputs
    try:
        for obj in objects[:100]:
            reference(obj)    # compiles each program once, as a port would at load
        return max(_rates(reference, objects, 1)[0])
    finally:
        Program.outputs = native


if __name__ == "__main__":
    main()
