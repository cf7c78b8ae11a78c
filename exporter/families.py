"""The metric families the exporter serves, and how one object's lines of a family are written.

Names and labels follow kube-state-metrics: ``<project>_<object>_<what>``, an
``_info`` series of value 1 carrying the descriptive labels, state sets as one
0/1 series per state, resources as ``resource``/``unit`` labels with the
resource name's non-alphanumerics turned into ``_`` (``nvidia.com/gpu`` ->
``nvidia_com_gpu``), times as Unix seconds (the age is ``time() - x`` in
PromQL, so nothing depends on when the scrape happens).  No label carries a
generated name, a uid or a hash: a workload is ``cluster, namespace,
workload, kind``, a pod adds ``pod`` (the join key of DCGM and cAdvisor).

A component's instance (a Ray worker group, a JobSet's replicated job) is the
label ``component_instance``, not ``instance``: Prometheus gives every scraped
series the target's ``instance`` label, and an exposed label of that name is
either renamed (``exported_instance``) or, with ``honor_labels``, replaces the
target's on some series and not on others (an empty value is no label).

Why the per-object families are lines written when an event changes them,
not prometheus_client's labelled metrics: those keep one child object and a
lock per series and format every sample at every scrape, which at the sizes
this serves (millions of series) costs kilobytes per series and seconds per
scrape.  Here an event re-writes the few lines of its object (a bytes value
in the family's dict) and a scrape joins bytes.  The pipeline's own health
metrics, few series, are prometheus_client metrics (``tracking.Health``).
"""

from __future__ import annotations

import re

from workloadmap.catalog.definitions import STATUSES


CHUNKS = 1 << 12   # parts of a family's objects, compressed apart (see Family)


class Family:
    """One metric family: its name, type and help, and per object key the object's lines (bytes).

    The objects are spread over CHUNKS parts by the hash of their key, and each part keeps its
    lines gzip-compressed as one gzip member, made again only when a line of the part changed
    (``set`` and ``drop`` mark it): a scrape that accepts gzip, as Prometheus' does, joins those
    members (a gzip stream may be a series of members), so its cost follows what changed since
    the last scrape, not the size of the fleet.  A line set to what it was changes nothing.
    """

    __slots__ = ("name", "type", "help", "size", "parts", "dirty", "zipped", "_header")

    def __init__(self, name: str, type: str, help: str):  # noqa: A002 - the format's words
        self.name, self.type, self.help = name, type, help
        self.size = 0                                       # objects with lines
        self.parts: list[dict | None] = [None] * CHUNKS     # per part: key -> lines
        self.dirty: set[int] = set()                        # parts changed since their member was made
        self.zipped: list[bytes | None] = [None] * CHUNKS   # per part: its lines as one gzip member
        self._header = f"# HELP {name} {help}\n# TYPE {name} {type}\n".encode()

    def header(self) -> bytes:
        return self._header

    def set(self, key, lines: bytes, i: int | None = None) -> None:
        """Set the object's lines; `i` is its part (``part_of(key)``) when the caller has it, as a
        workload's record sets ten families of one key."""
        if i is None:
            i = hash(key) & (CHUNKS - 1)
        part = self.parts[i]
        if part is None:
            part = self.parts[i] = {}
        old = part.get(key)
        if old != lines:
            if old is None:
                self.size += 1
            part[key] = lines
            self.dirty.add(i)

    def drop(self, key) -> None:
        i = hash(key) & (CHUNKS - 1)
        part = self.parts[i]
        if part is not None and part.pop(key, None) is not None:
            self.size -= 1
            self.dirty.add(i)

    def get(self, key) -> bytes | None:
        part = self.parts[hash(key) & (CHUNKS - 1)]
        return None if part is None else part.get(key)

    def blocks(self) -> list[bytes]:
        """Every object's lines (references: cheap to take under a lock, joined after it)."""
        return [block for part in self.parts if part for block in part.values()]


def part_of(key) -> int:
    """The part of every family an object's key falls in."""
    return hash(key) & (CHUNKS - 1)


def build(*specs: tuple) -> dict[str, Family]:
    """Fresh families (their lines empty) of ``(name, type, help)`` specs, by name."""
    return {name: Family(name, kind, text) for group in specs for name, kind, text in group}


WORKLOAD_FAMILIES = (
    ("workloadmap_workload_info", "gauge",
     "Information about a workload (a top-level object the catalog resolves): its framework and definition."),
    ("workloadmap_workload_status", "gauge",
     "The workload's status in the shared vocabulary, one series per status: 1 for the current one, else 0."),
    ("workloadmap_workload_status_transition_timestamp_seconds", "gauge",
     "Unix time the workload entered its current status (the age is time() minus this)."),
    ("workloadmap_workload_created", "gauge", "Unix creation time of the workload object."),
    ("workloadmap_workload_requested_pods", "gauge", "Pods the workload's spec asks for."),
    ("workloadmap_workload_requested_gpus", "gauge", "GPUs the workload's spec asks for (all GPU resources)."),
    ("workloadmap_workload_resource_requests", "gauge",
     "Resources the workload's spec asks for, by resource: cpu (core), memory (byte), each GPU resource (integer)."),
    ("workloadmap_component_requested_pods", "gauge", "Pods a component of the workload asks for."),
    ("workloadmap_component_requested_gpus", "gauge", "GPUs a component of the workload asks for."),
    ("workloadmap_component_resource_requests", "gauge", "Resources a component of the workload asks for, by resource."),
)

