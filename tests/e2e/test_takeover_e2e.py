"""End to end on a real Kafka broker: workers that ride out their peers' faults and the broker's.

bench/soak.py saw workers crash after kills and a broker restart and rely on being restarted: a
worker frozen past its session (loaded cores, a long pause) woke up with its partitions taken
over and its transactional producers fenced, and faust crashes a worker whose commit is fenced;
a worker started while the broker restarted exited at once.  Here (processors/sending.py, "Losing
a partition's transaction"; settings.broker_wait):

- two workers, one SIGKILLed mid-stream: the other takes its partitions over and ends the stream
  alone, without exiting;
- two workers, one frozen (SIGSTOP) past the 15 s session timeout mid-stream, then let go: its
  fenced partitions are given up, not the worker; both end the stream and neither exits;
- a worker started while the broker is down waits for it and starts with it;
- a worker stops within seconds of SIGTERM right after its peer stopped (its peer's partitions
  come to it as it stops);
- a worker that took over a killed peer's partitions, once the peer is back and has them again,
  holds the state of its own partitions only, and no component tree of the others' objects
  (bench/soak.py saw its RSS stay up after the give-back; processors/app.py);

and in each case every event is in the warehouse exactly once, with every transition
(``_check_warehouse``: hand-derived from the simulator's intents).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections import Counter

from tests.e2e.test_pipeline_e2e import Pipeline, _check_warehouse, _messages, pipeline_on  # noqa: F401 - fixture
from tests.e2e.test_references_e2e import _start_second_worker, _wait_for_workers
from tests.services.fixtures import skip_if_kafka_opted_out
from tests.services.kafka_broker import KafkaBroker
from workloadmap.ingest.publishing import KafkaPublisher

SESSION_TIMEOUT = 15.0   # processors/app.py: broker_session_timeout


def _stream(workloads: int = 300, days: int = 4, seed: int = 41):
    """The simulator's events, no bad ones (a dead letter would be one more thing to count here)."""
    return _messages(workloads=workloads, days=days, seed=seed, bad_fraction=0.0)


class Steadily:
    """Publishes the messages at about `rate` a second in a thread (a stream under way, not a burst)."""

    def __init__(self, p: Pipeline, messages, rate: float = 300.0):
        self.p, self.messages, self.rate = p, messages, rate
        self.sent = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            start = time.monotonic()
            with KafkaPublisher(self.p.bootstrap, topic=self.p.topic("raw")) as publisher:
                for key, value, _ in self.messages:
                    wait = start + self.sent / self.rate - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    publisher.publish_raw(key, value)
                    self.sent += 1
                publisher.flush()
        except BaseException as exc:   # noqa: BLE001 - reported by join(): a thread's error is only printed
            self.error = exc

    def wait_until(self, sent: int) -> None:
        while self.sent < sent and self.thread.is_alive():
            time.sleep(0.1)

    def join(self) -> None:
        self.thread.join(300)
        assert not self.thread.is_alive(), "the publisher did not finish"
        assert self.error is None, f"the publisher failed after {self.sent} messages: {self.error!r}"
        assert self.sent == len(self.messages)


def _two_workers(p: Pipeline) -> None:
    p.start("processors")
    _start_second_worker(p)
    _wait_for_workers(p, 2)
    p.start("warehouse")


def _end(p: Pipeline, messages) -> None:
    """Every event in the warehouse (no process may have exited meanwhile: wait_for_records checks),
    the services stopped gracefully, then the warehouse checked."""
    p.wait_for_records(len(messages), timeout=240)
    time.sleep(3)
    for service in [s for s in p.procs if s.startswith("processors")]:
        p.stop(service)
    p.stop("warehouse")
    _check_warehouse(p, messages)


