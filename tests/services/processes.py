"""Server processes for tests that never outlive the test run, even if Python is SIGKILLed.

The real services of this package (``kafka_broker.py``: a Kafka JVM, ``kube_api.py``:
etcd and kube-apiserver) run as child processes with their data in a temp dir. A test
run that ends without stopping them (a failing fixture, Ctrl-C, ``timeout``, the CI
killing the job, SIGKILL) must not leave servers holding ports, memory and disk behind.
Two guards make sure of that, both here so the harnesses share one implementation:

* ``ServerProcess`` starts each server in its own session (a terminal's Ctrl-C reaches
  Python, which then stops the server) together with a *watchdog*: a tiny Python process
  that holds a pipe from this process and, when the pipe closes without the word
  "stopped" (this process died), SIGKILLs the server and deletes the temp dir.
* At a normal interpreter exit, servers still running are killed and the temp dirs made
  by ``make_workdir()`` and not yet removed by ``remove_workdir()`` are deleted.

Plus the small helpers both harnesses need: ``free_ports()`` and log tails. Only the
standard library is used.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def log_tails(workdir: Path, names: Iterable[str], lines: int) -> str:
    """The last ``lines`` lines of each non-empty log ``workdir/<name>``, under a header;
    "" if there is none."""
    parts = []
    for name in names:
        path = workdir / name
        if path.is_file():
            text = path.read_text(errors="replace")
            if text.strip():
                parts.append(f"--- {path} (last {lines} lines)\n{tail(text, lines)}")
    return "\n".join(parts)


def make_workdir(prefix: str) -> Path:
    """A fresh temp dir, deleted at interpreter exit unless ``remove_workdir()`` did it."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    _workdirs.add(workdir)
    return workdir


def remove_workdir(workdir: Path) -> None:
    """Delete a temp dir from ``make_workdir()`` (stop its servers first)."""
    _workdirs.discard(workdir)
    shutil.rmtree(workdir, ignore_errors=True)


class ServerProcess:
    """One server process in its own session, its log file, and its watchdog.

    ``cmd`` must name ``workdir`` (the watchdog checks the pid's command line for it, so
    it never kills a process that reused the pid); stdout and stderr go to ``log``. The
    watchdog deletes ``workdir`` too when it kills the server.
    """

    def __init__(self, label: str, cmd: list[str], log: Path, workdir: Path):
        self.label = label
        self.log = log
        self.watchdog: subprocess.Popen | None = None
        with open(log, "ab") as out:
            # own session: a terminal's Ctrl-C reaches Python, which then stops the server
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        _running.add(self)
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG, str(self.proc.pid), str(workdir)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float) -> None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()
        self._dismiss_watchdog()

    def kill(self) -> None:
        """SIGKILL (no clean shutdown)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._dismiss_watchdog()

    def _dismiss_watchdog(self) -> None:
        """The server is gone: tell the watchdog to exit without doing anything."""
        _running.discard(self)
        dog = self.watchdog
        if dog is None or dog.poll() is not None:
            return
        try:
            assert dog.stdin is not None
            dog.stdin.write(b"stopped")
            dog.stdin.close()
            dog.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            dog.kill()
            dog.wait()


# Servers still running and temp dirs still there when the interpreter exits normally
# (a test run that never reached close()) are killed and deleted. If the interpreter is
# killed instead, each server process's watchdog does the same.
_running: set[ServerProcess] = set()  # hashable by identity
_workdirs: set[Path] = set()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_running):
        try:
            server.kill()
        except Exception:
            pass
    for workdir in list(_workdirs):
        remove_workdir(workdir)


# Run as `python -c WATCHDOG <pid> <workdir>` with stdin a pipe from the process that
# started the server. Reading stdin returns when that process closes it: after writing
# "stopped" (it stopped the server itself: nothing to do) or by dying (then kill the
# server, if that pid still runs a command line naming our workdir, and delete the dir).
WATCHDOG = r"""
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
pid, workdir = int(sys.argv[1]), sys.argv[2]
if sys.stdin.buffer.read() != b"stopped":
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            ours = workdir.encode() in f.read()
    except OSError:
        ours = False
    if ours:
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)
    shutil.rmtree(workdir, ignore_errors=True)
"""
