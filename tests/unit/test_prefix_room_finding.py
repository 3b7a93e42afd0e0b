"""A finding of issue 24's subnet worlds in the simulation (seeds 178 and 207 of
``warmpool sim --seeds 0-299``, ``not-settled``: pods waited to the end with free addresses in
the node's candidate subnets).

In prefix mode the planner caps each Assign and sizes each new ENI by the subnet's free count in
/28 units (``warmpool.planner._plan_allocation``: ``left // unit``, and a new ENI only where
``free >= n * 16 + 1``). When every candidate subnet had fewer than 16 free addresses it planned
no call at all ("no allowed subnet in the AZ has room"): no EC2 call failed, so the fallback to
single addresses (docs/allocator.md, step 7: ``InsufficientCidrBlocks`` → secondary IPs) never
came. Now the planner falls back itself when the prefix plan makes no allocation call."""

from __future__ import annotations

from tests.helpers.planner import AZ, eni, plan, rep
from warmpool.calls import AssignAddresses
from warmpool.subnets import Subnet

TIGHT = [Subnet("subnet-a", AZ, "10.0.0.0/23", 15), Subnet("subnet-b", AZ, "10.0.8.0/28", 11)]
"""Seed 178's n2: its primary ENI in a subnet with 15 free addresses, the other candidate a /28 with 11."""


def test_prefix_mode_falls_back_to_addresses_when_no_subnet_has_room_for_a_prefix() -> None:
    r, inv = rep([eni(0, 0)], mode="prefix", pending=1, warm_ip=1)
    p = plan(r, inv, subnets=TIGHT)
    assert p.mode == "secondary-ip" and p.unmet == 0
    ((call),) = p.calls
    assert isinstance(call, AssignAddresses) and call.eni_id == "eni-00000000"
    assert call.prefixes == 0 and 1 <= call.ips <= 15  # never more than the subnet's free count


def test_prefix_mode_keeps_prefixes_while_a_subnet_has_room_for_one() -> None:
    r, inv = rep([eni(0, 0)], mode="prefix", pending=1, warm_ip=1)
    p = plan(r, inv, subnets=[Subnet("subnet-a", AZ, "10.0.0.0/23", 40)])
    assert p.mode == "prefix" and p.calls == (AssignAddresses("eni-00000000", prefixes=1),)


def test_no_fallback_when_no_address_is_free_either() -> None:
    r, inv = rep([eni(0, 0)], mode="prefix", pending=1, warm_ip=1)
    p = plan(r, inv, subnets=[Subnet("subnet-a", AZ, "10.0.0.0/23", 0)])
    assert p.mode == "prefix" and p.calls == () and p.unmet > 0
