"""Where in a subnet new addresses and /28 prefixes should go, so prefixes stay possible.

A delegated IPv4 prefix is an aligned /28 of the subnet with no address in use; when
single addresses are scattered over every /28, AssignPrivateIpAddresses with
``Ipv4PrefixCount`` answers ``InsufficientCidrBlocks`` although most addresses are free.
EC2 promises nothing about where it puts an address asked for by count, so a caller that
wants whole /28s to survive names the addresses (``PrivateIpAddresses``) and prefixes
(``Ipv4Prefixes``) itself. This module decides them, from what the subnet holds as
``DescribeNetworkInterfaces`` filtered by ``subnet-id`` shows it:

- :func:`availability`: the subnet's /28 blocks: wholly free (a prefix fits), broken
  (some addresses taken, some free) and full;
- :func:`place`: ``n_prefixes`` prefixes from wholly free blocks, and ``n_ips`` single
  addresses packed into already broken blocks, fullest first, so that whole blocks stay
  whole; only when no broken block has room does a single break a whole block (the
  lowest one the prefixes left);
- :func:`first_fit`: the first candidate subnet that can take a request in full, so an
  allocator moves on before a call would fail.

The rules are AWS's: a subnet is a /16 to /28, its first four addresses and its last are
reserved. A subnet smaller than a /28 (not allowed by AWS, handled all the same) has no
room for a prefix. Besides what the ENIs hold, a :class:`Usage` carries what must not be named:
addresses and prefixes a release book unassigned recently (``held``: their owner's agent may not
have applied its ``released`` yet), the subnet's ``explicit`` CIDR reservations (EC2 never
assigns them by count: they are someone's to name) and its ``prefix`` reservations (for
prefixes only: a prefix goes there first, a single never). Pure: no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

BLOCK = 16
"""Addresses in a delegated prefix (a /28)."""
PREFIX_LEN = 28
RESERVED_HEAD = 4
"""AWS reserves the first four addresses of a subnet (network, router, DNS, future use)..."""
RESERVED_TAIL = 1
"""... and the last one."""


@dataclass(frozen=True)
class Usage:
    """What a subnet holds: every private address of every ENI in it (primaries too) and every
    delegated prefix. Entries outside the subnet are ignored; the reserved addresses are added."""

    cidr: str
    ips: frozenset[str] = frozenset()
    prefixes: frozenset[str] = frozenset()
    held: frozenset[str] = frozenset()
    """Addresses and /28 prefixes a release book unassigned within the hold (their owner's agent
    may still list them): never named, as if in use."""
    explicit: frozenset[str] = frozenset()
    """CIDRs of the subnet's ``explicit`` reservations: never named (as if in use)."""
    prefix_only: frozenset[str] = frozenset()
    """CIDRs of the subnet's ``prefix`` reservations: prefixes are named there first, singles never."""


@dataclass(frozen=True)
class Availability:
    """A subnet's /28 blocks, as prefix delegation sees them."""

    cidr: str
    free_addresses: int
    """Addresses that may be named (in use, held and explicitly reserved ones left out)."""
    free_blocks: tuple[str, ...]
    """Aligned /28s with no address taken, lowest first: one prefix each."""
    broken: tuple[tuple[str, int], ...]
    """(block, free addresses a single may take) of blocks that cannot be a prefix with room for
    singles, fullest first (fewest free; ties lowest first). A subnet smaller than a /28 is one
    broken block."""
    full_blocks: int
    """Blocks with no address free."""

    @property
    def broken_free(self) -> int:
        """Free addresses inside broken blocks: what singles can take without breaking a block."""
        return sum(n for _, n in self.broken)


@dataclass(frozen=True)
class Placement:
    """Which addresses and prefixes to name in the call, and what could not be placed."""

    ips: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    ips_short: int = 0
    """Singles asked for that the subnet has no free address for."""
    prefixes_short: int = 0
    """Prefixes asked for that the subnet has no wholly free /28 for: asked by count, EC2
    would answer ``InsufficientCidrBlocks``."""
    blocks_broken: int = 0
    """Whole blocks the singles had to break (0 while broken blocks had room)."""

    @property
    def complete(self) -> bool:
        return self.ips_short == 0 and self.prefixes_short == 0


