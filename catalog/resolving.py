"""Resolving a live object through its definition into a ResolvedWorkload.

Resolution evaluates the definition's compiled jq paths against the object:
identity, status, then per component its instances, pod template, scale and
effective pod requests.  Any failure raises :class:`ResolveError`, which names
the definition, the field and the object, so a bad object or a bad definition
is diagnosed from one line.
"""

from __future__ import annotations

from collections import OrderedDict

from .compiling import (MAX_COUNT, align, compile_definition, component_exprs, fragment_template, read_count,
                        read_replicas)
from .definitions import Component, Definition, Expr, RelatedKey
from .jqlang import JqError
from .jqlang.reading import ANY, paths_read
from .jqlang.values import tostring
from .requests import DEFAULT_GPUS, GpuMatcher, RequestError, Resources, effective_request
from .statuses import as_text, match_statuses, resolve_status
from .workloads import ComponentView, ResolvedWorkload, pod_group_record




class ResolveError(ValueError):
    """An object could not be resolved through a definition."""

    def __init__(self, definition: str, field: str, obj_ref: str, reason: str):
        self.definition = definition
        self.field = field
        self.object = obj_ref
        self.reason = reason
        super().__init__(f"{obj_ref}: definition {definition!r}: {field}: {reason}")


def object_ref(obj) -> str:
    """`Kind namespace/name` of an object, for messages."""
    if not isinstance(obj, dict):
        return f"<{type(obj).__name__}>"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = _short(meta.get("name", "<unnamed>"))
    ns = meta.get("namespace")
    return f"{_short(obj.get('kind', '<no kind>'))} {_short(ns) + '/' if ns else ''}{name}"


def _short(value) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Evaluation:
    """The evaluation of one definition on one object (carries names for errors)."""

    __slots__ = ("definition", "obj", "ref", "bound")

    def __init__(self, definition: Definition, obj: dict):
        self.definition = definition
        self.obj = obj
        self.ref = None
        self.bound = None   # [obj, referenced objects...] for the expressions that read them

    def fail(self, field: str, reason: str):
        raise ResolveError(self.definition.name, field, self.ref or object_ref(self.obj), reason)

    def outputs(self, expr: Expr, value=None):
        if value is None:
            value = self.bound if expr.bound else self.obj
        try:
            return expr.program.outputs(value)
        except JqError as exc:
            self.fail(expr.field, f"jq expression {expr.source!r} failed: {exc}")

    def first(self, expr: Expr | None):
        if expr is None:
            return None
        out = self.outputs(expr)
        return out[0] if out else None

    def aligned(self, expr: Expr | None, n: int) -> list:
        """One value per instance: n outputs, or one shared by all, or none (null)."""
        if expr is None:
            return [None] * n
        out = self.outputs(expr)
        aligned = align(out, n)
        if aligned is None:
            self.fail(expr.field, f"instance ids count ({n}) does not match results count ({len(out)}) of {expr.source!r}")
        return aligned

    def count(self, field: str, value, *, minimum: int = 0) -> int | None:
        try:
            return read_count(value, minimum)
        except ValueError as exc:
            self.fail(field, str(exc))

    def replicas(self, field: str, value) -> int | None:
        try:
            return read_replicas(value)
        except ValueError as exc:
            self.fail(field, str(exc))


MAX_BYTES = 2**63 - 1


def _cache_paths(definition: Definition) -> tuple | None:
    """The paths outside `.spec` that the component tree reads (their values join the cache
    key), or None when it may read anything (never cached).  A reference's variable is no path
    of the object (the referenced objects' versions join the key: _related_versions)."""
    paths: set = set()
    for comp in definition.components:
        for expr in component_exprs(definition, comp):
            read = paths_read(expr.source)
            if read is ANY:
                return None
            paths |= {p for p in read if p[0] != "spec"}
    return tuple(sorted(paths))


class _CacheRule:
    """How objects of one definition are cached: a token standing for the definition in
    keys (an id() could be reused by a later definition) and the paths read outside `.spec`."""

    __slots__ = ("paths",)

    def __init__(self, paths):
        self.paths = paths


