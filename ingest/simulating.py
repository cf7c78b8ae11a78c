"""A seeded, deterministic simulator of a multi-cluster history of AI workloads.

Why it exists: the embedded demo, the replay command, the end-to-end tests and
the benchmarks all need a realistic stream of raw object events (the
``workloadmap.raw.v1`` format of ``catalog.records``) without a cluster, and
the tests need to know what every event *should* become.  So each event comes
with the simulator's intent: the status, GPUs and pods the pipeline must derive
from it (or, for a bad message, the dead-letter reason it must get).

Why it stays honest: objects are not invented field by field.  Every workload
keeps the spec of one bundled example object (``catalog/examples``) for its
whole life, scaled through the definition's own replicas path
(``assignable_paths``) and suspended/resumed through its ``suspendDefinition``
(``catalog.updating``); its status at each step is borrowed from an example of
the same kind that resolves to the wanted state.  Each combination is resolved
through ``Catalog.builtin()`` once (cached) and used only if it resolves to
exactly the intended status; a lifecycle step that a kind cannot express with
its examples is skipped, never emitted with a wrong intent.

Determinism: one seed gives byte-identical events.  All randomness comes from
``random.Random`` seeded with text (stable across processes and Python
builds); times come from the simulated clock only (``observedAt`` never reads
the wall clock); resourceVersions increase per cluster in emission order;
``metadata.generation`` increases whenever the spec changes (scale, suspend,
resume), as the API server does.  That last point matters downstream: the
processors cache a spec's components per (uid, generation).

Lifecycles (over ``days`` simulated days, workloads arriving throughout, a
tenth of them already running at the start, as a watcher's initial list sees
them):

- batch kinds (Job, JobSet, PyTorchJob, MPIJob, RayJob, Pod): ADDED
  Initializing (or Suspended when queued, then admitted) → Initializing →
  Running (progress updates; preemption = suspend + resume on suspendable
  kinds) → Completed or Failed → often DELETED after a TTL; long runs are
  still Running at the end.
- services (everything else): ADDED Initializing → Running, then every few
  hours one of: scale up (optionally Degraded first) or down through the
  replicas path with a new generation, degrade and recover, suspend and
  resume (suspendable kinds), a CronJob run completing, a resync, rarely a
  failure; some are deleted, most are still running at the end.

DELETED events carry the object's last state; their intent is status
``records.DELETED`` with the GPUs and pods that last state resolves to (what
the workload held until it went away).

Bad messages (``simulate_messages(bad_fraction=...)``), each with its own uid
so it never disturbs a good object's stream, and the dead-letter reason the
processors must give it:

- bytes that are not JSON (a truncated event) → ``MALFORMED_JSON``;
- a well-formed event of kind ``Widget`` (``example.com/v1``) → ``UNKNOWN_KIND``;
- an event without ``object``, or whose object has no ``metadata.uid`` →
  ``MISSING_FIELDS``;
- an event whose ``object`` is the string ``"text"`` (the envelope has the
  wrong type) → ``WRONG_TYPES``;
- a Deployment whose ``spec.replicas`` is ``"lots"``: the envelope is fine, the
  catalog's resolver rejects the count → ``RESOLVE_ERROR`` (a type error
  *inside* an object is the resolver's to find, not the envelope check's).

Why one module of this size: the lifecycles, the templates they borrow and the
event stream share one simulated clock and one seeded random source, and the
determinism above is a property of them together (``scheduling.py`` holds the
nodes and pods apart, as they only read the stream).
"""

from __future__ import annotations

import copy
import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

import yaml

from workloadmap.catalog import Catalog, ResolveError
from workloadmap.catalog import records
from workloadmap.catalog.jqlang import JqError
from workloadmap.catalog.jqlang.pathing import assignable_paths
from workloadmap.catalog.updating import UpdateError, resume, suspend

CLUSTER_NAMES = ("prod-us-east", "prod-eu-west", "research", "prod-ap-south", "staging")

