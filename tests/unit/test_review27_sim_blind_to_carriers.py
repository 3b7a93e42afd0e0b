"""Review 27, H1 (hidden alarm): the simulation's invariants never see the second holder that
9dbe1f6's hold exists to prevent, so its sim test (``tests/sim/test_seed_14955.py``, stage
``addressed``) passes with that hold taken out.

A ``cni-overlap`` ADD whose set-up fails ``addressed`` leaves the running pod's interface carrying
the new address (``SimPods.wired``) while its runtime still believes the first one (``Runtime.up``);
``CniService._add`` holds the new address for the pod's veth. The checks (``two-holders`` in
``simulation.checks._state`` and ``pod_up``, ``released-in-use`` in ``SimWorld.check_release``) read
``Runtime.up`` alone: what a pod's namespace carries is never compared with another pod's. Before
9dbe1f6 no running pod's namespace carried an address its runtime did not know (the overlap always
failed before its set-up looked), so nothing was missed; now the very state the change holds for
is invisible.

Shown here with the hold mutated into a release: seed 14955's shrunk plan, with four pods added to
n1 after the overlap, gives n1-p3 the address n1-p2's interface carries (two pods, one address;
``tests/helpers/kernel_pods.KernelPods.holders`` counts it as such), and the run ends with no
violation. The fix to weigh: a check that each address a pod's namespace carries (``SimPods.wired``,
of pairs that exist) is carried by no other pod's namespace on any node, and is not released to EC2
(``check_release``) while carried.

Fixed so in stop 49: ``SimWorld.note_carried`` (``two-holders``) and ``check_release``
(``released-in-use`` for what a namespace carries); the strict xfail removed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import simulation.events
from node_agent.cniserver import CniService
from simulation.kinds import PodsAdd
from simulation.node import SimPods
from simulation.runner import plan_for, run_plan


def test_a_pod_given_the_address_another_pod_s_interface_carries_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = CniService._hold_for_veth

    def released(self: CniService, cid: str, ifname: str, ip: str, holder: str, network: str, why: str) -> None:
        if why == "its veth pair was there before":  # the mutant: 9dbe1f6's hold taken out
            self.ds.release(cid, ifname, self.clock.now())
            return
        held(self, cid, ifname, ip, holder, network, why)

    doubles: list[tuple[str, str, str]] = []
    setup = SimPods.setup

    def watched(self: SimPods, netns: str, ifname: str, cid: str, ip: str, table: int, mtu: int) -> Any:
        # noted before the set-up: the check now ends the run inside it
        doubles.extend((self.node, cid, other) for (other, _), got in self.wired.items() if got == ip and other != cid)
        return setup(self, netns, ifname, cid, ip, table, mtu)

    monkeypatch.setattr(CniService, "_hold_for_veth", released)
    monkeypatch.setattr(SimPods, "setup", watched)
    monkeypatch.setattr(simulation.events, "overlap_stage", lambda w, a: "addressed")
    base = plan_for(14955, [0, 7, 21, 22], frozenset())
    plan = dataclasses.replace(base, events=(*base.events, PodsAdd(at=200.0, node="n1", n=4)))
    violations, (out, _) = run_plan(plan)
    assert out.faults.get("cni-overlap:addressed") == 1, "setup: the overlap's set-up failed once addressed"
    assert doubles, "setup: a new pod got the address a running pod's interface carries"
    assert any(inv == "two-holders" for inv, _ in violations), (
        f"{doubles[0][1]} was given what {doubles[0][2]}'s interface carries, and the run saw {violations}"
    )
