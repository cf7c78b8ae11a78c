"""The embedded pipeline: raw object events in, a DuckDB warehouse out, in one process and no broker.

Why it exists: the full stack (watchers, Kafka, faust workers, the warehouse
writer) is for many clusters around the clock; replaying a recorded history,
a notebook, a test, one small cluster (`run watchers --embedded`) or the
`demo` need the same records in the same warehouse without a broker.  The
stages are the same code as in the full stack: ``processors.processing``
resolves each raw event and attributes pods (the state lives in memory
instead of the output topics) and ``warehouse.writing`` writes the workload,
pod and node records and the transitions, ``batch`` records per DuckDB
transaction.  What Kafka would
carry to the dead-letter topic is kept in ``dead_letters``.

It has the publisher interface of ``ingest.publishing`` (``publish``,
``publish_raw``, ``flush``, ``close``), so the cluster watchers publish into
it as they would into Kafka; ``feed`` takes whole streams: raw event dicts,
JSON lines as ``replay --to-file`` writes them, ``(key, value bytes, ...)``
tuples as ``ingest.simulating.simulate_messages`` and
``ingest.publishing.read_jsonl`` yield them.

    with EmbeddedPipeline.open("history.duckdb") as pipeline:
        pipeline.feed_file("events.jsonl")
        pipeline.flush()
        pipeline.counts, pipeline.query("demand_by_cluster").dicts()
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable

from workloadmap.catalog import Catalog, records
from workloadmap.exporter.tracking import DEADLETTERS, NODES, PODS, TRANSITIONS, WORKLOADS, Tracker
from workloadmap.ingest.publishing import event_key, jsonl_message, read_jsonl
from workloadmap.processors.processing import MemoryStates, Processor
from workloadmap.warehouse.allocating import check_node, check_pod
from workloadmap.warehouse.checking import check_records, check_transition
from workloadmap.warehouse.querying import Result, run_query
from workloadmap.warehouse.writing import Warehouse

log = logging.getLogger(__name__)


class EmbeddedPipeline:
    """Processes raw messages in-process and writes their records into `warehouse`.

    Records and transitions are written `batch` records at a time, and at every
    ``flush`` (the watchers flush before each checkpoint; call it before reading
    the warehouse).  ``counts`` holds events read, records and transitions
    produced, dead letters; ``dead_letters`` the dead letters themselves (as the
    dead-letter topic would carry them).  A warehouse passed in stays the
    caller's; one opened by ``EmbeddedPipeline.open`` is closed by ``close``.
    With a `tracker` (``exporter.tracking.Tracker``), the records, pods, nodes,
    transitions and dead letters also go to it at every ``flush``, as the
    exporter would read them from the topics (``run watchers --embedded --metrics``).
    """

    def __init__(self, warehouse: Warehouse, *, batch: int = 5000, catalog: Catalog | None = None,
                 tracker: Tracker | None = None):
        self.warehouse = warehouse
        self.tracker = tracker
        self._tracked: list[tuple] = []
        self.batch = batch
        self.processor, self.states = Processor(catalog), MemoryStates()
        self.counts = {"events": 0, "records": 0, "dead_letters": 0, "transitions": 0, "pods": 0, "nodes": 0}
        self.dead_letters: list[dict] = []
        self._records: list[bytes] = []
        self._transitions: list[dict] = []
        self._pods: list[bytes] = []
        self._nodes: list[bytes] = []
        self._owns_warehouse = False

    def __repr__(self):
        return f"EmbeddedPipeline({str(self.warehouse.path)!r})"

    @classmethod
    def open(cls, path: str | os.PathLike, *, batch: int = 5000, catalog: Catalog | None = None,
             tracker: Tracker | None = None) -> "EmbeddedPipeline":
        """A pipeline into the warehouse file at `path` (created, or migrated, as needed)."""
        pipeline = cls(Warehouse(path), batch=batch, catalog=catalog, tracker=tracker)
        pipeline._owns_warehouse = True
        return pipeline

    # ------------------------------------------------------------------ in

    def publish(self, event: dict) -> None:
        """One raw event ``{cluster, type, observedAt, object}``."""
        self.publish_raw(event_key(event), records.encode(event))

    def publish_raw(self, key: bytes | None, value: bytes) -> None:
        """One raw message as Kafka would carry it (bytes that may not even be JSON: dead-lettered)."""
        out = self.processor.process(key, value, self.states)
        self.counts["events"] += 1
        self.counts["records"] += len(out.records)
        self.counts["dead_letters"] += len(out.dead_letters)
        for _, v in out.dead_letters:
            self._dead_letter(json.loads(v))
        self._records.extend(record for _, record in out.records)
        self._transitions.extend(json.loads(t) for _, t in out.transitions)
        if self.tracker is not None:
            for kind, pairs in ((WORKLOADS, out.records), (TRANSITIONS, out.transitions), (PODS, out.pods),
                                (NODES, out.nodes)):
                self._tracked.extend((kind, v, k) for k, v in pairs)
        self.counts["pods"] += len(out.pods)
        self.counts["nodes"] += len(out.nodes)
        self._pods.extend(v for _, v in out.pods)
        self._nodes.extend(v for _, v in out.nodes)
        if len(self._records) + len(self._pods) + len(self._nodes) >= self.batch:
            self.flush()

    def feed(self, messages: Iterable) -> int:
        """Process a stream of messages; returns how many.

        A message is a raw event dict, a JSON line (str or bytes, as
        ``replay --to-file`` writes them), or a ``(key, value bytes, ...)``
        tuple (``simulate_messages``, ``read_jsonl``).  Call ``flush`` before
        reading the warehouse: the last batch waits for it.
        """
        n = 0
        for message in messages:
            if isinstance(message, dict):
                self.publish(message)
            elif isinstance(message, (str, bytes)):
                self.publish_raw(*jsonl_message(message))
            else:
                self.publish_raw(message[0], message[1])
            n += 1
        return n

    def feed_file(self, path: str | os.PathLike) -> int:
        """Process a JSON-lines file of raw messages (``replay --to-file``, ``write_jsonl``); returns how many."""
        return self.feed(read_jsonl(path))

    # ------------------------------------------------------------------ out

    def flush(self, timeout: float | None = None) -> None:
        """Write what is pending in one warehouse transaction (`timeout`: the publisher interface's, unused).

        Each record and transition is checked first, as the Kafka writer checks them: one the
        warehouse cannot store becomes a dead letter (stage ``warehouse``) and the others land.
        One bad record must not lose its batch, nor, left pending, fail every later flush."""
        if self._records or self._transitions or self._pods or self._nodes:
            self._write_pending()
        if self._tracked:
            self.tracker.apply_batch(self._tracked)
            self._tracked = []

    def _write_pending(self) -> None:
        pending, transitions = list(self._records), list(self._transitions)
        pods, nodes = list(self._pods), list(self._nodes)
        self._records.clear()
        self._transitions.clear()
        self._pods.clear()
        self._nodes.clear()
        rows, texts, transition_rows = [], [], []
        for row, value in zip(check_records([json.loads(v) for v in pending]), pending):
            if isinstance(row, ValueError):
                self._refused(row, value, records.WORKLOADS_TOPIC)
            else:
                rows.append(row)
                texts.append(value.decode())
        for transition in transitions:
            try:
                transition_rows.append(check_transition(transition))
            except ValueError as exc:
                self._refused(exc, records.encode(transition), records.TRANSITIONS_TOPIC)
        pod_rows, node_rows = [], []
        for values, check, out, topic in ((pods, check_pod, pod_rows, records.PODS_TOPIC),
                                          (nodes, check_node, node_rows, records.NODES_TOPIC)):
            for value in values:
                try:
                    out.append(check(json.loads(value)))
                except ValueError as exc:
                    self._refused(exc, value, topic)
        self.warehouse.write_checked(rows, texts, transition_rows, pod_rows=pod_rows, node_rows=node_rows)
        self.counts["transitions"] += len(transition_rows)

    def _refused(self, exc: ValueError, value: bytes, topic: str) -> None:
        reason = getattr(exc, "reason", records.WRONG_TYPES)
        detail = getattr(exc, "detail", str(exc))
        self._dead_letter(records.DeadLetter("warehouse", reason, detail[:2000], value, topic=topic).to_dict())
        self.counts["dead_letters"] += 1

    def _dead_letter(self, letter: dict) -> None:
        # no dead-letter topic to read here: the log is where an operator sees what was refused
        log.warning("dead letter (%s, %s): %s", letter["stage"], letter["reason"], letter["detail"])
        self.dead_letters.append(letter)
        if self.tracker is not None:
            self._tracked.append((DEADLETTERS, records.encode(letter), None))

    def query(self, name: str, **params) -> Result:
        """A named query of ``warehouse/queries/`` over what was flushed (``Result.rows``, ``.dicts()``)."""
        return run_query(self.warehouse.cursor(), name, **params)

    def close(self) -> None:
        """Flush, and close the warehouse if ``open`` opened it."""
        try:
            self.flush()
        finally:
            if self._owns_warehouse:
                self.warehouse.close()

    def __enter__(self) -> "EmbeddedPipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
