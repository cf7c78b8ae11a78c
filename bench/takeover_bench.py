"""Benchmark: a processors worker's RSS before, during and after it holds a killed peer's partitions (issue 30).

What it shows: bench/soak.py saw each worker step up when it took over a killed peer's raw
partitions and stay up after the peer was back and had them again.  Here two `workloadmap run
processors` workers on a real broker (tests/services) process a stream with a large live state,
then:

1. both settled: the first worker's RSS (``before``);
2. the second SIGKILLed: after the session timeout the first takes its partitions over and
   recovers their state from the state topic; its RSS once settled (``after_takeover``);
3. the second started again: the partitions go back to it; the first's RSS once settled
   (``after_give_back``), and the partitions it holds then (from its log, when it says);

--cycles times (2 and 3 again): a worker that freed what it held but kept the pages (a high-water
mark) stays level from the second cycle on; one that kept what it held grows each cycle.

"Settled": the group stable with its members, then the RSS unchanged (within 1 MiB) for 3 s.

The stream: bench/state_bench.py's churn (one cluster, --namespaces namespaces spread over the
raw partitions, pods created and deleted --lifetime s of event time later, every 50th with a Job
of its own), --seconds of its event time at --rate events/s of event time, published as fast as
the broker takes it: about rate / 4 x lifetime pods alive at the end.

``--root PATH`` runs the workers from another checkout (its `workloadmap` package first on
PYTHONPATH), for an A/B against the code before a change.

    python bench/takeover_bench.py [--rate 1000] [--lifetime 200] [--seconds 240] [--cycles 2] [--root PATH]

One JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pipeline_bench import cpu_seconds  # noqa: E402
from bench.state_bench import PARTITIONS, _iso, _stamped, churn  # noqa: E402
from tests.services.kafka_broker import KafkaBroker  # noqa: E402
from workloadmap.ingest.publishing import KafkaPublisher  # noqa: E402

HELD = re.compile(r"raw partitions \[([0-9, ]*)\] held: (\d+) entries")   # processors/app.py's line


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def group_members(bootstrap: str, group: str) -> int | None:
    """Members of the stable group, None while it rebalances."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        info = admin.describe_groups([group])[group]
    except KafkaError:
        return None
    finally:
        admin.close()
    return len(info.get("members") or ()) if info.get("group_state") == "Stable" else None


def committed_everything(bootstrap: str, group: str, raw_topic: str) -> bool:
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        ends = consumer.end_offsets([TopicPartition(raw_topic, p) for p in range(PARTITIONS)])
        committed = admin.list_group_offsets(group)[group]
    finally:
        consumer.close()
        admin.close()
    return all(tp in committed and committed[tp].offset >= end for tp, end in ends.items())


