"""Seed 183 (prefix mode, custom networking, a fragmented world with named placement; n0 a
c8g.medium, whose one pod ENI has three slots, its runtime handling a failed ADD as containerd
does): n0 ends with three pods on single addresses and four waiting, at its ENI limit. Its
singles were placed while no /28 could be named: the one /28 whole in EC2 at the last single
(the full seed) was n0's own, released by the allocator four seconds before and held by named
placement (docs/allocator.md, "Prefix placement that does not fragment", step 5); in the kept
events, that /28 was still on n0's detached ENI until the GC deleted it. Past the hold every
single a pod held. The check's P1 rule (review 26) read the Create of n0's first /28, which names
its primary address, as singles beside a whole /28, and did not count the hold
(``tests/unit/test_singles_beside_28_named.py``): the pods were judged ``not-settled``; they are
excused now as waiting at capacity (the kept events).

The whole seed waited so for another reason too (traced with seed 1008551): after a checkpoint
loss at 133.3 s, n0's agent learnt the /28 .32/28 from IMDS at 205.2 s, inside the window, and
dated its offer of unknown origin at the start: 72 s old, too old for the allocator to act on,
which counted the /28 as n0's free pool and planned nothing for n0 until the offer's renewal
(471 s). Dated when learnt now (``PoolController._hold_unknown``), the /28 is unassigned at
215.5 s and every pod of n0 is served; the whole seed no longer reaches the waiting state."""

from __future__ import annotations

from typing import Any

import pytest

import warmpool.planner as planner
from simulation import node
from simulation.base import T0
from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim

SHRUNK = [7, 10, 17, 18, 24, 27, 28]


@pytest.fixture
def _n0_containerd(monkeypatch: pytest.MonkeyPatch) -> None:
    """n0's runtime follows containerd (as drawn now), whatever the draw becomes; naming no pod in
    ``CNI_ARGS``, as the model did when the seed was found (stop 49: with the pods named, n0's
    waiting pods count through kubelet's back-off, and the allocator serves them otherwise)."""
    monkeypatch.setattr(node, "NAMES_PODS", False)
    real = node.SimAgent.__init__

    def init(self: Any, *args: Any, **kw: Any) -> None:
        real(self, *args, **kw)
        if self.name == "n0":
            self.rt.containerd = True

    monkeypatch.setattr(node.SimAgent, "__init__", init)


@pytest.mark.usefixtures("_n0_containerd")
def test_seed_183_pods_waiting_at_capacity_beside_a_held_28_are_excused() -> None:
    violations, (out, w) = run_plan(plan_for(183, SHRUNK))
    assert not violations, violations
    assert out.faults.get("fragmented:named-placement") == 1
    a = w.agents["n0"]
    assert a.rt.containerd and len(a.rt.adding) == 4 and len(a.rt.up) == 3
    assert "n0" not in w.nets.singles_beside_28
    assert out.faults.get("settled-short:pods-wait-at-capacity") == 1


@pytest.mark.usefixtures("_n0_containerd")
def test_seed_183_whole_serves_every_pod_once_a_28_learnt_late_in_the_window_is_offered_young() -> None:
    """The whole seed: n0's /28 learnt 72 s into the window after its checkpoint loss is offered
    dated when learnt, unassigned at once, and n0's seven pods all run (before: offered dated at
    the start, dropped as too old for 266 s; four pods waited at the end, excused at capacity)."""
    violations, (out, w) = run_plan(plan_for(183, None))
    assert not violations, violations
    a = w.agents["n0"]
    assert a.rt.containerd and not a.rt.adding and len(a.rt.up) == 7
    assert out.faults.get("settled-short:pods-wait-at-capacity") is None
    calls = [(t - T0, name) for t, name in w.calls_by_iid[a.iid]]
    assert min(t for t, name in calls if name == "unassign_private_ip_addresses") < 300, calls


@pytest.mark.usefixtures("_n0_containerd")
@pytest.mark.parametrize("keep", [SHRUNK, None])
def test_seed_183_still_catches_an_allocator_that_never_asks_a_28(
    monkeypatch: pytest.MonkeyPatch, keep: list[int] | None
) -> None:
    """A planted defect: in prefix mode the planner asks single addresses only. n0's first ones
    go beside a /28 no one released (named placement could have named it): not excused."""
    real: Any = planner._plan_allocation

    def plan(*args: Any) -> Any:
        return real(*args[:9], "secondary-ip" if args[9] == "prefix" else args[9], *args[10:])

    monkeypatch.setattr(planner, "_plan_allocation", plan)
    violations, (out, w) = run_plan(plan_for(183, keep))
    assert "n0" in w.nets.singles_beside_28
    assert [v for v, _ in violations] == ["not-settled"], violations
    assert out.faults.get("settled-short:pods-wait-at-capacity") is None
