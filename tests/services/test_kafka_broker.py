"""The real Kafka broker of tests/services: topics, idempotent produce, group consume,
committed offsets, and that all of it survives a broker restart.

Needs Java 17+, the broker jars (fetched once with mvn, see tests/services/kafka_broker.py)
and kafka-python. Opt out explicitly with WORKLOADMAP_NO_KAFKA=1; otherwise a broker
that cannot start or a missing kafka-python is a failure, not a skip.
"""

from __future__ import annotations

import time
import uuid
import warnings

import pytest

from tests.services.fixtures import kafka_opted_out

if kafka_opted_out():
    pytest.skip("WORKLOADMAP_NO_KAFKA=1: real Kafka broker tests opted out",
                allow_module_level=True)  # fmt: skip

try:
    with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas via deprecated APIs
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
        from kafka.admin import NewTopic
except ImportError as e:  # fail, with the fix in the message
    raise ImportError(
        "kafka-python is needed for the Kafka tests (pip install kafka-python); "
        "set WORKLOADMAP_NO_KAFKA=1 to opt out"
    ) from e

N_MESSAGES = 100
PARTITIONS = 3
TIMEOUT_S = 30.0


def _consume(consumer: KafkaConsumer, count: int) -> list:
    """Poll until `count` records arrived (or fail after TIMEOUT_S)."""
    records: list = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)}/{count} records consumed"
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(batch)
    return records


def _group_consumer(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )


def test_produce_consume_commit_and_survive_restart(kafka_broker):
    bootstrap = kafka_broker.bootstrap_servers
    assert bootstrap.startswith("127.0.0.1:")
    topic = f"wm-test-{uuid.uuid4().hex[:8]}"
    group = f"wm-group-{uuid.uuid4().hex[:8]}"
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="wm-test-admin")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        futures = [
            producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
            for i in range(N_MESSAGES)
        ]
        producer.flush(timeout=TIMEOUT_S)
        metas = [f.get(timeout=TIMEOUT_S) for f in futures]
    finally:
        producer.close()
    assert {m.partition for m in metas} == set(range(PARTITIONS))  # keys spread over 3

    consumer = _group_consumer(bootstrap, topic, group)
    try:
        records = _consume(consumer, N_MESSAGES)
        consumer.commit()
        committed = {tp: consumer.committed(tp) for tp in partitions}
        end = consumer.end_offsets(partitions)
    finally:
        consumer.close()
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(N_MESSAGES))
    assert committed == end
    assert sum(committed.values()) == N_MESSAGES

    kafka_broker.restart()  # clean stop + start, same ports and log dir
    assert kafka_broker.bootstrap_servers == bootstrap

    # Committed offsets survived: the group resumes at the end and gets only new data.
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        producer.send(topic, key=b"after", value=b"after-restart").get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = _group_consumer(bootstrap, topic, group)
    try:
        assert {tp: consumer.committed(tp) for tp in partitions} == committed
        after = _consume(consumer, 1)
        assert [r.value for r in after] == [b"after-restart"]
        assert not any(consumer.poll(timeout_ms=1000).values())
    finally:
        consumer.close()

    # The data survived: a new group reads all of it again, keys in their partitions.
    consumer = _group_consumer(bootstrap, topic, f"{group}-fresh")
    try:
        again = _consume(consumer, N_MESSAGES + 1)
    finally:
        consumer.close()
    expected = {(m.partition, m.offset): f"v{i}".encode() for i, m in enumerate(metas)}
    got = {(r.partition, r.offset): r.value for r in again if r.value != b"after-restart"}
    assert got == expected
