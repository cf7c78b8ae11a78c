"""warehouse/consuming.py: the Kafka writer's batches (dead letters with reasons, offsets), and the
writer against a real broker, including SIGKILL mid-stream and restart.

Every test uses a real DuckDB file in tmp_path; the Kafka tests a real broker."""

from __future__ import annotations

import collections
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path


from workloadmap.catalog import records
from workloadmap.warehouse import checking, consuming
from workloadmap.warehouse.consuming import KafkaWarehouseWriter
from workloadmap.warehouse.writing import Warehouse


from tests.warehouse.workload_records import EXPECTED_LIFECYCLE, as_record, intervals, lifecycle

WORKLOADS, TRANSITIONS = records.WORKLOADS_TOPIC, records.TRANSITIONS_TOPIC
ROOT = Path(__file__).resolve().parents[2]


def test_check_messages_dead_letters_with_reasons_and_keeps_json_checks(tmp_path):
    """The Kafka writer's batch (check_messages): offsets past every message, dead letters with
    reasons, and texts that only the standard library parses (NaN) still go through DuckDB's JSON cast."""
    Message = collections.namedtuple("Message", "topic partition offset key value")
    recs = lifecycle()
    msgs = [Message(WORKLOADS, 0, 10 + i, b"k", json.dumps(r).encode()) for i, r in enumerate(recs)]
    msgs += [Message(WORKLOADS, 1, 3, b"k", b"{not json"), Message(WORKLOADS, 1, 4, b"k", b'{"cluster": "c1"}'),
             Message(WORKLOADS, 1, 5, None, None),
             Message(TRANSITIONS, 0, 7, b"k", json.dumps({"cluster": "c1", "uid": "u", "to": "Running",
                                                           "at": "2025-06-03T09:00:00Z"}).encode())]
    assert gc.isenabled()
    rows, texts, transitions, dead, offsets, strict = consuming.check_messages(msgs, TRANSITIONS)
    assert gc.isenabled()  # off while the batch was parsed, on again
    assert rows == [checking.check_record(r) for r in recs] and texts == [m.value.decode() for m in msgs[:len(recs)]]
    assert len(transitions) == 1 and strict
    assert offsets == {(WORKLOADS, 0): 10 + len(recs), (WORKLOADS, 1): 6, (TRANSITIONS, 0): 8}
    assert [(d.reason, d.offset) for d in dead] == [
        (records.MALFORMED_JSON, 3), (records.MISSING_FIELDS, 4), (records.WRONG_TYPES, 5)]
    nan = Message(WORKLOADS, 0, 99, b"k", json.dumps(as_record(recs[0], uid="u-nan", phase=None))
                  .replace('"phase": null', '"phase": null, "extra": NaN').encode())
    nan_memory = as_record(recs[0], uid="u-nan-2")
    nan_memory["total"]["memory"] = float("nan")  # written NaN by the standard library
    nan_memory = Message(WORKLOADS, 0, 100, b"k", json.dumps(nan_memory).encode())
    rows, texts, _, dead, _, strict = consuming.check_messages([nan, nan_memory], TRANSITIONS)
    assert len(rows) == 1 and not strict  # parsed by the standard library: not strict JSON
    assert [(d.reason, d.offset) for d in dead] == [(records.MALFORMED_JSON, 100)]  # as before the batch check
    with Warehouse(tmp_path / "w.duckdb") as wh:  # stored as before: DuckDB's JSON takes NaN
        assert wh.write_checked(rows, texts, [], {}, texts_are_json=strict).inserted == 1
        assert wh.cursor().execute("SELECT record->>'$.extra' FROM workload_states").fetchone() == ("NaN",)


def test_the_kafka_writer_keeps_both_records_of_a_version_resolved_again_with_its_reference():
    """A TrainJob's one resourceVersion resolved without its runtime, then with it (processors/
    processing.py): the Kafka writer's batch check reads which references were found, as check_record
    does, so the two records have version keys 5#0 and 5#1 and neither is taken for a repeat."""
    Message = collections.namedtuple("Message", "topic partition offset key value")
    base = as_record(lifecycle()[0], uid="tj")
    base["resourceVersion"] = "5"
    ref = {"name": "runtime", "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
           "namespace": None, "objectName": "torch-distributed"}
    without, with_it = ({**base, "references": [{**ref, "found": found}]} for found in (False, True))
    msgs = [Message(WORKLOADS, 0, i, b"k", json.dumps(r).encode()) for i, r in enumerate((without, with_it))]
    rows, *_ = consuming.check_messages(msgs, TRANSITIONS)
    assert rows == [checking.check_record(without), checking.check_record(with_it)]
    assert [row[9] for row in rows] == ["5#0", "5#1"]


