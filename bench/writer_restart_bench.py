"""Benchmark: the warehouse writer's restart after a SIGKILL, under a sustained stream, phase by phase.

The soak's longest pauses followed the writer's kills (bench/RESULTS.md); this measures where
such a restart goes.  Starts a Kafka broker (tests/services), one processor worker and the writer
as `workloadmap run warehouse --serve` (subprocesses, as the soak runs them), and publishes the pod
stream (``ingest.scheduling``'s fleet with the kubelet's updates, as ``pipeline_bench.py --stream
pods``) at --rate events/s from a process of its own.  After --warmup seconds the writer is
SIGKILLed and started again at once; this is repeated --kills times, --every seconds apart, so the
WAL the successor finds is whatever the killed writer left.

Every 0.1 s the bench reads the writer's progress from Kafka: the offsets it commits after each
batch (its group, for monitoring; DuckDB holds the truth) against the records readable on its
topics (read_committed end offsets).  Per restart it prints, from the kill on:

- ``process_s``: until the writer's first log line (the interpreter and its imports);
- ``topics_s``: creating/checking the topics (``ensure_topics``);
- ``open_s``: opening the DuckDB file (replaying the WAL the kill left: ``wal_bytes``, as the
  writer logs it) and migrating it;
- ``assign_s``: the consumer connected and its partitions assigned at DuckDB's offsets;
- ``first_batch_s``: the first batch committed (first offsets committed to Kafka);
- ``caught_up_s``: the lag back under what it was before the first kill (its p90 over 20 s);
- ``backlog``: the records behind at the first batch, and ``catch_up_rate``: records/s written
  between the first batch and caught up (the stream goes on meanwhile).

Also the load average during the run and the writer's CPU per record over each life.  Prints one
JSON line per restart and one summary line.  One command:

    python bench/writer_restart_bench.py            # 3 kills, 2,000 events/s

``--stream workloads`` publishes the simulated workload stream instead of the pod stream;
``--ended-pods N`` seeds the file with N ended pods before the writer's first start (the history of
a long-running writer, which its start loads a filter of).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services.kafka_broker import KafkaBroker  # noqa: E402
from tests.services.processes import free_ports  # noqa: E402
from workloadmap.catalog import records  # noqa: E402

CLIENT_ID = "restart"
TOPICS = (records.WORKLOADS_TOPIC, records.TRANSITIONS_TOPIC, records.PODS_TOPIC, records.NODES_TOPIC)
# the writer's log lines that end a phase (workloadmap run warehouse at INFO)
OPENED = re.compile(r"opened (?P<path>\S+) in (?P<seconds>[\d.]+) s \(WAL of (?P<wal>\d+) bytes")
READS = "warehouse writer reads"
TOPICS_CHECKED = "the topics are there"


def _events(stream: str, n: int, seed: int) -> list[tuple[bytes, bytes]]:
    from workloadmap.ingest.publishing import event_key
    from workloadmap.ingest.scheduling import simulate_clusters
    from workloadmap.ingest.simulating import simulate_messages

    out = []
    if stream == "pods":
        for event in simulate_clusters(clusters=3, workloads=max(50, n // 55), days=7, seed=seed, kubelet=True):
            out.append((event_key(event), records.encode(event)))
            if len(out) == n:
                break
    else:
        for key, value, _ in simulate_messages(clusters=3, workloads=max(50, n // 7), days=7, seed=seed):
            out.append((key, value))
            if len(out) == n:
                break
    return out


def _publishing(bootstrap, stream, n, rate, ready, stop, published) -> None:
    """Child process: the raw stream at `rate` events/s until `stop` (or its n events are out)."""
    from workloadmap.ingest.publishing import KafkaPublisher

    events = _events(stream, n, seed=11)
    with KafkaPublisher(bootstrap, topic=records.RAW_TOPIC, client_id="bench-publisher") as publisher:
        ready.set()
        t0 = time.time()
        for i, (key, value) in enumerate(events):
            if stop.is_set():
                break
            delay = t0 + i / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            publisher.publish_raw(key, value)
            published.value = i + 1
        publisher.flush()


class Progress:
    """The writer's lag, sampled every 0.1 s: records readable on its topics (read_committed) minus
    the offsets it committed to Kafka after its batches."""

    def __init__(self, bootstrap: str, group: str, writer: dict):
        from kafka import KafkaAdminClient, KafkaConsumer
        from kafka.structs import TopicPartition

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-lag")
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                      client_id="bench-lag", enable_auto_commit=False)
        self.partitions = [TopicPartition(t, p) for t in TOPICS for p in self.consumer.partitions_for_topic(t) or ()]
        self.group = group
        self.writer = writer   # its "proc": the writer's process of the time
        self.cpu: list[tuple[float, int, float]] = []   # (time, writer pid, its CPU seconds), every 0.05 s
        self.samples: list[tuple[float, int, int]] = []   # (time, lag, committed in all)
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, int]:
        with self.lock:   # the clients are not thread-safe; restart() samples too
            ends = self.consumer.end_offsets(self.partitions)
            committed = {tp: meta.offset
                         for tp, meta in self.admin.list_group_offsets(self.group)[self.group].items()}
        lag = sum(max(0, ends[tp] - committed.get(tp, 0)) for tp in self.partitions)
        return lag, sum(committed.values())

    def _sample_cpu(self) -> None:
        while not self.stop.wait(0.05):
            proc = self.writer.get("proc")
            cpu = proc and cpu_seconds(proc.pid)
            if cpu is not None:
                self.cpu.append((time.time(), proc.pid, cpu))

    def cpu_at(self, pid: int, at: float | None) -> float | None:
        """The writer `pid`'s CPU seconds at `at` (the first sample at or after it)."""
        if at is None:
            return None
        return next((round(c, 2) for t, p, c in self.cpu if p == pid and t >= at), None)

    def _run(self) -> None:
        threading.Thread(target=self._sample_cpu, daemon=True).start()
        while not self.stop.wait(0.1):
            try:
                lag, done = self.sample()
            except Exception as exc:   # the broker busy: the next sample
                self.errors.append(repr(exc))
                continue
            self.samples.append((time.time(), lag, done))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.admin.close()
        self.consumer.close()


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_times(path: Path, since: float) -> dict:
    """When the writer's log said each phase was over (its asctime, local time, millisecond), from
    the lines written after `since`."""
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", line)
        if not m:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if at < since - 0.002:
            continue
        out.setdefault("first_line", at)
        if TOPICS_CHECKED in line:
            out.setdefault("topics", at)
        opened = OPENED.search(line)
        if opened:
            out.setdefault("opened", at)
            out.setdefault("wal_bytes", int(opened.group("wal")))
            out.setdefault("open_reported_s", float(opened.group("seconds")))
        if READS in line:
            out.setdefault("assigned", at)
    return out


