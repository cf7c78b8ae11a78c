"""The real ``helm`` command for the chart tests, built from the Go module proxy.

Release binaries cannot be downloaded on our machines, so ``tests/services/helm/`` is a
Go module whose only content is a ``tool helm.sh/helm/v4/cmd/helm`` directive pinning
helm and every module it needs (go.sum); ``build()`` compiles that command once into
``~/.cache/workloadmap/helm-<version>/helm`` (GOMODCACHE shared with the kube-apiserver
build) and rebuilds only when go.mod or go.sum change (a stamp records their hash), under
a file lock, moved into place whole: the same discipline as ``kube_api.build``.

Usage::

    from tests.services.helm_cli import helm
    out = helm("template", "rel", "charts/workloadmap", "-f", "values.yaml")   # stdout

Command line (from the repository root)::

    python -m tests.services.helm_cli build   # build helm if needed (nothing when
                                              # WORKLOADMAP_NO_HELM=1)

helm runs with a private HOME-like set of folders (``HELM_CONFIG_HOME`` and friends in a
temp dir) so a developer's own repositories and plugins never change what a test sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.services.go_building import GoProgram

HERE = Path(__file__).resolve().parent / "helm"
NO_HELM_ENV = "WORKLOADMAP_NO_HELM"


class HelmError(RuntimeError):
    """helm could not be built, or a helm command failed (its stderr in the message)."""


# `helm version` and the chart's .Capabilities.HelmVersion say the pinned version
HELM = GoProgram("helm", HERE, "helm.sh/helm/v4", ("helm.sh/helm/v4/cmd/helm",), ("helm",),
                 lambda version: f"-s -w -X helm.sh/helm/v4/internal/version.version={version}", HelmError)


def helm_version() -> str:
    """The helm version pinned in go.mod (``v4.3.2``), the one source of truth."""
    return HELM.version


def build(*, quiet: bool = False) -> Path:
    """Return the path of the ``helm`` binary, building it if needed (minutes the first time)."""
    return HELM.build(quiet=quiet) / "helm"


def helm(*args: str, timeout: float = 120.0) -> str:
    """Run ``helm ARGS`` (built if needed) with private config/cache/data folders; its stdout.
    HelmError with helm's stderr when it exits non-zero."""
    path = build(quiet=True)
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env = {**os.environ, "HELM_CONFIG_HOME": f"{home}/config", "HELM_CACHE_HOME": f"{home}/cache",
               "HELM_DATA_HOME": f"{home}/data"}  # fmt: skip
        res = subprocess.run([str(path), *args], env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if res.returncode != 0:
        raise HelmError(f"helm {' '.join(args)}: exit {res.returncode}\n{res.stderr.strip()}\n{res.stdout[-2000:]}")
    return res.stdout


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["build"]:
        print("usage: python -m tests.services.helm_cli build", file=sys.stderr)
        return 2
    if os.environ.get(NO_HELM_ENV, "") == "1":
        print(f"helm: {NO_HELM_ENV}=1, not building", file=sys.stderr)
        return 0
    try:
        print(build(), flush=True)
    except HelmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
