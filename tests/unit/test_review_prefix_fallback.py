"""Hostile review of 0e02c32 (prefix fallback: InsufficientCidrBlocks by count re-plans without the
subnet before falling back to single addresses). Each test asserts the behaviour a fixed allocator
must have; F1-F3 are fixed (``PlanExecutor._replan``: the fallback to singles brings back every
subnet left for want of a /28 when the re-plan is short, asks no /28, follows a refusal for room,
or ``MAX_BLOCKLESS_SUBNETS`` subnets were left); F4 is fixed by the container's memory of subnets
refused a /28 by count (``PlanExecutor.avoid_blockless``, ``BLOCKLESS_MEMORY_S``)."""

from __future__ import annotations

from typing import Any

from emulated.ec2 import Ec2Config
from functions.execute import BLOCKLESS_MEMORY_S
from tests.helpers.reliability_cluster import ReliabilityCluster
from warmpool.pool import PoolConfig

SCATTERED = Ec2Config(single_placement="scattered", placement_seed=5)


def _fragment(c: ReliabilityCluster, subnet: str) -> list[str]:
    """Another caller's ENIs take scattered single addresses until no aligned /28 is whole: their ids."""
    ec2 = c.w.emu.client()
    pool = c.w.emu.subnets[subnet].pool
    made: list[str] = []
    while pool.free_blocks() > 0:
        resp = ec2.create_network_interface(SubnetId=subnet, SecondaryPrivateIpAddressCount=min(8, pool.free - 1))
        made.append(resp["NetworkInterface"]["NetworkInterfaceId"])
    assert pool.free >= 40
    return made


def _by_count(instance_type: str, subnet_cidrs: tuple[str, ...]) -> ReliabilityCluster:
    """One node in prefix mode (``WARM_IP_TARGET=2``), EC2 placing what is asked by count."""
    return ReliabilityCluster(
        1,
        instance_type=instance_type,
        pool=PoolConfig(warm_ip=2, prefix_mode=True),
        subnet_cidrs=subnet_cidrs,
        ec2_config=SCATTERED,
        named_placement=False,
    )


def _stats(c: ReliabilityCluster, name: str) -> dict[str, int]:
    return c.w.ec2_stats().get(name, {})


def _refused(c: ReliabilityCluster) -> int:
    return _stats(c, "AssignPrivateIpAddresses").get("errors", 0) + _stats(c, "CreateNetworkInterface").get("errors", 0)


# Fixed (was a strict xfail of the review, F1): PlanExecutor._replan falls back to singles.
def test_four_fragmented_candidates_still_fall_back_to_singles() -> None:
    c = _by_count("m5.xlarge", ("10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"))  # 4 ENIs of 15 addresses
    for s in c.w.subnets:
        _fragment(c, s)
    c.scale("n0", 10)
    c.settle(max_s=300)
    node = c.nodes["n0"]
    got = len(node.ds.pods())
    refused = _refused(c)
    assert got == 10, f"{got} of 10 pods hold an address; {refused} refused prefix calls"
    # one invocation: two subnets refused (MAX_BLOCKLESS_SUBNETS), then singles
    assert refused <= 2, f"{refused} refused prefix calls"


def _node_enis(c: ReliabilityCluster, name: str) -> list[Any]:
    iid = c.nodes[name].instance_id
    return [e for e in c.w.emu.enis.values() if e.attachment is not None and e.attachment.instance_id == iid]


