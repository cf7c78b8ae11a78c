"""The worker's outputs on a real broker are the processor's, byte for byte.

How the worker consumes, batches, sends and commits (processors/consuming.py,
pipelining.py, sending.py, app.py) is about speed; what it writes must be
exactly what ``Processor.process_batch`` makes of each raw partition's events
in offset order (tests/processors/test_processing.py checks that batching
changes nothing there).  A stream of pods, nodes, owners and workloads with
malformed events goes through a real `workloadmap run processors`; each
output topic's committed messages, partition by partition and in order, must
equal what a processor in this process makes of the raw topic read back.
Only a dead letter's ``at`` (when it was made) is left out of the comparison.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

from kafka import KafkaConsumer, TopicPartition

from tests.e2e.test_pipeline_e2e import Pipeline, pipeline_on  # noqa: F401 - the fixture
from workloadmap.catalog import records
from workloadmap.ingest.publishing import KafkaPublisher, event_key
from workloadmap.ingest.scheduling import simulate_clusters
from workloadmap.ingest.simulating import simulate_messages
from workloadmap.processors.processing import KIND_WAIT, MemoryStates, Processor

OUTPUTS = {"workloads": "records", "transitions": "transitions", "deadletter": "dead_letters",
           "pods": "pods", "nodes": "nodes", "state": "state"}


def _stream() -> list[tuple[bytes, bytes]]:
    fleet = []
    for event in simulate_clusters(clusters=2, workloads=60, days=3, seed=7, kubelet=True):
        fleet.append((event_key(event), records.encode(event)))
        if len(fleet) == 4000:
            break
    workloads = [(k, v) for k, v, _ in simulate_messages(clusters=2, workloads=120, days=2, seed=3,
                                                          bad_fraction=0.06)]
    # interleaved, so that batches mix both
    return [m for pair in zip(fleet[::2], fleet[1::2]) for m in pair] + workloads


def _comparable(topic: str, value: bytes | None):
    if topic == "deadletter" and value is not None:
        letter = json.loads(value)
        letter.pop("at")
        return letter
    return value


def _read(bootstrap: str, topic: str) -> dict[int, list]:
    """A topic's committed messages by partition, in offset order: (key, value)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: dict[int, list] = defaultdict(list)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                out[tp.partition].extend((m.key, m.value) for m in messages)
        return out
    finally:
        consumer.close()


def test_the_workers_outputs_are_the_processors_byte_for_byte(kafka_broker, pipeline_on, tmp_path):  # noqa: F811
    p: Pipeline = pipeline_on(kafka_broker.bootstrap_servers)
    p.start("processors")
    with KafkaPublisher(p.bootstrap, topic=p.topic("raw")) as publisher:
        for key, value in _stream():
            publisher.publish_raw(key, value)
        publisher.flush()

    # what a processor makes of each raw partition's events in offset order (the raw topic holds
    # only what was published: this stream has no referenced objects, so no relays)
    raw = _read(p.bootstrap, p.topic("raw"))
    # as the worker makes its processor: a workload of an unknown kind waits for its definition
    processor, expected = Processor(kind_wait=KIND_WAIT), defaultdict(list)
    states: dict[int, MemoryStates] = defaultdict(MemoryStates)
    for partition, messages in raw.items():
        stream = [(k, v, p.topic("raw"), partition, offset) for offset, (k, v) in enumerate(messages)]
        for start in range(0, len(stream), 500):
            for part, out in processor.process_batch(stream[start:start + 500], states.__getitem__).items():
                assert not out.relays and not out.definitions
                for topic, field in OUTPUTS.items():
                    expected[(topic, part)].extend(getattr(out, field))
    assert {topic for topic, _ in expected} == set(OUTPUTS), "the stream makes every kind of output"

    deadline = time.time() + 240
    while True:
        assert p.procs["processors"].poll() is None, p.log("processors")
        got = {(topic, part): messages for topic in OUTPUTS
               for part, messages in _read(p.bootstrap, p.topic(topic)).items()}
        if all(len(got.get(where, ())) >= len(messages) for where, messages in expected.items()):
            break
        assert time.time() < deadline, {w: (len(got.get(w, ())), len(m)) for w, m in expected.items()}
        time.sleep(1)
    assert set(got) == set(expected)
    for (topic, part), messages in expected.items():
        assert [(k, _comparable(topic, v)) for k, v in got[(topic, part)]] == \
            [(k, _comparable(topic, v)) for k, v in messages], (topic, part)
