"""Definitions: the in-memory model of one Workload Map definition.

A definition arrives as a document of kind ``ResourceInterface``
(optimization.nvidia.com/v1alpha1), ``Karta`` (run.ai/v1alpha1) or our
``WorkloadMap`` (workloadmap.io/v1alpha1); all three share one spec.  Building
the model compiles every jq expression once, so resolving an object never
parses jq again.  Documents are checked by ``validating.py`` before they are
built here; this module assumes a valid document.
"""

from __future__ import annotations

import contextvars
import json
from dataclasses import dataclass, field

from . import jqlang
from .jqlang.parsing import tokenize

DEFINITION_KINDS = {
    ("optimization.nvidia.com/v1alpha1", "ResourceInterface"),
    ("run.ai/v1alpha1", "Karta"),
    ("workloadmap.io/v1alpha1", "WorkloadMap"),
}

# statusMappings keys and the statuses they map to, highest precedence first:
# the resolved status of an object is the first of these that matched.
STATUS_PRECEDENCE = [
    ("failed", "Failed"),
    ("completed", "Completed"),
    ("suspended", "Suspended"),
    ("suspending", "Suspending"),
    ("resuming", "Resuming"),
    ("degraded", "Degraded"),
    ("running", "Running"),
    ("initializing", "Initializing"),
]
UNDEFINED = "Undefined"
STATUSES = [status for _, status in STATUS_PRECEDENCE] + [UNDEFINED]

FRAGMENT_FIELDS = {
    "schedulerNamePath": "schedulerName",
    "labelsPath": "labels",
    "annotationsPath": "annotations",
    "resourcesPath": "resources",
    "resourceClaimsPath": "resourceClaims",
    "podAffinityPath": "podAffinity",
    "nodeAffinityPath": "nodeAffinity",
    "containersPath": "containers",
    "containerPath": "container",
    "priorityClassNamePath": "priorityClassName",
    "imagePath": "image",
}

ORIGINS = ("built-in", "file", "cluster")


@dataclass(frozen=True)
class GVK:
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @classmethod
    def parse(cls, api_version: str, kind: str) -> "GVK":
        group, _, version = api_version.rpartition("/")
        return cls(group, version, kind)

    @classmethod
    def from_dict(cls, d: dict) -> "GVK":
        return cls(d.get("group", ""), d.get("version", ""), d.get("kind", ""))

    def __str__(self):
        # as Kubernetes prints a GroupVersionKind
        return f"{self.api_version}, Kind={self.kind}"


@dataclass(frozen=True)
class Expr:
    """A compiled jq expression and the definition field it came from.

    A `bound` expression uses a reference's variable ($runtime): its program takes
    [object, referenced objects...] and binds them (see bound_source); `text` is what the
    author wrote, shown in messages."""

    field: str
    program: jqlang.Program
    bound: bool = False
    text: str | None = None

    @property
    def source(self) -> str:
        return self.text if self.text is not None else self.program.source


def variables_used(source: str) -> set[str]:
    """The $names an expression reads (string interpolations included), without the $."""
    try:
        tokens, _ = tokenize(source)
    except Exception:  # noqa: BLE001 - not jq: the compiler reports it
        return set()
    out: set[str] = set()

    def walk(toks):
        for tok in toks:
            if tok.kind == "var":
                out.add(tok.value[1:])
            elif tok.kind == "str":
                for part in tok.value:
                    if not isinstance(part, str):
                        walk(part)
    walk(tokens)
    return out


def bound_source(source: str, names) -> str | None:
    """The program evaluating `source` with the references `names` bound, or None when it reads
    none of them: its input is [object, referenced objects...] in the order of `names`, and the
    expression runs on the object, as written (the newline ends a trailing comment)."""
    names = list(names)
    if not names or not variables_used(source) & set(names):
        return None
    binds = "".join(f".[{i + 1}] as ${n} | " for i, n in enumerate(names))
    return f"{binds}.[0] | (\n{source}\n)"


# The reference names of the document being built: every root-evaluated expression that reads one
# is compiled bound (a context variable, as the names are known once per document and _expr is
# called from every builder below).
_REFERENCES: contextvars.ContextVar[tuple] = contextvars.ContextVar("references", default=())


@dataclass(frozen=True)
class ReferenceKind:
    gvk: GVK
    cluster_scoped: bool = False


@dataclass
class Reference:
    """Another object the definition reads, bound as $name (extension; upstream issue #81)."""

    name: str
    kinds: list[ReferenceKind]
    name_selector: Expr
    kind_selector: Expr | None = None
    namespace_selector: Expr | None = None


