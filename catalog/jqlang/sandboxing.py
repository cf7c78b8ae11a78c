"""Running libjq on programs outside the native subset, in a bounded process.

libjq offers no way to interrupt an evaluation, and a definition read from a
cluster is untrusted: ``def f: f; f`` never returns and holds the GIL-free C
loop forever.  So such programs run in one long-lived worker process per
interpreter, under a memory rlimit, with a wall-clock timeout per call; on
timeout the worker is killed and the next call starts a fresh one.

This file is also the worker's entry point: it is started as a script in
isolated mode and imports nothing of workloadmap.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading

WORKER_MEMORY_BYTES = 1 << 30


class SandboxError(Exception):
    """jq reported an error for this program and input."""


class SandboxLimit(Exception):
    """The evaluation ran out of time or outputs, or the worker died."""


class Sandbox:
    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self):
        self._proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True,
        )

    def _kill(self):
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def run(self, source: str, value, *, seconds: float, max_outputs: int) -> list:
        request = json.dumps({"p": source, "v": value, "n": max_outputs}).encode() + b"\n"
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            proc = self._proc
            try:
                proc.stdin.write(request)
                proc.stdin.flush()
            except BrokenPipeError:
                self._kill()
                raise SandboxLimit("the jq sandbox worker died") from None
            ready, _, _ = select.select([proc.stdout], [], [], seconds)
            if not ready:
                self._kill()
                raise SandboxLimit(f"evaluation exceeded its time bound of {seconds:g}s")
            line = proc.stdout.readline()
            if not line:
                self._kill()
                raise SandboxLimit("the jq sandbox worker died (memory bound exceeded?)")
        reply = json.loads(line)
        if "ok" in reply:
            return reply["ok"]
        if "limit" in reply:
            raise SandboxLimit(reply["limit"])
        raise SandboxError(reply["err"])

    def close(self):
        with self._lock:
            self._kill()


SANDBOX = Sandbox()


def _worker():  # pragma: no cover - runs in the child process
    import resource

    import jq

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    programs = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            prog = programs.get(req["p"])
            if prog is None:
                prog = programs[req["p"]] = jq.compile(req["p"])
            out = []
            for v in prog.input_value(req["v"]):
                out.append(v)
                if len(out) > req["n"]:
                    raise OverflowError(f"evaluation produced more than {req['n']} outputs")
            reply = {"ok": out}
        except OverflowError as exc:
            reply = {"limit": str(exc)}
        except MemoryError:
            reply = {"limit": "evaluation exceeded its memory bound"}
        except Exception as exc:  # jq raises ValueError for its own errors
            reply = {"err": str(exc)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":  # pragma: no cover
    _worker()
