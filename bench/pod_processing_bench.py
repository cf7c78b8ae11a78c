"""Benchmark: the processors on a pod stream, in one process (no broker): pod events/s and CPU per event.

What it measures is the processors' part of the pod pipeline: ``Processor.process_batch`` (parse,
attribute through the owner chain, place with the catalog's pod selectors, compare with the pod's
state, encode the records) on batches of --batch raw messages of one partition, as a worker runs
them; Kafka and the writer are left out (bench/pipeline_bench.py measures them).

The stream (``pod_stream``): --pods pods of JobSets (pod -> Job -> JobSet, labelled as the JobSet
controller labels them, projected as the watchers publish them), spread over --namespaces
namespaces, each through a kubelet's usual life: created (Pending), bound to a node, Running
(phase churn: no record), Ready flipping (churn: no record), Succeeded, deleted; the JobSets and
Jobs come first in half the namespaces and after their pods in the other half (pods waiting for
their owners).  Printed: one JSON line with events/s, CPU microseconds per event (process CPU
time), pod records per pod event, and the machine's load average.

``--kafka``: the same stream through a real broker and one ``workloadmap run processors`` worker
(exactly-once transactions, the pods, nodes and state topics; no writer): events/s from the first
publish until the worker's group has committed the last raw offset, and CPU microseconds per event
of the worker and of the broker.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workloadmap.catalog import Catalog, records  # noqa: E402
from workloadmap.catalog.attributing import pod_paths, project_pod  # noqa: E402
from workloadmap.ingest.publishing import event_key  # noqa: E402
from workloadmap.processors.processing import MemoryStates, Processor  # noqa: E402

PODS_PER_JOB, JOBS_PER_JOBSET = 8, 4


def pod_stream(pods: int, namespaces: int, start: float = 1_764_950_400.0) -> list[tuple[bytes, bytes]]:
    """(key, value) raw messages of the stream described in the module docstring."""
    paths = pod_paths(Catalog.builtin())
    out, rv, t = [], 1000, start

    def emit(obj, etype):
        nonlocal rv, t
        rv += 1
        t += 0.001
        obj["metadata"]["resourceVersion"] = str(rv)
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
        event = records.raw_event("bench", etype, obj, at)
        out.append((event_key(event), records.encode(event)))

    per_ns = max(1, pods // namespaces)
    made = 0
    for n in range(namespaces):
        ns = f"team-{n:03d}"
        owners, lives = [], []
        for p in range(min(per_ns, pods - made)):
            job, i = divmod(p, PODS_PER_JOB)
            jobset = job // JOBS_PER_JOBSET
            jobset_obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                          "metadata": {"name": f"train-{jobset}", "namespace": ns, "uid": f"{ns}-js-{jobset}",
                                       "generation": 1},
                          "spec": {"replicatedJobs": [{"name": "workers", "replicas": JOBS_PER_JOBSET, "template": {
                              "spec": {"parallelism": PODS_PER_JOB, "completions": PODS_PER_JOB, "template": {"spec": {
                                  "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}]},
                          "status": {"replicatedJobsStatus": [{"name": "workers", "active": JOBS_PER_JOBSET, "ready": 0}]}}
            job_obj = {"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": f"train-{jobset}-workers-{job % JOBS_PER_JOBSET}", "namespace": ns,
                                    "uid": f"{ns}-job-{job}", "generation": 1, "ownerReferences": [{
                                        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                        "name": f"train-{jobset}", "uid": f"{ns}-js-{jobset}", "controller": True}]},
                       "spec": {"parallelism": PODS_PER_JOB}}
            if i == 0:
                if job % JOBS_PER_JOBSET == 0:
                    owners.append(jobset_obj)
                owners.append(job_obj)
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{job_obj['metadata']['name']}-{i}", "namespace": ns, "uid": f"{ns}-pod-{p}",
                "creationTimestamp": "2026-12-05T00:00:00Z",
                "labels": {"jobset.sigs.k8s.io/jobset-name": f"train-{jobset}",
                           "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                           "jobset.sigs.k8s.io/job-index": str(job % JOBS_PER_JOBSET),
                           "batch.kubernetes.io/job-completion-index": str(i)},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_obj["metadata"]["name"],
                                     "uid": f"{ns}-job-{job}", "controller": True}]},
                "spec": {"schedulerName": "default-scheduler", "containers": [
                    {"name": "trainer", "image": "registry.example/train:1", "env": [{"name": "A", "value": "b"}],
                     "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                                   "limits": {"nvidia.com/gpu": "8"}}}]},
                "status": {"phase": "Pending"}}
            lives.append(pod)
            made += 1
        owners_first = n % 2 == 0
        if owners_first:
            for o in owners:
                emit(o, "ADDED")

        def step(change, etype="MODIFIED"):
            for pod in lives:
                change(pod)
                emit(project_pod(pod, paths), etype)

        step(lambda p: None, "ADDED")
        step(lambda p: p["spec"].update(nodeName=f"gpu-{hash(p['metadata']['uid']) % 100}"))
        step(lambda p: p["status"].update(phase="Running", conditions=[{"type": "Ready", "status": "False"}]))
        if not owners_first:
            for o in owners:
                emit(o, "ADDED")
        step(lambda p: p["status"].update(conditions=[{"type": "Ready", "status": "True"}]))
        step(lambda p: p["status"].update(phase="Succeeded", conditions=[{"type": "Ready", "status": "False"}]))
        step(lambda p: None, "DELETED")
    return out


def through_kafka(messages: list, pod_events: int, partitions: int = 3) -> dict:
    """The stream through a broker and one worker (see the module docstring)."""
    import subprocess
    import tempfile
    import uuid

    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    from bench.pipeline_bench import cpu_seconds, publish
    from tests.services.kafka_broker import KafkaBroker

    tag = uuid.uuid4().hex[:8]
    with KafkaBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=broker.bootstrap_servers, WORKLOADMAP_CLIENT_ID=f"pods-{tag}",
                   WORKLOADMAP_PARTITIONS=str(partitions),
                   **{f"WORKLOADMAP_{name.upper()}_TOPIC": f"{name}-{tag}"
                      for name in ("raw", "workloads", "transitions", "deadletter", "definitions", "pods", "nodes",
                                   "state")})
        log = open(Path(tmp) / "processors.log", "wb")
        worker = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "processors"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, cwd=tmp)
        try:
            admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
            deadline = time.time() + 120
            while f"raw-{tag}" not in admin.list_topics():
                if time.time() > deadline or worker.poll() is not None:
                    raise RuntimeError("the worker did not create its topics:\n" + Path(log.name).read_text()[-2000:])
                time.sleep(0.5)
            time.sleep(8)   # it joins its group and recovers its (empty) state
            cpu = {"processor": cpu_seconds(worker.pid), "broker": cpu_seconds(broker._proc.pid)}
            started, (_, published, publisher_cpu) = publish(broker.bootstrap_servers, f"raw-{tag}",
                                                             [(k, v, None) for k, v in messages])
            tps = [TopicPartition(f"raw-{tag}", p) for p in range(partitions)]
            # the worker's group's committed offsets, read without joining the group
            consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=f"pods-{tag}-processors",
                                     enable_auto_commit=False)
            ends = sum(consumer.end_offsets(tps).values())
            while True:
                done = sum(consumer.committed(tp) or 0 for tp in tps)
                if done >= ends:
                    break
                if worker.poll() is not None or time.time() > started + 900:
                    raise RuntimeError(f"{done} of {ends} committed:\n" + Path(log.name).read_text()[-2000:])
                time.sleep(0.05)
            finished = time.time()
            consumer.close()
            used = {name: cpu_seconds(pid) - cpu[name] for name, pid in
                    (("processor", worker.pid), ("broker", broker._proc.pid))}
            admin.close()
        finally:
            worker.terminate()
            worker.wait(60)
    return {"events_per_s": round(len(messages) / (finished - started)),
            "publish_seconds": round(published - started, 2),
            "cpu_us_per_event": {**{k: round(v / len(messages) * 1e6, 1) for k, v in used.items()},
                                 "publisher": round(publisher_cpu / len(messages) * 1e6, 1)},
            "partitions": partitions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--namespaces", type=int, default=40)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--kafka", action="store_true", help="through a real broker and one worker")
    args = parser.parse_args()
    messages = pod_stream(args.pods, args.namespaces)
    pod_events = sum(1 for _, v in messages if b'"kind":"Pod"' in v)
    if args.kafka:
        print(json.dumps({"benchmark": "pod_processing_kafka", "events": len(messages), "pod_events": pod_events,
                          "pods": args.pods, **through_kafka(messages, pod_events), "load_average": os.getloadavg()}))
        return
    processor, states = Processor(), MemoryStates()
    processor.process_batch([(k, v, records.RAW_TOPIC, 0, i) for i, (k, v) in enumerate(messages[:2000])],
                            lambda p: MemoryStates())   # warm-up (the resolver's caches) on a state of its own
    counts = {"pods": 0, "records": 0, "dead_letters": 0, "state": 0}
    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for start in range(0, len(messages), args.batch):
        batch = [(k, v, records.RAW_TOPIC, 0, start + i) for i, (k, v) in enumerate(messages[start:start + args.batch])]
        for out in processor.process_batch(batch, lambda p: states).values():
            for name in counts:
                counts[name] += len(getattr(out, name))
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    print(json.dumps({
        "benchmark": "pod_processing", "events": len(messages), "pod_events": pod_events, "pods": args.pods,
        "seconds": round(seconds, 3), "events_per_s": round(len(messages) / seconds),
        "cpu_us_per_event": round(cpu / len(messages) * 1e6, 1),
        "pod_records": counts["pods"], "pod_records_per_pod_event": round(counts["pods"] / pod_events, 3),
        "workload_records": counts["records"], "state_messages": counts["state"],
        "dead_letters": counts["dead_letters"], "batch": args.batch, "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
