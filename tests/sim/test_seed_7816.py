"""Seed 7816 (docs/reliability.md, "Seed 7816 traced"): a gap in the ``not-settled`` check, not a
product defect. In a ``fragmented`` subnet world (prefix mode) the last whole /28s went to n1 (at
12.5 s) and n2 (17.5 s); n0, a t3.medium, got single addresses and filled its three ENIs' fifteen
slots with them by 325.5 s (13 pods, 2 free: one short of ``WARM_IP_TARGET`` 3), and the allocator
answered each of its reports "instance at its ENI limit". Later n1's pod rules were flushed and its
checkpoint lost (``host-wiring``): its restart held its free /28 as offered, was granted three
singles and the /28 was unassigned (369.5 s), whole again in the subnet. The check counted n0's
capacity in /28s as soon as one was whole in its subnets, though no slot of n0 can take one (the
planner puts no /28 in a slot a single holds), and called the warm target it cannot reach
``not-settled``. Without ``host-wiring`` no /28 is whole at the end and the check left n0 by its
capacity in singles. The check now excuses that shortfall alone, counted
``settled-short:no-slot-for-a-28`` (``simulation.checks.no_slot_for_a_28``,
tests/unit/test_settled_short_no_slot.py); pods that wait are judged as before."""

from __future__ import annotations

import pytest

from simulation import checks
from simulation.runner import run_seed

pytestmark = pytest.mark.sim

SHRUNK = [0, 3, 6, 12, 17]


@pytest.mark.parametrize("keep", [SHRUNK, None], ids=["shrunk", "whole"])
def test_seed_7816_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(7816, keep, shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("settled-short:no-slot-for-a-28") == 1
    assert r.faults.get("host-wiring:rules-flushed") == 1


def test_without_the_host_wiring_no_28_is_whole_and_the_capacity_in_singles_already_leaves_n0() -> None:
    r = run_seed(7816, [0, 3, 6, 12], shrink=False)
    assert not r.violations, r.violations
    assert "settled-short:no-slot-for-a-28" not in r.faults


def test_judged_by_its_capacity_in_28s_n0_is_called_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """The finding itself: without the excuse, n0's warm target is called unmet."""
    monkeypatch.setattr(checks, "no_slot_for_a_28", lambda *a, **k: False)
    r = run_seed(7816, SHRUNK, shrink=False)
    assert [v["invariant"] for v in r.violations] == ["not-settled"], r.violations
    assert "n0: pool short of its targets after the quiet period" in r.violations[0]["detail"]
