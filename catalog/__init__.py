"""The catalog: Workload Map definitions and the resolution of live objects.

Everything else reads workloads through this package; it depends on nothing
else of workloadmap.  Public API:

- ``Catalog.builtin()`` / ``Catalog.add_file()`` / ``Catalog.resolve(obj)``
- ``validate_file(path)`` / ``load_definition(doc, origin, source)``
- ``Resolver(gpus=GpuMatcher([...])).resolve(obj, definition)``
- ``match_pod`` / ``gang_groups`` (pods.py), ``update_pod_specs`` / ``suspend`` / ``resume`` (updating.py)
"""

from .definitions import STATUSES, Definition
from .registry import Catalog, UnknownKindError
from .requests import GpuMatcher, Resources
from .resolving import ResolveError, Resolver, resolve
from .validating import DefinitionError, Problem, load_definition, read_documents, validate_file
from .workloads import ComponentView, ResolvedWorkload

__all__ = [
    "STATUSES", "Catalog", "ComponentView", "Definition", "DefinitionError", "GpuMatcher", "Problem",
    "ResolveError", "ResolvedWorkload", "Resolver", "Resources", "UnknownKindError", "load_definition",
    "read_documents", "resolve", "validate_file",
]
