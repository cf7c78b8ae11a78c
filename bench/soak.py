"""Soak under faults: the full stack at a steady rate while its processes are killed in turn.

The stack, each part a process of its own as the chart runs them: a real Kafka broker (KRaft,
tests/services), a real kube-apiserver + etcd with the frameworks' CRDs, `workloadmap run
watchers` watching it, `run processors` (--workers, 2), `run warehouse --serve --metrics` and
`run exporter`.  The events come from two sources, because the API server cannot take the whole
rate on these cores beside everything else:

- the API server (--kube-rate writes/s, 200): a driver creates PyTorchJobs and their pods
  (labelled as the training operator labels them), binds the pods to nodes, moves them through
  their phases and the jobs through their conditions, deletes both; the watchers turn each
  write into a raw event, as in a real cluster;
- a raw publisher for the rest of --rate (2,000 events/s in all): the simulator's multi-cluster
  history (ingest/scheduling.py: workloads of every framework, their owners, their pods placed
  on nodes, the nodes), replayed round after round in the same three clusters with fresh uids
  (objects deleted and created again under their names, as a cluster's jobs come and go) and
  fresh node names (a node is known by its name, and each round replays the same event times:
  a node of the same name would be older than its deletion in the round before), each round ending with the deletion of what it left alive (so the live state stays bounded and RSS
  can be compared), with one malformed message in 200 (dead-lettered).  Not fresh cluster names:
  the exporter keeps a cluster's counters (records, transitions, freshness) as long as it runs, as
  a Prometheus exporter must, so a new cluster every round grew its memory with the run's length
  while a real fleet's clusters are a fixed set.

Faults: every minute one process is SIGKILLed and started again at once, in turn a processor
worker, the writer, the watchers and the exporter; the broker is restarted once, half a minute
after the middle of the run.  Progress goes to stderr as a JSON line per minute; the last line
on stdout is the figures, with each invariant checked explicitly (`held` and its numbers):

- raw in = records + dead letters: every raw message on the raw topic is a workload record in
  the warehouse, a pod or node record on its topic, a dead letter (matched by its raw partition
  and offset), a duplicate of an earlier message (same cluster, uid, resourceVersion, deletion:
  the watchers republish what their checkpoint had not recorded yet when they were killed), the
  repeated deletion of a deleted object (a restarted watcher's relist, under the list's version),
  a pod or node event that changes nothing the warehouse keeps (status churn: no record by
  design; that none was lost is checked on the end state: every pod's and node's last record
  says what the processors keep of its last event: a pod's node and state, not its phase: kept_pod), or an object with no record of its own by design (owned by
  another, or an owner kind);
- no duplicate rows: workload states per (cluster, uid, resourceVersion, deleted), transitions
  per (cluster, uid, time, status);
- no missing transitions: every state whose status differs from the object's state before it
  has its transition, and every transition its state;
- the exporter's series equal the warehouse's current state: each live workload's status and
  requested GPUs, and nothing else;
- the longest pause of the pipeline: heartbeat objects (one raw key per raw partition, and one
  Deployment on the API server updated each second) are polled through the writer's HTTP reads;
  the pause is the age of the newest heartbeat visible, its maximum over the run (its median
  is the ordinary latency);
- the RSS of every process, every 5 s: judged per stretch of a workloadmap process's life at a
  constant live set that lasted 3 minutes or more, at its end against a minute into it (held: at
  most 1.25 x).  A stretch is a life (a kill starts a new one) or, for a processor worker, the
  part of a life between two rebalances that changed the raw partitions it holds (it logs them,
  processors/app.py); what a worker holds before its first assignment is its start, not judged.
  Why: RSS must not grow with time at a constant live set, and a worker's live set is its
  partitions' objects: one that takes over a killed peer's partitions legitimately holds about
  half as much again, and judging its life as one counted that step as growth; once the peer is
  back and has them again, the stretch that follows is judged from a minute after that give-back,
  so memory the worker kept from its takeover counts only if it grows on.  Each stretch is shown
  with the partitions held and its RSS a minute in and at its end, so a worker that did not give
  memory back is seen (the same partitions, a higher level than before the takeover).  Why not
  the run's end against its start: every process but the broker's is killed in turn, so "end" is
  then a process a few minutes old, and a minute into a stretch is past its warm-up (state
  recovered, the exporter's replay of the topics, DuckDB's first cached blocks), so what grows
  after it grows with the run's length.  The broker, the API server and etcd are shown, not
  judged (not ours).  The writer's DuckDB runs under a memory limit (--writer-memory-limit,
  128MB), as the chart's writer does (warehouse.duckdbMemoryLimit): DuckDB's buffer pool caches
  the blocks of the file a batch touches, and without a limit (80% of the machine's memory) the
  cache follows the file, which grows with the history the warehouse keeps by design; the limit
  is scaled to this run's file (printed, `warehouse_file_mb`) as the chart's is to a real
  history, so what grows past it in the writer is growth and not the cache.

    python bench/soak.py [--minutes 10] [--rate 2000] [--kube-rate 200] [--workers 2]

A run takes --minutes plus about two (start, drain, checks).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import multiprocessing
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services.kafka_broker import KafkaBroker  # noqa: E402
from tests.services.kube_api import CRD_DIR, WORKLOADMAP_CRD, KubeAPIServer  # noqa: E402
from tests.services.processes import free_ports  # noqa: E402
from workloadmap.catalog import records  # noqa: E402

WORKLOADMAP = [sys.executable, "-m", "workloadmap"]
KUBE_CLUSTER = "soak-kube"
HEARTBEAT_CLUSTER = "soak-heartbeat"
HEARTBEAT_NS = "soak-heartbeat"


def log(**fields) -> None:
    print(json.dumps(fields), file=sys.stderr, flush=True)


def rss_bytes(pid: int) -> int | None:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def get(url: str, timeout: float = 5.0) -> tuple[int | None, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except OSError:
        return None, b""


# ----------------------------------------------------------------------------- the raw publisher
def _base_history(workloads: int, seed: int) -> tuple[list, list, list]:
    """The simulator's cluster names, its history as (cluster index, key, value) messages, and the
    DELETED events that end what it leaves alive (pods first, nodes last)."""
    from workloadmap.ingest.scheduling import simulate_clusters
    from workloadmap.ingest.simulating import cluster_names

    names = cluster_names(3)
    messages, last = [], {}
    for event in simulate_clusters(clusters=3, workloads=workloads, days=7, seed=seed):
        meta = event["object"]["metadata"]
        messages.append((names.index(event["cluster"]), records.raw_key(event["cluster"], event["object"]),
                         records.encode(event)))
        last[(event["cluster"], meta["uid"])] = event
    closing = []
    order = {"Pod": 0, "Node": 2}
    for event in sorted(last.values(), key=lambda e: order.get(e["object"]["kind"], 1)):
        if event["type"] == "DELETED":
            continue
        obj = json.loads(records.encode(event["object"]))
        meta = obj["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        meta["deletionTimestamp"] = event["observedAt"]
        end = {**event, "type": "DELETED", "object": obj}
        closing.append((names.index(event["cluster"]), records.raw_key(event["cluster"], obj), records.encode(end)))
    return names, messages, closing


def heartbeat_keys(partitions: int) -> list[str]:
    """One namespace per raw partition (as kafka-python's default partitioner places its key)."""
    from kafka.partitioner.default import murmur2

    chosen: dict[int, str] = {}
    i = 0
    while len(chosen) < partitions:
        ns = f"{HEARTBEAT_NS}-{i}"
        key = records.raw_key(HEARTBEAT_CLUSTER, {"metadata": {"namespace": ns}})
        chosen.setdefault((murmur2(key) & 0x7FFFFFFF) % partitions, ns)
        i += 1
    return [chosen[p] for p in range(partitions)]


def _heartbeat_event(template: dict, ns: str, now: float) -> tuple[bytes, bytes]:
    obj = json.loads(json.dumps(template))
    obj["metadata"] = {"name": "heartbeat", "namespace": ns, "uid": f"heartbeat-{ns}",
                       "resourceVersion": str(int(now * 1000)), "generation": 1,
                       "creationTimestamp": "2026-12-01T00:00:00Z"}
    event = {"cluster": HEARTBEAT_CLUSTER, "type": "MODIFIED", "observedAt": records.now_iso(), "object": obj}
    return records.raw_key(HEARTBEAT_CLUSTER, obj), records.encode(event)


def _publishing(bootstrap: str, rate: float, partitions: int, workloads: int, ready, go, stop, published,
                last_beat) -> None:
    """Child process: the simulated history round after round at `rate` messages/s, heartbeats each 0.5 s."""
    from tests.kube_objects import example
    from workloadmap.ingest.publishing import KafkaPublisher

    names, base, closing = _base_history(workloads, seed=30)
    round_messages = base + closing
    node_names = [(f'"name":"{n}-'.encode(), f'"nodeName":"{n}-'.encode()) for n in names]
    deployment = example("Deployment")
    deployment.pop("status", None)
    heartbeats = heartbeat_keys(partitions)
    publisher = KafkaPublisher(bootstrap, client_id="soak-publisher")
    ready.set()
    go.wait()
    t0 = time.time()
    sent = 0
    next_beat = t0
    rnd = 0
    failures = 0
    while not stop.is_set():
        renamed = f'"uid":"r{rnd}-'.encode()
        renamed_nodes = [(f'"name":"{n}-r{rnd}-'.encode(), f'"nodeName":"{n}-r{rnd}-'.encode()) for n in names]
        for i, (c, key, value) in enumerate(round_messages):
            if stop.is_set():
                break
            now = time.time()
            if now >= next_beat:
                for ns in heartbeats:
                    publisher.publish_raw(*_heartbeat_event(deployment, ns, now))
                last_beat.value = int(now * 1000) / 1000
                next_beat += 0.5
            due = t0 + sent / rate
            if due > now:
                time.sleep(due - now)
            value = value.replace(b'"uid":"', renamed)   # the object's and its owners' alike
            for old_name, new_name in zip(node_names[c], renamed_nodes[c]):
                value = value.replace(old_name, new_name)
            try:
                publisher.publish_raw(key, value)
                if i % 200 == 199:   # a malformed message: the event cut short
                    publisher.publish_raw(key, value[: len(value) // 2])
            except Exception:   # noqa: BLE001 - a message the producer refused never reached the raw topic
                failures += 1
            sent += 1
            if sent % 1000 == 0:
                published.value = sent
        rnd += 1
    try:
        publisher.flush(120)
    except RuntimeError as exc:
        print(f"publisher: {exc}", file=sys.stderr)
    publisher.close()
    published.value = sent


# ----------------------------------------------------------------------------- the API server driver
class _Kube:
    """One keep-alive HTTPS connection to the API server (a client-go like writer)."""

    def __init__(self, server: str, token: str, ca_file: str):
        self.host, self.port = server.removeprefix("https://").split(":")
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca_file)
        self.conn = None

    def request(self, method: str, path: str, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(5):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, int(self.port), context=self.ctx, timeout=30)
            try:
                headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
                if data is not None:
                    headers["Content-Type"] = content_type
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                time.sleep(0.5 * (attempt + 1))
                continue
            if resp.status == 409 and method == "POST":
                return None
            if resp.status == 404 and method == "DELETE":
                return None
            if resp.status >= 400:
                raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
            return json.loads(raw)
        raise RuntimeError(f"{method} {path}: the API server did not answer")


class _Bucket:
    """Writes per second shared by the driver's threads."""

    def __init__(self, rate: float):
        self.rate, self.lock, self.next = rate, threading.Lock(), time.time()

    def take(self) -> None:
        with self.lock:
            now = time.time()
            self.next = max(self.next + 1 / self.rate, now - 1)
            wait = self.next - now
        if wait > 0:
            time.sleep(wait)


def _lifecycle(kube: _Kube, bucket: _Bucket, ns: str, name: str, nodes: list[str], counter) -> None:
    """A PyTorchJob and its three pods, from creation to deletion, as its operator, the scheduler and
    the kubelets would write them."""
    from tests import kube_objects as k

    def write(method, path, body=None, content_type="application/json"):
        bucket.take()
        out = kube.request(method, path, body, content_type)
        with counter.get_lock():
            counter.value += 1
        return out

    base = f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
    job = k.example("PyTorchJob")
    job.pop("status", None)
    job["metadata"] = {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/part-of": "soak"}}
    job = write("POST", base, job)
    if job is None:
        return
    conditions = [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}]

    def status(extra):
        nonlocal job
        conditions.extend(extra)
        job["status"] = {"conditions": list(conditions)}
        job = write("PUT", f"{base}/{name}/status", job)

    status([])
    pods = []
    for role, index in (("master", 0), ("worker", 0), ("worker", 1)):
        body = k.pod(f"{name}-{role}-{index}", owner=job, gpus=8, labels={
            "training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": role,
            "training.kubeflow.org/replica-index": str(index), "training.kubeflow.org/operator-name":
            "pytorchjob-controller"})
        pods.append(write("POST", f"/api/v1/namespaces/{ns}/pods", body))
    for i, pod in enumerate(pods):
        path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
        write("POST", f"{path}/binding", {"apiVersion": "v1", "kind": "Binding",
                                          "metadata": {"name": pod["metadata"]["name"]},
                                          "target": {"apiVersion": "v1", "kind": "Node",
                                                     "name": nodes[(hash(name) + i) % len(nodes)]}})
        current = kube.request("GET", path)
        current["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        pods[i] = write("PUT", f"{path}/status", current)
    status([{"type": "Running", "status": "True", "reason": "PyTorchJobRunning"}])
    conditions[-1]["status"] = "False"
    status([{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}])
    for pod in pods:
        path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
        pod["status"] = {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False"}]}
        write("PUT", f"{path}/status", pod)
        write("DELETE", path, {"gracePeriodSeconds": 0})
    write("DELETE", f"{base}/{name}")


def _driving(server: str, token: str, ca_file: str, rate: float, threads: int, beats: str,
             ready, go, stop, counter) -> None:
    """Child process: PyTorchJob lifecycles at `rate` writes/s; a Deployment's annotation each second
    (its resourceVersion and the time written to `beats`: the watch path's heartbeat)."""
    from tests import kube_objects as k

    setup = _Kube(server, token, ca_file)
    nodes = [f"soak-node-{i}" for i in range(16)]
    for name in nodes:
        if setup.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                   "metadata": {"name": name}}) is not None:
            node = setup.request("GET", f"/api/v1/nodes/{name}")
            amounts = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
            node["status"] = {"allocatable": amounts, "capacity": amounts,
                              "conditions": [{"type": "Ready", "status": "True"}]}
            setup.request("PUT", f"/api/v1/nodes/{name}/status", node)
    for ns in ("soak", HEARTBEAT_NS):
        setup.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": ns}})
    deployment = k.example("Deployment")
    deployment.pop("status", None)
    deployment["metadata"] = {"name": "heartbeat", "namespace": HEARTBEAT_NS}
    setup.request("POST", f"/apis/apps/v1/namespaces/{HEARTBEAT_NS}/deployments", deployment)
    ready.set()
    go.wait()
    bucket = _Bucket(rate)
    errors: list[str] = []

    def worker(n: int) -> None:
        kube = _Kube(server, token, ca_file)
        i = 0
        while not stop.is_set():
            try:
                _lifecycle(kube, bucket, "soak", f"pj-{n}-{i}", nodes, counter)
            except Exception as exc:   # noqa: BLE001 - said at the end; the soak goes on
                errors.append(repr(exc)[:300])
            i += 1

    workers = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(threads)]
    for t in workers:
        t.start()
    beat = _Kube(server, token, ca_file)
    with open(beats, "a") as out:
        while not stop.wait(1.0):
            try:
                patched = beat.request("PATCH", f"/apis/apps/v1/namespaces/{HEARTBEAT_NS}/deployments/heartbeat",
                                       {"metadata": {"annotations": {"soak/beat": str(time.time())}}},
                                       content_type="application/merge-patch+json")
                out.write(f"{patched['metadata']['resourceVersion']} {time.time()}\n")
                out.flush()
            except Exception as exc:   # noqa: BLE001
                errors.append(repr(exc)[:300])
    for t in workers:
        t.join(60)
    if errors:
        print(json.dumps({"kube_driver_errors": len(errors), "first": errors[:3]}), file=sys.stderr)


# ----------------------------------------------------------------------------- the services
class Service:
    """One `workloadmap run ...` process, killed and started again as a kubelet restarts a container."""

    def __init__(self, name: str, args: list[str], env: dict, workdir: Path):
        self.name, self.args, self.env, self.workdir = name, args, env, workdir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        path = self.workdir / f"{self.name}.log"
        self.life_log_start = path.stat().st_size if path.exists() else 0   # this life's lines follow
        log_file = open(path, "ab")
        self.proc = subprocess.Popen([*WORKLOADMAP, *self.args], env=self.env, stdout=log_file,
                                     stderr=subprocess.STDOUT, cwd=self.workdir)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int | None:
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None

    def log_tail(self, n: int = 3000) -> str:
        path = self.workdir / f"{self.name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def holding(self) -> tuple[int, ...] | None:
        """The raw partitions a processor worker's current life holds since its last rebalance (it
        logs them: processors/app.py), None before its first assignment."""
        try:
            with open(self.workdir / f"{self.name}.log", "rb") as f:
                f.seek(self.life_log_start)
                held = HELD.findall(f.read().decode(errors="replace"))
        except OSError:
            return None
        return tuple(int(p) for p in held[-1].split(", ") if p) if held else None


class Heartbeats:
    """The age of the newest heartbeat visible in the warehouse, sampled every half second."""

    def __init__(self, serve: str, raw_namespaces: list[str], kube_beats: Path):
        self.serve, self.raw_namespaces, self.kube_beats = serve, raw_namespaces, kube_beats
        self.seen = {ns: 0.0 for ns in [*raw_namespaces, "kube"]}   # newest visible beat's time
        self.samples: list[tuple[float, float, float]] = []       # (time, raw age, kube age)
        self.kube_times: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _record_rv(self, cluster: str, ns: str, kind: str) -> str | None:
        status, body = get(f"{self.serve}/api/v1/workloads/{cluster}/{ns}/{kind}/heartbeat?limit=1")
        if status != 200:
            return None
        return json.loads(body)["record"]["resourceVersion"]

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            for ns in self.raw_namespaces:
                rv = self._record_rv(HEARTBEAT_CLUSTER, ns, "Deployment")
                if rv is not None:
                    self.seen[ns] = max(self.seen[ns], int(rv) / 1000)
            if self.kube_beats.exists():
                for line in self.kube_beats.read_text().splitlines():
                    rv, at = line.split()
                    self.kube_times.setdefault(rv, float(at))
            rv = self._record_rv(KUBE_CLUSTER, HEARTBEAT_NS, "Deployment")
            if rv is not None and rv in self.kube_times:
                self.seen["kube"] = max(self.seen["kube"], self.kube_times[rv])
            now = time.time()
            raw = [self.seen[ns] for ns in self.raw_namespaces]
            if all(raw) and self.seen["kube"]:
                self.samples.append((now, now - min(raw), now - self.seen["kube"]))

    def pauses(self, since: float = 0.0) -> dict:
        raw = sorted(s[1] for s in self.samples if s[0] >= since)
        kube = sorted(s[2] for s in self.samples if s[0] >= since)
        if not raw:
            return {}
        return {"raw_to_warehouse_max_seconds": round(raw[-1], 1),
                "raw_to_warehouse_p50_seconds": round(raw[len(raw) // 2], 2),
                "api_server_to_warehouse_max_seconds": round(kube[-1], 1),
                "api_server_to_warehouse_p50_seconds": round(kube[len(kube) // 2], 2)}


# A process's RSS is judged per stretch at a constant live set (a life, or a worker's partitions
# between two rebalances: see the module docstring), from WARM seconds into it to its end: the
# first minute of a stretch is its warm-up (a worker's state recovered, the exporter reading the
# topics from their start, DuckDB caching the blocks the writer's first batches touch), so growth
# after it is what would go on with the run's length.  A stretch shorter than LIFE_JUDGED has too
# little after its warm-up to say anything.
WARM = 60.0
LIFE_JUDGED = 180.0
RSS_GROWTH_HELD = 1.25
HELD = re.compile(r"raw partitions \[([0-9, ]*)\] held: ")   # a worker's holding (processors/app.py)


class RssSamples:
    """Every process's RSS every 5 s, by name, with its pid (a new pid is a new life) and, for a
    processor worker, the raw partitions it holds (`holding(name)`: None for the other processes,
    and for a worker before its first assignment)."""

    def __init__(self, pids, holding=lambda name: None):
        self.pids = pids
        self.holding = holding
        self.samples: dict[str, list[tuple[float, int, int, tuple | None]]] = {}
        self.workers: set[str] = set()   # the processes that said what they hold
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(5.0):
            now = time.time()
            for name, pid in self.pids().items():
                value = rss_bytes(pid)
                if value:
                    held = self.holding(name)
                    if held is not None:
                        self.workers.add(name)
                    self.samples.setdefault(name, []).append((now, pid, value, held))

    def lives(self) -> dict:
        """Per process, its stretches long enough to judge (a life; a worker's partitions between two
        rebalances): the partitions held, MB WARM s in and at the end, their ratio, the MB each minute
        (the slope)."""
        out = {}
        for name, samples in self.samples.items():
            worker = name in self.workers
            stretches: list[list] = []
            last = None
            for at, pid, value, held in samples:
                if worker and held is None:
                    continue   # a worker's start, before its first assignment
                if (pid, held) != last:
                    stretches.append([])
                    last = (pid, held)
                stretches[-1].append((at, value, held))
            judged = []
            for stretch in stretches:
                if stretch[-1][0] - stretch[0][0] < LIFE_JUDGED:
                    continue
                warm = next(value for at, value, _ in stretch if at >= stretch[0][0] + WARM)
                end = stretch[-1][1]
                judged.append({**({"partitions": list(stretch[0][2])} if worker else {}),
                               "seconds": round(stretch[-1][0] - stretch[0][0]), "warm_mb": round(warm / 2**20),
                               "end_mb": round(end / 2**20), "end_over_warm": round(end / warm, 2),
                               "mb_each_minute": [round(v / 2**20) for at, v, _ in stretch[::12]]})
            out[name] = judged
        return out


# ----------------------------------------------------------------------------- the checks
def read_topic(bootstrap: str, topic: str, on_message) -> int:
    """Every committed message of a topic from its beginning to its current end; returns the count."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed",
                             fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024,
                             max_poll_records=10_000)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        left = {tp for tp in tps if ends[tp] > 0}
        count = 0
        while left:
            for tp, batch in consumer.poll(timeout_ms=2000).items():
                for m in batch:
                    on_message(m)
                    count += 1
                if consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
            for tp in list(left):
                if consumer.position(tp) >= ends[tp]:   # the rest were transaction markers
                    left.discard(tp)
        return count
    finally:
        consumer.close()


def identity(cluster, uid, rv, deleted) -> int:
    return hash((cluster, uid, None if rv is None else str(rv), bool(deleted)))


def account_raw(bootstrap: str, workload_ids: set, pod_ids: set, node_ids: set, dead: set, last_records: dict) -> dict:
    """Sort every raw message into record / dead letter / duplicate / no record by design / missing.

    A pod or node event that changes nothing the warehouse keeps (status churn) has no record by
    design (processors/attributing.py); that none of them was lost instead is checked on the end
    state: the last record of every pod and node says what its last raw event says (`last_records`:
    identity of the object -> (resourceVersion, its kept state) of its newest record)."""
    import orjson

    from workloadmap.catalog import Catalog
    from workloadmap.catalog.attributing import controller_of

    catalog = Catalog.builtin()
    root_kinds: dict = {}
    seen: set = set()
    out = {"raw": 0, "records": 0, "dead_letters": 0, "duplicates": 0, "repeated_deletions": 0,
           "no_record_by_design": 0, "pod_or_node_unchanged": 0, "missing": 0}
    deleted_objects: set = set()
    missing: list = []
    last_raw: dict = {}   # pod or node -> (resourceVersion, kept state) of its newest raw event

    def is_root(obj) -> bool:
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key not in root_kinds:
            try:
                catalog.find(*key)
                root_kinds[key] = not catalog.is_referenced_kind(*key)
            except Exception:   # noqa: BLE001 - an owner kind without a definition
                root_kinds[key] = False
        return root_kinds[key]

    def one(m) -> None:
        out["raw"] += 1
        if (m.partition, m.offset) in dead:
            out["dead_letters"] += 1
            return
        event = orjson.loads(m.value)
        obj = event["object"]
        meta = obj["metadata"]
        ident = identity(event["cluster"], meta["uid"], meta.get("resourceVersion"), event["type"] == "DELETED")
        if ident in seen:
            out["duplicates"] += 1
            return
        seen.add(ident)
        if event["type"] == "DELETED":
            # the deletion of an object already deleted: a restarted watcher's relist publishes the
            # objects its checkpoint still held and the cluster no longer has, under the list's version;
            # the processors drop it (a deleted object takes no event any more)
            obj_id = hash((event["cluster"], meta["uid"]))
            if obj_id in deleted_objects:
                out["repeated_deletions"] += 1
                return
            deleted_objects.add(obj_id)
        kind = obj.get("kind")
        if kind in ("Pod", "Node") and obj.get("apiVersion") == "v1":
            deleted = event["type"] == "DELETED"
            state = (kept_pod_event(obj, deleted) if kind == "Pod"
                     else kept_node(obj.get("spec", {}).get("unschedulable"), deleted))
            obj_key = hash((event["cluster"], meta["uid"]))
            rv = int(meta["resourceVersion"])
            if obj_key not in last_raw or last_raw[obj_key][0] < rv:
                last_raw[obj_key] = (rv, state, event["cluster"], meta.get("name"))
            if ident in pod_ids or ident in node_ids or ident in workload_ids:   # a bare pod: a workload too
                out["records"] += 1
            else:
                out["pod_or_node_unchanged"] += 1
            return
        elif controller_of(obj) is not None or not is_root(obj):
            out["no_record_by_design"] += 1
            return
        else:
            found = ident in workload_ids
        if found:
            out["records"] += 1
        else:
            out["missing"] += 1
            if len(missing) < 5:
                missing.append({"cluster": event["cluster"], "kind": kind, "name": meta.get("name"),
                                "resourceVersion": meta.get("resourceVersion"), "type": event["type"],
                                "partition": m.partition, "offset": m.offset})

    read_topic(bootstrap, records.RAW_TOPIC, one)
    wrong_end = [k for k, (rv, state, *_) in last_raw.items() if last_records.get(k, (None, None))[1] != state]
    out["pods_and_nodes"] = len(last_raw)
    out["pods_and_nodes_whose_last_record_differs_from_their_last_event"] = len(wrong_end)
    if wrong_end:
        out["first_differing_end"] = [{"cluster": last_raw[k][2], "name": last_raw[k][3], "event": last_raw[k][:2],
                                       "record": last_records.get(k)} for k in wrong_end[:5]]
    out["held"] = out["missing"] == 0 and not wrong_end and out["raw"] == (
        out["records"] + out["dead_letters"] + out["duplicates"] + out["repeated_deletions"]
        + out["no_record_by_design"] + out["pod_or_node_unchanged"])
    if missing:
        out["first_missing"] = missing
    return out


def kept_pod(node_name, state, deleted) -> tuple:
    """What a pod's record keeps, compared at the end: its node and its state (Pending, Bound or
    Terminated: catalog.attributing.pod_state), not its phase.  The processors make a pod record
    when the state, node, request or attribution changes (README, the pods topic), so a phase
    change that keeps the state is status churn with no record: Pending to Running on the same
    node, or a bare pod of the simulated history Running without a node (state Pending, as at its
    record of phase Pending).  Comparing phases flagged such a pod as lost whenever the run ended
    inside that stretch of its life (issue 30).  A deleted pod is deleted, whatever its last event
    carried (the watchers' relist publishes a vanished pod's deletion with its identity only)."""
    return ("pod", True) if deleted else ("pod", node_name or None, state)


def kept_pod_event(obj: dict, deleted: bool) -> tuple:
    """``kept_pod`` of a raw pod event: its state as the processors derive it from phase and node."""
    from workloadmap.catalog.attributing import pod_state

    node_name, phase = obj.get("spec", {}).get("nodeName"), obj.get("status", {}).get("phase")
    return kept_pod(node_name, pod_state(phase, node_name, deleted), deleted)


def kept_node(unschedulable, deleted) -> tuple:
    return ("node", True) if deleted else ("node", bool(unschedulable))


def exporter_workloads(metrics_text: str) -> dict:
    """(cluster, namespace, workload, kind) -> [status, requested GPUs] from the exporter's series."""
    out: dict = {}
    label = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
    for line in metrics_text.splitlines():
        if line.startswith("workloadmap_workload_status{") and float(line.rsplit(" ", 1)[1]) == 1:
            labels = dict(label.findall(line))
            key = (labels["cluster"], labels["namespace"], labels["workload"], labels["kind"])
            out.setdefault(key, [None, None])[0] = labels["status"]
        elif line.startswith("workloadmap_workload_requested_gpus{"):
            labels = dict(label.findall(line))
            key = (labels["cluster"], labels["namespace"], labels["workload"], labels["kind"])
            out.setdefault(key, [None, None])[1] = float(line.rsplit(" ", 1)[1])
    return out


def transition_id(cluster: str, uid: str, to: str, at) -> int:
    """A transition's identity, from the topic's record or the warehouse's row (times to the millisecond)."""
    if not isinstance(at, str):
        at = at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
    elif len(at) == 20:   # no fraction
        at = at[:-1] + ".000Z"
    return hash((cluster, uid, to, at))


def warehouse_checks(path: Path, exported: dict, kafka_transitions: set) -> dict:
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        q = lambda sql: con.execute(sql).fetchall()   # noqa: E731
        states, distinct_states = q("SELECT count(*), count(DISTINCT (cluster, uid, resource_version, deleted)) "
                                    "FROM workload_states")[0]
        transitions, distinct_transitions = q(
            "SELECT count(*), count(DISTINCT (cluster, uid, transitioned_at, to_status)) FROM transitions")[0]
        # a state whose status differs from the state before it (by seq) must have its transition
        expected = """SELECT cluster, uid, status, observed_at FROM (
            SELECT cluster, uid, status, observed_at,
                   lag(status) OVER (PARTITION BY cluster, uid ORDER BY seq) AS before
            FROM workload_states) WHERE before IS DISTINCT FROM status"""
        no_transition = q(f"""SELECT count(*) FROM ({expected}) e ANTI JOIN transitions t
            ON t.cluster = e.cluster AND t.uid = e.uid AND t.to_status = e.status AND t.transitioned_at = e.observed_at""")[0][0]
        lost = q(f"""SELECT e.cluster, e.uid, e.status, e.observed_at FROM ({expected}) e ANTI JOIN transitions t
            ON t.cluster = e.cluster AND t.uid = e.uid AND t.to_status = e.status AND t.transitioned_at = e.observed_at""")
        lost_on_the_topic = sum(1 for c, u, status, at in lost if transition_id(c, u, status, at) in kafka_transitions)
        no_state = q(f"""SELECT count(*) FROM transitions t ANTI JOIN ({expected}) e
            ON t.cluster = e.cluster AND t.uid = e.uid AND t.to_status = e.status AND t.transitioned_at = e.observed_at""")[0][0]
        current = {(c, ns or "", name, kind): [status, float(gpus)] for c, ns, name, kind, status, gpus in
                   q("SELECT cluster, namespace, name, kind, status, gpus FROM current_workloads")}
        workload_ids = {identity(c, u, rv, d) for c, u, rv, d in
                        q("SELECT cluster, uid, resource_version, deleted FROM workload_states")}
    finally:
        con.close()
    differ = [k for k in set(current) | set(exported) if current.get(k) != exported.get(k)]
    return {
        "workload_ids": workload_ids,
        "no_duplicate_rows": {"held": states == distinct_states and transitions == distinct_transitions,
                              "states": states, "distinct_states": distinct_states,
                              "transitions": transitions, "distinct_transitions": distinct_transitions},
        "no_missing_transitions": {"held": no_transition == 0 and no_state == 0, "transitions": transitions,
                                   "status_changes_without_transition": no_transition,
                                   # of those, on the transitions topic (the writer lost them) or not
                                   "of_which_on_the_transitions_topic": lost_on_the_topic,
                                   "transitions_on_the_topic": len(kafka_transitions),
                                   "transitions_without_status_change": no_state},
        "exporter_equals_warehouse": {"held": not differ, "warehouse_live_workloads": len(current),
                                      "exporter_workloads": len(exported), "differing": len(differ),
                                      "first_differing": [{"workload": list(k), "warehouse": current.get(k),
                                                           "exporter": exported.get(k)} for k in differ[:5]]},
    }


# ----------------------------------------------------------------------------- the run
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=2000, help="events/s in all (API server writes + raw publisher)")
    parser.add_argument("--kube-rate", type=int, default=200, help="of which writes/s to the API server")
    parser.add_argument("--workers", type=int, default=2, help="processor workers")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--keep", action="store_true",
                        help="keep the services' logs, checkpoints and DuckDB file (their folder is printed)")
    parser.add_argument("--writer-memory-limit", default="128MB",
                        help="the writer's DuckDB memory limit (WORKLOADMAP_DUCKDB_MEMORY_LIMIT)")
    parser.add_argument("--history-workloads", type=int, default=200,
                        help="workloads of the simulated history replayed each round (3 clusters, 7 days)")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    workdir = Path(tempfile.mkdtemp(prefix="workloadmap-soak-"))
    started = time.time()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # so that the services below are stopped too
    services: dict[str, Service] = {}
    with KafkaBroker() as broker, KubeAPIServer(name="soak") as kube, killing_at_exit(services):
        kube.apply_crds([*sorted(CRD_DIR.glob("*.yaml")), WORKLOADMAP_CRD])
        bootstrap = broker.bootstrap_servers
        env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=bootstrap, WORKLOADMAP_PARTITIONS=str(args.partitions),
                   WORKLOADMAP_CLIENT_ID="soak", WORKLOADMAP_DUCKDB=str(workdir / "warehouse.duckdb"),
                   WORKLOADMAP_DUCKDB_MEMORY_LIMIT=args.writer_memory_limit)
        serve_port, exporter_port, watcher_metrics = free_ports(3)
        serve = f"http://127.0.0.1:{serve_port}"
        services.update({f"processors-{i + 1}": Service(f"processors-{i + 1}", ["run", "processors"], env, workdir)
                         for i in range(args.workers)})
        # no --metrics: that is a second exporter consumer in the writer's process (the chart's probes
        # use it); the cores go to the pipeline, and the exporter process serves the series
        services["warehouse"] = Service("warehouse", ["run", "warehouse", "--serve", f"127.0.0.1:{serve_port}"],
                                        env, workdir)
        services["exporter"] = Service("exporter", ["run", "exporter", "--listen", f"127.0.0.1:{exporter_port}"],
                                       env, workdir)
        services["watchers"] = Service("watchers", ["run", "watchers", "--cluster",
                                                    f"{KUBE_CLUSTER}={kube.kubeconfig}#soak",
                                                    "--checkpoint-dir", str(workdir / "checkpoints"),
                                                    "--metrics", f"127.0.0.1:{watcher_metrics}"], env, workdir)
        services["processors-1"].start()
        wait_for(lambda: records.RAW_TOPIC in topics(bootstrap), 120, "the processors to create the topics",
                 services["processors-1"])
        for name, service in services.items():
            if name != "processors-1":
                service.start()
        wait_for(lambda: get(f"{serve}/healthz")[0] == 200, 120, "the writer's reads", services["warehouse"])
        wait_for(lambda: get(f"http://127.0.0.1:{exporter_port}/readyz")[0] == 200, 120, "the exporter",
                 services["exporter"])
        wait_for(lambda: "first list done" in services["watchers"].log_tail(10**7), 180, "the watchers' lists",
                 services["watchers"])

        stop_load, go = ctx.Event(), ctx.Event()
        published, kube_writes, last_beat = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("d", 0.0)
        beats = workdir / "kube-beats.txt"
        pub_ready, kube_ready = ctx.Event(), ctx.Event()
        publisher = ctx.Process(daemon=True, target=_publishing, args=(bootstrap, args.rate - args.kube_rate, args.partitions,
                                                          args.history_workloads, pub_ready, go, stop_load,
                                                          published, last_beat))
        driver = ctx.Process(daemon=True, target=_driving, args=(kube.server, kube.admin_token, str(kube.ca_file), args.kube_rate,
                                                    16, str(beats), kube_ready, go, stop_load, kube_writes))
        publisher.start()
        driver.start()
        if not (pub_ready.wait(300) and kube_ready.wait(300)):
            raise SystemExit("the publisher or the API server driver did not start")
        heartbeats = Heartbeats(serve, heartbeat_keys(args.partitions), beats)

        def pids() -> dict:
            out = {name: s.proc.pid for name, s in services.items() if s.proc and s.proc.poll() is None}
            out.update(broker=broker._proc.pid, kube_apiserver=kube._apiserver.pid, etcd=kube._etcd.pid,
                       publisher=publisher.pid, api_server_driver=driver.pid)
            return out

        go.set()
        t0 = time.time()
        heartbeats.thread.start()
        faults: list[dict] = []
        supervising = threading.Event()
        lock = threading.Lock()   # a kill and its restart are not a crash

        def supervise() -> None:
            """A process that exits by itself is started again, as a kubelet restarts a container (noted)."""
            while not supervising.wait(0.5):
                with lock:
                    for name, service in services.items():
                        if service.proc.poll() is not None:
                            faults.append({"at_seconds": round(time.time() - t0), "fault": f"{name} exited by "
                                           f"itself ({service.proc.returncode})", "log": service.log_tail(1500)})
                            service.start()

        supervisor = threading.Thread(target=supervise, daemon=True)
        supervisor.start()
        rss = RssSamples(pids, lambda name: services[name].holding() if name.startswith("processors") else None)
        rss.thread.start()
        log(event="load started", setup_seconds=round(t0 - started, 1), rate=args.rate, kube_rate=args.kube_rate,
            workers=args.workers)
        time.sleep(55)   # warm: the state of the first minute built, before the first fault
        rss_start = {name: rss_bytes(pid) for name, pid in pids().items()}
        cpu_start = {name: cpu_seconds(pid) for name, pid in pids().items()}
        duration = args.minutes * 60
        broker_at = (int(args.minutes) // 2) * 60 + 30 if args.minutes >= 2 else None
        restarter = None
        # in turn: a worker (each worker in its turn), the writer, the watchers, the exporter
        order = [[f"processors-{(i // 4) % args.workers + 1}", "warehouse", "watchers", "exporter"][i % 4]
                 for i in range(int(args.minutes) + 1)]
        minute = 1
        while time.time() - t0 < duration:
            elapsed = time.time() - t0
            if broker_at is not None and elapsed >= broker_at and restarter is None:
                restarter = threading.Thread(target=broker.restart, daemon=True)
                restarter.start()
                faults.append({"at_seconds": round(elapsed), "fault": "broker restart"})
            if elapsed >= minute * 60:
                victim = order[minute - 1] if minute < duration / 60 else None
                mark = time.time()
                if victim:
                    with lock:
                        services[victim].kill()
                        services[victim].start()
                    faults.append({"at_seconds": round(elapsed), "fault": f"SIGKILL {victim}"})
                log(minute=minute, raw_published=published.value, api_server_writes=kube_writes.value,
                    fault=f"SIGKILL {victim}" if victim else None,
                    **heartbeats.pauses(since=mark - 60), load_average=os.getloadavg()[0],
                    rss_mb={n: round((rss_bytes(p) or 0) / 2**20) for n, p in pids().items()})
                minute += 1
            time.sleep(0.5)
        stop_load.set()
        rss.stop.set()
        rss_end = {name: rss_bytes(pid) for name, pid in pids().items()}
        cpu_end = {name: cpu_seconds(pid) for name, pid in pids().items()}
        publisher.join(180)
        driver.join(180)
        load_seconds = time.time() - t0
        if restarter is not None:
            restarter.join(120)
        # drain: the heartbeats published last are in the warehouse (so is everything before them in their
        # partitions) and the exporter has read every topic to its end; then the writer is stopped and,
        # until the offsets it stored cover every record of its topics, started again for a while
        drained = wait_for(lambda: all(heartbeats.seen[ns] >= last_beat.value for ns in heartbeats.raw_namespaces)
                           and lag(exporter_port) == 0, 600, None, None)
        # the heartbeats cover what was published before them in their raw partitions, not the watchers'
        # events of the API server's last writes, published after them (a run's exporter missed three
        # deletions of its last second that the warehouse, read after the writer's catch-up, had)
        settled = TopicsSettled(bootstrap, QUIET_SECONDS)
        drained = drained and wait_for(lambda: settled() and lag(exporter_port) == 0, 600, None, None)
        settled.close()
        heartbeats.stop.set()
        exported = exporter_workloads(get(f"http://127.0.0.1:{exporter_port}/metrics", timeout=60)[1].decode())
        supervising.set()
        supervisor.join(10)
        exits = {name: service.stop() for name, service in services.items()}
        writer_behind = None
        for _ in range(30):
            writer_behind = behind(bootstrap, workdir / "warehouse.duckdb")
            if not writer_behind:
                break
            services["warehouse"].start()
            time.sleep(20)
            services["warehouse"].stop()
        drained = drained and not writer_behind
        log(event="load stopped, drained", drained=drained, exits=exits)

        dead: set = set()
        dead_reasons: dict = {}

        def letter(m) -> None:
            d = json.loads(m.value)
            dead_reasons[d["reason"]] = dead_reasons.get(d["reason"], 0) + 1
            if d.get("stage") == "processor" and d.get("topic") == records.RAW_TOPIC:
                dead.add((d["partition"], d["offset"]))

        read_topic(bootstrap, records.DEADLETTER_TOPIC, letter)
        pod_ids: set = set()
        node_ids: set = set()

        def record_into(ids):
            def add(m):
                r = json.loads(m.value)
                ids.add(identity(r["cluster"], r["uid"], r["resourceVersion"], r["deleted"]))
            return add

        last_records: dict = {}

        def kept_into(kept):
            def add(m):
                r = json.loads(m.value)
                key, rv = hash((r["cluster"], r["uid"])), int(r["resourceVersion"])
                if key not in last_records or last_records[key][0] < rv:
                    last_records[key] = (rv, kept(r))
            return add

        def both(*fns):
            return lambda m: [fn(m) for fn in fns]

        read_topic(bootstrap, records.PODS_TOPIC, both(record_into(pod_ids), kept_into(
            lambda r: kept_pod(r["nodeName"], r["state"], r["deleted"]))))
        read_topic(bootstrap, records.NODES_TOPIC, both(record_into(node_ids), kept_into(
            lambda r: kept_node(r["unschedulable"], r["deleted"]))))
        kafka_transitions: set = set()
        read_topic(bootstrap, records.TRANSITIONS_TOPIC, lambda m: kafka_transitions.add(transition_id(
            **{k: v for k, v in json.loads(m.value).items() if k in ("cluster", "uid", "to", "at")})))
        checks = warehouse_checks(workdir / "warehouse.duckdb", exported, kafka_transitions)
        raw = account_raw(bootstrap, checks.pop("workload_ids"), pod_ids, node_ids, dead, last_records)
        raw["dead_letter_reasons"] = dead_reasons

    pauses = heartbeats.pauses()
    growth = {name: round(rss_end[name] / rss_start[name], 2) for name in rss_start
              if rss_start.get(name) and rss_end.get(name)}
    lives = rss.lives()
    # CPU per event of the processes that ran the whole load (killed ones restarted: not comparable)
    events = published.value + kube_writes.value
    cpu_per_event = {name: round((cpu_end[name] - cpu_start[name]) * 1e6 / events, 1) for name in cpu_start
                     if cpu_end.get(name) is not None and cpu_start.get(name) is not None
                     and cpu_end[name] >= cpu_start[name]}
    result = {
        "benchmark": "soak under faults", "minutes": args.minutes, "rate": args.rate, "kube_rate": args.kube_rate,
        "workers": args.workers, "partitions": args.partitions,
        "raw_published": published.value, "api_server_writes": kube_writes.value,
        "achieved_events_per_second": round(events / load_seconds),
        "faults": [{k: v for k, v in f.items() if k != "log"} for f in faults],
        "unplanned_exits": [{**f, "log": f["log"][-400:]} for f in faults if "exited by itself" in f["fault"]],
        "raw_in_equals_records_plus_dead_letters": raw,
        **checks,
        "longest_pause": pauses,
        "rss_mb": {name: {"start": round(rss_start[name] / 2**20), "end": round((rss_end.get(name) or 0) / 2**20)}
                   for name in rss_start if rss_start[name]},
        "rss_growth": {"held": all(life["end_over_warm"] <= RSS_GROWTH_HELD for name, judged in lives.items()
                                   if name in services for life in judged),
                       "criterion": f"over every stretch at a constant live set (a life; a worker's raw "
                                    f"partitions between two rebalances) of a workloadmap process that lasted "
                                    f"{LIFE_JUDGED:.0f} s or more: RSS at its end <= {RSS_GROWTH_HELD} x RSS "
                                    f"{WARM:.0f} s into it (RssSamples); the broker, the API server and etcd "
                                    "are shown, not judged",
                       "lives": lives, "end_over_run_start": growth},
        "writer_memory_limit": args.writer_memory_limit,
        "warehouse_file_mb": round((workdir / "warehouse.duckdb").stat().st_size / 2**20),
        "cpu_us_per_event": cpu_per_event,
        "load_average_end": os.getloadavg(),
        "exits_on_sigterm": exits, "drained": drained, "writer_behind_at_the_end": writer_behind,
    }
    result["held"] = all(result[k]["held"] for k in ("raw_in_equals_records_plus_dead_letters", "no_duplicate_rows",
                                                    "no_missing_transitions", "exporter_equals_warehouse",
                                                    "rss_growth"))
    if args.keep:
        result["workdir"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result))


@contextlib.contextmanager
def killing_at_exit(services: dict):
    """Services still running when the soak ends early (an error, SIGTERM) are killed."""
    try:
        yield
    finally:
        for service in services.values():
            if service.proc is not None and service.proc.poll() is None:
                service.proc.kill()
                service.proc.wait(30)


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def topics(bootstrap: str) -> set:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def behind(bootstrap: str, duckdb_path: Path) -> dict:
    """The partitions of the writer's topics whose last committed record is past the offset the (stopped)
    writer stored: {topic/partition: records behind at most}."""
    import duckdb
    from kafka import KafkaConsumer, TopicPartition

    con = duckdb.connect(str(duckdb_path), read_only=True)
    try:
        stored = {(t, p): o for t, p, o in con.execute("SELECT topic, partition, next_offset FROM consumer_offsets")
                  .fetchall()}
    finally:
        con.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    out = {}
    try:
        for topic in (records.WORKLOADS_TOPIC, records.TRANSITIONS_TOPIC, records.PODS_TOPIC, records.NODES_TOPIC):
            for p in sorted(consumer.partitions_for_topic(topic) or ()):
                tp = TopicPartition(topic, p)
                consumer.assign([tp])
                end = consumer.end_offsets([tp])[tp]
                last, back = None, 16
                while last is None and end > 0:   # the last committed record: markers take offsets too
                    consumer.seek(tp, max(0, end - back))
                    deadline = time.time() + 10
                    while consumer.position(tp) < end and time.time() < deadline:
                        for m in consumer.poll(timeout_ms=1000).get(tp, []):
                            last = m.offset
                    if back >= end:
                        break
                    back *= 4
                if last is not None and stored.get((topic, p), 0) <= last:
                    out[f"{topic}/{p}"] = last + 1 - stored.get((topic, p), 0)
    finally:
        consumer.close()
    return out


QUIET_SECONDS = 10.0   # the topics' ends unchanged this long: nothing more on its way (commits come every 0.2 s)


class TopicsSettled:
    """Whether no message reached the raw topic or an output topic for `quiet` seconds (once the load
    stopped: the watchers have published what the API server's last writes made, and the processors
    have committed its outputs)."""

    TOPICS = (records.RAW_TOPIC, records.WORKLOADS_TOPIC, records.TRANSITIONS_TOPIC, records.PODS_TOPIC,
              records.NODES_TOPIC, records.DEADLETTER_TOPIC)

    def __init__(self, bootstrap: str, quiet: float):
        from kafka import KafkaConsumer, TopicPartition

        self.quiet = quiet
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      isolation_level="read_committed")
        self.consumer.topics()   # a fresh consumer has no metadata yet: fetch it
        self.tps = [TopicPartition(t, p) for t in self.TOPICS for p in sorted(self.consumer.partitions_for_topic(t) or ())]
        self.ends: dict = {}
        self.since = time.time()

    def __call__(self) -> bool:
        ends = self.consumer.end_offsets(self.tps)
        if ends != self.ends:
            self.ends, self.since = ends, time.time()
        return time.time() - self.since >= self.quiet

    def close(self) -> None:
        self.consumer.close()


def lag(port: int) -> float | None:
    """The sum of a consumer's lag its /metrics report (None when it does not answer)."""
    status, body = get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    if status != 200:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
              if line.startswith("workloadmap_consumer_lag_records{")]
    return sum(values) if values else None


def wait_for(condition, timeout: float, what: str | None, service: Service | None) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if condition():
                return True
        except Exception:   # noqa: BLE001 - not yet
            pass
        if service is not None and service.proc.poll() is not None:
            raise SystemExit(f"{service.name} exited while waiting for {what}:\n{service.log_tail()}")
        time.sleep(0.5)
    if what is not None:
        raise SystemExit(f"timed out waiting for {what}:\n{service.log_tail() if service else ''}")
    return False


if __name__ == "__main__":
    main()
