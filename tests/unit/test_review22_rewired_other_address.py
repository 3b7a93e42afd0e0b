"""Review 22, R1 (two holders by seed 732's rule, new in b7123a0): ``CniService._rewired`` takes a
veth out of the start's hold reason after *any* successful ADD of its attachment, on the ground that
``setup_pod`` leaves the pod's interface carrying exactly the ADD's address. That is true of the
interface, not of the pod's address in Kubernetes: for a second ADD of a running pod (the case
``_known_again`` names, the simulation's ``cni-overlap``), "the address Kubernetes gives it stays its
own" (docs/safety.md, "An ADD cut half-way"). When ``_known_again`` does not give that address back
(the one address the pod's interface carries is held by ``unrouted``, not ``?``; or the interface
carries a second address, so "several"), the ADD takes a free address instead, rewires the running
pod onto it, and ends the hold: the loop then lets go the address Kubernetes still gives the pod,
offered as of unknown origin, and the allocator unassigns it (another node's next). Before
b7123a0 the veth stayed in the reason until the pod's DEL, and that address stayed held.

Steps: pod1 on 10.0.0.50; pod2 gets Y; pod2's host side loses its ``/32`` route (a veth set down:
its rule stays, so Y is held by ``unrouted``; or networkd drops the rule too, and pod2's interface
carries a second address, a VIP its keepalived put there, so Y is held by ``?``); the checkpoint is
lost; the rebuild holds every address for pod2's veth. Z is granted (free: a grant is never held),
and the runtime sends pod2's attachment a second ADD, which gets Z. Y must stay held while pod2 runs.

A fix that keeps ``_known_again``'s gain: end the veth's part only when the ADD's address is the one
address the interface carried before it (or it carried none), as read by ``_known_again``. Fixed
so (``CniService._add``; both variants failed on b7123a0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.datastore import HOLD_REASON
from node_agent.records import UNKNOWN_HOLDER, UNROUTED_HOLDER
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, offers_and_adds

VIP = "192.168.77.7"
Z = "10.0.0.60"


class VipPods(KernelPods):
    """:class:`KernelPods` where a pod may carry more addresses on its interface than the agent put
    there (``extra``: what the pod's own process added, with ``CAP_NET_ADMIN``)."""

    def __init__(self) -> None:
        super().__init__()
        self.extra: dict[tuple[str, str], list[str]] = {}

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        got = super().carried(netns, ifname, container_id)
        return None if got is None else sorted([*got, *self.extra.get((container_id, ifname), [])])


@pytest.mark.parametrize("why", ["unrouted", "two-addresses"])
def test_a_second_add_that_moves_a_running_pod_keeps_its_kubernetes_address_held(tmp_path: Path, why: str) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = VipPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        y = add_until(n, n.agent, "pod2")  # pod2's first ADD answered: Kubernetes gives pod2 y
        n.step(30)
        host.routes.pop(y)  # pod2's veth set down: its /32 route gone
        if why == "two-addresses":
            host.rules.discard(y)  # networkd dropped the pod rule too
            host.extra[("pod2", "eth0")] = [VIP]  # pod2's own process added a VIP to its eth0
        n.lose_checkpoint()
        agent = n.start()
        n.step(30)
        veth2 = host.veth_of[("pod2", "eth0")]
        assert veth2 in (agent.ds.meta.get(HOLD_REASON) or []), "setup: the rebuild holds for pod2's veth"
        held_by = UNROUTED_HOLDER if why == "unrouted" else UNKNOWN_HOLDER
        assert agent.ds.recovered_holder(y) == held_by, f"setup: {y} held by {agent.ds.recovered_holder(y)!r}"
        grant_more(n, agent, [Z])
        assert cni_add(agent, "pod2") == Z, "setup: the second ADD of running pod2 took the free grant"
        offered, others = offers_and_adds(n, agent, 6)
        assert y not in offered and y not in others, (
            f"{y}: let go (offered {sorted(offered)}, new pods got {others}) while Kubernetes still gives it to "
            f"pod2, which runs on; the hold's reason is now {agent.ds.meta.get(HOLD_REASON)!r}"
        )
        assert cni(agent, "DEL", "pod2")["ok"]
    finally:
        n.stop()
