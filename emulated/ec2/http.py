"""The HTTP way in: the EC2 Query protocol served from the same emulator.

``make_app(emu)`` is a WSGI application (mount it under any prefix: it looks
only at the request body and query string); ``serve(emu, host, port)`` runs it
on a threaded server in a background thread. boto3 and the AWS CLI pointed at
``endpoint_url`` work against it. ``handle(emu, method, query, body)`` is the
framework-free core, for a stack that has its own server.

Latency: with a real clock the server thread sleeps ``emu.latency_for(action)``
before answering — the stand-in for EC2's own latency, not warmpool logic.
With a virtual clock it never sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl

from werkzeug.serving import WSGIRequestHandler, make_server

from emulated.clock import VirtualClock

from .errors import Ec2Error, new_request_id
from .ports import Dispatcher
from .protocol import parse_request, render_error, render_response

Sleep = Callable[[float], None]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    412: "Precondition Failed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _default_sleep(emu: Dispatcher) -> Sleep | None:
    return None if isinstance(emu.clock, VirtualClock) else time.sleep


def handle(emu: Dispatcher, query: str, body: bytes, sleep: Sleep | None = None) -> tuple[int, bytes]:
    """Serve one EC2 Query request; returns (HTTP status, XML body)."""
    form = dict(parse_qsl(query, keep_blank_values=True))
    if body:
        form.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    rid = new_request_id()
    action = form.pop("Action", "")
    form.pop("Version", None)
    if sleep is not None and action:
        delay = emu.latency_for(action)
        if delay > 0:
            sleep(delay)
    try:
        if not action:
            raise Ec2Error("MissingAction", "The request must contain the parameter Action")
        params = parse_request(action, form)
        out = emu.dispatch(action, params)
        return 200, render_response(action, out, rid)
    except Ec2Error as e:
        return e.status, render_error(e, rid)


def make_app(emu: Dispatcher, sleep: Sleep | bool | None = True) -> WsgiApp:
    """A WSGI app speaking the EC2 Query protocol. ``sleep=True`` sleeps the
    configured latency when the emulator runs on a real clock; ``False`` never."""
    sleeper = _default_sleep(emu) if sleep is True else (sleep or None)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        status, payload = handle(emu, environ.get("QUERY_STRING", ""), body, sleeper)
        start_response(
            f"{status} {REASONS.get(status, 'Error')}",
            [("Content-Type", "text/xml;charset=UTF-8"), ("Content-Length", str(len(payload)))],
        )
        return [payload]

    return app


class _KeepAliveHandler(WSGIRequestHandler):
    """HTTP/1.1 with keep-alive, as EC2 speaks: a client (botocore's pool)
    reuses one connection instead of paying a TCP handshake per call."""

    protocol_version = "HTTP/1.1"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class Server:
    """A running threaded server; ``url`` is the endpoint, ``close()`` stops it."""

    def __init__(self, app: WsgiApp, host: str, port: int) -> None:
        self._httpd = make_server(host, port, app, threaded=True, request_handler=_KeepAliveHandler)
        self.host = host
        self.port = self._httpd.server_port
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"ec2-http-{self.port}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def serve(emu: Dispatcher, host: str = "127.0.0.1", port: int = 0, sleep: Sleep | bool | None = True) -> Server:
    """Serve ``emu`` over HTTP in a background thread (port 0: pick a free one)."""
    return Server(make_app(emu, sleep), host, port)
