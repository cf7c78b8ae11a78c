"""Benchmark: the warehouse writer alone on the pod stream (issue 25): its CPU per raw event, per batch.

What it measures is the writer's share of the pod pipeline without the broker, the worker or the
other processes on the cores: the messages the writer reads (workload, transition, pod and node
records) are made once, in this process, by the processors from the pod stream of
``bench/pipeline_bench.py --stream pods`` (``Fleet``: a simulated fleet's workloads, owners, pods
and nodes), then written as the Kafka writer writes them, ``check_messages`` then
``Warehouse.write_checked``, in batches of --batch messages each (one DuckDB thread, the garbage
collector as the services run it).  Timed: the process CPU of those two calls, over the whole
stream, for each batch size, on a new file each time.

Printed, one JSON line per batch size: CPU microseconds per raw event (the pipeline's unit: a raw
event makes 0.6 messages here), milliseconds per batch; then one line with the fixed cost per batch
and the cost per message, from a straight line through the smallest and the largest batch size.
Why several sizes: a batch's statements cost the same whatever its size, so the writer's CPU per
event falls with the batch size, and the pipeline's batch sizes follow the rate and the gathering
(warehouse/consuming.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, namedtuple
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_bench import Fleet  # noqa: E402  (the pod stream of the pipeline bench)
from workloadmap.catalog import records  # noqa: E402
from workloadmap.ingest.publishing import event_key  # noqa: E402
from workloadmap.processors.processing import MemoryStates, Processor  # noqa: E402
from workloadmap.running import collect_garbage_rarely  # noqa: E402
from workloadmap.warehouse.consuming import WRITER_THREADS, allocation_topics, check_messages  # noqa: E402
from workloadmap.warehouse.writing import Warehouse  # noqa: E402

PARTITIONS = 3
Message = namedtuple("Message", "topic partition offset key value")   # what kafka-python hands the writer
_TOPICS = (("records", records.WORKLOADS_TOPIC), ("transitions", records.TRANSITIONS_TOPIC),
           ("pods", records.PODS_TOPIC), ("nodes", records.NODES_TOPIC))


def writer_messages(events: int) -> tuple[int, list[Message]]:
    """The raw events of the pod stream and the messages the processors make of them, per partition in
    order with their offsets, interleaved batch by batch as a worker's transactions publish them."""
    fleet = Fleet(events)
    raw = [(event_key(e), records.encode(e)) for e in fleet.events]
    stream = [(key, value, records.RAW_TOPIC, hash(key) % PARTITIONS, i) for i, (key, value) in enumerate(raw)]
    processor, states, offsets, out = Processor(), {}, Counter(), []
    for start in range(0, len(stream), 1000):
        outputs = processor.process_batch(stream[start:start + 1000],
                                          lambda p: states.setdefault(p, MemoryStates()))
        for partition, produced in outputs.items():
            for field, topic in _TOPICS:
                for key, value in getattr(produced, field):
                    out.append(Message(topic, partition, offsets[(topic, partition)], key, value))
                    offsets[(topic, partition)] += 1
    return len(raw), out


def writing(messages: list[Message], batch: int) -> tuple[float, int]:
    """CPU seconds to write `messages` in batches of `batch` into a new file, and the batches."""
    with tempfile.TemporaryDirectory() as tmp, Warehouse(Path(tmp) / "writer.duckdb") as wh:
        wh.conn.execute(f"SET threads = {WRITER_THREADS}")
        began, batches = time.process_time(), 0
        for start in range(0, len(messages), batch):
            pods, nodes = [], []
            rows, texts, transitions, dead, offsets, strict = check_messages(
                messages[start:start + batch], allocations=allocation_topics(pods, nodes))
            assert not dead, dead[:1]
            wh.write_checked(rows, texts, transitions, offsets, texts_are_json=strict, pod_rows=pods, node_rows=nodes)
            batches += 1
        return time.process_time() - began, batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=60000, help="raw events of the pod stream")
    parser.add_argument("--batch", type=int, nargs="+", default=[200, 400, 1500],
                        help="messages per batch (the pipeline's batches at 2,000 events/s: ~400)")
    args = parser.parse_args()
    events, messages = writer_messages(args.events)
    collect_garbage_rarely()   # as `workloadmap run warehouse` does
    kinds = Counter(m.topic for m in messages)
    per_batch = {}
    for batch in args.batch:
        load = os.getloadavg()[0]
        cpu, batches = writing(messages, batch)
        per_batch[batch] = cpu * 1000 / batches
        print(json.dumps({"bench": "writer.pod_stream", "raw_events": events, "messages": len(messages),
                          "messages_by_topic": dict(kinds), "batch_messages": batch, "batches": batches,
                          "cpu_us_per_raw_event": round(cpu * 1e6 / events, 1),
                          "cpu_ms_per_batch": round(per_batch[batch], 2),
                          "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}), flush=True)
    small, large = min(args.batch), max(args.batch)
    if large > small:
        per_message_ms = (per_batch[large] - per_batch[small]) / (large - small)
        print(json.dumps({"bench": "writer.pod_stream.fit",
                          "fixed_ms_per_batch": round(per_batch[small] - small * per_message_ms, 2),
                          "us_per_message": round(per_message_ms * 1000, 1),
                          "from_batches": [small, large]}), flush=True)


if __name__ == "__main__":
    main()
