"""Seed 7816 (docs/reliability.md, "Seed 7816 traced"): the simulation's ``not-settled`` check, not
the product. In prefix mode a node whose every slot holds a single address (filled while no /28 was
whole) and which is at its ENI limit can take no /28 however many are whole since: the planner
plans by used slots and answers "instance at its ENI limit", and the agent offers a free single back
only as surplus above its targets. The check judged such a node by its /28 capacity as soon as one
/28 was whole in its subnets (another node's given back) and called its unmet warm target
``not-settled``. ``simulation.checks.no_slot_for_a_28`` says when a node is in that state, on the
emulated EC2's own ENIs: each of its conditions is needed."""

from __future__ import annotations

from dataclasses import replace

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from simulation.checks import no_slot_for_a_28
from warmpool.limits import KNOWN_TYPES
from warmpool.pool import PoolConfig

T3_MEDIUM = KNOWN_TYPES["t3.medium"]  # 3 ENIs of 5 slots (6 addresses, the primary included)
POOL = PoolConfig(warm_ip=3, minimum_ip=2, prefix_mode=True, max_pods=110)


class Node:
    """One t3.medium on the emulated EC2, its primary ENI holding ``singles`` and ``prefixes``; more
    ENIs made with :meth:`add_eni` (device 1 and up)."""

    def __init__(self, *, singles: int = 5, prefixes: int = 0) -> None:
        self.clock = VirtualClock(1_700_000_000.0)
        self.emu = Ec2Emulator(self.clock, Ec2Config(attach_delay_s=2.0, detach_delay_s=30.0), seed=7816)
        self.subnet = self.emu.add_subnet(cidr="10.0.0.0/23")
        self.iid = self.emu.run_instance(
            "t3.medium", subnet_id=self.subnet, secondary_count=singles, prefix_count=prefixes
        )
        self.ec2 = self.emu.client()

    def add_eni(self, device: int, *, singles: int = 0, prefixes: int = 0) -> str:
        eni = self.ec2.create_network_interface(SubnetId=self.subnet)["NetworkInterface"]["NetworkInterfaceId"]
        self.ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=self.iid, DeviceIndex=device)
        self.clock.advance(5.0)
        self.emu.settle()
        if singles:
            self.ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=singles)
        if prefixes:
            self.ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=prefixes)
        return eni

    def full(self, pool: PoolConfig = POOL) -> bool:
        self.emu.settle()
        return no_slot_for_a_28(self.emu, self.iid, T3_MEDIUM, pool)


def seed_7816_n0() -> tuple[Node, str]:
    """n0 at the end of seed 7816: three ENIs, fifteen singles, no /28 (and its last ENI's id)."""
    n = Node()
    n.add_eni(1, singles=5)
    return n, n.add_eni(2, singles=5)


def test_every_slot_of_every_eni_it_may_have_holding_a_single_is_no_slot_for_a_28() -> None:
    n, _ = seed_7816_n0()
    assert n.full()


def test_singles_beside_28s_in_the_other_slots_leave_none_either() -> None:
    n = Node(singles=1, prefixes=4)
    n.add_eni(1, prefixes=5)
    n.add_eni(2, singles=4, prefixes=1)
    assert n.full()


def test_an_eni_fewer_than_its_limit_leaves_a_device_for_a_new_eni() -> None:
    n = Node()
    n.add_eni(1, singles=5)
    assert not n.full()


def test_one_slot_free_takes_a_28() -> None:
    n = Node()
    n.add_eni(1, singles=5)
    n.add_eni(2, singles=4)
    assert not n.full()


def test_a_node_whose_slots_all_hold_28s_is_at_its_ceiling_not_excused_here() -> None:
    """No single holds a slot: the check's ceiling (``warmpool.pool.ceiling``) already says what it
    can hold; this state excuses nothing more."""
    n = Node(singles=0, prefixes=5)
    n.add_eni(1, prefixes=5)
    n.add_eni(2, prefixes=5)
    assert not n.full()


def test_an_eni_detaching_frees_a_device_for_a_new_eni() -> None:
    n, last = seed_7816_n0()
    attachment = n.emu.enis[last].attachment
    assert attachment is not None
    n.ec2.detach_network_interface(AttachmentId=attachment.id)
    assert n.emu.enis[last].attachment is attachment and attachment.status == "detaching"
    assert not n.full()
    n.clock.advance(31.0)
    n.emu.settle()
    assert n.emu.enis[last].attachment is None
    assert not n.full()


def test_max_eni_sets_the_limit() -> None:
    n = Node()
    n.add_eni(1, singles=5)
    assert not n.full()
    assert n.full(replace(POOL, max_eni=2))


def test_multi_card_and_custom_networking_are_not_judged_here() -> None:
    n, _ = seed_7816_n0()
    assert not n.full(replace(POOL, multi_card=True))
    assert not n.full(replace(POOL, custom_networking=True))


def test_another_instance_s_enis_count_for_nothing() -> None:
    n = Node()
    n.add_eni(1, singles=5)
    other = n.emu.run_instance("t3.medium", subnet_id=n.subnet, secondary_count=5)
    eni = n.ec2.create_network_interface(SubnetId=n.subnet, SecondaryPrivateIpAddressCount=5)["NetworkInterface"]
    n.ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"], InstanceId=other, DeviceIndex=1)
    n.clock.advance(5.0)
    assert not n.full()