def create_topics(bootstrap: str, partitions: int = 3) -> dict[str, str]:
    from kafka.admin import KafkaAdminClient, NewTopic
    suffix = uuid.uuid4().hex[:8]
    names = {"workloads": f"wl-{suffix}", "transitions": f"tr-{suffix}", "deadletter": f"dl-{suffix}"}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="wm-test-admin")
    try:
        admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names.values()])
    finally:
        admin.close()
    return names


def publish(bootstrap: str, topic: str, values: list) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for v in values:
            if isinstance(v, dict):
                key = records.record_key(v.get("cluster", "?"), str(v.get("uid", "?")))
                producer.send(topic, key=key, value=records.encode(v))
            else:
                producer.send(topic, key=b"bad", value=v)
        producer.flush()
    finally:
        producer.close()


def end_offsets(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t)]
        return {(tp.topic, tp.partition): o for tp, o in consumer.end_offsets(tps).items() if o}
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, n: int, timeout: float = 30) -> list[dict]:
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(timeout * 1000))
    out = []
    try:
        for m in consumer:
            out.append(json.loads(m.value))
            if len(out) >= n:
                break
    finally:
        consumer.close()
    return out


def stream(n_workloads: int, prefix: str) -> list[dict]:
    """Lifecycles of n workloads interleaved as a stream (each workload in order)."""
    per = [lifecycle(uid=f"{prefix}-{i}", cluster=f"c{i % 3}") for i in range(n_workloads)]
    return [per[i][k] for k in range(6) for i in range(n_workloads)]


class _Transactions:
    """A consumer's polls as a read_committed consumer sees the processors' output: the records of a
    transaction all at once when it commits (here: one poll's answer at a given time), nothing between."""

    def __init__(self, batches: list[tuple[float, list]]):
        self.started = time.monotonic()
        self.batches = batches   # (seconds after the start, messages) in order

    def poll(self, timeout_ms, max_records):
        due = self.started + self.batches[0][0] if self.batches else None
        deadline = time.monotonic() + timeout_ms / 1000
        if due is None or due > deadline:
            time.sleep(max(0.0, deadline - time.monotonic()))
            return {}
        time.sleep(max(0.0, due - time.monotonic()))
        return {("workloads", 0): self.batches.pop(0)[1]}


def test_a_batch_gathers_in_proportion_to_the_last_writes_cpu_time(tmp_path):
    """Two transactions' records 0.15 s apart: after a write whose CPU time makes the batch gather for
    0.2 s (GATHER_PER_WRITE times it) the batch holds both; after a write that cost nothing it ends
    when a poll brings nothing (the first transaction alone)."""
    Message = collections.namedtuple("Message", "topic partition offset key value")
    recs = lifecycle()
    msgs = [Message(WORKLOADS, 0, i, b"k", json.dumps(r).encode()) for i, r in enumerate(recs)]
    for cost, batch_sizes in ((0.2 / consuming.GATHER_PER_WRITE, [len(msgs)]), (0.0, [2])):
        writer = KafkaWarehouseWriter("127.0.0.1:1", tmp_path / f"w-{cost}.duckdb", max_wait_ms=1000)
        sizes = []
        writer.on_batch = lambda result, count: sizes.append(count)
        writer._consumer = _Transactions([(0.05, msgs[:2]), (0.2, msgs[2:])])
        writer._assigned, writer._assign_checked = frozenset({("workloads", 0)}), time.monotonic()
        writer._last_write_s = cost
        writer.poll_batch()
        writer._consumer = None   # (nothing to close)
        writer.close()
        assert sizes == batch_sizes, cost


