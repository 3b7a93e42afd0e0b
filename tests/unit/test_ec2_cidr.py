"""Subnet address bookkeeping: reserved addresses, no overlap, exhaustion."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from emulated.ec2.cidr import SubnetPool


def test_reserved_addresses_are_never_handed_out() -> None:
    pool = SubnetPool("10.0.0.0/28")
    got = pool.take_ips(11)
    assert got is not None and len(got) == 11
    assert {"10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.15"}.isdisjoint(got)
    assert pool.take_ips(1) is None and pool.available == 0


def test_prefixes_skip_blocks_holding_reserved_addresses() -> None:
    pool = SubnetPool("10.0.0.0/26")
    assert pool.take_prefixes(3) is None  # the first and last /28 hold reserved addresses
    assert pool.take_prefixes(2) == ["10.0.0.32/28", "10.0.0.16/28"]
    assert pool.take_prefixes(1) is None


def test_release_makes_a_block_whole_again() -> None:
    pool = SubnetPool("10.0.0.0/26")
    ips = pool.take_ips(20)
    assert ips is not None
    assert pool.take_prefixes(2) is None
    for ip in ips:
        pool.release_ip(ip)
    assert pool.take_prefixes(2) is not None


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ip", "prefix", "free"]), st.integers(1, 6)), max_size=40))
def test_singles_and_prefixes_never_overlap(ops: list[tuple[str, int]]) -> None:
    pool = SubnetPool("10.0.0.0/25")
    singles: list[str] = []
    prefixes: list[str] = []
    for kind, n in ops:
        if kind == "ip":
            singles += pool.take_ips(n) or []
        elif kind == "prefix":
            prefixes += pool.take_prefixes(n) or []
        else:
            for _ in range(min(n, len(singles))):
                pool.release_ip(singles.pop(0))
            if prefixes:
                pool.release_prefix(prefixes.pop())
    taken = [ipaddress.IPv4Address(s) for s in singles]
    assert len(set(taken)) == len(taken)
    nets = [ipaddress.IPv4Network(p) for p in prefixes]
    for i, net in enumerate(nets):
        assert int(net.network_address) % 16 == 0
        assert not any(a in net for a in taken)
        assert not any(net.overlaps(o) for o in nets[i + 1 :])
    assert pool.free == 128 - 5 - len(singles) - 16 * len(prefixes)
