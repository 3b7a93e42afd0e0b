"""The real ``warmpool-agent`` for the demo's no-namespace mode.

Where network namespaces cannot be made, there is nothing to wire a pod into:
this runs the agent's own ``main`` unchanged except that pod wiring is
recorded instead of applied (:class:`RecordedPods` in place of
``NetlinkPods``). ENI set-up is already off there
(``WARMPOOL_MANAGE_HOST_NETWORK=false``). Run as ``python -m sim.demo_agent``.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from node_agent import agent
from node_agent.hostnet import PodNet, host_veth_name

log = logging.getLogger("warmpool.demo.agent")


class RecordedPods:
    """``node_agent.cniserver.PodNetwork`` that records what it would do."""

    def __init__(self, host_netns: str = "", veth_prefix: str = "eni") -> None:
        self.veth_prefix = veth_prefix
        self.lock = threading.Lock()
        self.pods: dict[tuple[str, str], tuple[str, str, int]] = {}  # (container, ifname) -> (netns, ip, table)

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        with self.lock:
            self.pods[(container_id, ifname)] = (netns, ip, table)
        mac = "02:" + ":".join(hashlib.sha1(container_id.encode()).hexdigest()[i:i + 2] for i in range(0, 10, 2))
        log.info("recorded pod set-up: %s %s -> %s (table %d), not applied", container_id[:12], ifname, ip, table)
        return PodNet(host_veth_name(container_id, ifname, self.veth_prefix), "ee:ee:ee:ee:ee:ee", mac, 0)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        with self.lock:
            self.pods.pop((container_id, ifname), None)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        with self.lock:
            held = self.pods.get((container_id, ifname))
        return [] if held is not None and held[1] == ip else [f"no recorded set-up of {ip} for {container_id[:12]}"]


def main() -> None:
    agent.NetlinkPods = RecordedPods  # type: ignore[attr-defined,assignment]
    agent.main()


if __name__ == "__main__":
    main()
