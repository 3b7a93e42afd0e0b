"""An ADD cut between its pod's veth and its pod's address, then ``WARMPOOL_VETH_PREFIX`` changed
across the restart (the simulation's seed 1014045: ``add-cut`` unwritten, then ``host-wiring``'s
``prefix-changed`` restart, on a node whose runtime retries a failed ADD with no DEL).

The start finds the pod's veth (the earlier prefix's name) with no route and holds every free
address for it (its pod's address unknown). The runtime retries the ADD of that attachment. The
retried ADD read what the pod's interface carries only as the peer of *this* prefix's veth
(``CniService._add``: ``_in_reason(holder)`` with ``holder`` this prefix's name), so it never
learnt that the pod's interface, the peer of the earlier prefix's veth, carries nothing; and its
set-up is refused (the pod's ``eth0`` is another prefix's veth's peer, review 27 M1), so no DEL
came: every free address stayed held for good, a leak (``hold-unfounded``).

Fixed: the ADD reads that veth's peer too (``CniService._known_empty_elsewhere``,
``hostnet.veth_prefix_of``); carrying nothing, no address of this node is the pod's, and that
veth leaves the reason, as ``_known_again`` does for this prefix's veth. An address there leaves
the hold to the DEL, as before (the contrast below; ``tests/unit/test_half_made_add.py``'s
``test_a_half_made_veth_of_another_prefix_is_left_to_the_del``). The first test fails without the
fix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name, veth_prefix_of
from tests.helpers.agent_world import cni_add
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start, offered_within

Y, Z = "10.0.0.51", "10.0.0.52"


@contextmanager
def restarted_with_another_prefix(tmp_path: Path, carried: str | None) -> Iterator[tuple[Node, KernelPods, Any, str]]:
    """pod1 on x; Y and Z granted; pod2's ADD cut after its veth pair (``eni``), its interface
    carrying ``carried``; the agent started again under the prefix ``wp``, answered current.
    Yields the node, the host, the agent and pod2's veth."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, [Y, Z])
        veth = host_veth_name("pod2", "eth0", "eni")
        host.veth_of[("pod2", "eth0")] = veth  # the pair, no route, no rule
        if carried is not None:
            host.wired[("pod2", "eth0")] = carried
        host.reader = host.made_with = "wp"  # the setting changed across the restart
        agent = answered_start(n, True, WARMPOOL_VETH_PREFIX="wp")
        assert veth in (agent.ds.meta.get(HOLD_REASON) or []), "setup: the start holds for pod2's veth"
        yield n, host, agent, veth
    finally:
        n.stop()


def test_the_retried_add_of_a_pod_cut_before_its_address_under_another_prefix_ends_the_hold(tmp_path: Path) -> None:
    with restarted_with_another_prefix(tmp_path, None) as (n, _host, agent, _veth):
        assert Y not in offered_within(n, 2), "setup: held while pod2's address is unknown"
        assert cni_add(agent, "pod2") is None  # nothing free yet: the hold is let go by the loop
        assert agent.ds.meta.get(HOLD_REASON) in (None, []), "pod2's veth still in the hold's reason"
        offered = offered_within(n, 3)
        assert {Y, Z} <= offered, f"the held addresses not let go: {offered}"


def test_the_retried_add_of_a_pod_carrying_an_address_under_another_prefix_keeps_it_held(tmp_path: Path) -> None:
    """The contrast, which holds today and must stay: pod2's interface carries Y; the hold stays
    (Y never offered while pod2's namespace carries it)."""
    with restarted_with_another_prefix(tmp_path, Y) as (n, host, agent, veth):
        for _ in range(3):
            assert cni_add(agent, "pod2") is None
        assert host.holders(Y) == [("pod2", "eth0")]
        assert veth in (agent.ds.meta.get(HOLD_REASON) or [])
        assert Y not in offered_within(n, 3), "Y let go while pod2's namespace carries it"


def test_veth_prefix_of_names_the_prefix_a_veth_was_made_with() -> None:
    for prefix in ("eni", "wp", "w", "wpod123"):
        assert veth_prefix_of(host_veth_name("pod2", "eth0", prefix), "pod2", "eth0") == prefix
    assert veth_prefix_of(host_veth_name("pod3", "eth0", "wp"), "pod2", "eth0") is None, "another attachment's"
    assert veth_prefix_of(host_veth_name("pod2", "net1", "wp"), "pod2", "eth0") is None, "another interface's"
    assert veth_prefix_of("wp" + "0" * 13, "pod2", "eth0") is None
