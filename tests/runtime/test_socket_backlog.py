"""Found by the runtime tier's burst: containerd runs one plugin per sandbox at once, and each
plugin connects to the agent's socket with a timeout set (a non-blocking connect underneath).
A unix socket's connect then fails at once with EAGAIN when the listen backlog is full; the
socketserver default backlog is 5, so a burst of sandboxes got "warmpool agent is not
reachable" while the agent was up. No containerd needed to show it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from node_agent.cni import CniError, call_agent
from node_agent.cniserver import CniService, CniSocketServer
from node_agent.datastore import Datastore
from warmpool.clock import RealClock

pytestmark = pytest.mark.runtime


def test_a_burst_of_plugins_connecting_at_once_is_never_refused(tmp_path: Path) -> None:
    sock = str(tmp_path / "agent.sock")
    srv = CniSocketServer(sock, CniService(Datastore(), None, clock=RealClock()))  # type: ignore[arg-type]
    gate = threading.Event()
    srv.service.handle = lambda req: (gate.wait(10), {"ok": True})[1]  # type: ignore[method-assign]
    srv.serve_in_thread()
    errors: list[str] = []
    n = 64
    ready = threading.Barrier(n)

    def plugin() -> None:
        ready.wait()
        try:
            call_agent(sock, {"command": "CHECK"}, timeout=20.0)
        except CniError as e:
            errors.append(f"{e.msg}: {e.details}")

    threads = [threading.Thread(target=plugin) for _ in range(n)]
    for t in threads:
        t.start()
    # the accept loop is never starved here: the handlers are blocked, the connects all arrive at once
    gate.set()
    for t in threads:
        t.join(timeout=30)
    srv.shutdown()
    srv.server_close()
    assert errors == [], f"{len(errors)} of {n} refused, e.g. {errors[:1]}"
