"""Benchmark: the pipeline on a real broker, from publish to DuckDB visibility.

Starts a Kafka broker (tests/services), one processor worker (`workloadmap run
processors`, a subprocess) and the warehouse writer (in this process, so
visibility is observed the moment a batch commits).  The raw events are
published from a process of their own, as the watchers are in production
(with the publisher's defaults: idempotent, acks=all, 5 ms linger).  Two
measurements:

- sustained: publish --events simulated raw events as fast as possible;
  events/s = events / (last row visible - first publish);
- latency: publish at a fixed --rate (1,000 events/s) for --seconds; per
  event, the time from publish to its row being visible in DuckDB; p50/p99,
  also split where the worker appends the event's record (its CreateTime).

CPU milliseconds per event are given per process (the writer's includes
DuckDB's threads and the visibility queries of this benchmark).  Prints one
JSON line.  Targets on the 2-core machine: >= 5,000 events/s, p99 <= 2 s.
"""

from __future__ import annotations

import argparse
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
from workloadmap.ingest.publishing import KafkaPublisher  # noqa: E402
from workloadmap.ingest.simulating import simulate_messages  # noqa: E402
from workloadmap.warehouse.writing import KafkaWarehouseWriter  # noqa: E402


def _messages(n: int, seed: int):
    """n good raw messages (key, value, uid, resourceVersion), simulated."""
    out = []
    workloads = max(50, n // 7)
    for key, value, intent in simulate_messages(clusters=3, workloads=workloads, days=7, seed=seed):
        meta = intent.event["object"]["metadata"]
        out.append((key, value, meta["uid"], meta["resourceVersion"]))
        if len(out) == n:
            break
    return out


def _publishing(bootstrap_servers, topic, messages, rate, ready, go, results):
    """Child process: publish `messages` (at `rate` events/s, or as fast as possible when None)."""
    sent = []
    with KafkaPublisher(bootstrap_servers, topic=topic) as publisher:
        ready.set()
        go.wait()
        cpu_before = cpu_seconds()
        t0 = time.time()
        for i, (key, value, _, _) in enumerate(messages):
            if rate:
                delay = t0 + i / rate - time.time()
                if delay > 0:
                    time.sleep(delay)
            publisher.publish_raw(key, value)
            sent.append(time.time())
        publisher.flush()
        results.put((sent, time.time(), cpu_seconds() - cpu_before))


def publish(bootstrap_servers, topic, messages, rate=None):
    """Publish `messages` from a process of its own, as the watchers do in production (it does
    not share the writer's interpreter lock).  Returns (time the sending began, (send times,
    time flushed, the publisher's CPU seconds)); the producer connects before the clock starts."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, results = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_publishing, args=(bootstrap_servers, topic, messages, rate, ready, go, results))
    child.start()
    if not ready.wait(120):
        child.kill()
        raise RuntimeError("the publisher did not start")
    go.set()
    started = time.time()
    out = results.get(timeout=600)
    child.join(60)
    if child.exitcode:
        raise RuntimeError(f"the publisher exited with {child.exitcode}")
    return started, out


def appended_times(bootstrap_servers, topic, keys) -> dict:
    """When the worker appended the record of each (uid, resourceVersion) in `keys` to the
    records topic (the record's CreateTime, read uncommitted): splits a latency in two, the
    worker's part and the rest (transaction commit, writer)."""
    from kafka import KafkaConsumer
    wanted, out = set(keys), {}
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, isolation_level="read_uncommitted",
                             consumer_timeout_ms=10_000)
    try:
        for m in consumer:
            record = json.loads(m.value)
            key = (record.get("uid"), record.get("resourceVersion"))
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


class Run:
    def __init__(self, broker, tmp: Path, tag: str):
        self.broker = broker
        self.env = dict(os.environ, WORKLOADMAP_BOOTSTRAP_SERVERS=broker.bootstrap_servers,
                        WORKLOADMAP_RAW_TOPIC=f"raw-{tag}", WORKLOADMAP_WORKLOADS_TOPIC=f"workloads-{tag}",
                        WORKLOADMAP_TRANSITIONS_TOPIC=f"transitions-{tag}",
                        WORKLOADMAP_DEADLETTER_TOPIC=f"deadletter-{tag}", WORKLOADMAP_CLIENT_ID=f"bench-{tag}")
        self.tag = tag
        self.log = open(tmp / f"processors-{tag}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "workloadmap", "run", "processors"], env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.visible: dict[tuple[str, str], float] = {}
        self.writer = KafkaWarehouseWriter(
            broker.bootstrap_servers, tmp / f"bench-{tag}.duckdb",
            topics=(f"workloads-{tag}", f"transitions-{tag}"), group_id=f"bench-{tag}-warehouse",
            transitions_topic=f"transitions-{tag}", deadletter_topic=f"deadletter-{tag}",
            commit_to_kafka=False, on_batch=self._on_batch)
        collect_garbage_rarely()  # as `workloadmap run warehouse` does
        self._last_seq = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.writer.run, args=(self.stop,), daemon=True)

    def _on_batch(self, result, count):
        now = time.time()
        rows = self.writer.warehouse.cursor().execute(
            "SELECT seq, uid, resource_version FROM workload_states WHERE seq > ?", [self._last_seq]).fetchall()
        for seq, uid, rv in rows:
            self.visible.setdefault((uid, rv), now)
            self._last_seq = max(self._last_seq, seq)

    def start(self):
        # topics exist once the processor has started (it creates them)
        deadline = time.time() + 120
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        while f"raw-{self.tag}" not in admin.list_topics():
            assert time.time() < deadline, "processor did not create the topics"
            time.sleep(0.5)
        admin.close()
        self.thread.start()
        time.sleep(8)  # the worker joins its group and recovers its (empty) state

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
            if self.proc.poll() is not None:
                self.log.flush()
                tail = Path(self.log.name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"processor exited with {self.proc.returncode}:\n{tail}")
            if time.time() > deadline:
                raise RuntimeError(f"{len(keys) - len(missing)} of {len(keys)} visible")
            time.sleep(0.05)

    def close(self):
        self.stop.set()
        self.thread.join(60)
        self.proc.terminate()
        self.proc.wait(60)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=30000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10000,
                        help="Events (other objects) run through the pipeline first: a production broker and "
                             "worker are warm (JIT, connections, group membership).")
    args = parser.parse_args()
    messages = _messages(args.events + args.rate * args.seconds, seed=5)
    sustained_msgs, latency_msgs = messages[:args.events], messages[args.events:]
    with tempfile.TemporaryDirectory() as tmpdir, KafkaBroker() as broker:
        tmp = Path(tmpdir)
        run = Run(broker, tmp, uuid.uuid4().hex[:6])
        run.start()
        try:
            topic = f"raw-{run.tag}"
            if args.warmup:
                warmup = _messages(args.warmup, seed=6)
                publish(broker.bootstrap_servers, topic, warmup)
                run.wait([(uid, rv) for _, _, uid, rv in warmup])
            # the writer (with DuckDB's threads) is this process; the publisher a process of its own
            cpu = {"processor": lambda: cpu_seconds(run.proc.pid), "broker": lambda: cpu_seconds(broker._proc.pid),
                   "writer": cpu_seconds}
            cpu_before = {name: f() for name, f in cpu.items()}
            started, (_, published, publisher_cpu) = publish(broker.bootstrap_servers, topic, sustained_msgs)
            keys = [(uid, rv) for _, _, uid, rv in sustained_msgs]
            run.wait(keys)
            sustained = len(keys) / (max(run.visible[k] for k in keys) - started)
            cpu_ms = {name: round((f() - cpu_before[name]) * 1000 / len(keys), 3) for name, f in cpu.items()}
            cpu_ms["publisher"] = round(publisher_cpu * 1000 / len(keys), 3)

            _, (times, _, _) = publish(broker.bootstrap_servers, topic, latency_msgs, rate=args.rate)
            sent = {(uid, rv): t for (_, _, uid, rv), t in zip(latency_msgs, times)}
            run.wait(list(sent))
            latencies = sorted(run.visible[k] - t for k, t in sent.items())
            appended = appended_times(broker.bootstrap_servers, f"workloads-{run.tag}", sent)
            worker_part = sorted(appended[k] - t for k, t in sent.items() if k in appended)
            rest = sorted(run.visible[k] - appended[k] for k in sent if k in appended)
        finally:
            run.close()

    def pct(q, values=None):
        values = latencies if values is None else values
        return round(values[min(len(values) - 1, int(q * len(values)))], 3) if values else None

    print(json.dumps({
        "benchmark": "pipeline publish-to-duckdb",
        "processor_workers": 1,
        "warmup_events": args.warmup,
        "events": len(sustained_msgs),
        "publish_seconds": round(published - started, 2),
        "sustained_events_per_second": round(sustained),
        "sustained_cpu_ms_per_event": cpu_ms,
        "latency_rate_events_per_second": args.rate,
        "latency_events": len(latencies),
        "latency_p50_seconds": pct(0.50),
        "latency_p99_seconds": pct(0.99),
        "latency_max_seconds": round(latencies[-1], 3),
        # the same latencies in two parts: publish -> record appended by the worker, and
        # appended -> visible in DuckDB (transaction commit every 0.5 s, writer batch)
        "latency_to_worker_output_p50_seconds": pct(0.50, worker_part),
        "latency_to_worker_output_p99_seconds": pct(0.99, worker_part),
        "latency_worker_output_to_visible_p50_seconds": pct(0.50, rest),
        "latency_worker_output_to_visible_p99_seconds": pct(0.99, rest),
        "targets": {"sustained_events_per_second": 5000, "latency_p99_seconds": 2.0},
    }))


if __name__ == "__main__":
    main()
