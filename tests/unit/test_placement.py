"""Placement math for prefix delegation that does not fragment (warmpool/placement.py):
/28 availability, singles packed into broken blocks, prefixes from whole ones, and the
answer "this subnet cannot take it" before a call would fail. Checked against the
emulator's own bookkeeping (emulated/ec2/cidr.py) where the two must agree."""

from __future__ import annotations

import ipaddress
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulated.ec2.cidr import SubnetPool
from warmpool.placement import Usage, availability, first_fit, place, usage_of


def ips(*last: int, net: str = "10.0.0") -> frozenset[str]:
    return frozenset(f"{net}.{n}" for n in last)


def one_in_each_block(first: int, last: int, at: int = 5) -> frozenset[str]:
    """One address taken in each /28 of 10.0.0.0/24 from block ``first`` to ``last``."""
    return ips(*(16 * b + at for b in range(first, last + 1)))


@pytest.mark.parametrize(
    ("usage", "free_addresses", "free_blocks", "broken", "full"),
    [
        # an empty /24: the first block holds 4 reserved addresses, the last one
        (Usage("10.0.0.0/24"), 251, 14, [("10.0.0.240/28", 15), ("10.0.0.0/28", 12)], 0),
        # the smallest AWS subnet: one block, never a prefix (it holds the reserved addresses)
        (Usage("10.0.0.0/28"), 11, 0, [("10.0.0.0/28", 11)], 0),
        # a /28 with every free address taken: full
        (Usage("10.0.0.0/28", ips(*range(4, 15))), 0, 0, [], 1),
        # a /27: two blocks, each holding reserved addresses
        (Usage("10.0.0.0/27"), 27, 0, [("10.0.0.16/28", 15), ("10.0.0.0/28", 12)], 0),
        # a /26: the two middle blocks are whole
        (Usage("10.0.0.0/26"), 59, 2, [("10.0.0.48/28", 15), ("10.0.0.0/28", 12)], 0),
        # smaller than a /28 (not an AWS size): one partial block, no prefix ever
        (Usage("10.0.0.0/29"), 3, 0, [("10.0.0.0/28", 3)], 0),
        (Usage("10.0.0.0/30"), 0, 0, [], 1),
        # fragmented: one address in every whole block of a /24
        (Usage("10.0.0.0/24", one_in_each_block(1, 14)), 237, 0, None, 0),
        # a prefix and addresses outside the subnet are ignored; a prefix inside takes its block
        (
            Usage("10.0.0.0/26", ips(7, net="10.9.9") | ips(20), frozenset({"10.0.0.32/28", "10.1.0.0/28"})),
            42,
            0,
            [("10.0.0.48/28", 15), ("10.0.0.0/28", 12), ("10.0.0.16/28", 15)],
            1,
        ),
    ],
)
def test_availability_counts_whole_broken_and_full_blocks(
    usage: Usage, free_addresses: int, free_blocks: int, broken: list[tuple[str, int]] | None, full: int
) -> None:
    a = availability(usage)
    assert a.free_addresses == free_addresses
    assert len(a.free_blocks) == free_blocks
    if broken is not None:
        assert sorted(a.broken, key=lambda x: (x[1], x[0])) == sorted(broken, key=lambda x: (x[1], x[0]))
    assert a.full_blocks == full
    assert [n for _, n in a.broken] == sorted(n for _, n in a.broken)  # fullest first
    assert a.broken_free + block_free(a.free_blocks) == a.free_addresses


def block_free(blocks: tuple[str, ...]) -> int:
    return 16 * len(blocks)


