"""The catalog a command reads through: `--definitions/-d` and `--gpu-resource`.

A module of its own because every command module uses it, and main.py (which
imports the command modules to register them) must not be imported back by them.
"""

from __future__ import annotations

import sys

import click

from workloadmap.catalog import Catalog, DefinitionError, GpuMatcher, Resolver

from .options import FilePath
from .outputs import EXIT_INVALID, error


def catalog_options(f):
    """--definitions and --gpu-resource: the catalog a command reads through."""
    f = click.option("--definitions", "-d", "definition_files", multiple=True, type=FilePath(dir_okay=False),
                     help="Add definitions from a YAML file (repeatable); they override built-ins for the same kind.")(f)
    f = click.option("--gpu-resource", "gpu_resources", multiple=True, metavar="PATTERN",
                     help="Resource names counted as GPUs (glob, repeatable). "
                          "Default: nvidia.com/gpu, nvidia.com/mig-*, amd.com/gpu.")(f)
    return f


def build_catalog(definition_files, gpu_resources) -> Catalog:
    resolver = Resolver(GpuMatcher(gpu_resources)) if gpu_resources else Resolver()
    catalog = Catalog.builtin(resolver=resolver)
    for path in definition_files:
        try:
            catalog.add_file(path)
        except DefinitionError as exc:
            for p in exc.problems:
                error(str(p))
            sys.exit(EXIT_INVALID)
        except OSError as exc:
            error(f"{path}: cannot read: {exc.strerror}")
            sys.exit(EXIT_INVALID)
    return catalog
