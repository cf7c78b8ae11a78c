"""Checkpoints of what a watcher has published, so a restarted watcher misses no deletion.

Why: an object deleted while the watcher process was down never shows up in
the next list.  Only a watcher that remembers what it published before can
tell that it vanished and publish its DELETED event, so no ghost workload
keeps "using" GPUs in the warehouse.  The checkpoint is that memory: per
watched resource and object, only what a DELETED event needs (uid, namespace,
name, resourceVersion), never whole objects.  A restarted watcher relists
every resource against it: changed objects are published again, vanished
ones as DELETED.

A checkpoint is written only after the publisher has acknowledged everything
it covers (see watching.ClusterWatcher.checkpoint), so a restart can repeat
events (the processors drop repeats by resourceVersion) but never miss one.
One JSON file per cluster, replaced atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

from workloadmap.catalog import records

FORMAT = 1


class Tracked(NamedTuple):
    """What a watcher keeps of one object: enough to publish its deletion."""
    namespace: str
    name: str
    resource_version: str


class Checkpoints:
    """Checkpoint files of one cluster's watchers in a folder (None: keep nothing across restarts)."""

    def __init__(self, folder: str | os.PathLike | None, cluster_id: str):
        self.path = Path(folder) / f"{_safe(cluster_id)}.json" if folder else None
        self.cluster_id = cluster_id

    def load(self) -> dict[str, dict[str, Tracked]]:
        """Tracked objects by uid, by resource key (``group/kind``); empty on a first start."""
        if self.path is None or not self.path.exists():
            return {}
        with open(self.path, encoding="utf-8") as fh:
            doc = json.load(fh)
        if doc.get("format") != FORMAT or doc.get("cluster") != self.cluster_id:
            raise ValueError(f"{self.path}: not a checkpoint of cluster {self.cluster_id!r} (format {FORMAT})")
        out = {}
        for key, objects in (doc.get("resources") or {}).items():
            out[key] = {uid: Tracked(ns, name, rv) for uid, ns, name, rv in objects}
        return out

    def save(self, tracked: dict[str, dict[str, Tracked]]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format": FORMAT, "cluster": self.cluster_id, "resources": {
            key: [[uid, *t] for uid, t in objects.items()] for key, objects in sorted(tracked.items())}}
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(records.encode(doc))   # orjson: a checkpoint of 100,000 pods is ~8 MB
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "cluster"
