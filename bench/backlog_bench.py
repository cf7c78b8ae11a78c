"""Benchmark: a processors worker's RSS before and after a broker outage's backlog (issue 30).

What it shows: in bench/soak.py a worker stepped up by a third in the minute of the broker's
restart and stayed there for the rest of its life, its live set unchanged.  Here one `workloadmap
run processors` worker on a real broker (tests/services) holds every raw partition of a steady
stream (bench/state_bench.py's churn, paced at --rate events/s of wall time, pods living 60 s):

1. --before seconds of the stream: the worker's RSS at its end (``before_mib``, the highest of the
   last 40 s);
2. the broker stopped for --outage seconds (the publisher blocks, the worker waits), then started:
   the events of the outage arrive at once, a backlog the worker catches up on (``peak_mib``);
3. --after seconds more of the stream: the worker's RSS at the end (``end_mib``, the highest of
   the last 40 s) over ``before_mib``.

A worker that keeps what the backlog took reads well above 1; one that gives it back, about 1.

``--root PATH`` runs the worker from another checkout (its `workloadmap` package first on
PYTHONPATH), for an A/B against the code before a change.

    python bench/backlog_bench.py [--rate 2000] [--before 120] [--outage 40] [--after 200] [--root PATH]

One JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pipeline_bench import cpu_seconds  # noqa: E402
from bench.state_bench import PARTITIONS, _iso, _stamped, churn  # noqa: E402
from bench.takeover_bench import group_members, rss_mib, wait  # noqa: E402
from tests.services.kafka_broker import KafkaBroker  # noqa: E402
from workloadmap.ingest.publishing import KafkaPublisher  # noqa: E402

LIFETIME = 60.0   # a pod's life, s
NAMESPACES = 30
TAIL = 40.0   # the seconds before a phase's end whose highest RSS is its figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2000, help="events/s published (wall time)")
    parser.add_argument("--before", type=float, default=120, help="s of the stream before the outage")
    parser.add_argument("--outage", type=float, default=40, help="s the broker is down")
    parser.add_argument("--after", type=float, default=200, help="s of the stream after the outage")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout the worker runs from")
    args = parser.parse_args()

    tag = uuid.uuid4().hex[:8]
    topics = {name: f"{name}-{tag}" for name in
              ("raw", "workloads", "transitions", "deadletter", "definitions", "pods", "nodes", "state")}
    with KafkaBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        bootstrap = broker.bootstrap_servers
        env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=bootstrap, WORKLOADMAP_CLIENT_ID=f"backlog-{tag}",
                   WORKLOADMAP_PARTITIONS=str(PARTITIONS), PYTHONPATH=str(args.root.resolve()),
                   **{f"WORKLOADMAP_{name.upper()}_TOPIC": topic for name, topic in topics.items()})
        log = Path(tmp) / "worker.log"
        worker = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "processors"], env=env,
                                  stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=args.root)
        stop, published, failed = threading.Event(), [0], []

        def publish() -> None:
            try:
                publisher = KafkaPublisher(bootstrap, topic=topics["raw"], client_id=f"backlog-{tag}")
                rv, t0 = itertools.count(1000), time.time()
                for due, etype, obj in churn(args.rate, LIFETIME, NAMESPACES):
                    if stop.is_set():
                        break
                    ahead = t0 + due - time.time()
                    if ahead > 0:
                        time.sleep(ahead)
                    publisher.publish_raw(*_stamped(next(rv), etype, obj, _iso(t0 - 3600 + due)))
                    published[0] += 1
                publisher.flush()
                publisher.close()
            except Exception as exc:  # noqa: BLE001 - the bench fails with it
                failed.append(exc)

        samples: list[tuple[float, float]] = []

        def sample_until(until: float) -> None:
            while time.time() - start < until:
                time.sleep(5)
                samples.append((time.time() - start, rss_mib(worker.pid)))

        def tail(end: float) -> float:
            return round(max(mib for at, mib in samples if end - TAIL <= at <= end + 5), 1)

        try:
            wait(lambda: group_members(bootstrap, f"backlog-{tag}-processors") == 1, 120, "the worker in the group")
            publishing = threading.Thread(target=publish, daemon=True)
            start = time.time()
            publishing.start()
            sample_until(args.before)
            before_at = time.time() - start
            cpu0 = cpu_seconds(worker.pid)
            broker.stop()
            sample_until(args.before + args.outage)
            broker.start()
            sample_until(args.before + args.outage + args.after)
            cpu = cpu_seconds(worker.pid) - cpu0
            stop.set()
            publishing.join(60)
            if failed or publishing.is_alive():
                raise SystemExit(f"the publisher failed: {failed[0]!r}" if failed else "the publisher did not stop")
            end_at = time.time() - start
            before, end = tail(before_at), tail(end_at)
            print(json.dumps({
                "benchmark": "backlog_rss", "root": str(args.root.resolve()), "rate": args.rate,
                "before_s": args.before, "outage_s": args.outage, "after_s": args.after, "published": published[0],
                "before_mib": before, "peak_mib": round(max(mib for _, mib in samples), 1), "end_mib": end,
                "end_over_before": round(end / before, 2),
                "mib_every_20_s": [round(mib) for _, mib in samples[3::4]],
                "worker_cpu_seconds_outage_and_after": round(cpu, 1), "load_average": os.getloadavg()}), flush=True)
        finally:
            stop.set()
            if worker.poll() is None:
                worker.terminate()
                try:
                    worker.wait(60)
                except subprocess.TimeoutExpired:
                    worker.kill()


if __name__ == "__main__":
    main()