def test_kafka_writer_end_to_end(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap_servers
    topics = create_topics(bootstrap)
    recs = stream(50, "e2e")
    transition = {"cluster": "c1", "namespace": "ns", "name": "j", "kind": "Job", "uid": "e2e-0",
                  "from": None, "to": "Initializing", "at": "2025-06-03T09:00:00Z", "gpus": 32,
                  "previousDurationSeconds": None}
    publish(bootstrap, topics["workloads"], recs[:150] + [b"{not json", {"cluster": "c1"}] + recs[150:] + recs[:20])
    publish(bootstrap, topics["transitions"], [transition, transition])
    ends = end_offsets(bootstrap, [topics["workloads"], topics["transitions"]])

    path = tmp_path / "w.duckdb"
    writer = KafkaWarehouseWriter(bootstrap, path, topics=(topics["workloads"], topics["transitions"]),
                                  group_id="wm-e2e", batch_size=64, max_wait_ms=200,
                                  transitions_topic=topics["transitions"], deadletter_topic=topics["deadletter"])
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,))
    thread.start()
    deadline = time.monotonic() + 60
    while (writer.totals.inserted + writer.totals.duplicates + writer.dead_letters
           + writer.totals.transitions_inserted + writer.totals.transition_duplicates) < sum(ends.values()):
        assert time.monotonic() < deadline, writer.totals
        time.sleep(0.1)
    writer.stop()
    thread.join(30)
    assert not thread.is_alive()

    with Warehouse(path, consumer="wm-e2e") as wh:
        cur = wh.cursor()
        assert cur.execute("SELECT count(*) FROM workload_states").fetchone()[0] == len(recs)
        assert cur.execute("SELECT count(*) FROM transitions").fetchone()[0] == 1
        assert wh.offsets() == ends
        assert intervals(wh, "e2e-7") == EXPECTED_LIFECYCLE
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="wm-test-admin")
    try:  # the offsets are also committed to Kafka under the group id, for lag monitoring
        committed = admin.list_group_offsets("wm-e2e")["wm-e2e"]
    finally:
        admin.close()
    assert {(tp.topic, tp.partition): o.offset for tp, o in committed.items()} == ends
    letters = read_all(bootstrap, topics["deadletter"], 2)
    assert sorted(d["reason"] for d in letters) == [records.MALFORMED_JSON, records.MISSING_FIELDS]
    assert {d["stage"] for d in letters} == {"warehouse"}


WRITER_SCRIPT = textwrap.dedent("""
    import json, signal, sys, threading
    from workloadmap.warehouse.consuming import KafkaWarehouseWriter
    bootstrap, path, workloads, transitions, deadletter = sys.argv[1:6]
    def report(result, n):
        print(json.dumps({"messages": n, "inserted": result.inserted, "duplicates": result.duplicates}), flush=True)
    writer = KafkaWarehouseWriter(bootstrap, path, topics=(workloads, transitions), group_id="wm-crash",
                                  batch_size=50, max_wait_ms=100, transitions_topic=transitions,
                                  deadletter_topic=deadletter, on_batch=report,
                                  # by default not: so only DuckDB's offsets can say where to resume
                                  commit_to_kafka=sys.argv[6:7] == ["commit"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    writer.run(stop)
    print("stopped", flush=True)
""")


