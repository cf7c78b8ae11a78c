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

from .definitions import Component, Definition, Expr, PodGroup, Topology
from .jqlang import JqError
from .jqlang.parsing import parse
from .resolving import ResolveError, object_ref
from .statuses import as_text
from .workloads import ResolvedWorkload, subtree_minimum


@dataclass(frozen=True)
class PodMembership:
    component: str
    instance: str | None
    replica: str | None


@dataclass
class GangSubGroup:
    """A component's pods within a `podGroup`, and how many of them the sub-group needs."""

    name: str
    pods: list[str] = field(default_factory=list)
    min_member: int = 0
    topology: Topology | None = None


@dataclass
class GangGroup:
    """Pods that must be scheduled together, and how many the group needs.

    For a `podGroup` definition, `sub_groups` splits it by component: every sub-group must
    reach its own minimum (`min_member` is their sum), and `topology` is the scheduler's
    constraint for the whole group.
    """

    pod_group: str
    key: str
    pods: list[str] = field(default_factory=list)
    min_member: int = 0
    topology: Topology | None = None
    sub_groups: list[GangSubGroup] = field(default_factory=list)


def _first(definition: Definition, expr: Expr, pod):
    try:
        out = expr.program.outputs(pod)
    except JqError as exc:
        raise ResolveError(definition.name, expr.field, object_ref(pod), f"jq expression {expr.source!r} failed: {exc}")
    return out[0] if out else None


def _type_matches(definition: Definition, comp: Component, pod) -> bool:
    sel = comp.selector
    if sel.match_labels:
        labels = (pod.get("metadata") or {}).get("labels")
        if not isinstance(labels, dict) or any(labels.get(k) != v for k, v in sel.match_labels.items()):
            return False
    if sel.type_key is None:
        return True
    value = _first(definition, sel.type_key, pod)
    if sel.type_value is None:
        return value is not None
    return as_text(value) == sel.type_value


def match_pod(definition: Definition, pod: dict) -> PodMembership | None:
    """The component / instance / replica of a pod, or None if no component claims it."""
    typed = [c for c in definition.components if c.selector is not None and c.selector.typed]
    matches = [c for c in typed if _type_matches(definition, c, pod)]
    if matches:
        comp = max(matches, key=lambda c: (len(list(c.ancestors)), -definition.components.index(c)))
    else:
        untyped = [c for c in definition.components
                   if c.spec is not None and (c.selector is None or not c.selector.typed)]
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


def _owner_key(pod) -> str:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return f"{refs[0].get('kind')}/{refs[0].get('name')}" if refs else "<no owner>"


def gang_groups(definition: Definition, workload: ResolvedWorkload, pods: list[dict]) -> list[GangGroup]:
    """The pod groups the definition's gang-scheduling instructions form from these pods.

    Pods of member components (or their descendants) that pass the member's
    filters are grouped by the values of its group-by paths.  Each group's
    minimum is counted per gang key (see `_Gang`): the pods each member view
    (component instance) is expected to run, divided by the replicas of every
    replica selector whose key the group-by paths read (one gang per replica),
    times the replicas of the other replica levels above it that the gang
    holds (Grove's base PodGang holds the first minAvailable PCSG replicas).
    """
    groups: list[GangGroup] = []
    views_by_name: dict[str, list] = {}
    for view in workload.components:
        views_by_name.setdefault(view.name, []).append(view)
    memberships = [(pod, match_pod(definition, pod)) for pod in pods]
    for pg in definition.pod_groups:
        if pg.single:
            groups.append(_single_group(definition, pg, workload, views_by_name, memberships))
            continue
        gang = _Gang(definition, pg, views_by_name)
        for pod, membership in memberships:
            if membership is not None:
                gang.add(pod, membership)
        groups.extend(gang.groups())
    return groups


