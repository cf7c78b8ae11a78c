"""The faust-streaming app: raw events in, records, transitions and dead letters out.

One agent consumes the raw topic.  For each message it calls
:class:`~processing.Processor`, writes the record into the ``object-states``
table, sends the record's transition (if its status changed) and any dead
letter.  The table's changelog topic IS the records topic: writing an
object's state and publishing its record are the same message, and a
restarted worker rebuilds its states by reading the records back.

Delivery: faust's ``exactly_once`` guarantee wraps the outputs and the
input offsets of each commit in one Kafka transaction, so a worker killed
mid-stream neither loses nor repeats a record or transition; readers use
``read_committed``.  Several workers split the raw topic's partitions and the
state table with them (the record key is the partition key: cluster/uid).
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field

import faust

from workloadmap.catalog import records

from .processing import Processor, summary_of, transition_of


@dataclass
class Settings:
    bootstrap_servers: str = "127.0.0.1:9092"
    app_id: str = "workloadmap-processors"
    raw_topic: str = records.RAW_TOPIC
    workloads_topic: str = records.WORKLOADS_TOPIC
    transitions_topic: str = records.TRANSITIONS_TOPIC
    deadletter_topic: str = records.DEADLETTER_TOPIC
    partitions: int = 3
    replication_factor: int = 1
    exactly_once: bool = True
    security: dict = field(default_factory=dict)  # security_protocol, sasl_*, ssl_* (never logged)
    data_dir: str | None = None


def _credentials(security: dict):
    if not security:
        return None
    protocol = security.get("security_protocol", "PLAINTEXT").upper()
    ssl_context = None
    if "SSL" in protocol:
        ssl_context = ssl.create_default_context(cafile=security.get("ssl_cafile"))
        if security.get("ssl_certfile"):
            ssl_context.load_cert_chain(security["ssl_certfile"], security.get("ssl_keyfile"))
    if "SASL" in protocol:
        return faust.SASLCredentials(
            username=security.get("sasl_plain_username"), password=security.get("sasl_plain_password"),
            mechanism=security.get("sasl_mechanism", "PLAIN"), ssl_context=ssl_context)
    return faust.SSLCredentials(ssl_context) if ssl_context else None


class TableStates:
    """The Processor's state store over the faust table (values: record bytes)."""

    def __init__(self, table):
        self.table = table

    def get(self, key: str):
        value = self.table.get(key.encode())
        return summary_of(json.loads(value)) if value is not None else None

    def remember(self, key: str, record: dict, value: bytes) -> None:
        self.table[key.encode()] = value


def create_app(settings: Settings, processor: Processor | None = None) -> faust.App:
    processor = processor or Processor()
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{hp.strip()}" for hp in settings.bootstrap_servers.split(",")],
        broker_credentials=_credentials(settings.security),
        store="memory://",
        datadir=settings.data_dir,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        processing_guarantee="exactly_once" if settings.exactly_once else "at_least_once",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        web_enabled=False,
        key_serializer="raw",
        value_serializer="raw",
        broker_commit_every=2000,
        broker_commit_interval=0.5,
    )
    raw = app.topic(settings.raw_topic, key_type=bytes, value_type=bytes, partitions=settings.partitions)
    workloads = app.topic(settings.workloads_topic, key_type=bytes, value_type=bytes,
                          partitions=settings.partitions, internal=True)
    transitions = app.topic(settings.transitions_topic, key_type=bytes, value_type=bytes,
                            partitions=settings.partitions, internal=True)
    deadletters = app.topic(settings.deadletter_topic, key_type=bytes, value_type=bytes,
                            partitions=settings.partitions, internal=True)
    table = app.Table("object-states", key_type=bytes, value_type=bytes, partitions=settings.partitions,
                      changelog_topic=workloads)
    states = TableStates(table)

    @app.agent(raw)
    async def process(stream):
        async for event in stream.events():
            msg = event.message
            out = processor.process(msg.key, msg.value, states, topic=msg.topic, partition=msg.partition,
                                    offset=msg.offset)
            for key, value in out.records:
                transition = transition_of(json.loads(value))
                if transition is not None:
                    await transitions.send(key=key, value=records.encode(transition))
            for key, value in out.dead_letters:
                await deadletters.send(key=key, value=value)
            yield None

    app.workloadmap_settings = settings
    return app