class WriterProcess:
    def __init__(self, *args: str):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.batches: list[dict] = []
        self.lines: list[str] = []
        # stderr is drained as it comes: left in its pipe, ~64 KB of a client library's warnings
        # would block the writer on its next write (a stall that looks like the writer's own)
        self.errors: collections.deque[str] = collections.deque(maxlen=200)
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_errors, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("{"):
                self.batches.append(json.loads(line))

    def _read_errors(self):
        for line in self.proc.stderr:
            self.errors.append(line.rstrip())

    def messages(self) -> int:
        return sum(b["messages"] for b in self.batches)

    def wait_for(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.messages() < n:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait(10)
                self._readers[1].join(10)
                raise AssertionError(f"writer exited or stalled at {self.messages()}/{n}; its stderr:\n"
                                     + "\n".join(self.errors))
            time.sleep(0.05)


def test_kafka_writer_killed_mid_stream_and_restarted(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap_servers
    topics = create_topics(bootstrap)
    args = (bootstrap, str(tmp_path / "w.duckdb"), topics["workloads"], topics["transitions"], topics["deadletter"])
    first, second = stream(400, "a"), stream(100, "b")  # 2400 + 600 records
    publish(bootstrap, topics["workloads"], first)

    writer = WriterProcess(*args)
    writer.wait_for(600)  # some batches committed, more in flight
    writer.proc.send_signal(signal.SIGKILL)
    writer.proc.wait(10)
    # what DuckDB committed, from its own offsets: a batch committed just before the kill may never
    # have had its report line printed
    with Warehouse(args[1], consumer="wm-crash") as wh:
        written_before = sum(o for (topic, _), o in wh.offsets().items() if topic == topics["workloads"])
    assert writer.messages() <= written_before < len(first)

    republished = first[:100]  # a producer replaying what it already sent
    publish(bootstrap, topics["workloads"], second + republished)
    restarted = WriterProcess(*args)
    restarted.wait_for(len(first) + len(second) + len(republished) - written_before)
    restarted.proc.send_signal(signal.SIGTERM)
    assert restarted.proc.wait(30) == 0
    assert "stopped" in restarted.lines

    # The restart began exactly where the committed batches ended: it read nothing twice,
    # and its only duplicates are the re-published records.
    assert restarted.messages() == len(first) + len(second) + len(republished) - written_before
    assert sum(b["duplicates"] for b in restarted.batches) == len(republished)
    with Warehouse(args[1], consumer="wm-crash") as wh:
        cur = wh.cursor()
        assert cur.execute("SELECT count(*) FROM workload_states").fetchone()[0] == len(first) + len(second)
        assert cur.execute("""SELECT count(*) FROM (SELECT cluster, uid, resource_version FROM workload_states
                              GROUP BY ALL HAVING count(*) > 1)""").fetchone()[0] == 0
        assert wh.offsets() == end_offsets(bootstrap, [topics["workloads"]])
        for uid in ("a-0", "a-399", "b-99"):
            assert intervals(wh, uid) == EXPECTED_LIFECYCLE


def test_a_killed_writers_successor_reads_at_once_as_no_group_member_is_waited_for(kafka_broker, tmp_path):
    """A writer is not a member of a consumer group (it assigns itself every partition, from DuckDB's
    offsets): so a successor started right after a SIGKILL reads at once, where a group member's
    successor would wait for the killed member's session to time out (10 s for kafka-python's, 45 s
    for the Java client's) and then for a rebalance.  The mechanism is what is checked: the group the
    offsets are committed under (for lag monitoring) has no member while either writer reads, and
    the successor's first batch comes within 15 s of its start (a start and a batch take about a
    second of CPU: the bound leaves room for loaded cores, not for a session timeout and a rejoin)."""
    from kafka import KafkaAdminClient

    bootstrap = kafka_broker.bootstrap_servers
    topics = create_topics(bootstrap)
    args = (bootstrap, str(tmp_path / "w.duckdb"), topics["workloads"], topics["transitions"], topics["deadletter"],
            "commit")
    first, second = stream(100, "k"), stream(100, "s")   # 600 records each
    publish(bootstrap, topics["workloads"], first)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="wm-test-admin")
    try:
        writer = WriterProcess(*args)
        writer.wait_for(len(first))
        group = admin.describe_groups(["wm-crash"])["wm-crash"]
        assert group["members"] == [] and group["group_state"] == "Empty", group
        assert admin.list_group_offsets("wm-crash")["wm-crash"], "the writer commits its offsets under the group"
        writer.proc.send_signal(signal.SIGKILL)
        writer.proc.wait(10)

        publish(bootstrap, topics["workloads"], second)
        started = time.monotonic()
        successor = WriterProcess(*args)
        successor.wait_for(len(second), timeout=15)
        first_batch = time.monotonic() - started
        group = admin.describe_groups(["wm-crash"])["wm-crash"]
        assert group["members"] == [] and group["group_state"] == "Empty", group
        successor.proc.send_signal(signal.SIGTERM)
        assert successor.proc.wait(30) == 0
    finally:
        admin.close()
    assert first_batch < 15
    with Warehouse(args[1], consumer="wm-crash") as wh:
        assert wh.cursor().execute("SELECT count(*) FROM workload_states").fetchone()[0] == len(first) + len(second)
        assert wh.offsets() == end_offsets(bootstrap, [topics["workloads"]])
