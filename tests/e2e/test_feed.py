"""`workloadmap feed`: transitions from the warehouse (embedded) and from the real topic (full mode)."""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid

import click
import pytest
from click.testing import CliRunner

from tests.analytics_history import build, records_and_transitions
from workloadmap import feeding
from workloadmap.cli import analytics_commands
from workloadmap.warehouse.writing import Warehouse


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return build(tmp_path_factory.mktemp("feed") / "h.duckdb")


def invoke(*args):
    group = click.Group("workloadmap")
    analytics_commands.register(group)
    return CliRunner().invoke(group, list(args))


def test_lines_in_time_order_with_durations(history):
    result = invoke("feed", "--duckdb", history)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 11
    assert lines[0] == "2026-11-01T00:00:00Z a ml/train JobSet (new) -> Initializing 8 GPU"
    assert lines[1] == "2026-11-01T00:30:00Z b web/infer InferenceService (new) -> Suspended 2 GPU"
    assert "2026-11-01T05:00:00Z a ml/train JobSet Running -> Completed 8 GPU after 4h0m" in lines
    assert lines[-1] == "2026-11-01T06:00:00Z b web/infer InferenceService Running -> Deleted 0 GPU after 2h30m"


def test_filters_and_json_lines(history):
    result = invoke("feed", "--duckdb", history, "-n", "ml", "--status", "Running", "-o", "jsonl")
    got = [json.loads(line) for line in result.output.splitlines()]
    assert [(t["name"], t["from"], t["at"]) for t in got] == [
        ("train", "Initializing", "2026-11-01T01:00:00.000Z"), ("big", None, "2026-11-01T01:30:00.000Z"),
        ("serve", None, "2026-11-01T02:00:00.000Z"), ("serve", "Degraded", "2026-11-01T04:00:00.000Z")]
    assert set(got[0]) == {"cluster", "namespace", "name", "kind", "uid", "framework", "definition", "from", "to",
                           "at", "gpus", "previousDurationSeconds"}
    result = invoke("feed", "--duckdb", history, "--cluster", "b", "--kind", "PyTorchJob")
    assert [line.split()[4:7] for line in result.output.splitlines()] == [["(new)", "->", "Running"],
                                                                         ["Running", "->", "Failed"]]
    result = invoke("feed", "--duckdb", history, "--since", "2026-11-01T04:30:00Z", "--max-messages", "2")
    assert [line.split()[0] for line in result.output.splitlines()] == ["2026-11-01T04:30:00Z", "2026-11-01T05:00:00Z"]


def test_duration_text():
    assert [feeding.duration_text(s) for s in (42, 65, 3 * 3600 + 12 * 60 + 5, 2 * 86400 + 4 * 3600 + 59)] == [
        "42s", "1m5s", "3h12m", "2d4h"]


def test_follow_a_snapshot_that_the_writer_replaces(tmp_path):
    """The follower reopens the file each poll; a late cluster's older transition still shows (rowid cursor)."""
    records, transitions = records_and_transitions()
    snap = tmp_path / "snap.duckdb"
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.write(records[:3], [t for t in transitions if t["name"] == "train"])
        wh.snapshot(snap)
        seen = []
        follower = feeding.reading_warehouse(snap, feeding.Filters(), follow=True, poll_interval=0.05,
                                             idle_timeout=5)
        thread = threading.Thread(target=lambda: seen.extend(follower))
        thread.start()
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [t["to"] for t in seen] == ["Initializing", "Running", "Completed"]
        late = [t for t in transitions if t["name"] == "big"]  # 01:30 and 04:30: older than train's 05:00
        wh.write([], late)
        wh.snapshot(snap)
        thread.join(timeout=15)
    assert [(t["name"], t["to"]) for t in seen[3:]] == [("big", "Running"), ("big", "Failed")]


def test_missing_warehouse_is_an_error(tmp_path):
    result = invoke("feed", "--duckdb", str(tmp_path / "none.duckdb"))
    assert result.exit_code == 1 and "no such warehouse file" in result.output


