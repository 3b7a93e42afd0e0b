"""Review 24, H1: ``HELD_OFFERS`` names addresses a running pod carries, and an Unassign of one is
no longer the agent's alarm.

The change behind ``HELD_OFFERS`` (seed 1509's class) reasons that an address on offer when a
start held every address by ``?`` is no pod's: its offer stands, and EC2 taking it is the offer
answered. But the hold takes offered addresses at all only because that is not so (review 15,
Q1): an older copy shows the address offered, the allocator handed it back after the copy, a pod
the copy lacks got it and runs routeless. The same hold then notes it as a held offer. After a
rebuild it is worse: every free address is offered as of unknown origin a moment before the hold,
so every one is noted, the address of the very routeless pod the hold stands for among them.

The allocator handed the address back, so no correct allocator unassigns it; the alarm is what
says when one does (EC2 may give it to another node: two holders). Before the change it fired
for any ``?``-held address; now, for these, an INFO line and ``held_offers_taken``. The
simulation still sees it (``released-in-use`` reads the runtime's pods: the last test here), the
agent on a real node does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node_agent.datastore import HELD_OFFERS
from simulation.world import SimWorld
from tests.helpers.agent_world import give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, handed_back_after_the_copy
from tests.helpers.release_check import Violation, check_world, unassign
from warmpool.messages import AllocationResult, Released

X, Y = "10.0.0.50", "10.0.0.51"

TWO_HOLDERS = "an Unassign of an address a running pod carries is the agent's 'two holders possible' alarm"


def _unassigned(n: Node, agent: Any, ip: str) -> None:
    """EC2 unassigns ``ip`` (a ``released`` replying to the agent's newest report)."""
    r = n.step(30)
    seq = r.seq if r is not None else agent.controller.last_seq
    ident = agent.controller.identity
    to = {"cluster": ident.cluster, "node": ident.node, "instance_id": ident.instance_id}
    give(agent, AllocationResult(**to, in_reply_to=seq, actions=[Released(eni_id=PRIMARY.eni_id, ips=[ip])]))
    n.step()


@pytest.mark.parametrize("current", [True, False], ids=["current", "not-current"])
def test_q1_the_held_offer_is_the_address_a_routeless_pod_carries(tmp_path: Path, current: bool) -> None:
    """Evidence (passes): after Q1's older copy, whatever the allocator's verdict, Y is noted as a
    held offer while pod1 carries it. "current" is the allocator's honest answer here: the
    hand-back replies to the copy's own report, not past it (docs/allocator.md, "Restored
    checkpoints")."""
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = KernelPods()
    try:
        handed_back_after_the_copy(n, tmp_path / "backup", X, Y)
        agent = answered_start(n, current, tmp_path / "backup")
        assert n.pods.holders(Y) == [("pod1", "eth0")]
        assert Y in (agent.ds.meta.get(HELD_OFFERS) or ()), agent.ds.meta.get(HELD_OFFERS)
    finally:
        n.stop()


@pytest.mark.parametrize("current", [True, False], ids=["current", "not-current"])
def test_q1_ec2_taking_the_routeless_pod_s_address_is_the_alarm(
    tmp_path: Path, current: bool, caplog: pytest.LogCaptureFixture
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = KernelPods()
    try:
        handed_back_after_the_copy(n, tmp_path / "backup", X, Y)
        agent = answered_start(n, current, tmp_path / "backup")
        _unassigned(n, agent, Y)
        assert n.pods.holders(Y) == [("pod1", "eth0")], "setup: pod1 still carries Y"
        st = agent.controller.stats
        assert st.released_in_use == 1, (
            f"{TWO_HOLDERS}; counted as an answered offer instead: held_offers_taken={st.held_offers_taken}"
        )
        assert any("two holders possible" in r.message for r in caplog.records)
    finally:
        n.stop()


def _rebuilt_with_a_routeless_pod(tmp_path: Path) -> tuple[Node, Any, KernelPods]:
    """pod1 runs on 10.0.0.50; the state directory is lost and the host's routes and rules are
    flushed (pod1's veth stays, carrying its address): the rebuild holds every address by ``?``."""
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = pods = KernelPods()
    agent = n.start()
    grant(n, agent, [X])
    assert add_until(n, agent, "pod1") == X
    n.lose_checkpoint()
    pods.flush_routes()
    pods.flush_rules()
    agent = n.start()
    n.step()
    return n, agent, pods


def test_a_rebuild_notes_the_routeless_pod_s_own_address_as_a_held_offer(tmp_path: Path) -> None:
    """Evidence (passes): the rebuild's hold stands for pod1's veth, and notes pod1's address as
    an offer that stands: no report of this process offered it, nor could any of the process
    before while pod1 had it."""
    n, agent, pods = _rebuilt_with_a_routeless_pod(tmp_path)
    try:
        assert pods.holders(X) == [("pod1", "eth0")]
        assert X in (agent.ds.meta.get(HELD_OFFERS) or ()), agent.ds.meta.get(HELD_OFFERS)
    finally:
        n.stop()


def test_a_rebuild_s_hold_still_alarms_when_ec2_takes_the_routeless_pod_s_address(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n, agent, pods = _rebuilt_with_a_routeless_pod(tmp_path)
    try:
        _unassigned(n, agent, X)
        assert pods.holders(X) == [("pod1", "eth0")], "setup: pod1 still carries X"
        st = agent.controller.stats
        assert st.released_in_use == 1, (
            f"{TWO_HOLDERS}; counted as an answered offer instead: held_offers_taken={st.held_offers_taken}"
        )
        assert any("two holders possible" in r.message for r in caplog.records)
    finally:
        n.stop()


def test_the_simulation_still_calls_it_released_in_use(tmp_path: Path) -> None:
    """The simulation's ground truth is unchanged: its ``released-in-use`` reads the runtime's
    pods, before the held-offer excuse (so its sweeps cannot see that the agent no longer does)."""
    n, agent, _pods = _rebuilt_with_a_routeless_pod(tmp_path)
    try:
        w = check_world(agent.ds)
        w.agents["n0"].rt.up["pod1"] = X
        eni = PRIMARY.eni_id
        with pytest.raises(Violation, match="released-in-use"):
            SimWorld.check_release(w, "n0", {"NetworkInterfaceId": eni, "PrivateIpAddresses": [X]})
        del w.agents["n0"].rt.up["pod1"]
        unassign(w, X)  # no pod: the held offer's fault, no finding
        assert w.faults == ["released-held-offer"]
    finally:
        n.stop()
