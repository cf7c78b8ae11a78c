"""Ctrl-C for DuckDB: interrupting the queries of this process's warehouse connections.

DuckDB runs a query in C with the GIL released and never looks at Python's signal flag, so
SIGINT waits for the query to end on its own (`query` ignored Ctrl-C).  The connections the
warehouse opens are tracked here; whoever catches the signal outside the main thread (the
command line's signal watcher) calls ``interrupt_all``, and the running query stops with
``duckdb.InterruptException`` (one of ``INTERRUPTED``).
"""

from __future__ import annotations

import threading
import weakref

import duckdb

INTERRUPTED = (duckdb.InterruptException,)

_lock = threading.Lock()
_connections: weakref.WeakSet = weakref.WeakSet()   # (a connection dropped is forgotten)


def track(conn):
    """Remember `conn` so that ``interrupt_all`` reaches it; returns it."""
    with _lock:
        _connections.add(conn)
    return conn


def interrupt_all() -> None:
    """Interrupt whatever the tracked connections are running (from any thread)."""
    with _lock:
        connections = list(_connections)
    for conn in connections:
        try:
            conn.interrupt()
        except duckdb.Error:  # closed meanwhile
            pass

