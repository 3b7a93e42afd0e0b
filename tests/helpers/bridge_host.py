"""A node's host wiring with a Docker bridge port on it (docs/safety.md, the thirteenth review,
U1-leak): ``node_agent.hostnet.wired_pods``'s read of this agent's pods, the pod rules a DEL
stopped half-way left, pods whose ``/32`` route alone was flushed, and ``docker0``'s veth (no
``/32`` route ever: the bridge's subnet route)."""

from __future__ import annotations

from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import WiredPods

DOCKER_VETH = "veth3f2a9c1"  # a docker0 bridge port: kind veth, no /32 route (the bridge's subnet route)


class DockerNode(WiredPods):
    """This agent's pods (veth, /32 route, pod rule), a Docker container's veth on docker0 (no
    route), the pod rules left by pods whose veth went while the agent was down (``left``), and
    the running pods whose route alone was flushed (``flushed``: veth and rule stay). A teardown
    that names no address removes no rule (``teardown_pod``); one that names it removes its rules
    and routes."""

    def __init__(self) -> None:
        super().__init__()
        self.left: set[str] = set()
        self.flushed: set[str] = set()

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        super().teardown(container_id, ifname, ip)
        self.left.discard(ip or "")
        self.flushed.discard(ip or "")

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}
        routed = {ip: v for ip, v in veths.items() if ip not in self.flushed}
        return HostWiring(
            pods=routed,
            stale=sorted((self.left | set(veths)) - set(routed)),
            routed=frozenset(routed),
            links=frozenset({"ens5", "docker0", DOCKER_VETH, *veths.values()}),
            routed_via=dict(routed),
            veths=frozenset({DOCKER_VETH, *veths.values()}),
        )
