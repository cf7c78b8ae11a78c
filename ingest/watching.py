"""Watching clusters: list + watch every catalog kind a cluster serves, publish raw events.

Why each piece is there:

- One ``KindWatcher`` per (cluster, kind), each in its own thread: a slow or
  forbidden kind never holds up the others.
- list + watch with bookmarks (``allowWatchBookmarks``): the watch resumes
  from the last resourceVersion seen, and bookmarks keep that version fresh on
  quiet kinds, so a reconnect rarely needs a relist.  A 410 Gone (the version
  was compacted away) means relist.
- Every relist compares the list with what was published before and
  publishes vanished objects as DELETED (with the list's resourceVersion, so
  the processors take it as newer than anything seen): no ghost workload
  keeps "using" GPUs after the watcher was away.  What was published before
  survives a process restart in a checkpoint (checkpointing.py); a restarted
  watcher always relists.
- Memory per object is a uid and three short strings (``Tracked``), never
  the object: a cluster with many workloads costs little.
- API errors (and an unreachable server) back off exponentially with jitter
  and retry (after three failures in a row, with a fresh list: a version the
  server keeps refusing must not block the kind); a kind the cluster stops serving (its CRD deleted) is relisted
  as empty, so its objects are published as DELETED, and its watcher ends.
- Definitions applied to the cluster (WorkloadMap objects) are watched first
  and published like any object (the processors build each cluster's
  catalog from them); the watcher also reads them itself, because a
  definition for a new kind means a new kind to watch.
- Every object of a watched kind is published, top-level or not: the processors
  attribute pods through the ownerReferences chain (pod -> ReplicaSet ->
  Deployment, pod -> Job -> JobSet), so they need the intermediate owners, and
  they decide what is a workload (an object a controller owns is part of its
  owner's workload, never one of its own).
- Pods and Nodes of every cluster are watched, published as projections
  (``catalog.attributing.project_pod`` / ``project_node``: never a pod's env,
  volumes, command or args); a pod costs the watcher what any object does.
- Owner kinds (``catalog.attributing.owner_kinds``: the kinds definitions name
  as child components or additionalChildKinds) are watched once a published
  object names one as its controller, so only kinds pods' chains really pass
  through are read (not the Services, Roles or PVCs a definition also lists);
  one without a definition of its own is published as its identity and owner
  references (``project_owner``), never its pod template.
  A kind watched before is watched again at once after a restart (its
  checkpoint lists it), so its deletions while the watcher was down are seen.
- Only catalog kinds, owner kinds, pods, nodes and WorkloadMap definitions are ever listed: never
  Secrets or ConfigMaps, even when a definition names them as child kinds.
  Nothing here logs credentials; log lines name the cluster id, the server
  URL and the resource.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable

from workloadmap.catalog import Catalog, DefinitionError, load_definition, records
from workloadmap.catalog.attributing import (
    controller_of, group_of, owner_kinds, pod_paths, project_node, project_owner, project_pod, workload_kinds)

from .checkpointing import Checkpoints, Tracked
from .clusters import ApiError, Cluster
from .discovering import ServedResource, ServedResources, catalog_resources, discover

log = logging.getLogger(__name__)

DEFINITION_GROUP, DEFINITION_KIND = "workloadmap.io", "WorkloadMap"
NEVER_WATCHED = {("", "Secret"), ("", "ConfigMap")}
RELIST_AFTER = 3    # consecutive failed requests after which a watcher relists

Publish = Callable[[dict], None]


def resource_key(resource: ServedResource) -> str:
    return f"{resource.group}/{resource.kind}"


class Backoff:
    """Exponential backoff with full jitter, from `initial` up to `maximum` seconds."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0):
        self.initial, self.maximum = initial, maximum
        self.attempts = 0

    def wait(self, stop: threading.Event) -> None:
        delay = min(self.maximum, self.initial * 2 ** self.attempts)
        self.attempts += 1
        stop.wait(random.uniform(delay / 2, delay))

    def reset(self) -> None:
        self.attempts = 0


