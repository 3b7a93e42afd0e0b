"""Address bookkeeping for one emulated subnet.

EC2 reserves the first four addresses and the last one of every subnet. Single
addresses and delegated /28 prefixes come from the same space and never
overlap: a prefix needs an aligned block of 16 addresses that are all free.
Where a single address asked for by count lands is the placement
(:data:`SinglePlacement`): ``"packed"`` (the default) hands singles out from the
bottom of the subnet, so with prefixes taken from the top the two kinds of
demand fragment each other as little as possible; ``"scattered"`` draws each
single uniformly from the free addresses of the whole subnet (seeded), so
singles land in every /28 and a subnet with many free addresses can have no
aligned block left, as a real one can: AWS does not say where it places an
address. The rules — no overlap, aligned /28, exhaustion errors — are the same
in both.

Subnet CIDR reservations (``CreateSubnetCidrReservation``) steer what is asked by
count: no single address asked by count lands in a reservation of either type, no
prefix asked by count in an ``explicit`` one, and prefixes asked by count go to
wholly free blocks of ``prefix`` reservations first (then anywhere else, highest
first). Addresses and prefixes asked for by name may be anywhere free, reserved or
not (an explicit reservation is there to be named). Free counts are unchanged.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field
from typing import Literal, get_args

PREFIX_LEN = 28
BLOCK = 16
RESERVED_HEAD = 4
RESERVED_TAIL = 1
SCATTER_TRIES = 32
"""Random draws per address in scattered placement before it samples the free list."""

SinglePlacement = Literal["packed", "scattered"]
PLACEMENTS: tuple[str, ...] = get_args(SinglePlacement)

ReservationType = Literal["prefix", "explicit"]
RESERVATION_TYPES: tuple[str, ...] = get_args(ReservationType)


@dataclass(frozen=True)
class CidrReservation:
    """One subnet CIDR reservation (IPv4)."""

    id: str
    cidr: str
    type: ReservationType
    description: str = ""
    tags: dict[str, str] = field(default_factory=dict)


class SubnetPool:
    """Which addresses of one subnet are taken (by a single address or a prefix)."""

    def __init__(self, cidr: str, placement: SinglePlacement = "packed", seed: int = 0) -> None:
        net = ipaddress.IPv4Network(cidr, strict=True)
        if not 16 <= net.prefixlen <= 28:
            raise ValueError(f"subnet size must be /16 to /28, got {cidr}")
        if placement not in PLACEMENTS:
            raise ValueError(f"single placement must be one of {PLACEMENTS}, got {placement!r}")
        self.placement: SinglePlacement = placement
        self._rng = random.Random(seed * 0x1_0000_0000 + int(net.network_address))
        self.network = net
        self.base = int(net.network_address)
        self.size = net.num_addresses
        self._used = bytearray(self.size)
        self._block_used = bytearray(self.size // BLOCK)
        self.free = self.size
        self.exhausted = False
        """Fault injection: while set, every allocation fails as if the subnet were full."""
        for off in (*range(RESERVED_HEAD), self.size - 1):
            self._mark(off)
        self._single_hint = RESERVED_HEAD
        self._prefix_hint = len(self._block_used) - 1
        self.reservations: dict[str, CidrReservation] = {}
        self._no_single = bytearray(self.size)
        """1 where a reservation (of either type) keeps singles asked by count out."""
        self._no_prefix = bytearray(self.size)
        """1 where an ``explicit`` reservation keeps prefixes asked by count out."""

    # --- CIDR reservations -----------------------------------------------------

    def reserve(
        self, rid: str, cidr: str, rtype: str, description: str = "", tags: dict[str, str] | None = None
    ) -> CidrReservation:
        """Add a reservation; ``ValueError`` (EC2's ``InvalidParameterValue``) for a malformed CIDR,
        one outside the subnet, one overlapping another reservation, or an unknown type."""
        if rtype not in RESERVATION_TYPES:
            raise ValueError(f"Value ({rtype}) for parameter reservationType is invalid.")
        try:
            net = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError:
            raise ValueError(f"Value ({cidr}) for parameter cidr is invalid.") from None
        if not net.subnet_of(self.network):
            raise ValueError(f"Reservation CIDR {cidr} should be within subnet CIDR block ({self.network})")
        if any(net.overlaps(ipaddress.IPv4Network(r.cidr)) for r in self.reservations.values()):
            raise ValueError(f"Reservation CIDR {cidr} has overlap with existing reserved CIDR block")
        r = CidrReservation(rid, str(net), rtype, description, dict(tags or {}))  # type: ignore[arg-type]
        self.reservations[rid] = r
        self._flag(r, 1)
        return r

    def unreserve(self, rid: str) -> CidrReservation | None:
        r = self.reservations.pop(rid, None)
        if r is not None:
            self._flag(r, 0)
        return r

    def _flag(self, r: CidrReservation, v: int) -> None:
        net = ipaddress.IPv4Network(r.cidr)
        lo = int(net.network_address) - self.base
        for off in range(lo, lo + net.num_addresses):
            self._no_single[off] = v
            if r.type == "explicit":
                self._no_prefix[off] = v

    def _single_ok(self, off: int) -> bool:
        return not self._used[off] and not self._no_single[off]

    def _prefix_block_ok(self, block: int) -> bool:
        start = block * BLOCK
        return self._block_used[block] == 0 and not any(self._no_prefix[start : start + BLOCK])

    def _in_prefix_reservation(self, block: int) -> bool:
        start = block * BLOCK
        return all(self._no_single[start : start + BLOCK]) and not any(self._no_prefix[start : start + BLOCK])

    # --- helpers ---------------------------------------------------------------

    def _mark(self, off: int) -> None:
        self._used[off] = 1
        self._block_used[off // BLOCK] += 1
        self.free -= 1

    def _unmark(self, off: int) -> None:
        self._used[off] = 0
        self._block_used[off // BLOCK] -= 1
        self.free += 1

    def offset(self, ip: str) -> int | None:
        """Offset of ``ip`` in the subnet, or None if it is outside it."""
        try:
            v = int(ipaddress.IPv4Address(ip))
        except ValueError:
            return None
        off = v - self.base
        return off if 0 <= off < self.size else None

    def ip(self, off: int) -> str:
        return str(ipaddress.IPv4Address(self.base + off))

    def prefix(self, block: int) -> str:
        return f"{self.ip(block * BLOCK)}/{PREFIX_LEN}"

    @property
    def available(self) -> int:
        """Free addresses (what DescribeSubnets reports as AvailableIpAddressCount)."""
        return 0 if self.exhausted else self.free

    def free_blocks(self) -> int:
        """Aligned /28 blocks with no address taken (what a prefix needs)."""
        return 0 if self.exhausted else self._block_used.count(0)

    def broken_blocks(self) -> int:
        """Aligned /28 blocks with some addresses taken and some free."""
        return sum(1 for c in self._block_used if 0 < c < BLOCK)

    # --- single addresses ----------------------------------------------------

    def is_free(self, ip: str) -> bool:
        off = self.offset(ip)
        return off is not None and not self._used[off]

    def take_ip(self, ip: str) -> bool:
        """Take a specific address; False if it is outside, reserved or in use."""
        off = self.offset(ip)
        if off is None or self._used[off] or self.exhausted:
            return False
        self._mark(off)
        return True

    def take_ips(self, n: int) -> list[str] | None:
        """Take ``n`` free addresses (placed as :attr:`placement` says); all or nothing."""
        if n <= 0:
            return []
        if self.exhausted or self.free < n:
            return None
        if self.reservations:
            return self._take_around_reservations(n)
        if self.placement == "scattered":
            return self._take_scattered(n)
        out: list[str] = []
        off = self._single_hint
        used = self._used
        while len(out) < n:
            off = used.index(0, off)
            self._mark(off)
            out.append(self.ip(off))
        self._single_hint = off + 1
        return out

    def _take_scattered(self, n: int) -> list[str]:
        """``n`` addresses drawn uniformly from the free ones (the caller checked there are)."""
        out: list[str] = []
        used = self._used
        rng = self._rng
        while len(out) < n:
            for _ in range(SCATTER_TRIES):
                off = rng.randrange(self.size)
                if not used[off]:
                    self._mark(off)
                    out.append(self.ip(off))
                    break
            else:  # a nearly full subnet: draw the rest from the free list
                free = [o for o in range(self.size) if not used[o]]
                for off in rng.sample(free, n - len(out)):
                    self._mark(off)
                    out.append(self.ip(off))
        return out

    def _take_around_reservations(self, n: int) -> list[str] | None:
        """``n`` singles by count outside every reservation (placed as :attr:`placement` says)."""
        free = [o for o in range(self.size) if self._single_ok(o)]
        if len(free) < n:
            return None
        picked = self._rng.sample(free, n) if self.placement == "scattered" else free[:n]
        for off in picked:
            self._mark(off)
        return [self.ip(off) for off in picked]

    def release_ip(self, ip: str) -> None:
        off = self.offset(ip)
        if off is None or not self._used[off]:
            return
        self._unmark(off)
        self._single_hint = min(self._single_hint, off)
        self._prefix_hint = max(self._prefix_hint, off // BLOCK)

    # --- /28 prefixes ----------------------------------------------------------

    def take_prefix(self, prefix: str) -> bool:
        """Take a specific aligned /28; False if any address in it is taken."""
        try:
            net = ipaddress.IPv4Network(prefix, strict=True)
        except ValueError:
            return False
        off = int(net.network_address) - self.base
        if net.prefixlen != PREFIX_LEN or not 0 <= off < self.size or self.exhausted:
            return False
        block = off // BLOCK
        if self._block_used[block]:
            return False
        self._take_block(block)
        return True

    def _take_block(self, block: int) -> None:
        start = block * BLOCK
        for off in range(start, start + BLOCK):
            self._mark(off)

    def take_prefixes(self, n: int) -> list[str] | None:
        """Take ``n`` wholly free aligned /28 blocks, highest first; all or nothing."""
        if n <= 0:
            return []
        if self.exhausted:
            return None
        if self.reservations:
            ok = [b for b in range(len(self._block_used) - 1, -1, -1) if self._prefix_block_ok(b)]
            ok.sort(key=lambda b: not self._in_prefix_reservation(b))  # stable: highest first within each
            if len(ok) < n:
                return None
            for blk in ok[:n]:
                self._take_block(blk)
            return [self.prefix(blk) for blk in ok[:n]]
        found: list[int] = []
        b = self._prefix_hint
        bu = self._block_used
        while b >= 0 and len(found) < n:
            if bu[b] == 0:
                found.append(b)
            b -= 1
        if len(found) < n:
            return None
        for blk in found:
            self._take_block(blk)
        self._prefix_hint = found[-1] - 1
        return [self.prefix(blk) for blk in found]

    def release_prefix(self, prefix: str) -> None:
        off = self.offset(prefix.split("/", 1)[0])
        if off is None:
            return
        block = off // BLOCK
        start = block * BLOCK
        for o in range(start, start + BLOCK):
            if self._used[o]:
                self._unmark(o)
        self._prefix_hint = max(self._prefix_hint, block)
        self._single_hint = min(self._single_hint, start)
