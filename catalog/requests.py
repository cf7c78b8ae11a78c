"""Effective resource requests of a pod, the way the Kubernetes scheduler counts them.

Per container, a resource's request defaults to its limit.  The pod needs
max(Σ app containers + Σ restartable (sidecar) init containers,
    max over init containers i of (init_i + Σ sidecars started before i)),
plus the pod's overhead; pod-level CPU and memory requests (``spec.resources``)
replace the containers' sum.  GPUs are the sum of the resources whose names match
the configured GPU patterns (``nvidia.com/gpu``, ``nvidia.com/mig-*``,
``amd.com/gpu`` by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from .quantities import QuantityError, milli_value

DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*", "amd.com/gpu")


class RequestError(ValueError):
    """A pod spec whose resources cannot be read (names the container and field)."""


@dataclass
class Resources:
    """GPUs, CPU cores and memory bytes; `gpus` breaks GPUs down by resource name."""

    gpu: float = 0
    cpu: float = 0
    memory: int = 0
    gpus: dict = field(default_factory=dict)

    # Both run once per component of every resolved object: integers (the usual amounts) skip
    # the float normalisation.
    def scaled(self, n: int) -> "Resources":
        if n == 0:   # components scaled to zero are common (Milvus lists every one)
            return Resources(0, 0, 0, {k: 0 for k in self.gpus})
        gpu, cpu = self.gpu * n, self.cpu * n
        return Resources(gpu if gpu.__class__ is int else _num(gpu), cpu if cpu.__class__ is int else _num(cpu),
                         int(self.memory * n), {k: _num(v * n) for k, v in self.gpus.items()} if self.gpus else {})

    def add(self, other: "Resources") -> None:
        gpu, cpu = self.gpu + other.gpu, self.cpu + other.cpu
        self.gpu = gpu if gpu.__class__ is int else _num(gpu)
        self.cpu = cpu if cpu.__class__ is int else _num(cpu)
        self.memory += other.memory
        if other.gpus:
            for k, v in other.gpus.items():
                self.gpus[k] = _num(self.gpus.get(k, 0) + v)

    def to_dict(self) -> dict:
        out = {"gpu": self.gpu, "cpu": self.cpu, "memory": self.memory}
        if self.gpus:
            out["gpuResources"] = dict(sorted(self.gpus.items()))
        return out


def _num(v):
    """Whole numbers as int, the rest as float, for stable JSON."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


class GpuMatcher:
    """Which resource names count as GPUs."""

    KNOWN = 4096   # resource names remembered (a cluster has a few dozen)

    def __init__(self, patterns=DEFAULT_GPU_RESOURCES):
        self.patterns = tuple(patterns)
        self._known: dict[str, bool] = {}

    def _match(self, name: str) -> bool:
        return any(fnmatchcase(name, p) for p in self.patterns)

    def __call__(self, name: str) -> bool:
        known = self._known.get(name)
        if known is None:
            known = self._match(name)
            if len(self._known) < self.KNOWN:
                self._known[name] = known
        return known


DEFAULT_GPUS = GpuMatcher()


def _container_request(c, where: str) -> dict:
    if not isinstance(c, dict):
        raise RequestError(f"{where}: a container must be an object, got {type(c).__name__}")
    res = c.get("resources")
    if res is None:
        return {}
    if not isinstance(res, dict):
        raise RequestError(f"{where}.resources: must be an object")
    limits, requests = _requests_and_limits(res, f"{where}.resources")
    return {**limits, **requests}


def _requests_and_limits(resources: dict, where: str) -> tuple[dict, dict]:
    """(limits, requests) of a ResourceRequirements, in milli-units per resource name."""
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    if not isinstance(limits, dict) or not isinstance(requests, dict):
        raise RequestError(f"{where}: requests and limits must be objects")
    return _milli_values(limits, where, "limits"), _milli_values(requests, where, "requests")


def _milli_values(amounts: dict, where: str, field: str) -> dict:
    """Milli-units per resource name; a negative amount is refused: the API server accepts
    "-3" in a custom resource's embedded pod template, and one would cancel others' demand."""
    out = {}
    try:
        for name, value in amounts.items():
            amount = out[name] = milli_value(value)
            if amount < 0:
                raise RequestError(f"{where}.{field}[{name}]: {value!r} is negative "
                                   f"(a request, limit or overhead must not be)")
    except QuantityError as exc:
        raise RequestError(f"{where}.{field}[{name}]: {exc}") from None
    return out