def _single_group(definition: Definition, pg: PodGroup, workload: ResolvedWorkload, views_by_name: dict,
                  memberships: list) -> GangGroup:
    """A `podGroup`: one group of the workload's pods (one per workload, as upstream names it
    after the object); with sub-groups, one per named component holding its subtree's pods,
    each needing its subtree's minimum, and the group all of them."""
    group = GangGroup(pg.name, workload.name or "", topology=pg.topology)
    if not pg.sub_groups:
        members = definition.subtree(definition.root.name)
        group.pods = [_pod_name(pod) for pod, m in memberships if m is not None and m.component in members]
        group.min_member = subtree_minimum(definition, definition.root.name, views_by_name)
        return group
    for sg in pg.sub_groups:
        members = definition.subtree(sg.component)
        pods = [_pod_name(pod) for pod, m in memberships if m is not None and m.component in members]
        group.sub_groups.append(GangSubGroup(sg.component, pods, subtree_minimum(definition, sg.component,
                                                                                  views_by_name), sg.topology))
        group.pods += [p for p in pods if p not in group.pods]
    group.min_member = sum(sub.min_member for sub in group.sub_groups)
    return group


def _pod_name(pod) -> str:
    return (pod.get("metadata") or {}).get("name", "<unnamed>")


def _contains(node, target) -> bool:
    if node == target:
        return True
    if isinstance(node, tuple):
        return any(_contains(child, target) for child in node)
    return False


def _key_read(source: str):
    """The parsed key a replica selector reads: `.labels["k"] // "0"` reads the same key as `.labels["k"]`."""
    node = parse(source)
    while node[0] == "alt":
        node = node[1]
    return node


def _reads(expr: Expr, replica_key: Expr) -> bool:
    """Whether an expression reads a replica selector's key (anywhere in it, maybe with a default).

    Decided on the parsed expressions, not on values: label values such as "0"
    coincide across unrelated keys.
    """
    return _contains(parse(expr.source), _key_read(replica_key.source))


def _reads_replica_key(group_by: list[Expr], replica_key: Expr) -> bool:
    return any(_reads(expr, replica_key) for expr in group_by)


def _replica_levels(comp: Component) -> list[Component]:
    """The components with a replica selector from this one up to the root, one per key read."""
    levels, seen = [], set()
    for c in (comp, *comp.ancestors):
        if c.selector is not None and c.selector.replica_key is not None:
            key = _key_read(c.selector.replica_key.source)
            if key not in seen:
                seen.add(key)
                levels.append(c)
    return levels


_WILDCARD = object()