# Definition names, in the order the first workloads take them (so that a small
# population still covers every kind).
FRAMEWORKS = ("jobset", "pytorchjob", "mpijob", "raycluster", "rayjob", "rayservice", "inferenceservice",
              "knative-service", "nimservice", "leaderworkerset", "milvus", "podcliqueset", "dynamographdeployment")
CORE = ("deployment", "statefulset", "job", "cronjob", "pod")
KINDS = FRAMEWORKS + CORE
BATCH = frozenset({"job", "jobset", "pytorchjob", "mpijob", "rayjob", "pod"})
# How often each kind is picked once every kind has appeared (a rough mix of a GPU fleet).
WEIGHTS = {"deployment": 10, "statefulset": 4, "job": 10, "cronjob": 3, "pod": 6, "jobset": 7, "pytorchjob": 9,
           "mpijob": 4, "raycluster": 4, "rayjob": 5, "rayservice": 3, "inferenceservice": 5, "knative-service": 3,
           "nimservice": 4, "leaderworkerset": 3, "milvus": 2, "podcliqueset": 2, "dynamographdeployment": 3}
NAMESPACES = ("ml-research", "inference", "team-vision", "nlp", "platform", "recsys", "speech", "data-eng")

MAX_GPUS = 64
MAX_REPLICAS = 16
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes generateName
_MS = 1
_S = 1000
_MIN = 60 * _S
_H = 60 * _MIN
_D = 24 * _H


@dataclass(frozen=True)
class SimulatedEvent:
    """One simulated message and what the pipeline must make of it.

    For a good event: ``event`` is the raw event dict, and the resolved status,
    GPUs and pods of ``event["object"]`` are ``expected_*`` (status
    ``"Deleted"`` for a DELETED event).  For a bad message (see
    ``simulate_messages``): ``event`` is None and ``expected_deadletter_reason``
    is the reason it must be dead-lettered with.
    """

    event: dict | None
    key: bytes
    expected_status: str | None
    expected_gpus: float | None
    expected_pods: int | None
    step: str = ""
    expected_deadletter_reason: str | None = None


# --------------------------------------------------------------------------- templates


@dataclass
class _Template:
    """One bundled example object: the spec a workload keeps for its whole life."""

    index: int
    kind_name: str           # definition name
    definition: object
    obj: dict
    name: str
    namespace: str
    status: str              # what the example itself resolves to
    gpus: float
    scale_path: tuple | None = None
    replicas: int | None = None   # the example's value at scale_path
    valid_replicas: tuple = ()    # replica counts whose GPUs stay within 1..64 (or 0 for CPU-only)
    base_variant: str | None = None


@dataclass(frozen=True)
class _State:
    """A resolved, verified combination of spec and status (shared by many events)."""

    text: str                # JSON [metadata labels/annotations, other top-level fields, status or null]
    has_status: bool         # False for a fresh object the controller has not written a status to yet
    spec_id: str             # JSON of the top-level fields but metadata/status: a change bumps generation
    wanted: str
    gpus: float
    pods: int


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_examples() -> list[dict]:
    folder = resources.files("workloadmap.catalog").joinpath("examples")
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            out.extend(d for d in yaml.load_all(entry.read_text(), Loader=_YamlLoader) if d)
    return out


def _strip(obj: dict) -> dict:
    """An example without its identity and status."""
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
    meta = obj.get("metadata") or {}
    out["metadata"] = {k: copy.deepcopy(meta[k]) for k in ("labels", "annotations") if k in meta}
    return out


def _set_path(obj, path, value):
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _gpus(value) -> float:
    return float(value or 0)


