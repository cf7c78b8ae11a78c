"""Fresh reads over HTTP, answered by the warehouse writer's own process between its batches.

Why in the writer: DuckDB lets no other process open a file a writer holds, so every other
reader sees a snapshot up to a minute old.  The writer can answer what is committed now, as
long as answering never stalls writing.  So:

* each endpoint is a named read of the library (``READS``: capacity, cost, one workload's
  record and history), its parameters parsed and bounded here; no SQL comes from a request;
* an HTTP thread parses a request and puts it on a bounded queue (full: 503 at once); the
  writer's thread runs what is queued between two batches (``ReadServer.answer``), each read
  on a cursor of the writer's connection and interrupted past ``QUERY_TIMEOUT_S``, for at most
  ``ANSWER_BUDGET_S`` per pause; the HTTP thread waits for its answer (``REPLY_TIMEOUT_S``,
  then 504);
* the transitions feed (server-sent events) keeps a cursor (the transitions table's rowid)
  per client; between batches the writer reads at most what the client's bounded queue has
  room for, so a slow client lags (and catches up later, from the table) and is never waited
  for, and no event is dropped; ``Last-Event-ID`` resumes after a reconnect;
* answers are bounded: ``MAX_ROWS`` rows, ``MAX_RESPONSE_BYTES`` of JSON (413 past it: narrow
  the query); at most ``MAX_SUBSCRIBERS`` feed clients;
* an optional bearer token (compared in constant time), given by the caller from the
  environment or a file, never a flag.

Paths: ``/`` (the dashboard: ``dashboard.html``, a static page, no token needed), ``/api/v1/capacity``, ``/api/v1/cost``, ``/api/v1/workloads/CLUSTER/NAMESPACE/KIND/NAME``
(``_`` as the namespace of a cluster-scoped kind), ``/api/v1/transitions`` (event stream),
``/healthz``.  Errors are JSON ``{"error": ...}`` naming the parameter and the reason.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from . import capacities, costing
from .pricing import Pricing
from .querying import QueryError, run_query
from .values import jsonable, number, parse_instant, parse_step

log = logging.getLogger(__name__)

MAX_PENDING = 64              # reads queued for the writer; more are refused (503)
MAX_ROWS = 10_000             # rows one answer may carry
MAX_RESPONSE_BYTES = 8 << 20  # JSON bytes one answer may carry
QUERY_TIMEOUT_S = 5.0         # one read is interrupted past this
ANSWER_BUDGET_S = 0.5         # reads run per pause between batches (one always runs)
REPLY_TIMEOUT_S = 30.0        # an HTTP thread waits this long for the writer
MAX_SUBSCRIBERS = 16          # clients of the transitions feed
FEED_QUEUE = 1_000            # events queued per feed client
HEARTBEAT_S = 15.0            # a comment line to a quiet feed client (proxies close idle streams)


class BadRequest(ValueError):
    """A parameter that cannot be read: the message names it and says what to write."""


# --------------------------------------------------------------------------- the named reads


def _one(params: dict, name: str, default: str | None = None) -> str | None:
    values = params.get(name)
    return values[-1] if values else default


def _list(params: dict, name: str) -> list[str] | None:
    text = _one(params, name)
    return None if text is None else [v for v in (x.strip() for x in text.split(",")) if v]


def _parsed(params: dict, name: str, parse, default=None):
    text = _one(params, name)
    if text is None:
        return default
    try:
        return parse(text)
    except ValueError as exc:
        raise BadRequest(f"{name}: {exc}") from None


def _limit(params: dict, default: int = 100) -> int:
    value = _parsed(params, "limit", int, default)
    if not 1 <= value <= MAX_ROWS:
        raise BadRequest(f"limit: {value} is not between 1 and {MAX_ROWS}")
    return value


def _filters(params: dict) -> dict:
    return {f: _list(params, f) for f in ("clusters", "namespaces", "frameworks")}


def read_capacity(conn, params: dict, now: dt.datetime) -> dict:
    """GPUs, CPU and memory requested (``allocation=1``: allocatable, allocated, idle, pending)
    now, at ``at``, or per ``step`` over ``since``..``until``, grouped ``by`` dimensions; with
    ``top=N`` the N workloads holding the most GPUs now (or at ``at``)."""
    allocation = _one(params, "allocation", "0") in ("1", "true", "yes")
    by = _list(params, "by") or ["cluster"]
    at = _parsed(params, "at", parse_instant)
    step = _one(params, "step")
    filters = _filters(params)
    top = _parsed(params, "top", int)
    if top is not None:
        if not 1 <= top <= MAX_ROWS:
            raise BadRequest(f"top: {top} is not between 1 and {MAX_ROWS}")
        rows = run_query(conn, "capacity_top", at=at, limit=top, statuses=None, kinds=None, **filters).dicts()
        return {"at": jsonable(at or now), "top": top, "items": [capacities.top_item(r) for r in rows]}
    if step is None:
        if allocation:
            items = capacities.allocation(conn, at=at, by=by, **filters)
        else:
            bad = sorted(set(by) - set(capacities.DIMENSIONS))
            if bad:
                raise BadRequest(f"by: cannot group by {', '.join(bad)} (choose among {', '.join(capacities.DIMENSIONS)})")
            rows = run_query(conn, "capacity", at=at, by=by, kinds=None, statuses=None, **filters).dicts()
            items = [capacities.capacity_item(r, by) for r in rows]
        return {"at": jsonable(at or now), "by": by, "allocation": allocation, "items": items}
    delta = _parsed(params, "step", parse_step)
    until = _parsed(params, "until", parse_instant, now)
    since = _parsed(params, "since", parse_instant, until - dt.timedelta(days=1))
    if allocation:
        items = capacities.allocation_series(conn, since, until, delta, step_name=step, by=by, **filters)
    else:
        rows = run_query(conn, "capacity_series", since=since, until=until, step=delta, by=by,
                         kinds=None, statuses=None, **filters).dicts()
        items = [capacities.series_item(r, by, step) for r in rows]
    return {"since": jsonable(since), "until": jsonable(until), "step": step, "by": by,
            "allocation": allocation, "items": items}


_DAY = dt.timedelta(days=1)


def parse_window(text: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """An OpenCost-style window: ``24h``, ``7d``, ``30m``, ``today``, ``yesterday``, ``week``
    (since Monday), ``month``, ``lastweek``, ``lastmonth``, or ``START,END`` (RFC 3339 or Unix seconds)."""
    text = text.strip().lower()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    monday = midnight - dt.timedelta(days=midnight.weekday())
    first = midnight.replace(day=1)
    named = {"today": (midnight, now), "yesterday": (midnight - _DAY, midnight), "week": (monday, now),
             "lastweek": (monday - 7 * _DAY, monday), "month": (first, now),
             "lastmonth": ((first - _DAY).replace(day=1), first)}
    if text in named:
        return named[text]
    if "," in text:
        start, end = (_instant_or_unix(t) for t in text.split(",", 1))
        return start, end
    try:
        return now - parse_step(text), now
    except ValueError:
        raise ValueError(f"{text!r} is not a window (use e.g. 24h, 7d, today, lastweek, or START,END)") from None


def _instant_or_unix(text: str) -> dt.datetime:
    text = text.strip()
    if text.isdigit():
        return dt.datetime.fromtimestamp(int(text), dt.timezone.utc)
    return parse_instant(text)


def read_cost(conn, params: dict, now: dt.datetime, pricing: Pricing | None = None) -> dict:
    """GPU-hours, CPU core-hours and memory GiB-hours over an OpenCost-style ``window``, per
    ``aggregate`` dimensions and ``step``, priced with the pricing file the writer was given (as
    ``cost --pricing``: a dashboard asks what the GPUs cost, not only how long they ran; without
    one, hours and ``currency`` null)."""
    since, until = _parsed(params, "window", lambda t: parse_window(t, now), (now - _DAY, now))
    by = tuple(_list(params, "aggregate") or ["cluster"])
    step = _parsed(params, "step", parse_step)
    basis = _one(params, "basis", costing.DEFAULT_BASIS)
    try:
        report = costing.cost_report(conn, since, until, by=by, step=step, basis=basis, pricing=pricing,
                                     **_filters(params))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    limit = _limit(params, MAX_ROWS)
    rows = report.table.slice(0, limit)
    columns = report.columns
    items = []
    for r in rows.to_pylist():
        item = {"start": jsonable(r["period_start"]), "end": jsonable(r["period_end"])}
        for d in columns:
            item[d] = (None if r["uid"] is None else f"{r['kind']}/{r['name']}") if d == "workload" else r[d]
        item.update(gpu_hours=number(r["gpu_hours"]), cpu_core_hours=number(r["cpu_core_hours"]),
                    memory_gib_hours=number(r["memory_gib_hours"]),
                    gpu_hours_by_resource={k: number(v) for k, v in dict(r["gpu_hours_by_resource"]).items()})
        if pricing is not None:
            costs = [r["gpu_cost"], r["cpu_cost"], r["memory_cost"]]
            item.update(gpu_cost=number(costs[0]), cpu_cost=number(costs[1]), memory_cost=number(costs[2]),
                        total_cost=number(sum(c for c in costs if c is not None)))
        items.append(item)
    return {"window": {"start": jsonable(since), "end": jsonable(until)}, "aggregate": list(by),
            "step": _one(params, "step"), "basis": basis, "currency": report.currency, "items": items,
            "truncated": report.table.num_rows > limit}


def read_workload(conn, cluster: str, namespace: str | None, kind: str, name: str, params: dict) -> dict | None:
    """One workload's latest record and its status history (the newest ``limit`` intervals)."""
    found = run_query(conn, "workload_record", cluster=cluster, namespace=namespace, kind=kind, object_name=name).dicts()
    if not found:
        return None
    row = found[0]
    record = json.loads(row.pop("record"))
    history = run_query(conn, "workload_history", cluster=cluster, uid=row["uid"], limit=_limit(params)).dicts()
    return {"workload": jsonable(row), "record": record, "history": jsonable(history)}


