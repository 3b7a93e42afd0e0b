"""Findings of issue 24's subnet worlds in the simulation (seeds 7325 and 500105, ``not-settled``:
pods of a prefix-mode node waited to the end while a candidate subnet had room for them).

A prefix call a subnet cannot take (no whole /28: named placement sees it before the call,
``PlanExecutor._no_block``; by count EC2 answers ``InsufficientCidrBlocks``) re-plans the node
without that subnet, and only when that leaves it short, in single addresses on its ENIs there
(docs/allocator.md, step 7 and "Prefix placement that does not fragment").

* 7325 (named placement): two subnets were left for want of a /28 in one invocation (the primary
  ENI's, then a second one a Create would have used) and the fallback brought back only the last
  one; the singles Assign there was refused (its free addresses are a prefix reservation's) and
  the node's primary ENI, in a subnet with hundreds of free addresses, was never asked again.
* 500105 (by count): ``InsufficientCidrBlocks`` on a Create went straight to single addresses in
  the same subnet while another candidate subnet had whole /28s; the small node's last ENI slot
  took singles there and its pods outgrew what singles can give.
"""

from __future__ import annotations

from typing import Any

from emulated.ec2 import Ec2Config
from tests.helpers.reliability_cluster import ReliabilityCluster
from warmpool.pool import PoolConfig

SCATTERED = Ec2Config(single_placement="scattered", placement_seed=5)


def _fragment(c: ReliabilityCluster, subnet: str) -> None:
    """Another caller's ENIs take single addresses, placed by EC2 anywhere, until no aligned /28
    of the subnet is whole (most of its addresses stay free)."""
    ec2 = c.w.emu.client()
    pool = c.w.emu.subnets[subnet].pool
    while pool.free_blocks() > 0:
        ec2.create_network_interface(SubnetId=subnet, SecondaryPrivateIpAddressCount=min(8, pool.free - 1))
    assert pool.free > 300


def _reserved_for_prefixes(c: ReliabilityCluster, subnet: str) -> None:
    """Seed 7325's second subnet (a /26): its upper /27 a prefix reservation, one /28 of it
    another node's prefix, the other holding the subnet's last address (AWS reserves it, so no
    prefix fits); below it, five free addresses. By count the subnet has 20 free (room for a /28
    as the planner counts), no whole /28, and five addresses a single asked by count may take."""
    ec2 = c.w.emu.client()
    ec2.create_subnet_cidr_reservation(SubnetId=subnet, Cidr="10.0.16.32/27", ReservationType="prefix")
    low = [f"10.0.16.{i}" for i in range(4, 32)]  # 28 addresses outside the reservation
    ec2.create_network_interface(
        SubnetId=subnet,
        PrivateIpAddresses=[{"PrivateIpAddress": ip, "Primary": i == 0} for i, ip in enumerate(low[:23])],
        Ipv4Prefixes=[{"Ipv4Prefix": "10.0.16.32/28"}],
    )
    pool = c.w.emu.subnets[subnet].pool
    assert pool.free_blocks() == 0 and pool.available == 20


def _calls(c: ReliabilityCluster, name: str) -> Any:
    return c.w.ec2_stats().get(name, {})


def test_the_singles_fallback_brings_back_every_subnet_left_for_want_of_a_28() -> None:
    c = ReliabilityCluster(
        1,
        instance_type="m5.xlarge",
        pool=PoolConfig(warm_ip=2, prefix_mode=True),
        subnet_cidrs=("10.0.0.0/23", "10.0.16.0/26"),
        ec2_config=SCATTERED,
        named_placement=True,
    )
    main, second = c.w.subnets
    _fragment(c, main)
    _reserved_for_prefixes(c, second)
    c.scale("n0", 10)  # 12 addresses short: one /28's worth
    c.settle(max_s=300)
    node = c.nodes["n0"]
    assert len(node.ds.pods()) == 10, "the pods waited: the primary ENI's subnet was left out of the fallback"
    c.check()
    primary = c.w.emu.instances[node.instance_id].primary_eni
    assert len(c.w.emu.enis[primary].secondary) >= 10  # singles where the addresses are


def test_insufficient_cidr_blocks_by_count_moves_to_a_subnet_with_whole_28s_before_singles() -> None:
    c = ReliabilityCluster(
        1,
        instance_type="m5.large",  # 3 ENIs of 10 addresses: 27 pods at most in single addresses
        pool=PoolConfig(warm_ip=2, prefix_mode=True),
        subnet_cidrs=("10.0.0.0/22", "10.0.8.0/24"),
        ec2_config=SCATTERED,
        named_placement=False,
    )
    main, second = c.w.subnets
    _fragment(c, main)  # most free addresses (the planner's first choice), no /28
    c.scale("n0", 32)
    c.settle(max_s=600)
    node = c.nodes["n0"]
    assert len(node.ds.pods()) == 32, f"{len(node.ds.pods())} of 32 pods hold an address"
    c.check()
    with_prefixes = {e.subnet_id for e in c.w.emu.enis.values() if e.prefixes}
    assert with_prefixes == {second}
    assert (
        _calls(c, "AssignPrivateIpAddresses").get("errors", 0) + _calls(c, "CreateNetworkInterface").get("errors", 0)
        >= 1
    )  # by count: InsufficientCidrBlocks in the fragmented subnet first