@pytest.mark.parametrize(
    ("usage", "n_ips", "n_prefixes", "want_ips", "want_prefixes", "ips_short", "prefixes_short", "broke"),
    [
        # singles go to the fullest broken block first: the first /28 (12 free) before the last (15)
        (Usage("10.0.0.0/24"), 3, 0, ips(4, 5, 6), (), 0, 0, 0),
        # a block with 1 free address is fuller than one with 12
        (Usage("10.0.0.0/24", ips(*range(33, 48))), 2, 0, ips(32, 4), (), 0, 0, 0),
        # more singles than the broken blocks hold: both filled, then one whole block broken
        (Usage("10.0.0.0/24"), 30, 0, None, (), 0, 0, 1),
        # prefixes from whole blocks, highest first; singles keep out of them
        (Usage("10.0.0.0/26"), 2, 2, ips(4, 5), ("10.0.0.16/28", "10.0.0.32/28"), 0, 0, 0),
        # a fragmented /24: no prefix by any means, singles still fine
        (Usage("10.0.0.0/24", one_in_each_block(1, 14)), 5, 1, None, (), 0, 1, 0),
        # a /28 subnet: never a prefix
        (Usage("10.0.0.0/28"), 0, 1, frozenset(), (), 0, 1, 0),
        # full subnet: nothing at all
        (Usage("10.0.0.0/28", ips(*range(4, 15))), 1, 0, frozenset(), (), 1, 0, 0),
        # one whole block left, two asked: one placed, one short
        (Usage("10.0.0.0/24", one_in_each_block(1, 13)), 0, 2, frozenset(), ("10.0.0.224/28",), 0, 1, 0),
        # the last whole block goes to the prefix, so the singles must fit in broken blocks
        (Usage("10.0.0.0/24", one_in_each_block(1, 13)), 200, 1, None, ("10.0.0.224/28",), 0, 0, 0),
        # ... and past what the broken blocks hold they are short, the prefix kept
        (Usage("10.0.0.0/24", one_in_each_block(1, 13)), 225, 1, None, ("10.0.0.224/28",), 3, 0, 0),
    ],
)
def test_place_packs_singles_and_keeps_whole_blocks_for_prefixes(
    usage: Usage,
    n_ips: int,
    n_prefixes: int,
    want_ips: frozenset[str] | None,
    want_prefixes: tuple[str, ...],
    ips_short: int,
    prefixes_short: int,
    broke: int,
) -> None:
    p = place(usage, n_ips, n_prefixes)
    if want_ips is not None:
        assert set(p.ips) == want_ips
    assert p.prefixes == want_prefixes
    assert (p.ips_short, p.prefixes_short, p.blocks_broken) == (ips_short, prefixes_short, broke)
    assert len(p.ips) == n_ips - ips_short and len(set(p.ips)) == len(p.ips)
    assert p.complete is (ips_short == 0 and prefixes_short == 0)
    # nothing placed is taken or reserved, and singles never land in a placed prefix
    pool = SubnetPool(usage.cidr) if ipaddress.IPv4Network(usage.cidr).prefixlen <= 28 else None
    if pool is not None:
        for ip in usage.ips:
            assert pool.take_ip(ip)
        for pfx in usage.prefixes:
            assert pool.take_prefix(pfx)
        for pfx in p.prefixes:
            assert pool.take_prefix(pfx), pfx
        for ip in p.ips:
            assert pool.take_ip(ip), ip


# What must not be named (issue 24's hostile review, P2 and P4): addresses a release book took
# recently (``held``), explicit CIDR reservations, and prefix reservations for singles.
@pytest.mark.parametrize(
    ("usage", "n_ips", "n_prefixes", "want_ips", "want_prefixes"),
    [
        # held singles are as if in use: the fullest broken block's other addresses go first
        (Usage("10.0.0.0/24", held=ips(*range(5, 15))), 3, 0, ips(4, 15, 240), ()),
        # a held prefix takes its block: the next highest whole block is named instead
        (Usage("10.0.0.0/24", held=frozenset({"10.0.0.224/28"})), 0, 1, frozenset(), ("10.0.0.208/28",)),
        # an explicit reservation is never named: singles and prefixes go around it
        (Usage("10.0.0.0/24", explicit=frozenset({"10.0.0.0/27"})), 2, 0, ips(240, 241), ()),
        (
            Usage("10.0.0.0/24", explicit=frozenset({"10.0.0.192/26"})),
            0,
            2,
            frozenset(),
            ("10.0.0.160/28", "10.0.0.176/28"),
        ),
        # a prefix reservation: prefixes there first (as EC2 by count), highest first
        (Usage("10.0.0.0/24", prefix_only=frozenset({"10.0.0.32/27"})), 0, 1, frozenset(), ("10.0.0.48/28",)),
        (
            Usage("10.0.0.0/24", prefix_only=frozenset({"10.0.0.32/27"})),
            0,
            3,
            frozenset(),
            ("10.0.0.32/28", "10.0.0.48/28", "10.0.0.224/28"),
        ),
        # ... and never a single, even when its blocks are the only whole ones left
        (
            Usage("10.0.0.0/26", ips(*range(4, 16)), prefix_only=frozenset({"10.0.0.16/28", "10.0.0.32/28"})),
            2,
            0,
            ips(48, 49),
            (),
        ),
        # a prefix reservation that leaves no room at all for singles: short, never inside it
        (Usage("10.0.0.0/28", prefix_only=frozenset({"10.0.0.0/28"})), 1, 0, frozenset(), ()),
        # a reservation or held key outside the subnet, or malformed, changes nothing
        (
            Usage("10.0.0.0/26", held=frozenset({"10.9.0.5", "bad", "10.9.0.0/28"}), explicit=frozenset({"x/y"})),
            1,
            0,
            ips(4),
            (),
        ),
    ],
)
def test_place_never_names_held_or_reserved_addresses(
    usage: Usage, n_ips: int, n_prefixes: int, want_ips: frozenset[str], want_prefixes: tuple[str, ...]
) -> None:
    p = place(usage, n_ips, n_prefixes)
    assert set(p.ips) == want_ips and p.prefixes == want_prefixes
    assert p.ips_short == n_ips - len(want_ips) and p.prefixes_short == n_prefixes - len(want_prefixes)
    barred = [ipaddress.IPv4Network(c, strict=False) for c in usage.explicit if "/" in c and c[0].isdigit()]
    singles_barred = barred + [ipaddress.IPv4Network(c) for c in usage.prefix_only]
    for ip in p.ips:
        assert ip not in usage.held and not any(ipaddress.IPv4Address(ip) in n for n in singles_barred)
    for pfx in p.prefixes:
        assert pfx not in usage.held and not any(ipaddress.IPv4Network(pfx).overlaps(n) for n in barred)


