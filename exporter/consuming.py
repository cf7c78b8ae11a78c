"""Consuming the pipeline's topics into a Tracker: every partition from its beginning, at every start.

Why from the beginning and without a consumer group: the exporter keeps no
state of its own, so a restart rebuilds the series from what the topics hold
(a deleted workload's last record is its deletion, so nothing stale comes
back), and there is nothing to balance between replicas: each replica reads
everything and serves the same series.  Counters rebuilt from the topics'
contents resume at least where they were (the topics only grow), which
Prometheus reads as an ordinary increase, not a reset.

Ready once every partition that existed at the start has been read up to the
end it had then (``ready``); a topic created later (the pods topic before the
first pod record) is picked up within ``ASSIGN_EVERY_S`` and read from its
beginning too.  The processors write in transactions: records are read
committed only.
"""

from __future__ import annotations

import logging
import threading
import time

from .tracking import Tracker

log = logging.getLogger(__name__)

ASSIGN_EVERY_S = 10.0   # how often the consumer looks for partitions it does not read yet
LAG_EVERY_S = 1.0       # how often the lag gauges are set
RETRY_FIRST_S, RETRY_MOST_S = 0.5, 8.0   # pauses between polls while the broker does not answer


class TopicsConsumer:
    """Reads `topics` (topic name -> tracker kind) into `tracker` until stopped.

    `security`: kafka-python settings for a secured cluster (``security_protocol``,
    ``sasl_mechanism``, ...).  ``ready`` is set once caught up with the start's end
    offsets; ``healthy()`` is False once the loop has ended on an error.
    """

    def __init__(self, tracker: Tracker, bootstrap_servers: str, topics: dict[str, str], *,
                 client_id: str = "workloadmap-exporter", security: dict | None = None, batch_size: int = 5000,
                 poll_ms: int = 500):
        self.tracker = tracker
        self.bootstrap_servers = bootstrap_servers
        self.topics = dict(topics)
        self.kinds = {kind: topic for topic, kind in self.topics.items()}
        self.client_id = client_id
        self.security = dict(security or {})
        self.batch_size = batch_size
        self.poll_ms = poll_ms
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self._stop = threading.Event()
        self._consumer = None
        self._assigned: frozenset = frozenset()
        self._targets: dict = {}     # partition -> end offset at the start, until reached
        self._assign_checked = self._lag_set = 0.0

    def healthy(self) -> bool:
        return self.failed is None and not self._stop.is_set()

    # ------------------------------------------------------------------ partitions

    def _assign(self) -> None:
        from kafka.structs import TopicPartition
        partitions = frozenset(TopicPartition(t, p) for t in self.topics
                               for p in self._consumer.partitions_for_topic(t) or ())
        self._assign_checked = time.monotonic()
        new = partitions - self._assigned
        if not new:
            return
        self._consumer.assign(sorted(partitions))
        for tp in new:
            self._consumer.seek_to_beginning(tp)
        if not self.ready.is_set():
            self._targets.update({tp: end for tp, end in self._consumer.end_offsets(sorted(new)).items() if end})
        self._assigned = partitions
        log.info("exporter reads %s", sorted((tp.topic, tp.partition) for tp in partitions))

    def _check_ready(self) -> None:
        for tp in list(self._targets):
            if self._consumer.position(tp) >= self._targets[tp]:
                del self._targets[tp]
        if not self._targets:
            self.tracker.refresh()   # the first scrape finds the compressed parts made
            self.ready.set()
            log.info("exporter caught up with the topics")

    def _set_lag(self) -> None:
        self._lag_set = time.monotonic()
        lag: dict[str, int] = {}
        for tp in self._assigned:
            high = self._consumer.highwater(tp)
            if high is not None:
                lag[tp.topic] = lag.get(tp.topic, 0) + max(0, high - self._consumer.position(tp))
        health = self.tracker.health
        for topic, n in lag.items():
            health.lag.labels(health.consumer, topic).set(n)

    # ------------------------------------------------------------------ loop

    def poll_once(self) -> int:
        """One poll applied to the tracker; returns the records read."""
        if self._consumer is None:
            from kafka import KafkaConsumer
            self._consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap_servers, group_id=None, client_id=self.client_id,
                enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=self.batch_size,
                isolation_level="read_committed", fetch_max_wait_ms=100, **self.security)
            self._assign()
            if not self._assigned:
                log.info("exporter: none of %s exists yet", ", ".join(self.topics))
        elif time.monotonic() - self._assign_checked >= ASSIGN_EVERY_S or not self._assigned:
            self._assign()
        if not self._assigned:
            self.ready.set()   # nothing to catch up with
            self._stop.wait(self.poll_ms / 1000)
            return 0
        polled = self._consumer.poll(timeout_ms=self.poll_ms, max_records=self.batch_size)
        messages = [(self.topics[tp.topic], m.value, m.key) for tp, batch in polled.items() for m in batch
                    if m.value is not None]
        if messages:
            self.tracker.apply_batch(messages, topic_names=self.kinds, caught_up=self.ready.is_set())
        if not self.ready.is_set():
            self._check_ready()
        if time.monotonic() - self._lag_set >= LAG_EVERY_S:
            self._set_lag()
        return len(messages)

    def run(self, stop: threading.Event | None = None) -> None:
        """Poll until `stop` is set or ``stop()`` is called; then close.  An error ends the loop
        (unhealthy), but for a retriable Kafka error: the broker away (a restart, a network cut) is
        waited for, trying again 0.5 s, 1 s, 2 s ... at most 8 s apart, with the same consumer, which
        keeps its positions (a new one would read every topic again and count every record twice)."""
        from kafka.errors import KafkaError

        pause = RETRY_FIRST_S
        try:
            while not self._stop.is_set() and not (stop is not None and stop.is_set()):
                try:
                    self.poll_once()
                    pause = RETRY_FIRST_S
                except KafkaError as exc:
                    if not getattr(exc, "retriable", False):
                        raise
                    log.warning("exporter: the broker does not answer (%r): trying again in %.1f s", exc, pause)
                    self._stop.wait(pause)
                    pause = min(2 * pause, RETRY_MOST_S)
        except BaseException as exc:
            self.failed = exc
            raise
        finally:
            self.close()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
            self._consumer = None