# --------------------------------------------------------------------------- the server


@dataclass
class _Pending:
    """A read for the writer's thread: what to run, and where its answer goes."""

    run: object  # callable(conn) -> (status, body)
    done: threading.Event = field(default_factory=threading.Event)
    status: int = 500
    body: bytes = b""
    abandoned: bool = False  # the HTTP thread stopped waiting


@dataclass
class _Subscriber:
    """A feed client: its cursor (the last rowid queued to it) and its bounded queue."""

    after_row: int | None
    events: queue.Queue = field(default_factory=lambda: queue.Queue(FEED_QUEUE))
    started: bool = False  # False until the writer set the cursor of a client that asked for "from now"
    closed: bool = False


def _json(status: int, value) -> tuple[int, bytes]:
    body = json.dumps(value, separators=(",", ":"), default=str).encode()
    if len(body) > MAX_RESPONSE_BYTES:
        return 413, json.dumps({"error": f"the answer is {len(body):,} bytes, more than {MAX_RESPONSE_BYTES:,}: "
                                         "narrow it (a shorter window, a larger step, fewer groups, limit)"}).encode()
    return status, body


class ReadServer:
    """The HTTP server of the fresh reads; ``answer(conn)`` is for the writer's thread, between batches.

    `token`: the bearer token requests must carry (None: no authentication).  `clock` gives
    "now" (relative windows and "capacity now" are about it)."""

    def __init__(self, listen: tuple[str, int], *, token: str | None = None, clock=None):
        self.token = token.encode() if token else None
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self._pending: queue.Queue[_Pending] = queue.Queue(MAX_PENDING)
        self._subscribers: list[_Subscriber] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.answered = 0
        self.http = ThreadingHTTPServer(listen, _handler(self))
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        self._thread = threading.Thread(target=self.http.serve_forever, name="warehouse-reads", daemon=True)
        self._thread.start()

    # -- the writer's side -----------------------------------------------------------

    def answer(self, warehouse) -> None:
        """Run the queued reads (for at most ANSWER_BUDGET_S; one always runs) and feed the
        transitions to the clients, on cursors of `warehouse` (``Warehouse.cursor``: they see what
        is committed).  Called by the writer's thread between batches."""
        deadline = time.monotonic() + ANSWER_BUDGET_S
        while True:
            try:
                pending = self._pending.get_nowait()
            except queue.Empty:
                break
            if not pending.abandoned:
                pending.status, pending.body = self._run(warehouse, pending.run)
                self.answered += 1
            pending.done.set()
            if time.monotonic() >= deadline:
                break
        with self._lock:
            subscribers = [s for s in self._subscribers if not s.closed]
        for subscriber in subscribers:
            self._feed(warehouse, subscriber)

    def _run(self, warehouse, run) -> tuple[int, bytes]:
        cursor = warehouse.cursor()
        timer = threading.Timer(QUERY_TIMEOUT_S, cursor.interrupt)
        timer.start()
        try:
            return run(cursor, warehouse)
        except BadRequest as exc:
            return _json(400, {"error": str(exc)})
        except Exception as exc:  # the writer goes on whatever one read does
            if "interrupt" in str(exc).lower():  # duckdb.InterruptException, or wrapped in a QueryError
                return _json(503, {"error": f"the read took more than {QUERY_TIMEOUT_S:g} s: narrow it"})
            if isinstance(exc, QueryError):
                return _json(400, {"error": str(exc)})
            log.warning("a read failed: %s", exc)
            return _json(500, {"error": f"the read failed: {type(exc).__name__}"})
        finally:
            timer.cancel()
            cursor.close()

    def _feed(self, warehouse, subscriber: _Subscriber) -> None:
        room = FEED_QUEUE - subscriber.events.qsize()
        if room <= 0:
            return  # a slow client: it lags; its cursor stays, nothing is dropped
        cursor = warehouse.cursor()
        try:
            if not subscriber.started:
                if subscriber.after_row is None:  # "from now": after the last row there is
                    last = run_query(cursor, "transitions_last_row").rows[0][0]
                    subscriber.after_row = -1 if last is None else last
                subscriber.started = True
            rows = run_query(cursor, "transitions_feed", after_row=subscriber.after_row, limit=room).dicts()
        finally:
            cursor.close()
        for row in rows:
            subscriber.after_row = row["row"]
            subscriber.events.put_nowait(row)

    # -- the HTTP side ---------------------------------------------------------------

    def submit(self, run) -> tuple[int, bytes]:
        """Queue a read for the writer and wait for its answer (503 when the queue is full,
        504 when the writer does not get to it in REPLY_TIMEOUT_S)."""
        pending = _Pending(run)
        try:
            self._pending.put_nowait(pending)
        except queue.Full:
            return _json(503, {"error": f"{MAX_PENDING} reads are waiting for the writer: try again"})
        if not pending.done.wait(REPLY_TIMEOUT_S):
            pending.abandoned = True
            return _json(504, {"error": f"the writer did not answer within {REPLY_TIMEOUT_S:g} s"})
        return pending.status, pending.body

    def subscribe(self, after_row: int | None) -> _Subscriber | None:
        with self._lock:
            self._subscribers = [s for s in self._subscribers if not s.closed]
            if len(self._subscribers) >= MAX_SUBSCRIBERS:
                return None
            subscriber = _Subscriber(after_row)
            self._subscribers.append(subscriber)
            return subscriber

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """Stop serving; waiting reads get 503, feed clients their stream's end."""
        self._closed.set()
        self.http.shutdown()
        self.http.server_close()
        while True:
            try:
                pending = self._pending.get_nowait()
            except queue.Empty:
                break
            pending.status, pending.body = _json(503, {"error": "the writer is stopping"})
            pending.done.set()


