"""Seed 1126692 (stop 52's sweep of seeds 1120000-1129999 on 15939c4; failing on 4313d62, stop 51's
code, too): ``not-settled`` at 1006.8 s, two of n2's pods still waiting. Open, not traced: n2 is a
t3.medium in prefix mode, in a fragmented subnet that refuses /28s (``InsufficientCidrBlocks``), so
its pods get single addresses; at the end its three ENIs hold 5, 5 and 4 addresses, none offered,
one short of the 15 secondary addresses a t3.medium takes, with two pods waiting. Whether one
address of room is left unused (a gap in the prefix fallback) or the check asks more of a node at
its limit than it can hold is not known yet. Shrunk: ``warmpool sim --seed 1126692 --keep
5,9,16,21,22``. Pinned as a strict xfail; docs/reliability.md, "Stop 52"."""

from __future__ import annotations

import pytest

from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim


@pytest.mark.xfail(strict=True, reason="open: two of n2's pods wait at the end (not traced)")
def test_seed_1126692_every_pod_gets_an_address() -> None:
    violations, (out, _w) = run_plan(plan_for(1126692, None))
    assert out.faults.get("launch-pool:refused:InsufficientCidrBlocks", 0) >= 1, "setup"
    assert not violations, violations
