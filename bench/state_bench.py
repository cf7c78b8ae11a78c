"""Benchmark: the processors' state on a stream that creates and deletes objects all the time (issue 30).

What it shows: a worker's memory and its recovery follow the live objects, not the history.

The stream (``churn``): one cluster, --namespaces namespaces each with a Deployment and its
ReplicaSet; pods of those ReplicaSets created one after another, each Pending, bound to a node,
Running, and deleted --lifetime seconds after it was created; every 50th pod comes with a Job of
its own (a workload: a new uid for the resolver) deleted as long after.  About --rate events a
second of event time, so about rate / 4 x lifetime pods alive at any time, whatever the length.

In one process (default, no broker, about a minute): ``Processor.process`` on the stream, one store
per raw partition as a worker keeps them, event time from the stream: one JSON line per
--every events (RSS, live and remembered objects, CPU microseconds per event), then a line with
the growth of RSS after the first sample, and the RSS a live pod costs (the stream stopped
deleting: --extra pods more kept alive).

``--kafka``: a real broker and one ``workloadmap run processors`` worker, the stream published at
--rate events/s of wall time (observedAt as a watcher stamps it) for --minutes; every --sample
seconds a line with the worker's RSS and a recovery of its three raw partitions from the state
topic by the worker's own code (``PartitionStates.recover``, in this process): seconds, state
messages read, objects kept, beside the pod records on the pods topic (the history a recovery
used to read); the last line compares the last sample with the first of the second half.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import os
import sys
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workloadmap.catalog import records  # noqa: E402
from workloadmap.ingest.publishing import event_key  # noqa: E402
from workloadmap.processors.processing import MemoryStates, Processor  # noqa: E402
from workloadmap.processors.remembering import FORGET_AFTER  # noqa: E402

JOB_EVERY = 50
PARTITIONS = 3


def _pod(ns: str, n: int, uid: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"serve-1-{uid}", "namespace": ns, "uid": uid,
                         "creationTimestamp": "2026-12-01T00:00:00Z",
                         "labels": {"app": "serve", "pod-template-hash": "1"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-1",
                                              "uid": f"rs-{n}", "controller": True}]},
            "spec": {"schedulerName": "default-scheduler", "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                                            "limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def _job(ns: str, uid: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"job-{uid}", "namespace": ns, "uid": uid, "generation": 1,
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
            "status": {}}


def churn(rate: float, lifetime: float, namespaces: int):
    """(event time in seconds from 0, type, object) of the stream in the module docstring, endlessly."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "uid": "node-1"},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                       "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    yield 0.0, "ADDED", node
    for n in range(namespaces):
        ns = f"team-{n:03d}"
        yield 0.0, "ADDED", {"apiVersion": "apps/v1", "kind": "Deployment",
                             "metadata": {"name": "serve", "namespace": ns, "uid": f"d-{n}", "generation": 1},
                             "spec": {"replicas": 1, "template": {"spec": {"containers": [
                                 {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
        yield 0.0, "ADDED", {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                             "metadata": {"name": "serve-1", "namespace": ns, "uid": f"rs-{n}",
                                          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                               "name": "serve", "uid": f"d-{n}", "controller": True}]}}
    later: list = []
    seq = itertools.count()
    step = 4 / rate   # a pod's four events per step
    for k in itertools.count():
        t = k * step
        while later and later[0][0] <= t:
            due, _, etype, obj = heapq.heappop(later)
            yield due, etype, obj
        n = k % namespaces
        ns = f"team-{n:03d}"
        pod = _pod(ns, n, f"p{k}")
        bound = {**pod, "spec": {**pod["spec"], "nodeName": "gpu-1"}}
        yield t, "ADDED", pod
        for due, etype, obj in ((t + 1, "MODIFIED", bound),
                                (t + 2, "MODIFIED", {**bound, "status": {"phase": "Running"}}),
                                (t + lifetime, "DELETED", {**bound, "status": {"phase": "Running"}})):
            heapq.heappush(later, (due, next(seq), etype, obj))
        if k % JOB_EVERY == 0:
            job = _job(ns, f"j{k}")
            yield t, "ADDED", job
            running = {**job, "status": {"active": 1, "ready": 1}}
            heapq.heappush(later, (t + 1, next(seq), "MODIFIED", running))
            heapq.heappush(later, (t + lifetime, next(seq), "DELETED", running))


def _stamped(rv: int, etype: str, obj: dict, observed: str) -> tuple[bytes, bytes]:
    obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}
    event = records.raw_event("bench", etype, obj, observed)
    return event_key(event), records.encode(event)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rss_mb(pid: int | None = None) -> float:
    """Resident set size of a process (this one by default), MiB."""
    with open(f"/proc/{pid or os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _counts(stores) -> dict:
    """Live objects (deleted ones remembered apart) of a worker's stores."""
    return {"workloads": sum(1 for s in stores for v in s.values() if not v.get("deleted")),
            "pods": sum(1 for s in stores for v in s.pods.pods.values() if not v.get("deleted")),
            "nodes": sum(len(s.pods.nodes) for s in stores), "owner_links": sum(len(s.pods.owners) for s in stores),
            "deleted_remembered": sum(len(s.forgetting) for s in stores)}


def in_process(args) -> None:
    from bench.pipeline_bench import cpu_seconds

    processor = Processor()
    stores = [MemoryStates() for _ in range(PARTITIONS)]
    start = 1_764_547_200.0   # 2025-12-01: event time only
    rv = itertools.count(1000)
    samples = []
    cpu0 = cpu_seconds()
    stream = churn(args.rate, args.lifetime, args.namespaces)
    for i, (due, etype, obj) in enumerate(itertools.islice(stream, args.events), start=1):
        key, value = _stamped(next(rv), etype, obj, _iso(start + due))
        processor.process(key, value, stores[zlib.crc32(key) % PARTITIONS])
        if i % args.every == 0:
            gc.collect()
            cpu = cpu_seconds()
            sample = {"benchmark": "state", "events": i, "event_time_s": round(due), "rss_mb": round(rss_mb(), 1),
                      "cpu_us_per_event": round((cpu - cpu0) / args.every * 1e6, 1), **_counts(stores)}
            cpu0 = cpu
            samples.append(sample)
            print(json.dumps(sample), flush=True)
    # the pods of --extra more creations kept alive: what a live pod costs
    before_rss, before = rss_mb(), _counts(stores)["pods"]
    for k in range(args.extra):
        n = k % args.namespaces
        pod = _pod(f"team-{n:03d}", n, f"live-{k}")
        pod["spec"]["nodeName"] = "gpu-1"
        key, value = _stamped(next(rv), "ADDED", pod, _iso(start + due))
        processor.process(key, value, stores[zlib.crc32(key) % PARTITIONS])
    gc.collect()
    added = _counts(stores)["pods"] - before
    # steady from the time the first pods' deletions are forgotten on
    steady = [s for s in samples if s["event_time_s"] >= args.lifetime + FORGET_AFTER] or samples
    first, last = steady[0], samples[-1]
    print(json.dumps({
        "benchmark": "state_summary", "events": args.events, "rate": args.rate, "lifetime_s": args.lifetime,
        "rss_mb_steady": first["rss_mb"], "steady_from_events": first["events"], "rss_mb_end": last["rss_mb"],
        "rss_growth": round(last["rss_mb"] / first["rss_mb"], 3),
        "pods_alive_end": last["pods"], "pods_created": args.events // 4,
        "bytes_per_live_pod": round((rss_mb() - before_rss) * 2**20 / added), "live_pods_added": added,
        "load_average": os.getloadavg()}), flush=True)


def through_kafka(args) -> None:
    import subprocess
    import tempfile
    import threading
    import uuid

    from kafka import KafkaConsumer, TopicPartition

    from bench.pipeline_bench import cpu_seconds
    from tests.services.kafka_broker import KafkaBroker
    from workloadmap.ingest.publishing import KafkaPublisher
    from workloadmap.processors.app import PartitionStates, WorkerSettings

    tag = uuid.uuid4().hex[:8]
    topics = {name: f"{name}-{tag}" for name in
              ("raw", "workloads", "transitions", "deadletter", "definitions", "pods", "nodes", "state")}
    with KafkaBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=broker.bootstrap_servers,
                   WORKLOADMAP_CLIENT_ID=f"state-{tag}", WORKLOADMAP_PARTITIONS=str(PARTITIONS),
                   **{f"WORKLOADMAP_{name.upper()}_TOPIC": topic for name, topic in topics.items()})
        log = open(Path(tmp) / "processors.log", "wb")
        worker = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "processors"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, cwd=tmp)
        stop = threading.Event()
        published = [0]

        def publishing():
            publisher = KafkaPublisher(broker.bootstrap_servers, topic=topics["raw"], client_id=f"state-{tag}")
            rv = itertools.count(1000)
            t0 = time.time()
            for due, etype, obj in churn(args.rate, args.lifetime, args.namespaces):
                if stop.is_set():
                    break
                wait = t0 + due - time.time()
                if wait > 0:
                    time.sleep(wait)
                publisher.publish_raw(*_stamped(next(rv), etype, obj, records.now_iso()))
                published[0] += 1
            publisher.flush()
            publisher.close()

        settings = WorkerSettings(bootstrap_servers=broker.bootstrap_servers, state_topic=topics["state"])
        pods_topic = [TopicPartition(topics["pods"], p) for p in range(PARTITIONS)]
        samples = []
        try:
            time.sleep(10)   # the worker creates the topics and joins its group
            sender = threading.Thread(target=publishing, daemon=True)
            started = time.time()
            cpu0 = cpu_seconds(worker.pid)
            sender.start()
            while time.time() < started + args.minutes * 60:
                time.sleep(max(0.0, started + (len(samples) + 1) * args.sample - time.time()))
                if worker.poll() is not None:
                    raise RuntimeError("the worker exited:\n" + Path(log.name).read_text()[-2000:])
                states = PartitionStates(settings)
                t = time.perf_counter()
                states.recover(list(range(PARTITIONS)))
                seconds = time.perf_counter() - t
                consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
                history = sum(consumer.end_offsets(pods_topic).values())
                consumer.close()
                sample = {"benchmark": "state_kafka", "at_s": round(time.time() - started),
                          "published": published[0], "worker_rss_mb": round(rss_mb(worker.pid), 1),
                          "recovery_s": round(seconds, 3), "recovery_messages": sum(states.recovered.values()),
                          "pod_topic_offsets": history, **_counts(states.by_partition.values())}
                samples.append(sample)
                print(json.dumps(sample), flush=True)
            used = cpu_seconds(worker.pid) - cpu0
        finally:
            stop.set()
            worker.terminate()
            worker.wait(60)
        # the second half: long past the first deletions forgotten, their tombstones cleaned away
        second = samples[len(samples) // 2:]
        warm, last = second[0], samples[-1]
        print(json.dumps({
            "benchmark": "state_kafka_summary", "minutes": args.minutes, "rate": args.rate,
            "lifetime_s": args.lifetime, "published": last["published"],
            "worker_cpu_us_per_event": round(used / max(1, last["published"]) * 1e6, 1),
            "second_half_from_s": warm["at_s"],
            "worker_rss_mb": [warm["worker_rss_mb"], last["worker_rss_mb"]],
            "worker_rss_growth": round(last["worker_rss_mb"] / warm["worker_rss_mb"], 3),
            "worker_rss_mb_max": max(s["worker_rss_mb"] for s in second),
            "recovery_s": [warm["recovery_s"], last["recovery_s"]],
            "recovery_s_max": max(s["recovery_s"] for s in second),
            "recovery_messages": [warm["recovery_messages"], last["recovery_messages"]],
            "recovery_messages_max": max(s["recovery_messages"] for s in second),
            "pod_topic_offsets": [warm["pod_topic_offsets"], last["pod_topic_offsets"]],
            "load_average": os.getloadavg()}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000, help="events per second (of event time)")
    parser.add_argument("--lifetime", type=float, default=30, help="seconds a pod (and a Job) lives")
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--events", type=int, default=600_000, help="in one process: events in all")
    parser.add_argument("--every", type=int, default=50_000, help="in one process: events between samples")
    parser.add_argument("--extra", type=int, default=20_000, help="in one process: live pods added at the end")
    parser.add_argument("--kafka", action="store_true", help="a real broker and worker (see the docstring)")
    parser.add_argument("--minutes", type=float, default=6)
    parser.add_argument("--sample", type=float, default=30, help="with --kafka: seconds between samples")
    args = parser.parse_args()
    if args.kafka:
        through_kafka(args)
    else:
        in_process(args)


if __name__ == "__main__":
    main()
