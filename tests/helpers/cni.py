"""The CNI service's tests' pieces (tests/unit/test_cni_attachments.py and its review): one ENI's
datastore, an ADD request, and a pod network that follows a script. No kernel: the pod network
is a recorder."""

from __future__ import annotations

import threading
from typing import Any

from node_agent.datastore import Datastore
from node_agent.hostnet import PodNet
from node_agent.netlink import NetlinkFailure
from node_agent.records import EniInfo

ENI = EniInfo("eni-a", 0, "02:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
CONF = {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool-cni"}


def cni_datastore(n: int = 3) -> Datastore:
    """A datastore with ENI and ``n`` addresses on it (10.0.0.11 up), a 30 s cooldown."""
    ds = Datastore(cooldown_s=30.0)
    ds.add_eni(ENI, 0.0)
    ds.add_addresses(ENI.eni_id, [f"10.0.0.{11 + i}" for i in range(n)])
    return ds


def add_request(cid: str = "c1", ifname: str = "eth0") -> dict[str, Any]:
    """A CNI ADD for ``cid``/``ifname`` as the CNI plugin hands it to the agent's service."""
    return {"command": "ADD", "container_id": cid, "ifname": ifname, "netns": "/run/netns/p", "config": CONF}


class ScriptedPods:
    """Set-up calls follow a script: 'ok', 'fail' or 'block' (wait for ``go``, then ok)."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.go = threading.Event()
        self.entered = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.setups: list[str] = []
        self.teardowns: list[tuple[str, str, str | None]] = []

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        with self.lock:
            step = self.script.pop(0) if self.script else "ok"
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.setups.append(ip)
        try:
            if step == "block":
                self.entered.set()
                assert self.go.wait(10)
            if step == "fail":
                raise NetlinkFailure(16, "veth add: device or resource busy")
            return PodNet("eni0", "02:00:00:00:00:01", "02:00:00:00:00:02", 2)
        finally:
            with self.lock:
                self.inside -= 1

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        self.teardowns.append((container_id, ifname, ip))

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return []

    def host_wiring(self) -> None:
        return None