def steady_lag(progress: Progress, seconds: float = 20.0) -> int:
    """The writer's lag p90 over the last `seconds` (the steady stream's: records in transactions not
    committed yet, a batch gathering): what "caught up" is judged against."""
    lags = sorted(s[1] for s in progress.samples if s[0] >= time.time() - seconds)
    return max(lags[int(0.9 * (len(lags) - 1))] if lags else 0, 1)


def restart(writer: dict, progress: Progress, every: float, threshold: int, down: float = 0.0) -> dict:
    """SIGKILL the writer, start it again `down` seconds later, and follow it for `every` seconds;
    caught up once its lag is back under `threshold`."""
    proc = writer["proc"]
    life_cpu = cpu_seconds(proc.pid)
    killed = time.time()
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    committed_at_kill = progress.sample()[1]   # the last batch the killed writer committed
    wal = Path(writer["duckdb"] + ".wal")
    wal_left = wal.stat().st_size if wal.exists() else 0
    time.sleep(down)
    writer["proc"] = start_writer(writer)
    spawned = time.time()
    loads = []
    end = killed + every
    while time.time() < end:
        loads.append(os.getloadavg()[0])
        time.sleep(1)
    samples = [s for s in progress.samples if s[0] > spawned]
    first = next((s for s in samples if s[2] > committed_at_kill), None)
    caught = next((s for s in samples if first and s[0] >= first[0] and s[1] <= threshold), None)
    phases = log_times(writer["log"], killed)
    out = {"killed_at": round(killed, 3), "wal_bytes_left": wal_left, "wal_bytes_logged": phases.get("wal_bytes"),
           "lag_p90_before": threshold, "load_average": [round(min(loads), 2), round(max(loads), 2)],
           "writer_cpu_s_previous_life": life_cpu}

    def since_kill(at):
        return None if at is None else round(at - killed, 3)

    pid = writer["proc"].pid
    out["cpu_s"] = {"process": progress.cpu_at(pid, phases.get("first_line")),
                    "topics": progress.cpu_at(pid, phases.get("topics")),
                    "open": progress.cpu_at(pid, phases.get("opened")),
                    "assign": progress.cpu_at(pid, phases.get("assigned")),
                    "first_batch": progress.cpu_at(pid, first[0] if first else None),
                    "caught_up": progress.cpu_at(pid, caught[0] if caught else None)}

    out["process_s"] = since_kill(phases.get("first_line"))
    out["topics_s"] = since_kill(phases.get("topics"))
    out["open_s"] = since_kill(phases.get("opened"))
    out["open_reported_s"] = phases.get("open_reported_s")
    out["assign_s"] = since_kill(phases.get("assigned"))
    out["first_batch_s"] = since_kill(first[0] if first else None)
    out["caught_up_s"] = since_kill(caught[0] if caught else None)
    if first and caught and caught[0] > first[0]:
        out["backlog"] = first[1]
        out["catch_up_rate"] = round((caught[2] - first[2]) / (caught[0] - first[0]))
    out["max_lag"] = max((s[1] for s in samples), default=None)
    return out