class _Gang:
    """One pod group of a definition: its pods grouped per key, and each key's minimum."""

    def __init__(self, definition: Definition, pg, views_by_name: dict):
        self.definition = definition
        self.pg = pg
        self.views_by_name = views_by_name
        self.members = {m.component: m for m in pg.members}
        self.keys: dict[tuple, GangGroup] = {}
        self.parts: dict[tuple, tuple] = {}          # key -> its parts
        self.view_pods: dict[tuple, list] = {}       # (component, instance) -> [(key, pod)]
        self.created: set[tuple] = set()             # (component, instance) of every member pod

    def _member(self, component: str):
        member = self.members.get(component)
        if member is None:
            # a member may name an ancestor: its descendants' pods belong to it
            comp = self.definition.component(component)
            member = next((self.members[a.name] for a in comp.ancestors if a.name in self.members), None)
        return member

    def _passes(self, member, pod) -> bool:
        return all(as_text(_first(self.definition, f, pod)) not in (None, "false") for f in member.filters)

    def add(self, pod, membership: PodMembership):
        member = self._member(membership.component)
        if member is None:
            return
        self.created.add((membership.component, membership.instance))
        if not self._passes(member, pod):
            return
        parts = []
        for expr in member.group_by:
            value = _first(self.definition, expr, pod)
            if value is None or value == "":
                raise ResolveError(self.definition.name, expr.field, object_ref(pod),
                                   f"group-by key {expr.source!r} is empty for this pod")
            parts.append(as_text(value))
        if not member.group_by:
            parts.append(_owner_key(pod))
        parts = tuple(parts)
        group = self.keys.get(parts)
        if group is None:
            group = self.keys[parts] = GangGroup(self.pg.name, "/".join(parts))
        group.pods.append(_pod_name(pod))
        self.view_pods.setdefault((membership.component, membership.instance), []).append((parts, pod))

    def groups(self) -> list[GangGroup]:
        views = self._member_views()
        for parts, group in self.keys.items():
            group.min_member = sum(self._share(comp, member, view, parts) for comp, member, view in views)
        return list(self.keys.values())

    def _member_views(self):
        out = []
        for member in self.pg.members:
            comp = self.definition.component(member.component)
            for c in [comp] + [d for d in self.definition.components if comp in d.ancestors]:
                for view in self.views_by_name.get(c.name, []):
                    if view.pod_template is not None and view.pods:
                        out.append((c, member, view))
        return out

    def _wildcarded(self, comp: Component, member, parts: tuple) -> tuple:
        replica_keys = [c.selector.replica_key for c in _replica_levels(comp)]
        if not member.group_by:
            return parts
        return tuple(_WILDCARD if any(_reads(expr, k) for k in replica_keys) else part
                     for expr, part in zip(member.group_by, parts))

    def _exemplar_parts(self, member, view) -> tuple | None:
        """The key parts of a view none of whose pods is in this gang, from its template: None when
        its filters fail there; a part reading a replica key, or empty on the template (a label the
        controller adds), matches any key."""
        pseudo_pod = {"apiVersion": "v1", "kind": "Pod", **view.pod_template}
        if not self._passes(member, pseudo_pod):
            return None
        comp = self.definition.component(view.name)
        replica_keys = [c.selector.replica_key for c in _replica_levels(comp)]
        parts = []
        for expr in member.group_by:
            value = _first(self.definition, expr, pseudo_pod)
            if value is None or value == "" or any(_reads(expr, k) for k in replica_keys):
                parts.append(_WILDCARD)
            else:
                parts.append(as_text(value))
        if not member.group_by:
            parts.append(_WILDCARD)
        return tuple(parts)

    def _share(self, comp: Component, member, view, parts: tuple) -> int:
        seen = self.view_pods.get((view.name, view.instance)) or []
        in_key = [pod for key, pod in seen if key == parts]
        if not in_key:
            # none of its pods in this gang (yet): it belongs here when its key, with the parts
            # that read a replica key as wildcards, is this one
            if seen:
                exemplar = self._wildcarded(comp, member, seen[0][0])
            elif (view.name, view.instance) in self.created:
                return 0    # its pods exist, and the filters leave them out of this pod group
            else:
                exemplar = self._exemplar_parts(member, view)
            if exemplar is None or len(exemplar) != len(parts) or not all(
                    e is _WILDCARD or e == p for e, p in zip(exemplar, parts)):
                return 0
        levels = _replica_levels(comp)
        split = any(_reads_replica_key(member.group_by, level.selector.replica_key) for level in levels)
        pods = view.pods if split else view.gang_pods
        exemplar = in_key[0] if in_key else (seen[0][1] if seen else None)
        for level in levels:
            replicas = self._level_replicas(level, view if level is comp else None, exemplar)
            if _reads_replica_key(member.group_by, level.selector.replica_key):
                pods = pods / replicas                      # one gang per replica of this level
            elif level is not comp and in_key:
                # a level above the view the gang does not split by: the gang holds the replicas
                # of it its pods show (Grove's base PodGang: the first minAvailable PCSG replicas)
                held = {as_text(_first(self.definition, level.selector.replica_key, pod)) for pod in in_key}
                held.discard(None)
                if held and len(held) < replicas:
                    pods = pods * len(held) / replicas
        return int(round(pods))

    def _level_replicas(self, level: Component, view, pod) -> int:
        """The replicas of a replica level: of the view itself, or of the instance of an ancestor
        the pod belongs to (a Grove clique's scaling group), else the most of its instances."""
        if view is not None:
            return max(view.replicas if view.replicas is not None else 1, 1)
        views = self.views_by_name.get(level.name, [])
        if len(views) > 1 and pod is not None and level.selector.instance_id is not None:
            instance = as_text(_first(self.definition, level.selector.instance_id, pod))
            views = [v for v in views if v.instance == instance] or views
        return max([max(v.replicas if v.replicas is not None else 1, 1) for v in views], default=1)
