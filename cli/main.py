"""The `workloadmap` command: a thin layer over the library.

Each command reads its input, calls the library, and hands the JSON form of
the result to the shared output bundle (outputs.py).  Exit codes: 0 success;
1 invalid input (a definition with problems, malformed YAML, an object of an
unknown kind or one that cannot be resolved; the other objects are still
printed); 2 usage errors.
"""

from __future__ import annotations

import sys
from importlib import resources

import click
import yaml

from workloadmap import __version__
from workloadmap.catalog import DefinitionError, ObjectIndex, ResolveError, UnknownKindError, exporting
from workloadmap.catalog.registry import bundled_related
from workloadmap.catalog.workloads import missing_references
from workloadmap.catalog.validating import Problem, read_documents, validate_file
from workloadmap.ingest.watching import WatchingFailed
from workloadmap.settings import BrokerUnavailable
from workloadmap.warehouse.exporting import ExportExists
from workloadmap.warehouse.pricing import PricingError
from workloadmap.warehouse.querying import WarehouseUnavailable

from . import analytics_commands, cost_commands, live_commands, pipeline_commands, rendering
from .catalogs import build_catalog, catalog_options
from .options import FilePath
from .outputs import EXIT_INTERRUPTED, EXIT_INVALID, emit, error, output_option, terminal_safe

# What a command cannot have, said in one line: the warehouse file (missing, held by a writer,
# damaged, not writable), the broker, the cluster's watchers that stopped.
UNAVAILABLE = (WarehouseUnavailable, BrokerUnavailable, WatchingFailed, ExportExists, PricingError, OSError)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="workloadmap")
def cli():
    """Read every AI workload kind on Kubernetes through one declarative catalog."""


# -- resolve -------------------------------------------------------------------
def _read_inputs(files, examples: bool):
    """(source, object) pairs from files ('-' is stdin) or the bundled examples."""
    sources = []
    if examples:
        folder = resources.files("workloadmap.catalog").joinpath("examples")
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".yaml"):
                sources.append((f"example:{entry.name}", entry.read_text(encoding="utf-8")))
    for path in files:
        if path == "-":
            sources.append(("<stdin>", sys.stdin.read()))
        else:
            try:
                with open(path, encoding="utf-8") as fh:
                    sources.append((path, fh.read()))
            except OSError as exc:
                raise click.BadParameter(f"{path}: {exc.strerror}", param_hint="-f") from None
    for source, text in sources:
        try:
            docs = read_documents(text, source)
        except DefinitionError as exc:
            yield source, exc
            continue
        for doc in docs:
            yield source, doc


@cli.command()
@click.option("-f", "--filename", "files", multiple=True, metavar="FILE", type=FilePath(dir_okay=False, allow_dash=True),
              help="YAML or JSON file of objects (multi-document, lists); '-' reads stdin. Repeatable.")
@click.option("--examples", is_flag=True, help="Resolve the bundled example objects of every framework.")
@catalog_options
@output_option("table", "tree", "json", "yaml", default="table")
def resolve(files, examples, definition_files, gpu_resources, output):
    """Resolve workload objects offline: status, components, pods and resources."""
    if not files and not examples:
        raise click.UsageError("give -f FILE (or -f - for stdin), or --examples")
    catalog = build_catalog(definition_files, gpu_resources)
    items, failed = [], False
    inputs = list(_read_inputs(files, examples))
    if examples:
        inputs += [("example:related", obj) for obj in bundled_related()]
    # objects a definition's references name (a TrainJob's runtime) are read from the same inputs:
    # the lookup of their workloads, not workloads themselves
    related = ObjectIndex(obj for _, obj in inputs
                          if isinstance(obj, dict) and catalog.is_referenced_kind(str(obj.get("apiVersion") or ""),
                                                                                  str(obj.get("kind") or "")))
    for source, obj in inputs:
        if isinstance(obj, DefinitionError):
            for p in obj.problems:
                error(str(p))
            failed = True
            continue
        if isinstance(obj, dict) and catalog.is_referenced_kind(str(obj.get("apiVersion") or ""),
                                                                str(obj.get("kind") or "")):
            continue
        try:
            item = catalog.resolve(obj, related).to_dict()
        except (UnknownKindError, ResolveError) as exc:
            error(f"{source}: {exc}")
            failed = True
            continue
        items.append(item)
        for message in missing_references(item):
            error(f"{source}: {message} (give it in the same files)")
    emit(output, items, table=rendering.workload_table, tree=rendering.workload_trees)
    if failed:
        sys.exit(EXIT_INVALID)


# -- catalog -------------------------------------------------------------------
@cli.group("catalog")
def catalog_group():
    """List, show and validate definitions."""


@catalog_group.command("list")
@catalog_options
@live_commands.cluster_options
@output_option("table", "json", "yaml", default="table")
def catalog_list(definition_files, gpu_resources, kubeconfig, context, output):
    """List the definitions: kind, framework, components and origin (built-in, file, cluster).

    With --kubeconfig or --context, the WorkloadMap definitions applied to that
    cluster are read too (they override built-ins and files for the same kind).
    """
    catalog = build_catalog(definition_files, gpu_resources)
    if kubeconfig or context:
        live_commands.add_cluster_definitions(catalog, kubeconfig, context)
    emit(output, [d.to_dict() for d in catalog], table=rendering.definition_table)


