"""Shared fixtures: the built-in catalog and the bundled example objects."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from workloadmap.catalog import Catalog, ObjectIndex
from workloadmap.catalog.registry import bundled_related


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    """The built-in catalog; the bundled examples' referenced objects (a TrainJob's runtime) at hand."""
    return Catalog.builtin(lookup=ObjectIndex(bundled_related()))


def example_objects(name: str) -> dict:
    """metadata.name -> object, from catalog/examples/NAME.yaml."""
    text = resources.files("workloadmap.catalog").joinpath(f"examples/{name}.yaml").read_text()
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d}


# A real Kafka broker (KRaft, loopback) for the whole session: see tests/services/.
from tests.services.fixtures import kafka_broker  # noqa: E402, F401

# Real Kubernetes API servers (kube-apiserver + etcd, loopback) for the session: see tests/services/.
from tests.services.fixtures import kube_cluster, kube_clusters  # noqa: E402, F401
