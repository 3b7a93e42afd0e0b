"""A start's holds end with the DELs of the pods they stood for (``CniService._end_holds_of``,
``node_agent.agent.lift_unfounded_holds``).

The simulation's ``host-wiring`` draws found that in ``netlink`` mode a start's holds never
ended: a holder named after a pod's veth of an earlier prefix (its DEL names this prefix's veth
and finds nothing: seed 66, ``hold-unfounded``), and the hold of every address a pod veth with no
route makes (review 14, R1), with the holders of pod rules with no route. Now a DEL ends what was
held for its attachment's veth under any prefix, and once every pod with no route at the start
is DELeted the hold of every address ends, its addresses offered back as of unknown origin. A
veth gone is not a pod gone (seed 732): only the DEL counts.

Each test checks the hold first (nothing offered or given while the pod runs), then its end."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start, offered_within, offers_and_adds


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
        offered = offered_within(n, 6)
        assert x in offered, f"{x}: held after the only pod that could carry it went ({agent.ds.recovered_holder(x)})"
        assert agent.ds.recovered_holder(x) is None
    finally:
        n.stop()


def test_a_holder_named_after_another_prefix_s_veth_ends_with_its_pod_s_del(tmp_path: Path) -> None:
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
        assert cni(agent, "DEL", "pod1")["ok"]  # pod1's DEL: its veth under any prefix
        assert agent.ds.recovered_holder(x) is None, f"{x}: still held by {holder} after pod1's DEL"
        assert x not in host.rules, f"{x}: its pod rule left on the host"
    finally:
        n.stop()


def test_the_hold_stays_while_a_routeless_veth_is_on_the_host(tmp_path: Path) -> None:
    """The contrast: other pods ADDed after the rebuild (their own records) going does not end the
    hold while pod1, with no route, runs."""
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
        assert x not in others, f"{x}: given to a new pod while pod1 runs"
        for cid in [f"new{k}" for k in range(4)]:
            cni(agent, "DEL", cid)
        offered |= offered_within(n, 6)
        assert x not in offered, f"{x}: offered while pod1's veth (no route) is on the host"
        assert agent.ds.recovered_holder(x) == "?"
    finally:
        n.stop()


def test_the_hold_stays_while_the_routeless_pod_runs_though_its_veth_went(tmp_path: Path) -> None:
    """A veth gone is not a pod gone: the runtime still runs pod1 (its veth deleted by a failed
    ADD's teardown of its name, or by hand), and Kubernetes still gives pod1 its address. Held
    until pod1's DEL (the simulation's seed 732: let go when the veth went, the allocator
    unassigned the address pod1 was still running with)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        x = pod_on_fresh_address(n)
        n.step(30)
        host.flush_routes()
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()
        host.teardown("pod1", "eth0", None)  # its veth goes; the runtime runs pod1 on
        offered = offered_within(n, 6)
        assert x not in offered and agent.ds.recovered_holder(x) == "?", f"{x}: let go while pod1 runs"
        assert cni(agent, "DEL", "pod1")["ok"]
        assert x in offered_within(n, 6), f"{x}: held after pod1's DEL"
    finally:
        n.stop()


def test_an_older_copy_s_holder_of_a_pod_deleted_since_is_released_at_its_restore(tmp_path: Path) -> None:
    """The simulation's seed 2233: the copy names pod1's veth as the holder of x; pod1 was DELeted
    after it (the holder released by a process whose writes were lost). Restored, nothing of pod1
    is on the host and no DEL comes again: released, as the copy's records are
    (``agent.release_gone_holders``)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        x = pod_on_fresh_address(n)
        n.step(30)
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: x held by pod1's veth
        n.step(30)
        assert agent.ds.recovered_holder(x) == host.veth_of[("pod1", "eth0")], "setup: held by pod1's veth"
        shutil.copytree(n.state, backup)
        assert cni(agent, "DEL", "pod1")["ok"]
        assert host.holders(x) == [] and x not in host.routes and x not in host.rules
        agent = answered_start(n, True, backup)
        assert agent.ds.recovered_holder(x) is None, (
            f"{x}: still held by {agent.ds.recovered_holder(x)}, pod1 long gone"
        )
    finally:
        n.stop()
