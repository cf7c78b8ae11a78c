"""Live commands: `get`, `tree`, `resources` and `rbac`, with nothing but a kubeconfig.

They follow kubectl's conventions so they feel like a kubectl plugin (they are
one: ``kubectl workloadmap get ...``): ``--kubeconfig``, ``--context``,
``-n/--namespace`` (default: the context's namespace), ``-A/--all-namespaces``,
``-o table|wide|json|yaml``.  The reading is the library's
(``ingest/inspecting.py``, ``ingest/authorizing.py``); each command parses its
options, calls it and prints what it returns.

Exit codes: 0 success; 1 a cluster that cannot be used (kubeconfig, connection,
401/403: the message names the verb and the resource), an unknown type or
name, or an object that cannot be resolved (reported naming the object; the
others are still printed); 2 usage errors.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import click

from workloadmap.catalog import STATUSES, Catalog, ResolveError, UnknownKindError
from workloadmap.ingest.authorizing import DEFAULT_ROLE_NAME, reader_rbac
from workloadmap.ingest.clusters import ClusterConfigError, current_namespace
from workloadmap.ingest.discovering import AmbiguousTypeError
from workloadmap.ingest.inspecting import AccessError, AmbiguousNameError, Inspector, NotFoundError

from . import rendering
from .catalogs import build_catalog, catalog_options
from .outputs import emit, error, fail, output_option, terminal_safe

EXIT_INVALID = 1


def warning(message: str) -> None:
    click.echo(terminal_safe(f"warning: {message}"), err=True)


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
    f = click.option("-n", "--namespace", "namespace", metavar="NAMESPACE",
                     help="The namespace (default: the context's namespace).")(f)
    return cluster_options(f)


def chosen_namespace(kubeconfig, context, namespace, all_namespaces) -> str | None:
    """The namespace to read: -n, else the context's; None with -A."""
    if all_namespaces:
        return None
    return namespace or current_namespace(kubeconfig, context)


@contextmanager
def inspecting(kubeconfig, context, catalog: Catalog):
    """An Inspector for the command; every cluster or look-up failure is a one-line error, exit 1."""
    try:
        inspector = Inspector.open(catalog, kubeconfig, context, warn=warning)
    except (ClusterConfigError, AccessError) as exc:
        fail(exc)
    try:
        yield inspector
    except (AccessError, NotFoundError, AmbiguousNameError, AmbiguousTypeError, ClusterConfigError,
            UnknownKindError, ResolveError) as exc:
        fail(exc)
    finally:
        inspector.close()


def add_cluster_definitions(catalog: Catalog, kubeconfig, context) -> None:
    """Read the WorkloadMap definitions applied to a cluster into `catalog` (for `catalog list`, `rbac`)."""
    with inspecting(kubeconfig, context, catalog):
        pass


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
@click.argument("type_and_names", nargs=-1, required=True, metavar="TYPE[/NAME] [NAME]...")
@click.option("--status", "statuses", multiple=True, metavar="STATUS[,STATUS]",
              help="Keep workloads in these statuses, resolved or any other matched one (repeatable, any case): "
              + ", ".join(STATUSES) + ".")
@click.option("-l", "--selector", "selector", metavar="SELECTOR",
              help="Label selector, as kubectl's (-l team=vision,tier!=batch).")
@click.option("--chunk-size", "chunk_size", type=click.IntRange(min=0), default=500, show_default=True,
              help="List in pages of this many objects (0: one request).")
@kube_options
@catalog_options
@output_option("table", "wide", "json", "yaml", default="table")
def get(type_and_names, statuses, selector, chunk_size, kubeconfig, context, namespace, all_namespaces,
        definition_files, gpu_resources, output):
    """List live workloads of a type: status, components, GPUs, age.

    TYPE is a catalog kind as kubectl users type it: kind, plural, short name,
    any case, or qualified (pytorchjobs.kubeflow.org).  `-o wide` adds the kind,
    ready/desired pods (read from the workloads' pods), CPU, memory and the definition.
    """
    type_text, names = _type_and_names(type_and_names)
    wanted = _statuses(statuses)
    catalog = build_catalog(definition_files, gpu_resources)
    ns = chosen_namespace(kubeconfig, context, namespace, all_namespaces)
    with inspecting(kubeconfig, context, catalog) as inspector:
        listing = inspector.workloads(type_text, ns, names, label_selector=selector, statuses=wanted,
                                      chunk_size=chunk_size, with_pods=output == "wide")
    emit(output, listing.items, table=rendering.live_table, wide=rendering.live_wide_table)
    for message in listing.errors:
        error(message)
    if listing.errors:
        sys.exit(EXIT_INVALID)


def _describe(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources) -> dict:
    catalog = build_catalog(definition_files, gpu_resources)
    ns = chosen_namespace(kubeconfig, context, namespace, all_namespaces)
    with inspecting(kubeconfig, context, catalog) as inspector:
        return inspector.describe(name, ns)


@click.command()
@click.argument("name", metavar="[TYPE/]NAME")
@kube_options
@catalog_options
@output_option("tree", "json", "yaml", default="tree")
def tree(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources, output):
    """One workload as a tree: components → instances → pods, with desired vs actual pods,
    readiness, nodes and GPUs per pod.

    NAME alone is searched among every catalog kind the cluster serves; an
    ambiguous name lists the candidates (then give TYPE/NAME).
    """
    item = _describe(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources)
    emit(output, [item], tree=rendering.live_trees)


@click.command()
@click.argument("name", metavar="[TYPE/]NAME")
@kube_options
@catalog_options
@output_option("table", "json", "yaml", default="table")
def resources(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources, output):
    """One workload's resources per component: desired, actual and ready pods, GPU / CPU / memory
    requested by the spec and GPUs of the live pods, with a TOTAL row."""
    item = _describe(name, kubeconfig, context, namespace, all_namespaces, definition_files, gpu_resources)
    emit(output, [item], table=rendering.resources_tables)


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
        with inspecting(kubeconfig, context, catalog) as inspector:
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
    """Add `get`, `tree`, `resources` and `rbac` to the `workloadmap` command group."""
    for command in (get, tree, resources, rbac):
        cli.add_command(command)
