"""Hostile review 33 of 1df6757..h21d: review 21's D1 fix keeps a deleted ENI's ``?`` holds as
recovered holders not attached (``Datastore.remove_eni``). Checked, found sound, pinned here: the
address EC2 grants the node again comes in held and goes to no pod while the hold stands; the
hold's end (the DEL of the pod whose routeless veth it stood for: ``lift_unfounded_holds``) ends
the unattached holds with the attached ones (``release_recovered`` walks the holders, not the
ENIs), leaving none behind; and the address it let go is offered as of unknown origin, never
free (the allocator unassigns it and grants afresh), so it goes to no pod on the word of a
grant made while the hold stood."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.records import EniInfo
from tests.helpers.agent_world import cni, cni_add, give
from tests.helpers.controller import SECOND, never_free
from tests.helpers.first_start import Node, add_until
from tests.helpers.kernel_pods import KernelPods
from warmpool.messages import AllocationResult, Attached, Deleted, PoolReport

Q = "10.0.0.21"
"""The address pod1 carries, on SECOND."""
NEXT = EniInfo("eni-00000002", 1, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")
OTHER = "10.0.0.31"


def _reply(r: PoolReport, *actions: Any) -> AllocationResult:
    return AllocationResult(
        cluster=r.cluster, node=r.node, instance_id=r.instance_id, in_reply_to=r.seq, actions=list(actions)
    )


def _attached(info: EniInfo, ips: list[str]) -> Attached:
    return Attached(
        eni_id=info.eni_id,
        device_index=info.device_index,
        network_card=info.network_card,
        mac=info.mac,
        subnet_id=info.subnet_id,
        subnet_cidr=info.subnet_cidr,
        primary_ip=info.primary_ip,
        ips=ips,
    )


def _report(n: Node) -> PoolReport:
    r = n.step(30)
    if r is None:
        r = n.sqs.reports()[-1]
    return r


def test_a_deleted_enis_unattached_hold_ends_with_the_hold_and_its_address_is_never_free(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        r = _report(n)
        n.imds.add(SECOND, [Q])
        give(agent, _reply(r, _attached(SECOND, [Q])))
        n.step()
        assert add_until(n, agent, "pod1") == Q, "setup: pod1 on SECOND"
        # pod1's route and rule go, its veth stays; the checkpoint is lost: the rebuild holds
        # every address by ? (a routeless veth); EC2 says SECOND deleted (detaching, still listed).
        host.routes.pop(Q)
        host.rules.discard(Q)
        n.lose_checkpoint()
        agent = n.start()
        assert agent.ds.recovered_holder(Q) == "?"
        r = _report(n)
        give(agent, _reply(r, Deleted(eni_id=SECOND.eni_id)))
        n.step()
        assert agent.ds.eni(SECOND.eni_id) is None, "SECOND removed"
        assert agent.ds.recovered_holder(Q) == "?", "the ? hold stays, not attached"
        # EC2 gives Q to this node again, on NEXT.
        n.imds.enis.pop(SECOND.eni_id, None)
        r = _report(n)
        n.imds.add(NEXT, [Q, OTHER])
        give(agent, _reply(r, _attached(NEXT, [Q, OTHER])))
        got = []
        for k in range(4):
            n.step(30)
            got.append(cni_add(agent, f"new{k}"))
        assert Q not in got and host.holders(Q) == [("pod1", "eth0")], (got, host.holders(Q))
        assert agent.ds.eni_of(Q) is not None and agent.ds.eni_of(Q).eni_id == NEXT.eni_id
        assert agent.ds.recovered_holder(Q) == "?", "Q comes in held"
        # pod1 is DELeted: the hold's reason empties and the hold ends, unattached holds with it.
        assert cni(agent, "DEL", "pod1", prev_ip=Q).get("ok"), "DEL answered"
        for _ in range(3):
            n.step(5)
        assert agent.ds.recovered_holder(Q) is None
        assert [h for h in agent.ds.recovered_holders() if h.holder == "?"] == [], agent.ds.recovered_holders()
        assert agent.ds.eni_of(Q) is not None, "still NEXT's"
        assert never_free(agent.ds, agent.controller, Q), "let go as an offer of unknown origin"
        assert Q in agent.ds.quarantined()[NEXT.eni_id][0]
        for k in range(4, 8):
            n.step(30)
            assert cni_add(agent, f"new{k}") != Q
    finally:
        n.stop()
