"""Discovering what a cluster serves, and which of it the catalog can read.

Why: a watcher must watch only kinds the cluster serves, at a version it
serves (a CRD may serve v1 only where the definition names v1beta1), and the
live commands accept the names kubectl users type (``pytorchjobs``,
``PyTorchJob``, ``ptj``, ``pytorchjobs.kubeflow.org``).  One request reads
everything through aggregated discovery (``apidiscovery.k8s.io/v2``, GA since
Kubernetes 1.30); older servers get the per-group walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from workloadmap.catalog import Catalog, UnknownKindError

from .clusters import ApiError, Cluster

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"


@dataclass(frozen=True)
class ServedResource:
    group: str
    version: str
    kind: str
    plural: str
    singular: str = ""
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    preferred: bool = True          # the version a bare type name means (see _prefer)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """kubectl's unambiguous name: ``pytorchjobs.kubeflow.org`` (``pods`` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base

    def can(self, *verbs: str) -> bool:
        return all(v in self.verbs for v in verbs)


class AmbiguousTypeError(LookupError):
    pass


@dataclass
class ServedResources:
    """Everything a cluster serves: top-level resources (no subresources), preferred versions first."""

    resources: list[ServedResource] = field(default_factory=list)

    def versions_of(self, group: str, kind: str) -> list[ServedResource]:
        found = [r for r in self.resources if r.group == group and r.kind == kind]
        return sorted(found, key=lambda r: not r.preferred)

    def serves(self, group: str, kind: str) -> bool:
        return bool(self.versions_of(group, kind))

    def for_definition(self, group: str, version: str, kind: str) -> ServedResource | None:
        """The version to read a catalog kind at: the definition's own if served, else the preferred one."""
        served = self.versions_of(group, kind)
        for r in served:
            if r.version == version:
                return r
        return served[0] if served else None

    def lookup(self, text: str) -> list[ServedResource]:
        """Resources a type name may mean (kind, plural, singular or short name, any case,
        optionally qualified ``NAME.GROUP`` or ``NAME.VERSION.GROUP``), preferred versions only."""
        name, _, qualifier = text.strip().partition(".")
        name = name.lower()
        out = []
        for r in self.resources:
            if qualifier:
                if qualifier != r.group and qualifier != f"{r.version}.{r.group}":
                    continue
                if not r.preferred and qualifier == r.group:
                    continue
            elif not r.preferred:
                continue
            if name in (r.kind.lower(), r.plural, r.singular) or name in r.short_names:
                out.append(r)
        return out


def discover(cluster: Cluster) -> ServedResources:
    """What the cluster serves (aggregated discovery, or the legacy per-group walk)."""
    resources: list[ServedResource] = []
    core = cluster.get("/api", accept=AGGREGATED)
    groups = cluster.get("/apis", accept=AGGREGATED)
    if core.get("kind") == "APIGroupDiscoveryList" and groups.get("kind") == "APIGroupDiscoveryList":
        for doc in (core, groups):
            for item in doc.get("items") or []:
                group = (item.get("metadata") or {}).get("name") or ""
                for rank, version in enumerate(item.get("versions") or []):
                    for res in version.get("resources") or []:
                        kind = (res.get("responseKind") or {}).get("kind")
                        if not kind:
                            continue
                        resources.append(ServedResource(
                            group=group, version=version["version"], kind=kind, plural=res["resource"],
                            singular=res.get("singularResource") or kind.lower(),
                            namespaced=res.get("scope") == "Namespaced",
                            short_names=tuple(res.get("shortNames") or ()), verbs=tuple(res.get("verbs") or ()),
                            preferred=rank == 0))
        return ServedResources(_prefer(resources))
    # legacy discovery: one request per group version
    group_versions = [("", v, i == 0) for i, v in enumerate(core.get("versions") or [])]
    for g in groups.get("groups") or []:
        preferred = (g.get("preferredVersion") or {}).get("version")
        for v in g.get("versions") or []:
            group_versions.append((g["name"], v["version"], v["version"] == preferred))
    for group, version, preferred in group_versions:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = cluster.get(path)
        except ApiError as exc:
            if exc.status in (404, 503):  # an aggregated API that is down: skip it, as kubectl does
                continue
            raise
        for res in listing.get("resources") or []:
            if "/" in res.get("name", ""):
                continue
            resources.append(ServedResource(
                group=group, version=version, kind=res["kind"], plural=res["name"],
                singular=res.get("singularName") or res["kind"].lower(), namespaced=bool(res.get("namespaced")),
                short_names=tuple(res.get("shortNames") or ()), verbs=tuple(res.get("verbs") or ()),
                preferred=preferred))
    return ServedResources(_prefer(resources))


def _prefer(resources: list[ServedResource]) -> list[ServedResource]:
    """Each kind read at its group's preferred version or, when that version does not serve it, at
    the first version that does (kubectl's rule): a group's kinds need not share versions
    (serving.kserve.io serves InferenceService at v1beta1, LLMInferenceService at v1alpha2 and
    v1alpha1), and a kind with no preferred version would be unreachable by its bare name."""
    has_preferred = {(r.group, r.kind) for r in resources if r.preferred}
    chosen: set = set()
    out = []
    for r in resources:   # versions in the server's priority order
        key = (r.group, r.kind)
        if key not in has_preferred and key not in chosen:
            chosen.add(key)
            r = replace(r, preferred=True)
        out.append(r)
    return out


def catalog_resources(catalog: Catalog, served: ServedResources) -> list[ServedResource]:
    """One served version of every catalog kind the cluster serves and lets us list and watch."""
    out = {}
    for gvk in catalog.kinds():
        resource = served.for_definition(gvk.group, gvk.version, gvk.kind)
        if resource is not None and resource.can("list", "watch"):
            out.setdefault((resource.group, resource.kind), resource)
    return sorted(out.values(), key=lambda r: (r.group, r.kind))


def resolve_type(text: str, catalog: Catalog, served: ServedResources) -> ServedResource:
    """The served resource a user's type name means, among the kinds the catalog can read."""
    readable = {(r.group, r.kind) for r in catalog_resources(catalog, served)}
    matches = [r for r in served.lookup(text) if (r.group, r.kind) in readable]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(sorted(r.qualified for r in matches))
        raise AmbiguousTypeError(f"type {text!r} is ambiguous: {names} (use the qualified name)")
    others = served.lookup(text)
    if others:
        r = others[0]
        raise UnknownKindError(r.api_version, r.kind, [], f"type {text!r}")
    known = sorted({r.kind for r in served.resources if (r.group, r.kind) in readable})
    raise UnknownKindError("", text, catalog.suggest(text) or known[:8], "")
