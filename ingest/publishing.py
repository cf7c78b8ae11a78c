"""Publishing raw object events: the one producer every ingest side uses.

Why one publisher: the cluster watchers, the replay command and the embedded
demo all put the same records (``catalog.records.raw_event``) under the same key
(``records.raw_key``: a namespace's events land in one partition, in order) with
the same delivery guarantees, so they share this code rather than each
configuring a producer.

- ``KafkaPublisher``: kafka-python ``KafkaProducer`` with idempotence and
  ``acks="all"``: a retried send is never written twice and an acknowledged
  one survives a leader change.  Record batches of up to ~1 MB (under the
  broker's default ``message.max.bytes``) instead of kafka-python's 16 KiB:
  a raw event is ~1.8 KiB, and per produce request both the publisher and
  the broker pay more than per message; for the same reason a batch lingers
  50 ms (with a few milliseconds, kafka-python's sender sends a request of a
  few messages per partition at a watch stream's steady rate, and both
  processes' CPU per event is mostly per request: bench/RESULTS.md); the
  latency it adds is at most the linger.  Each key's partition is computed once (``key_partitioner``).  Security options (SASL/TLS) pass
  through to the producer and are never logged or shown in ``repr``.
- ``CallbackPublisher``: the same interface in-process (embedded mode, no
  broker): calls ``fn(key, value_bytes)``.
- ``write_jsonl`` / ``read_jsonl`` (``jsonl_message`` per line): files of messages for replay.

JSONL format (one message per line, UTF-8):

- a good raw event is written as the event itself:
  ``{"cluster": ..., "type": ..., "observedAt": ..., "object": {...}}``;
  its key is derived again on reading (``event_key``);
- a message whose bytes are not a raw event we can re-encode faithfully (bad
  messages, arbitrary keys) is written as an envelope
  ``{"key": <text or null>, "valueBase64": <base64 of the exact bytes>}``,
  so malformed bytes are replayed byte for byte.  The two forms cannot be
  confused: a raw event never has a ``valueBase64`` field.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from workloadmap.catalog import records

log = logging.getLogger(__name__)

SECURITY_OPTIONS = ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                    "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname",
                    "sasl_kerberos_service_name", "sasl_oauth_token_provider")


def event_key(event: dict) -> bytes:
    """The message key of a raw event: ``records.raw_key`` (cluster/namespace, cluster/name for a
    cluster-scoped object); cluster/"" when neither can be read, so such an event is still published
    (and dead-lettered downstream) rather than lost."""
    cluster = event.get("cluster") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    return records.raw_key(cluster if isinstance(cluster, str) else "", obj)


MAX_PARTITIONED_KEYS = 100_000   # keys whose partition a publisher remembers (then forgets them all at once)


def key_partitioner():
    """kafka-python's default partitioner (murmur2 of the key), each key's partition remembered.

    Why: the default partitioner hashes every message's key in pure Python and sorts the topic's
    partitions for it, about a tenth of the publisher's CPU per event; the keys are a cluster's
    namespaces (``records.raw_key``), a few hundred, so each is hashed once per partition count.
    The partition is the default's, so messages land where they always did.  (A function: kafka
    is imported only when a Kafka publisher is made.)"""
    from kafka.partitioner import DefaultPartitioner

    class KeyPartitioner(DefaultPartitioner):
        def __init__(self):
            self.known: dict[tuple, tuple[int, int]] = {}   # (topic, key) -> (partition count, partition)

        def partition(self, topic, key, serialized_key, value, serialized_value, cluster):
            partitions = cluster.partitions_for_topic(topic) if serialized_key is not None else None
            if not partitions:
                return super().partition(topic, key, serialized_key, value, serialized_value, cluster)
            known = self.known.get((topic, serialized_key))
            if known is not None and known[0] == len(partitions):
                return known[1]
            partition = super().partition(topic, key, serialized_key, value, serialized_value, cluster)
            if len(self.known) >= MAX_PARTITIONED_KEYS:
                self.known.clear()
            self.known[(topic, serialized_key)] = (len(partitions), partition)
            return partition

    return KeyPartitioner()


class _Publisher:
    """The shared interface: publish(event), publish_raw(key, value), flush(), close(), context manager."""

    def publish(self, event: dict) -> None:
        self.publish_raw(event_key(event), records.encode(event))

    def publish_raw(self, key: bytes | None, value: bytes) -> None:
        raise NotImplementedError

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class KafkaPublisher(_Publisher):
    """Publishes to a Kafka topic (default ``records.RAW_TOPIC``) with an idempotent producer."""

    def __init__(self, bootstrap_servers, topic: str = records.RAW_TOPIC, client_id: str = "workloadmap-ingest",
                 security: dict | None = None, compression_type: str | None = None, linger_ms: int = 50,
                 batch_size: int = 1_000_000, **producer_options):
        from kafka import KafkaProducer  # imported here: the embedded mode needs no Kafka client

        security = dict(security or {})
        unknown = set(security) - set(SECURITY_OPTIONS)
        if unknown:
            # name the keys only: the values may be secrets
            raise ValueError(f"unknown security options: {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(SECURITY_OPTIONS)}")
        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.sent = 0
        self._errors: list[BaseException] = []
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers, client_id=client_id,
            enable_idempotence=True, acks="all", linger_ms=linger_ms, compression_type=compression_type,
            batch_size=batch_size, partitioner=key_partitioner(),
            **{k: v for k, v in security.items() if v is not None}, **producer_options)
        log.info("publishing to %s on %s as %s (security: %s)", topic, bootstrap_servers, client_id,
                 security.get("security_protocol", "PLAINTEXT"))

    def __repr__(self):
        return f"KafkaPublisher(topic={self.topic!r}, bootstrap_servers={self.bootstrap_servers!r})"

    def _failed(self, exc: BaseException):
        self._errors.append(exc)

    def publish_raw(self, key: bytes | None, value: bytes) -> None:
        self._producer.send(self.topic, key=key, value=value).add_errback(self._failed)
        self.sent += 1

    def flush(self, timeout: float | None = None) -> None:
        """Waits until every message sent so far is acknowledged; raises if any failed."""
        self._producer.flush(timeout=timeout)
        if self._errors:
            errors, self._errors = self._errors, []
            raise RuntimeError(f"{len(errors)} message(s) could not be published: {errors[0]!r}") from errors[0]

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._producer.close()


class CallbackPublisher(_Publisher):
    """Embedded mode: hands each message to ``fn(key, value_bytes)`` in-process."""

    def __init__(self, fn: Callable[[bytes | None, bytes], object]):
        self.fn = fn
        self.sent = 0

    def publish_raw(self, key: bytes | None, value: bytes) -> None:
        self.fn(key, value)
        self.sent += 1


# --------------------------------------------------------------------------- files


def _line(message) -> str:
    """One JSONL line for a raw event dict, a simulated event, or a (key, value bytes[, ...]) tuple."""
    if getattr(message, "event", None) is not None:     # a simulating.SimulatedEvent
        message = message.event
    if isinstance(message, dict):
        return json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    key, value = message[0], message[1]
    try:
        event = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        event = None
    if (isinstance(event, dict) and "valueBase64" not in event and records.encode(event) == value
            and event_key(event) == key):
        return value.decode()
    return json.dumps({"key": key.decode("utf-8", "surrogateescape") if key is not None else None,
                       "valueBase64": base64.b64encode(value).decode()}, separators=(",", ":"))


def write_jsonl(messages: Iterable, path) -> int:
    """Writes messages one per line (see the module docstring); returns the count.

    A message is a raw event dict, anything with a raw event in ``.event``
    (simulated events), or a (key, value bytes[, ...]) tuple such as
    ``simulate_messages`` yields (bad messages included).
    """
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for message in messages:
            out.write(_line(message))
            out.write("\n")
            n += 1
    return n


def jsonl_message(line: str | bytes) -> tuple[bytes | None, bytes]:
    """(key, value bytes) of one line (see the module docstring); ValueError when it is not JSON."""
    doc = json.loads(line)
    if isinstance(doc, dict) and "valueBase64" in doc:
        key = doc.get("key")
        return (key.encode("utf-8", "surrogateescape") if key is not None else None,
                base64.b64decode(doc["valueBase64"]))
    return event_key(doc), records.encode(doc)


def read_jsonl(path) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value bytes) of each line, ready for ``publish_raw``: what was written, byte for byte."""
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            try:
                message = jsonl_message(line)
            except ValueError as exc:
                raise ValueError(f"{Path(path)}:{number}: not a JSON line: {exc}") from None
            yield message
