"""Benchmark: the pipeline on a real broker, from publish to DuckDB visibility.

Starts a Kafka broker (tests/services), processor workers (`workloadmap run
processors`, subprocesses) and the warehouse writer (in this process, so
visibility is observed the moment a batch commits).  The raw events are
published from a process of their own, as the watchers are in production
(with the publisher's defaults: idempotent, acks=all, 5 ms linger).  Every
measurement starts after a warm-up on other objects.  Measured:

- sustained, one worker: publish --events simulated raw events as fast as
  possible; events/s = events / (last row visible - first publish), with
  the CPU milliseconds per event of each process (the writer's includes
  DuckDB's threads and the visibility queries of this benchmark);
- latency, --latency-runs runs of --seconds each at a fixed --rate (1,000
  events/s), each on objects of its own: per event, the time from publish to
  its row being visible in DuckDB; p50/p99/max per run, also split where the
  worker appends the event's record (its CreateTime);
- scale-out (--scale-out-partitions, 6; 0 skips it): sustained events/s of
  one and then two workers on a raw topic of that many partitions (fresh
  topics and writer each), the ratio of the two, and each process's CPU per
  event.

``--stream pods`` (issue 25): the same measurements on the stream of a
fleet's pods: ``ingest.scheduling``'s clusters (nodes, the intermediate
owners, the pods of workloads of every kind, scheduled first-fit) with the
kubelet's status updates of every bound pod (binding, containers created,
Running, Ready, the deletion asked for): most pod events change nothing the
warehouse keeps and produce no record.  Latency is measured on the events
that produce a record (workload, pod or node), from publish to the commit of
the writer's batch holding it; the sustained rate counts every event, and
pod events apart.  Defaults: 200,000 events sustained, 3 runs of 60 s at
2,000 events/s, no scale-out.  Each measurement streams the simulated fleet
under cluster names of its own, so its objects are new to the pipeline.

Why 200,000 events sustained: the rate is the events over the time from the
first publish to the last record visible, so it carries fixed costs (the
first fetch and batch, the last transaction's commit and writer batch, a
fresh broker's JIT compiling its hot paths for minutes).  A run of a few
seconds charged them to few events, and its figure moved between runs of
the same code; 20 s or so at the target rate is the pipeline's steady pace,
as a long-running one sees it (bench/RESULTS.md).  With --timeline, each
process's CPU is sampled every 0.1 s meanwhile (a core idle while events
wait means a stage waits for another).

With --serve-load, only this instead: the cost of `run warehouse --serve` to
the writer.  The writer serves the fresh reads (warehouse/answering.py, the
reads answered between its batches); two latency runs of workload events at
--rate (1,000), the first with no client, the second with readers hammering
the JSON endpoints from a process of their own (--readers threads: capacity
by cluster and by namespace, a week of cost by namespace, one workload's
history, each asked again as soon as answered), a feed client reading the
transitions stream 256 bytes a second and a client reading a large capacity
answer as slowly.  Printed for each: the writer's batch write p50/p99/max,
the pauses between batches spent answering, latency p50/p99, the writer's CPU
per event; and the readers' answers by status with their latency.

Prints one JSON line.  Targets on the 2-core machine: workloads >= 5,000
events/s sustained, p99 <= 1 s at 1,000 events/s in every run; pods >=
10,000 events/s sustained, p99 <= 1 s at 2,000 events/s in every run.  The
workloads bench at its defaults takes ~6 minutes; `--events 10000 --seconds
20 --warmup 2000` keeps it to ~3.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
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

from tests.services.kafka_broker import KafkaBroker  # noqa: E402
from workloadmap.running import collect_garbage_rarely  # noqa: E402
from workloadmap.catalog import records  # noqa: E402
from workloadmap.ingest.publishing import KafkaPublisher, event_key  # noqa: E402
from workloadmap.ingest.scheduling import simulate_clusters  # noqa: E402
from workloadmap.ingest.simulating import simulate_messages  # noqa: E402
from workloadmap.processors.processing import MemoryStates, Processor  # noqa: E402
from workloadmap.warehouse.answering import ReadServer  # noqa: E402
from workloadmap.warehouse.consuming import KafkaWarehouseWriter  # noqa: E402

# Rows a writer's batch stores (allocating.check_pod / check_node): where their uid and version are.
_POD_UID, _POD_VERSION, _NODE_UID, _NODE_VERSION = 1, 17, 2, 4


def _messages(n: int, seed: int):
    """n good raw messages (key, value, visibility key), simulated workload events; every one makes a
    record, seen by its key (cluster, uid, resourceVersion)."""
    out = []
    workloads = max(50, n // 7)
    for key, value, intent in simulate_messages(clusters=3, workloads=workloads, days=7, seed=seed):
        meta = intent.event["object"]["metadata"]
        out.append((key, value, (intent.event["cluster"], meta["uid"], meta["resourceVersion"])))
        if len(out) == n:
            break
    return out


class Fleet:
    """The pod stream: a simulated fleet's raw events (see the module docstring), generated once and
    streamed under cluster names of each measurement's own; and which of them make a record."""

    def __init__(self, n: int, seed: int = 5):
        self.events = []
        # about 1 event in 18 of this fleet is a workload's (the rest are pods, owners, nodes)
        for event in simulate_clusters(clusters=3, workloads=max(50, n // 55), days=7, seed=seed,
                                       kubelet=True):
            self.events.append(event)
            if len(self.events) == n:
                break
        # which events make a record: the processors' outputs on the stream, in this process
        made = set()
        processor, states = Processor(), MemoryStates()
        stream = [(event_key(e), records.encode(e), records.RAW_TOPIC, 0, i) for i, e in enumerate(self.events)]
        for start in range(0, len(stream), 1000):
            for out in processor.process_batch(stream[start:start + 1000], lambda p: states).values():
                for _, value in out.records + out.pods + out.nodes:
                    record = records.decode(value)
                    made.add((record["uid"], record["resourceVersion"]))
        self.recorded = [(e["object"]["metadata"]["uid"], e["object"]["metadata"].get("resourceVersion")) in made
                         for e in self.events]

    def messages(self, n: int, tag: str) -> list:
        """The first n events under cluster names ending in `tag`: (key, value, visibility key or None)."""
        out = []
        for event, recorded in zip(self.events[:n], self.recorded):
            event = {**event, "cluster": f"{event['cluster']}-{tag}"}
            meta = event["object"]["metadata"]
            out.append((event_key(event), records.encode(event),
                        (event["cluster"], meta["uid"], meta.get("resourceVersion")) if recorded else None))
        return out


def _publishing(bootstrap_servers, topic, messages, rate, ready, go, results, options):
    """Child process: publish `messages` (at `rate` events/s, or as fast as possible when None)."""
    sent = []
    with KafkaPublisher(bootstrap_servers, topic=topic, **options) as publisher:
        ready.set()
        go.wait()
        cpu_before = cpu_seconds()
        t0 = time.time()
        for i, (key, value, _) in enumerate(messages):
            if rate:
                delay = t0 + i / rate - time.time()
                if delay > 0:
                    time.sleep(delay)
            publisher.publish_raw(key, value)
            sent.append(time.time())
        publisher.flush()
        results.put((sent, time.time(), cpu_seconds() - cpu_before))


PUBLISHER_OPTIONS: dict = {}   # KafkaPublisher's settings other than its defaults (--linger-ms)


def publish(bootstrap_servers, topic, messages, rate=None, on_start=None):
    """Publish `messages` from a process of its own, as the watchers do in production (it does
    not share the writer's interpreter lock).  Returns (time the sending began, (send times,
    time flushed, the publisher's CPU seconds)); the producer connects before the clock starts.
    `on_start` is called with the publisher's pid when it starts sending."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, results = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_publishing,
                        args=(bootstrap_servers, topic, messages, rate, ready, go, results, PUBLISHER_OPTIONS))
    child.start()
    if not ready.wait(120):
        child.kill()
        raise RuntimeError("the publisher did not start")
    go.set()
    started = time.time()
    if on_start is not None:
        on_start(child.pid)
    out = results.get(timeout=600)
    child.join(60)
    if child.exitcode:
        raise RuntimeError(f"the publisher exited with {child.exitcode}")
    return started, out


def appended_times(bootstrap_servers, topics, keys) -> dict:
    """When the worker appended the record of each (cluster, uid, resourceVersion) in `keys` to
    the output `topics` (the record's CreateTime, read uncommitted): splits a latency in two, the
    worker's part and the rest (transaction commit, writer)."""
    from kafka import KafkaConsumer
    wanted, out = set(keys), {}
    consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, isolation_level="read_uncommitted",
                             consumer_timeout_ms=10_000)
    try:
        for m in consumer:
            record = json.loads(m.value)
            key = (record.get("cluster"), record.get("uid"), record.get("resourceVersion"))
            if key in wanted:
                out[key] = m.timestamp / 1000
                if len(out) == len(wanted):
                    break
    finally:
        consumer.close()
    return out


def cpu_seconds(pid: int | None = None, thread: int | None = None) -> float:
    """User + system CPU seconds of a process (this one when pid is None), or of one of its threads."""
    if pid is None and thread is None:
        t = os.times()
        return t.user + t.system
    path = f"/proc/{pid or os.getpid()}" + (f"/task/{thread}" if thread else "") + "/stat"
    fields = open(path).read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jit_seconds(pid: int) -> dict:
    """CPU seconds so far of each of a JVM's JIT compiler threads alive now, by thread id.

    Why apart: a broker started for the bench still compiles its hot paths minutes into a run,
    at up to half of its CPU; a long-running broker has done so, so its CPU per event is the
    broker's figure less this one."""
    out = {}
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/comm") as comm:
                if "Compiler" in comm.read():
                    out[thread] = cpu_seconds(pid, int(thread))
        except (FileNotFoundError, ProcessLookupError):
            continue   # the thread ended
    return out


class Timeline:
    """Each process's CPU, sampled every `interval` seconds while a measurement runs (--timeline).

    Why: the sustained rate is bounded either by the cores (every process busy) or by the
    stages waiting on each other (cores idle while events wait somewhere).  The CPU per
    event says what the events cost; the timeline says when each process ran and when it
    waited, so who waits for whom.  Samples: seconds since the start, then per process the
    share of one core it used since the previous sample, and the events visible so far."""

    def __init__(self, pids: dict, visible, interval: float = 0.1):
        self.pids = dict(pids)   # name -> (pid, thread id or None)
        self.visible = visible
        self.interval = interval
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sampling, daemon=True)

    def add(self, name: str, pid: int) -> None:
        self.pids[name] = (pid, None)

    def _cpu(self) -> dict:
        out = {}
        for name, (pid, thread) in list(self.pids.items()):
            try:
                out[name] = cpu_seconds(pid, thread)
            except (FileNotFoundError, ProcessLookupError):
                continue   # ended (the publisher, once it has flushed)
        return out

    def _sampling(self) -> None:
        began = last_time = time.perf_counter()
        last = self._cpu()
        while not self._stop.wait(self.interval):
            now, cpu = time.perf_counter(), self._cpu()
            sample = {"t": round(now - began, 2)}
            sample.update((name, round((cpu[name] - last.get(name, cpu[name])) / (now - last_time), 2))
                          for name in cpu)
            sample["visible"] = len(self.visible)
            self.samples.append(sample)
            last, last_time = cpu, now

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        """Per process: mean share of a core, and the share of samples it ran at least 90% of one."""
        names = [n for n in self.pids if any(n in s for s in self.samples)]
        out = {}
        for name in names:
            values = [s[name] for s in self.samples if name in s]
            out[name] = {"mean_cores": round(sum(values) / len(values), 2),
                         "busy_share": round(sum(v >= 0.9 for v in values) / len(values), 2)}
        totals = [sum(v for k, v in s.items() if k in names) for s in self.samples]
        out["all"] = {"mean_cores": round(sum(totals) / len(totals), 2) if totals else None,
                      "both_cores_share": round(sum(t >= 1.8 for t in totals) / len(totals), 2) if totals else None}
        return out


