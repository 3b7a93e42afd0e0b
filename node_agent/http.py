"""Localhost HTTP: Prometheus text metrics, introspection, health probes.

``/metrics``, ``/v1/enis``, ``/v1/pods``, ``/v1/config``, ``/healthz``
(the loop is alive), ``/readyz`` (started: identity known, checkpoint
restored and reconciled, CNI socket listening).

Any host-network pod can connect, so a client gets bounded resources: one request
per connection (HTTP/1.0), the whole request within :data:`REQUEST_TIMEOUT_S`, each
write of the answer within it too, and at most :data:`MAX_CONNECTIONS` connections
served at once (more are closed at once, without a thread). Idle or slow clients
therefore never pin threads without bound (the process's threads are shared with
the CNI socket server, which must always be able to start one).
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REQUEST_TIMEOUT_S = 5.0
"""A client's whole request (request line and headers) must arrive within this, and each
write of the answer must be taken within it."""
MAX_CONNECTIONS = 16
"""Connections served at once; one past it is closed as soon as it is accepted."""

WAIT_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)


def histogram(name: str, help_: str, values: list[float]) -> list[str]:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
    for b in WAIT_BUCKETS:
        lines.append(f'{name}_bucket{{le="{b}"}} {sum(1 for v in values if v <= b)}')
    lines.append(f'{name}_bucket{{le="+Inf"}} {len(values)}')
    lines.append(f"{name}_sum {sum(values):.6f}")
    lines.append(f"{name}_count {len(values)}")
    return lines


class Metrics:
    """Builds the exposition text from callables, so nothing is cached or double-counted."""

    def __init__(self) -> None:
        self.sources: list[Callable[[], list[str]]] = []

    def render(self) -> str:
        lines: list[str] = []
        for src in self.sources:
            lines.extend(src())
        return "\n".join(lines) + "\n"


def gauge(name: str, help_: str, value: float, labels: dict[str, str] | None = None) -> list[str]:
    return [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{_labels(labels)} {value}"]


def counter(name: str, help_: str, values: dict[tuple[tuple[str, str], ...], float]) -> list[str]:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} counter"]
    if not values:
        lines.append(f"{name} 0")
    for labels, v in sorted(values.items()):
        lines.append(f"{name}{_labels(dict(labels))} {v}")
    return lines


def _labels(labels: dict[str, str] | None) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{str(v).replace(chr(34), "")}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


class _DeadlineReader(io.RawIOBase):
    """A socket's reading side where every read must finish by one deadline (so a client
    sending a byte now and then cannot keep a request open)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not received in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(b)


class _BoundedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int) -> None:
        self.slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0
        super().__init__(addr, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)  # no thread for it
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: Metrics,
        views: dict[str, Callable[[], Any]],
        healthy: Callable[[], tuple[bool, str]],
        ready: Callable[[], tuple[bool, str]],
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        outer = self
        self.metrics, self.views, self.healthy, self.ready = metrics, views, healthy, ready

        class Handler(BaseHTTPRequestHandler):
            timeout = request_timeout_s  # the socket's timeout, for writes (reads: the deadline below)

            def setup(self) -> None:
                super().setup()
                plain, self.rfile = (
                    self.rfile,
                    io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + request_timeout_s)),
                )
                plain.close()

            def log_message(self, *a: object) -> None:
                pass

            def _send(self, code: int, body: str, ctype: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.connection.settimeout(request_timeout_s)  # the answer's writes
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, outer.metrics.render(), "text/plain; version=0.0.4")
                elif path in ("/healthz", "/readyz"):
                    ok, why = (outer.healthy if path == "/healthz" else outer.ready)()
                    self._send(200 if ok else 503, why + "\n", "text/plain")
                elif path in outer.views:
                    self._send(200, json.dumps(outer.views[path](), indent=1, default=str), "application/json")
                else:
                    self._send(404, "not found\n", "text/plain")

        self.httpd = _BoundedServer((host, port), Handler, max_connections)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)
        t.start()
        return t

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