@catalog_group.command("show")
@click.argument("name")
@catalog_options
@output_option("yaml", "json", "tree", "karta", default="yaml")
def catalog_show(name, definition_files, gpu_resources, output):
    """Show one definition (by name) as written, or its component tree.

    `-o karta` prints it as an upstream `run.ai/v1alpha1 Karta` document, one an API server
    with upstream's CRD accepts: workloadmap's extensions are left out (named on stderr).
    """
    catalog = build_catalog(definition_files, gpu_resources)
    try:
        d = catalog.get(name)
    except KeyError as exc:
        error(exc.args[0])
        sys.exit(EXIT_INVALID)
    if output == "tree":
        emit(output, [d.to_dict()], tree=rendering.definition_trees)
    elif output == "karta":
        doc, dropped = exporting.karta_document(d)
        if dropped:
            live_commands.warning(f"left out workloadmap extensions upstream does not know: {', '.join(dropped)}")
        click.echo(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), nl=False)
    else:
        emit(output, [d.document])


@catalog_group.command("validate")
@click.argument("files", nargs=-1, required=True, type=FilePath(dir_okay=False))
@output_option("table", "json", "yaml", default="table")
def catalog_validate(files, output):
    """Validate definition files: schema, jq and structure. Exit 1 on any problem."""
    problems: list[Problem] = []
    for path in files:
        found = validate_file(path)
        problems.extend(found)
        if not found and output == "table":
            click.echo(f"{path}: ok", err=True)
    items = [{"file": p.file, "definition": p.definition, "path": p.path, "reason": p.reason} for p in problems]
    if output == "table":
        for p in problems:  # one line per problem, like a compiler: FILE: definition 'x': FIELD: reason
            click.echo(terminal_safe(str(p)))
    else:
        emit(output, items)
    if problems:
        sys.exit(EXIT_INVALID)


# -- completion -----------------------------------------------------------------
COMPLETE_VAR = "_WORKLOADMAP_COMPLETE"
INTERRUPT_AGAIN = 0.2   # seconds between interrupts once Ctrl-C came (_watch_interrupts)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell):
    """Print the shell completion script (click's) for bash, zsh or fish.

    It completes commands, options, catalog kinds, and the workload names and
    namespaces of the cluster (--kubeconfig/--context as typed; nothing when the
    cluster does not answer within a few seconds).  Load it once per shell:

    \b
      bash: eval "$(workloadmap completion bash)"     (or save it under ~/.bash_completion.d/)
      zsh:  eval "$(workloadmap completion zsh)"      (after compinit)
      fish: workloadmap completion fish > ~/.config/fish/completions/workloadmap.fish
    """
    from click.shell_completion import get_completion_class
    click.echo(get_completion_class(shell)(cli, {}, "workloadmap", COMPLETE_VAR).source())


pipeline_commands.register(cli)
analytics_commands.register(cli)
cost_commands.register(cli)
live_commands.register(cli)


def main(prog_name: str = "workloadmap"):
    """Run the command; what escapes it becomes one line and an exit status, never a traceback.

    Ctrl-C exits 130 with one line, even in a DuckDB query (which does not look at Python's
    signal flag: ``_watch_interrupts`` interrupts it).  A warehouse or broker that cannot be
    had is one line and status 1; click's own errors keep click's form and status 2."""
    from workloadmap.warehouse import interrupting

    interrupted = _watch_interrupts(interrupting.interrupt_all)
    try:
        try:
            cli.main(prog_name=prog_name, complete_var=COMPLETE_VAR, standalone_mode=False)
        except click.Abort as exc:
            if isinstance(exc.__context__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            raise
    except KeyboardInterrupt:
        _interrupted()
    except BaseException as exc:
        if interrupted.is_set():   # whatever the interrupted query raised on its way out
            _interrupted()
        if isinstance(exc, SystemExit):
            raise
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.Abort):
            click.echo("Aborted!", err=True)
            sys.exit(1)
        if isinstance(exc, BrokenPipeError):   # `workloadmap ... | head`: the reader is gone
            sys.stderr.close()
            sys.exit(1)
        if isinstance(exc, UNAVAILABLE):
            error(f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.filename and exc.strerror
                  else str(exc))
            sys.exit(EXIT_INVALID)
        raise
    sys.exit(0)


def _interrupted():
    click.echo("interrupted", err=True)
    sys.exit(EXIT_INTERRUPTED)


def _watch_interrupts(interrupt):
    """Call `interrupt` from a thread as soon as SIGINT arrives (the main thread may be inside a
    C call that Python's handler waits for); the returned event tells that it came."""
    import os
    import signal
    import threading
    import time

    came = threading.Event()
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:   # not the main thread (an embedding caller): Python's handler only
        return came

    def watch():
        while True:
            data = os.read(read, 64)
            if signal.SIGINT in data:
                came.set()
                # Again and again until the process has gone: DuckDB clears a connection's
                # interrupt when a query begins, so a signal that came while the query was
                # entering C (after Python's last look at its flag) would be lost, and the
                # KeyboardInterrupt Python keeps for it would wait for the whole query.
                while True:
                    interrupt()
                    time.sleep(INTERRUPT_AGAIN)
    threading.Thread(target=watch, name="sigint-watcher", daemon=True).start()
    return came


def kubectl_main():
    """`kubectl workloadmap ...`: the same commands, as a kubectl plugin (kubectl-workloadmap on PATH)."""
    main(prog_name="kubectl workloadmap")


def kubectl_complete_main():
    """`kubectl workloadmap <TAB>`: kubectl (1.26 and later) runs ``kubectl_complete-workloadmap``
    with the words after the plugin's name, the last one being completed, and reads cobra's
    answer: one candidate a line, then ``:4`` (no file names).  The candidates are click's,
    the same as `workloadmap completion` gives a shell."""
    from click.shell_completion import ShellComplete

    args = sys.argv[1:] or [""]
    try:
        items = ShellComplete(cli, {}, "workloadmap", COMPLETE_VAR).get_completions(args[:-1], args[-1])
    except Exception:   # noqa: BLE001 - a completion never prints a traceback
        items = []
    for item in items:
        click.echo(item.value)
    click.echo(":4")