def test_availability_leaves_out_what_may_not_be_named() -> None:
    a = availability(Usage("10.0.0.0/24", held=ips(20), explicit=frozenset({"10.0.0.224/27"})))
    assert a.free_addresses == 251 - 1 - 31  # the held address, the reservation (less the reserved last)
    assert "10.0.0.16/28" not in a.free_blocks and ("10.0.0.16/28", 15) in a.broken
    assert not {"10.0.0.224/28", "10.0.0.240/28"} & set(a.free_blocks)
    b = availability(Usage("10.0.0.0/24", prefix_only=frozenset({"10.0.0.16/28"})))
    assert "10.0.0.16/28" in b.free_blocks  # a prefix may go there
    assert all(blk != "10.0.0.16/28" for blk, _ in b.broken)


def test_singles_never_break_a_whole_block_while_a_broken_one_has_room() -> None:
    before = availability(Usage("10.0.0.0/24"))
    p = place(Usage("10.0.0.0/24"), 27, 0)  # exactly what the two broken blocks hold
    after = availability(Usage("10.0.0.0/24", frozenset(p.ips)))
    assert p.blocks_broken == 0
    assert after.free_blocks == before.free_blocks and after.broken == ()


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        place(Usage("10.0.0.0/24"), -1, 0)


def test_first_fit_moves_to_the_next_subnet_when_no_whole_block_is_left() -> None:
    fragmented = Usage("10.0.0.0/24", one_in_each_block(1, 14))
    small = Usage("10.0.1.0/28")
    roomy = Usage("10.0.2.0/24")
    hit = first_fit([fragmented, small, roomy], 0, 2)
    assert hit is not None and hit[0] == 2 and hit[1].prefixes == ("10.0.2.208/28", "10.0.2.224/28")
    assert first_fit([fragmented, small], 0, 1) is None
    hit = first_fit([fragmented, roomy], 3, 0)  # singles fit anywhere: the first one wins
    assert hit is not None and hit[0] == 0


def test_usage_of_collects_described_addresses() -> None:
    u = usage_of("10.0.0.0/24", ["10.0.0.9", "10.0.0.9"], ["10.0.0.16/28"])
    assert u == Usage("10.0.0.0/24", frozenset({"10.0.0.9"}), frozenset({"10.0.0.16/28"}))


# --- the math against the emulator's bookkeeping ------------------------------------


@settings(deadline=None, max_examples=60)
@given(st.integers(0, 10_000), st.integers(0, 120), st.integers(0, 12), st.integers(0, 8))
def test_placed_prefixes_succeed_exactly_where_ec2_has_whole_blocks(
    seed: int, scattered: int, n_ips: int, n_prefixes: int
) -> None:
    """After singles scattered anywhere (as AWS may place them), the planner's prefixes are
    assignable by name, its singles do not break whole blocks while broken ones have room, and
    it is short of prefixes exactly when a count request would answer InsufficientCidrBlocks."""
    pool = SubnetPool("10.0.0.0/25", "scattered", seed=seed)
    taken = pool.take_ips(min(scattered, pool.free)) or []
    usage = Usage("10.0.0.0/25", frozenset(taken))
    whole_before = pool.free_blocks()
    p = place(usage, n_ips, n_prefixes)
    assert p.prefixes_short == max(n_prefixes - whole_before, 0)
    for pfx in p.prefixes:
        assert pool.take_prefix(pfx)
    for ip in p.ips:
        assert pool.take_ip(ip)
    room = availability(usage).broken_free
    if n_ips <= room:
        assert p.blocks_broken == 0
        assert pool.free_blocks() == whole_before - len(p.prefixes)


def test_packing_keeps_more_whole_blocks_than_ec2_scattering() -> None:
    """The point of it: the same 60 singles, placed by EC2 at random or packed by the planner."""
    rng = random.Random(4)
    scattered = SubnetPool("10.0.0.0/24", "scattered", seed=rng.randrange(1000))
    assert scattered.take_ips(60) is not None
    packed = place(Usage("10.0.0.0/24"), 60, 0)
    left = availability(Usage("10.0.0.0/24", frozenset(packed.ips)))
    assert scattered.free_blocks() <= 2
    assert len(left.free_blocks) == 11  # 60 singles: 27 in the two broken blocks, 33 breaking three more
