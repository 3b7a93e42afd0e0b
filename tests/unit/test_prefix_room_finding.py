"""A finding of issue 24's subnet worlds in the simulation (seeds 178 and 207 of
``warmpool sim --seeds 0-299``, ``not-settled``: pods wait to the end with free addresses in the
node's candidate subnets).

In prefix mode the planner caps each Assign and sizes each new ENI by the subnet's free count in
/28 units (``warmpool.planner._plan_allocation``: ``left // unit``, and a new ENI only where
``free >= n * 16 + 1``). When every candidate subnet has fewer than 16 free addresses, it plans
no call at all ("no allowed subnet in the AZ has room"): no EC2 call fails, so the fallback to
single addresses (docs/allocator.md, step 7: ``InsufficientCidrBlocks`` → secondary IPs) never
comes, and the node's pods wait although the subnets still hold addresses for them. A strict
xfail until the planner falls back to single addresses itself when no subnet has room for a
/28 (the fix is the allocator's, reported, not made here)."""

from __future__ import annotations

import pytest

from tests.unit.test_planner import AZ, eni, plan, rep
from warmpool.subnets import Subnet


@pytest.mark.xfail(strict=True, reason="prefix mode plans nothing when no subnet has 16 free addresses")
def test_prefix_mode_falls_back_to_addresses_when_no_subnet_has_room_for_a_prefix() -> None:
    # seed 178's n2: its primary ENI in a subnet with 15 free addresses, the other candidate a
    # /28 with 11; one pod waits, the node lean (its zone scarce)
    tight = [Subnet("subnet-a", AZ, "10.0.0.0/23", 15), Subnet("subnet-b", AZ, "10.0.8.0/28", 11)]
    r, inv = rep([eni(0, 0)], mode="prefix", pending=1)
    p = plan(r, inv, subnets=tight, lean=True)
    assert p.calls, f"no call planned: {p.notes}"
    assert p.unmet == 0