class KindWatcher:
    """list + watch of one resource (all namespaces) of one cluster."""

    def __init__(self, cluster: Cluster, resource: ServedResource, publish: Publish, stop: threading.Event, *,
                 tracked: dict[str, Tracked] | None = None, page_size: int = 500, watch_timeout: int = 300,
                 on_object: Callable[[str, dict], None] | None = None, backoff: Backoff | None = None,
                 project: Callable[[dict], dict] | None = None, on_controller: Callable[[dict], None] | None = None):
        if (resource.group, resource.kind) in NEVER_WATCHED:
            raise ValueError(f"{resource.kind} objects are never watched")
        self.cluster = cluster
        self.resource = resource
        self.key = resource_key(resource)
        self.publish = publish
        self.stop = stop
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.on_object = on_object
        self.project = project              # what of an object is published (pods, nodes)
        self.on_controller = on_controller  # told each object's controller reference (owner kinds to watch)
        self.backoff = backoff or Backoff()
        self.lock = threading.Lock()
        self.known: dict[str, Tracked] = dict(tracked or {})
        self.resource_version: str | None = None    # None: (re)list before watching
        self.synced = threading.Event()             # set once the first list is published
        self.finished = False                       # the kind is no longer served
        self.counts = {"ADDED": 0, "MODIFIED": 0, "DELETED": 0, "relists": 0, "gone": 0, "errors": 0}
        self._warned: set[int] = set()
        self._stream = None

    def __repr__(self):
        return f"KindWatcher({self.cluster.id}: {self.resource.qualified}/{self.resource.version})"

    # -- running --------------------------------------------------------------
    def run(self) -> None:
        while not self.stop.is_set() and not self.finished:
            try:
                if self.resource_version is None:
                    self.relist()
                    if self.finished:
                        return
                self.watch()
                self.backoff.reset()
            except ApiError as exc:
                if self.stop.is_set():
                    return      # interrupted on purpose
                if exc.gone:
                    self.counts["gone"] += 1
                    log.info("%s: resourceVersion %s expired, relisting", self, self.resource_version)
                    self.resource_version = None
                    continue
                self.counts["errors"] += 1
                self._log_error(exc)
                self._after_error()
            except Exception:  # a bug must not end the watch silently
                if self.stop.is_set():
                    return      # the process is stopping (a failed publisher says why)
                self.counts["errors"] += 1
                log.exception("%s: unexpected error; retrying", self)
                self._after_error()

    def _after_error(self) -> None:
        """Back off; after RELIST_AFTER failures in a row, start over with a list: a
        resourceVersion the server keeps refusing (not with 410) must not block the kind."""
        self.backoff.wait(self.stop)
        if self.backoff.attempts >= RELIST_AFTER:
            self.resource_version = None

    def _log_error(self, exc: ApiError) -> None:
        if exc.status in (401, 403):
            if exc.status not in self._warned:
                self._warned.add(exc.status)
                log.warning("%s: %s to list/watch %s; grant it with `workloadmap rbac` (retrying)",
                            self, "forbidden" if exc.status == 403 else "unauthorized", self.resource.qualified)
        else:
            log.warning("%s: %s; retrying", self, exc)

    def interrupt(self) -> None:
        """End a blocked watch read (after `stop` is set), so the thread ends promptly."""
        stream = self._stream
        if stream is not None:
            try:
                stream.shutdown()
            except Exception:  # noqa: BLE001 - already closed
                pass

    def snapshot(self) -> dict[str, Tracked]:
        with self.lock:
            return dict(self.known)

    # -- list ---------------------------------------------------------------------
    def relist(self) -> None:
        """List everything (paged), publish what is new or changed, and DELETED for what vanished."""
        seen: dict[str, Tracked] = {}
        list_version = None
        try:
            for page in self.cluster.list_pages(self.resource.path(), chunk_size=self.page_size):
                if list_version is None:
                    list_version = (page.get("metadata") or {}).get("resourceVersion")
                for obj in page.get("items") or []:
                    obj.setdefault("apiVersion", self.resource.api_version)
                    obj.setdefault("kind", self.resource.kind)
                    uid = obj["metadata"]["uid"]
                    tracked = _tracked(obj)
                    seen[uid] = tracked
                    if self.on_object is not None:
                        self.on_object("MODIFIED", obj)
                    previous = self.known.get(uid)
                    if previous is None or previous.resource_version != tracked.resource_version:
                        self._emit("ADDED" if previous is None else "MODIFIED", obj, uid, tracked)
                if self.stop.is_set():
                    return
        except ApiError as exc:
            if exc.status != 404:
                raise
            log.info("%s: no longer served; its objects are deleted", self)
            self.finished = True
        self.counts["relists"] += 1
        for uid, tracked in list(self.known.items()):
            if uid not in seen:
                vanished = self._vanished(uid, tracked, list_version)
                if self.on_object is not None:
                    self.on_object("DELETED", vanished)
                self._emit("DELETED", vanished, uid, None)
        with self.lock:
            self.known = seen
            self.resource_version = list_version
        self.synced.set()

    def _vanished(self, uid: str, tracked: Tracked, list_version: str | None) -> dict:
        meta = {"name": tracked.name, "uid": uid, "resourceVersion": list_version or tracked.resource_version}
        if tracked.namespace:
            meta["namespace"] = tracked.namespace
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind, "metadata": meta}

    # -- watch ---------------------------------------------------------------------
    def watch(self) -> None:
        """One watch request from the last resourceVersion, until the server ends it (or stop)."""
        params = {"resourceVersion": self.resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(self.watch_timeout)}
        stream = self.cluster.watch(self.resource.path(), params, timeout=self.watch_timeout + 30)
        self._stream = stream
        if self.stop.is_set():
            stream.shutdown()
        for line in stream:
            if self.stop.is_set():
                return
            try:
                event = records.decode(line)
                kind, obj = event["type"], event["object"]
            except (ValueError, KeyError, TypeError):
                raise ApiError(0, "BadWatchEvent", f"not a watch event: {line[:200]!r}", self.resource.path()) from None
            if kind == "ERROR":
                raise ApiError(int(obj.get("code") or 0), obj.get("reason") or "Error", obj.get("message") or "",
                               self.resource.path())
            if kind == "BOOKMARK":
                with self.lock:
                    self.resource_version = obj["metadata"]["resourceVersion"]
                continue
            if kind not in records.EVENT_TYPES:
                continue
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            uid = obj["metadata"]["uid"]
            if self.on_object is not None:
                self.on_object(kind, obj)
            tracked = _tracked(obj)
            self._emit(kind, obj, uid, None if kind == "DELETED" else tracked, version=tracked.resource_version)
            self.backoff.reset()

    def _emit(self, kind: str, obj: dict, uid: str, tracked: Tracked | None, *, version: str | None = None) -> None:
        """Publish first, then remember: a crash in between repeats an event, never loses one."""
        if self.on_controller is not None:
            ref = controller_of(obj)
            if ref is not None:
                self.on_controller(ref)
        self.publish(records.raw_event(self.cluster.id, kind, obj if self.project is None else self.project(obj)))
        self.counts[kind] += 1
        with self.lock:
            if tracked is None:
                self.known.pop(uid, None)
            else:
                self.known[uid] = tracked
            if version is not None:
                self.resource_version = version


