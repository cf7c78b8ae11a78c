"""Tables and trees of resolved workloads and definitions, for people.

Renderers take the JSON form of the items (what `-o json` prints), so what a
person reads and what a script reads never disagree.
"""

from __future__ import annotations

from datetime import datetime, timezone

from rich.console import Group
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
            status_cell(it),
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
            status_cell(it),
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


# -- live workloads (get, tree, resources) ------------------------------------------
def human_duration(seconds: float) -> str:
    """kubectl's AGE (apimachinery's HumanDuration): 5s, 3m20s, 12m, 3h10m, 20h, 2d4h, 40d, 2y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """AGE of an RFC 3339 creationTimestamp ("<unknown>" without one)."""
    if not timestamp:
        return "<unknown>"
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return human_duration(((now or datetime.now(timezone.utc)) - then).total_seconds())


def _status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def status_cell(it: dict) -> Text:
    """The resolved status, then the other statuses the workload matched (`Degraded +Running`),
    so a table shows the whole matched set as `-o json` does."""
    text = _status_text(it["status"])
    for other in it.get("statuses") or ():
        if other != it["status"]:
            text.append(f" +{other}", style="dim")
    return text


def plain_table(headers: list[str], rows: list[list], right: tuple[str, ...] = ()) -> Text:
    """kubectl's table: columns two spaces apart, the header bold, nothing wrapped.

    Why not a rich Table: `get` lists thousands of workloads, and a Table measures and wraps
    every cell to fit the terminal (seconds for 5,000 rows) where kubectl prints each row as it
    is.  Cells are strings or Texts (a status keeps its colour); a row wider than the terminal
    runs past its edge, as kubectl's do."""
    cells = [[c if isinstance(c, Text) else Text(str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [row[i].cell_len for row in cells]) for i, h in enumerate(headers)]
    out = Text(no_wrap=True, overflow="ignore", end="")
    lines = [[Text(h, style="bold") for h in headers]] + cells
    for n, line in enumerate(lines):
        if n:
            out.append("\n")
        last = len(line) - 1
        for i, cell in enumerate(line):
            pad = " " * (widths[i] - cell.cell_len)
            if headers[i] in right:
                out.append(pad)
                out.append_text(cell)
            else:
                out.append_text(cell)
                if i < last:
                    out.append(pad)
            if i < last:
                out.append("  ")
    return out


def live_table(items: list, now: datetime | None = None, *, with_type: bool = False) -> Text:
    """`get`: NAME, NAMESPACE, STATUS, COMPONENTS, GPU, AGE (TYPE first with `with_type`)."""
    headers = ["TYPE"] * with_type + ["NAME", "NAMESPACE", "STATUS", "COMPONENTS", "GPU", "AGE"]
    rows = [[it.get("type") or it["kind"]] * with_type
            + [it["name"] or "", it["namespace"] or "", status_cell(it), components_summary(it),
               _num(it["total"]["gpu"]), age(it["creationTimestamp"], now)] for it in items]
    return plain_table(headers, rows, right=("GPU",))


def live_wide_table(items: list, now: datetime | None = None, *, with_type: bool = False) -> Text:
    """`get -o wide`: the table plus KIND, PODS (ready/desired), CPU, MEMORY and DEFINITION."""
    headers = ["TYPE"] * with_type + ["NAME", "NAMESPACE", "KIND", "STATUS", "COMPONENTS", "PODS", "GPU", "CPU",
                                      "MEMORY", "AGE", "DEFINITION"]
    rows = []
    for it in items:
        total = it["total"]
        live = it.get("live")
        pods = f"{live['ready']}/{total['pods']}" if live else f"-/{total['pods']}"
        rows.append([it.get("type") or it["kind"]] * with_type
                    + [it["name"] or "", it["namespace"] or "", it["kind"], status_cell(it),
                       components_summary(it), pods, _num(total["gpu"]), format_cpu(total["cpu"]),
                       format_bytes(total["memory"]), age(it["creationTimestamp"], now),
                       f"{it['definition']} ({it['origin']})"])
    return plain_table(headers, rows, right=("PODS", "GPU", "CPU", "MEMORY"))


def _pods_text(desired: int, actual: int, ready: int) -> Text:
    style = "" if actual == desired and ready == actual else "yellow"
    return Text(f"pods {ready}/{actual} ready, {desired} desired", style=style)


def _pod_line(pod: dict) -> Text:
    text = Text.assemble((pod["name"] or "", "bold"), "  ", _status_text(pod["phase"]) if pod["phase"] in STATUS_STYLE
                         else Text(pod["phase"], style={"Succeeded": "blue", "Pending": "cyan"}.get(pod["phase"], "")))
    text.append("  ready" if pod["ready"] else "  not ready", style="green" if pod["ready"] else "yellow")
    text.append(f"  node {pod['node']}" if pod["node"] else "  unscheduled")
    if pod.get("replica") is not None:
        text.append(f"  replica {pod['replica']}")
    if pod["gpu"] is None:
        text.append("  requests unreadable", style="red")
    else:
        text.append(f"  {_num(pod['gpu'])} GPU", style="green" if pod["gpu"] else "dim")
    if pod.get("restarts"):
        text.append(f"  {pod['restarts']} restarts", style="yellow")
    return text


def _live_component_line(label: str, c: dict) -> Text:
    text = Text.assemble((label, "bold"))
    if c["replicas"] is not None:
        text.append(f"  replicas {c['replicas']}")
    if c["pods"] or c["actualPods"]:
        text.append("  ")
        text.append_text(_pods_text(c["pods"], c["actualPods"], c["readyPods"]))
        text.append(f"  × {_per_pod(c['perPod'])}")
        if c["total"]["gpu"]:
            text.append(f"  = {_num(c['total']['gpu'])} GPU", style="green")
    if c.get("status"):
        text.append(f"  {c['status']}", style=STATUS_STYLE.get(c["status"], ""))
    return text


def live_trees(items: list):
    """`tree`: workload → components → instances → pods, desired vs actual and ready pods, nodes, GPUs per pod."""
    for it in items:
        total, live = it["total"], it["live"]
        head = Text.assemble(
            (f"{it['kind']} ", "bold"), f"{it['namespace'] + '/' if it['namespace'] else ''}{it['name']}  ",
            status_cell(it), f"  [{it['definition']}]  ")
        head.append_text(_pods_text(total["pods"], live["pods"], live["ready"]))
        tree = Tree(head)
        views = {(c["name"], c["instance"]) for c in it["components"]}
        pods_of: dict = {}
        for pod in it["livePods"]:
            key = (pod["component"], pod["instance"])
            if key not in views:  # a single-instance component's pod that carries an instance label
                key = (pod["component"], None)
            pods_of.setdefault(key if pod["expected"] else None, []).append(pod)
        nodes: dict = {}
        by_name: dict = {}
        for c in it["components"]:
            by_name.setdefault(c["name"], []).append(c)
        for name, views in by_name.items():
            branch = nodes.get(views[0]["parent"], tree)
            if len(views) == 1 and views[0]["instance"] is None:
                node = branch.add(_live_component_line(name, views[0]))
                leaves = [(node, views[0])]
            else:
                node = branch.add(Text(name, style="bold"))
                leaves = [(node.add(_live_component_line(str(v["instance"]), v)), v) for v in views]
            for leaf, v in leaves:
                for pod in pods_of.get((v["name"], v["instance"]), []):
                    leaf.add(_pod_line(pod))
            nodes[name] = node
        stray = pods_of.get(None, [])
        if stray:
            node = tree.add(Text("pods not in the spec", style="yellow"))
            for pod in stray:
                node.add(Text.assemble(f"{pod['component']}" + (f"/{pod['instance']}" if pod["instance"] else "") + "  ",
                                       _pod_line(pod)))
        tree.add(Text(
            f"TOTAL  {total['pods']} pods desired, {live['pods']} actual, {live['ready']} ready  "
            f"{_num(total['gpu'])} GPU  {format_cpu(total['cpu'])} CPU  {format_bytes(total['memory'])} memory",
            style="bold"))
        yield tree


def resource_rows(item: dict) -> list[dict]:
    """`resources` rows of one workload: per component (instance), pods not in the spec, then TOTAL."""
    rows = []
    for c in item["components"]:
        if c["pods"] == 0 and c["actualPods"] == 0 and c["replicas"] is None:
            continue  # a virtual level of the tree
        live_gpu = sum(p["gpu"] or 0 for p in item["livePods"]
                       if p["expected"] and p["component"] == c["name"]
                       and (p["instance"] == c["instance"] or c["instance"] is None))
        rows.append({"component": c["name"] if c["instance"] is None else f"{c['name']}/{c['instance']}",
                     "replicas": c["replicas"], "desired": c["pods"], "actual": c["actualPods"],
                     "ready": c["readyPods"], "gpuPerPod": c["perPod"]["gpu"], "gpu": c["total"]["gpu"],
                     "cpu": c["total"]["cpu"], "memory": c["total"]["memory"], "liveGpu": live_gpu})
    stray: dict = {}
    for p in item["livePods"]:
        if not p["expected"]:
            label = p["component"] + (f"/{p['instance']}" if p["instance"] else "") + " (not in spec)"
            row = stray.setdefault(label, {"component": label, "replicas": None, "desired": 0, "actual": 0,
                                           "ready": 0, "gpuPerPod": None, "gpu": 0, "cpu": 0, "memory": 0,
                                           "liveGpu": 0})
            row["actual"] += 1
            row["ready"] += 1 if p["ready"] else 0
            row["liveGpu"] += p["gpu"] or 0
    rows += stray.values()
    total, live = item["total"], item["live"]
    rows.append({"component": "TOTAL", "replicas": None, "desired": total["pods"], "actual": live["pods"],
                 "ready": live["ready"], "gpuPerPod": None, "gpu": total["gpu"], "cpu": total["cpu"],
                 "memory": total["memory"], "liveGpu": live["gpu"]})
    return rows


def resources_tables(items: list):
    """`resources`: one table per workload; GPU, CPU and MEMORY are the spec's requests, LIVE GPU the pods'."""
    tables = []
    for it in items:
        title = Text.assemble((f"{it['kind']} ", "bold"),
                              f"{it['namespace'] + '/' if it['namespace'] else ''}{it['name']}  ",
                              status_cell(it))
        table = Table(box=None, pad_edge=False, header_style="bold", title=title, title_justify="left")
        table.add_column("COMPONENT")
        for col in ("REPLICAS", "DESIRED", "ACTUAL", "READY", "GPU/POD", "GPU", "CPU", "MEMORY", "LIVE GPU"):
            table.add_column(col, justify="right")
        for row in resource_rows(it):
            cells = [row["component"], _num(row["replicas"]), str(row["desired"]), str(row["actual"]),
                     str(row["ready"]), _num(row["gpuPerPod"]), _num(row["gpu"]), format_cpu(row["cpu"]),
                     format_bytes(row["memory"]), _num(row["liveGpu"])]
            table.add_row(*cells, style="bold" if row["component"] == "TOTAL" else None)
        tables.append(table)
    return Group(*tables)


# -- get all --------------------------------------------------------------------------------------
def all_types_table(items: list, now: datetime | None = None) -> Text:
    """`get all`: `live_table` with the TYPE of each row first."""
    return live_table(items, now, with_type=True)


def all_types_wide_table(items: list, now: datetime | None = None) -> Text:
    return live_wide_table(items, now, with_type=True)


# -- describe -------------------------------------------------------------------------------------
def _more(hidden: list, what: str) -> Text:
    broken = sum(1 for h in hidden if h.get("unhealthy"))
    return Text(f"... and {len(hidden)} more {what} ({broken} unhealthy)", style="yellow" if broken else "dim")


def _limited(items: list, limit: int) -> tuple[list, list]:
    return (items, []) if not limit or len(items) <= limit else (items[:limit], items[limit:])


def _describe_pod_line(pod: dict) -> Text:
    text = _pod_line(pod)
    if pod.get("reason"):
        text.append(f"  {pod['reason']}", style="red" if pod.get("unhealthy") else "")
    return text


def _describe_component_line(label: str, c: dict) -> Text:
    text = Text.assemble((label, "bold" if not c.get("unhealthy") else "bold yellow"))
    if c["replicas"] is not None:
        text.append(f"  replicas {c['replicas']}")
    if c["pods"] or c.get("actualPods"):
        if c.get("actualPods") is None:
            text.append(f"  pods {c['pods']} desired")
        else:
            text.append("  ")
            text.append_text(_pods_text(c["pods"], c["actualPods"], c["readyPods"]))
            if c.get("unhealthyPods"):
                text.append(f"  {c['unhealthyPods']} unhealthy", style="red")
        text.append(f"  × {_per_pod(c['perPod'])}")
    if c.get("status"):
        text.append(f"  {c['status']}", style=STATUS_STYLE.get(c["status"], ""))
    return text


def _origin(it: dict) -> str:
    source = it.get("definitionSource") or ""
    return source if source.startswith(it["origin"]) else f"{it['origin']}: {source}"


def _describe_header(it: dict, now: datetime | None) -> Text:
    text = Text.assemble(("Name:        ", "bold"), f"{it['kind']}/{it['name']}\n",
                         ("Namespace:   ", "bold"), f"{it['namespace'] or '-'}\n",
                         ("Definition:  ", "bold"), f"{it['definition']} ({_origin(it)})\n",
                         ("Age:         ", "bold"), f"{age(it['creationTimestamp'], now)}\n",
                         ("Status:      ", "bold"))
    statuses = list(it.get("statuses") or [])
    if it["status"] not in statuses:   # Undefined: no status matched
        statuses.append(it["status"])
    for i, status in enumerate(statuses):
        if i:
            text.append(", ")
        text.append_text(_status_text(status))
        if status == it["status"]:
            text.append(" *", style="bold")
    live = it.get("live")
    if live is not None:
        text.append("\n")
        text.append("Pods:        ", style="bold")
        text.append_text(_pods_text(it["total"]["pods"], live["pods"], live["ready"])[len("pods "):])
    else:
        text.append("\n")
        text.append("Pods:        ", style="bold")
        text.append(f"{it['total']['pods']} desired (from the manifest: nothing live)", style="dim")
    return text


def _describe_tree(it: dict, pod_limit: int, component_limit: int) -> Tree:
    """Components → instances → pods; under each parent the unhealthy first, then at most the limits."""
    by_name: dict = {}
    for c in it["components"]:
        by_name.setdefault(c["name"], []).append(c)
    children: dict = {}
    for name, views in by_name.items():
        children.setdefault(views[0]["parent"], []).append(name)
    pods_of: dict = {}
    stray = []
    for pod in it.get("livePods") or []:
        if not pod["expected"]:
            stray.append(pod)
            continue
        key = (pod["component"], pod["instance"])
        if key not in {(c["name"], c["instance"]) for c in by_name.get(pod["component"], [])}:
            key = (pod["component"], None)
        pods_of.setdefault(key, []).append(pod)

    def unhealthy(name: str) -> bool:
        return any(v["unhealthy"] for v in by_name[name]) or any(unhealthy(n) for n in children.get(name, []))

    def add_pods(node: Tree, pods: list) -> None:
        shown, hidden = _limited(pods, pod_limit)
        for pod in shown:
            node.add(_describe_pod_line(pod))
        if hidden:
            node.add(_more(hidden, "pods"))

    def add_children(branch: Tree, parent) -> None:
        names = sorted(children.get(parent, []), key=lambda n: not unhealthy(n))
        shown, hidden = _limited(names, component_limit)
        for name in shown:
            views = by_name[name]
            if len(views) == 1 and views[0]["instance"] is None:
                node = branch.add(_describe_component_line(name, views[0]))
                add_pods(node, pods_of.get((name, None), []))
            else:
                node = branch.add(Text(name, style="bold yellow" if unhealthy(name) else "bold"))
                ranked = sorted(views, key=lambda v: (not v["unhealthy"], 0 if v.get("unhealthyPods") else 1))
                shown_views, hidden_views = _limited(ranked, component_limit)
                for v in shown_views:
                    add_pods(node.add(_describe_component_line(str(v["instance"]), v)),
                             pods_of.get((name, v["instance"]), []))
                if hidden_views:
                    node.add(_more(hidden_views, "instances"))
            add_children(node, name)
        if hidden:
            branch.add(_more([{"unhealthy": unhealthy(n)} for n in hidden], "components"))

    tree = Tree(Text("Components", style="bold"))
    add_children(tree, None)
    if stray:
        node = tree.add(Text("pods not in the spec", style="yellow"))
        add_pods(node, stray)
    return tree


def _describe_resources(it: dict) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", title=Text("Resources", style="bold"),
                  title_justify="left")
    table.add_column("COMPONENT")
    for col in ("DESIRED", "ACTUAL", "READY", "GPU", "CPU", "MEMORY", "ALLOCATED GPU", "PENDING GPU"):
        table.add_column(col, justify="right")
    for row in it["resources"]:
        table.add_row(row["component"], str(row["desired"]), _num(row["actual"]), _num(row["ready"]),
                      _num(row["gpu"]), format_cpu(row["cpu"]), format_bytes(row["memory"]),
                      _num(row["allocatedGpu"]), _num(row["pendingGpu"]),
                      style="bold" if row["component"] == "TOTAL" else None)
    return table


def _describe_gangs(it: dict) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", title=Text("Gang groups", style="bold"),
                  title_justify="left")
    for col in ("GROUP", "KEY", "MIN", "PODS", "BOUND"):
        table.add_column(col, justify="right" if col in ("MIN", "PODS", "BOUND") else "left")
    for g in it["gangGroups"]:
        short = g["bound"] is not None and g["bound"] < g["minMember"]
        table.add_row(g["podGroup"], g["key"], str(g["minMember"]), _num(g["pods"]), _num(g["bound"]),
                      style="yellow" if short else None)
        for sub in g["subGroups"]:
            table.add_row(f"  {sub['name']}", "", str(sub["minMember"]), _num(sub["pods"]), "")
    return table


def describe_screens(items: list, *, pod_limit: int = 0, component_limit: int = 0, now: datetime | None = None):
    """`describe`: per workload the header, the component tree (limited), resources and gang groups."""
    parts = []
    for i, it in enumerate(items):
        parts += ([Text("")] if i else []) + [_describe_header(it, now), Text(""), _describe_tree(it, pod_limit, component_limit), Text(""),
                  _describe_resources(it)]
        if it["gangGroups"]:
            parts += [Text(""), _describe_gangs(it)]
    return Group(*parts)