POD_FAMILIES = (
    ("workloadmap_pod_workload_info", "gauge",
     "The workload, component, component instance and replica a pod belongs to (join on namespace, pod)."),
    ("workloadmap_workload_allocated_pods", "gauge", "Pods of the workload bound to a node and not terminated."),
    ("workloadmap_workload_allocated_gpus", "gauge", "GPUs requested by the workload's bound, non-terminated pods."),
    ("workloadmap_workload_pending_pods", "gauge", "Pods of the workload not yet bound to a node."),
    ("workloadmap_workload_pending_gpus", "gauge", "GPUs requested by the workload's pods not yet bound to a node."),
    ("workloadmap_component_allocated_pods", "gauge", "Pods of a component bound to a node and not terminated."),
    ("workloadmap_component_allocated_gpus", "gauge", "GPUs requested by a component's bound, non-terminated pods."),
    ("workloadmap_component_pending_pods", "gauge", "Pods of a component not yet bound to a node."),
    ("workloadmap_component_pending_gpus", "gauge", "GPUs requested by a component's pods not yet bound to a node."),
)

NODE_FAMILIES = (
    ("workloadmap_node_info", "gauge", "Information about a node: GPU product, instance type, node pool and zone."),
    ("workloadmap_node_resource_allocatable", "gauge",
     "A node's allocatable resources, by resource: cpu (core), memory (byte), each GPU resource (integer)."),
    ("workloadmap_node_unschedulable", "gauge", "1 when the node is cordoned (spec.unschedulable), else 0."),
)

# The state set's states: the shared vocabulary (Deleted is no state: a deleted workload has no series).
STATES = tuple(STATUSES)

_NEEDS_ESCAPE = re.compile(r'[\\"\n]')
_NOT_ALNUM = re.compile(r"[^a-zA-Z0-9]")


def escape(value) -> str:
    """A label value as the text format writes it (None is the empty value, i.e. no label)."""
    if value is None:
        return ""
    value = str(value)
    if _NEEDS_ESCAPE.search(value) is None:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels(*written: str, **values) -> str:
    """``name="value",...`` of labels already `written` then the given ones in order, values escaped; a None
    or empty value is left out (Prometheus reads an empty label as no label)."""
    out = [w for w in written if w]
    for name, value in values.items():
        if value is not None and value != "":
            if value.__class__ is not str or _NEEDS_ESCAPE.search(value) is not None:
                value = escape(value)
            out.append(f'{name}="{value}"')
    return ",".join(out)


def workload_labels(cluster, namespace, workload, kind) -> str:
    """``labels(cluster=, namespace=, workload=, kind=)``, the prefix of every line of a workload:
    written at once when the four are non-empty texts that need no escaping (nearly always)."""
    if cluster and namespace and workload and kind:
        try:
            plain = _NEEDS_ESCAPE.search(cluster + namespace + workload + kind) is None
        except TypeError:   # not all texts
            plain = False
        if plain:
            return f'cluster="{cluster}",namespace="{namespace}",workload="{workload}",kind="{kind}"'
    return labels(cluster=cluster, namespace=namespace, workload=workload, kind=kind)


def component_labels(prefix: str, component, instance) -> str:
    """``labels(prefix, component=, component_instance=)``: written at once for a plain component
    name without an instance (most components)."""
    if instance is None and prefix and component and component.__class__ is str \
            and _NEEDS_ESCAPE.search(component) is None:
        return f'{prefix},component="{component}"'
    return labels(prefix, component=component, component_instance=instance)


def number(value) -> str:
    """A sample value: integers without a fraction, other numbers as Python's shortest repr (which
    Prometheus' parser reads)."""
    text = _NUMBERS.get(value)
    if text is not None:
        return text
    if value.__class__ is int:
        text = str(value)
    elif value.is_integer() and -2**53 < value < 2**53:
        text = str(int(value))
    else:
        return repr(float(value))
    if -_KEEP < value < _KEEP and len(_NUMBERS) < _KEEP:
        _NUMBERS[value] = text   # 2 and 2.0 are one key and one text
    return text


# The texts of the small whole numbers records repeat (pods, GPUs, cores): written once.  An int
# and the float equal to it (one key of the dict) have the same text at these sizes.
_KEEP = 4096
_NUMBERS: dict = {}


def resource_label(name: str) -> str:
    """A resource name as kube-state-metrics writes it in ``resource``: non-alphanumerics as ``_``."""
    return _NOT_ALNUM.sub("_", name)


def resource_lines(family: str, prefix: str, cpu, memory, gpu_resources: dict | None) -> str:
    """The lines of a ``*_resource_requests``/``*_allocatable`` family for one object: cpu, memory and each
    GPU resource (``cpu, memory, gpuResources`` as the records carry them)."""
    head = f"{family}{{{prefix}," if prefix else f"{family}{{"
    out = f'{head}resource="cpu",unit="core"}} {number(cpu or 0)}\n{head}resource="memory",unit="byte"}} ' \
          f'{number(memory or 0)}\n'
    if gpu_resources:
        for name, count in sorted(gpu_resources.items()):
            label = _RESOURCES.get(name)
            if label is None:
                label = escape(resource_label(name))
                if len(_RESOURCES) < _KEEP:
                    _RESOURCES[name] = label
            out += f'{head}resource="{label}",unit="integer"}} {number(count)}\n'
    return out


_RESOURCES: dict[str, str] = {}   # resource name -> its label value (a fleet has a few)
