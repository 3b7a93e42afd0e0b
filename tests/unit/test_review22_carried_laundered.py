"""Review 22, R2 (two holders, needs a pod with ``CAP_NET_ADMIN`` and a second ADD of it; new in
b7123a0): ``CniService._known_again`` takes the one address a pod's interface carries, held by
``?``, as that pod's own, and makes it the pod's record. But a pod that may change its own
interface's addresses (``CAP_NET_ADMIN`` in its namespace: docs/safety.md says only that "nothing
but the host changes a pod interface's addresses") can put there the address of *another* pod
whose veth has no route either, which the hold of every address keeps for that other pod. Its
second ADD then records that address for it, and its DEL frees the address into cooldown while the
other pod runs on with it: the next pod gets it. Two holders, and the agent's own doing: what a pod
can spoof on the wire it now launders into the pool. Before b7123a0 the address stayed held (``?``)
until the other pod's DEL.

Steps: pod1, pod2 and pod3 wired (10.0.0.50, Y, W); every route and pod rule flushed (networkd);
the checkpoint lost; the rebuild holds every address for the three routeless veths. pod2 swaps its
own address Y for W; the runtime sends pod2's attachment a second ADD (``cni-overlap``), then
pod2's DEL. W must not go to a new pod while pod3 carries it.

The reading cannot tell pod2's own address from one it took; what the agent can check is that no
other veth of the hold's reason carries the same address (each routeless veth's peer, read through
its link's namespace), or give back only an address whose route or rule the host still shows
through this veth."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.datastore import HOLD_REASON
from node_agent.records import UNKNOWN_HOLDER
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, offers_and_adds


@pytest.mark.xfail(
    strict=True,
    reason="review 22, R2: _known_again trusts the one address a pod's interface carries; a pod with CAP_NET_ADMIN "
    "that puts another routeless pod's address there gets it recorded by its second ADD, and its DEL frees it while "
    "the other pod runs on with it",
)
def test_an_address_a_pod_took_from_another_routeless_pod_is_not_freed_by_its_del(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        y = add_until(n, n.agent, "pod2")
        w = add_until(n, n.agent, "pod3")
        n.step(30)
        host.flush_routes()
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()
        n.step(30)
        reason = agent.ds.meta.get(HOLD_REASON) or []
        assert host.veth_of[("pod3", "eth0")] in reason and host.veth_of[("pod2", "eth0")] in reason, "setup"
        assert agent.ds.recovered_holder(w) == UNKNOWN_HOLDER, "setup: w held for the routeless pods"
        host.wired[("pod2", "eth0")] = w  # pod2's own process: `ip addr del y; ip addr add w` on its eth0
        assert host.holders(w) == [("pod2", "eth0"), ("pod3", "eth0")] and host.holders(y) == []
        got = cni_add(agent, "pod2")  # the runtime's second ADD of pod2 (b7123a0: w, recorded for pod2)
        assert cni(agent, "DEL", "pod2")["ok"]
        offered, others = offers_and_adds(n, agent, 6)
        assert host.holders(w)[-1] == ("pod3", "eth0"), "setup: pod3 runs on with w"
        assert w not in others and w not in offered, (
            f"{w}: freed by pod2's DEL (its second ADD got {got}; new pods got {others}, offered {sorted(offered)}) "
            "while pod3 carries it"
        )
    finally:
        n.stop()
