"""Simulator throughput on one core, printed as JSON.

Why: the demo, replay and pipeline benchmarks all start from simulated events,
so generating them must stay far from being the bottleneck (100,000 events
well under a minute).  Reports the one-time preparation (loading and
verifying the example templates) separately from generation, and the cost of
encoding the messages as they would be published.

    python bench/simulate_bench.py [--workloads 14000] [--days 7] [--clusters 3]
"""

from __future__ import annotations

import argparse
import json
import time

from workloadmap.catalog import records
from workloadmap.ingest.simulating import simulate, simulate_messages, warm_up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", type=int, default=14000)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    knobs = dict(clusters=args.clusters, workloads=args.workloads, days=args.days, seed=args.seed)

    t0 = time.perf_counter()
    warm_up()
    prepare = time.perf_counter() - t0

    t0 = time.perf_counter()
    n = 0
    for event in simulate(**knobs):
        n += 1
    generate = time.perf_counter() - t0

    t0 = time.perf_counter()
    size = 0
    m = 0
    for key, value, _ in simulate_messages(**knobs, bad_fraction=0.01):
        size += len(value)
        m += 1
    messages = time.perf_counter() - t0

    print(json.dumps({
        "benchmark": "simulate", **knobs,
        "events": n,
        "prepare_seconds": round(prepare, 2),
        "generate_seconds": round(generate, 2),
        "events_per_second": round(n / generate),
        "messages_with_1pct_bad": m,
        "encoded_messages_per_second": round(m / messages),
        "mean_message_bytes": round(size / m) if m else 0,
        "raw_topic": records.RAW_TOPIC,
    }, indent=2))


if __name__ == "__main__":
    main()