@dataclass(frozen=True)
class RelatedKey:
    """The object one reference of one workload names."""

    reference: str
    gvk: GVK
    namespace: str | None
    name: str

    def __str__(self):
        return f"{self.gvk.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass
class SpecDefinition:
    pod_template: Expr | None = None
    pod_spec: Expr | None = None
    metadata: Expr | None = None
    fragments: dict[str, Expr] = field(default_factory=dict)  # pod field name -> path
    requests_from: Expr | None = None   # extension: where requests come from when not in the object


@dataclass
class ScaleDefinition:
    replicas: Expr | None = None
    min_replicas: Expr | None = None
    max_replicas: Expr | None = None
    pods_per_replica: Expr | None = None


@dataclass
class ExpectedCondition:
    type: str
    status: str | None = None
    reason: str | None = None


@dataclass
class StatusMatcher:
    phase: str | None = None
    conditions: list[ExpectedCondition] = field(default_factory=list)
    expression: Expr | None = None
    expected_result: str | None = None


@dataclass
class StatusDefinition:
    phase: Expr | None = None
    conditions: Expr | None = None
    type_field: str = "type"
    status_field: str = "status"
    message_field: str = "message"
    reason_field: str = "reason"
    mappings: dict[str, list[StatusMatcher]] = field(default_factory=dict)  # status -> matchers


@dataclass
class SuspendAction:
    path: Expr
    value: object


@dataclass
class SuspendDefinition:
    suspend: list[SuspendAction]
    resume: list[SuspendAction]


@dataclass
class PodSelector:
    type_key: Expr | None = None
    type_value: str | None = None
    match_labels: dict[str, str] = field(default_factory=dict)   # ANDed with type_key
    instance_id: Expr | None = None
    replica_key: Expr | None = None

    @property
    def typed(self) -> bool:
        """Whether it says which pods are of its component (a type selector)."""
        return self.type_key is not None or bool(self.match_labels)


@dataclass
class Component:
    name: str
    kind: GVK | None = None
    owner: str | None = None
    spec: SpecDefinition | None = None
    scale: ScaleDefinition | None = None
    status: StatusDefinition | None = None
    suspend: SuspendDefinition | None = None
    instance_id: Expr | None = None
    selector: PodSelector | None = None
    parent: "Component | None" = None
    children: list["Component"] = field(default_factory=list)

    @property
    def ancestors(self):
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


@dataclass
class GangMember:
    component: str
    group_by: list[Expr] = field(default_factory=list)
    filters: list[Expr] = field(default_factory=list)


@dataclass(frozen=True)
class Topology:
    """A topology constraint handed to a scheduler (KAI's Topology resource and its levels)."""

    name: str
    required_level: str
    preferred_level: str

    def to_dict(self) -> dict:
        return {"topologyName": self.name, "requiredTopologyLevel": self.required_level,
                "preferredTopologyLevel": self.preferred_level}


@dataclass
class SubGroup:
    component: str
    topology: Topology | None = None


@dataclass
class PodGroup:
    """A pod group: `podGroups[]` (members grouped by keys read from the pods; deprecated
    upstream) or `podGroup` (one group of every pod of the workload, `sub_groups` splitting it
    by component; `single` is True)."""

    name: str
    members: list[GangMember]
    single: bool = False
    topology: Topology | None = None
    sub_groups: list[SubGroup] = field(default_factory=list)


@dataclass
class Definition:
    name: str
    origin: str
    source: str
    framework: str
    root: Component
    components: list[Component]          # root first, then parents before children
    additional_child_kinds: list[GVK]
    pod_groups: list[PodGroup]
    document: dict
    references: list[Reference] = field(default_factory=list)

    @property
    def has_pod_group(self) -> bool:
        return any(g.single for g in self.pod_groups)

    @property
    def gvk(self) -> GVK:
        return self.root.kind

    def pod_expressions(self) -> list[Expr]:
        """Every expression evaluated on pods: the pod selectors' and the gang keys and filters."""
        exprs = []
        for comp in self.components:
            sel = comp.selector
            if sel is not None:
                exprs += [sel.type_key, sel.instance_id, sel.replica_key]
        for group in self.pod_groups:
            for member in group.members:
                exprs += member.group_by + member.filters
        return [e for e in exprs if e is not None]

    def subtree(self, name: str) -> set[str]:
        """The names of a component and of its descendants."""
        comp = self.component(name)
        return {comp.name} | {d.name for d in self.components if comp in d.ancestors}

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict:
        """The JSON form of the definition (``catalog list/show -o json``): its kind, origin, and each
        component's parent, kind, where its pod spec is read and its instance id path."""
        components = []
        for c in self.components:
            spec = None
            if c.spec is not None:
                spec = ("podTemplateSpec" if c.spec.pod_template else "podSpec" if c.spec.pod_spec
                        else "fragmented: " + ", ".join(sorted(c.spec.fragments)))
            components.append({
                "name": c.name, "parent": c.parent.name if c.parent else None,
                "kind": str(c.kind) if c.kind else None, "spec": spec,
                "instances": c.instance_id.source if c.instance_id else None,
            })
        return {
            "name": self.name, "apiVersion": self.gvk.api_version, "kind": self.gvk.kind, "framework": self.framework,
            "origin": self.origin, "source": self.source, "components": components,
            "additionalChildKinds": [str(k) for k in self.additional_child_kinds],
            "podGroups": [g.name for g in self.pod_groups],
        }


