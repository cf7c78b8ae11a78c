"""Pytest fixtures for the real services in this package (imported by tests/conftest.py).

``kafka_broker``: one real Kafka broker (KRaft, 127.0.0.1) for the whole test session.
If it cannot start, the tests that use it FAIL (error), with the broker's log tail.
The only way to skip them is the explicit opt-out ``WORKLOADMAP_NO_KAFKA=1``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.services.kafka_broker import KafkaBroker

NO_KAFKA_ENV = "WORKLOADMAP_NO_KAFKA"


def kafka_opted_out() -> bool:
    return os.environ.get(NO_KAFKA_ENV, "") == "1"


def skip_if_kafka_opted_out() -> None:
    if kafka_opted_out():
        pytest.skip(f"{NO_KAFKA_ENV}=1: tests needing a real Kafka broker are opted out")


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A running ``KafkaBroker``; tests may ``kill()`` / ``restart()`` it (same address)."""
    skip_if_kafka_opted_out()
    with KafkaBroker() as broker:
        yield broker
