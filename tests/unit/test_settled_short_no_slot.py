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
from types import SimpleNamespace

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from simulation.checks import holds_all_it_can, no_slot_for_a_28
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


def test_multi_card_is_not_judged_here() -> None:
    n, _ = seed_7816_n0()
    assert not n.full(replace(POOL, multi_card=True))


def test_with_custom_networking_the_primary_eni_s_slots_count_for_nothing() -> None:
    """Seed 4088 (stop 48): with custom networking no pod address is on the primary ENI; its empty
    slots are none a /28 could take (before, the rule left custom networking out altogether)."""
    custom = replace(POOL, custom_networking=True)
    n = Node(singles=0)
    n.add_eni(1, singles=5)
    n.add_eni(2, singles=5)
    assert n.full(custom)
    assert not n.full()  # without custom networking the primary's five slots are free
    m = Node(singles=0)
    m.add_eni(1, singles=5)
    m.add_eni(2, singles=4)
    assert not m.full(custom)  # a pod ENI's slot free


def test_another_instance_s_enis_count_for_nothing() -> None:
    n = Node()
    n.add_eni(1, singles=5)
    other = n.emu.run_instance("t3.medium", subnet_id=n.subnet, secondary_count=5)
    eni = n.ec2.create_network_interface(SubnetId=n.subnet, SecondaryPrivateIpAddressCount=5)["NetworkInterface"]
    n.ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"], InstanceId=other, DeviceIndex=1)
    n.clock.advance(5.0)
    assert not n.full()


def _checked(n: Node, *, free: bool, prefix_mode: bool = True, beside: bool = False) -> bool:
    """:func:`simulation.checks.holds_all_it_can` on ``n`` (custom networking), its datastore
    holding one address per running pod, one of them free when ``free``, a third pod waiting;
    ``beside``: the allocator gave the node singles while a /28 was whole (review 26, P1)."""
    ds = Datastore()
    ds.add_eni(EniInfo("eni-a", 1, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_addresses("eni-a", ["10.0.0.11", "10.0.0.12"])
    up = {"p1": "10.0.0.11"}
    assert ds.assign("p1", "eth0", "ns", 0.0) is not None
    if not free:
        assert ds.assign("p2", "eth0", "ns", 0.0) is not None
        up["p2"] = "10.0.0.12"
    pool = replace(POOL, custom_networking=True)
    rt = SimpleNamespace(up=up, adding={"p3": None}, deleting={})
    agent = SimpleNamespace(name="n1", iid=n.iid, ds=ds, rt=rt, ctl=SimpleNamespace(limits=T3_MEDIUM, pool=pool))
    n.emu.settle()
    nets = SimpleNamespace(singles_beside_28={"n1"} if beside else set())
    w = SimpleNamespace(plan=SimpleNamespace(prefix_mode=prefix_mode), emu=n.emu, nets=nets)
    return holds_all_it_can(w, agent)  # type: ignore[arg-type]


def test_pods_wait_at_capacity_only_where_no_address_is_free_and_no_slot() -> None:
    """Seed 4088 (``tests/sim/test_seed_4088.py``): waiting pods are excused only on a node with no
    slot for anything more whose every address a pod holds."""
    n = Node(singles=0)
    n.add_eni(1, singles=5)
    n.add_eni(2, singles=5)
    assert _checked(n, free=False)
    assert not _checked(n, free=True)  # a free address: the waiting pod should have it
    assert not _checked(n, free=False, prefix_mode=False)  # secondary-IP mode: judged by its ceiling
    assert not _checked(n, free=False, beside=True)  # singles placed while a /28 was whole
    m = Node(singles=0)
    m.add_eni(1, singles=5)
    m.add_eni(2, singles=4)
    assert not _checked(m, free=False)  # a slot free
