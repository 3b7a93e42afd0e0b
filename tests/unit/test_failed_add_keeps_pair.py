"""A failed ADD tears down only a veth pair its own set-up made (the simulation's seed 14955,
``released-in-use``).

The runtime sent a running pod a second ADD with no DEL between (the CNI spec forbids it; the
simulation's ``cni-overlap``) after the agent lost the pod's record (its routes flushed, the
checkpoint lost: the start held the pod's address by ``unrouted`` and every free address for its
routeless veth). The ADD took a free address, its set-up failed, and its teardown removed the
attachment's veth: the running pod's own. The pod ran on with no veth, the address Kubernetes
gives it held only by the start's hold. A second lost checkpoint then found a rule and no veth
for that address (no pod can use it, by the rebuild's rule), let it go, and the allocator
unassigned it from under the pod.

Now ``setup_pod`` says on its exception whether it made the pair (``node_agent.hostnet.setup_left``)
and ``CniService._add`` removes only a pair its set-up made: one there before stays, and the
address the failed ADD took is free (its set-up never reached the pod's interface) or held for the
veth until the attachment's DEL (the pod's interface may carry it). Both variants failed before."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.datastore import FAILED_ADD_HOLDS, HOLD_REASON
from node_agent.records import UNROUTED_HOLDER
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import FailingPods, offers_and_adds

Z = "10.0.0.60"


@pytest.mark.parametrize("stage", ["early", "half"])
def test_a_failed_second_add_of_a_running_pod_leaves_its_veth_and_its_address_held(tmp_path: Path, stage: str) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = FailingPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        y = add_until(n, n.agent, "pod2")  # Kubernetes gives pod2 y
        n.step(30)
        host.routes.pop(y)  # pod2's veth set down: its /32 route gone, its rule stays
        n.lose_checkpoint()
        agent = n.start()
        n.step(30)
        veth2 = host.veth_of[("pod2", "eth0")]
        assert veth2 in (agent.ds.meta.get(HOLD_REASON) or []), "setup: the start holds for pod2's veth"
        assert agent.ds.recovered_holder(y) == UNROUTED_HOLDER, "setup: y held by unrouted"
        grant_more(n, agent, [Z])
        getattr(host, stage).add("pod2")
        failed = cni(agent, "ADD", "pod2")  # the second ADD of running pod2, its set-up failing
        getattr(host, stage).clear()
        assert not failed["ok"], "setup: the set-up failed"
        assert host.veth_of.get(("pod2", "eth0")) == veth2, "the failed ADD removed running pod2's veth pair"
        assert host.wired[("pod2", "eth0")] == (Z if stage == "half" else y)
        if stage == "half":  # pod2's interface carries Z now: held for its veth, noted for its DEL or GC
            assert agent.ds.recovered_holder(Z) == veth2
            assert veth2 in (agent.ds.meta.get(FAILED_ADD_HOLDS) or {})
        else:  # its set-up never reached the interface: Z is free
            assert agent.ds.recovered_holder(Z) is None and Z not in {p.ip for p in agent.ds.pods()}
        n.lose_checkpoint()  # lost again: the start sees pod2's routeless veth, and holds for it
        agent = n.start()
        n.step(30)
        offered, others = offers_and_adds(n, agent, 6)
        assert y not in offered and y not in others, (
            f"{y}: let go (offered {sorted(offered)}, new pods got {others}) while Kubernetes gives it to pod2"
        )
        if stage == "half":
            assert Z not in offered and Z not in others, f"{Z}: let go while pod2's interface carries it"
        assert cni(agent, "DEL", "pod2")["ok"]
        assert ("pod2", "eth0") not in host.veth_of, "pod2's DEL tears its veth pair down"
    finally:
        n.stop()


def test_a_failed_first_add_still_tears_down_the_pair_it_made(tmp_path: Path) -> None:
    """The pair a failed set-up made goes, and its address is free for the next pod."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = FailingPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51"])
        host.half.add("pod2")
        assert not cni(n.agent, "ADD", "pod2")["ok"]
        host.half.clear()
        assert ("pod2", "eth0") not in host.veth_of, "the pair the failed set-up made stays"
        assert n.agent.ds.recovered_holder("10.0.0.51") is None
        assert cni_add(n.agent, "pod3") == "10.0.0.51", "the address the failed ADD took is free again"
    finally:
        n.stop()