# --------------------------------------------------------------------------- Kafka


def new_topic(bootstrap) -> str:
    """A fresh 3-partition topic (the broker does not auto-create topics)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"feed-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    finally:
        admin.close()
    return topic


def produce(bootstrap, topic, values, *, transactional: bool = False, abort: bool = False):
    from kafka import KafkaProducer

    extra = {"transactional_id": f"feed-test-{uuid.uuid4().hex[:8]}"} if transactional else {}
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **extra)
    if transactional:
        producer.init_transactions()
        producer.begin_transaction()
    for v in values:
        raw = v if isinstance(v, bytes) else json.dumps(v).encode()
        producer.send(topic, key=f"{v['cluster']}/{v['uid']}".encode() if isinstance(v, dict) else None, value=raw)
    if transactional:
        producer.abort_transaction() if abort else producer.commit_transaction()
    producer.flush()
    producer.close()


def test_kafka_feed_from_the_beginning_with_filters(kafka_broker):
    topic = new_topic(kafka_broker.bootstrap_servers)
    _, transitions = records_and_transitions()
    produce(kafka_broker.bootstrap_servers, topic, transitions[:6] + [b"not json", {"cluster": "a", "uid": "x"}])
    # an aborted transaction never shows (read_committed); a committed one does
    produce(kafka_broker.bootstrap_servers, topic, [dict(transitions[6], name="aborted")], transactional=True,
            abort=True)
    produce(kafka_broker.bootstrap_servers, topic, transitions[6:], transactional=True)
    env = {"WORKLOADMAP_TRANSITIONS_TOPIC": topic}
    result = CliRunner(env=env).invoke(_group(), [
        "feed", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--from-beginning", "--idle-timeout", "5",
        "-o", "jsonl"])
    assert result.exit_code == 0, result.output
    got = [json.loads(line) for line in result.output.splitlines()]
    assert sorted((t["name"], t["to"], t["at"]) for t in got) == sorted(
        (t["name"], t["to"], t["at"]) for t in transitions)
    assert "aborted" not in result.output
    # filters, lines, and stopping after N
    result = CliRunner(env=env).invoke(_group(), [
        "feed", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--from-beginning", "--idle-timeout", "5",
        "--cluster", "b", "--status", "Running,Deleted"])
    assert sorted(result.output.splitlines()) == [
        "2026-11-01T01:30:00Z b ml/big PyTorchJob (new) -> Running 16 GPU",
        "2026-11-01T03:30:00Z b web/infer InferenceService Suspended -> Running 2 GPU after 3h0m",
        "2026-11-01T06:00:00Z b web/infer InferenceService Running -> Deleted 0 GPU after 2h30m",
    ]
    result = CliRunner(env=env).invoke(_group(), [
        "feed", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--from-beginning", "--max-messages", "2"])
    assert len(result.output.splitlines()) == 2


def test_kafka_feed_without_from_beginning_shows_only_new_transitions(kafka_broker):
    from workloadmap.settings import Settings

    topic = new_topic(kafka_broker.bootstrap_servers)
    _, transitions = records_and_transitions()
    produce(kafka_broker.bootstrap_servers, topic, transitions[:2])
    settings = Settings(bootstrap_servers=kafka_broker.bootstrap_servers, transitions_topic=topic)
    seen, stop = [], threading.Event()
    reader = feeding.reading_topic(settings, idle_timeout=20, poll_ms=100, should_stop=stop.is_set)
    thread = threading.Thread(target=lambda: seen.extend(reader))
    thread.start()
    time.sleep(3)  # the consumer has found the end of the topic by now
    produce(kafka_broker.bootstrap_servers, topic, transitions[2:4])
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(timeout=10)
    assert [(t["name"], t["to"]) for t in seen] == [(t["name"], t["to"]) for t in transitions[2:4]]


def _group():
    group = click.Group("workloadmap")
    analytics_commands.register(group)
    return group
