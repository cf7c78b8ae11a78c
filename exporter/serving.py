"""Serving /metrics, /healthz and /readyz over HTTP, in a thread of the process that keeps the state.

/metrics is the Prometheus text format (version 0.0.4, the one every
Prometheus reads), gzip-compressed when the scraper accepts it: the text of a
big fleet is hundreds of megabytes of very repetitive lines.  A source that
keeps its body compressed (``Tracker.exposition_gzip``) hands it over as is;
any other is compressed at the fastest level.
/healthz answers 200 while the process's loop runs; /readyz answers 200 once
the consumer has read the topics up to the end they had when it started
(before that, the series describe the past: an alert must not read them),
503 until then, so an orchestrator holds traffic and alerts back.
"""

from __future__ import annotations

import gzip
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

log = logging.getLogger(__name__)


class AddressError(ValueError):
    """A listen address that is not ``[HOST]:PORT``."""


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``PORT``; ``[::1]:PORT`` for IPv6."""
    host, sep, port = str(text).rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "0.0.0.0"
    try:
        number = int(port)
    except ValueError:
        raise AddressError(f"listen address {text!r}: the port {port!r} is not a number (expected [HOST]:PORT)") from None
    if not 0 <= number <= 65535:
        raise AddressError(f"listen address {text!r}: the port {number} is out of range 0-65535")
    return host, number


def whole(body) -> bytes:
    """A body given as bytes or as pieces, as bytes."""
    return body if isinstance(body, bytes) else b"".join(body)


class MetricsServer:
    """An HTTP server of `exposition()` at /metrics and of `healthy()`/`ready()` at /healthz and /readyz.

    `exposition()` gives the body as bytes, or as an iterable of pieces sent as they come;
    `exposition_gzip()`, when given, the body already gzip-compressed.

        server = MetricsServer(":9108", tracker.exposition_parts, exposition_gzip=tracker.exposition_gzip,
                               ready=consumer.ready.is_set).start()
        server.port   # the bound port (useful with port 0)
        server.close()
    """

    def __init__(self, address: str, exposition: Callable[[], bytes], *, ready: Callable[[], bool] = lambda: True,
                 healthy: Callable[[], bool] = lambda: True, exposition_gzip: Callable[[], bytes] | None = None):
        self.address = parse_address(address)
        self.exposition, self.ready, self.healthy = exposition, ready, healthy
        self.exposition_gzip = exposition_gzip or (lambda: gzip.compress(whole(exposition()), compresslevel=1))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> "MetricsServer":
        """Bind (OSError when the address is taken) and serve in a daemon thread."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    headers = {"Content-Type": CONTENT_TYPE_PLAIN_0_0_4}
                    if "gzip" in self.headers.get("Accept-Encoding", ""):
                        body = owner.exposition_gzip()
                        headers["Content-Encoding"] = "gzip"
                    else:
                        body = owner.exposition()
                    if isinstance(body, bytes):
                        self._reply(200, body, headers)
                    else:
                        self._stream(body, headers)
                elif path in ("/healthz", "/readyz"):
                    ok = (owner.healthy if path == "/healthz" else owner.ready)()
                    self._reply(200 if ok else 503, b"ok\n" if ok else b"not ready\n" if path == "/readyz"
                                else b"unhealthy\n", {"Content-Type": "text/plain; charset=utf-8"})
                else:
                    self._reply(404, b"not found: /metrics, /healthz, /readyz\n",
                                {"Content-Type": "text/plain; charset=utf-8"})

            def _reply(self, code: int, body: bytes, headers: dict) -> None:
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, pieces, headers: dict) -> None:
                """A body of unknown length, sent as it is made (chunked transfer encoding)."""
                self.send_response(200)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in pieces:
                    if piece:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
                log.debug("%s " + format, self.address_string(), *args)

        self._server = ThreadingHTTPServer(self.address, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "MetricsServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