class Run:
    """The services of one measurement, on topics, a consumer group and a DuckDB file of their own."""

    def __init__(self, broker, tmp: Path, tag: str, *, workers: int = 1, partitions: int = 3, serve: bool = False):
        self.broker = broker
        self.env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=broker.bootstrap_servers,
                        WORKLOADMAP_RAW_TOPIC=f"raw-{tag}", WORKLOADMAP_WORKLOADS_TOPIC=f"workloads-{tag}",
                        WORKLOADMAP_TRANSITIONS_TOPIC=f"transitions-{tag}",
                        WORKLOADMAP_DEADLETTER_TOPIC=f"deadletter-{tag}",
                        WORKLOADMAP_DEFINITIONS_TOPIC=f"definitions-{tag}", WORKLOADMAP_PODS_TOPIC=f"pods-{tag}",
                        WORKLOADMAP_NODES_TOPIC=f"nodes-{tag}", WORKLOADMAP_STATE_TOPIC=f"state-{tag}",
                        WORKLOADMAP_CLIENT_ID=f"bench-{tag}", WORKLOADMAP_PARTITIONS=str(partitions))
        self.tag = tag
        self.partitions = partitions
        self.logs = [open(tmp / f"processors-{tag}-{i}.log", "wb") for i in range(workers)]
        self.procs = []
        for log in self.logs:
            self.procs.append(subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "processors"],
                                               env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp))
            if len(self.procs) == 1:
                self._wait_for_topics()   # the first worker creates them; the others join its group
        self.visible: dict[tuple[str, str, str], float] = {}   # (cluster, uid, resourceVersion) -> when
        # the fresh reads, as `run warehouse --serve` answers them between batches (timed: the pauses)
        self.reads = ReadServer(("127.0.0.1", 0)) if serve else None
        self.pause_seconds: list[float] = []
        self.writer = KafkaWarehouseWriter(
            broker.bootstrap_servers, tmp / f"bench-{tag}.duckdb",
            topics=(f"workloads-{tag}", f"transitions-{tag}", f"pods-{tag}", f"nodes-{tag}"),
            group_id=f"bench-{tag}-warehouse", transitions_topic=f"transitions-{tag}",
            pods_topic=f"pods-{tag}", nodes_topic=f"nodes-{tag}", deadletter_topic=f"deadletter-{tag}",
            commit_to_kafka=False, on_batch=self._on_batch,
            between_batches=None if self.reads is None else self._answer)
        collect_garbage_rarely()  # as `workloadmap run warehouse` does
        self.batch_seconds: list[float] = []   # each batch's write into DuckDB (its transaction included)
        write_checked = self.writer.warehouse.write_checked

        def timed(*args, pod_rows=(), node_rows=(), **kwargs):
            began = time.perf_counter()
            try:
                return write_checked(*args, pod_rows=pod_rows, node_rows=node_rows, **kwargs)
            finally:
                self.batch_seconds.append(time.perf_counter() - began)
                # committed: the batch's pod and node records are visible now
                now = time.time()
                for r in pod_rows:
                    self.visible.setdefault((r[0], r[_POD_UID], r[_POD_VERSION]), now)
                for r in node_rows:
                    self.visible.setdefault((r[0], r[_NODE_UID], r[_NODE_VERSION]), now)

        self.writer.warehouse.write_checked = timed
        self._last_seq = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.writer.run, args=(self.stop,), daemon=True)

    def _answer(self, warehouse) -> None:
        began = time.perf_counter()
        self.reads.answer(warehouse)
        self.pause_seconds.append(time.perf_counter() - began)

    @property
    def raw_topic(self) -> str:
        return f"raw-{self.tag}"

    def _on_batch(self, result, count):
        now = time.time()
        rows = self.writer.warehouse.cursor().execute(
            "SELECT seq, cluster, uid, resource_version FROM workload_states WHERE seq > ?",
            [self._last_seq]).fetchall()
        for seq, cluster, uid, rv in rows:
            self.visible.setdefault((cluster, uid, rv), now)
            self._last_seq = max(self._last_seq, seq)

    def _wait_for_topics(self):
        deadline = time.time() + 120
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        try:
            while self.raw_topic not in admin.list_topics():
                assert time.time() < deadline, "processor did not create the topics"
                time.sleep(0.5)
        finally:
            admin.close()

    def start(self):
        self.thread.start()
        time.sleep(8 + 4 * (len(self.procs) - 1))  # the workers join their group and recover their (empty) state

    def cpu(self) -> dict:
        """CPU seconds so far of each process: processor(s), broker, writer (this process); and of the
        broker's JIT compiler threads (part of the broker's)."""
        names = ["processor"] if len(self.procs) == 1 else [f"processor_{i + 1}" for i in range(len(self.procs))]
        out = {name: cpu_seconds(proc.pid) for name, proc in zip(names, self.procs)}
        out.update(broker=cpu_seconds(self.broker._proc.pid), writer=cpu_seconds(),
                   broker_jit=jit_seconds(self.broker._proc.pid))
        return out

    def wait(self, keys, timeout=600):
        deadline = time.time() + timeout
        missing = set(keys)
        seen = -1
        while True:
            if len(self.visible) != seen:   # look again only after a batch (this is CPU the writer's figure counts)
                seen = len(self.visible)
                missing = {k for k in missing if k not in self.visible}
            if not missing:
                return
            for proc, log in zip(self.procs, self.logs):
                if proc.poll() is not None:
                    log.flush()
                    tail = Path(log.name).read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"processor exited with {proc.returncode}:\n{tail}")
            if time.time() > deadline:
                raise RuntimeError(f"{len(keys) - len(missing)} of {len(keys)} visible")
            time.sleep(0.05)

    def warm_up(self, warmup) -> None:
        if warmup:
            publish(self.broker.bootstrap_servers, self.raw_topic, warmup)
            self.wait([k for _, _, k in warmup if k is not None])

    def cpu_ms_per_event(self, before: dict, n: int, publisher_cpu: float) -> dict:
        """CPU milliseconds per event of each process since `before` (a ``cpu()``), over n events."""
        after = self.cpu()
        # (a compiler thread that ended meanwhile is left out: the JIT's share is a lower bound)
        jit_before, jit_after = before.pop("broker_jit"), after.pop("broker_jit")
        cpu_ms = {name: round((after[name] - before[name]) * 1000 / n, 4) for name in after}
        cpu_ms["broker_jit"] = round(sum(t - jit_before.get(k, 0.0) for k, t in jit_after.items()) * 1000 / n, 4)
        cpu_ms["publisher"] = round(publisher_cpu * 1000 / n, 4)
        cpu_ms["total"] = round(sum(v for k, v in cpu_ms.items() if k != "broker_jit"), 4)
        return cpu_ms

    def sustained(self, messages, timeline: Path | None = None) -> dict:
        """Publish `messages` as fast as possible: events/s to DuckDB visibility and CPU ms per event
        (the rate runs until the last record is visible: the events after it make none).  With a
        `timeline` path, each process's CPU is sampled meanwhile (``Timeline``): its samples are
        written there as JSON lines, its summary is in the result."""
        cpu_before = self.cpu()
        load = os.getloadavg()[0]
        names = ["processor"] if len(self.procs) == 1 else [f"processor_{i + 1}" for i in range(len(self.procs))]
        sampler = Timeline({**{name: (proc.pid, None) for name, proc in zip(names, self.procs)},
                            "broker": (self.broker._proc.pid, None), "writer": (os.getpid(), None),
                            "writer_thread": (os.getpid(), self.thread.native_id)}, self.visible)
        keys = [k for _, _, k in messages if k is not None]
        with sampler if timeline else contextlib.nullcontext():
            started, (_, published, publisher_cpu) = publish(
                self.broker.bootstrap_servers, self.raw_topic, messages,
                on_start=lambda pid: sampler.add("publisher", pid))
            self.wait(keys)
        n = len(messages)
        cpu_ms = self.cpu_ms_per_event(cpu_before, n, publisher_cpu)
        seconds = max(self.visible[k] for k in keys) - started
        out = {"events": n, "recorded_events": len(keys), "publish_seconds": round(published - started, 2),
               "events_per_second": round(n / seconds), "cpu_ms_per_event": cpu_ms,
               "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}
        if timeline:
            timeline.write_text("".join(json.dumps(s) + "\n" for s in sampler.samples))
            out["timeline"] = sampler.summary()
        return out

    def latency(self, messages, rate: int) -> dict:
        """Publish `messages` at `rate` events/s: publish-to-visible latencies, whole and in two parts,
        of the events that make a record."""
        batches_before, pauses_before = len(self.batch_seconds), len(self.pause_seconds)
        load = os.getloadavg()[0]
        writer_cpu = cpu_seconds()
        cpu_before = self.cpu()
        _, (times, _, publisher_cpu) = publish(self.broker.bootstrap_servers, self.raw_topic, messages, rate=rate)
        sent = {k: t for (_, _, k), t in zip(messages, times) if k is not None}
        self.wait(list(sent))
        writer_cpu = cpu_seconds() - writer_cpu
        cpu_ms = self.cpu_ms_per_event(cpu_before, len(messages), publisher_cpu)
        batches = sorted(self.batch_seconds[batches_before:])
        pauses = sorted(self.pause_seconds[pauses_before:])
        latencies = sorted(self.visible[k] - t for k, t in sent.items())
        appended = appended_times(self.broker.bootstrap_servers,
                                  [f"{name}-{self.tag}" for name in ("workloads", "pods", "nodes")], sent)
        worker_part = sorted(appended[k] - t for k, t in sent.items() if k in appended)
        rest = sorted(self.visible[k] - appended[k] for k in sent if k in appended)
        return {"events": len(messages), "recorded_events": len(latencies), "p50_seconds": _pct(0.50, latencies),
                "p99_seconds": _pct(0.99, latencies),
                "max_seconds": round(latencies[-1], 3),
                # publish -> record appended by the worker, and appended -> visible in DuckDB
                # (the transaction's commit, then the writer's batch)
                "to_worker_output_p50_seconds": _pct(0.50, worker_part),
                "to_worker_output_p99_seconds": _pct(0.99, worker_part),
                "worker_output_to_visible_p50_seconds": _pct(0.50, rest),
                "worker_output_to_visible_p99_seconds": _pct(0.99, rest),
                # the writer's part of the rest: its batches' writes (p99 and max over the run)
                "writer_batches": len(batches), "writer_batch_p50_seconds": _pct(0.50, batches),
                "writer_batch_p99_seconds": _pct(0.99, batches),
                "writer_batch_max_seconds": round(batches[-1], 3) if batches else None,
                # the writer's process (its HTTP threads too, with --serve-load), per event
                "writer_cpu_ms_per_event": round(writer_cpu * 1000 / len(messages), 3),
                "cpu_ms_per_event": cpu_ms,   # every process's
                **({"answer_pauses": len(pauses), "answer_pause_p50_seconds": _pct(0.50, pauses),
                    "answer_pause_p99_seconds": _pct(0.99, pauses),
                    "answer_pause_max_seconds": round(pauses[-1], 3) if pauses else None,
                    "answer_seconds_total": round(sum(pauses), 2)} if self.reads is not None else {}),
                "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}

    def close(self):
        self.stop.set()
        self.thread.join(60)
        if self.reads is not None:
            self.reads.close()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(60)


READS = ("/api/v1/capacity?by=cluster", "/api/v1/capacity?by=namespace", "/api/v1/cost?window=7d&aggregate=namespace")


def _hammering(base: str, paths: list[str], stop, out: list) -> None:
    """Ask the reads in turn, each again as soon as it is answered; (status, seconds) into `out`."""
    import urllib.error
    import urllib.request

    i = 0
    while not stop.is_set():
        began = time.time()
        try:
            with urllib.request.urlopen(base + paths[i % len(paths)], timeout=60) as resp:
                resp.read()
                status = resp.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError:
            status = None
        out.append((status, time.time() - began))
        i += 1


def _slowly(url: str, stop) -> None:
    """A slow client: 256 bytes a second of an answer (or of the transitions feed)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            while not stop.wait(1.0) and resp.read(256):
                pass
    except OSError:
        pass


def _reading(base: str, workload_path: str, threads: int, ready, stop, results) -> None:
    """Child process: `threads` hammering clients, a slow feed client, a slow client of a large answer."""
    paths = [*READS, f"/api/v1/workloads/{workload_path}?limit=50"]
    answers: list = []
    workers = [threading.Thread(target=_hammering, args=(base, paths[i % len(paths):] + paths[:i % len(paths)],
                                                         stop, answers), daemon=True) for i in range(threads)]
    workers.append(threading.Thread(target=_slowly, args=(f"{base}/api/v1/transitions?after=0", stop), daemon=True))
    workers.append(threading.Thread(target=_slowly, args=(
        f"{base}/api/v1/capacity?by=cluster,namespace,framework,kind,status", stop), daemon=True))
    ready.set()
    began = time.time()
    for t in workers:
        t.start()
    stop.wait()
    seconds = time.time() - began
    by_status: dict = {}
    for status, _ in answers:
        by_status[str(status)] = by_status.get(str(status), 0) + 1
    ok = sorted(s for status, s in answers if status == 200)
    results.put({"reads": len(answers), "reads_per_second": round(len(answers) / seconds, 1), "by_status": by_status,
                 "answer_p50_seconds": _pct(0.50, ok), "answer_p99_seconds": _pct(0.99, ok)})


def serve_load(broker, tmp: Path, args, rate: int) -> dict:
    """The writer serving the fresh reads: a latency run without clients, then one with them."""
    per_run = rate * args.seconds
    messages = _messages(2 * per_run, seed=5)
    run = Run(broker, tmp, uuid.uuid4().hex[:6], partitions=args.partitions, serve=True)
    run.start()
    try:
        run.warm_up(_messages(args.warmup, seed=6) if args.warmup else [])
        quiet = run.latency(messages[:per_run], rate)
        event = json.loads(messages[0][1])
        meta = event["object"]["metadata"]
        workload = f"{event['cluster']}/{meta.get('namespace') or '_'}/{event['object']['kind']}/{meta['name']}"
        ctx = multiprocessing.get_context("spawn")
        ready, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
        reader = ctx.Process(target=_reading, args=(f"http://127.0.0.1:{run.reads.port}", workload, args.readers,
                                                    ready, stop, results))
        reader.start()
        ready.wait(60)
        loaded = run.latency(messages[per_run:], rate)
        stop.set()
        loaded["readers"] = results.get(timeout=120)
        reader.join(60)
    finally:
        run.close()
    return {"benchmark": "pipeline: --serve's cost to the writer", "rate_events_per_second": rate,
            "seconds_per_run": args.seconds, "reader_threads": args.readers,
            "without_readers": quiet, "with_readers": loaded,
            "writer_batch_p99_ratio": round(loaded["writer_batch_p99_seconds"] / quiet["writer_batch_p99_seconds"], 2),
            "latency_p99_ratio": round(loaded["p99_seconds"] / quiet["p99_seconds"], 2)}


def _pct(q, values):
    return round(values[min(len(values) - 1, int(q * len(values)))], 3) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", choices=("workloads", "pods"), default="workloads",
                        help="the simulated workload events, or a fleet's pods (see above)")
    parser.add_argument("--events", type=int, help="events of each sustained measurement (30,000; pods 200,000)")
    parser.add_argument("--rate", type=int, help="events/s of the latency runs (1,000; pods 2,000)")
    parser.add_argument("--seconds", type=int, default=60, help="length of each latency run")
    parser.add_argument("--latency-runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3, help="raw partitions of the one-worker measurements")
    parser.add_argument("--scale-out-partitions", type=int,
                        help="raw partitions of the scale-out measurement (one, then two workers); 0 skips it "
                             "(6; pods 0)")
    parser.add_argument("--serve-load", action="store_true",
                        help="Only the cost of --serve to the writer: a latency run without, then with readers.")
    parser.add_argument("--readers", type=int, default=4, help="hammering reader threads of --serve-load")
    parser.add_argument("--warmup", type=int, default=10000,
                        help="Events (other objects) run through the pipeline first: a production broker and "
                             "worker are warm (JIT, connections, group membership).")
    parser.add_argument("--linger-ms", type=int,
                        help="the publisher's linger (KafkaPublisher's default otherwise), to compare")
    parser.add_argument("--timeline", type=Path,
                        help="write each process's CPU, sampled every 0.1 s during the sustained phase, to "
                             "this file (JSON lines) and its summary into the result")
    args = parser.parse_args()
    if args.linger_ms is not None:
        PUBLISHER_OPTIONS["linger_ms"] = args.linger_ms
    pods = args.stream == "pods"
    events = args.events or (200000 if pods else 30000)
    rate = args.rate or (2000 if pods else 1000)
    scale_out = (0 if pods else 6) if args.scale_out_partitions is None else args.scale_out_partitions
    per_run = rate * args.seconds
    if args.serve_load:
        with tempfile.TemporaryDirectory() as tmpdir, KafkaBroker() as broker:
            print(json.dumps(serve_load(broker, Path(tmpdir), args, rate)))
        return
    if pods:
        fleet = Fleet(max(events, per_run, args.warmup))

        def messages_of(n, tag):
            return fleet.messages(n, tag)
    else:
        messages = _messages(events + per_run * args.latency_runs, seed=5)
        phases = {"sustained": messages[:events]}
        phases.update((f"latency-{i}", messages[events + i * per_run:events + (i + 1) * per_run])
                      for i in range(args.latency_runs))

        def messages_of(n, tag):
            return _messages(n, seed=6) if tag == "warmup" else phases[tag]
    result = {"benchmark": "pipeline publish-to-duckdb", "stream": args.stream, "warmup_events": args.warmup,
              "publisher_options": PUBLISHER_OPTIONS}
    with tempfile.TemporaryDirectory() as tmpdir, KafkaBroker() as broker:
        tmp = Path(tmpdir)
        run = Run(broker, tmp, uuid.uuid4().hex[:6], partitions=args.partitions)
        run.start()
        try:
            run.warm_up(messages_of(args.warmup, "warmup") if args.warmup else [])
            sustained_msgs = messages_of(events, "sustained")
            sustained = run.sustained(sustained_msgs, timeline=args.timeline)
            if pods:
                pod_events = sum(1 for _, value, _ in sustained_msgs if b'"kind":"Pod"' in value)
                sustained["pod_events"] = pod_events
                sustained["pod_events_per_second"] = round(sustained["events_per_second"] * pod_events / events)
            latency_runs = [run.latency(messages_of(per_run, f"latency-{i}"), rate) for i in range(args.latency_runs)]
        finally:
            run.close()
        result.update(
            processor_workers=1, partitions=args.partitions, events=sustained["events"],
            recorded_events=sustained["recorded_events"], publish_seconds=sustained["publish_seconds"],
            sustained_events_per_second=sustained["events_per_second"],
            sustained_cpu_ms_per_event=sustained["cpu_ms_per_event"],
            sustained_load_average=sustained["load_average"],
            **({"sustained_timeline": sustained["timeline"]} if "timeline" in sustained else {}),
            latency_rate_events_per_second=rate, latency_seconds_per_run=args.seconds,
            latency_runs=latency_runs,
            latency_p99_seconds_worst=max((r["p99_seconds"] for r in latency_runs), default=None))
        if pods:
            result.update(pod_events=sustained["pod_events"],
                          sustained_pod_events_per_second=sustained["pod_events_per_second"])
        if scale_out:
            scale = {"partitions": scale_out, "events": events}
            for workers in (1, 2):
                run = Run(broker, tmp, uuid.uuid4().hex[:6], workers=workers, partitions=scale_out)
                run.start()
                try:
                    run.warm_up(messages_of(args.warmup, "warmup") if args.warmup else [])
                    figures = run.sustained(messages_of(events, "sustained"))
                finally:
                    run.close()
                name = "one_worker" if workers == 1 else "two_workers"
                scale[f"{name}_events_per_second"] = figures["events_per_second"]
                scale[f"{name}_cpu_ms_per_event"] = figures["cpu_ms_per_event"]
            scale["ratio"] = round(scale["two_workers_events_per_second"] / scale["one_worker_events_per_second"], 2)
            result["scale_out"] = scale
    result["targets"] = ({"sustained_events_per_second": 10000, "latency_p99_seconds": 1.0} if pods else
                         {"sustained_events_per_second": 5000, "latency_p99_seconds": 1.0})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
