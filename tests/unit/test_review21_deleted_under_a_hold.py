"""Hostile review 21 of 9946d2a: a ``deleted`` takes an ENI with its start's ``?`` holds.

The commit's argument: a ``?`` hold names no pod, the allocator deletes only an ENI whose every
address was offered (no pod's), EC2 takes the addresses with it, and resync never takes the ENI
again. Attacked from the agent's side, the argument holds as long as its premise does: no pod
carries an address of an ENI EC2 said it deleted. These tests take that premise away (an
allocator at fault, or a booked ``deleted`` said to a node using the ENI) and look at what the
agent's alarm kept: ``deleted_in_use`` keeps the ENI and the address (never handed out again)
while the agent has the pod's record. After a checkpoint loss that leaves the pod's veth without
route or rule, the record is a start's ``?`` hold: with the ENI still listed (detaching), the
commit lets the next ``deleted`` take ENI and hold, silently, and the address EC2 grants the node
again goes to a second pod on the node (D1, caused by the commit). With the detach done before the
loss, the rebuild never sees the ENI and the same happens before the commit too (D2): the alarm's
keeping never outlived a checkpoint loss, so D1 narrows to the detaching window.

D1 fixed: a ``deleted`` takes the ENI but no longer its ``?`` holds, which stay recovered holders
not attached (``Datastore.remove_eni``), as ``unrouted`` ones do since seed 4712, so Q granted
again comes in held. D2 stays open (docs/safety.md, the twenty-first review)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from tests.helpers.agent_world import cni_add, give
from tests.helpers.controller import SECOND
from tests.helpers.first_start import Node, add_until
from tests.helpers.kernel_pods import KernelPods
from warmpool.messages import AllocationResult, Attached, Deleted, PoolReport

Q = "10.0.0.21"
"""The address pod1 carries, on SECOND."""
NEXT = EniInfo("eni-00000002", 1, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")


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


def _pod_on_second(n: Node) -> Any:
    agent = n.start()
    r = _report(n)
    n.imds.add(SECOND, [Q])
    give(agent, _reply(r, _attached(SECOND, [Q])))
    n.step()
    assert add_until(n, agent, "pod1") == Q, "setup: pod1 on SECOND"
    return agent


def test_a_pod_on_an_eni_said_deleted_keeps_its_address_across_a_rebuild(tmp_path: Path) -> None:
    _rebuild_then_regrant(tmp_path, detached_before_loss=False)


def test_before_9946d2a_the_same_steps_leave_the_address_to_pod1_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same steps with ``remove_eni`` as before the commit (``?`` holds refuse ``deleted``):
    SECOND is kept for Q's hold (a leak, seed 2748's slot), and Q goes to no second pod."""
    remove = Datastore.remove_eni

    def before(self: Datastore, eni_id: str, *, force: bool = False, unknown_holds: bool = False) -> bool:
        return remove(self, eni_id, force=force)

    monkeypatch.setattr(Datastore, "remove_eni", before)
    _rebuild_then_regrant(tmp_path, detached_before_loss=False)


@pytest.mark.xfail(
    strict=True,
    reason="review 21, D2 (older than 9946d2a): the same with the detach done before the loss: the rebuild "
    "never sees SECOND, pod1's Q (no route, no rule) is held by nothing, and Q granted again goes to a "
    "second pod; deleted_in_use's keeping never outlived a checkpoint loss",
)
def test_a_pod_on_an_eni_said_deleted_keeps_its_address_across_a_rebuild_after_the_detach(tmp_path: Path) -> None:
    _rebuild_then_regrant(tmp_path, detached_before_loss=True)


def _rebuild_then_regrant(tmp_path: Path, *, detached_before_loss: bool) -> None:
    """pod1 on Q (SECOND); ``deleted`` for SECOND (refused: pod1's record); pod1's route and rule
    go and the checkpoint is lost (SECOND still listed, detaching, unless ``detached_before_loss``);
    ``deleted`` again (the release book); EC2 grants Q again, on NEXT in SECOND's slot. Asserts Q
    has one carrier on the host at the end."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = _pod_on_second(n)
        # The premise (the step of the argument under attack): EC2 said deleted for SECOND while
        # pod1 runs with Q (an allocator at fault; a booked delete said again to a node using the
        # ENI). The agent refuses, counts it, keeps SECOND and Q with pod1: Q is never handed out.
        r = _report(n)
        give(agent, _reply(r, Deleted(eni_id=SECOND.eni_id)))
        n.step()
        assert agent.controller.stats.deleted_in_use == 1 and agent.ds.lookup("pod1", "eth0") == (Q, SECOND.eni_id)
        if detached_before_loss:
            del n.imds.enis[SECOND.eni_id]
            for _ in range(3):
                n.step(30)
        # pod1's route and rule go (veth-down, a networkd flush), its veth stays; the checkpoint is
        # lost; the rebuild holds every address IMDS lists by ? (a routeless veth: any may be its pod's).
        host.routes.pop(Q)
        host.rules.discard(Q)
        n.lose_checkpoint()
        agent = n.start()
        if not detached_before_loss:
            assert agent.ds.recovered_holder(Q) == "?", "setup: the rebuild's hold of every address covers Q"
        # The release book says deleted again to the new process's report.
        r = _report(n)
        give(agent, _reply(r, Deleted(eni_id=SECOND.eni_id)))
        n.step()
        # The detach completes; EC2 gives Q to this node again, on the ENI attached in the slot
        # (a grant replying to this process's report, IMDS listing it).
        n.imds.enis.pop(SECOND.eni_id, None)
        r = _report(n)
        n.imds.add(NEXT, [Q, "10.0.0.31"])
        give(agent, _reply(r, _attached(NEXT, [Q, "10.0.0.31"])))
        for k in range(6):
            n.step(30)
            cni_add(agent, f"new{k}")
        assert host.holders(Q) == [("pod1", "eth0")], f"two pods on the node carry {Q}: {host.holders(Q)}"
    finally:
        n.stop()
