"""The publisher: files replay byte for byte; Kafka gets every message, keyed per object, in order."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections import defaultdict

import pytest

from workloadmap.catalog import records
from workloadmap.ingest.publishing import CallbackPublisher, KafkaPublisher, event_key, read_jsonl, write_jsonl
from workloadmap.ingest.simulating import simulate, simulate_messages


@pytest.fixture(scope="module")
def messages():
    return list(simulate_messages(workloads=30, days=1, seed=4, bad_fraction=0.1))


def test_event_key_is_cluster_and_namespace_or_name_and_survives_missing_metadata():
    """records.raw_key: a namespace's objects share a key (a pod and its owners: one partition, in order);
    a cluster-scoped object (a Node) is keyed by its name."""
    event = next(simulate(workloads=1, days=1)).event
    assert event_key(event) == f"{event['cluster']}/{event['object']['metadata']['namespace']}".encode()
    node = {"cluster": "research", "object": {"kind": "Node", "metadata": {"name": "gpu-7", "uid": "u"}}}
    assert event_key(node) == b"research/gpu-7"
    assert event_key({"cluster": "research", "object": {"metadata": {}}}) == b"research/"
    assert event_key({"cluster": "research", "object": "text"}) == b"research/"
    assert event_key({"object": None}) == b"/"


def test_jsonl_replays_every_message_byte_for_byte(tmp_path, messages):
    path = tmp_path / "history.jsonl"
    assert write_jsonl(messages, path) == len(messages)
    assert list(read_jsonl(path)) == [(key, value) for key, value, _ in messages]
    lines = path.read_text().splitlines()
    for line, (key, value, intent) in zip(lines, messages):
        doc = json.loads(line)
        if intent.expected_deadletter_reason is None:
            assert doc == json.loads(value)                      # good events are written as themselves
        elif "valueBase64" in doc:
            assert base64.b64decode(doc["valueBase64"]) == value
    assert any("valueBase64" in json.loads(line) for line in lines)   # malformed bytes need the envelope


def test_jsonl_of_simulated_events_and_dicts(tmp_path):
    events = list(simulate(workloads=5, days=1, seed=2))
    write_jsonl(events, tmp_path / "a.jsonl")
    write_jsonl([e.event for e in events], tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert list(read_jsonl(tmp_path / "a.jsonl")) == [(e.key, records.encode(e.event)) for e in events]


def test_callback_publisher_hands_over_keys_and_bytes(messages):
    got = []
    with CallbackPublisher(lambda k, v: got.append((k, v))) as publisher:
        for key, value, intent in messages:
            if intent.event is not None:
                publisher.publish(intent.event)
            else:
                publisher.publish_raw(key, value)
    assert got == [(key, value) for key, value, _ in messages]
    assert publisher.sent == len(messages)


def test_security_options_are_checked_and_never_shown():
    with pytest.raises(ValueError) as err:
        KafkaPublisher("127.0.0.1:1", security={"sasl_plain_pasword": "hunter2-secret"})
    assert "hunter2-secret" not in str(err.value) and "sasl_plain_pasword" in str(err.value)


# --------------------------------------------------------------------------- real broker


def _topic(bootstrap: str, partitions: int = 3) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic
    name = f"test-raw-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-admin")
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()
    return name


def _consume(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0):
    from kafka import KafkaConsumer
    import time
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=2000)
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                got.extend(batch)
    finally:
        consumer.close()
    return got


def test_kafka_publisher_delivers_everything_keyed_and_in_order(kafka_broker, messages, caplog):
    topic = _topic(kafka_broker.bootstrap_servers)
    caplog.set_level(logging.DEBUG)
    secret = "pw-never-logged-" + uuid.uuid4().hex
    # the SASL options pass through (kafka-python ignores them on a PLAINTEXT listener) and are never logged
    with KafkaPublisher(kafka_broker.bootstrap_servers, topic=topic,
                        security={"security_protocol": "PLAINTEXT", "sasl_plain_username": "ingest",
                                  "sasl_plain_password": secret}) as publisher:
        assert secret not in repr(publisher)
        for key, value, intent in messages:
            if intent.event is not None:
                publisher.publish(intent.event)
            else:
                publisher.publish_raw(key, value)
        publisher.flush()
    assert caplog.records and secret not in caplog.text
    got = _consume(kafka_broker.bootstrap_servers, topic, len(messages))
    assert sorted((m.key, m.value) for m in got) == sorted((k, v) for k, v, _ in messages)
    # per key: one partition, and the order it was published in
    sent = defaultdict(list)
    for key, value, _ in messages:
        sent[key].append(value)
    received = defaultdict(list)
    partitions = defaultdict(set)
    for m in sorted(got, key=lambda m: (m.partition, m.offset)):
        received[m.key].append(m.value)
        partitions[m.key].add(m.partition)
    assert received == sent
    assert all(len(p) == 1 for p in partitions.values())
    assert len({m.partition for m in got}) > 1


def test_kafka_publisher_gzip_and_jsonl_replay(kafka_broker, tmp_path, messages):
    path = tmp_path / "replay.jsonl"
    write_jsonl(messages, path)
    topic = _topic(kafka_broker.bootstrap_servers, partitions=1)
    with KafkaPublisher(kafka_broker.bootstrap_servers, topic=topic, compression_type="gzip") as publisher:
        for key, value in read_jsonl(path):
            publisher.publish_raw(key, value)
    # leaving the block flushed: everything is there, in file order on one partition
    got = _consume(kafka_broker.bootstrap_servers, topic, len(messages))
    assert [(m.key, m.value) for m in sorted(got, key=lambda m: m.offset)] == [(k, v) for k, v, _ in messages]


class _Cluster:
    """The part of kafka-python's ClusterMetadata a partitioner reads: one topic's partitions."""

    def __init__(self, partitions: int):
        self.partitions = partitions

    def topics(self, exclude_internal_topics=True):
        return {"raw"}

    def partitions_for_topic(self, topic):
        return set(range(self.partitions))

    available_partitions_for_topic = partitions_for_topic


def test_the_publishers_partitioner_puts_each_key_where_the_default_one_does_when_partitions_are_added():
    from kafka.partitioner import DefaultPartitioner

    from workloadmap.ingest.publishing import key_partitioner

    keys = [f"prod-us-east/team-{i:03d}".encode() for i in range(200)] + [b"research/", b""]
    remembering, default = key_partitioner(), DefaultPartitioner()
    for partitions in (3, 3, 6):   # asked twice (the second time from memory), then the topic grows
        cluster = _Cluster(partitions)
        expected = [default.partition("raw", k, k, None, None, cluster) for k in keys]
        assert [remembering.partition("raw", k, k, None, None, cluster) for k in keys] == expected
        assert len(set(expected)) == partitions   # (the keys spread over every partition)
    assert remembering.partition("raw", None, None, b"v", b"v", _Cluster(3)) in range(3)   # no key: any
