"""ingest: the producer side of the pipeline, and cluster access for the live commands.

Two jobs share this stage because both talk to clusters.  The pipeline's
producer: ``watching.Watching`` lists and watches every catalog kind a cluster
serves (``discovering``), publishes raw object events (``publishing``: one
Kafka producer for the watchers, ``replay`` and the demo) and keeps
``checkpointing``'s record of what it published; ``simulating`` (with
``scheduling``) stands in for clusters, deterministically.  The live CLI
(`get`, `tree`, `resources`, `rbac`): ``inspecting`` reads workloads straight
from a cluster and ``authorizing`` writes the read-only role.  Connections for
both come from ``clusters``.

Start reading at ``watching.py``.  The modules are imported by name (``from
workloadmap.ingest import publishing``), so importing one loads only its own
dependencies: the Kubernetes client comes with ``clusters`` (so with
``discovering``, ``inspecting`` and ``watching``), not with ``publishing`` or
``simulating``.
"""

__all__ = ["authorizing", "checkpointing", "clusters", "discovering", "inspecting", "publishing", "scheduling",
           "simulating", "watching"]