def _tracked(obj: dict) -> Tracked:
    meta = obj["metadata"]
    return Tracked(sys.intern(meta.get("namespace") or ""), meta.get("name") or "", meta.get("resourceVersion") or "")


class ClusterWatcher:
    """Every catalog kind of one cluster: discovery, definitions, one KindWatcher per kind, checkpoints."""

    def __init__(self, cluster: Cluster, catalog: Catalog, publish: Publish, stop: threading.Event, *,
                 checkpoints: Checkpoints | None = None, flush: Callable[[], None] = lambda: None,
                 rediscover_every: float = 30.0, checkpoint_every: float = 5.0, page_size: int = 500,
                 watch_timeout: int = 300, failed: Callable[[str, BaseException], None] | None = None):
        self.cluster = cluster
        self.base = catalog
        self.publish = publish
        self.flush = flush
        self.failed = failed
        self.stop = stop
        self.checkpoints = checkpoints or Checkpoints(None, cluster.id)
        self.rediscover_every = rediscover_every
        self.checkpoint_every = checkpoint_every
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.watchers: dict[str, KindWatcher] = {}
        self.definitions: dict[str, object] = {}    # WorkloadMap name -> Definition
        self.changed = threading.Event()           # definitions or wanted owner kinds changed: look at the kinds again
        self.wanted: set[tuple[str, str]] = set()  # owner kinds a published object named as its controller
        self._owner_kinds: frozenset = frozenset()
        self._kinds_started = threading.Event()    # the first _start_kinds is done
        self._checkpointed: tuple | None = None     # what had been published at the last checkpoint
        self._pod_paths: tuple = ()
        self._saved: dict[str, dict[str, Tracked]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def __repr__(self):
        return f"ClusterWatcher({self.cluster.id})"

    def catalog(self) -> Catalog:
        """Built-in and file definitions, overridden by the cluster's own."""
        catalog = Catalog(self.base, resolver=self.base.resolver)
        with self._lock:
            for definition in self.definitions.values():
                catalog.add(definition)
        return catalog

    def run(self) -> None:
        self._saved = self.checkpoints.load()
        backoff = Backoff()
        last_checkpoint = time.monotonic()
        announced = False
        while not self.stop.is_set():
            try:
                served = discover(self.cluster)
                self._start_definitions(served)
                self._start_kinds(served)
            except ApiError as exc:
                log.warning("%s: discovery failed: %s; retrying", self, exc)
                backoff.wait(self.stop)
                continue
            except Exception:  # a bug must not end the cluster's watch silently
                log.exception("%s: unexpected error; retrying", self)
                backoff.wait(self.stop)
                continue
            backoff.reset()
            deadline = time.monotonic() + self.rediscover_every
            while not self.stop.is_set() and not self.changed.is_set() and time.monotonic() < deadline:
                self.stop.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                if not announced and self.synced():
                    announced = True
                    log.info("%s: first list done: %d kinds, %d objects", self, len(self.watchers),
                             sum(len(w.known) for w in self.watchers.values()))
                if time.monotonic() - last_checkpoint >= self.checkpoint_every:
                    self.checkpoint()
                    last_checkpoint = time.monotonic()
            self.changed.clear()
        for watcher in list(self.watchers.values()):
            watcher.interrupt()
        self.checkpoint()

    def _start(self, resource: ServedResource, on_object=None) -> KindWatcher:
        key = resource_key(resource)
        project = None
        if (resource.group, resource.kind) == ("", "Pod"):
            project = self._project_pod
        elif (resource.group, resource.kind) == ("", "Node"):
            project = project_node
        elif (resource.group, resource.kind) not in workload_kinds(self.catalog()):
            project = project_owner   # an owner kind only: its identity and owners are all that is read
        watcher = KindWatcher(self.cluster, resource, self.publish, self.stop, tracked=self._saved.pop(key, None),
                              page_size=self.page_size, watch_timeout=self.watch_timeout, on_object=on_object,
                              project=project, on_controller=self._controller_named)
        self.watchers[key] = watcher
        name = f"watch-{self.cluster.id}-{key}"
        thread = threading.Thread(target=guarded(watcher.run, name, self.failed), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        log.info("%s: watching %s at %s", self, resource.qualified, resource.version)
        return watcher

    def _start_definitions(self, served: ServedResources) -> None:
        """Watch WorkloadMap definitions first, and wait for their first list: they decide which kinds to watch."""
        resource = served.for_definition(DEFINITION_GROUP, "v1alpha1", DEFINITION_KIND)
        key = f"{DEFINITION_GROUP}/{DEFINITION_KIND}"
        if resource is None or (key in self.watchers and not self.watchers[key].finished):
            return
        watcher = self._start(resource, on_object=self._definition_event)
        while not self.stop.is_set() and not watcher.synced.wait(0.5) and not watcher.finished:
            pass
        self.changed.clear()

    def _definition_event(self, kind: str, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name") or ""
        with self._lock:
            before = self.definitions.get(name)
            if kind == "DELETED":
                self.definitions.pop(name, None)
            else:
                try:
                    self.definitions[name] = load_definition(obj, "cluster", f"cluster:{self.cluster.id}/{name}")
                except DefinitionError as exc:
                    # published anyway: the processors dead-letter it with the same problems
                    log.warning("%s: definition %s is invalid: %s", self, name, exc)
                    self.definitions.pop(name, None)
            after = self.definitions.get(name)
        if (before is None) != (after is None) or (before is not None and before.gvk != after.gvk):
            self.changed.set()

    def _project_pod(self, pod: dict) -> dict:
        return project_pod(pod, self._pod_paths)

    def _controller_named(self, ref: dict) -> None:
        """An object's controller reference: its kind is watched from now on when it is an owner kind."""
        kind = (group_of(ref.get("apiVersion")), ref.get("kind"))
        if kind in self._owner_kinds and kind not in self.wanted:
            with self._lock:
                self.wanted.add(kind)
            self.changed.set()

    def _start_kinds(self, served: ServedResources) -> None:
        for key in [k for k, w in self.watchers.items() if w.finished]:
            del self.watchers[key]
        catalog = self.catalog()
        self._owner_kinds = owner_kinds(catalog)
        self._pod_paths = pod_paths(catalog)
        resources = catalog_resources(catalog, served)
        # the kinds definitions' references name (a TrainJob's runtimes): the processors resolve with them
        for gvk, _ in catalog.reference_kinds():
            resource = served.for_definition(gvk.group, gvk.version, gvk.kind)
            if resource is not None and resource.can("list", "watch") and resource not in resources:
                resources.append(resource)
        # pods and nodes always; owner kinds named by a controller reference, or watched before a restart
        kinds = {("", "Pod"), ("", "Node")} | {k for k in self.wanted if k in self._owner_kinds}
        kinds |= {tuple(key.partition("/")[::2]) for key in self._saved} & self._owner_kinds
        for group, kind in sorted(kinds):
            resource = served.for_definition(group, "v1", kind)
            if resource is not None and resource.can("list", "watch"):
                resources.append(resource)
        for resource in resources:
            if (resource.group, resource.kind) in NEVER_WATCHED:
                continue
            if resource_key(resource) not in self.watchers:
                self._start(resource)
        # kinds checkpointed before but no longer served (CRD deleted while away): their objects are gone
        for key in list(self._saved):
            group, _, kind = key.partition("/")
            if served.serves(group, kind):
                continue
            api_version = _api_version(self.base, group, kind)
            for uid, tracked in self._saved.pop(key).items():
                meta = {"name": tracked.name, "uid": uid, "resourceVersion": tracked.resource_version}
                if tracked.namespace:
                    meta["namespace"] = tracked.namespace
                self.publish(records.raw_event(self.cluster.id, "DELETED",
                                               {"apiVersion": api_version, "kind": kind, "metadata": meta}))
        self._kinds_started.set()

    def synced(self) -> bool:
        """Whether the kinds were started and every kind watcher started so far has published its first
        list (the definitions' watcher alone, synced before the kinds start, is not synced)."""
        return (self._kinds_started.is_set() and bool(self.watchers)
                and all(w.synced.is_set() or w.finished for w in list(self.watchers.values())))

    def checkpoint(self) -> None:
        """Save what was published, once the publisher acknowledged it (flush first); nothing to do
        when nothing was published since the last save (a cluster's pods make the file megabytes)."""
        published = (sum(w.counts["ADDED"] + w.counts["MODIFIED"] + w.counts["DELETED"] + w.counts["relists"]
                         for w in list(self.watchers.values())), len(self.watchers), len(self._saved))
        if published == self._checkpointed:
            return
        tracked = {key: w.snapshot() for key, w in list(self.watchers.items()) if not w.finished}
        tracked.update(self._saved)   # not yet relisted: keep what the last run knew
        self.flush()
        self.checkpoints.save(tracked)
        self._checkpointed = published


def _api_version(catalog: Catalog, group: str, kind: str) -> str:
    """The catalog's version of a kind the cluster no longer serves (for its DELETED events)."""
    for gvk in catalog.kinds():
        if gvk.group == group and gvk.kind == kind:
            return gvk.api_version
    return f"{group}/v1" if group else "v1"


def guarded(run: Callable[[], None], name: str, failed: Callable[[str, BaseException], None] | None):
    """`run` for a thread: an exception that escapes it is reported to `failed` (which stops the
    process), never left to die with the thread while the process goes on without it."""
    if failed is None:
        return run

    def target():
        try:
            run()
        except BaseException as exc:  # noqa: BLE001 - whatever it is, the process must know
            failed(name, exc)
    return target


class WatchingFailed(RuntimeError):
    """A publisher or a watcher thread failed in a way no retry mends: the watchers stopped."""


class Watching:
    """Watch several clusters into one publisher until `stop` is set (the `run watchers` service).

    A publisher that raises (the embedded warehouse cannot write, Kafka did not acknowledge)
    or a thread that dies stops every watcher: ``failure`` says what, and the caller fails
    the process with it. Nothing is checkpointed past what was published, so a restart
    publishes again what was lost."""

    def __init__(self, clusters: Iterable[Cluster], catalog: Catalog, publisher, *, checkpoint_dir=None,
                 stop: threading.Event | None = None, **options):
        self.stop = stop or threading.Event()
        self.publisher = publisher
        self.failure: str | None = None
        self._publish_lock = threading.Lock()
        self.clusters = [ClusterWatcher(c, catalog, self._publish, self.stop,
                                        checkpoints=Checkpoints(checkpoint_dir, c.id), flush=self._flush,
                                        failed=self._failed, **options)
                         for c in clusters]
        self._threads: list[threading.Thread] = []

    def _failed(self, where: str, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{where}: {type(exc).__name__}: {exc}"
        self.stop.set()

    def _publish(self, event: dict) -> None:
        with self._publish_lock:    # the embedded publisher runs the processors in-process: one at a time
            try:
                self.publisher.publish(event)
            except Exception as exc:
                self._failed(f"publishing into {self.publisher!r}", exc)
                raise

    def between_publishes(self, action) -> None:
        """Run `action()` while no event is being published: an embedded publisher's warehouse is then
        the caller's (``run watchers --embedded --serve`` answers its HTTP reads this way)."""
        with self._publish_lock:
            action()

    def _flush(self) -> None:
        with self._publish_lock:
            if self.failure is not None:
                raise WatchingFailed(self.failure)   # no checkpoint past a failed publisher
            try:
                self.publisher.flush()
            except Exception as exc:
                self._failed(f"flushing {self.publisher!r}", exc)
                raise

    def start(self) -> "Watching":
        for watcher in self.clusters:
            name = f"cluster-{watcher.cluster.id}"
            thread = threading.Thread(target=guarded(watcher.run, name, self._failed), name=name, daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def synced(self) -> bool:
        return all(w.synced() for w in self.clusters)

    def counts(self) -> list[tuple[str, str, dict]]:
        """``(cluster id, kind, counts)`` of every kind watcher: events by type, relists, expired
        versions (``gone``), errors, as they stand (for the watchers' metrics)."""
        return [(c.cluster.id, w.resource.kind, dict(w.counts))
                for c in self.clusters for w in list(c.watchers.values())]

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stop.is_set():
            if self.synced():
                return True
            time.sleep(0.05)
        return self.synced()

    def close(self, timeout: float = 10.0) -> None:
        """Stop: every cluster watcher writes its final checkpoint (after a flush)."""
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)
        if self.failure is None:
            self._flush()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False
