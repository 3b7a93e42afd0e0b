"""The EC2 adapter's side of named placement (functions/ec2.py): a subnet's usage read with a
paid, cached DescribeNetworkInterfaces by subnet-id, and Assign/Create naming what the
placement chose. On the emulator's fast client, in process."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from functions.ec2 import Ec2
from functions.settings import Settings
from functions.telemetry import Tally
from tests.helpers.subnets import Payer
from warmpool.calls import AssignAddresses, CreateEni
from warmpool.placement import place


class Counting:
    """The fast client, counting DescribeNetworkInterfaces requests."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.describes = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def describe_network_interfaces(self, **kw: Any) -> Any:
        self.describes += 1
        return self.inner.describe_network_interfaces(**kw)


def world(**settings: Any) -> tuple[Ec2Emulator, Ec2, VirtualClock, Payer, Tally, Counting, str]:
    clock = VirtualClock(1000.0)
    emu = Ec2Emulator(clock, Ec2Config(single_placement="scattered"))
    sid = emu.add_subnet(cidr="10.0.0.0/24", subnet_id="subnet-a")
    api = Counting(emu.client())
    pay, tally = Payer(), Tally()
    ec2 = Ec2(
        api,  # type: ignore[arg-type]
        Settings(cluster="demo", allowed_subnets=(sid,), named_placement=True, **settings),
        clock,
        tally,
        pay=pay,
    )
    ec2.subnets()
    pay.paid.clear()
    return emu, ec2, clock, pay, tally, api, sid


def test_usage_holds_every_address_and_prefix_of_the_subnets_enis_paid_and_cached() -> None:
    emu, ec2, clock, pay, _, api, sid = world(placement_cache_ttl_s=10)
    c = emu.client()
    a = c.create_network_interface(SubnetId=sid, SecondaryPrivateIpAddressCount=3)["NetworkInterface"]
    c.create_network_interface(SubnetId=sid, Ipv4PrefixCount=1)
    u = ec2.subnet_usage(sid)
    assert u is not None and u.cidr == "10.0.0.0/24"
    assert a["PrivateIpAddress"] in u.ips and len(u.ips) == 5 and len(u.prefixes) == 1
    assert pay.paid == [{"DescribeNetworkInterfaces": 1}, {"GetSubnetCidrReservations": 1}] and api.describes == 1
    assert ec2.subnet_usage(sid) is u and api.describes == 1  # cached
    clock.advance(11)
    c.create_network_interface(SubnetId=sid)
    u2 = ec2.subnet_usage(sid)
    assert u2 is not None and len(u2.ips) == 6 and api.describes == 2


def test_unpaid_usage_is_the_one_read_before_else_none_and_counted() -> None:
    _, ec2, clock, pay, tally, api, sid = world(placement_cache_ttl_s=10)
    pay.wait = 3.0
    assert ec2.subnet_usage(sid) is None and api.describes == 0
    assert tally.get("PlacementReadsDeferred") == 1
    pay.wait = 0.0
    first = ec2.subnet_usage(sid)
    clock.advance(30)
    pay.wait = 3.0
    assert ec2.subnet_usage(sid) is first and tally.get("PlacementReadsDeferred") == 2


def test_a_subnet_not_read_has_no_usage() -> None:
    _, ec2, _, _, _, api, _ = world()
    assert ec2.subnet_usage("subnet-unknown") is None and api.describes == 0


def test_own_placements_are_added_and_forgetting_reads_again() -> None:
    _, ec2, _, _, _, api, sid = world()
    assert ec2.subnet_usage(sid) is not None
    ec2.note_placed(sid, ["10.0.0.9"], ["10.0.0.32/28"])
    u = ec2.subnet_usage(sid)
    assert u is not None and "10.0.0.9" in u.ips and "10.0.0.32/28" in u.prefixes and api.describes == 1
    ec2.forget_usage(sid)
    u = ec2.subnet_usage(sid)
    assert u is not None and "10.0.0.9" not in u.ips and api.describes == 2


def test_named_assign_and_create_take_exactly_the_names() -> None:
    emu, ec2, _, _, _, _, sid = world()
    c = emu.client()
    eid = c.create_network_interface(SubnetId=sid)["NetworkInterface"]["NetworkInterfaceId"]
    usage = ec2.subnet_usage(sid)
    assert usage is not None
    p = place(usage, 5, 2)  # 2 singles and a prefix for the Assigns, 3 addresses and a prefix for the Create
    got = ec2.assign(AssignAddresses(eid, ips=2, at_ips=p.ips[:2]))
    assert got.ips == list(p.ips[:2])
    got = ec2.assign(AssignAddresses(eid, prefixes=1, at_prefixes=p.prefixes[:1]))
    assert got.prefixes == list(p.prefixes[:1])
    made = ec2.create_eni(
        CreateEni(sid, 1, 0, ips=2, prefixes=1, client_token="t1", at_ips=p.ips[2:], at_prefixes=p.prefixes[1:]),
        description="d",
        groups=[],
        tags={},
    )
    assert made.eni.primary_ip == p.ips[2] and set(made.eni.ips) == set(p.ips[3:])
    assert made.eni.prefixes == p.prefixes[1:]


