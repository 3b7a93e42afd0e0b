"""The agent's localhost HTTP server against clients that connect and say nothing, or
dribble (issue 21 defect 10), over real TCP sockets. Any host-network pod can connect;
before, each idle connection pinned a server thread for ever, and enough of them left the
process unable to start the CNI socket server's threads (ADD and DEL failed)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from node_agent import http as web


@pytest.fixture
def server() -> Iterator[web.HttpServer]:
    srv = web.HttpServer(
        "127.0.0.1",
        0,
        metrics=web.Metrics(),
        views={"/v1/pods": list},
        healthy=lambda: (True, "ok"),
        ready=lambda: (True, "ready"),
    )
    srv.serve_in_thread()
    try:
        yield srv
    finally:
        srv.close()


def connect(srv: web.HttpServer) -> socket.socket:
    return socket.create_connection(srv.address, timeout=web.REQUEST_TIMEOUT_S + 10)


def closed_by_server(s: socket.socket) -> bool:
    """True once the server closed the connection (EOF or reset); False if it stayed open."""
    try:
        return s.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_connections_never_pin_more_threads_than_the_bound(server: web.HttpServer) -> None:
    before = threading.active_count()
    idle = [connect(server) for _ in range(web.MAX_CONNECTIONS * 3)]
    try:
        time.sleep(0.5)  # let the server accept them all
        assert threading.active_count() - before <= web.MAX_CONNECTIONS
        # every idle connection is closed once the request time is up, the threads with them
        start = time.monotonic()
        assert all(closed_by_server(s) for s in idle)
        assert time.monotonic() - start <= web.REQUEST_TIMEOUT_S + 5
        deadline = time.monotonic() + 5
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() <= before
        # and the server answers again
        host, port = server.address
        assert urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5).status == 200
    finally:
        for s in idle:
            s.close()


def test_a_client_sending_a_byte_now_and_then_is_cut_off_at_the_request_deadline(server: web.HttpServer) -> None:
    s = connect(server)
    s.settimeout(0.5)
    start = time.monotonic()
    closed = False
    try:
        while time.monotonic() - start < web.REQUEST_TIMEOUT_S + 5:
            try:
                s.sendall(b"G")  # never a whole request line
            except OSError:
                closed = True
                break
            if closed_by_server(s):
                closed = True
                break
    finally:
        s.close()
    assert closed and time.monotonic() - start <= web.REQUEST_TIMEOUT_S + 2


def test_past_the_bound_a_connection_is_closed_at_once_and_served_ones_still_answer(server: web.HttpServer) -> None:
    idle = [connect(server) for _ in range(web.MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)
        extra = connect(server)
        extra.settimeout(2.0)
        assert closed_by_server(extra), "one past the bound gets no thread"
        extra.close()
    finally:
        for s in idle:
            s.close()
    time.sleep(0.3)  # the server sees them closed and frees their slots
    host, port = server.address
    body = urllib.request.urlopen(f"http://{host}:{port}/v1/pods", timeout=5).read()
    assert body.strip() == b"[]"