class _States:
    """Templates grouped by kind, and the verified states built from them (cached)."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.by_kind: dict[str, list[_Template]] = {}
        self.donors: dict[tuple, list[_Template]] = {}     # (kind, status) -> examples resolving to it
        self._specs: dict[tuple, dict | None] = {}
        self._states: dict[tuple, _State | None] = {}
        for i, obj in enumerate(_load_examples()):
            definition = catalog.definition_for(obj)
            resolved = catalog.resolve(obj)
            meta = obj["metadata"]
            t = _Template(i, definition.name, definition, obj, meta["name"], meta.get("namespace") or "default",
                          resolved.status, _gpus(resolved.total.gpu))
            self.by_kind.setdefault(t.kind_name, []).append(t)
            self.donors.setdefault((t.kind_name, t.status), []).append(t)
        for templates in self.by_kind.values():
            for t in templates:
                self._prepare(t)

    # -- scaling ---------------------------------------------------------------
    def _resolve_spec(self, t: _Template, path, value):
        obj = copy.deepcopy(t.obj)
        if path is not None:
            _set_path(obj, path, value)
        return self.catalog.resolve(obj)

    def _prepare(self, t: _Template):
        """Pick the replicas path that moves the most GPUs (else pods), and the counts it may take."""
        best = None
        base = self.catalog.resolve(t.obj)
        for comp in t.definition.components:
            if comp.scale is None or comp.scale.replicas is None:
                continue
            try:
                paths = assignable_paths(comp.scale.replicas.source, t.obj)
            except JqError:
                continue
            for path, value in paths:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    continue
                try:
                    more = self._resolve_spec(t, path, value + 1)
                except (ResolveError, JqError, KeyError, TypeError, IndexError):
                    continue
                # most GPUs moved, then most pods, then the component already most replicated (workers)
                score = (_gpus(more.total.gpu) - _gpus(base.total.gpu), more.pods - base.pods, value)
                if score[:2] > (0, 0) and (best is None or score > best[0]):
                    best = (score, path, value)
        if best is not None:
            _, t.scale_path, t.replicas = best
            valid = []
            for r in range(1, MAX_REPLICAS + 1):
                gpus = _gpus(self._resolve_spec(t, t.scale_path, r).total.gpu)
                if (1 <= gpus <= MAX_GPUS) or (gpus == 0 and t.gpus == 0):
                    valid.append(r)
            t.valid_replicas = tuple(valid)
        elif (1 <= t.gpus <= MAX_GPUS) or t.gpus == 0:
            t.valid_replicas = (None,)
        for variant in ("as-is", "resumed"):
            if any(self.state(t, r, variant, "Running") for r in t.valid_replicas[:1]):
                t.base_variant = variant
                break

    # -- states -----------------------------------------------------------------
    def spec(self, t: _Template, replicas, variant: str) -> dict | None:
        key = (t.index, replicas, variant)
        if key not in self._specs:
            obj = _strip(t.obj)
            if replicas is not None and t.scale_path is not None:
                _set_path(obj, t.scale_path, replicas)
            try:
                if variant == "suspended":
                    obj = suspend(t.definition, obj)
                elif variant == "resumed":
                    obj = resume(t.definition, obj)
            except UpdateError:
                obj = None
            self._specs[key] = obj
        return self._specs[key]

    @staticmethod
    def _fit(status: dict, donor_replicas, replicas) -> dict:
        """The donor's status with its replica counters moved to the new spec's scale."""
        out = dict(status)
        for k, v in status.items():
            if (k == "replicas" or k.endswith("Replicas")) and isinstance(v, int) and not isinstance(v, bool):
                if v >= donor_replicas:
                    out[k] = replicas
                elif v > 0:
                    out[k] = max(1, min(replicas - 1, round(v * replicas / donor_replicas)))
        return out

    def _candidates(self, t: _Template, spec: dict, wanted: str, fresh: bool):
        """Statuses to try for `wanted`: the template's own first, fitted to the scale, then the bare object."""
        donors = self.donors.get((t.kind_name, wanted), [])
        donors = sorted(donors, key=lambda d: (d.index != t.index, d.index))
        out = []
        if fresh and wanted == "Initializing":
            out.append(None)
        replicas = (spec.get("spec") or {}).get("replicas")
        for d in donors:
            status = d.obj.get("status")
            if not isinstance(status, dict):
                continue
            donor_replicas = (d.obj.get("spec") or {}).get("replicas")
            if (isinstance(replicas, int) and isinstance(donor_replicas, int) and donor_replicas > 0
                    and replicas != donor_replicas):
                out.append(self._fit(status, donor_replicas, replicas))
            out.append(status)
        if not fresh and wanted == "Initializing":
            out.append(None)
        return out

    def state(self, t: _Template, replicas, variant: str, wanted: str, fresh: bool = False) -> _State | None:
        key = (t.index, replicas, variant, wanted, fresh)
        if key in self._states:
            return self._states[key]
        found = None
        spec = self.spec(t, replicas, variant)
        if spec is not None:
            for status in self._candidates(t, spec, wanted, fresh):
                obj = dict(spec)
                obj["metadata"] = {"name": t.name, "namespace": t.namespace, "uid": "template", **spec["metadata"]}
                if status is not None:
                    obj["status"] = status
                try:
                    resolved = self.catalog.resolve(obj)
                except (ResolveError, JqError):
                    continue
                if resolved.status != wanted:
                    continue
                body = {k: v for k, v in spec.items() if k != "metadata"}
                found = _State(
                    text=json.dumps([spec["metadata"], body, status], separators=(",", ":")),
                    has_status=status is not None,
                    spec_id=json.dumps(body, separators=(",", ":"), sort_keys=True), wanted=wanted,
                    gpus=_gpus(resolved.total.gpu), pods=resolved.pods)
                break
        self._states[key] = found
        return found


