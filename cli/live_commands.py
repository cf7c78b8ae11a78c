"""Live commands: `get`, `describe`, `tree`, `resources` and `rbac`, with nothing but a kubeconfig.

They follow kubectl's conventions so they feel like a kubectl plugin (they are
one: ``kubectl workloadmap get ...``): ``--kubeconfig``, ``--context``,
``-n/--namespace`` (default: the context's namespace), ``-A/--all-namespaces``,
``-o table|wide|json|yaml``.  The reading is the library's
(``ingest/inspecting.py``, ``ingest/describing.py``, ``ingest/authorizing.py``);
each command parses its options, calls it and prints what it returns.

Exit codes (outputs.py, the same for every command): 0 success, an empty result
too; 1 a cluster that cannot be used (kubeconfig, connection, 401/403: the
message names the verb and the resource) or an object that cannot be resolved
(the others are still printed); 2 usage errors; 3 no workload of that name (or
its kind is not served); 4 no definition reads that kind; 5 an ambiguous name.
With ``-o json|yaml`` an error is also ``{error, message, hint}`` on stdout.
Warnings (a kind we may not list, an invalid or colliding cluster definition, a
definition's kind not served) go to stderr after the output, grouped by cause.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

import click

from workloadmap.catalog import STATUSES, Catalog, DefinitionError, ObjectIndex, ResolveError, UnknownKindError
from workloadmap.catalog.validating import read_documents
from workloadmap.ingest import describing
from workloadmap.ingest.authorizing import DEFAULT_ROLE_NAME, guess_plural, reader_rbac
from workloadmap.ingest.clusters import ClusterConfigError, current_namespace
from workloadmap.ingest.discovering import AmbiguousTypeError
from workloadmap.ingest.inspecting import (CAUSES, AccessError, AmbiguousNameError, Inspector, NotFoundError,
                                           Notice, namespace_names, workload_names)

from . import rendering
from .catalogs import build_catalog, catalog_options
from .options import FilePath
from .outputs import (EXIT_AMBIGUOUS, EXIT_FAILED, EXIT_NO_DEFINITION, EXIT_NOT_FOUND, emit, error, fail,
                      output_option, terminal_safe)


def warning(message: str) -> None:
    click.echo(terminal_safe(f"warning: {message}"), err=True)


def report_notices(notices: list[Notice]) -> None:
    """The warnings of a command, after its output, grouped by cause (CAUSES' order, then any other)."""
    order = {cause: i for i, cause in enumerate(CAUSES)}
    for notice in sorted(dict.fromkeys(notices), key=lambda n: order.get(n.cause, len(order))):
        warning(f"{notice.cause}: {notice.message}")


_HINTS = {
    "forbidden": "ask for read access: `workloadmap rbac --service-account NS/NAME` prints the role it needs",
    "unauthorized": "the credentials were refused: renew them (kubectl config view, your cloud's login)",
    "unreachable": "check the server in --kubeconfig/--context and that it is up (kubectl cluster-info)",
    "cluster_config": "check --kubeconfig and --context (kubectl config get-contexts)",
    "not_found": "list the workloads with `workloadmap get all` (-A for every namespace)",
    "no_definition": "`workloadmap catalog list` lists the kinds; add one with -d FILE or a WorkloadMap on the cluster",
    "ambiguous": "name one: TYPE/NAME, and -n NAMESPACE",
}


def _classify(exc: Exception) -> tuple[int, str]:
    """Exit status and error name of a failure of a live command."""
    if isinstance(exc, NotFoundError):
        return EXIT_NOT_FOUND, "not_found"
    if isinstance(exc, UnknownKindError):
        return EXIT_NO_DEFINITION, "no_definition"
    if isinstance(exc, (AmbiguousNameError, AmbiguousTypeError)):
        return EXIT_AMBIGUOUS, "ambiguous"
    if isinstance(exc, AccessError):
        return EXIT_FAILED, {401: "unauthorized", 403: "forbidden", 0: "unreachable"}.get(exc.status, "failed")
    if isinstance(exc, ClusterConfigError):
        return EXIT_FAILED, "cluster_config"
    return EXIT_FAILED, "failed"


def fail_live(exc: Exception, output: str | None = None) -> None:
    """A live command's failure: its exit status (`_classify`), one line on stderr, and with
    -o json|yaml the {error, message, hint} object on stdout."""
    code, name = _classify(exc)
    fail(exc, code, output=output, name=name, hint=_HINTS.get(name))


def cluster_options(f):
    """--kubeconfig and --context: which cluster (kubectl's defaults: $KUBECONFIG, ~/.kube/config, current context)."""
    f = click.option("--context", "context", metavar="NAME",
                     help="The kubeconfig context to use (default: the current context).")(f)
    f = click.option("--kubeconfig", "kubeconfig", metavar="PATH",
                     help="Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).")(f)
    return f


def kube_options(f):
    """--kubeconfig, --context, -n/--namespace and -A/--all-namespaces, as kubectl has them."""
    f = click.option("-A", "--all-namespaces", "all_namespaces", is_flag=True,
                     help="Read every namespace.")(f)
    f = click.option("-n", "--namespace", "namespace", metavar="NAMESPACE", shell_complete=complete_namespaces,
                     help="The namespace (default: the context's namespace).")(f)
    return cluster_options(f)


def chosen_namespace(kubeconfig, context, namespace, all_namespaces) -> str | None:
    """The namespace to read: -n, else the context's; None with -A."""
    if all_namespaces:
        return None
    return namespace or current_namespace(kubeconfig, context)


LOOKUP_ERRORS = (AccessError, NotFoundError, AmbiguousNameError, AmbiguousTypeError, ClusterConfigError,
                 UnknownKindError, ResolveError)


@contextmanager
def inspecting(kubeconfig, context, catalog: Catalog, output: str | None = None):
    """An Inspector for the command.  Its warnings are printed when the block ends (after the
    output the block printed); a cluster or look-up failure then is one line and its exit status."""
    try:
        inspector = Inspector.open(catalog, kubeconfig, context, warn=lambda notice: None)
    except (ClusterConfigError, AccessError) as exc:
        fail_live(exc, output)
    try:
        yield inspector
    except LOOKUP_ERRORS as exc:
        report_notices(inspector.notices)
        fail_live(exc, output)
    else:
        report_notices(inspector.notices)
    finally:
        inspector.close()


def add_cluster_definitions(catalog: Catalog, kubeconfig, context) -> None:
    """Read the WorkloadMap definitions applied to a cluster into `catalog` (for `catalog list`, `rbac`)."""
    with inspecting(kubeconfig, context, catalog):
        pass


# -- completion (click's: `workloadmap completion bash|zsh|fish`) ---------------------------------
COMPLETION_SECONDS = 3.0   # a shell waits on the answer: past this, nothing is offered


def _bounded(read, *args) -> list[str]:
    """`read(*args)` in a thread for at most COMPLETION_SECONDS; nothing when it fails or is late
    (an unreachable cluster, a refused token): completion must never print a traceback or hang."""
    found: list[list[str]] = []

    def run():
        try:
            found.append(read(*args))
        except Exception:   # noqa: BLE001 - whatever fails, the shell gets no candidates
            found.append([])
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(COMPLETION_SECONDS)
    return found[0] if found else []


def _cluster_params(ctx) -> tuple:
    params = ctx.params
    namespace = None if params.get("all_namespaces") else params.get("namespace")
    return params.get("kubeconfig"), params.get("context"), namespace


def _kinds(ctx) -> list[str]:
    """The built-in catalog's kinds as kubectl users type them: the plural, lower case."""
    return sorted({guess_plural(kind).lower() for _, kind in Catalog.builtin_kinds()})


def complete_type_and_names(ctx, param, incomplete: str):
    """The first word: a catalog kind (`all` too for get), or TYPE/NAME once a / is typed; the
    words after a TYPE: its workloads' names, read from the cluster."""
    previous = ctx.params.get(param.name) or ()
    kubeconfig, context, namespace = _cluster_params(ctx)
    if "/" in incomplete and not previous:
        type_text, _, prefix = incomplete.partition("/")
        names = _bounded(workload_names, kubeconfig, context, type_text, namespace)
        return [f"{type_text}/{n}" for n in names if n.startswith(prefix)]
    if not previous:
        kinds = _kinds(ctx) + (["all"] if ctx.command.name == "get" else [])
        return [k for k in kinds if k.startswith(incomplete.lower())]
    if previous[0] == "all" or "/" in previous[0]:
        return []
    names = _bounded(workload_names, kubeconfig, context, previous[0], namespace)
    return [n for n in names if n.startswith(incomplete) and n not in previous]


def complete_namespaces(ctx, param, incomplete: str):
    kubeconfig, context, _ = _cluster_params(ctx)
    return [n for n in _bounded(namespace_names, kubeconfig, context) if n.startswith(incomplete)]


def complete_statuses(ctx, param, incomplete: str):
    head, _, last = incomplete.rpartition(",")
    return [f"{head},{s}" if head else s for s in STATUSES if s.lower().startswith(last.lower())]


def _type_and_names(args: tuple[str, ...]) -> tuple[str, list[str]]:
    """``TYPE``, ``TYPE/NAME`` or ``TYPE NAME...`` → (type, names)."""
    type_text, _, first = args[0].partition("/")
    names = [first] if first else []
    for arg in args[1:]:
        other, sep, name = arg.partition("/")
        if sep and other != type_text:
            raise click.UsageError(f"{arg!r}: give names of one type ({type_text!r})")
        names.append(name if sep else arg)
    if any(not n for n in names):
        raise click.UsageError("an empty NAME")
    return type_text, names


def _statuses(values) -> list[str]:
    known = {s.lower(): s for s in STATUSES}
    out = []
    for value in values:
        for part in value.split(","):
            if part.strip():
                if part.strip().lower() not in known:
                    raise click.BadParameter(f"{part!r} is not a status; one of {', '.join(STATUSES)}",
                                             param_hint="--status")
                out.append(known[part.strip().lower()])
    return out


@click.command()
@click.argument("type_and_names", nargs=-1, metavar="TYPE[/NAME] [NAME]... | all", shell_complete=complete_type_and_names)
@click.option("--all-types", "all_types", is_flag=True,
              help="Every catalog kind the cluster serves (as `get all`): top-level workloads only, with a TYPE column.")
@click.option("--status", "statuses", multiple=True, metavar="STATUS[,STATUS]", shell_complete=complete_statuses,
              help="Keep workloads in these statuses, resolved or any other matched one (repeatable, any case): "
              + ", ".join(STATUSES) + ".")
@click.option("-l", "--selector", "selector", metavar="SELECTOR",
              help="Label selector, as kubectl's (-l team=vision,tier!=batch).")
@click.option("--chunk-size", "chunk_size", type=click.IntRange(min=0), default=500, show_default=True,
              help="List in pages of this many objects (0: one request).")
@kube_options
@catalog_options
@output_option("table", "wide", "json", "yaml", default="table")
def get(type_and_names, all_types, statuses, selector, chunk_size, kubeconfig, context, namespace, all_namespaces,
        definition_files, gpu_resources, output):
    """List live workloads of a type, or of every type: status, components, GPUs, age.

    TYPE is a catalog kind as kubectl users type it: kind, plural, short name,
    any case, or qualified (pytorchjobs.kubeflow.org).  `get all` (or
    --all-types) lists every catalog kind the cluster serves in one table with a
    TYPE column, leaving a workload that another listed workload controls (a
    JobSet's Jobs, a RayJob's RayCluster) to its owner; a kind you may not list
    is a warning.  `-o wide` adds the kind, ready/desired pods (read from the
    workloads' pods), CPU, memory and the definition.
    """
    if type_and_names[:1] == ("all",):
        if len(type_and_names) > 1:
            raise click.UsageError("`get all` takes no NAME")
        all_types = True
    elif all_types and type_and_names:
        raise click.UsageError("--all-types takes no TYPE or NAME")
    elif not type_and_names and not all_types:
        raise click.UsageError("give a TYPE (or `all`)")
    wanted = _statuses(statuses)
    catalog = build_catalog(definition_files, gpu_resources)
    ns = chosen_namespace(kubeconfig, context, namespace, all_namespaces)
    with inspecting(kubeconfig, context, catalog, output) as inspector:
        if all_types:
            listing = inspector.all_workloads(ns, label_selector=selector, statuses=wanted, chunk_size=chunk_size,
                                              with_pods=output == "wide")
        else:
            type_text, names = _type_and_names(type_and_names)
            listing = inspector.workloads(type_text, ns, names, label_selector=selector, statuses=wanted,
                                          chunk_size=chunk_size, with_pods=output == "wide")
        if listing.missing and not listing.items and not listing.errors:
            raise NotFoundError("; ".join(listing.missing))
        table, wide = ((rendering.all_types_table, rendering.all_types_wide_table) if all_types
                       else (rendering.live_table, rendering.live_wide_table))
        emit(output, listing.items, table=table, wide=wide)
    for message in listing.missing + listing.errors:
        error(message)
    if listing.errors:
        sys.exit(EXIT_FAILED)
    if listing.missing:
        sys.exit(EXIT_NOT_FOUND)


def _show_one(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources, output,
              **renderers) -> None:
    """`tree` and `resources`: one workload with its pods (`Inspector.describe`), printed before the warnings."""
    catalog = build_catalog(definition_files, gpu_resources)
    ns = chosen_namespace(kubeconfig, context, namespace, all_namespaces)
    with inspecting(kubeconfig, context, catalog, output) as inspector:
        emit(output, [inspector.describe(name, ns)], **renderers)


@click.command()
@click.argument("type_and_name", nargs=-1, metavar="[TYPE/]NAME | TYPE NAME", shell_complete=complete_type_and_names)
@click.option("-f", "--filename", "file", metavar="FILE", type=FilePath(dir_okay=False, allow_dash=True),
              help="Describe the workload of a manifest offline ('-' reads stdin): no cluster, no pods.")
@click.option("--pod-limit", "pod_limit", type=click.IntRange(min=0), default=0,
              help="Show at most N pods per component instance, unhealthy first (0: all). Table only.")
@click.option("--component-limit", "component_limit", type=click.IntRange(min=0), default=0,
              help="Show at most N component instances under each parent, unhealthy first (0: all). Table only.")
@kube_options
@catalog_options
@output_option("table", "json", "yaml", default="table")
def describe(type_and_name, file, pod_limit, component_limit, kubeconfig, context, namespace, all_namespaces,
             definition_files, gpu_resources, output):
    """One workload on one screen: header, component tree, pods, resources, gang groups.

    The header names the kind, namespace, definition (and where it comes from),
    age and every status the workload matched (the resolved one marked *).  The
    tree gives ready/actual/desired pods per component and instance, each pod's
    phase, reason, node and GPUs; RESOURCES gives the GPUs the spec requests,
    those allocated to bound pods and those pending on pods without a node, with
    a TOTAL row; GANGS the pods each gang group needs.  Unhealthy pods and
    components come first, so --pod-limit and --component-limit keep them.

    With -f the manifest is resolved offline (the structure and desired scale
    are real, nothing live is shown).  NAME alone is searched among every
    catalog kind the cluster serves.
    """
    if file is not None:
        if type_and_name:
            raise click.UsageError("-f reads the kind and name from the manifest: give no TYPE/NAME")
        items = _describe_manifest(file, definition_files, gpu_resources, output)
    else:
        if not type_and_name or len(type_and_name) > 2:
            raise click.UsageError("give [TYPE/]NAME or TYPE NAME (or -f FILE)")
        text = "/".join(type_and_name)
        catalog = build_catalog(definition_files, gpu_resources)
        ns = chosen_namespace(kubeconfig, context, namespace, all_namespaces)
        with inspecting(kubeconfig, context, catalog, output) as inspector:
            items = [describing.describe(inspector, text, ns)]
            _emit_described(items, output, pod_limit, component_limit)
        return
    _emit_described(items, output, pod_limit, component_limit)


def _emit_described(items, output, pod_limit, component_limit) -> None:
    emit(output, items, table=lambda its: rendering.describe_screens(its, pod_limit=pod_limit,
                                                                     component_limit=component_limit))


def _describe_manifest(path: str, definition_files, gpu_resources, output) -> list[dict]:
    """The describe views of the workloads in a manifest file; the objects a definition's references
    name (a TrainJob's runtime) are read from the same file."""
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc.strerror}", param_hint="-f") from None
    try:
        docs = [d for d in read_documents(text, path) if isinstance(d, dict)]
    except DefinitionError as exc:
        raise click.BadParameter("; ".join(str(p) for p in exc.problems), param_hint="-f") from None
    catalog = build_catalog(definition_files, gpu_resources)
    referenced = [d for d in docs if catalog.is_referenced_kind(str(d.get("apiVersion") or ""), str(d.get("kind") or ""))]
    workloads = [d for d in docs if not any(d is r for r in referenced)]
    if not workloads:
        raise click.BadParameter(f"{path}: no object to describe", param_hint="-f")
    related = ObjectIndex(referenced)
    items = []
    for obj in workloads:
        try:
            items.append(describing.describe_object(catalog, obj, related))
        except (UnknownKindError, ResolveError) as exc:
            code, name = _classify(exc)
            fail(f"{path}: {exc}", code, output=output, name=name, hint=_HINTS.get(name))
    return items


