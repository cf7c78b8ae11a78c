"""Pods of a workload: which component, instance and replica a pod belongs to,
and the gang-scheduling pod groups they form.

Selectors and gang paths are evaluated on Pod manifests, never on the
workload.  A pod belongs to the deepest component whose type selector
matches it; when no type selector matches, to the one pod-bearing component
that has no type selector (a Deployment's pods, a JobSet's replicated jobs).
Its replica key comes from the nearest replica selector on the way to the
root, because descendants inherit the replica of their ancestor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .definitions import Component, Definition, Expr
from .jqlang import JqError
from .jqlang.parsing import parse
from .resolving import ResolveError, object_ref
from .statuses import as_text
from .workloads import ResolvedWorkload


@dataclass(frozen=True)
class PodMembership:
    component: str
    instance: str | None
    replica: str | None


@dataclass
class GangGroup:
    """Pods that must be scheduled together, and how many the group needs."""

    pod_group: str
    key: str
    pods: list[str] = field(default_factory=list)
    min_member: int = 0


def _first(definition: Definition, expr: Expr, pod):
    try:
        out = expr.program.outputs(pod)
    except JqError as exc:
        raise ResolveError(definition.name, expr.field, object_ref(pod), f"jq expression {expr.source!r} failed: {exc}")
    return out[0] if out else None


def _type_matches(definition: Definition, comp: Component, pod) -> bool:
    sel = comp.selector
    value = _first(definition, sel.type_key, pod)
    if sel.type_value is None:
        return value is not None
    return as_text(value) == sel.type_value


def match_pod(definition: Definition, pod: dict) -> PodMembership | None:
    """The component / instance / replica of a pod, or None if no component claims it."""
    typed = [c for c in definition.components if c.selector is not None and c.selector.type_key is not None]
    matches = [c for c in typed if _type_matches(definition, c, pod)]
    if matches:
        comp = max(matches, key=lambda c: (len(list(c.ancestors)), -definition.components.index(c)))
    else:
        untyped = [c for c in definition.components
                   if c.spec is not None and (c.selector is None or c.selector.type_key is None)]
        if len(untyped) != 1:
            return None
        comp = untyped[0]
    instance = None
    if comp.selector is not None and comp.selector.instance_id is not None:
        instance = as_text(_first(definition, comp.selector.instance_id, pod))
    replica = None
    for c in (comp, *comp.ancestors):
        if c.selector is not None and c.selector.replica_key is not None:
            replica = as_text(_first(definition, c.selector.replica_key, pod))
            break
    return PodMembership(comp.name, instance, replica)


def _replica_component(comp: Component) -> Component | None:
    for c in (comp, *comp.ancestors):
        if c.selector is not None and c.selector.replica_key is not None:
            return c
    return None


def _owner_key(pod) -> str:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return f"{refs[0].get('kind')}/{refs[0].get('name')}" if refs else "<no owner>"


def gang_groups(definition: Definition, workload: ResolvedWorkload, pods: list[dict]) -> list[GangGroup]:
    """The pod groups the definition's gang-scheduling instructions form from these pods.

    A group's minimum member count is the pods its member components are
    expected to run (from the resolved workload, templates filtered like pods),
    divided by the component's replica count when the group keys split pods
    per replica (a group-by path reads the replica selector's key, as with
    LeaderWorkerSet groups).
    """
    groups: dict[tuple[str, str], GangGroup] = {}
    by_component = {}
    for view in workload.components:
        by_component.setdefault(view.name, []).append(view)
    for pg in definition.pod_groups:
        members = {m.component: m for m in pg.members}
        for pod in pods:
            membership = match_pod(definition, pod)
            if membership is None:
                continue
            member = members.get(membership.component)
            if member is None:
                # a member may name an ancestor: its descendants' pods belong to it
                comp = definition.component(membership.component)
                member = next((members[a.name] for a in comp.ancestors if a.name in members), None)
                if member is None:
                    continue
            if not all(as_text(_first(definition, f, pod)) not in (None, "false") for f in member.filters):
                continue
            parts = []
            for expr in member.group_by:
                value = _first(definition, expr, pod)
                if value is None or value == "":
                    raise ResolveError(definition.name, expr.field, object_ref(pod),
                                       f"group-by key {expr.source!r} is empty for this pod")
                parts.append(as_text(value))
            if not member.group_by:
                parts.append(_owner_key(pod))
            key = "/".join(parts)
            group = groups.get((pg.name, key))
            if group is None:
                group = groups[(pg.name, key)] = GangGroup(pg.name, key)
                group.min_member = _expected_members(definition, pg, by_component)
            group.pods.append((pod.get("metadata") or {}).get("name", "<unnamed>"))
    return list(groups.values())


def _reads_replica_key(group_by: list[Expr], replica_key: Expr) -> bool:
    """Whether a group-by path reads the replica selector's key (maybe with a `// default`).

    Decided on the parsed expressions, not on values: label values such as "0"
    coincide across unrelated keys.
    """
    def key_read(source):
        node = parse(source)
        while node[0] == "alt":  # `.labels["k"] // "0"` reads the same key as `.labels["k"]`
            node = node[1]
        return node

    target = key_read(replica_key.source)
    return any(key_read(expr.source) == target for expr in group_by)


def _expected_members(definition, pg, by_component) -> int:
    total = 0
    for member in pg.members:
        comp = definition.component(member.component)
        comps = [comp] + [c for c in definition.components if comp in c.ancestors]
        for c in comps:
            for view in by_component.get(c.name, []):
                if view.pod_template is None:
                    continue
                pseudo_pod = {"apiVersion": "v1", "kind": "Pod", **view.pod_template}
                if not all(as_text(_first(definition, f, pseudo_pod)) not in (None, "false") for f in member.filters):
                    continue
                pods = view.pods
                rc = _replica_component(c)
                if rc is not None and _reads_replica_key(member.group_by, rc.selector.replica_key):
                    groups = max((v.replicas or 1) for v in by_component.get(rc.name, []))
                    pods = pods // max(groups, 1)
                total += pods
    return total
