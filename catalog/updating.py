"""Updating the pod specs of a workload at the paths its definition reads.

A scheduler that adopts a workload sets its scheduler name, labels or
annotations on every pod template of chosen components and instances; a
queue suspends and resumes it.  Writes go through the same jq paths the
definition reads, merge into existing maps, never write null for a field the
caller left unset, and return a changed copy: the input object is untouched.
"""

from __future__ import annotations

import copy

from .definitions import Component, Definition, Expr
from .jqlang import JqError
from .jqlang.pathing import assignable_paths
from .jqlang.values import tostring
from .resolving import object_ref

# pod field -> (place in a PodTemplateSpec, merge maps?)
_TEMPLATE_PLACES = {
    "schedulerName": (("spec", "schedulerName"), False),
    "priorityClassName": (("spec", "priorityClassName"), False),
    "labels": (("metadata", "labels"), True),
    "annotations": (("metadata", "annotations"), True),
    "nodeAffinity": (("spec", "affinity", "nodeAffinity"), False),
    "podAffinity": (("spec", "affinity", "podAffinity"), False),
    "resourceClaims": (("spec", "resourceClaims"), False),
}


class UpdateError(ValueError):
    """A change cannot be written (no path for it, or the path is not assignable)."""


def _paths(definition: Definition, obj, expr: Expr) -> list:
    try:
        return [p for p, _ in assignable_paths(expr.source, obj)]
    except JqError as exc:
        raise UpdateError(f"{object_ref(obj)}: definition {definition.name!r}: {expr.field}: "
                          f"cannot write through {expr.source!r}: {exc}") from None


def _set(obj, path, value, merge: bool):
    node = obj
    for i, key in enumerate(path[:-1]):
        nxt = node[key] if isinstance(node, list) else node.get(key)
        if nxt is None:
            if isinstance(node, list):
                raise UpdateError(f"path {list(path)} crosses a missing array element")
            nxt = node[key] = [] if isinstance(path[i + 1], int) else {}
        node = nxt
    last = path[-1]
    if merge:
        current = node[last] if isinstance(node, list) else node.get(last)
        merged = dict(current) if isinstance(current, dict) else {}
        merged.update(value)
        value = merged
    node[last] = copy.deepcopy(value)


def _instance_ids(definition, comp: Component, obj) -> list:
    if comp.instance_id is None:
        return [None]
    try:
        # the same text the resolver reports as the instance (jq tostring: true, 1, {"a":1})
        return [v if isinstance(v, str) else tostring(v) for v in comp.instance_id.program.outputs(obj)]
    except JqError as exc:
        raise UpdateError(f"{object_ref(obj)}: definition {definition.name!r}: {comp.instance_id.field}: {exc}") from None


def update_pod_specs(definition: Definition, obj: dict, changes: dict, *,
                     components: list[str] | None = None, instances: list[str] | None = None) -> dict:
    """A copy of `obj` with `changes` (pod field -> value) written to chosen pod templates.

    Fields: schedulerName, priorityClassName, labels, annotations (merged),
    nodeAffinity, podAffinity, resourceClaims.  None values are skipped.
    """
    unknown = set(changes) - set(_TEMPLATE_PLACES)
    if unknown:
        raise UpdateError(f"cannot update {', '.join(sorted(unknown))}; known fields: {', '.join(_TEMPLATE_PLACES)}")
    changes = {k: v for k, v in changes.items() if v is not None}
    out = copy.deepcopy(obj)
    for comp in definition.components:
        if comp.spec is None or (components is not None and comp.name not in components):
            continue
        ids = _instance_ids(definition, comp, obj)
        chosen = [i for i, iid in enumerate(ids) if instances is None or iid in instances]
        if not chosen:
            continue
        for field, value in changes.items():
            place, merge = _TEMPLATE_PLACES[field]
            for base, suffix in _bases(definition, comp, obj, field, place):
                if len(base) not in (len(ids), 1):
                    raise UpdateError(f"{object_ref(obj)}: definition {definition.name!r}: component {comp.name!r}: "
                                      f"{len(base)} paths for {len(ids)} instances")
                targets = {tuple(base[0])} if len(base) == 1 else {tuple(base[i]) for i in chosen}
                for path in sorted(targets, key=str):
                    _set(out, (*path, *suffix), value, merge)
    return out


def _bases(definition, comp: Component, obj, field, place):
    """[(paths per instance, suffix)] where a pod field lives for this component."""
    spec = comp.spec
    if spec.pod_template is not None:
        return [(_paths(definition, obj, spec.pod_template), place)]
    if spec.pod_spec is not None:
        if place[0] == "spec":
            return [(_paths(definition, obj, spec.pod_spec), place[1:])]
        if spec.metadata is None:
            raise UpdateError(f"definition {definition.name!r}: component {comp.name!r} has no metadataPath for {field}")
        return [(_paths(definition, obj, spec.metadata), place[1:])]
    expr = spec.fragments.get(field)
    if expr is None:
        raise UpdateError(f"definition {definition.name!r}: component {comp.name!r} has no path for {field}")
    return [(_paths(definition, obj, expr), ())]


def _apply_actions(definition: Definition, obj: dict, which: str) -> dict:
    suspend = definition.root.suspend
    if suspend is None:
        raise UpdateError(f"definition {definition.name!r}: the root component has no suspendDefinition")
    out = copy.deepcopy(obj)
    for action in getattr(suspend, which):
        paths = _paths(definition, obj, action.path)
        if not paths:
            raise UpdateError(f"definition {definition.name!r}: {action.path.field}: {action.path.source!r} addresses nothing")
        for path in paths:
            _set(out, path, action.value, merge=False)
    return out


def suspend(definition: Definition, obj: dict) -> dict:
    """A copy of `obj` with the definition's suspend actions applied."""
    return _apply_actions(definition, obj, "suspend")


def resume(definition: Definition, obj: dict) -> dict:
    """A copy of `obj` with the definition's resume actions applied."""
    return _apply_actions(definition, obj, "resume")