_STATES: dict[int, _States] = {}


def _states() -> _States:
    """One template set per process: the examples and the built-in catalog never change."""
    catalog = Catalog.builtin()
    states = _STATES.get(id(catalog))
    if states is None:
        states = _STATES[id(catalog)] = _States(catalog)
    return states


def warm_up() -> None:
    """Build this process's templates now (the examples resolved by the built-in catalog) rather than
    at the first simulated event: a caller that times the simulation times that once-only cost apart."""
    _states()


# --------------------------------------------------------------------------- lifecycles


@dataclass
class _Step:
    at: int                  # ms since the start
    etype: str
    state: _State
    label: str


@dataclass
class _Workload:
    index: int
    cluster: str
    template: _Template
    name: str
    namespace: str
    uid: str
    created: int             # ms since the start (negative: before it)
    replicas: object
    variant: str
    steps: list


class _Planner:
    """Plans one workload's life as verified steps (inexpressible steps are dropped)."""

    def __init__(self, states: _States, w: _Workload, rng: random.Random, end: int):
        self.states, self.w, self.rng, self.end = states, w, rng, end
        self.t = w.created

    def add(self, at: int, wanted: str, label: str, *, replicas=None, variant=None, fresh=False) -> bool:
        w = self.w
        at = max(at, self.t + 1, w.steps[-1].at + 1 if w.steps else 0)
        if at >= self.end:
            return False
        replicas = w.replicas if replicas is None else replicas
        variant = variant or w.variant
        state = self.states.state(w.template, replicas, variant, wanted, fresh)
        if state is None:
            return False
        w.steps.append(_Step(at, "ADDED" if not w.steps else "MODIFIED", state, label))
        w.replicas, w.variant, self.t = replicas, variant, at
        return True

    def after(self, lo: int, hi: int) -> int:
        self.t += self.rng.randint(lo, hi)
        return self.t

    def delete(self, at: int) -> None:
        w = self.w
        if w.steps and w.steps[-1].at < at < self.end:
            last = w.steps[-1].state
            w.steps.append(_Step(at, "DELETED", last, "deleted"))
            self.t = at

    # -- batch ------------------------------------------------------------------
    def batch(self, preexisting: bool) -> None:
        rng, t = self.rng, self.w.template
        suspendable = t.definition.root.suspend is not None
        if preexisting:
            self.add(self.t, "Running", "listed")
        else:
            if suspendable and rng.random() < 0.2 and self.add(self.t, "Suspended", "queued", variant="suspended",
                                                                fresh=True):
                self.after(5 * _MIN, 8 * _H)
                self.add(self.t, "Initializing", "admitted", variant="resumed")
            else:
                self.add(self.t, "Initializing", "created", fresh=True)
            self.add(self.after(20 * _S, 10 * _MIN), "Initializing", "scheduling")
            self.add(self.after(30 * _S, 20 * _MIN), "Running", "started")
        if not self.w.steps:
            return
        duration = int(min(max(rng.lognormvariate(0, 1.2) * 3 * _H, 10 * _MIN), 4 * _D))
        finish = self.t + duration
        while True:
            nxt = self.t + rng.randint(30 * _MIN, 8 * _H)
            if nxt >= finish or nxt >= self.end:
                break
            if suspendable and rng.random() < 0.1:
                if self.add(nxt, "Suspended", "preempted", variant="suspended"):
                    pause = rng.randint(10 * _MIN, 12 * _H)
                    self.add(self.t + pause, "Initializing", "resumed", variant="resumed")
                    self.add(self.after(30 * _S, 10 * _MIN), "Running", "restarted", variant="resumed")
                    finish += pause
                    continue
            self.add(nxt, "Running", "progress")
        if finish >= self.end:
            return  # still running at the end of the simulation
        outcome = ("Failed", "Completed") if rng.random() < 0.2 else ("Completed", "Failed")
        if not (self.add(finish, outcome[0], outcome[0].lower()) or self.add(finish, outcome[1], outcome[1].lower())):
            return
        if rng.random() < 0.6:
            self.delete(self.t + rng.randint(10 * _MIN, 2 * _D))

    # -- services ---------------------------------------------------------------
    def service(self, preexisting: bool) -> None:
        rng, t = self.rng, self.w.template
        suspendable = t.definition.root.suspend is not None
        if preexisting:
            self.add(self.t, "Running", "listed")
        else:
            self.add(self.t, "Initializing", "created", fresh=True)
            self.add(self.after(30 * _S, 15 * _MIN), "Initializing", "scheduling")
            self.add(self.after(1 * _MIN, 30 * _MIN), "Running", "started")
        if not self.w.steps:
            return
        delete_at = self.t + rng.randint(1 * _H, 10 * _D) if rng.random() < 0.3 else self.end
        actions = ["resync", "degrade"]
        if len([r for r in t.valid_replicas if r is not None]) > 1:
            actions += ["scale", "scale"]
        if suspendable:
            actions.append("suspend")
        if t.kind_name == "cronjob":
            actions += ["run", "run"]
        while True:
            nxt = self.t + rng.randint(2 * _H, 30 * _H)
            if nxt >= min(delete_at, self.end):
                break
            action = rng.choice(actions) if rng.random() > 0.03 else "fail"
            if action == "scale":
                current = self.w.replicas
                new = rng.choice([r for r in t.valid_replicas if r != current])
                up = new > current
                if up:
                    self.add(nxt, "Degraded", "scaling-up", replicas=new)
                self.add(nxt + rng.randint(1 * _MIN, 10 * _MIN), "Running", "scaled-up" if up else "scaled-down",
                         replicas=new)
            elif action == "degrade":
                if self.add(nxt, "Degraded", "degraded"):
                    self.add(self.after(5 * _MIN, 6 * _H), "Running", "recovered")
            elif action == "suspend":
                if self.add(nxt, "Suspended", "suspended", variant="suspended"):
                    self.after(1 * _H, 2 * _D)
                    self.add(self.t, "Initializing", "resumed", variant="resumed")
                    self.add(self.after(1 * _MIN, 15 * _MIN), "Running", "restarted", variant="resumed")
            elif action == "run":
                if self.add(nxt, "Completed", "run-completed"):
                    self.add(self.after(10 * _MIN, 6 * _H), "Running", "run-started")
            elif action == "fail":
                if self.add(nxt, "Failed", "failed"):
                    if rng.random() < 0.7:
                        self.delete(self.t + rng.randint(5 * _MIN, 1 * _D))
                    return
            else:
                self.add(nxt, "Running", "resync")
        if delete_at < self.end:
            self.delete(max(delete_at, self.t + 1))


