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

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.services.kube_api import CACHE_ROOT, GOMODCACHE, KubeAPIError, _check_go, _go

HERE = Path(__file__).resolve().parent / "helm"
GO_MOD = HERE / "go.mod"
GO_SUM = HERE / "go.sum"
PACKAGE = "helm.sh/helm/v4/cmd/helm"
NO_HELM_ENV = "WORKLOADMAP_NO_HELM"
_STAMP = ".stamp"


class HelmError(RuntimeError):
    """helm could not be built, or a helm command failed (its stderr in the message)."""


def helm_version() -> str:
    """The helm version pinned in go.mod (``v4.3.2``), the one source of truth."""
    m = re.search(r"^\s*helm\.sh/helm/v4 (v\S+)", GO_MOD.read_text(), re.M)
    if not m:
        raise HelmError(f"no helm.sh/helm/v4 requirement in {GO_MOD}")
    return m.group(1)


def binary() -> Path:
    return CACHE_ROOT / f"helm-{helm_version()}" / "helm"


def _ldflags() -> str:
    # `helm version` and the chart's .Capabilities.HelmVersion say the pinned version
    return f"-s -w -X helm.sh/helm/v4/internal/version.version={helm_version()}"


def _sources_hash() -> str:
    h = hashlib.sha256()
    for path in (GO_MOD, GO_SUM):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(_ldflags().encode())
    return h.hexdigest()


def _current(target: Path) -> bool:
    stamp = target.parent / _STAMP
    return stamp.is_file() and stamp.read_text().strip() == _sources_hash() and os.access(target, os.X_OK)


def build(*, quiet: bool = False) -> Path:
    """Return the path of the ``helm`` binary, building it if needed (minutes the first time)."""
    target = binary()
    if _current(target):
        return target
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with open(CACHE_ROOT / "helm-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _current(target):
            return target
        try:
            go = _go()
            _check_go(go)
        except KubeAPIError as e:
            raise HelmError(str(e).replace("kube-apiserver and etcd", "helm")) from None
        staging = Path(tempfile.mkdtemp(prefix="helm-build-", dir=CACHE_ROOT))
        try:
            env = {**os.environ, "GOMODCACHE": str(GOMODCACHE), "GOFLAGS": "-mod=readonly"}
            cmd = [go, "build", "-trimpath", "-ldflags", _ldflags(), "-o", str(staging / "helm"), PACKAGE]
            say(f"helm: building {helm_version()} into {target.parent} (GOMODCACHE={GOMODCACHE})")
            started = time.monotonic()
            res = subprocess.run(cmd, cwd=HERE, env=env, stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True)  # fmt: skip
            if res.returncode != 0 or not os.access(staging / "helm", os.X_OK):
                raise HelmError(f"building helm failed (exit {res.returncode}) in {HERE}: {' '.join(cmd)}\n"
                                + "\n".join((res.stdout + res.stderr).splitlines()[-40:]))  # fmt: skip
            target.parent.mkdir(parents=True, exist_ok=True)
            (target.parent / _STAMP).unlink(missing_ok=True)
            os.replace(staging / "helm", target)
            (target.parent / _STAMP).write_text(_sources_hash() + "\n")
            say(f"helm: built in {time.monotonic() - started:.0f} s")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


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