@click.command()
@click.argument("name", metavar="[TYPE/]NAME", shell_complete=complete_type_and_names)
@kube_options
@catalog_options
@output_option("tree", "json", "yaml", default="tree")
def tree(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources, output):
    """One workload as a tree: components → instances → pods, with desired vs actual pods,
    readiness, nodes and GPUs per pod.

    NAME alone is searched among every catalog kind the cluster serves; an
    ambiguous name lists the candidates (then give TYPE/NAME).
    """
    _show_one(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources, output,
              tree=rendering.live_trees)


@click.command()
@click.argument("name", metavar="[TYPE/]NAME", shell_complete=complete_type_and_names)
@kube_options
@catalog_options
@output_option("table", "json", "yaml", default="table")
def resources(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources, output):
    """One workload's resources per component: desired, actual and ready pods, GPU / CPU / memory
    requested by the spec and GPUs of the live pods, with a TOTAL row."""
    _show_one(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources, output,
              table=rendering.resources_tables)


@click.command()
@click.option("--service-account", "service_account", required=True, metavar="NAMESPACE/NAME",
              help="The service account to bind the role to.")
@click.option("--name", "role_name", default=DEFAULT_ROLE_NAME, show_default=True,
              help="Name of the ClusterRole and of its ClusterRoleBinding.")
@cluster_options
@catalog_options
@output_option("yaml", "json", default="yaml")
def rbac(service_account, role_name, kubeconfig, context, definition_files, gpu_resources, output):
    """Print the read-only ClusterRole workloadmap needs, and its binding to a service account.

    get/list/watch on the catalog kinds, their additionalChildKinds, pods and
    WorkloadMap definitions; nothing else.  Secrets and ConfigMaps are never
    granted, even when a definition lists them.  With --kubeconfig/--context the
    cluster's definitions count too and resource names come from its discovery.
    YAML is a multi-document stream for `kubectl apply -f -`; JSON is {items, count}.
    """
    catalog = build_catalog(definition_files, gpu_resources)
    served = None
    if kubeconfig or context:
        with inspecting(kubeconfig, context, catalog, output) as inspector:
            served = inspector.served
    try:
        manifests = reader_rbac(catalog, service_account, role_name, served)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--service-account") from None
    if output == "yaml":
        click.echo(manifests.to_yaml(), nl=False)
    else:
        emit(output, manifests.items)


def register(cli: click.Group) -> None:
    """Add `get`, `describe`, `tree`, `resources` and `rbac` to the `workloadmap` command group."""
    for command in (get, describe, tree, resources, rbac):
        cli.add_command(command)