class Resolver:
    """Resolves objects; holds the GPU resource names to count.

    With `cache_size`, the component tree of an object is cached per (uid,
    metadata.generation) and the values of the paths outside `.spec` that its
    definition's component programs read (a Job's `.status.succeeded`, an
    annotation), for definitions whose reads are known (status is always
    evaluated afresh).  A watch stream is mostly status updates of unchanged
    specs, which then skip the costliest half of resolution.

    Why the cache holds an object's current generation only, and ``forget``: a
    tree is a few KiB, and a stream that brings new workloads all the time would
    fill the cache to `cache_size` with trees of objects long deleted or of
    generations no event will carry again; a new generation replaces the older
    ones' trees, and the processors forget a deleted object's, so the cache
    follows the live objects.
    """

    def __init__(self, gpus: GpuMatcher = DEFAULT_GPUS, cache_size: int = 0):
        self.gpus = gpus
        self.cache_size = cache_size
        self._cache: OrderedDict = OrderedDict()
        self._keys: dict[str, list] = {}   # uid -> its cache keys (all of one generation)

    def forget(self, uid: str) -> None:
        """Drop the cached trees of an object (deleted: no event of it will need them)."""
        for key in self._keys.pop(uid, ()):
            self._cache.pop(key, None)

    def cached_uids(self) -> set[str]:
        """The uids of the objects whose trees are cached."""
        return set(self._keys)

    def _cache_key(self, definition: Definition, obj: dict, meta: dict, related: tuple | None = ()):
        if not self.cache_size or related is None:
            return None
        uid, generation = meta.get("uid"), meta.get("generation")
        if not isinstance(uid, str) or not isinstance(generation, int) or isinstance(generation, bool):
            return None
        rule = definition.__dict__.get("_cache_rule")
        if rule is None:
            rule = definition.__dict__["_cache_rule"] = _CacheRule(_cache_paths(definition))
        if rule.paths is None:
            return None
        if not rule.paths:
            return (rule, uid, generation, related) if related else (rule, uid, generation)
        values = []
        for path in rule.paths:
            value = obj
            for key in path:
                if value.__class__ is dict:
                    value = value.get(key)
                elif value is not None:
                    return None   # a shape the components read otherwise (or refuse): not cached
            values.append(repr(value))   # repr tells 1, 1.0 and True apart, and keeps key order
        return (rule, uid, generation, tuple(values), related)

    def resolve(self, obj: dict, definition: Definition, lookup=None) -> ResolvedWorkload:
        """The resolved workload, through the definition's generated code (compiling.py);
        an object that code leaves aside is resolved the reference way, with the same result.

        A definition with references reads other objects: `lookup(RelatedKey)` returns the object
        a reference names, or None (no lookup: none is found); its generated code reads them as
        the reference does, from [object, referenced objects...]."""
        compiled = _compiled(definition)
        if compiled is None or obj.__class__ is not dict:
            return self.reference(obj, definition, lookup)
        meta = obj.get("metadata")
        if meta is None:
            meta = {}
        elif meta.__class__ is not dict:
            return self.reference(obj, definition, lookup)
        for key in ("name", "namespace", "uid", "creationTimestamp"):
            if meta.get(key).__class__ not in _TEXT:
                return self.reference(obj, definition, lookup)
        if obj.get("apiVersion", "").__class__ is not str or obj.get("kind", "").__class__ is not str:
            return self.reference(obj, definition, lookup)
        bound = references = None
        related_versions = ()
        try:
            if definition.references:
                keys = _related_keys(_Evaluation(definition, obj), definition, obj, meta)
                related = [lookup(key) if (key is not None and lookup is not None) else None for key in keys]
                bound = [obj, *related]
                references = [_reference_record(ref, key, found)
                              for ref, key, found in zip(definition.references, keys, related)]
                related_versions = _related_versions(related)
            status, statuses, phase, conditions = compiled.status(obj, bound)
            views, total, pods = self._components(definition, obj, meta, compiled.components, self.gpus,
                                                  related_versions, bound)
        except Exception:  # Bail, or anything odd: the reference decides (and names the error)
            return self.reference(obj, definition, lookup)
        workload = self._workload(obj, meta, definition, status, statuses, phase, conditions, views, total, pods)
        workload.references = references
        return workload

    def _components(self, definition: Definition, obj: dict, meta: dict, compute, gpus,
                    related: tuple | None = (), bound: list | None = None):
        """(views, total, pods): from the cache, or `compute(obj, gpus, bound)` and summed."""
        key = self._cache_key(definition, obj, meta, related)
        if key is not None:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        views = compute(obj, gpus, bound)
        total = Resources()
        pods = 0
        for view in views:
            total.add(view.total)
            pods += view.pods
        if pods > MAX_COUNT or total.memory > MAX_BYTES:
            # counts are int32 and bytes int64 in Kubernetes and in the warehouse: a sum past
            # them is an object no cluster runs, refused here rather than by a store downstream
            what = f"pods add up to {pods}" if pods > MAX_COUNT else f"memory requests add up to {total.memory} bytes"
            raise ResolveError(definition.name, "spec", object_ref(obj),
                               f"the components' {what}, more than {MAX_COUNT if pods > MAX_COUNT else MAX_BYTES}")
        if key is not None:
            self._remember(key, (views, total, pods))
        return views, total, pods

    def _remember(self, key: tuple, value: tuple) -> None:
        uid, generation = key[1], key[2]
        keys = self._keys.get(uid)
        if keys is None:
            keys = self._keys[uid] = []
        elif keys[0][2] != generation:   # a new generation: the older one's trees are done with
            for old in keys:
                self._cache.pop(old, None)
            keys.clear()
        keys.append(key)
        self._cache[key] = value
        if len(self._cache) > self.cache_size:
            oldest, _ = self._cache.popitem(last=False)
            kept = self._keys.get(oldest[1])
            if kept is not None:
                kept.remove(oldest)
                if not kept:
                    del self._keys[oldest[1]]

    @staticmethod
    def _workload(obj, meta, definition, status, statuses, phase, conditions, views, total, pods):
        generation, labels = meta.get("generation"), meta.get("labels")
        version, created = meta.get("resourceVersion"), meta.get("creationTimestamp")
        # positional, in ResolvedWorkload's field order (once per object: keywords cost more)
        return ResolvedWorkload(
            obj.get("apiVersion") or definition.gvk.api_version,
            obj.get("kind") or definition.gvk.kind,
            meta.get("namespace"),
            meta.get("name"),
            meta.get("uid"),
            version if version.__class__ is str else as_text(version),
            generation if generation.__class__ is int else None,
            created if created.__class__ is str else as_text(created),
            definition.name,
            definition.origin,
            definition.framework,
            status,
            statuses,
            phase,
            conditions,
            views,
            total,
            pods,
            labels if isinstance(labels, dict) else {},
            pod_group_record(definition, views) if definition.has_pod_group else None,
        )

    def reference(self, obj: dict, definition: Definition, lookup=None) -> ResolvedWorkload:
        """Resolution by walking the definition's model: the semantics the generated code
        must reproduce, the resolver of what that code leaves aside, the resolver of the
        definitions that read other objects, and the source of every resolution error."""
        if not isinstance(obj, dict):
            raise ResolveError(definition.name, "", object_ref(obj), "an object must be a mapping")
        ev = _Evaluation(definition, obj)
        meta = obj.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            ev.fail("metadata", "metadata must be an object")
        ev.ref = object_ref(obj)
        for key in ("name", "namespace", "uid", "creationTimestamp"):
            if meta.get(key) is not None and not isinstance(meta.get(key), str):
                ev.fail(f"metadata.{key}", f"must be a string, got {type(meta.get(key)).__name__}")
        for key in ("apiVersion", "kind"):
            if not isinstance(obj.get(key, ""), str):
                ev.fail(key, f"must be a string, got {type(obj.get(key)).__name__}")
        references = None
        if definition.references:
            keys = _related_keys(ev, definition, obj, meta)
            related = [lookup(key) if (key is not None and lookup is not None) else None for key in keys]
            ev.bound = [obj, *related]
            references = [_reference_record(ref, key, found)
                          for ref, key, found in zip(definition.references, keys, related)]
        status, statuses, phase, conditions = self._status(ev, definition.root)
        views, total, pods = self._components(
            definition, obj, meta,
            lambda o, gpus, bound: [v for comp in definition.components for v in self._component(ev, comp)],
            self.gpus, _related_versions(ev.bound[1:]) if ev.bound is not None else ())
        workload = self._workload(obj, meta, definition, status, statuses, phase, conditions, views, total, pods)
        workload.references = references
        return workload

    # -- status -------------------------------------------------------------
    def _status(self, ev: _Evaluation, comp: Component):
        sd = comp.status
        if sd is None:
            return resolve_status([]), [], None, []
        phase = ev.first(sd.phase)
        if phase is not None and not isinstance(phase, str):
            phase = as_text(phase)
        raw = ev.first(sd.conditions) if sd.conditions is not None else None
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            ev.fail(sd.conditions.field, f"conditions must be a list, got {type(raw).__name__}")
        conditions = []
        for c in raw:
            if not isinstance(c, dict):
                ev.fail(sd.conditions.field, f"a condition must be an object, got {type(c).__name__}")
            conditions.append({
                "type": as_text(c.get(sd.type_field)),
                "status": as_text(c.get(sd.status_field)) if not isinstance(c.get(sd.status_field), bool)
                else ("True" if c.get(sd.status_field) else "False"),
                "reason": as_text(c.get(sd.reason_field)),
                "message": as_text(c.get(sd.message_field)),
            })
        matched = match_statuses(sd, phase, raw, ev.outputs)
        return resolve_status(matched), matched, phase, conditions

    # -- components ---------------------------------------------------------
    def _component(self, ev: _Evaluation, comp: Component):
        if comp.instance_id is not None:
            ids = []
            for v in ev.outputs(comp.instance_id):
                if v is None:
                    ev.fail(comp.instance_id.field, "an instance id is null")
                ids.append(v if isinstance(v, str) else tostring(v))
        else:
            ids = [None]
        n = len(ids)
        if n == 0:
            return []
        templates = self._templates(ev, comp, n)
        scale = comp.scale
        replicas = ev.aligned(scale.replicas if scale else None, n)
        mins = ev.aligned(scale.min_replicas if scale else None, n)
        maxs = ev.aligned(scale.max_replicas if scale else None, n)
        ppr = ev.aligned(scale.pods_per_replica if scale else None, n)
        child_status = None
        if comp.status is not None and comp is not ev.definition.root:
            child_status = self._status(ev, comp)[0]
        sources = ev.aligned(comp.spec.requests_from if comp.spec else None, n)
        for source in sources:
            if source is not None and not isinstance(source, str):
                ev.fail(comp.spec.requests_from.field, f"must be a string or null, got {type(source).__name__}")
        views = []
        for i, instance in enumerate(ids):
            r = ev.replicas(scale.replicas.field if scale and scale.replicas else "", replicas[i])
            lo = ev.count(scale.min_replicas.field if scale and scale.min_replicas else "", mins[i])
            hi = ev.count(scale.max_replicas.field if scale and scale.max_replicas else "", maxs[i])
            per = ev.count(scale.pods_per_replica.field if scale and scale.pods_per_replica else "", ppr[i])
            per = 1 if per is None else per
            template = templates[i]
            if template is not None:
                base = r if r is not None else (lo if lo is not None else 1)
                pods = base * per
                if pods > MAX_COUNT:
                    ev.fail(scale.pods_per_replica.field if per > 1 and scale.pods_per_replica else
                            (scale.replicas.field if scale.replicas else scale.min_replicas.field),
                            f"{f'instance {instance!r}: ' if instance else ''}{base} replicas x {per} pods "
                            f"per replica = {pods} pods, more than {MAX_COUNT} (2^31-1)")
                try:
                    per_pod = effective_request(template.get("spec"), self.gpus)
                except RequestError as exc:
                    ev.fail(self._spec_field(comp), f"instance {instance!r}: {exc}" if instance else str(exc))
            else:
                pods, per_pod = 0, Resources()
            views.append(ComponentView(
                name=comp.name,
                instance=instance,
                parent=comp.parent.name if comp.parent else None,
                kind=str(comp.kind) if comp.kind else None,
                replicas=r, min_replicas=lo, max_replicas=hi, pods_per_replica=per, pods=pods,
                per_pod=per_pod, total=per_pod.scaled(pods), pod_template=template, status=child_status,
                requests_from=sources[i],
            ))
        return views

    @staticmethod
    def _spec_field(comp: Component) -> str:
        spec = comp.spec
        expr = spec.pod_template or spec.pod_spec or next(iter(spec.fragments.values()), None)
        return expr.field.rsplit(".", 1)[0] if expr else "specDefinition"

    def _templates(self, ev: _Evaluation, comp: Component, n: int) -> list:
        """A PodTemplateSpec ({metadata, spec}) per instance, or None per instance without spec."""
        spec = comp.spec
        if spec is None:
            return [None] * n
        if spec.pod_template is not None:
            out = []
            for t in ev.aligned(spec.pod_template, n):
                if t is None:
                    out.append(None)
                    continue
                if not isinstance(t, dict):
                    ev.fail(spec.pod_template.field, f"a pod template must be an object, got {type(t).__name__}")
                out.append({"metadata": t.get("metadata") or {}, "spec": t.get("spec") or {}})
            return out
        if spec.pod_spec is not None:
            specs = ev.aligned(spec.pod_spec, n)
            metas = ev.aligned(spec.metadata, n)
            out = []
            for s, m in zip(specs, metas):
                if s is None:
                    out.append(None)
                    continue
                if not isinstance(s, dict):
                    ev.fail(spec.pod_spec.field, f"a pod spec must be an object, got {type(s).__name__}")
                out.append({"metadata": m if isinstance(m, dict) else {}, "spec": s})
            return out
        return self._fragmented(ev, spec.fragments, n)

    def _fragmented(self, ev: _Evaluation, fragments: dict, n: int) -> list:
        values = {name: ev.aligned(expr, n) for name, expr in fragments.items()}
        out = []
        for i in range(n):
            got = {name: vals[i] for name, vals in values.items()}
            try:
                out.append(fragment_template(got))
            except TypeError as exc:
                ev.fail(fragments["containers"].field, str(exc))
        return out