class _Map:
    """Offsets in the subnet that are taken, and its blocks."""

    def __init__(self, usage: Usage) -> None:
        net = ipaddress.IPv4Network(usage.cidr, strict=True)
        self.base = int(net.network_address)
        self.size = net.num_addresses
        self.block = min(BLOCK, self.size)
        taken: set[int] = set(range(min(RESERVED_HEAD, self.size)))
        taken.add(self.size - RESERVED_TAIL)
        for ip in usage.ips:
            off = self._offset(ip)
            if off is not None:
                taken.add(off)
        for ip in usage.held:
            off = None if "/" in ip else self._offset(ip)
            if off is not None:
                taken.add(off)
        for cidr in (*usage.prefixes, *(k for k in usage.held if "/" in k), *usage.explicit):
            taken.update(self._range(cidr))
        self.taken = taken
        self.no_single: set[int] = set()
        """Free offsets in ``prefix`` reservations: a prefix may take them, a single never."""
        for cidr in usage.prefix_only:
            self.no_single.update(o for o in self._range(cidr) if o not in taken)
        self.used = [0] * (self.size // self.block)
        for off in taken:
            self.used[off // self.block] += 1

    def _range(self, cidr: str) -> range:
        """The offsets of ``cidr`` inside the subnet (none for a malformed one)."""
        try:
            p = ipaddress.IPv4Network(cidr, strict=False)
        except ValueError:
            return range(0)
        lo = max(int(p.network_address) - self.base, 0)
        hi = min(int(p.broadcast_address) - self.base, self.size - 1)
        return range(lo, hi + 1)

    def _offset(self, ip: str) -> int | None:
        try:
            off = int(ipaddress.IPv4Address(ip)) - self.base
        except ValueError:
            return None
        return off if 0 <= off < self.size else None

    def whole_ok(self, b: int) -> bool:
        """Block ``b`` can be a prefix: a full /28 of the subnet with nothing taken."""
        return self.block == BLOCK and self.used[b] == 0

    def ip(self, off: int) -> str:
        return str(ipaddress.IPv4Address(self.base + off))

    def prefix(self, b: int) -> str:
        return f"{self.ip(b * self.block)}/{PREFIX_LEN}"

    def reserved_for_prefixes(self, b: int) -> bool:
        """Block ``b`` lies wholly in a ``prefix`` reservation."""
        start = b * self.block
        return all(o in self.no_single for o in range(start, start + self.block))

    def broken(self) -> list[tuple[int, int]]:
        """(free addresses a single may take, block) of the blocks with room for singles that
        cannot be a prefix, fullest first."""
        room = ((len(self.free_in(b)), b) for b in range(len(self.used)) if not self.whole_ok(b))
        return sorted((n, b) for n, b in room if n)

    def free_in(self, b: int) -> list[int]:
        """The offsets of block ``b`` a single may take."""
        start = b * self.block
        return [o for o in range(start, start + self.block) if o not in self.taken and o not in self.no_single]


def availability(usage: Usage) -> Availability:
    """The subnet's blocks: wholly free, broken with room (fullest first), full."""
    m = _Map(usage)
    free_blocks = tuple(m.prefix(b) for b in range(len(m.used)) if m.whole_ok(b))
    broken = m.broken()
    return Availability(
        cidr=usage.cidr,
        free_addresses=m.size - len(m.taken),
        free_blocks=free_blocks,
        broken=tuple((m.prefix(b), n) for n, b in broken),
        full_blocks=sum(1 for u in m.used if u >= m.block),
    )


def place(usage: Usage, n_ips: int = 0, n_prefixes: int = 0) -> Placement:
    """``n_prefixes`` prefixes from wholly free blocks (those in ``prefix`` reservations first,
    as EC2 does by count; highest first) and ``n_ips`` singles packed into broken blocks
    (fullest first, lowest address first within a block), breaking whole blocks (lowest first)
    only when no broken block has room; never a held address, one in an ``explicit``
    reservation, or a single in a ``prefix`` reservation. Prefixes are placed first, so singles
    never take the blocks they need."""
    if n_ips < 0 or n_prefixes < 0:
        raise ValueError("counts must not be negative")
    m = _Map(usage)
    whole = [b for b in range(len(m.used)) if m.whole_ok(b)]
    chosen = sorted(whole, key=lambda b: (not m.reserved_for_prefixes(b), -b))[:n_prefixes]
    left = sorted(set(whole) - set(chosen))
    ips: list[str] = []
    for _, b in m.broken():
        if len(ips) >= n_ips:
            break
        ips += [m.ip(o) for o in m.free_in(b)[: n_ips - len(ips)]]
    blocks_broken = 0
    for b in left:
        if len(ips) >= n_ips:
            break
        room = m.free_in(b)
        if not room:
            continue
        blocks_broken += 1
        ips += [m.ip(o) for o in room[: n_ips - len(ips)]]
    return Placement(
        ips=tuple(ips),
        prefixes=tuple(m.prefix(b) for b in sorted(chosen)),
        ips_short=n_ips - len(ips),
        prefixes_short=n_prefixes - len(chosen),
        blocks_broken=blocks_broken,
    )


def first_fit(candidates: Sequence[Usage], n_ips: int = 0, n_prefixes: int = 0) -> tuple[int, Placement] | None:
    """The first candidate (in the caller's order of preference) that takes the whole request,
    with its placement; None when none can (asked by count, every one would fail)."""
    for i, usage in enumerate(candidates):
        p = place(usage, n_ips, n_prefixes)
        if p.complete:
            return i, p
    return None


def usage_of(cidr: str, addresses: Iterable[str], prefixes: Iterable[str]) -> Usage:
    """A :class:`Usage` from the addresses and prefixes the subnet's ENIs hold."""
    return Usage(cidr, frozenset(addresses), frozenset(prefixes))