def _expr(path: str, value) -> Expr | None:
    if value is None:
        return None
    bound = bound_source(value, _REFERENCES.get())
    if bound is not None:
        return Expr(path, jqlang.compile(bound), True, value)
    return Expr(path, jqlang.compile(value))


def _references(structure: dict) -> list[Reference]:
    out = []
    for i, r in enumerate(structure.get("references") or []):
        rp = f"spec.structureDefinition.references[{i}]"
        kinds = [r["kind"]] if r.get("kind") else r.get("kinds") or []

        def selector(key):
            return Expr(f"{rp}.{key}", jqlang.compile(r[key])) if r.get(key) else None
        out.append(Reference(
            name=r["name"],
            kinds=[ReferenceKind(GVK.from_dict(k), bool(k.get("clusterScoped"))) for k in kinds],
            name_selector=selector("nameSelector"),
            kind_selector=selector("kindSelector"),
            namespace_selector=selector("namespaceSelector"),
        ))
    return out


def _component(d: dict, path: str) -> Component:
    comp = Component(name=d["name"], owner=d.get("ownerRef"))
    if d.get("kind"):
        comp.kind = GVK.from_dict(d["kind"])
    comp.instance_id = _expr(f"{path}.instanceIdPath", d.get("instanceIdPath"))
    if (spec := d.get("specDefinition")) is not None:
        sp = f"{path}.specDefinition"
        frag = spec.get("fragmentedPodSpecDefinition") or {}
        comp.spec = SpecDefinition(
            pod_template=_expr(f"{sp}.podTemplateSpecPath", spec.get("podTemplateSpecPath")),
            pod_spec=_expr(f"{sp}.podSpecPath", spec.get("podSpecPath")),
            metadata=_expr(f"{sp}.metadataPath", spec.get("metadataPath")),
            fragments={FRAGMENT_FIELDS[k]: _expr(f"{sp}.fragmentedPodSpecDefinition.{k}", v)
                       for k, v in frag.items() if v is not None},
            requests_from=_expr(f"{sp}.requestsFromPath", spec.get("requestsFromPath")),
        )
    if (scale := d.get("scaleDefinition")) is not None:
        sp = f"{path}.scaleDefinition"
        comp.scale = ScaleDefinition(
            replicas=_expr(f"{sp}.replicasPath", scale.get("replicasPath")),
            min_replicas=_expr(f"{sp}.minReplicasPath", scale.get("minReplicasPath")),
            max_replicas=_expr(f"{sp}.maxReplicasPath", scale.get("maxReplicasPath")),
            pods_per_replica=_expr(f"{sp}.podsPerReplicaPath", scale.get("podsPerReplicaPath")),
        )
    if (status := d.get("statusDefinition")) is not None:
        comp.status = _status(status, f"{path}.statusDefinition")
    if (suspend := d.get("suspendDefinition")) is not None:
        sp = f"{path}.suspendDefinition"
        comp.suspend = SuspendDefinition(
            suspend=[SuspendAction(_expr(f"{sp}.suspendActions[{i}].path", a["path"]), json.loads(a["value"]))
                     for i, a in enumerate(suspend.get("suspendActions") or [])],
            resume=[SuspendAction(_expr(f"{sp}.resumeActions[{i}].path", a["path"]), json.loads(a["value"]))
                    for i, a in enumerate(suspend.get("resumeActions") or [])],
        )
    if (sel := d.get("podSelector")) is not None:
        sp = f"{path}.podSelector"
        ts = sel.get("componentTypeSelector") or {}
        comp.selector = PodSelector(
            type_key=_expr(f"{sp}.componentTypeSelector.keyPath", ts.get("keyPath")),
            type_value=ts.get("value"),
            match_labels=dict(ts.get("matchLabels") or {}),
            instance_id=_expr(f"{sp}.componentInstanceSelector.idPath",
                              (sel.get("componentInstanceSelector") or {}).get("idPath")),
            replica_key=_expr(f"{sp}.replicaSelector.keyPath", (sel.get("replicaSelector") or {}).get("keyPath")),
        )
    return comp


