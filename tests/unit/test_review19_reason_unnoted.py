"""Review 19, U1 (two holders, by seed 732's rule): a checkpoint that holds every address
(``HELD_ALL_META``) but names no reason (``HOLD_REASON`` absent) gets one made from the host *now*
(``note_hold_reason``: ``before`` not a list counts as no link). Every checkpoint an agent before
61aef6b wrote in such a hold is one (that agent held every address for good in ``netlink`` mode and
wrote no reason). After the upgrade's restart the reason is only the routeless links the host shows
then; a routeless pod whose veth went meanwhile while it runs on (a failed ADD's teardown of its
name, a link deleted by hand: the simulation's seed 732, and ``tests/unit/test_hold_lifted.py``'s
last test: "a veth gone is not a pod gone") is in no reason, the reason is empty at once, and the
first pass lets every address go: the running pod's address is offered as of unknown origin and the
allocator unassigns it (EC2 may give it to another node).

The same start on a checkpoint this version wrote keeps the hold (the old reason is united with
the host's links): the contrast, which passes.

Suggested fix: a hold of every address with no reason noted is one whose pods this version cannot
count: note a reason no DEL can take out (or leave the reason absent, which the lift reads as "not
mine"), so the hold stays as the older agent kept it (until a lost checkpoint's rebuild, or an
operator's word); and say so in the upgrade notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.controller import HELD_ALL_META
from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start

X, Y = "10.0.0.50", "10.0.0.51"


@pytest.mark.parametrize(
    "written_by",
    [
        "this version",  # the contrast: passes
        "an agent before 61aef6b",  # fixed: an unnoted hold keeps agent.UNNOTED, which no DEL ends
    ],
)
def test_the_hold_stays_across_a_restart_while_the_routeless_pod_runs_though_its_veth_went(
    tmp_path: Path, written_by: str
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        host.flush_routes()  # pod1 runs on: its veth pair, X in its namespace; no route, no rule
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: every address held, for pod1's routeless veth
        assert agent.ds.recovered_holder(X) == "?", "setup: the rebuild holds every address"
        assert agent.ds.meta.get(HOLD_REASON) == [host_veth_name("pod1", "eth0")]
        if written_by != "this version":
            agent.ds.set_meta(HOLD_REASON, None)  # the checkpoint as an earlier agent wrote it: no reason
        host.teardown("pod1", "eth0", None)  # its veth goes; the runtime runs pod1 on, X its address
        agent = answered_start(n, True)  # the upgrade's restart, on the current checkpoint
        offered: set[str] = set()
        for _ in range(8):
            r = n.step(30)
            if r is not None:
                offered |= {ip for o in r.release for ip in o.ips}
        assert X not in offered and agent.ds.recovered_holder(X) == "?", (
            f"{X}: let go while pod1 runs (held by {agent.ds.recovered_holder(X)!r}, every address held: "
            f"{agent.ds.meta.get(HELD_ALL_META) is not None}, reason {agent.ds.meta.get(HOLD_REASON)})"
        )
        assert cni(agent, "DEL", "pod1")["ok"]  # and its DEL ends it (the contrast's end)
    finally:
        n.stop()
