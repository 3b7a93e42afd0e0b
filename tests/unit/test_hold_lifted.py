"""Holds whose reason the host no longer shows let go (``node_agent.agent.lift_unfounded_holds``).

The simulation's ``host-wiring`` draws (seed 16: routes flushed under running pods, then an older
copy of the checkpoint refused and rebuilt) found that a start's holds never ended in ``netlink``
mode: a pod veth with no route made the rebuild hold every address (review 14, R1), and nothing
let them go once that pod was gone, so on a node at its ENI limit new pods waited for good
(``not-settled``). The same for a holder named after a veth of another prefix (its DEL names this
prefix's veth and finds nothing) and the holders of pod rules with no route. Now each resync reads
the host again: a holder whose link is gone, and the hold of every address once none of the
routeless veths it stood for is left, let go, offered back as of unknown origin.

Each test checks the hold first (nothing offered or given while the pod runs), then its end."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, offers_and_adds


def _offered_within(n: Node, passes: int) -> set[str]:
    """Passes 30 s apart (past two resyncs of 60 s): what the reports offered back."""
    offered: set[str] = set()
    for _ in range(passes):
        r = n.step(30)
        if r is not None:
            offered |= {ip for o in r.release for ip in o.ips}
    return offered


def test_a_rebuild_s_hold_of_every_address_ends_when_the_routeless_pod_is_gone(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        x = pod_on_fresh_address(n)
        n.step(30)
        host.flush_routes()
        host.flush_rules()  # pod1 runs on: its veth, and x in its namespace
        n.lose_checkpoint()
        agent = n.start()
        offered, others = offers_and_adds(n, agent, 6)  # three minutes, past three resyncs
        assert x not in offered and x not in others, f"{x}: pod1 still carries it"
        assert agent.ds.recovered_holder(x) == "?", "setup: the rebuild holds every address"
        assert cni(agent, "DEL", "pod1")["ok"]  # the runtime deletes pod1: its namespace and veth go
        assert host.holders(x) == []
        offered = _offered_within(n, 6)
        assert x in offered, f"{x}: held after the only pod that could carry it went ({agent.ds.recovered_holder(x)})"
        assert agent.ds.recovered_holder(x) is None
    finally:
        n.stop()


def test_a_holder_named_after_another_prefix_s_veth_ends_when_that_veth_is_gone(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods(made_with="wp")
    try:
        x = pod_on_fresh_address(n, WARMPOOL_VETH_PREFIX="wp")
        n.step(30)
        n.lose_checkpoint()
        host.reader = host.made_with = "eni"  # the setting changed across the restart
        agent = n.start()
        offered, others = offers_and_adds(n, agent, 6)
        holder = agent.ds.recovered_holder(x)
        assert holder is not None and holder.startswith("wp"), f"setup: held by pod1's veth ({holder})"
        assert x not in offered and x not in others, f"{x}: pod1 still carries it"
        assert cni(agent, "DEL", "pod1")["ok"]  # it names this prefix's veth: finds nothing to free
        assert agent.ds.recovered_holder(x) == holder, "setup: the DEL does not free another prefix's holder"
        offered = _offered_within(n, 6)
        assert x in offered and agent.ds.recovered_holder(x) is None, f"{x}: still held by {holder}, a veth gone"
    finally:
        n.stop()


def test_the_hold_stays_while_a_routeless_veth_is_on_the_host(tmp_path: Path) -> None:
    """The contrast: another pod ADDed after the rebuild (its own record) going does not end the
    hold while pod1's routeless veth is there."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        x = pod_on_fresh_address(n)
        n.step(30)
        host.flush_routes()
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()
        offered, others = offers_and_adds(n, agent, 4)
        for cid in [f"new{k}" for k in range(4)]:
            cni(agent, "DEL", cid)
        offered |= _offered_within(n, 6)
        assert x not in offered, f"{x}: offered while pod1's veth (no route) is on the host"
        assert agent.ds.recovered_holder(x) == "?"
    finally:
        n.stop()