def topics(bootstrap: str) -> set:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-admin")
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def healthy(port: int) -> bool:
    """The writer answers its reads (between its batches: it reads its topics)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def wait_for(condition, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise SystemExit(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.5)


def seed_ended_pods(path: str, n: int) -> None:
    """`n` keys in ended_pods, as a long-running writer's file holds one per pod that ever ended (the
    filter the writer loads at its start is built from them; random keys fill it as pods' do)."""
    import duckdb

    from workloadmap.warehouse.writing import Warehouse

    Warehouse(path).close()   # created and migrated, as the writer does
    conn = duckdb.connect(path)
    try:
        conn.execute("INSERT INTO ended_pods SELECT hash(i, 'bench-ended')::UBIGINT FROM range(?) t(i)", [n])
    finally:
        conn.close()


def start_writer(writer: dict) -> subprocess.Popen:
    with open(writer["log"], "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "warehouse", "--serve",
                                 f"127.0.0.1:{writer['port']}"], env=writer["env"], stdout=log,
                                stderr=subprocess.STDOUT, cwd=writer["workdir"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2000, help="raw events/s")
    parser.add_argument("--stream", choices=("pods", "workloads"), default="pods")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds of stream before the first kill")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--every", type=float, default=45.0, help="seconds between kills")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--ended-pods", type=int, default=0,
                        help="seed the file with this many ended pods first (a long-running writer's history)")
    parser.add_argument("--down", type=float, default=0.0,
                        help="seconds between the kill and the start (a backlog to catch up: its rate)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="workloadmap-restart-"))
    ctx = multiprocessing.get_context("spawn")
    seconds = args.warmup + args.kills * args.every + 30
    with KafkaBroker() as broker:
        bootstrap = broker.bootstrap_servers
        env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=bootstrap, WORKLOADMAP_PARTITIONS=str(args.partitions),
                   WORKLOADMAP_CLIENT_ID=CLIENT_ID, WORKLOADMAP_DUCKDB=str(workdir / "warehouse.duckdb"))
        worker = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "processors"], env=env,
                                  stdout=open(workdir / "processors.log", "ab"), stderr=subprocess.STDOUT, cwd=workdir)
        [port] = free_ports(1)
        writer = {"env": env, "port": port, "workdir": workdir, "log": workdir / "warehouse.log",
                  "duckdb": env["WORKLOADMAP_DUCKDB"]}
        stop, ready, published = ctx.Event(), ctx.Event(), ctx.Value("q", 0)
        publisher = ctx.Process(target=_publishing, daemon=True, args=(
            bootstrap, args.stream, int(args.rate * seconds), args.rate, ready, stop, published))
        progress = None
        try:
            wait_for(lambda: records.RAW_TOPIC in topics(bootstrap), 180, "the worker to create the topics")
            if args.ended_pods:
                seed_ended_pods(writer["duckdb"], args.ended_pods)
            writer["proc"] = start_writer(writer)
            wait_for(lambda: healthy(writer["port"]), 180, "the writer to start", writer["log"])
            publisher.start()
            if not ready.wait(600):
                raise SystemExit("the publisher did not start")
            progress = Progress(bootstrap, f"{CLIENT_ID}-warehouse", writer)
            progress.thread.start()
            started = time.time()
            time.sleep(args.warmup)
            results = []
            threshold = steady_lag(progress)
            for n in range(args.kills):
                result = restart(writer, progress, args.every, threshold, args.down)
                result["kill"] = n + 1
                result["published"] = published.value
                print(json.dumps(result), flush=True)
                results.append(result)
            elapsed = time.time() - started
            summary = {"bench": "writer_restart", "stream": args.stream, "rate": args.rate,
                       "achieved_rate": round(published.value / elapsed), "kills": len(results),
                       "down_s": args.down, "ended_pods_seeded": args.ended_pods}
            for key in ("process_s", "topics_s", "open_s", "assign_s", "first_batch_s", "caught_up_s",
                        "catch_up_rate", "wal_bytes_left"):
                values = [r[key] for r in results if r.get(key) is not None]
                if values:
                    summary[key + "_median"] = statistics.median(values)
                    summary[key + "_max"] = max(values)
            summary["load_average"] = [min(r["load_average"][0] for r in results),
                                       max(r["load_average"][1] for r in results)]
            if progress.errors:
                summary["progress_errors"] = [len(progress.errors), progress.errors[0]]
            print(json.dumps(summary), flush=True)
        finally:
            stop.set()
            if progress is not None:
                progress.close()
            if publisher.pid is not None:
                publisher.join(30)
            for proc in (writer.get("proc"), worker):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            print(f"logs in {workdir}", file=sys.stderr)


if __name__ == "__main__":
    main()