def _status(d: dict, path: str) -> StatusDefinition:
    sd = StatusDefinition()
    if (phase := d.get("phaseDefinition")) is not None:
        sd.phase = _expr(f"{path}.phaseDefinition.path", phase.get("path"))
    if (cond := d.get("conditionsDefinition")) is not None:
        sd.conditions = _expr(f"{path}.conditionsDefinition.path", cond.get("path"))
        # upstream's defaults, applied on load
        sd.type_field = cond.get("typeFieldName") or "type"
        sd.status_field = cond.get("statusFieldName") or "status"
        sd.message_field = cond.get("messageFieldName") or "message"
        sd.reason_field = cond.get("reasonFieldName") or "reason"
    mappings = d.get("statusMappings") or {}
    for key, status in STATUS_PRECEDENCE:
        matchers = []
        for i, m in enumerate(mappings.get(key) or []):
            expr = m.get("byExpression")
            matchers.append(StatusMatcher(
                phase=m.get("byPhase") or None,
                conditions=[ExpectedCondition(c["type"], c.get("status"), c.get("reason"))
                            for c in m.get("byConditions") or []],
                expression=_expr(f"{path}.statusMappings.{key}[{i}].byExpression.expression",
                                 expr["expression"]) if expr else None,
                expected_result=expr["expectedResult"] if expr else None,
            ))
        if matchers:
            sd.mappings[status] = matchers
    return sd


def build_definition(doc: dict, origin: str, source: str) -> Definition:
    """The model of a valid definition document (see validating.load_definition)."""
    spec = doc["spec"]
    structure = spec["structureDefinition"]
    sp = "spec.structureDefinition"
    references = _references(structure)
    token = _REFERENCES.set(tuple(r.name for r in references))
    try:
        root = _component(structure["rootComponent"], f"{sp}.rootComponent")
        children = [_component(c, f"{sp}.childComponents[{i}]")
                    for i, c in enumerate(structure.get("childComponents") or [])]
    finally:
        _REFERENCES.reset(token)
    by_name = {c.name: c for c in [root, *children]}
    for c in children:
        c.parent = by_name[c.owner]
        c.parent.children.append(c)
    ordered, queue = [], [root]
    while queue:
        node = queue.pop(0)
        ordered.append(node)
        queue.extend(node.children)
    gang = (spec.get("optimizationInstructions") or {}).get("gangScheduling") or {}
    groups = []
    gp = "spec.optimizationInstructions.gangScheduling"
    for gi, g in enumerate(gang.get("podGroups") or []):
        groups.append(PodGroup(g["name"], [_member(m, f"{gp}.podGroups[{gi}].members[{mi}]")
                                           for mi, m in enumerate(g.get("members") or [])]))
    if (pg := gang.get("podGroup")) is not None:
        subs = [SubGroup(sg["componentName"], _topology(sg.get("topology"))) for sg in pg.get("subGroups") or []]
        # its members: the sub-groups' components, else the root (every pod of the workload)
        members = [GangMember(sg.component) for sg in subs] or [GangMember(root.name)]
        groups.append(PodGroup(pg["name"], members, single=True, topology=_topology(pg.get("topology")),
                               sub_groups=subs))
    return Definition(
        name=(doc.get("metadata") or {}).get("name") or root.name,
        origin=origin,
        source=source,
        framework=spec.get("framework") or root.kind.kind,
        root=root,
        components=ordered,
        additional_child_kinds=[GVK.from_dict(k) for k in structure.get("additionalChildKinds") or []],
        pod_groups=groups,
        document=doc,
        references=references,
    )


def _topology(d: dict | None) -> Topology | None:
    if d is None:
        return None
    return Topology(d["topologyName"], d["requiredTopologyLevel"], d["preferredTopologyLevel"])


def _member(m: dict, path: str) -> GangMember:
    return GangMember(
        component=m["componentName"],
        group_by=[_expr(f"{path}.groupByKeyPaths[{i}]", p) for i, p in enumerate(m.get("groupByKeyPaths") or [])],
        filters=[_expr(f"{path}.filters[{i}]", p) for i, p in enumerate(m.get("filters") or [])],
    )
