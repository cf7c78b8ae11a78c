"""Reading live workloads from one cluster: what `get`, `tree` and `resources` show.

Why a library module: the commands are thin renderings of what this module
returns, plain JSON-ready dicts (``-o json`` prints them as they are), so a
script, a test or a future watcher reads exactly what a person sees.  Nothing
here needs our CRD: the catalog is the built-in definitions (plus files), and
when the cluster serves ``workloadmaps.workloadmap.io`` its definitions
override both for the same kind (an invalid one is reported and skipped).

Which pods are a workload's: a pod is the workload's when its ownerReferences
chain reaches the workload (pod → Job → JobSet; intermediate owners are read
once each).  When the chain cannot be followed (an owner we may not read, or
a pod without owners), a label the definition's pod selectors or gang keys read
(``jobset.sigs.k8s.io/jobset-name``, ``training.kubeflow.org/job-name``, ...)
must carry the workload's name.  Then ``catalog.pods.match_pod`` must assign it
to a component, because only those pods are the workload's running parts.

Errors: API failures become ``AccessError`` naming the verb, the resource and
the namespace; an object that cannot be resolved is reported (naming it) in
``Listing.errors`` and the others are still returned.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from workloadmap.catalog import Catalog, DefinitionError, RelatedKey, ResolveError, UnknownKindError, load_definition
from workloadmap.catalog.attributing import controller_of, group_of
from workloadmap.catalog.definitions import Definition
from workloadmap.catalog.pods import match_pod
from workloadmap.catalog.requests import RequestError, effective_request
from workloadmap.catalog.resolving import object_ref
from workloadmap.catalog.workloads import missing_references

from .authorizing import guess_plural
from .clusters import ApiError, Cluster, ClusterConfigError, ClusterSpec, connect, current_namespace
from .discovering import ServedResource, ServedResources, catalog_resources, discover, resolve_type

log = logging.getLogger(__name__)

DEFINITIONS_GROUP, DEFINITIONS_KIND = "workloadmap.io", "WorkloadMap"
MAX_OWNER_DEPTH = 10
PREFETCH_OWNERS = 8   # owners of one kind in a namespace from which one list is cheaper than a read each
OWNER_READS = 8   # owners read at once by `get all`: a workload under a kind no definition reads costs a read


class AccessError(Exception):
    """The API server refused or failed a request: names the verb, resource and namespace."""

    def __init__(self, verb: str, what: str, namespace: str | None, error: ApiError):
        self.verb, self.what, self.namespace, self.error = verb, what, namespace, error
        where = f" in namespace {namespace!r}" if namespace else ""
        detail = f"{error.status} {error.reason}" + (f": {error.message}" if error.message else "")
        super().__init__(f"cannot {verb} {what}{where}: {detail}")

    @property
    def status(self) -> int:
        return self.error.status


class NotFoundError(LookupError):
    """No workload of that name, or its kind is one the catalog reads but the cluster does not serve."""


class NoDefinitionError(UnknownKindError):
    """A type name that no catalog definition reads (an UnknownKindError: one `except` catches both)."""

    def __init__(self, type_text: str, suggestions: list[str]):
        self.api_version, self.kind, self.suggestions = "", type_text, suggestions
        hint = f"; closest known kinds: {', '.join(suggestions)}" if suggestions else ""
        LookupError.__init__(self, f"type {type_text!r}: no catalog kind the cluster serves has that name{hint}")


# The causes of warnings, in the order the commands print them (grouped, after the output).
FORBIDDEN, NOT_SERVED, INVALID_DEFINITION, COLLISION = "forbidden", "not served", "invalid definition", "collision"
MISSING_REFERENCE = "missing reference"   # an object a definition's references name (a TrainJob's runtime)
CAUSES = (FORBIDDEN, NOT_SERVED, INVALID_DEFINITION, COLLISION, MISSING_REFERENCE)


@dataclass(frozen=True)
class Notice:
    """A warning of a command that still did its work: what was left out or overridden, and why."""

    cause: str
    message: str

    def __str__(self) -> str:
        return self.message


class AmbiguousNameError(LookupError):
    def __init__(self, name: str, candidates: list[str]):
        self.candidates = candidates
        super().__init__(f"{name!r} names several workloads: {', '.join(candidates)} (use TYPE/NAME"
                         f"{' and -n' if any(' in ' in c for c in candidates) else ''})")


# -- connecting ------------------------------------------------------------------
def context_name(kubeconfig: str | None, context: str | None) -> str:
    """The kubeconfig context in use (the one named, else the current one); "in-cluster" without a kubeconfig."""
    if context:
        return context
    try:
        _, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError, TypeError):
        return "in-cluster" if _use_in_cluster(kubeconfig, context) else "current"
    return (active or {}).get("name") or "current"


def _use_in_cluster(kubeconfig, context) -> bool:
    """kubectl's fallback: no kubeconfig anywhere, but running in a pod."""
    if kubeconfig or context or os.environ.get("KUBECONFIG"):
        return False
    return not os.path.exists(os.path.expanduser("~/.kube/config")) and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def open_cluster(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A client for a kubeconfig context (kubectl's rules: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster)."""
    if _use_in_cluster(kubeconfig, context):
        return connect(ClusterSpec("in-cluster", in_cluster=True))
    return connect(ClusterSpec(context_name(kubeconfig, context), kubeconfig, context))


def _list_all(cluster: Cluster, resource: ServedResource, namespace: str | None = None, *,
              label_selector: str | None = None, field_selector: str | None = None,
              chunk_size: int = 500) -> Iterator[dict]:
    """Every object of a resource (paged), with apiVersion and kind set (list items of built-in types lack them)."""
    params = {"labelSelector": label_selector or None, "fieldSelector": field_selector or None}
    try:
        for page in cluster.list_pages(resource.path(namespace), params, chunk_size=chunk_size):
            for item in page.get("items") or []:
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                yield item
    except ApiError as exc:
        raise AccessError("list", resource.qualified, namespace if resource.namespaced else None, exc) from None


def load_cluster_definitions(catalog: Catalog, cluster: Cluster, served: ServedResources, context: str,
                             warn: Callable[[Notice], None]) -> list[Definition]:
    """Add the WorkloadMap definitions applied to the cluster (when it serves the kind) to `catalog`.

    They override built-ins and files for the same kind.  Reported through `warn` (a `Notice`),
    and the command goes on: an invalid one (its problems; skipped), a cluster that does not let
    us list them, one for a kind the cluster does not serve (nothing of it can be read), and two
    for the same kind and version (the later one wins, as the catalog's rule says).
    """
    versions = served.versions_of(DEFINITIONS_GROUP, DEFINITIONS_KIND)
    if not versions:
        return []
    loaded = []
    try:
        objects = list(_list_all(cluster, versions[0]))
    except AccessError as exc:
        warn(Notice(FORBIDDEN if exc.status in (401, 403) else INVALID_DEFINITION,
                    f"{exc}; using the built-in and file definitions only"))
        return []
    by_kind: dict[tuple, str] = {}
    for obj in objects:
        name = (obj.get("metadata") or {}).get("name") or "<unnamed>"
        try:
            definition = load_definition(obj, "cluster", f"cluster:{context}/{name}")
        except DefinitionError as exc:
            for problem in exc.problems:
                warn(Notice(INVALID_DEFINITION, f"{problem} (skipped)"))
            continue
        gvk = definition.gvk
        key = (gvk.group, gvk.version, gvk.kind)
        if key in by_kind:
            warn(Notice(COLLISION, f"cluster definitions {by_kind[key]!r} and {name!r} both read {gvk.kind} "
                                   f"({gvk.api_version}): {name!r} is used"))
        by_kind[key] = name
        if served.for_definition(gvk.group, gvk.version, gvk.kind) is None:
            warn(Notice(NOT_SERVED, f"cluster definition {name!r}: the cluster does not serve {gvk.kind} "
                                    f"({gvk.api_version})"))
        catalog.add(definition)
        loaded.append(definition)
    return loaded


# -- which pods are a workload's --------------------------------------------------
_LABEL_KEY = re.compile(r'labels\s*\[\s*"((?:[^"\\]|\\.)+)"\s*\]|labels\.([A-Za-z_][A-Za-z0-9_]*)')


def label_keys(definition: Definition) -> set[str]:
    """The pod label keys a definition's pod selectors and gang-scheduling keys read."""
    keys = {k for comp in definition.components if comp.selector is not None for k in comp.selector.match_labels}
    for expr in definition.pod_expressions():
        for quoted, bare in _LABEL_KEY.findall(expr.source):
            keys.add(quoted or bare)
    return keys


def matches_statuses(record: dict, wanted: set[str]) -> bool:
    """Whether a record is in one of the wanted statuses (lower-case; none wanted: any): its
    resolved status or any status it matched (`statuses`), so asking for Running finds a job
    that is Running and Degraded at once, as upstream's consumers pick from the matched set."""
    if not wanted:
        return True
    return record["status"].lower() in wanted or any(s.lower() in wanted for s in record.get("statuses") or ())


class Owners:
    """The ownerReferences ancestry of objects, reading each intermediate owner at most once."""

    def __init__(self, cluster: Cluster, served: ServedResources):
        self.cluster = cluster
        self.served = served
        self._read: dict[tuple, dict | None | bool] = {}   # (ns, group, kind, name) -> object | None (gone) | False (unreadable)
        self.refused: dict[tuple, ApiError] = {}           # the keys read as False because the API server said no
        self._lock = threading.Lock()
        self._reading: dict[tuple, threading.Lock] = {}    # one read per key, however many threads ask for it

    def know(self, obj: dict) -> None:
        """Remember an object already read (a listed workload), so it is not read again as an owner."""
        meta = obj.get("metadata") or {}
        group = (obj.get("apiVersion") or "").rpartition("/")[0]
        self._read[(meta.get("namespace"), group, obj.get("kind"), meta.get("name"))] = obj

    def prefetch(self, objects: list[dict], chunk_size: int = 500) -> None:
        """List, once per namespace, each kind that many of these objects' controllers are of
        (a JobSet's hundreds of Jobs): one paged list instead of a read per owner, which is
        what a 2,000-pod workload's `describe` waited for.  A list refused is left to the reads."""
        wanted: dict[tuple, set] = {}
        for obj in objects:
            ref = controller_of(obj)
            if ref is not None:
                namespace = (obj.get("metadata") or {}).get("namespace")
                key = (namespace, group_of(ref.get("apiVersion")), ref.get("kind"))
                wanted.setdefault(key, set()).add(ref.get("name"))
        for (namespace, group, kind), names in wanted.items():
            known = sum(1 for n in names if (namespace, group, kind, n) in self._read)
            served = self.served.versions_of(group, kind)
            if len(names) - known < PREFETCH_OWNERS or not served or not served[0].can("list"):
                continue
            try:
                for owner in _list_all(self.cluster, served[0], namespace, chunk_size=chunk_size):
                    self.know(owner)
            except AccessError:
                continue
            for name in names:   # named but not listed: gone
                self._read.setdefault((namespace, group, kind, name), None)

    def ancestors(self, obj: dict) -> tuple[set[str], bool]:
        """The uids of `obj` and of every owner up its ownerReferences; `complete` is False
        when an owner could not be read (forbidden, not served, too deep)."""
        uids: set[str] = set()
        complete = True
        todo = [(obj, 0)]
        while todo:
            node, depth = todo.pop()
            meta = node.get("metadata") or {}
            if meta.get("uid"):
                uids.add(meta["uid"])
            for ref in meta.get("ownerReferences") or []:
                if ref.get("uid") in uids:
                    continue
                if depth >= MAX_OWNER_DEPTH:
                    complete = False
                    continue
                owner = self._owner(meta.get("namespace"), ref)
                if owner is False:
                    complete = False
                    uids.add(ref.get("uid"))       # the reference itself is known even if the object is not
                elif owner is not None:
                    todo.append((owner, depth + 1))
        uids.discard(None)
        return uids, complete

    def _owner(self, namespace: str | None, ref: dict):
        group = (ref.get("apiVersion") or "").rpartition("/")[0]
        key = (namespace, group, ref.get("kind"), ref.get("name"))
        if key not in self._read:
            with self._lock:
                reading = self._reading.setdefault(key, threading.Lock())
            with reading:
                if key not in self._read:
                    self._read[key] = self._fetch(key, ref)
        found = self._read[key]
        if isinstance(found, dict) and (found.get("metadata") or {}).get("uid") != ref.get("uid"):
            return None  # a newer object of the same name: the referenced owner is gone
        return found

    def owner(self, namespace: str | None, ref: dict):
        """The object an ownerReference names: a dict, None when gone (or replaced by a namesake),
        False when it cannot be read (its kind not served, or the API server refused: `refused`)."""
        return self._owner(namespace, ref)

    def _fetch(self, key, ref):
        namespace, group = key[0], key[1]
        version = (ref.get("apiVersion") or "").rpartition("/")[2]
        served = self.served.versions_of(group, ref.get("kind"))
        resource = next((r for r in served if r.version == version), served[0] if served else None)
        if resource is None or not ref.get("name"):
            return False
        try:
            return self.cluster.get(resource.path(namespace, ref["name"]))
        except ApiError as exc:
            if exc.status == 404:
                return None
            log.debug("cannot read owner %s/%s: %s", ref.get("kind"), ref.get("name"), exc)
            self.refused[key] = exc
            return False


def pod_info(pod: dict, membership, gpus) -> dict:
    """One pod as the live views show it: where it belongs, phase, readiness, node and its requests."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    try:
        requests = effective_request(spec, gpus, "spec")
    except RequestError:
        requests = None
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or [])
    info = {
        "name": meta.get("name"), "namespace": meta.get("namespace"),
        "component": membership.component, "instance": membership.instance, "replica": membership.replica,
        "phase": status.get("phase") or "Pending", "ready": ready, "node": spec.get("nodeName"),
        "restarts": restarts, "creationTimestamp": meta.get("creationTimestamp"),
    }
    info.update(requests.to_dict() if requests is not None else {"gpu": None, "cpu": None, "memory": None})
    return info


def _replica_order(value):
    text = "" if value is None else str(value)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def live_view(record: dict, pods: list[dict]) -> dict:
    """A resolved record with its live pods: per component (instance) actual and ready pods,
    ``livePods`` (each marked ``expected`` when its component instance is in the spec) and ``live`` totals."""
    item = dict(record)
    components = [dict(c, actualPods=0, readyPods=0) for c in record["components"]]
    item["components"] = components
    order = {}
    for i, c in enumerate(components):
        order.setdefault((c["name"], c["instance"]), i)
    out = []
    for pod in pods:
        index = order.get((pod["component"], pod["instance"]))
        if index is None:
            same = [i for i, c in enumerate(components) if c["name"] == pod["component"]]
            if len(same) == 1 and components[same[0]]["instance"] is None:
                index = same[0]
        pod = dict(pod, expected=index is not None)
        if index is not None:
            components[index]["actualPods"] += 1
            components[index]["readyPods"] += 1 if pod["ready"] else 0
        out.append((index if index is not None else len(components), pod))
    out.sort(key=lambda p: (p[0], str(p[1]["instance"] or ""), _replica_order(p[1]["replica"]), p[1]["name"] or ""))
    item["livePods"] = [p for _, p in out]
    totals = {"pods": len(out), "ready": sum(1 for _, p in out if p["ready"]), "gpu": 0, "cpu": 0, "memory": 0}
    for _, p in out:
        for key in ("gpu", "cpu", "memory"):
            totals[key] += p[key] or 0
    item["live"] = totals
    return item


# -- the inspector ---------------------------------------------------------------
@dataclass
class Listing:
    items: list[dict]
    errors: list[str] = field(default_factory=list)    # one line per object that could not be read or resolved
    missing: list[str] = field(default_factory=list)   # one line per name asked for that does not exist


@dataclass
class Inspector:
    """Live workloads of one cluster, read through a catalog."""

    cluster: Cluster
    catalog: Catalog
    served: ServedResources
    context: str
    warn: Callable[[Notice], None] = log.warning
    notices: list[Notice] = field(default_factory=list)   # every warning so far, for the command to print last
    related_objects: dict = field(default_factory=dict, repr=False)   # RelatedKey -> object or None

    @classmethod
    def open(cls, catalog: Catalog, kubeconfig: str | None = None, context: str | None = None,
             warn: Callable[[Notice], None] = log.warning) -> "Inspector":
        """Connect, discover what the cluster serves and add its definitions to `catalog`."""
        cluster = open_cluster(kubeconfig, context)
        try:
            served = discover(cluster)
        except ApiError as exc:
            cluster.close()
            raise AccessError("discover", "the served API resources", None, exc) from None
        inspector = cls(cluster, catalog, served, cluster.id, warn)
        load_cluster_definitions(catalog, cluster, served, cluster.id, inspector.notice)
        return inspector

    def notice(self, notice: Notice) -> None:
        self.notices.append(notice)
        self.warn(notice)

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- types and objects ---------------------------------------------------
    def resource(self, type_text: str) -> ServedResource:
        """The catalog kind a user's type name means (kind, plural, short name, any case, qualified)."""
        try:
            return resolve_type(type_text, self.catalog, self.served)
        except UnknownKindError as exc:
            if exc.api_version:  # served, but no definition reads it (secrets)
                raise
            name = type_text.partition(".")[0].lower()
            known = [d.gvk for d in self.catalog
                     if name in (d.gvk.kind.lower(), guess_plural(d.gvk.kind).lower())]
            if known:   # a kind the catalog reads, not installed here: none of its workloads can exist
                raise NotFoundError(f"type {type_text!r}: the cluster does not serve {known[0].kind} "
                                    f"({known[0].api_version})") from None
            raise NoDefinitionError(type_text, exc.suggestions) from None

    def _get(self, resource: ServedResource, namespace: str | None, name: str) -> dict:
        try:
            obj = self.cluster.get(resource.path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                where = f" in namespace {namespace!r}" if namespace and resource.namespaced else ""
                raise NotFoundError(f"{resource.qualified} {name!r} not found{where}") from None
            raise AccessError("get", resource.qualified, namespace if resource.namespaced else None, exc) from None
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        return obj

    def _resolve(self, obj: dict, errors: list[str]) -> dict | None:
        try:
            record = self.catalog.resolve(obj, self.related).to_dict()
        except (ResolveError, UnknownKindError) as exc:
            errors.append(str(exc) if object_ref(obj) in str(exc) else f"{object_ref(obj)}: {exc}")
            return None
        for message in missing_references(record):   # resolved without it: a warning, not a failure
            self.notice(Notice(MISSING_REFERENCE, message))
        return record

    def related(self, key: RelatedKey) -> dict | None:
        """The object a definition's reference names (a TrainJob's runtime), fetched once per
        inspector; None when the cluster does not serve its kind, has no such object, or refuses
        to show it (a workload is then resolved without it and the record says so)."""
        cache = self.related_objects
        if key in cache:
            return cache[key]
        resource = self.served.for_definition(key.gvk.group, key.gvk.version, key.gvk.kind)
        obj = None
        if resource is not None:
            try:
                obj = self.cluster.get(resource.path(key.namespace, key.name))
            except ApiError as exc:
                if exc.status != 404:
                    self.notice(Notice(FORBIDDEN if exc.status in (401, 403) else MISSING_REFERENCE,
                                       f"cannot read {key} (reference ${key.reference}): {exc}"))
        cache[key] = obj
        return obj

    # -- get -----------------------------------------------------------------
    def workloads(self, type_text: str, namespace: str | None, names: Iterable[str] = (), *,
                  label_selector: str | None = None, statuses: Iterable[str] = (), chunk_size: int = 500,
                  with_pods: bool = False) -> Listing:
        """The resolved workloads of a type in a namespace (None: all namespaces).

        `names` reads those objects only; `label_selector` is the API server's;
        `statuses` keeps the workloads whose resolved status or any other status they
        match is one of them (any case: `matches_statuses`); `chunk_size` pages the list.  `with_pods` adds ``live``
        ({pods, ready, gpu, cpu, memory}) from the pods each workload owns.
        """
        resource = self.resource(type_text)
        wanted = {s.lower() for s in statuses}
        listing = Listing([])
        objects: list[dict] = []
        if names:
            for name in names:
                try:
                    objects.append(self._get(resource, namespace, name))
                except NotFoundError as exc:
                    listing.missing.append(str(exc))
        else:
            objects = list(_list_all(self.cluster, resource, namespace, label_selector=label_selector,
                                     chunk_size=chunk_size))
        kept = []
        for obj in objects:
            record = self._resolve(obj, listing.errors)
            if record is not None and matches_statuses(record, wanted):
                kept.append((obj, record))
        return self._listed(listing, kept, namespace, chunk_size, with_pods)

    def _listed(self, listing: Listing, kept: list[tuple[dict, dict]], namespace: str | None, chunk_size: int,
                with_pods: bool) -> Listing:
        if with_pods and kept:
            pods = self._pods_for([obj for obj, _ in kept], namespace, chunk_size, listing.errors)
            for obj, record in kept:
                view = live_view(record, pods.get(obj["metadata"].get("uid"), []))
                record["live"] = view["live"]
        listing.items = [record for _, record in kept]
        return listing

    def all_workloads(self, namespace: str | None, *, label_selector: str | None = None,
                      statuses: Iterable[str] = (), chunk_size: int = 500, with_pods: bool = False) -> Listing:
        """`get all`: the workloads of every catalog kind the cluster serves, top-level ones only.

        A workload whose controller chain reaches an object of another catalog kind is that
        one's part (a JobSet's Jobs, a RayJob's RayCluster, the Deployment under an
        InferenceService's Knative revision): `top_level` leaves it to its owner, so each
        workload is one row.  Kinds the cluster does not serve are not listed (most clusters
        run few frameworks); a kind we may not list is a `forbidden` notice and the others are
        still listed.  Each item carries `type`, its kind (``Kind.group`` when two catalog kinds
        share the name).  Arguments as `workloads`.
        """
        wanted = {s.lower() for s in statuses}
        listing = Listing([])
        resources = catalog_resources(self.catalog, self.served)
        kinds: dict[str, set] = {}
        for d in self.catalog:
            kinds.setdefault(d.gvk.kind, set()).add(d.gvk.group)
        kept = []
        for resource in resources:
            try:
                objects = list(_list_all(self.cluster, resource, namespace, label_selector=label_selector,
                                         chunk_size=chunk_size))
            except AccessError as exc:
                if exc.status == 404:      # its CRD deleted since discovery: not served any more
                    continue
                if exc.status != 403:
                    raise
                self.notice(Notice(FORBIDDEN, f"{exc} (left out)"))
                continue
            type_name = resource.kind if len(kinds.get(resource.kind, ())) < 2 or not resource.group \
                else f"{resource.kind}.{resource.group}"
            for obj in objects:
                record = self._resolve(obj, listing.errors)
                if record is not None and matches_statuses(record, wanted):
                    kept.append((obj, {"type": type_name, **record}))
        covered = {(r.group, r.kind) for r in resources}
        tops = self.top_level([obj for obj, _ in kept], covered)
        return self._listed(listing, [k for k, top in zip(kept, tops) if top], namespace, chunk_size, with_pods)

    def top_level(self, objects: list[dict], covered: set[tuple[str, str]]) -> list[bool]:
        """Whether each object is a workload of its own: its controller chain (owners read once
        each, `OWNER_READS` at a time) reaches no object of a `covered` (group, kind).  An owner
        we may not read ends the chain with a `forbidden` notice: the object is listed, since
        hiding a real workload over a permission would say nothing."""
        owners = Owners(self.cluster, self.served)
        for obj in objects:
            owners.know(obj)
        owners.prefetch([obj for obj in objects if (group_of((controller_of(obj) or {}).get("apiVersion")),
                                                    (controller_of(obj) or {}).get("kind")) not in covered])

        def walk(obj: dict) -> bool:
            namespace = (obj.get("metadata") or {}).get("namespace")
            node = obj
            for _ in range(MAX_OWNER_DEPTH):
                ref = controller_of(node)
                if ref is None:
                    return True
                if (group_of(ref.get("apiVersion")), ref.get("kind")) in covered:
                    return False
                node = owners.owner(namespace, ref)
                if not isinstance(node, dict):
                    key = (namespace, group_of(ref.get("apiVersion")), ref.get("kind"), ref.get("name"))
                    if node is False and key in owners.refused:
                        self.notice(Notice(FORBIDDEN, f"{object_ref(obj)}: cannot read its owner {ref.get('kind')} "
                                                      f"{ref.get('name')!r} ({owners.refused[key].status}): "
                                                      "listed, though it may be part of another workload"))
                    return True
            return True

        if len(objects) < 2:
            return [walk(obj) for obj in objects]
        with ThreadPoolExecutor(max_workers=OWNER_READS) as pool:
            return list(pool.map(walk, objects))

    # -- tree / resources ------------------------------------------------------
    def find(self, text: str, namespace: str | None) -> dict:
        """One workload by ``TYPE/NAME`` or bare ``NAME`` (searched among the catalog kinds the cluster
        serves, in `namespace`, or every namespace when None).  A workload controlled by another
        candidate (a Knative Service of an InferenceService) gives way to it."""
        type_text, sep, name = text.rpartition("/")
        if sep and type_text:
            resources = [self.resource(type_text)]
            if namespace is not None or not resources[0].namespaced:
                return self._get(resources[0], namespace, name)
        else:
            name = text
            resources = catalog_resources(self.catalog, self.served)
        candidates = []
        for resource in resources:
            candidates += list(_list_all(self.cluster, resource, namespace, field_selector=f"metadata.name={name}"))
        uids = {(c.get("metadata") or {}).get("uid") for c in candidates}
        top = [c for c in candidates
               if not any(ref.get("controller") and ref.get("uid") in uids
                          for ref in (c.get("metadata") or {}).get("ownerReferences") or [])]
        if len(top) == 1:
            return top[0]
        where = f"namespace {namespace!r}" if namespace else "any namespace"
        if not top:
            raise NotFoundError(f"no workload named {name!r} in {where} "
                                f"(searched {', '.join(r.qualified for r in resources)})")
        raise AmbiguousNameError(name, sorted(_candidate(c, self.served) for c in top))

    def describe(self, text: str, namespace: str | None, *, chunk_size: int = 500) -> dict:
        """One workload with its pods: the resolved record plus `live_view`'s live fields."""
        obj, definition, workload, raw, infos = self.workload_with_pods(text, namespace, chunk_size=chunk_size)
        return live_view(workload.to_dict(), infos)

    def workload_with_pods(self, text: str, namespace: str | None, *, chunk_size: int = 500):
        """One workload (`find`) as (object, definition, ResolvedWorkload, its raw pods, their
        `pod_info`s): the pods read with one paged list of its namespace."""
        obj = self.find(text, namespace)
        definition = self.catalog.definition_for(obj)
        workload = self.catalog.resolve(obj, self.related)
        for message in missing_references(workload.to_dict()):
            self.notice(Notice(MISSING_REFERENCE, message))
        errors: list[str] = []
        uid = obj["metadata"].get("uid")
        raw: dict[str, list[dict]] = {}
        pods = self._pods_for([obj], (obj.get("metadata") or {}).get("namespace"), chunk_size, errors,
                              definitions={uid: definition}, raw=raw)
        for message in errors:
            self.notice(Notice(INVALID_DEFINITION, message))
        return obj, definition, workload, raw.get(uid, []), pods.get(uid, [])

    def _pods_for(self, objects: list[dict], namespace: str | None, chunk_size: int, errors: list[str],
                  definitions: dict | None = None, raw: dict | None = None) -> dict[str, list[dict]]:
        """uid of each object → `pod_info` of the pods it owns (see the module docstring); `raw`,
        when given, gets the pods themselves, in the same order."""
        pod_resource = self.served.for_definition("", "v1", "Pod")
        if pod_resource is None:
            return {}
        by_uid = {o["metadata"].get("uid"): o for o in objects}
        definitions = definitions or {uid: self.catalog.definition_for(o) for uid, o in by_uid.items()}
        by_label: dict[tuple, list[str]] = {}
        for uid, obj in by_uid.items():
            meta = obj["metadata"]
            for key in label_keys(definitions[uid]):
                by_label.setdefault((meta.get("namespace"), key, meta.get("name")), []).append(uid)
        owners = Owners(self.cluster, self.served)
        for obj in objects:
            owners.know(obj)
        out: dict[str, list[dict]] = {}
        pods = list(_list_all(self.cluster, pod_resource, namespace, chunk_size=chunk_size))
        owners.prefetch(pods, chunk_size)
        for pod in pods:
            meta = pod.get("metadata") or {}
            ancestors, complete = owners.ancestors(pod)
            mine = [uid for uid in ancestors if uid in by_uid]
            if not mine and (not complete or not meta.get("ownerReferences")):
                labels = meta.get("labels") or {}
                mine = sorted({uid for key, value in labels.items()
                               for uid in by_label.get((meta.get("namespace"), key, value), [])})
            for uid in mine:
                try:
                    membership = match_pod(definitions[uid], pod)
                except ResolveError as exc:
                    errors.append(str(exc))
                    continue
                if membership is not None:
                    out.setdefault(uid, []).append(pod_info(pod, membership, self.catalog.resolver.gpus))
                    if raw is not None:
                        raw.setdefault(uid, []).append(pod)
        return out


# -- completion ------------------------------------------------------------------
def workload_names(kubeconfig: str | None, context: str | None, type_text: str, namespace: str | None) -> list[str]:
    """The names of the objects of a type in a namespace (the context's when None), for shell
    completion: discovery and one paged list, no catalog (compiling it costs seconds a shell
    waits for; a type no definition reads fails later, when the command runs)."""
    cluster = open_cluster(kubeconfig, context)
    try:
        matches = [r for r in discover(cluster).lookup(type_text) if r.can("list")]
        if not matches:
            return []
        ns = namespace or current_namespace(kubeconfig, context)
        names = {(obj.get("metadata") or {}).get("name") for obj in _list_all(cluster, matches[0], ns)}
    finally:
        cluster.close()
    return sorted(n for n in names if n)


def namespace_names(kubeconfig: str | None, context: str | None) -> list[str]:
    """The cluster's namespaces, for shell completion."""
    cluster = open_cluster(kubeconfig, context)
    try:
        names = [(ns.get("metadata") or {}).get("name") for page in cluster.list_pages("/api/v1/namespaces")
                 for ns in page.get("items") or []]
    finally:
        cluster.close()
    return sorted(n for n in names if n)


def _candidate(obj: dict, served: ServedResources) -> str:
    meta = obj.get("metadata") or {}
    group = (obj.get("apiVersion") or "").rpartition("/")[0]
    found = served.versions_of(group, obj.get("kind"))
    type_name = found[0].qualified if found else obj.get("kind")
    ns = meta.get("namespace")
    return f"{type_name}/{meta.get('name')}" + (f" in {ns}" if ns else "")


__all__ = [
    "AccessError", "AmbiguousNameError", "CAUSES", "ClusterConfigError", "Inspector", "Listing", "NoDefinitionError",
    "NotFoundError", "Notice", "Owners",
    "context_name", "label_keys", "live_view", "load_cluster_definitions", "namespace_names", "open_cluster",
    "pod_info", "workload_names",
]
