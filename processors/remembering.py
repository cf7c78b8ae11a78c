"""Remembering: what a worker keeps per object, in the compacted state topic, and when it forgets.

A worker needs, per raw partition, the summary of every live workload, pod and node (to tell a
repeat from news, and a status change from none), the owner links pods are attributed through,
the pods waiting for an owner and the workloads waiting for a referenced object.  All of it is in
one compacted topic, ``records.STATE_TOPIC``, partitioned as the raw topic and written in the
transaction of the raw partition whose event changed it (``Outputs.state``): a state message and
the record it goes with commit or abort together, so a worker that takes the partition over reads
the state topic's partition (committed messages only) and knows exactly what the committed records
imply.  Its keys say what they hold (``WORKLOAD`` ... ``WAITING``, then cluster/uid, or
cluster/name for a node); a null value (a tombstone) forgets the key.

Why not the records, pods and nodes topics themselves: they are the warehouse's history and only
grow, so a worker recovering from them read every object it ever saw (minutes under load, deleted
objects included) and kept them all.  Compacted, the state topic holds one message per object the
worker still remembers; a recovery reads about as many messages as there are live objects.

Why deleted objects are remembered for a while (``FORGET_AFTER``), then forgotten:

- a deletion whose events come again must make no new record.  A restarted watcher relists and
  publishes DELETED again for what its last checkpoint still listed (``ingest/watching.py``),
  with the list's resourceVersion, newer than the first deletion; so the rule is that a deletion
  of an object the worker does not know (forgotten, or never seen alive) makes no record: the
  warehouse holds nothing of it that could end;
- an event older than the deletion (a lower resourceVersion: a second watcher of the cluster
  publishing late, the two running at once by mistake or for the moments a restart overlaps; the
  chart's watchers are recreated, not rolled) must not bring the object back.  The
  deleted summary refuses it for ``FORGET_AFTER`` seconds of the partition's event time (the
  observedAt of the event in hand, the watchers' clocks: no wall clock, so a partition's outputs
  are the same processed live or again after a restart), longer than such overlaps last, and
  short: each deleted object remembered is memory and a message a recovery reads.  After
  that the object is forgotten (its summary leaves memory, a tombstone the topic) and a later
  event of it would be taken as a new object: a replay of a history older than that is the one
  way to bring one back, and the warehouse still takes no duplicate row (it keys facts by
  resourceVersion);
- a pod whose owner is deleted first keeps the attribution its summary has (a terminating pod of
  a deleted ReplicaSet ends as its Deployment's); a pod waiting for an owner that is deleted, or
  never comes, waits as long as it lives: its own deletion ends the wait (``pending``); a workload
  deleted while its pods still terminate changes nothing for them for the same reason;
- a flood of deletions (a namespace deleted) must not make memory grow with it: at most
  ``MAX_DELETED`` deleted objects are remembered per raw partition, the oldest forgotten first.

Why the partition's event time and not each cluster's: a cluster whose watcher stops (or a soak's
simulated cluster that is done) would otherwise keep its deleted objects for good.  A watcher down
for longer than the grace finds its deletions forgotten when it relists, and its repeated
deletions are then covered by the first rule; a watcher's clock ahead of the others' only shortens
the grace for the objects deleted before it.
"""

from __future__ import annotations

import heapq
from datetime import datetime, timezone

from workloadmap.catalog import records

# What a state topic key holds (its prefix), then cluster/uid (cluster/name for a node):
WORKLOAD = "workload:"   # a workload's summary (processing.summary_of)
POD = "pod:"             # a pod's latest record (attributing.pod_summary reads it back)
NODE = "node:"           # a node's latest record (attributing.node_summary)
OWNER = "owner:"         # an owner link (attributing.PodStates.owners)
PENDING = "pending:"     # a pod's raw event, waiting for its owner (attributing.PodStates.pending)
WAITING = "waiting:"     # a workload's raw event, waiting for a referenced object (processing.WaitingWorkloads)
PREFIXES = (WORKLOAD, POD, NODE, OWNER, PENDING, WAITING)

FORGET_AFTER = 60.0      # seconds of the partition's event time a deleted object is remembered
MAX_DELETED = 50_000     # deleted objects remembered per raw partition, at most


def state_key(prefix: str, key: str) -> bytes:
    """The state topic key of an object's `prefix` entry (`key`: cluster/uid, or cluster/name)."""
    return (prefix + key).encode()


def split_key(key: str) -> tuple[str, str]:
    """(prefix, cluster/uid) of a state topic key; ValueError for a key of no known prefix."""
    prefix, sep, rest = key.partition(":")
    if not sep or prefix + ":" not in PREFIXES:
        raise ValueError(f"state topic key {key[:200]!r} has no known prefix ({', '.join(PREFIXES)})")
    return prefix + ":", rest


def event_seconds(observed: str) -> float:
    """An observedAt as seconds since the epoch (the clock deleted objects are forgotten by)."""
    return records.parse_time(observed).timestamp()


class Forgetting:
    """The deleted objects a store still remembers, oldest first: a heap of (deleted at, prefix, key).

    The heap orders them by deletion time whatever order they were remembered in (live, or read
    back from the state topic at a recovery), so the same events forget the same objects."""

    def __init__(self, forget_after: float = FORGET_AFTER, max_deleted: int = MAX_DELETED):
        self.forget_after = forget_after
        self.max_deleted = max_deleted
        self.heap: list[tuple[float, str, str]] = []
        self._due: tuple[float, str] | None = None   # (the oldest entry's time, when it is due as text)

    def may_be_due(self, observed: str) -> bool:
        """Whether an event observed at `observed` may forget something: a text comparison, so that
        most events parse no time.  The watchers' observedAt (records.now_iso) and the due time have
        one format, in which the text order is the time order; an observedAt in another format
        compares right to the second, and a wrong "no" only delays forgetting to a later event."""
        heap = self.heap
        if not heap:
            return False
        due = self._due
        if due is None or due[0] != heap[0][0]:
            at = heap[0][0] + self.forget_after
            due = self._due = (heap[0][0], datetime.fromtimestamp(at, timezone.utc).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"))
        return observed >= due[1]

    def __len__(self) -> int:
        return len(self.heap)

    def add(self, at: float, prefix: str, key: str) -> None:
        heapq.heappush(self.heap, (at, prefix, key))

    def due(self, now: float) -> list[tuple[float, str, str]]:
        """The entries deleted `forget_after` seconds or more before `now`, taken out."""
        heap, due = self.heap, []
        limit = now - self.forget_after
        while heap and heap[0][0] <= limit:
            due.append(heapq.heappop(heap))
        return due

    def over(self) -> list[tuple[float, str, str]]:
        """The oldest entries beyond `max_deleted`, taken out."""
        heap, due = self.heap, []
        while len(heap) > self.max_deleted:
            due.append(heapq.heappop(heap))
        return due