_TEXT = (str, type(None))


def _compiled(definition: Definition):
    """The definition's generated code, compiled at its first object (kept on the definition,
    so a replaced definition never meets the code of its predecessor)."""
    try:
        return definition.__dict__["_compiled"]
    except KeyError:
        compiled = definition.__dict__["_compiled"] = compile_definition(definition)
        return compiled


def related_keys(definition: Definition, obj: dict) -> list:
    """The object each reference of `definition` names for `obj` (a RelatedKey, or None where
    the object names none), in the order of definition.references; ResolveError on a bad value."""
    if not definition.references:
        return []
    if not isinstance(obj, dict):
        raise ResolveError(definition.name, "", object_ref(obj), "an object must be a mapping")
    ev = _Evaluation(definition, obj)
    ev.ref = object_ref(obj)
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return _related_keys(ev, definition, obj, meta)


def _related_keys(ev: _Evaluation, definition: Definition, obj: dict, meta: dict) -> list:
    keys = []
    for ref in definition.references:
        name = ev.first(ref.name_selector)
        if name is not None and not isinstance(name, str):
            ev.fail(ref.name_selector.field, f"a referenced name must be a string, got {type(name).__name__}")
        if ref.kind_selector is not None:
            kind = ev.first(ref.kind_selector)
            chosen = next((k for k in ref.kinds if k.gvk.kind == kind), None)
        else:
            chosen = ref.kinds[0]
        if not name or chosen is None:
            keys.append(None)   # names nothing (or a kind the definition does not know): unresolved
            continue
        namespace = None
        if not chosen.cluster_scoped:
            namespace = meta.get("namespace") if ref.namespace_selector is None else ev.first(ref.namespace_selector)
            if namespace is not None and not isinstance(namespace, str):
                ev.fail(ref.namespace_selector.field, f"a namespace must be a string, got {type(namespace).__name__}")
        keys.append(RelatedKey(ref.name, chosen.gvk, namespace, name))
    return keys


def _related_versions(related: list) -> tuple | None:
    """What identifies the referenced objects' content in a cache key: uid and resourceVersion
    of each (None for one not found); None when one lacks them (the object is then not cached)."""
    out = []
    for obj in related:
        if obj is None:
            out.append(None)
            continue
        meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
        uid, rv = meta.get("uid"), meta.get("resourceVersion")
        if not isinstance(uid, str) or not isinstance(rv, str):
            return None
        out.append((uid, rv))
    return tuple(out)


def _reference_record(ref, key, found) -> dict:
    """The record's note on one reference: what it names and whether it was found."""
    if key is None:
        return {"name": ref.name, "apiVersion": None, "kind": None, "namespace": None, "objectName": None,
                "found": False}
    return {"name": ref.name, "apiVersion": key.gvk.api_version, "kind": key.gvk.kind, "namespace": key.namespace,
            "objectName": key.name, "found": found is not None}


DEFAULT_RESOLVER = Resolver()


def resolve(obj: dict, definition: Definition) -> ResolvedWorkload:
    """Resolve one object with the default GPU resource names."""
    return DEFAULT_RESOLVER.resolve(obj, definition)
