"""An ENI EC2 deleted while a start holds an address of it by ``unrouted`` (the simulation's seed 4712).

n0 DELeted seven pods and offered a surplus ENI whole; the allocator deleted it. Its routes were
then flushed under four running pods and it started again on an older copy naming two of the
DELeted pods on that ENI: released (no veth), and held by ``unrouted`` (a routeless veth may
carry them: ``doubtful_records``). The release book said ``deleted`` again to every report and
the agent refused each ("EC2 deleted ... while pods hold its addresses"): the ENI stayed, held,
its device slot kept from the ENI the allocator attached there next, whose addresses the agent
never learnt (``address-leaked``) for as long as the routeless pods ran.

An ``unrouted`` hold, like a ``?`` hold, names no pod: a start's reading that some pod may carry
the address. It no longer keeps the ENI EC2 deleted (its slot is taken again), but it is not
dropped: it stays a recovered holder not attached, so if EC2 grants the address to the node
again it comes in held, never handed out while the hold stands. Here the hold comes from a pod
rule with no route (a DEL stopped half-way, ``hold_wired``), the same holder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.records import EniInfo
from tests.helpers.agent_world import cni_add, give
from tests.helpers.controller import SECOND
from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods
from warmpool.messages import AllocationResult, Deleted

NEXT = EniInfo("eni-00000002", 1, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")
"""The ENI the allocator attached in SECOND's slot once SECOND was gone."""
GONE = "10.0.0.21"
NEW = ["10.0.0.31", "10.0.0.32"]


def _deleted(n: Node, agent: Any, eni_id: str) -> None:
    """A pass, then ``deleted`` for ``eni_id`` in reply to its report, then another pass."""
    r = n.step(30)
    assert r is not None
    give(
        agent,
        AllocationResult(
            cluster=r.cluster,
            node=r.node,
            instance_id=r.instance_id,
            in_reply_to=r.seq,
            actions=[Deleted(eni_id=eni_id)],
        ),
    )
    n.step()


def test_a_deleted_eni_held_only_by_unrouted_goes_its_slot_is_taken_and_the_hold_stays(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        x = pod_on_fresh_address(n)
        n.step(30)
        n.imds.add(SECOND, [GONE])  # detaching, still listed
        host.rules.add(GONE)  # a DEL stopped half-way left its pod's rule: no veth, no route
        host.routes.pop(x)  # pod1's route goes (veth-down); it runs on
        n.lose_checkpoint()
        agent = n.start()
        ds = agent.ds
        assert ds.recovered_holder(GONE) == "unrouted", "setup: a pod rule with no route while a veth has none"
        _deleted(n, agent, SECOND.eni_id)
        assert ds.eni(SECOND.eni_id) is None, "EC2 deleted it and no pod is named on it: still kept"
        assert agent.controller.stats.deleted_in_use == 0
        assert ds.recovered_holder(GONE) == "unrouted", "the hold went with the ENI"
        # the detach completes; the allocator attaches another ENI in the slot
        del n.imds.enis[SECOND.eni_id]
        n.imds.add(NEXT, NEW)
        got = []
        for k in range(4):  # two minutes: past two resyncs
            n.step(30)
            got.append(cni_add(agent, f"new{k}"))
        for ip in NEW:
            eni = ds.eni_of(ip)
            assert eni is not None and eni.eni_id == NEXT.eni_id, f"{ip}: EC2 has it on the node, the agent not"
        # EC2 grants GONE to the node again (on NEXT): it comes in held, never handed out
        n.imds.add(NEXT, [*NEW, GONE])
        for k in range(4, 8):
            n.step(30)
            got.append(cni_add(agent, f"new{k}"))
        eni = ds.eni_of(GONE)
        assert eni is not None and eni.eni_id == NEXT.eni_id, "setup: the agent learns GONE on NEXT"
        assert ds.recovered_holder(GONE) == "unrouted"
        assert GONE not in got and x not in got, got
        assert host.holders(x) == [("pod1", "eth0")]
    finally:
        n.stop()
