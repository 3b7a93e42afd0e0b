"""Subnet address bookkeeping: reserved addresses, no overlap, exhaustion."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulated.ec2.cidr import SinglePlacement, SubnetPool


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


# --- single placement: packed (the default) and scattered ----------------------------


def _blocks_touched(ips: list[str], base: int) -> set[int]:
    return {(int(ipaddress.IPv4Address(ip)) - base) // 16 for ip in ips}


@pytest.mark.parametrize(
    ("placement", "cidr", "n", "max_blocks_touched", "min_blocks_touched"),
    [
        ("packed", "10.0.0.0/24", 20, 2, 1),  # 11 free in the first block, 9 in the second
        ("packed", "10.0.0.0/22", 40, 3, 3),
        ("scattered", "10.0.0.0/24", 20, 16, 9),  # 20 draws over 16 blocks break most of them
        ("scattered", "10.0.0.0/22", 40, 64, 30),
    ],
)
def test_placement_decides_how_many_blocks_singles_break(
    placement: SinglePlacement, cidr: str, n: int, max_blocks_touched: int, min_blocks_touched: int
) -> None:
    pool = SubnetPool(cidr, placement, seed=3)
    got = pool.take_ips(n)
    assert got is not None and len(set(got)) == n
    touched = _blocks_touched(got, pool.base)
    assert min_blocks_touched <= len(touched) <= max_blocks_touched
    assert pool.free == pool.size - 5 - n


def test_packed_singles_are_the_lowest_free_addresses() -> None:
    pool = SubnetPool("10.0.0.0/24")
    assert pool.take_ips(3) == ["10.0.0.4", "10.0.0.5", "10.0.0.6"]


def test_scattered_placement_is_seeded_per_subnet() -> None:
    a = SubnetPool("10.0.0.0/24", "scattered", seed=1).take_ips(10)
    b = SubnetPool("10.0.0.0/24", "scattered", seed=1).take_ips(10)
    c = SubnetPool("10.0.0.0/24", "scattered", seed=2).take_ips(10)
    d = SubnetPool("10.0.1.0/24", "scattered", seed=1).take_ips(10)
    assert a == b
    assert a != c
    assert d is not None and a is not None and [x.split(".")[3] for x in a] != [x.split(".")[3] for x in d]


def test_scattered_singles_never_take_reserved_addresses_and_fill_the_subnet() -> None:
    pool = SubnetPool("10.0.0.0/26", "scattered", seed=5)
    got = pool.take_ips(59)  # 64 - 5 reserved: every free address, drawn at random
    assert got is not None and len(set(got)) == 59
    assert {"10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.63"}.isdisjoint(got)
    assert pool.take_ips(1) is None and pool.free == 0


def test_unknown_placement_is_refused() -> None:
    with pytest.raises(ValueError, match="placement"):
        SubnetPool("10.0.0.0/24", "random")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("singles", "expect_free_blocks", "prefix_ok"),
    [
        ([], 14, True),  # /24: 16 blocks, the first and last hold reserved addresses
        ([f"10.0.0.{16 * b + 5}" for b in range(1, 15)], 0, False),  # one address in every whole block
        ([f"10.0.0.{16 * b + 5}" for b in range(1, 14)], 1, True),  # block 14 left whole
        (["10.0.0.4", "10.0.0.250"], 14, True),  # only the reserved-address blocks touched
    ],
)
def test_insufficient_cidr_blocks_exactly_when_no_aligned_block_is_free(
    singles: list[str], expect_free_blocks: int, prefix_ok: bool
) -> None:
    pool = SubnetPool("10.0.0.0/24")
    for ip in singles:
        assert pool.take_ip(ip)
    assert pool.free_blocks() == expect_free_blocks
    assert pool.free > 200  # plenty of addresses either way
    got = pool.take_prefixes(1)
    assert (got is not None) == prefix_ok
    if got is None:
        assert pool.take_prefixes(1) is None and pool.take_ips(5) is not None


@pytest.mark.parametrize(
    ("prefix", "ok"),
    [
        ("10.0.0.32/28", True),
        ("10.0.0.0/28", False),  # holds reserved addresses
        ("10.0.0.240/28", False),  # holds the last (reserved) address
        ("10.0.0.40/28", False),  # not aligned
        ("10.0.0.32/27", False),  # not a /28
        ("10.0.1.0/28", False),  # outside the subnet
        ("10.0.0.48/28", False),  # overlaps the single taken below
    ],
)
def test_specific_prefix_needs_an_aligned_wholly_free_28(prefix: str, ok: bool) -> None:
    pool = SubnetPool("10.0.0.0/24")
    assert pool.take_ip("10.0.0.50")
    assert pool.take_prefix(prefix) is ok
    assert pool.take_prefix(prefix) is False  # taken now, or still refused


@settings(deadline=None)
@given(
    st.integers(0, 3),
    st.lists(st.tuples(st.sampled_from(["ip", "prefix", "free"]), st.integers(1, 9)), max_size=30),
)
def test_scattered_prefix_count_fails_iff_no_whole_block_is_free(seed: int, ops: list[tuple[str, int]]) -> None:
    pool = SubnetPool("10.0.0.0/25", "scattered", seed=seed)
    singles: list[str] = []
    for kind, n in ops:
        if kind == "ip":
            singles += pool.take_ips(n) or []
        elif kind == "prefix":
            whole = pool.free_blocks()
            got = pool.take_prefixes(n)
            assert (got is None) == (whole < n)
        else:
            for _ in range(min(n, len(singles))):
                pool.release_ip(singles.pop(0))
    assert pool.free_blocks() + pool.broken_blocks() <= 8


# --- subnet CIDR reservations --------------------------------------------------------------


@pytest.mark.parametrize("placement", ["packed", "scattered"])
@pytest.mark.parametrize(
    ("reservations", "n_ips", "n_prefixes", "prefixes_first"),
    [
        ([("10.0.0.0/27", "explicit")], 40, 2, []),
        ([("10.0.0.32/27", "prefix")], 40, 3, ["10.0.0.48/28", "10.0.0.32/28"]),
        ([("10.0.0.0/26", "explicit"), ("10.0.0.64/28", "prefix")], 100, 2, ["10.0.0.64/28"]),
        ([("10.0.0.200/29", "explicit"), ("10.0.0.128/27", "prefix")], 60, 1, ["10.0.0.144/28"]),
    ],
)
def test_by_count_nothing_lands_where_a_reservation_says_not(
    placement: str, reservations: list[tuple[str, str]], n_ips: int, n_prefixes: int, prefixes_first: list[str]
) -> None:
    pool = SubnetPool("10.0.0.0/24", placement, seed=3)  # type: ignore[arg-type]
    for i, (cidr, kind) in enumerate(reservations):
        pool.reserve(f"scr-{i}", cidr, kind)
    prefixes = pool.take_prefixes(n_prefixes)
    ips = pool.take_ips(n_ips)
    assert prefixes is not None and ips is not None
    assert prefixes[: len(prefixes_first)] == prefixes_first
    nets = [(ipaddress.IPv4Network(c), k) for c, k in reservations]
    for ip in ips:
        assert not any(ipaddress.IPv4Address(ip) in n for n, _ in nets), ip
    for pfx in prefixes:
        assert not any(ipaddress.IPv4Network(pfx).overlaps(n) for n, k in nets if k == "explicit"), pfx


def test_named_addresses_may_be_reserved_and_a_reservation_can_go() -> None:
    pool = SubnetPool("10.0.0.0/28")
    pool.reserve("scr-1", "10.0.0.0/28", "explicit")
    assert pool.take_ips(1) is None  # by count, nothing: the whole subnet is reserved
    assert pool.take_ip("10.0.0.7")  # named: taken
    assert pool.unreserve("scr-1") is not None and pool.unreserve("scr-1") is None
    assert pool.take_ips(1) == ["10.0.0.4"]


@pytest.mark.parametrize(
    ("cidr", "kind", "why"),
    [
        ("10.0.1.0/28", "explicit", "within subnet"),
        ("10.0.0.8/28", "explicit", "invalid"),  # not a network address
        ("10.0.0.16/28", "explicit", "overlap"),
        ("10.0.0.64/28", "reserved", "reservationType"),
    ],
)
def test_a_reservation_ec2_refuses_is_refused(cidr: str, kind: str, why: str) -> None:
    pool = SubnetPool("10.0.0.0/24")
    pool.reserve("scr-1", "10.0.0.0/27", "prefix")
    with pytest.raises(ValueError, match=why):
        pool.reserve("scr-2", cidr, kind)
