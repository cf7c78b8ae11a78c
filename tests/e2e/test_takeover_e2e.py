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

and in each case every event is in the warehouse exactly once, with every transition
(``_check_warehouse``: hand-derived from the simulator's intents).
"""

from __future__ import annotations

import signal
import threading
import time

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
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        with KafkaPublisher(self.p.bootstrap, topic=self.p.topic("raw")) as publisher:
            for key, value, _ in self.messages:
                due = start + self.sent / self.rate
                if due > time.monotonic():
                    time.sleep(due - time.monotonic())
                publisher.publish_raw(key, value)
                self.sent += 1
            publisher.flush()

    def wait_until(self, sent: int) -> None:
        while self.sent < sent and self.thread.is_alive():
            time.sleep(0.1)

    def join(self) -> None:
        self.thread.join(300)
        assert not self.thread.is_alive(), "the publisher did not finish"


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
