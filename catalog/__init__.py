"""The catalog: Workload Map definitions and the resolution of live objects.

Everything else reads workloads through this package; it depends on nothing
else of workloadmap.  Public API:

- ``Catalog.builtin()`` / ``Catalog.add_file()`` / ``Catalog.resolve(obj, lookup)`` (``ObjectIndex``: a lookup
  of the objects a definition's references name)
- ``validate_file(path)`` / ``load_definition(doc, origin, source)``
- ``Resolver(gpus=GpuMatcher([...])).resolve(obj, definition)``
- ``match_pod`` / ``gang_groups`` (pods.py), ``update_pod_specs`` / ``suspend`` / ``resume`` (updating.py)
"""

from .definitions import STATUSES, Definition, RelatedKey
from .registry import Catalog, ObjectIndex, UnknownKindError
from .requests import GpuMatcher, Resources
from .resolving import ResolveError, Resolver, related_keys, resolve
from .validating import DefinitionError, Problem, load_definition, read_documents, validate_file
from .workloads import ComponentView, ResolvedWorkload

__all__ = [
    "STATUSES", "Catalog", "ComponentView", "Definition", "DefinitionError", "GpuMatcher", "ObjectIndex", "Problem",
    "RelatedKey", "ResolveError", "ResolvedWorkload", "Resolver", "Resources", "UnknownKindError", "load_definition",
    "read_documents", "related_keys", "resolve", "validate_file",
]
