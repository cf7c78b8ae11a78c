"""The read-only RBAC workloadmap needs: a ClusterRole and its binding to a service account.

Why it is computed and not a static manifest: what workloadmap reads depends on
the catalog (built-ins, definition files, definitions applied to the cluster),
and a role granting more than that is a role nobody can audit.  So the rules
are exactly: get/list/watch on every catalog kind, on the kinds their
definitions name as child components or list in ``additionalChildKinds`` (the
owner kinds pods' controller chains pass through:
``catalog.attributing.owner_kinds``), on pods, on nodes (what the clusters
have: allocatable GPUs, cordons) and on our own ``workloadmaps.workloadmap.io``
definitions; nothing else, and no other verb.

Sensitive kinds are NEVER granted, even when a definition lists them in
``additionalChildKinds``: Secrets and ConfigMaps (``DENIED_KINDS``, plus any
explicit ``deny`` set).  Their contents are credentials and configuration that
workloadmap never reads, and a definition (possibly applied to the cluster by
someone else) must not be able to widen what a reader may see.  The role's
YAML says so in a comment, naming what was left out.

Resource names are the plural names the cluster serves when discovery is
given, else kubectl's guess from the kind (see ``guess_plural``).  Both the
`rbac` command and the watcher's end-to-end tests build the role here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from workloadmap.catalog import Catalog
from workloadmap.catalog.definitions import GVK

READ_VERBS = ("get", "list", "watch")
DENIED_KINDS = frozenset({("", "Secret"), ("", "ConfigMap")})
POD = GVK("", "v1", "Pod")
NODE = GVK("", "v1", "Node")
DEFINITION_KIND = GVK("workloadmap.io", "v1alpha1", "WorkloadMap")
DEFAULT_ROLE_NAME = "workloadmap-reader"


def guess_plural(kind: str) -> str:
    """kubectl's guess of a resource name: lower-case kind; +es after s/x/z/ch/sh,
    consonant + y → ies, else +s (``Milvus`` → ``milvuses``, ``NetworkPolicy`` → ``networkpolicies``)."""
    name = kind.lower()
    if name.endswith(("s", "x", "z", "ch", "sh")):
        return name + "es"
    if name.endswith("y") and len(name) > 1 and name[-2] not in "aeiou":
        return name[:-1] + "ies"
    return name + "s"


def readable_kinds(catalog: Catalog) -> list[GVK]:
    """Every kind workloadmap reads through this catalog: the catalog kinds, their child components'
    kinds and additionalChildKinds, the kinds their references may name (a TrainJob's runtimes), pods,
    nodes and WorkloadMap definitions (sensitive kinds included; see `role_rules`)."""
    kinds = {POD, NODE, DEFINITION_KIND}
    for definition in catalog:
        kinds.add(definition.gvk)
        kinds.update(c.kind for c in definition.components[1:] if c.kind is not None)
        kinds.update(definition.additional_child_kinds)
        kinds.update(k.gvk for r in definition.references for k in r.kinds)
    return sorted(kinds, key=lambda k: (k.group, k.kind, k.version))


@dataclass
class RoleRules:
    rules: list[dict]                                 # RBAC PolicyRules, one per API group, sorted
    denied: list[str] = field(default_factory=list)   # "secrets", "configmaps": listed by a definition, not granted


def role_rules(catalog: Catalog, served=None, deny=()) -> RoleRules:
    """The rules of the reader role: get/list/watch per API group on the readable kinds.

    `served` (``discovering.ServedResources``) gives the cluster's plural names;
    `deny` adds (group, kind) pairs to ``DENIED_KINDS``.
    """
    denied_kinds = DENIED_KINDS | {tuple(d) for d in deny}
    per_group: dict[str, set[str]] = {}
    denied: set[str] = set()
    for gvk in readable_kinds(catalog):
        plural = _plural(gvk, served)
        if (gvk.group, gvk.kind) in denied_kinds:
            denied.add(f"{plural}.{gvk.group}" if gvk.group else plural)
            continue
        per_group.setdefault(gvk.group, set()).add(plural)
    rules = [{"apiGroups": [group], "resources": sorted(plurals), "verbs": list(READ_VERBS)}
             for group, plurals in sorted(per_group.items())]
    return RoleRules(rules, sorted(denied))


def _plural(gvk: GVK, served) -> str:
    if served is not None:
        found = served.versions_of(gvk.group, gvk.kind)
        if found:
            return found[0].plural
    return guess_plural(gvk.kind)


def parse_service_account(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` → (namespace, name); ValueError otherwise."""
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"service account {text!r}: expected NAMESPACE/NAME")
    return namespace, name


@dataclass
class Rbac:
    role: dict
    binding: dict
    denied: list[str]

    @property
    def items(self) -> list[dict]:
        return [self.role, self.binding]

    def to_yaml(self) -> str:
        """Both objects as a multi-document YAML, with a comment on what is never granted."""
        lines = ["# workloadmap: read-only access (get, list, watch) to the catalog kinds, their child",
                 "# kinds (components, additionalChildKinds), pods, nodes and WorkloadMap definitions;",
                 "# nothing else.",
                 "# Never granted, even when a definition lists them: Secrets and ConfigMaps"
                 " (sensitive kinds)."]
        if self.denied:
            lines.append(f"# Left out here although listed by a definition: {', '.join(self.denied)}.")
        docs = [yaml.safe_dump(doc, sort_keys=False, default_flow_style=None) for doc in self.items]
        return "\n".join(lines) + "\n" + "---\n".join(docs)


def reader_rbac(catalog: Catalog, service_account: str, name: str = DEFAULT_ROLE_NAME, served=None,
                deny=()) -> Rbac:
    """The ClusterRole `name` and a ClusterRoleBinding (same name) for ``NAMESPACE/NAME``."""
    namespace, account = parse_service_account(service_account)
    rules = role_rules(catalog, served, deny)
    labels = {"app.kubernetes.io/name": "workloadmap", "app.kubernetes.io/component": "reader"}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels},
        "rules": rules.rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    return Rbac(role, binding, rules.denied)
