"""Building the Go programs the test services run (kube-apiserver and etcd, helm) from the module proxy.

Release binaries cannot be downloaded on our machines, so each program is a small Go module under
``tests/services/`` pinning the upstream module (go.mod, go.sum), compiled once into
``~/.cache/workloadmap/<name>-<version>/`` (GOMODCACHE shared in ``~/.cache/workloadmap/gomod``,
GOCACHE Go's default ``~/.cache/go-build``).  The same discipline for every program, so that an
interrupted or concurrent build never leaves a half-built set and an unchanged module is never
built twice:

- a stamp file, written last into the folder, records the hash of the module's sources and the
  link flags; the binaries are current when the stamp matches and every binary is executable;
- binaries are built into a temporary folder and moved into place whole, under a file lock (a
  second process waits for the first and then finds them current);
- progress goes to stderr, a line every 30 s (a cold build takes minutes, and the linker is silent).
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workloadmap"
GOMODCACHE = CACHE_ROOT / "gomod"
_STAMP = ".stamp"


@dataclass(frozen=True)
class GoProgram:
    """One pinned Go module of the test services and what building it gives.

    `module` is the folder of go.mod; `requirement` the module go.mod pins whose version names the
    build (``k8s.io/kubernetes``); `packages` what ``go build`` compiles, each giving the binary of
    its last path element; `sources` the files besides go.mod and go.sum whose change means a
    rebuild (globs under `module`); `ldflags(version)` the link flags; `error` what a failure raises.
    """

    name: str
    module: Path
    requirement: str
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    ldflags: object
    error: type[Exception]
    sources: tuple[str, ...] = ()
    cold: str = ""   # how long a cold build takes, said when it starts

    @property
    def version(self) -> str:
        """The version go.mod pins, the one source of truth."""
        m = re.search(rf"^\s*{re.escape(self.requirement)} (v\S+)", (self.module / "go.mod").read_text(), re.M)
        if not m:
            raise self.error(f"no {self.requirement} requirement in {self.module / 'go.mod'}")
        return m.group(1)

    @property
    def folder(self) -> Path:
        return CACHE_ROOT / f"{self.name}-{self.version}"

    def sources_hash(self) -> str:
        h = hashlib.sha256()
        files = [self.module / "go.mod", self.module / "go.sum"]
        for pattern in self.sources:
            files.extend(sorted(self.module.glob(pattern)))
        for path in files:
            h.update(path.relative_to(self.module).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        h.update(self.ldflags(self.version).encode())
        return h.hexdigest()

    def current(self) -> bool:
        stamp = self.folder / _STAMP
        return (stamp.is_file() and stamp.read_text().strip() == self.sources_hash()
                and all(os.access(self.folder / name, os.X_OK) for name in self.binaries))

    def build(self, *, quiet: bool = False) -> Path:
        """The folder holding the binaries, built first if they are not current (see the module docstring)."""
        target = self.folder
        if self.current():
            return target
        CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
        with open(CACHE_ROOT / f"{self.name}-build.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"{self.name}: another process is building {self.what}; waiting for it")
                fcntl.flock(lock, fcntl.LOCK_EX)
            if self.current():
                return target
            go = self._go()
            self._run_build(go, target, say)
        return target

    @property
    def what(self) -> str:
        return " and ".join(self.binaries)

    def _go_needed(self) -> str:
        m = re.search(r"^go (\d+\.\d+(?:\.\d+)?)", (self.module / "go.mod").read_text(), re.M)
        return m.group(1) if m else "1.26"

    def _go(self) -> str:
        """The go command, of at least the version go.mod's ``go`` line asks for."""
        go = shutil.which("go") or next(
            (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.access(p, os.X_OK)), None)
        if not go:
            raise self.error(f"go not found: building {self.what} needs Go >= {self._go_needed()} on PATH "
                             "(https://go.dev/dl/; Debian's golang-go is too old)")
        out = subprocess.run([go, "version"], capture_output=True, text=True).stdout
        m = re.search(r"go(\d+)\.(\d+)(?:\.(\d+))?", out)
        have = tuple(int(x or 0) for x in m.groups()) if m else (0, 0, 0)
        need = tuple(int(x) for x in (self._go_needed().split(".") + ["0"])[:3])
        if have < need:
            raise self.error(f"building {self.what} needs Go >= {self._go_needed()}; {go} is: {out.strip()}")
        return go

    def _run_build(self, go: str, target: Path, say) -> None:
        version = self.version
        staging = Path(tempfile.mkdtemp(prefix=f"{self.name}-build-", dir=CACHE_ROOT))
        env = {**os.environ, "GOMODCACHE": str(GOMODCACHE), "GOFLAGS": "-mod=readonly"}
        cmd = [go, "build", "-v", "-trimpath", "-ldflags", self.ldflags(version), "-o", f"{staging}/",
               *self.packages]  # fmt: skip
        say(f"{self.name}: building {self.what} {version} into {target} "
            f"({self.cold + '; ' if self.cold else ''}GOMODCACHE={GOMODCACHE})")  # fmt: skip
        started = time.monotonic()
        counts = {"modules downloaded": 0, "packages compiled": 0}
        tail: list[str] = []
        done = threading.Event()

        def tick() -> None:  # a line every 30 s, also while the linker runs silently
            while not done.wait(30):
                say(f"{self.name}: {time.monotonic() - started:4.0f} s: "
                    + ", ".join(f"{n} {what}" for what, n in counts.items())
                    + (f" (last: {tail[-1].strip()[:70]})" if tail else ""))  # fmt: skip

        threading.Thread(target=tick, daemon=True).start()
        try:
            proc = subprocess.Popen(cmd, cwd=self.module, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip("\n")
                tail = [*tail[-59:], line]
                if line.startswith("go: downloading"):
                    counts["modules downloaded"] += 1
                elif line and not line.startswith(("#", " ", "\t", "go: ")):
                    counts["packages compiled"] += 1
            code = proc.wait()
            if code != 0 or not all(os.access(staging / name, os.X_OK) for name in self.binaries):
                raise self.error(f"building {self.what} failed (exit {code}) in {self.module}: {' '.join(cmd)}\n"
                                 + "\n".join(tail[-40:]))
            target.mkdir(parents=True, exist_ok=True)
            (target / _STAMP).unlink(missing_ok=True)
            for name in self.binaries:
                os.replace(staging / name, target / name)
            (target / _STAMP).write_text(self.sources_hash() + "\n")
            say(f"{self.name}: built in {time.monotonic() - started:.0f} s ("
                + ", ".join(f"{n} {what}" for what, n in counts.items()) + ")")
        finally:
            done.set()
            shutil.rmtree(staging, ignore_errors=True)
