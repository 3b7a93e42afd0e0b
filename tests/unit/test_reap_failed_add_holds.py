"""A failed ADD's hold for its veth (``CniService._hold_for_veth``) ends without a DEL or GC only
once the host has not shown the veth for ``gc_min_age_s`` (``CniService.reap_gone_failed_holds``,
review 28's C1): while the pair exists its pod side may carry the address; once it is gone (its
namespace removed: containerd's failed sandbox) nothing can."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.datastore import FAILED_ADD_HOLDS
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import FailingPods


def _failed_add_held(tmp_path: Path) -> tuple[Node, FailingPods, Any]:
    """pod1 on a fresh address; pod2's ADD failed after its address, and its teardown too: the
    address held for pod2's veth. The node, its host and its agent."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = FailingPods()
    pod_on_fresh_address(n)
    grant_more(n, n.agent, ["10.0.0.51"])
    host.half.add("pod2")
    host.stuck.add("pod2")
    assert not cni(n.agent, "ADD", "pod2")["ok"]
    return n, host, n.agent


def test_a_failed_add_s_hold_stays_while_its_veth_is_there_and_ends_a_while_after_it_goes(tmp_path: Path) -> None:
    n, host, agent = _failed_add_held(tmp_path)
    try:
        host.half.clear()
        host.stuck.clear()
        (y,) = {h.ip for h in agent.ds.recovered_holders()}
        veth = host.veth_of[("pod2", "eth0")]
        for _ in range(20):  # ten minutes with the pair there: held
            n.step(30)
        assert agent.ds.recovered_holder(y) == veth and host.holders(y) == [("pod2", "eth0")]
        host.veth_of.pop(("pod2", "eth0"))  # the namespace removed, the pair with it
        host.wired.pop(("pod2", "eth0"))
        n.step(30)  # the first pass that finds it gone
        n.step(55)
        assert agent.ds.recovered_holder(y) == veth, "let go before the veth was gone gc_min_age_s"
        n.step(10)
        assert agent.ds.recovered_holder(y) is None, "still held a while after its veth went"
        assert veth not in (agent.ds.meta.get(FAILED_ADD_HOLDS) or {})
        assert y not in host.rules
    finally:
        n.stop()


def test_a_pod_network_that_cannot_tell_keeps_the_hold(tmp_path: Path) -> None:
    n, host, agent = _failed_add_held(tmp_path)
    try:
        host.veth_of.pop(("pod2", "eth0"))
        host.host_wiring = lambda: None  # type: ignore[assignment,method-assign,return-value]
        for _ in range(10):
            n.step(30)
        assert len(agent.ds.recovered_holders()) == 1
    finally:
        n.stop()