# --- what must not be named: CIDR reservations (review1 P4) and the release books' hold (P2) ---


class PaysPerAction:
    """Pays every read but those of ``unpaid`` (their bucket is empty)."""

    def __init__(self, unpaid: str) -> None:
        self.unpaid, self.paid = unpaid, []  # type: ignore[var-annotated]

    def __call__(self, cost: Any) -> float:
        if self.unpaid in cost:
            return 2.0
        self.paid.append(dict(cost))
        return 0.0


@pytest.mark.parametrize(
    ("reservations", "explicit", "prefix_only"),
    [
        ([], set(), set()),
        ([("10.0.0.0/27", "explicit")], {"10.0.0.0/27"}, set()),
        ([("10.0.0.64/26", "prefix")], set(), {"10.0.0.64/26"}),
        (
            [("10.0.0.0/28", "explicit"), ("10.0.0.32/27", "prefix"), ("10.0.0.128/28", "explicit")],
            {"10.0.0.0/28", "10.0.0.128/28"},
            {"10.0.0.32/27"},
        ),
    ],
)
def test_usage_carries_the_subnets_cidr_reservations_by_type(
    reservations: list[tuple[str, str]], explicit: set[str], prefix_only: set[str]
) -> None:
    emu, ec2, _, pay, _, _, sid = world()
    for cidr, kind in reservations:
        emu.client().create_subnet_cidr_reservation(SubnetId=sid, Cidr=cidr, ReservationType=kind)
    u = ec2.subnet_usage(sid)
    assert u is not None and u.explicit == explicit and u.prefix_only == prefix_only
    assert {"GetSubnetCidrReservations": 1} in pay.paid
    named = place(u, 40, 3)
    for r in explicit:
        net = ipaddress.IPv4Network(r)
        assert not [ip for ip in named.ips if ipaddress.IPv4Address(ip) in net]
        assert not [p for p in named.prefixes if ipaddress.IPv4Network(p).overlaps(net)]
    for r in prefix_only:
        net = ipaddress.IPv4Network(r)
        assert not [ip for ip in named.ips if ipaddress.IPv4Address(ip) in net]


def test_reservations_are_read_page_by_page_each_paid() -> None:
    emu, ec2, _, pay, _, api, sid = world()
    for i in range(7):
        emu.client().create_subnet_cidr_reservation(
            SubnetId=sid, Cidr=f"10.0.0.{16 * i}/28", ReservationType="explicit"
        )

    class SmallPages(Counting):
        def get_subnet_cidr_reservations(self, **kw: Any) -> Any:
            return self.inner.get_subnet_cidr_reservations(**{**kw, "MaxResults": 5})

    ec2.api = SmallPages(api.inner)
    u = ec2.subnet_usage(sid)
    assert u is not None and len(u.explicit) == 7
    assert pay.paid.count({"GetSubnetCidrReservations": 1}) == 2


@pytest.mark.parametrize("unpaid", ["DescribeNetworkInterfaces", "GetSubnetCidrReservations"])
def test_an_unpaid_read_of_either_kind_leaves_no_usage_and_is_counted(unpaid: str) -> None:
    emu, ec2, _, _, tally, _, sid = world()
    ec2.pay = PaysPerAction(unpaid)
    emu.client().create_subnet_cidr_reservation(SubnetId=sid, Cidr="10.0.0.0/27", ReservationType="explicit")
    assert ec2.subnet_usage(sid) is None and tally.get("PlacementReadsDeferred") == 1


def test_held_is_asked_after_the_describe_and_cached_with_it() -> None:
    _, ec2, clock, _, tally, api, sid = world(placement_cache_ttl_s=10)
    asked: list[int] = []

    def held() -> frozenset[str] | None:
        asked.append(api.describes)
        return frozenset({"10.0.0.20", "10.0.0.48/28"})

    u = ec2.subnet_usage(sid, held)
    assert u is not None and u.held == {"10.0.0.20", "10.0.0.48/28"} and asked == [1]
    assert ec2.subnet_usage(sid, held) is u and asked == [1]  # cached with the Describe
    ec2.note_placed(sid, ["10.0.0.9"], [])
    u = ec2.subnet_usage(sid, held)
    assert u is not None and u.held == {"10.0.0.20", "10.0.0.48/28"}
    named = place(u, 20, 1)
    assert "10.0.0.20" not in named.ips and "10.0.0.48/28" not in named.prefixes
    # not known (the store did not answer): no usage, as unpaid; the one read before if any
    clock.advance(11)
    assert ec2.subnet_usage(sid, lambda: None) is u and tally.get("PlacementReadsDeferred") == 1
    ec2.forget_usage(sid)
    assert ec2.subnet_usage(sid, lambda: None) is None and tally.get("PlacementReadsDeferred") == 2
