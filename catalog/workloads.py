"""Resolved workloads: the uniform view of one live object, and its JSON contract.

This is what every consumer reads (the CLI, the stream processors, the
warehouse), so its JSON form is the project's record format; README.md
documents it field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .requests import Resources


@dataclass
class ComponentView:
    """One component, or one instance of a multi-instance component."""

    name: str
    instance: str | None
    parent: str | None
    kind: str | None
    replicas: int | None
    min_replicas: int | None
    max_replicas: int | None
    pods_per_replica: int
    pods: int
    per_pod: Resources
    total: Resources
    pod_template: dict | None = None     # reconstructed PodTemplateSpec (metadata + spec)
    status: str | None = None            # when the component has its own statusDefinition
    requests_from: str | None = None     # where requests come from when the object does not hold them

    @property
    def gang_pods(self) -> int:
        """The pods it needs running for a gang that holds all of its replicas: its minimum replicas
        when it has one above 0 and below its replicas (a Ray worker group's minReplicas, an elastic
        PyTorchJob's minimum, as KAI's pod grouper counts them), else all of its pods."""
        if self.min_replicas and self.replicas and self.min_replicas < self.replicas:
            return self.pods * self.min_replicas // self.replicas
        return self.pods

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "instance": self.instance,
            "parent": self.parent,
            "kind": self.kind,
            "replicas": self.replicas,
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "podsPerReplica": self.pods_per_replica,
            "pods": self.pods,
            "perPod": self.per_pod.to_dict(),
            "total": self.total.to_dict(),
        }
        if self.status is not None:
            out["status"] = self.status
        if self.requests_from is not None:
            out["requestsFrom"] = self.requests_from
        spec = (self.pod_template or {}).get("spec") or {}
        if spec.get("schedulerName"):
            out["schedulerName"] = spec["schedulerName"]
        return out


def subtree_minimum(definition, name: str, views_by_name: dict) -> int:
    """The pods a component's subtree needs running: the sum of its views' `gang_pods`, as
    upstream's pod grouper sums the effective minimum replicas of a subtree's components."""
    return sum(view.gang_pods for c in definition.subtree(name) for view in views_by_name.get(c, [])
               if view.pod_template is not None and view.pods)


def pod_group_record(definition, views: list) -> dict | None:
    """The record's `podGroup` (a definition's `gangScheduling.podGroup`): its name, the scheduler's
    topology, and the minimum pods of the group and of each sub-group, from the object alone."""
    pg = next((g for g in definition.pod_groups if g.single), None)
    if pg is None:
        return None
    views_by_name: dict = {}
    for view in views:
        views_by_name.setdefault(view.name, []).append(view)
    subs = [{"name": sg.component, "minMember": subtree_minimum(definition, sg.component, views_by_name),
             "topology": sg.topology.to_dict() if sg.topology else None} for sg in pg.sub_groups]
    minimum = sum(s["minMember"] for s in subs) if subs else subtree_minimum(definition, definition.root.name,
                                                                             views_by_name)
    return {"name": pg.name, "minMember": minimum, "topology": pg.topology.to_dict() if pg.topology else None,
            "subGroups": subs}


@dataclass
class ResolvedWorkload:
    api_version: str
    kind: str
    namespace: str | None
    name: str | None
    uid: str | None
    resource_version: str | None
    generation: int | None
    creation_timestamp: str | None
    definition: str
    origin: str
    framework: str
    status: str
    statuses: list[str]
    phase: str | None
    conditions: list                     # normalised: {type, status, reason, message}
    components: list[ComponentView]
    total: Resources
    pods: int
    labels: dict = field(default_factory=dict)
    pod_group: dict | None = None        # the definition's podGroup, when it has one (pod_group_record)
    references: list | None = None       # what the definition's references named, and whether found

    def to_dict(self) -> dict:
        total = self.total.to_dict()
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "generation": self.generation,
            "creationTimestamp": self.creation_timestamp,
            "definition": self.definition,
            "origin": self.origin,
            "framework": self.framework,
            "status": self.status,
            "statuses": list(self.statuses),
            "phase": self.phase,
            "conditions": list(self.conditions),
            "components": [c.to_dict() for c in self.components],
            "total": {"pods": self.pods, **total},
        } | ({"podGroup": self.pod_group} if self.pod_group is not None else {}) \
          | ({"references": self.references} if self.references is not None else {})


def missing_references(record: dict) -> list[str]:
    """A message per reference of a resolved record whose object was not found."""
    out = []
    for ref in record.get("references") or []:
        if not ref["found"]:
            where = f"{ref['namespace']}/" if ref["namespace"] else ""
            what = f"{ref['kind']} {where}{ref['objectName']} not found" if ref["kind"] else "names no object"
            out.append(f"{record['kind']} {record['namespace'] + '/' if record['namespace'] else ''}{record['name']}: "
                       f"reference ${ref['name']}: {what}: resolved without it")
    return out
