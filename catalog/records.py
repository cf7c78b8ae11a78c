"""The pipeline's record formats and topics, shared by ingest, processors and warehouse.

Producers and consumers of the pipeline never import each other; they agree
on these formats.  Each has a JSON Schema in ``catalog/schemas/`` (documented
in README.md and checked by tests).

- raw object event (topic ``workloadmap.raw.v1``), key ``raw_key``: cluster/namespace for a
  namespaced object, cluster/name for a cluster-scoped one (a Node):
  ``{cluster, type: ADDED|MODIFIED|DELETED, observedAt, object}``, the object
  without ``metadata.managedFields``;
- workload record (``workloadmap.workloads.v1``): the resolved workload (see
  workloads.py) plus ``cluster``, ``observedAt``, ``eventType``, ``deleted``,
  ``previousStatus``, ``previousStatusSince`` and ``statusSince``;
- pod record (``workloadmap.pods.v1``), key ``cluster/podUid``: where a pod runs, what it
  holds and the workload, component, instance and replica it belongs to;
- node record (``workloadmap.nodes.v1``), key ``cluster/nodeName``: what a node has
  (allocatable, capacity), whether it is cordoned or ready, the labels users group by;
- status transition (``workloadmap.transitions.v1``): ``{cluster, namespace,
  name, kind, uid, framework, definition, from, to, at, gpus,
  previousDurationSeconds}``;
- dead letter (``workloadmap.deadletter.v1``): the original bytes (base64),
  the stage and a reason;
- cluster definition (``workloadmap.definitions.v1``, compacted), key
  ``cluster/name``: the WorkloadMap object a cluster applied, null once deleted;
- processors' state (``workloadmap.state.v1``, compacted, internal): what a worker needs per live
  object of a raw partition (processors/remembering.py).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources

import orjson

RAW_TOPIC = "workloadmap.raw.v1"
WORKLOADS_TOPIC = "workloadmap.workloads.v1"
TRANSITIONS_TOPIC = "workloadmap.transitions.v1"
DEADLETTER_TOPIC = "workloadmap.deadletter.v1"
# Pods and nodes as the warehouse keeps them (issue 25): key cluster/podUid, cluster/nodeName.
PODS_TOPIC = "workloadmap.pods.v1"
NODES_TOPIC = "workloadmap.nodes.v1"
# The processors' state (processors/remembering.py): per raw partition, the summaries of the live
# workloads, pods and nodes, owner links, pending pods and waiting workloads; compacted, partitioned as
# the raw topic, key <what>:<cluster>/<uid>.  Internal: what a worker taking a partition over reads.
STATE_TOPIC = "workloadmap.state.v1"
# Definitions applied to clusters, as the processors accepted them: key cluster/name, value the
# WorkloadMap object (a tombstone when deleted); compacted, read in full by every processor worker.
DEFINITIONS_TOPIC = "workloadmap.definitions.v1"

# The largest message the processors and the writer send to the topics they write (created
# with this max.message.bytes).  A dead letter carries its input's bytes in base64 (4/3 of
# them): a raw message at the broker's default limit (~1 MiB) makes a ~1.4 MB dead letter,
# which a topic at the default would refuse, losing it.
MAX_OUTPUT_MESSAGE_BYTES = 8 << 20

EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")
# The status a workload ends in when its object is deleted: it holds nothing
# from then on, whatever it was doing before.
DELETED = "Deleted"

# Dead-letter reasons
UNKNOWN_KIND = "unknown-kind"
MALFORMED_JSON = "malformed-json"
MISSING_FIELDS = "missing-fields"
WRONG_TYPES = "wrong-types"
JQ_ERROR = "jq-error"
RESOLVE_ERROR = "resolve-error"
INVALID_DEFINITION = "invalid-definition"  # a WorkloadMap applied to a cluster that does not validate
MALFORMED_POD = "malformed-pod"            # a pod whose node, phase or requests cannot be read
MALFORMED_NODE = "malformed-node"          # a node whose amounts, cordon or labels cannot be read
DEADLETTER_REASONS = (UNKNOWN_KIND, MALFORMED_JSON, MISSING_FIELDS, WRONG_TYPES, JQ_ERROR, RESOLVE_ERROR,
                      INVALID_DEFINITION, MALFORMED_POD, MALFORMED_NODE)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def record_key(cluster: str, uid: str) -> bytes:
    """Per-object key: every event of one object lands in one partition, in order."""
    return f"{cluster}/{uid}".encode()


def raw_key(cluster: str, obj) -> bytes:
    """The raw topic's key of an object's events: cluster/namespace, or cluster/name for a cluster-scoped
    object (cluster/"" when neither can be read: still published, and dead-lettered downstream).

    Why not per object: ownerReferences never leave a namespace, so keyed by namespace a pod and its
    whole owner chain (pod -> ReplicaSet -> Deployment) land in one partition, in order, and the
    processors attribute pods with the partition's own state (processors/attributing.py); every
    event of one object still lands in one partition.  A node keeps its name's partition whatever
    its uid, so a node deleted and created again under its name stays in order."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return f"{cluster}/".encode()
    namespace = meta.get("namespace")
    if isinstance(namespace, str) and namespace:
        return f"{cluster}/{namespace}".encode()
    name = meta.get("name")
    return f"{cluster}/{name if isinstance(name, str) else ''}".encode()


def strip_object(obj: dict) -> dict:
    """The object as published: without metadata.managedFields (large, and never read)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


def raw_event(cluster: str, event_type: str, obj: dict, observed_at: str | None = None) -> dict:
    if event_type not in EVENT_TYPES:
        raise ValueError(f"event type {event_type!r} is not one of {', '.join(EVENT_TYPES)}")
    return {"cluster": cluster, "type": event_type, "observedAt": observed_at or now_iso(), "object": strip_object(obj)}


def encode(value) -> bytes:
    """Compact UTF-8 JSON.  orjson does it ~10x faster than the standard library (records
    are encoded once per event on the pipeline's hot path); what orjson refuses (integers
    beyond 64 bits, non-string keys) goes through the standard library."""
    try:
        return orjson.dumps(value)
    except TypeError:   # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes | str):
    """Parse JSON: orjson first (fast), the standard library when orjson refuses, so what
    counts as malformed (ValueError) is exactly what the standard library rejects."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


@dataclass
class DeadLetter:
    stage: str
    reason: str
    detail: str
    value: bytes
    key: bytes | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    at: str | None = None

    def to_dict(self) -> dict:
        return {
            "stage": self.stage, "reason": self.reason, "detail": self.detail,
            "topic": self.topic, "partition": self.partition, "offset": self.offset,
            "key": self.key.decode("utf-8", "replace") if self.key is not None else None,
            "valueBase64": base64.b64encode(self.value).decode(),
            "at": self.at or now_iso(),
        }


@lru_cache(maxsize=None)
def schema(name: str) -> dict:
    """The JSON Schema of a record: raw-event, workload-record, pod-record, node-record, transition, dead-letter."""
    return json.loads(resources.files("workloadmap.catalog").joinpath(f"schemas/{name}.schema.json").read_text())
