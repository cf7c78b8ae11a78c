"""Tables and trees of resolved workloads and definitions, for people.

Renderers take the JSON form of the items (what `-o json` prints), so what a
person reads and what a script reads never disagree.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from workloadmap.catalog.quantities import format_bytes, format_cpu

STATUS_STYLE = {
    "Running": "green", "Completed": "blue", "Failed": "red", "Degraded": "yellow",
    "Initializing": "cyan", "Suspended": "magenta", "Suspending": "magenta", "Resuming": "magenta",
    "Undefined": "dim",
}


def _num(v) -> str:
    if v is None:
        return "-"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def components_summary(item: dict) -> str:
    """`master(1), worker(4)`: pods per role, instances named."""
    parts = []
    for c in item["components"]:
        if c["pods"] == 0 and c["replicas"] is None:
            continue
        label = c["name"] if c["instance"] is None else f"{c['name']}/{c['instance']}"
        parts.append(f"{label}({c['pods']})")
    return ", ".join(parts)


def workload_table(items: list) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NAMESPACE", "NAME", "KIND", "STATUS", "COMPONENTS", "PODS", "GPU", "CPU", "MEMORY"):
        table.add_column(col, justify="right" if col in ("PODS", "GPU", "CPU", "MEMORY") else "left")
    for it in items:
        total = it["total"]
        table.add_row(
            it["namespace"] or "", it["name"] or "", it["kind"],
            Text(it["status"], style=STATUS_STYLE.get(it["status"], "")),
            components_summary(it), str(total["pods"]), _num(total["gpu"]),
            format_cpu(total["cpu"]), format_bytes(total["memory"]),
        )
    return table


def _per_pod(res: dict) -> str:
    parts = []
    if res["gpu"]:
        names = res.get("gpuResources") or {}
        detail = ", ".join(f"{k}={_num(v)}" for k, v in names.items()) if len(names) > 1 or any(
            k != "nvidia.com/gpu" for k in names) else ""
        parts.append(f"{_num(res['gpu'])} GPU" + (f" ({detail})" if detail else ""))
    if res["cpu"]:
        parts.append(f"{format_cpu(res['cpu'])} CPU")
    if res["memory"]:
        parts.append(f"{format_bytes(res['memory'])} mem")
    return ", ".join(parts) or "no requests"


def workload_trees(items: list):
    """workload → components → instances, with replicas, pods and GPUs per role, and a total."""
    for it in items:
        total = it["total"]
        head = Text.assemble(
            (f"{it['kind']} ", "bold"), f"{it['namespace'] + '/' if it['namespace'] else ''}{it['name']}  ",
            (it["status"], STATUS_STYLE.get(it["status"], "")),
            f"  [{it['definition']}]",
        )
        tree = Tree(head)
        nodes = {}
        by_name: dict = {}
        for c in it["components"]:
            by_name.setdefault(c["name"], []).append(c)
        for name, views in by_name.items():
            parent = views[0]["parent"]
            branch = nodes.get(parent, tree)
            if len(views) == 1 and views[0]["instance"] is None:
                node = branch.add(_component_line(name, views[0]))
            else:
                node = branch.add(Text(name, style="bold"))
                for v in views:
                    node.add(_component_line(str(v["instance"]), v))
            nodes[name] = node
        tree.add(Text(
            f"TOTAL  {total['pods']} pods  {_num(total['gpu'])} GPU  {format_cpu(total['cpu'])} CPU  "
            f"{format_bytes(total['memory'])} memory", style="bold"))
        yield tree


def _component_line(label: str, c: dict) -> Text:
    scale = []
    if c["replicas"] is not None:
        scale.append(f"replicas {c['replicas']}")
    if c["minReplicas"] is not None or c["maxReplicas"] is not None:
        scale.append(f"min {_num(c['minReplicas'])} max {_num(c['maxReplicas'])}")
    if c.get("podsPerReplica", 1) != 1:
        scale.append(f"{c['podsPerReplica']} pods/replica")
    text = Text.assemble((label, "bold"), "  ", ", ".join(scale))
    if c["pods"] or c["perPod"]["gpu"] or c["perPod"]["cpu"]:
        text.append(f"  → {c['pods']} pod{'s' if c['pods'] != 1 else ''} × {_per_pod(c['perPod'])}")
        if c["total"]["gpu"]:
            text.append(f"  = {_num(c['total']['gpu'])} GPU", style="green")
    if c.get("status"):
        text.append(f"  {c['status']}", style=STATUS_STYLE.get(c["status"], ""))
    return text


def definition_table(items: list) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NAME", "KIND", "API VERSION", "FRAMEWORK", "COMPONENTS", "ORIGIN"):
        table.add_column(col)
    for it in items:
        table.add_row(it["name"], it["kind"], it["apiVersion"], it["framework"],
                      ", ".join(c["name"] for c in it["components"]), it["origin"])
    return table


def definition_trees(items: list):
    for it in items:
        tree = Tree(Text.assemble((it["name"], "bold"), f"  {it['kind']} ({it['apiVersion']})  ", (it["origin"], "dim")))
        nodes = {}
        for c in it["components"]:
            parent = nodes.get(c["parent"], tree)
            what = [c["kind"] or "virtual"]
            if c.get("spec"):
                what.append(c["spec"])
            if c.get("instances"):
                what.append(f"instances {c['instances']}")
            nodes[c["name"]] = parent.add(Text.assemble((c["name"], "bold"), "  " + "  ".join(what)))
        yield tree