def wait(condition, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(1)


def settled_rss(pid: int, timeout: float = 120) -> float:
    """The RSS once unchanged (within 1 MiB) for 3 s."""
    deadline = time.time() + timeout
    last = [rss_mib(pid)]
    while time.time() < deadline:
        time.sleep(1)
        last = [*last[-3:], rss_mib(pid)]
        if len(last) == 4 and max(last) - min(last) <= 1.0:
            break
    return round(last[-1], 1)


def rebalanced(log: Path, seen: int, logs_holdings: bool) -> None:
    """Until the worker logged a holding after the first `seen` (its rebalance's recovery done); a
    worker that logs none (code before it did, --root) is given 20 s."""
    if not logs_holdings:
        time.sleep(20)
        return
    wait(lambda: len(HELD.findall(log.read_text(errors="replace"))) > seen, 120, "the worker's rebalance")


def holding(log: Path) -> dict | None:
    found = HELD.findall(log.read_text(errors="replace")) if log.exists() else []
    return {"partitions": [int(p) for p in found[-1][0].split(", ") if p], "entries": int(found[-1][1])} if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=1000, help="events/s of event time")
    parser.add_argument("--lifetime", type=float, default=200, help="a pod's life, s of event time")
    parser.add_argument("--seconds", type=float, default=240, help="event time published, s")
    parser.add_argument("--namespaces", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=2, help="takeovers and give-backs, one after another")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout the workers run from")
    args = parser.parse_args()

    tag = uuid.uuid4().hex[:8]
    topics = {name: f"{name}-{tag}" for name in
              ("raw", "workloads", "transitions", "deadletter", "definitions", "pods", "nodes", "state")}
    group = f"takeover-{tag}-processors"
    with KafkaBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        bootstrap = broker.bootstrap_servers
        env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=bootstrap, WORKLOADMAP_CLIENT_ID=f"takeover-{tag}",
                   WORKLOADMAP_PARTITIONS=str(PARTITIONS), PYTHONPATH=str(args.root.resolve()),
                   **{f"WORKLOADMAP_{name.upper()}_TOPIC": topic for name, topic in topics.items()})
        logs = {n: Path(tmp) / f"worker-{n}.log" for n in (1, 2)}
        workers: dict[int, subprocess.Popen] = {}

        def start(n: int) -> None:
            workers[n] = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "processors"], env=env,
                                          stdout=open(logs[n], "ab"), stderr=subprocess.STDOUT, cwd=args.root)
        try:
            start(1)
            time.sleep(5)
            start(2)
            wait(lambda: group_members(bootstrap, group) == 2, 120, "two workers in the group")
            publisher = KafkaPublisher(bootstrap, topic=topics["raw"], client_id=f"takeover-{tag}")
            rv, t0, published = itertools.count(1000), time.time() - args.seconds - 3600, 0
            for due, etype, obj in churn(args.rate, args.lifetime, args.namespaces):
                if due > args.seconds:
                    break
                publisher.publish_raw(*_stamped(next(rv), etype, obj, _iso(t0 + due)))
                published += 1
            publisher.flush()
            publisher.close()
            wait(lambda: committed_everything(bootstrap, group, topics["raw"]), 600, "the stream processed")
            first = workers[1].pid
            before = settled_rss(first)
            held_before = holding(logs[1])   # logged at the assignment, before the stream: its partitions only
            held_before = held_before and {"partitions": held_before["partitions"]}
            logs_holdings = held_before is not None
            cpu0 = cpu_seconds(first)
            cycles = []
            for _ in range(args.cycles):
                seen = len(HELD.findall(logs[1].read_text(errors="replace")))
                workers[2].send_signal(signal.SIGKILL)
                workers[2].wait(30)
                wait(lambda: group_members(bootstrap, group) == 1, 120, "the takeover")
                rebalanced(logs[1], seen, logs_holdings)
                taken = settled_rss(first)
                held_taken = holding(logs[1])
                seen = len(HELD.findall(logs[1].read_text(errors="replace")))
                start(2)
                wait(lambda: group_members(bootstrap, group) == 2, 120, "the give-back")
                rebalanced(logs[1], seen, logs_holdings)
                cycles.append({"after_takeover": taken, "after_give_back": settled_rss(first),
                               "held_after_takeover": held_taken, "held_after_give_back": holding(logs[1])})
            peer = settled_rss(workers[2].pid)
            cpu = cpu_seconds(first) - cpu0
            print(json.dumps({
                "benchmark": "takeover_rss", "root": str(args.root.resolve()), "rate": args.rate,
                "lifetime_s": args.lifetime, "event_seconds": args.seconds, "published": published,
                "rss_mib_before": before, "held_before": held_before,
                "cycles": cycles, "given_back_over_before": round(cycles[-1]["after_give_back"] / before, 3),
                "peer_rss_mib_after_give_back": peer,
                "worker_cpu_seconds_takeovers_and_give_backs": round(cpu, 2),
                "load_average": os.getloadavg()}), flush=True)
        finally:
            for proc in workers.values():
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        proc.kill()


if __name__ == "__main__":
    main()