def _route(server: ReadServer, path: str, params: dict):
    """The read a path names, as a callable(conn, warehouse) -> (status, body); None for an unknown path.
    Costs are priced with the writer's own pricing (``Warehouse.pricing``), as its kept cost rows are."""
    now = server.clock()
    if path == "/api/v1/capacity":
        return lambda conn, _: _json(200, read_capacity(conn, params, now))
    if path == "/api/v1/cost":
        return lambda conn, warehouse: _json(200, read_cost(conn, params, now, warehouse.pricing))
    parts = path.split("/")
    if len(parts) == 8 and parts[:4] == ["", "api", "v1", "workloads"] and all(parts[4:]):
        cluster, namespace, kind, name = (unquote(p) for p in parts[4:])
        namespace = None if namespace == "_" else namespace

        def workload(conn, _):
            found = read_workload(conn, cluster, namespace, kind, name, params)
            if found is None:
                return _json(404, {"error": f"no workload {kind}/{name} in namespace {namespace or '(none)'} "
                                            f"of cluster {cluster}"})
            return _json(200, found)
        return workload
    return None


@lru_cache(maxsize=1)
def _dashboard() -> bytes:
    return resources.files(__package__).joinpath("dashboard.html").read_bytes()


def _handler(server: ReadServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "workloadmap-warehouse"

        def log_message(self, fmt, *args):  # requests are not logged (the token is in a header anyway)
            pass

        def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="workloadmap"')
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                self.close_connection = True  # the client went away

        def do_GET(self):  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            params = parse_qs(url.query, keep_blank_values=False)
            if url.path == "/healthz":
                return self._reply(200, b"ok\n", "text/plain")
            if url.path in ("/", "/index.html"):  # static: the data it reads needs the token
                return self._reply(200, _dashboard(), "text/html; charset=utf-8")
            if not server.authorized(self.headers.get("Authorization")):
                return self._reply(*_json(401, {"error": "a bearer token is required (Authorization: Bearer ...)"}))
            if url.path == "/api/v1/transitions":
                return self._stream(params)
            run = _route(server, url.path, params)
            if run is None:
                return self._reply(*_json(404, {"error": f"no endpoint {url.path} (see /api/v1/capacity, "
                                                         "/api/v1/cost, /api/v1/workloads/..., /api/v1/transitions)"}))
            self._reply(*server.submit(run))

        def _stream(self, params):
            start = self.headers.get("Last-Event-ID") or _one(params, "after")
            try:
                after_row = None if start is None else int(start)
            except ValueError:
                return self._reply(*_json(400, {"error": f"after: {start!r} is not a row number"}))
            subscriber = server.subscribe(after_row)
            if subscriber is None:
                return self._reply(*_json(503, {"error": f"{MAX_SUBSCRIBERS} feed clients already"}))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                self.wfile.write(b": transitions of the workloads, as the warehouse commits them\n\n")
                self.wfile.flush()
                while not server.closed:
                    try:
                        row = subscriber.events.get(timeout=HEARTBEAT_S)
                    except queue.Empty:
                        self.wfile.write(b": keep-alive\n\n")
                    else:
                        data = json.dumps(jsonable(row), separators=(",", ":"))
                        self.wfile.write(f"id: {row['row']}\nevent: transition\ndata: {data}\n\n".encode())
                    self.wfile.flush()
            except OSError:
                pass  # the client went away
            finally:
                subscriber.closed = True

    return Handler

