"""Running a node agent in a test: as a real process (started, waited for) or
in-process with pods that are only recorded."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from node_agent.hostnet import PodNet


class RecordingPods:
    def __init__(self) -> None:
        self.wired: dict[tuple[str, str], str] = {}

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        self.wired[(container_id, ifname)] = ip
        return PodNet("eni0", "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        self.wired.pop((container_id, ifname), None)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return []

    def host_wiring(self) -> None:
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_agent(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        [sys.executable, "-c", "from node_agent.agent import main; main(['run'])"],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def wait_ready(metrics: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://{metrics}/readyz", timeout=1).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("agent not ready")
