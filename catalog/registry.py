"""The catalog: definitions indexed by the kind they describe.

Built-in definitions ship with the package; files add to them; definitions
applied to a cluster override both for the same kind.  Look-up is by API
group and kind; a definition written for one version of a kind serves the
others when no definition names that exact version (CRD versions of one kind
usually share their shape), and the exact version always wins.
"""

from __future__ import annotations

import difflib
from importlib import resources

from .definitions import GVK, Definition
from .resolving import DEFAULT_RESOLVER, Resolver, object_ref
from .validating import DefinitionError, Problem, load_definition, read_documents

_ORIGIN_RANK = {"built-in": 0, "file": 1, "cluster": 2}


def bundled_examples() -> list[dict]:
    """Every bundled example object (catalog/examples/*.yaml), in file order: demos, tests, benchmarks."""
    folder = resources.files("workloadmap.catalog").joinpath("examples")
    out = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            out.extend(d for d in read_documents(entry.read_text(encoding="utf-8"), f"example:{entry.name}") if d)
    return out


def bundled_related() -> list[dict]:
    """The objects the bundled examples' references name (catalog/examples/related/*.yaml): the
    TrainJob examples' runtimes."""
    folder = resources.files("workloadmap.catalog").joinpath("examples").joinpath("related")
    out = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            out.extend(d for d in read_documents(entry.read_text(encoding="utf-8"), f"related:{entry.name}") if d)
    return out


class UnknownKindError(LookupError):
    """No definition describes an object's kind."""

    def __init__(self, api_version: str, kind: str, suggestions: list[str], obj_ref: str = ""):
        self.api_version = api_version
        self.kind = kind
        self.suggestions = suggestions
        hint = f"; closest known kinds: {', '.join(suggestions)}" if suggestions else ""
        where = f"{obj_ref}: " if obj_ref else ""
        super().__init__(f"{where}no definition for kind {kind!r} ({api_version}){hint}")


