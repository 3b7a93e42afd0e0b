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
address was offered as of unknown origin and replaced.

Fixed: the runtime passes DEL the cached result of the attachment's ADD (``prevResult``; the CNI
spec requires it unless the runtime has none), which names the address; a DEL with no record
whose ``prevResult`` names an address held by ``UNROUTED_HOLDER`` removes its rules and releases
it (``CniService._unrouted_of``). The DEL here carries it, as libcni sends it."""

from __future__ import annotations

from pathlib import Path

from node_agent.agent import UNROUTED_HOLDER
from tests.helpers.agent_world import cni
from tests.helpers.bridge_host import DOCKER_VETH, DockerNode
from tests.helpers.first_start import Node, pod_on_fresh_address


# Closed again since a hold's reason names only links a DEL of ours can name (review 19, D1b): the
# Docker port is in none, so the unrouted hold of the stale rule's address ends at the first pass.
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
        # the runtime's retried DEL, answered; with the ADD's cached result, as libcni passes it
        reply = cni(agent, "DEL", "pod1", prev_ip=y)
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