def test_a_worker_takes_over_the_partitions_of_a_killed_peer_and_ends_the_stream_alone(kafka_broker, pipeline_on):
    p = pipeline_on(kafka_broker.bootstrap_servers)
    messages = _stream()
    _two_workers(p)
    stream = Steadily(p, messages)
    stream.wait_until(len(messages) // 3)
    p.kill("processors-2")   # SIGKILL: its partitions move to the other after the session timeout
    stream.join()
    _end(p, messages)


def test_a_worker_frozen_past_its_session_gives_up_its_fenced_partitions_not_itself(kafka_broker, pipeline_on):
    """Frozen, it is out of the group; the other takes its partitions over and fences their
    transactions.  Let go, its open transactions cannot commit: it must give those partitions up
    (their events processed again, once, by their new owner) and go on in the group."""
    p = pipeline_on(kafka_broker.bootstrap_servers)
    messages = _stream(workloads=600)
    _two_workers(p)
    stream = Steadily(p, messages, rate=len(messages) / (SESSION_TIMEOUT + 30))   # still under way when let go
    stream.wait_until(len(messages) // 8)
    p.procs["processors-2"].send_signal(signal.SIGSTOP)
    time.sleep(SESSION_TIMEOUT + 10)
    p.procs["processors-2"].send_signal(signal.SIGCONT)
    stream.join()
    _end(p, messages)
    log = (p.tmp / "processors-2.log").read_text(errors="replace")
    assert "lost (ProducerFenced" in log, "the frozen worker's transactions were fenced (else this tested nothing)"


def test_a_worker_started_while_its_broker_is_down_waits_and_starts_with_it(pipeline_on):
    skip_if_kafka_opted_out()
    with KafkaBroker() as broker:
        p = pipeline_on(broker.bootstrap_servers)
        messages = _stream(workloads=40, days=2)
        broker.stop()
        p.start("processors")
        time.sleep(4)
        assert p.procs["processors"].poll() is None, p.log("processors")
        broker.restart()
        p.start("warehouse")
        p.publish(messages)
        p.wait_for_records(len(messages), timeout=180)
        log = (p.tmp / "processors.log").read_text(errors="replace")
        assert "no Kafka broker at" in log and "trying again" in log
        p.stop("processors")
        p.stop("warehouse")
        _check_warehouse(p, messages)


def test_a_worker_stops_within_seconds_of_sigterm_as_its_peer_s_partitions_come_to_it(kafka_broker, pipeline_on):
    """The soak's end: its services stopped one after another, the last worker, taking over the
    partitions of the one stopped before it, did not stop within 90 s."""
    p = pipeline_on(kafka_broker.bootstrap_servers)
    messages = _stream()
    _two_workers(p)
    stream = Steadily(p, messages)
    stream.wait_until(len(messages) // 2)
    p.stop("processors")
    time.sleep(1)
    started = time.monotonic()
    p.stop("processors-2")   # asserts it exits 0 within 60 s
    assert time.monotonic() - started < 15
    stream.join()
    p.start("processors")   # the rest of the stream; running (in its group) before _end stops it
    _wait_for_workers(p, 1)
    _end(p, messages)


# processors/app.py logs what a worker holds after each rebalance that changed it
_HELD = re.compile(r"raw partitions \[([0-9, ]*)\] held: (\d+) entries \(([^)]*)\); "
                   r"objects with component trees: (\d+), of other partitions: (\d+)")


def _holdings(p: Pipeline, service: str) -> list[tuple[list[int], dict[int, int], int, int]]:
    """Each rebalance's (partitions, entries per partition, objects with component trees, of them those of
    other partitions) the worker logged."""
    path = p.tmp / f"{service}.log"
    found = []
    for m in _HELD.finditer(path.read_text(errors="replace") if path.exists() else ""):
        entries = {int(k): int(v) for k, v in (pair.split(": ") for pair in m[3].split(", ") if pair != "none")}
        found.append(([int(x) for x in m[1].split(", ") if x], entries, int(m[4]), int(m[5])))
    return found


def _wait_for_holding(p: Pipeline, service: str, fits, after: int = 0, timeout: float = 120):
    """Until a rebalance logged after the first `after` ones left the worker raw partitions that
    `fits`; (its index, that holding)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        held = _holdings(p, service)
        for i in range(after, len(held)):
            if fits(held[i][0]):
                return i, held[i]
        time.sleep(0.5)
    raise AssertionError(f"{service}: {_holdings(p, service)}\n{p.log(service)}")


def _state_entries(p: Pipeline) -> Counter:
    """Raw partition -> the keys the state topic keeps for it (its latest message per key not a
    tombstone): what a recovery of the partition reads into memory, one entry each."""
    latest = {}
    for m in p.topic_messages("state"):
        latest[(m.partition, m.key)] = m.value
    return Counter(partition for (partition, _), value in latest.items() if value is not None)


def _processed_everything(p: Pipeline, timeout: float = 180) -> None:
    """Until the processors' committed offsets reach the raw topic's end (every event's outputs committed)."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    group = f"{p.env['WORKLOADMAP_CLIENT_ID']}-processors"
    admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=p.bootstrap)
    try:
        tps = [TopicPartition(p.topic("raw"), n) for n in consumer.partitions_for_topic(p.topic("raw"))]
        ends = consumer.end_offsets(tps)
        deadline = time.time() + timeout
        committed = {}
        while time.time() < deadline:
            committed = {tp: meta.offset for tp, meta in admin.list_group_offsets(group)[group].items()}
            if all(committed.get(tp, -1) >= ends[tp] for tp in tps):
                return
            time.sleep(1)
        raise AssertionError(f"committed {committed}, ends {ends}")
    finally:
        consumer.close()
        admin.close()


def test_a_worker_that_gave_back_a_killed_peer_s_partitions_holds_only_its_own_partitions_objects(
        kafka_broker, pipeline_on):
    """Kill one of two workers; the survivor takes its partitions over (their state recovered from the
    state topic) and processes the second half of the stream on all of them (its resolver caching
    their objects' component trees); start the peer again: the partitions go back to it, and the
    survivor keeps, per partition it still owns, exactly the entries the state topic keeps for that
    partition (the expectation read from the topic, not from the worker), none of the others, and no
    resolver tree of an object of another partition."""
    p = pipeline_on(kafka_broker.bootstrap_servers)
    messages = _stream(workloads=150, days=2)
    half = len(messages) // 2
    p.start("processors")
    _start_second_worker(p)
    _wait_for_workers(p, 2)
    p.publish(messages, to_index=half)
    _processed_everything(p)
    before_kill = len(_holdings(p, "processors"))
    p.kill("processors-2")
    took, took_over = _wait_for_holding(p, "processors", lambda held: held == [0, 1, 2],   # after the session timeout
                                        after=before_kill)
    at_takeover = _state_entries(p)
    p.publish(messages, from_index=half)
    _processed_everything(p)
    first_life = len(_holdings(p, "processors-2"))
    _start_second_worker(p)
    _wait_for_holding(p, "processors", lambda held: len(held) < 3, after=took + 1)
    _wait_for_holding(p, "processors-2", lambda held: len(held) > 0, after=first_life)
    _wait_for_workers(p, 2)
    time.sleep(3)   # a last rebalance's recovery logged
    survivor, peer = _holdings(p, "processors")[-1], _holdings(p, "processors-2")[-1]
    expected = _state_entries(p)

    partitions, entries, _, _ = took_over
    assert entries == {n: at_takeover[n] for n in partitions}
    assert all(at_takeover[n] > 0 for n in partitions)   # every partition had objects to take over
    # the second half changed every partition's objects: processed by the survivor, their trees cached
    assert all(expected[n] != at_takeover[n] for n in partitions)
    partitions, entries, trees, elsewhere = survivor
    assert sorted(partitions + peer[0]) == [0, 1, 2]   # split between the two again
    assert entries == {n: expected[n] for n in partitions}   # its own partitions' entries, and only them
    assert trees > 0 and elsewhere == 0   # its objects' trees kept, none of the partitions it gave back
    assert peer[1] == {n: expected[n] for n in peer[0]} and peer[3] == 0
    for service in ("processors", "processors-2"):
        assert p.procs[service].poll() is None, p.log(service)
        p.stop(service)