class Catalog:
    """Definitions by kind, the resolver, and `lookup`: where the objects a definition's references
    name are found (a callable RelatedKey -> object or None; an ObjectIndex of objects at hand, a
    live cluster, the processors' state), used when resolve is given none."""

    def __init__(self, definitions=(), resolver: Resolver = DEFAULT_RESOLVER, lookup=None):
        self.resolver = resolver
        self.lookup = lookup
        self._referenced = None
        self._found: dict[tuple[str, str], Definition] = {}
        self._by_name: dict[str, Definition] = {}
        self._by_kind: dict[tuple[str, str], list[Definition]] = {}
        for d in definitions:
            self.add(d)
        if isinstance(definitions, Catalog) and lookup is None:
            self.lookup = definitions.lookup

    # -- building -----------------------------------------------------------
    @staticmethod
    def builtin_kinds() -> list[tuple[str, str]]:
        """(group, kind) of the built-in definitions' root kinds, read from their YAML without
        compiling a definition: what shell completion offers, where compiling every jq
        expression of the catalog would cost seconds the shell waits for."""
        kinds = set()
        folder = resources.files("workloadmap.catalog").joinpath("builtin")
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".yaml"):
                for doc in read_documents(entry.read_text(encoding="utf-8"), f"built-in:{entry.name}"):
                    root = ((doc.get("spec") or {}).get("structureDefinition") or {}).get("rootComponent") or {}
                    kind = root.get("kind") or {}
                    if kind.get("kind"):
                        kinds.add((kind.get("group") or "", kind["kind"]))
        return sorted(kinds)

    @classmethod
    def builtin(cls, resolver: Resolver = DEFAULT_RESOLVER, lookup=None) -> "Catalog":
        catalog = cls(resolver=resolver, lookup=lookup)
        folder = resources.files("workloadmap.catalog").joinpath("builtin")
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".yaml"):
                source = f"built-in:{entry.name}"
                for doc in read_documents(entry.read_text(encoding="utf-8"), source):
                    catalog.add(load_definition(doc, "built-in", source))
        return catalog

    def add(self, definition: Definition) -> None:
        """Add a definition; a later one of equal or higher origin (built-in < file < cluster)
        replaces the one of the same name and the one for the same kind and version.

        A name is a definition's identity, as an object's name is in Kubernetes: a file's or a
        cluster's `job` replaces the built-in `job` even for another kind, and the built-in
        Job is then no longer resolved.  So what `catalog list` shows is exactly what resolves."""
        key = (definition.gvk.group, definition.gvk.kind)
        existing = self._by_kind.setdefault(key, [])
        replaced = [old for old in existing if old.gvk.version == definition.gvk.version]
        named = self._by_name.get(definition.name)
        if named is not None and named not in replaced:
            replaced.append(named)
        if any(_ORIGIN_RANK[old.origin] > _ORIGIN_RANK[definition.origin] for old in replaced):
            return
        for old in replaced:
            kinds = self._by_kind[(old.gvk.group, old.gvk.kind)]
            kinds.remove(old)
            if not kinds:
                del self._by_kind[(old.gvk.group, old.gvk.kind)]
            if self._by_name.get(old.name) is old:
                del self._by_name[old.name]
        self._by_kind.setdefault(key, []).append(definition)
        self._by_name[definition.name] = definition
        self._referenced = None
        self._found = {}   # a new dict: a find running meanwhile fills the old one

    def add_file(self, path: str, origin: str = "file") -> list[Definition]:
        with open(path, encoding="utf-8") as fh:
            docs = read_documents(fh.read(), path)
        problems: list[Problem] = []
        loaded = []
        for doc in docs:
            try:
                loaded.append(load_definition(doc, origin, path))
            except DefinitionError as exc:
                problems.extend(exc.problems)
        if problems:
            raise DefinitionError(problems)
        for d in loaded:
            self.add(d)
        return loaded

    # -- reading ------------------------------------------------------------
    def __iter__(self):
        return iter(sorted(self._by_name.values(), key=lambda d: d.name))

    def __len__(self):
        return len(self._by_name)

    def get(self, name: str) -> Definition:
        try:
            return self._by_name[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._by_name), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"no definition named {name!r}{hint}") from None

    def kinds(self) -> list[GVK]:
        return sorted({d.gvk for d in self._by_name.values()}, key=str)

    FOUND_KEPT = 4096   # (apiVersion, kind) pairs whose definition is remembered

    def find(self, api_version: str, kind: str) -> Definition:
        """The definition of objects of `api_version` and `kind` (remembered per pair until a
        definition is added: asked once per object at every stage)."""
        found = self._found
        definition = found.get((api_version, kind))
        if definition is None:
            definition = self._find(api_version, kind)
            if len(found) < self.FOUND_KEPT:
                found[api_version, kind] = definition
        return definition

    def _find(self, api_version: str, kind: str) -> Definition:
        group, _, version = (api_version or "").rpartition("/")
        candidates = self._by_kind.get((group, kind))
        if not candidates:
            raise UnknownKindError(api_version, kind, self.suggest(kind))
        for d in candidates:
            if d.gvk.version == version:
                return d
        return max(candidates, key=lambda d: _ORIGIN_RANK[d.origin])

    def suggest(self, kind: str) -> list[str]:
        known = {}
        for (group, k), defs in self._by_kind.items():
            known.setdefault(k.lower(), f"{k} ({defs[0].gvk.api_version})")
        close = difflib.get_close_matches(str(kind).lower(), list(known), n=3, cutoff=0.6)
        return [known[c] for c in close]

    def definition_for(self, obj: dict) -> Definition:
        if not isinstance(obj, dict) or not obj.get("kind"):
            raise UnknownKindError(str(obj.get("apiVersion", "")) if isinstance(obj, dict) else "", "", [],
                                   object_ref(obj))
        try:
            return self.find(str(obj.get("apiVersion") or ""), str(obj["kind"]))
        except UnknownKindError as exc:
            raise UnknownKindError(exc.api_version, exc.kind, exc.suggestions, object_ref(obj)) from None

    def resolve(self, obj: dict, lookup=None):
        """Resolve an object through the definition of its kind (its references through `lookup`,
        else the catalog's)."""
        return self.resolver.resolve(obj, self.definition_for(obj), self.lookup if lookup is None else lookup)

    def reference_kinds(self) -> list:
        """(GVK, cluster-scoped) of every kind a definition's references may name, sorted."""
        kinds = {(k.gvk, k.cluster_scoped) for d in self._by_name.values() for r in d.references for k in r.kinds}
        return sorted(kinds, key=lambda k: str(k[0]))

    def is_referenced_kind(self, api_version: str, kind: str) -> bool:
        """Whether objects of this kind are read by references (not workloads themselves); asked per
        event by the processors, so the (group, kind) set is kept until a definition is added."""
        if self._referenced is None:
            self._referenced = {(g.group, g.kind) for g, _ in self.reference_kinds()}
        return ((api_version or "").rpartition("/")[0], kind) in self._referenced


class ObjectIndex:
    """Objects at hand by (group, kind, namespace, name): the lookup of offline resolution (the
    referenced objects given in the same files) and of tests; any version of a kind serves."""

    def __init__(self, objects=()):
        self._objects: dict = {}
        for obj in objects:
            self.add(obj)

    @staticmethod
    def _key(group, kind, namespace, name):
        return (group, kind, namespace or None, name)

    def add(self, obj: dict) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            return
        meta = obj["metadata"]
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        self._objects[self._key(group, obj.get("kind"), meta.get("namespace"), meta.get("name"))] = obj

    def remove(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        self._objects.pop(self._key(group, obj.get("kind"), meta.get("namespace"), meta.get("name")), None)

    def __call__(self, key) -> dict | None:
        return self._objects.get(self._key(key.gvk.group, key.gvk.kind, key.namespace, key.name))

    def __len__(self):
        return len(self._objects)
