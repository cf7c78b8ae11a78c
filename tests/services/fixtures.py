"""Pytest fixtures for the real services in this package (imported by tests/conftest.py).

``kafka_broker``: one real Kafka broker (KRaft, 127.0.0.1) for the whole test session.
If it cannot start, the tests that use it FAIL (error), with the broker's log tail.
The only way to skip them is the explicit opt-out ``WORKLOADMAP_NO_KAFKA=1``.

``kube_cluster`` / ``kube_clusters``: real Kubernetes API servers, see below.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.services.kafka_broker import KafkaBroker
from tests.services.kube_api import CRD_DIR, WORKLOADMAP_CRD, KubeAPIError, KubeAPIServer

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


# --------------------------------------------------------------------------- Kubernetes
# ``kube_cluster``: one real API server (kube-apiserver + etcd on 127.0.0.1, see
# kube_api.py) for the whole session, kubeconfig context "cluster-a", with every framework
# CRD (tests/services/kube/crds) and the WorkloadMap CRD applied. ``kube_clusters``: that
# server plus a second, independent one (context "cluster-b"), as a dict by context name
# in that order; tests needing one server never start two. If a server cannot start, the
# tests that use it FAIL, with the servers' log tails. The only way to skip them is the
# explicit opt-out ``WORKLOADMAP_NO_KUBE=1``.

NO_KUBE_ENV = "WORKLOADMAP_NO_KUBE"


def kube_opted_out() -> bool:
    return os.environ.get(NO_KUBE_ENV, "") == "1"


def skip_if_kube_opted_out() -> None:
    if kube_opted_out():
        pytest.skip(f"{NO_KUBE_ENV}=1: tests needing a real Kubernetes API server are opted out")


def all_crds() -> list:
    """Every framework CRD plus the WorkloadMap CRD, in a stable order."""
    return [*sorted(CRD_DIR.glob("*.yaml")), WORKLOADMAP_CRD]


def _start_kube(name: str) -> KubeAPIServer:
    kube = KubeAPIServer(name=name)
    try:
        kube.start()
        kube.apply_crds(all_crds())
    except KubeAPIError as e:
        kube.close()
        pytest.fail(f"the Kubernetes API server {name!r} did not start: {e}", pytrace=False)
    except BaseException:
        kube.close()
        raise
    return kube


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeAPIServer]:
    """A running ``KubeAPIServer`` (context "cluster-a", all CRDs); tests may ``kill()`` /
    ``restart()`` it (same address and kubeconfig) and must use their own namespaces."""
    skip_if_kube_opted_out()
    kube = _start_kube("cluster-a")
    try:
        yield kube
    finally:
        kube.close()


@pytest.fixture(scope="session")
def kube_clusters(kube_cluster: KubeAPIServer) -> Iterator[dict[str, KubeAPIServer]]:
    """``{"cluster-a": kube_cluster, "cluster-b": <a second, independent server>}``."""
    kube = _start_kube("cluster-b")
    try:
        yield {"cluster-a": kube_cluster, "cluster-b": kube}
    finally:
        kube.close()