def _add_into(acc: dict, req: dict):
    for k, v in req.items():
        acc[k] = acc.get(k, 0) + v


def effective_request(spec, gpus: GpuMatcher = DEFAULT_GPUS, where: str = "spec") -> Resources:
    """The scheduler's view of one pod spec's requests (every event pays this once per
    component): each container is read the quick way (_container_amounts), and only one that
    it refuses is read again the careful way, which names the container and field of an error."""
    if spec is None:
        return Resources()
    if not isinstance(spec, dict):
        raise RequestError(f"{where}: a pod spec must be an object, got {type(spec).__name__}")
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        raise RequestError(f"{where}: containers and initContainers must be lists")
    total: dict = {}
    for i, c in enumerate(containers):
        _add_into(total, _container_amounts(c, where, "containers", i))
    if inits:
        sidecars: dict = {}
        init_peak: dict = {}
        for i, c in enumerate(inits):
            req = _container_amounts(c, where, "initContainers", i)
            if c.get("restartPolicy") == "Always":
                _add_into(sidecars, req)
                candidate = dict(sidecars)
            else:
                candidate = dict(sidecars)
                _add_into(candidate, req)
            for k, v in candidate.items():
                if v > init_peak.get(k, 0):
                    init_peak[k] = v
        _add_into(total, sidecars)
        for k, v in init_peak.items():
            if v > total.get(k, 0):
                total[k] = v
    if "resources" in spec:
        _apply_pod_level(total, spec["resources"], where)
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        _add_into(total, _milli_values(overhead, where, "overhead"))
    return to_resources(total, gpus)


_AMOUNTS: dict[str, int] = {}   # quantity text -> milli-units, for the few texts objects repeat
_AMOUNTS_KNOWN = 4096


def _container_amounts(c, where: str, field: str, i: int) -> dict:
    """A container's request per resource name in milli-units (a request, else its limit).
    The quick reading takes plain containers (maps of valid, non-negative quantities); any
    other is read by _container_request, which gives the same amounts or the error."""
    try:
        res = c.get("resources")
        if res is None:
            return {}
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        if limits.__class__ is not dict or requests.__class__ is not dict:
            raise ValueError
        out = {}
        for amounts in (limits, requests):   # a request overrides its limit, as {**limits, **requests}
            for name, value in amounts.items():
                amount = _AMOUNTS.get(value) if value.__class__ is str else None
                if amount is None:
                    amount = milli_value(value)
                    if amount < 0:
                        raise ValueError
                    if value.__class__ is str and len(_AMOUNTS) < _AMOUNTS_KNOWN:
                        _AMOUNTS[value] = amount
                out[name] = amount
        return out
    except Exception:  # noqa: BLE001 - the careful reading decides, and names the error
        return _container_request(c, f"{where}.{field}[{i}]")


POD_LEVEL_RESOURCES = ("cpu", "memory")


def _apply_pod_level(total: dict, resources, where: str) -> None:
    """Pod-level requests (spec.resources, KEP-2837) replace the containers' sum for CPU and
    memory; a pod-level limit stands in for a request no container makes (the API's defaulting)."""
    if resources is None:
        return
    if not isinstance(resources, dict):
        raise RequestError(f"{where}.resources: must be an object")
    limits, requests = _requests_and_limits(resources, f"{where}.resources")
    for name in POD_LEVEL_RESOURCES:
        if name in requests:
            total[name] = requests[name]
        elif name in limits and not total.get(name):
            total[name] = limits[name]


def _from_milli(m: int):
    return m // 1000 if m % 1000 == 0 else m / 1000


def to_resources(amounts: dict, gpus: GpuMatcher = DEFAULT_GPUS) -> Resources:
    """Resources from milli-unit amounts per resource name."""
    out = Resources()
    gpu_milli = 0
    known = gpus._known
    for name, amount in amounts.items():
        if name == "cpu":
            out.cpu = _from_milli(amount)
        elif name == "memory":
            out.memory = -((-amount) // 1000)
        elif known.get(name) or (name not in known and gpus(name)):
            out.gpus[name] = _from_milli(amount)
            gpu_milli += amount
    if gpu_milli:
        out.gpu = _from_milli(gpu_milli)
    return out
