"""Review 13, U1-leak: the twelfth review's U1 (``node_agent/agent.py::_routed_pods``) holds every pod
rule without a route "while a veth (of any prefix) has no route". Veths of no pod of this agent
that never have a ``/32`` route in main are common: Docker's containers on ``docker0`` (``veth…``
bridge ports), a Multus secondary network's ``bridge`` plugin, Cilium's ``cilium_host``/``cilium_net``
pair. On such a node the condition always holds, so a rebuild holds every stale pod rule's address
by ``UNROUTED_HOLDER``. A stale rule is what a DEL stopped half-way leaves (``teardown_pod`` removes
the veth, which takes the route, then the rules: the agent killed between them), or a pod namespace
removed without a DEL answered; with the checkpoint lost too, the runtime's retried DEL comes after
the rebuild, finds no record (``CniService._held``: no pod, no recovered holder of its veth's name),
tore down with no address (``teardown_pod(..., ip=None)`` removes no rule), and the ``unrouted``
holder is released by no DEL. The rule stays on the host, so every later rebuild holds the address
again: lost to the node for good. Before 46c21c9 (only a veth of this agent's prefix counted) the
address was offered as of unknown origin and replaced."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.agent import UNROUTED_HOLDER
from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import WiredPods, cni
from tests.helpers.first_start import Node, pod_on_fresh_address

DOCKER_VETH = "veth3f2a9c1"  # a docker0 bridge port: kind veth, no /32 route (the bridge's subnet route)


class DockerNode(WiredPods):
    """``wired_pods``'s read: this agent's pods (veth, /32 route, pod rule), a Docker container's
    veth on docker0 (no route), and the pod rules left by pods whose namespace went while the
    agent was down (``left``). A DEL that knows no address removes no rule (``teardown_pod``)."""

    def __init__(self) -> None:
        super().__init__()
        self.left: set[str] = set()

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        super().teardown(container_id, ifname, ip)
        self.left.discard(ip or "")

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}
        return HostWiring(
            pods=veths,
            stale=sorted(self.left - set(veths)),
            routed=frozenset(veths),
            links=frozenset({"ens5", "docker0", DOCKER_VETH, *veths.values()}),
            routed_via=dict(veths),
            veths=frozenset({DOCKER_VETH, *veths.values()}),
        )


@pytest.mark.xfail(
    strict=True,
    reason="left (a leak, never a second holder): a pod rule without a route is held while any veth has no "
    "route (review 12's U1 asks for any prefix), and a DEL that finds no record removes no rule; "
    "docs/safety.md, the thirteenth review",
)
def test_a_pod_whose_del_stopped_half_way_does_not_keep_its_address_held_for_good(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = DockerNode()
    try:
        y = pod_on_fresh_address(n)
        n.step(30)
        # pod1's DEL stops half-way: its veth (and with it the /32 route) removed, the agent killed
        # before the pod rules go; its state directory is lost too; the runtime retries the DEL
        n.lose_checkpoint()
        host.wired.pop(("pod1", "eth0"))
        host.left.add(y)
        agent = n.start()
        reply = cni(agent, "DEL", "pod1")  # the runtime's retried DEL, answered
        assert reply.get("ok"), reply
        for _ in range(5):
            n.step(30)
        # and a later checkpoint loss (another rebuild) reads the same host
        n.lose_checkpoint()
        agent = n.start()
        for _ in range(3):
            n.step(30)
        held = {h.ip: h.holder for h in agent.ds.recovered_holders()}
        assert held.get(y) != UNROUTED_HOLDER, (
            f"{y}: its pod was deleted and its DEL answered, yet it stays held by {held.get(y)!r} across"
            f" rebuilds because a Docker veth ({DOCKER_VETH}) with no /32 route is on the node"
        )
    finally:
        n.stop()
