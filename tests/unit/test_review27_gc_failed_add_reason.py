"""Review 27, G1 (a leak: every free address held for good), made common by 9dbe1f6: the CNI GC of
a failed ADD's hold (``CniService._gc_failed_add_holds``) tears the attachment's veth down and
releases the held address, but leaves the veth in a start's hold reason (``HOLD_REASON``). The GC
of a record ends what a start held for its veth as its DEL does (review 23, G2:
``CniService._end_holds_of``); the GC of a failed ADD's hold does not.

Before 9dbe1f6 a failed ADD's hold (``_hold_for_veth``) was made only when its teardown failed
too. Now a failed second ADD of a running pod whose set-up reached the pod's interface holds the
new address for the veth every time, and that is exactly the pod whose veth a start holds every
address for (seed 14955's path: its route gone, the checkpoint lost, its address held by
``unrouted``). When the runtime then gives the pod up without a DEL reaching the agent (its
sandbox removed, its namespace and veth with it) and its GC no longer lists the attachment, the
GC releases the new address but the veth stays in the reason, and the hold of every free address
and the ``unrouted`` holder never end (``lift_unfounded_holds`` waits for an empty reason; a
restart keeps what the copy noted).

The fix to weigh: ``_gc_failed_add_holds`` calls ``_end_holds_of`` for the attachment it released,
as ``gc`` does for a record.

Fixed so in stop 49 (the strict xfail removed)."""

from __future__ import annotations

from pathlib import Path

from node_agent.datastore import FAILED_ADD_HOLDS, HOLD_REASON
from node_agent.records import UNROUTED_HOLDER
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import FailingPods, offered_within, runtime_gc

Z = "10.0.0.60"


def test_the_gc_of_a_failed_second_add_s_hold_ends_the_start_s_hold_for_its_veth(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = FailingPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        y = add_until(n, n.agent, "pod2")
        n.step(30)
        host.routes.pop(y)  # pod2's veth set down: its /32 route gone, its rule stays
        n.lose_checkpoint()
        agent = n.start()
        n.step(30)
        veth2 = host.veth_of[("pod2", "eth0")]
        assert veth2 in (agent.ds.meta.get(HOLD_REASON) or []), "setup: the start holds for pod2's veth"
        assert agent.ds.recovered_holder(y) == UNROUTED_HOLDER, "setup: y held by unrouted"
        grant_more(n, agent, [Z])
        host.half.add("pod2")
        assert not cni(agent, "ADD", "pod2")["ok"], "setup: the second ADD's set-up failed"
        host.half.clear()
        assert agent.ds.recovered_holder(Z) == veth2, "setup: Z held for pod2's veth (its interface carries it)"
        assert veth2 in (agent.ds.meta.get(FAILED_ADD_HOLDS) or {}), "setup: noted for the GC"
        # The runtime gives pod2 up: its sandbox, namespace and veth pair removed, its DEL lost.
        del host.veth_of[("pod2", "eth0")]
        host.wired.pop(("pod2", "eth0"), None)
        n.step(61)
        assert runtime_gc(agent, ["pod1"])["ok"]
        assert agent.ds.recovered_holder(Z) is None, "setup: the GC released the failed ADD's hold"
        offered = offered_within(n, 4)
        reason = agent.ds.meta.get(HOLD_REASON)
        assert not reason or veth2 not in reason, (
            f"pod2 is gone (unlisted by the runtime's GC, which tore its veth down and released {Z}), "
            f"and the hold reason still names its veth: {reason}"
        )
        assert agent.ds.recovered_holder(y) is None, f"{y} still held by {agent.ds.recovered_holder(y)!r}"
        assert y in offered, f"{y} (pod2's, gone) never offered back: {sorted(offered)}"
    finally:
        n.stop()