# --------------------------------------------------------------------------- the simulation


def cluster_names(n: int) -> list[str]:
    return [CLUSTER_NAMES[i] if i < len(CLUSTER_NAMES) else f"cluster-{i:02d}" for i in range(n)]


def _time_text(start_ms: int, ms: int, precise: bool = True) -> str:
    """RFC 3339 UTC text of `ms` after the start (milliseconds since the epoch)."""
    seconds, millis = divmod(start_ms + ms, 1000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{millis:03d}Z" if precise else f"{text}Z"


def _plan(states: _States, clusters: list[str], workloads: int, end: int, seed) -> list[_Workload]:
    out = []
    weights = [WEIGHTS[k] for k in KINDS]
    for i in range(workloads):
        rng = random.Random(f"workloadmap-sim:{seed}:{i}")
        kind = KINDS[i] if i < len(KINDS) else rng.choices(KINDS, weights)[0]
        cluster = clusters[i % len(clusters)] if i < 2 * len(clusters) + len(KINDS) else rng.choice(clusters)
        templates = [t for t in states.by_kind.get(kind, []) if t.base_variant and t.valid_replicas]
        if not templates:
            continue
        # CPU-only examples are real but rare in a GPU fleet
        template = rng.choices(templates, [1.0 if t.gpus > 0 else 0.25 for t in templates])[0]
        preexisting = rng.random() < 0.1
        created = -rng.randint(1 * _H, 30 * _D) if preexisting else rng.randint(0, max(end - 30 * _MIN, 1))
        suffix = "".join(rng.choice(_NAME_CHARS) for _ in range(5))
        namespace = template.namespace if rng.random() < 0.5 else rng.choice(NAMESPACES)
        # small workloads are the most common: replica count r with weight 1/r
        replicas = rng.choices(template.valid_replicas,
                               [1.0 / (r or 1) for r in template.valid_replicas])[0]
        w = _Workload(i, cluster, template, f"{template.name}-{suffix}", namespace,
                      str(uuid.UUID(int=rng.getrandbits(128), version=4)), created,
                      replicas, template.base_variant, [])
        planner = _Planner(states, w, rng, end)
        if preexisting:
            planner.t = rng.randint(0, 60 * _S)
        (planner.batch if kind in BATCH else planner.service)(preexisting)
        if w.steps:
            out.append(w)
    return out


def simulate(clusters: int = 3, workloads: int = 200, days: float = 7, seed=7,
             start: str = "2026-11-01T00:00:00Z") -> Iterator[SimulatedEvent]:
    """Raw object events of a simulated multi-cluster history, in time order, with their intent."""
    if clusters < 1 or workloads < 0 or days <= 0:
        raise ValueError("need clusters >= 1, workloads >= 0, days > 0")
    states = _states()
    t0 = int(records.parse_time(start).timestamp() * 1000)
    end = int(days * _D)
    names = cluster_names(clusters)
    plans = _plan(states, names, workloads, end, seed)
    order = sorted((step.at, w.index, n) for w in plans for n, step in enumerate(w.steps))
    by_index = {w.index: w for w in plans}
    rv_rng = random.Random(f"workloadmap-sim:{seed}:resourceVersion")
    rv = {c: 1_000_000 + 100_000 * i for i, c in enumerate(names)}
    generation: dict[int, tuple] = {}        # workload index -> (spec_id, generation)
    created_text: dict[int, str] = {}
    for at, index, n in order:
        w = by_index[index]
        step = w.steps[n]
        state = step.state
        rv[w.cluster] += rv_rng.randint(1, 40)
        spec_id, gen = generation.get(index, (state.spec_id, 1))
        if spec_id != state.spec_id:
            gen += 1
        generation[index] = (state.spec_id, gen)
        meta = {"name": w.name, "namespace": w.namespace, "uid": w.uid, "resourceVersion": str(rv[w.cluster])}
        if w.template.kind_name != "pod":
            meta["generation"] = gen
        created = created_text.get(index)
        if created is None:
            created = created_text[index] = _time_text(t0, w.created, precise=False)
        meta["creationTimestamp"] = created
        observed = _time_text(t0, at)
        if step.etype == "DELETED":
            meta["deletionTimestamp"] = _time_text(t0, at, precise=False)
        extra, body, status = json.loads(state.text)     # fresh objects: events never share structure
        meta.update(extra)
        obj = {"apiVersion": w.template.obj["apiVersion"], "kind": w.template.obj["kind"], "metadata": meta}
        obj.update(body)
        if status is not None:
            if "observedGeneration" in status:
                status["observedGeneration"] = gen
            obj["status"] = status
        event = records.raw_event(w.cluster, step.etype, obj, observed)
        yield SimulatedEvent(
            event=event, key=records.raw_key(w.cluster, event["object"]),
            expected_status=records.DELETED if step.etype == "DELETED" else state.wanted,
            expected_gpus=state.gpus, expected_pods=state.pods, step=step.label)


# --------------------------------------------------------------------------- bad messages

BAD_KINDS = ("malformed-json", "unknown-kind", "missing-object", "missing-uid", "object-text", "replicas-lots")


def _bad_message(kind: str, good: SimulatedEvent, rng: random.Random, states: _States):
    """(key, value bytes, intent) of one bad message, modelled on a good event."""
    event = good.event
    cluster, observed = event["cluster"], event["observedAt"]
    uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    key = records.record_key(cluster, uid)
    if kind == "malformed-json":
        text = records.encode(event)
        value, reason = text[: rng.randint(1, max(1, min(len(text) - 1, 200)))], records.MALFORMED_JSON
    elif kind == "unknown-kind":
        obj = {"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": f"widget-{uid[:8]}", "namespace": "default", "uid": uid, "resourceVersion": "1"},
               "spec": {"size": 3}}
        value, reason = records.encode(records.raw_event(cluster, "ADDED", obj, observed)), records.UNKNOWN_KIND
    elif kind == "missing-object":
        value = records.encode({"cluster": cluster, "type": "ADDED", "observedAt": observed})
        reason = records.MISSING_FIELDS
    elif kind == "missing-uid":
        obj = dict(event["object"])
        obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "uid"}
        value, reason = records.encode({**event, "object": obj}), records.MISSING_FIELDS
        key = records.record_key(cluster, "")
    elif kind == "object-text":
        value = records.encode({"cluster": cluster, "type": "MODIFIED", "observedAt": observed, "object": "text"})
        reason = records.WRONG_TYPES
    else:  # replicas-lots
        template = next(t for t in states.by_kind["deployment"] if t.status == "Running")
        obj = copy.deepcopy(template.obj)
        obj["metadata"] = {"name": f"{template.name}-broken", "namespace": template.namespace, "uid": uid,
                           "resourceVersion": "1", "generation": 1}
        obj["spec"]["replicas"] = "lots"
        value, reason = records.encode(records.raw_event(cluster, "ADDED", obj, observed)), records.RESOLVE_ERROR
    intent = SimulatedEvent(event=None, key=key, expected_status=None, expected_gpus=None, expected_pods=None,
                            step=kind, expected_deadletter_reason=reason)
    return key, value, intent


def simulate_messages(clusters: int = 3, workloads: int = 200, days: float = 7, seed=7,
                      start: str = "2026-11-01T00:00:00Z", bad_fraction: float = 0.0
                      ) -> Iterator[tuple[bytes, bytes, SimulatedEvent]]:
    """(key, value bytes, intent) of the simulated events, with bad messages mixed in.

    About `bad_fraction` of all messages are bad (cycled through BAD_KINDS in a
    seeded order); the good ones are exactly ``simulate(...)``'s events, encoded
    with ``records.encode``.
    """
    if not 0.0 <= bad_fraction < 1.0:
        raise ValueError("bad_fraction must be in [0, 1)")
    rng = random.Random(f"workloadmap-sim:{seed}:bad")
    states = _states()
    # bad / good ratio, so that bad / all == bad_fraction
    per_good = bad_fraction / (1.0 - bad_fraction)
    owed = 0.0
    cycle: list[str] = []
    for good in simulate(clusters, workloads, days, seed, start):
        yield good.key, records.encode(good.event), good
        owed += per_good
        while owed >= 1.0:
            owed -= 1.0
            if not cycle:
                cycle = list(BAD_KINDS)
                rng.shuffle(cycle)
            yield _bad_message(cycle.pop(), good, rng, states)
