"""Trimming a long-running service's C heap: free pages handed back to the operating system.

Why: a service's live set is steady, but a backlog is not.  After a broker's restart a worker
fetches its partitions' backlog in fetches of up to 16 MiB each, decodes them and sends their
outputs at full speed; the writer and the exporter read the records that waited the same way.
Freed, that memory stays in glibc's heap: nothing hands free pages in the middle of a heap back to
the operating system but ``malloc_trim``, so the RSS a backlog once took stayed taken, flat, for
the rest of the process's life (bench/RESULTS.md, the soaks).  A process-wide thread asks
glibc every TRIM_EVERY seconds how much of its heap is free (``mallinfo2``) and trims once that
grew TRIM_GROWN above its low since the last trim.  Why the growth, not the free bytes: glibc
counts the pages a trim returned as free still, and a page taken again and freed again is resident
again, so what was freed since the low is what a trim can return, while the free bytes alone would
trim the same pages again and again (``malloc_trim`` walks every free chunk of every arena, each
arena locked meanwhile: tens of milliseconds on a heap a backlog fragmented).

Not glibc (musl, macOS: ``mallinfo2`` or ``malloc_trim`` missing), there is nothing to trim with
and nothing starts.  The writer's DuckDB allocates from the same heap: what it holds is bounded by
its memory limit, what it frees is trimmed with the rest.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time

log = logging.getLogger(__name__)

TRIM_EVERY = 10.0   # seconds between two looks at the free heap
TRIM_GROWN = 16 << 20   # free heap grown since its low, worth a trim (bytes)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2, malloc_trim = libc.mallinfo2, libc.malloc_trim
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    mallinfo2.argtypes = []
    malloc_trim.restype = ctypes.c_int
    malloc_trim.argtypes = [ctypes.c_size_t]
    return mallinfo2, malloc_trim


_GLIBC = _glibc()


def free_heap() -> int | None:
    """Bytes free in glibc's heaps (every arena's free chunks), None without glibc."""
    return None if _GLIBC is None else _GLIBC[0]().fordblks


def trim_heap() -> None:
    """Hand every whole free page of glibc's heaps back to the operating system (nothing without glibc)."""
    if _GLIBC is not None:
        _GLIBC[1](0)


class Trimming:
    """The looks of a trimming thread: `look()` trims once the free heap grew `grown` bytes above
    its low since the last trim (the free heap right after a trim is the new low)."""

    def __init__(self, grown: int = TRIM_GROWN):
        self.grown = grown
        self.low = free_heap() or 0
        self.trims = 0

    def look(self) -> bool:
        """One look; whether it trimmed."""
        free = free_heap()
        if free is None:
            return False
        if free - self.low < self.grown:
            self.low = min(self.low, free)
            return False
        trim_heap()
        log.debug("heap trimmed: %d MiB free, %d MiB of it freed since the last trim", free >> 20, (free - self.low) >> 20)
        self.trims += 1
        self.low = free_heap() or 0
        return True


_started = threading.Lock()
_thread: threading.Thread | None = None


def trim_heap_in_the_background(every: float = TRIM_EVERY, grown: int = TRIM_GROWN) -> threading.Thread | None:
    """Start the process's trimming thread (a daemon: it lives as long as the process), once per
    process however many services run in it; None without glibc."""
    global _thread
    if _GLIBC is None:
        return None
    with _started:
        if _thread is None:
            trimming = Trimming(grown)

            def run() -> None:
                while True:
                    time.sleep(every)
                    trimming.look()

            _thread = threading.Thread(target=run, name="heap-trimming", daemon=True)
            _thread.start()
    return _thread