# Fixed (was a strict xfail of the review, F2): PlanExecutor._replan falls back to singles.
def test_singles_go_on_the_nodes_own_eni_not_on_a_new_eni_in_a_nearly_full_subnet() -> None:
    c = _by_count("m5.large", ("10.0.0.0/24", "10.0.16.0/27"))
    main, small = c.w.subnets
    _fragment(c, main)  # the node's subnet: ~40+ free addresses, no whole /28
    c.w.emu.client().create_network_interface(SubnetId=small, SecondaryPrivateIpAddressCount=12)
    assert c.w.emu.subnets[small].pool.free == 14  # room for a singles ENI, not for a /28
    c.scale("n0", 6)
    c.settle(max_s=120)
    assert len(c.nodes["n0"].ds.pods()) == 6
    enis = _node_enis(c, "n0")
    # before 0e02c32: six singles on the primary ENI (main subnet); B untouched, no Create
    assert [e.subnet_id for e in enis] == [main], [(e.subnet_id, len(e.secondary)) for e in enis]
    assert c.w.emu.subnets[small].pool.free == 14


# Fixed (was a strict xfail of the review, F3): PlanExecutor._replan falls back to singles.
def test_a_subnet_refused_for_room_after_one_left_for_a_28_still_falls_back_in_the_same_invocation() -> None:
    c = _by_count("m5.large", ("10.0.0.0/24", "10.0.8.0/24"))
    main, _second = c.w.subnets
    _fragment(c, main)
    # the other subnet's Create refused for room (its cached count stale: another caller took it)
    c.w.emu.fail_next("CreateNetworkInterface", "InsufficientFreeAddressesInSubnet")
    c.scale("n0", 6)
    c.step()
    c.step()  # the report served, its result applied
    assert len(c.nodes["n0"].ds.pods()) == 6, "the invocation gave nothing beside a subnet with free singles"


# Fixed (was a strict xfail of the review, F4): PlanExecutor.avoid_blockless remembers the subnet.
def test_a_subnet_known_without_a_whole_28_is_not_asked_again_on_every_growth() -> None:
    c = _by_count("m5.large", ("10.0.0.0/22", "10.0.8.0/24"))
    main, _second = c.w.subnets
    _fragment(c, main)
    for pods in (4, 20, 36, 52, 68):
        c.scale("n0", pods)
        c.settle(max_s=200)
        assert len(c.nodes["n0"].ds.pods()) == pods
    assert _refused(c) <= 2, f"{_refused(c)} refused prefix calls for 5 growth steps"


def _prefixes_held(c: ReliabilityCluster, name: str) -> int:
    return sum(len(e.prefixes) for e in _node_enis(c, name))


def test_a_remembered_subnet_is_forgotten_when_a_28_is_free_again_and_the_node_goes_back_to_prefixes() -> None:
    c = _by_count("m5.large", ("10.0.0.0/22",))
    (main,) = c.w.subnets
    others = _fragment(c, main)
    c.scale("n0", 4)
    c.settle(max_s=200)
    assert len(c.nodes["n0"].ds.pods()) == 4
    assert _refused(c) == 1 and _prefixes_held(c, "n0") == 0  # refused once, singles
    c.scale("n0", 12)
    c.settle(max_s=200)
    assert _refused(c) == 1 and _prefixes_held(c, "n0") == 0  # remembered: singles, no second refusal
    ec2 = c.w.emu.client()
    for eni_id in others:  # the other caller goes: whole /28s again
        ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    c.run(40)  # past the subnet cache's 30 s: the read shows the freed addresses
    c.scale("n0", 30)
    c.settle(max_s=300)
    assert len(c.nodes["n0"].ds.pods()) == 30
    assert _prefixes_held(c, "n0") > 0, "the node stayed on single addresses with whole /28s free"
    assert _refused(c) == 1


def test_a_remembered_subnet_is_asked_again_after_the_memory_and_refused_once_more() -> None:
    c = _by_count("m5.large", ("10.0.0.0/22",))
    (main,) = c.w.subnets
    _fragment(c, main)
    c.scale("n0", 4)
    c.settle(max_s=200)
    assert _refused(c) == 1
    c.run(BLOCKLESS_MEMORY_S + 10)
    c.scale("n0", 20)
    c.settle(max_s=200)
    assert len(c.nodes["n0"].ds.pods()) == 20
    assert _refused(c) == 2, "the memory never ran out: a subnet with whole /28s again would never be asked"
