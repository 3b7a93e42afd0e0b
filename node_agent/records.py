"""The agent's records: who the node is (:class:`NodeIdentity`), what is attached
(:class:`EniInfo`), the addresses on it and who holds them (:class:`EniRecord`,
:class:`Addr`), and what the datastore hands out about them.

Plain values, no behaviour beyond derived properties: the datastore
(:mod:`node_agent.datastore`) keeps them; host set-up, IMDS and the
controller read them without depending on the datastore.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import NamedTuple

from warmpool.limits import is_primary_slot

MULTI_CARD_TABLE_BASE = 10000
"""Route tables of ENIs on network cards above 0 start here (:attr:`EniInfo.route_table`)."""

UNKNOWN_HOLDER = "?"
"""Holder of an address that may be in use by a pod nobody can name (rebuild with no host wiring to read)."""
UNROUTED_HOLDER = "unrouted"
"""Holder a rebuild names for an address with a pod rule and no route (``node_agent.agent._routed_pods``):
released by the DEL whose runtime says (its ``prevResult``) the attachment had that address."""


@dataclass(frozen=True)
class NodeIdentity:
    """Who this node is, as every report names it (the report's signed proof is
    :class:`warmpool.messages.SignedIdentity`)."""

    cluster: str
    node: str
    instance_id: str
    instance_type: str
    availability_zone: str


@dataclass(frozen=True)
class EniInfo:
    """What is attached (IMDS or an ``attached`` result says so)."""

    eni_id: str
    device_index: int
    mac: str
    primary_ip: str
    subnet_id: str = ""
    subnet_cidr: str = ""
    network_card: int = 0

    @property
    def primary(self) -> bool:
        """The node's primary ENI: device 0 of network card 0 (device 0 of another card is not)."""
        return is_primary_slot(self.network_card, self.device_index)

    @property
    def route_table(self) -> int:
        """The VPC CNI's numbering (``pkg/networkutils`` ``CalculateRouteTableId``): the primary ENI
        uses main; device ``d`` of card 0 table ``d + 1``; device ``d`` of card ``c > 0`` table
        ``10000 + 100 c + d`` (amazon-ec2-net-utils' numbering), so no two cards share a table."""
        if self.primary:
            return 254
        if self.network_card == 0:
            return self.device_index + 1
        return MULTI_CARD_TABLE_BASE + 100 * self.network_card + self.device_index

    @property
    def gateway(self) -> str:
        """The subnet's router: its base address + 1."""
        net = ipaddress.IPv4Network(self.subnet_cidr, strict=False)
        return str(net.network_address + 1)


class Assignment(NamedTuple):
    ip: str
    eni_id: str


@dataclass
class Addr:
    ip: str
    prefix: str | None = None
    container_id: str = ""
    ifname: str = ""
    netns: str = ""
    assigned_at: float = 0.0
    freed_at: float | None = None
    quarantined_at: float | None = None
    recovered: str = ""
    """Recovered holder (host veth name, or :data:`UNKNOWN_HOLDER`) after a checkpoint rebuild."""
    network: str = ""
    """The CNI network (the configuration's ``name``) the pod's ADD named; '' if not known
    (an ADD without one, or a checkpoint written before agents recorded it)."""

    @property
    def in_use(self) -> bool:
        return bool(self.container_id or self.recovered)


@dataclass
class EniRecord:
    info: EniInfo
    added_at: float
    addrs: dict[str, Addr] = field(default_factory=dict)
    ips: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    ready: bool = True
    """Host networking set up; a not-ready ENI's addresses are not handed out."""
    held: bool = False
    """Kept for the pods on it, nothing new handed out from it (nor quarantined or offered):
    its ``no_manage`` tag could not be read, or it was tagged after the agent took it
    (:meth:`node_agent.controller.PoolController.resync`), or the last IMDS read did not
    list it while pods hold its addresses (:meth:`node_agent.datastore.Datastore.reconcile`).
    Not checkpointed: every resync decides it again."""

    def copy(self) -> EniRecord:
        """A copy its holder may change (the addresses copied too)."""
        return EniRecord(
            info=self.info,
            added_at=self.added_at,
            addrs={k: Addr(**v.__dict__) for k, v in self.addrs.items()},
            ips=list(self.ips),
            prefixes=list(self.prefixes),
            ready=self.ready,
            held=self.held,
        )

    def by_prefix(self) -> dict[str, list[Addr]]:
        """The addresses of each prefix (one pass over the addresses)."""
        out: dict[str, list[Addr]] = {}
        for a in self.addrs.values():
            if a.prefix is not None:
                out.setdefault(a.prefix, []).append(a)
        return out


@dataclass(frozen=True)
class Counts:
    total: int
    """Addresses pods can use (quarantined ones excluded: they are on their way out; so are
    the free addresses of a held ENI, and every address IMDS no longer lists: EC2 may have
    taken it, and the allocator counts the node's pool from EC2's). An address IMDS no longer
    lists that a holder keeps still counts in ``assigned``, as the report counts it: so
    ``assigned`` may exceed ``total``. One IMDS lists on another of the node's ENIs than its
    record's counts in both (``Counts.of``'s ``listed_elsewhere``)."""
    assigned: int
    available: int
    """total − assigned (cooldown counts as available, as in the VPC CNI)."""
    cooldown: int
    quarantined: int
    pending: int
    enis: int
    free_prefixes: int
    recovered: int = 0
    """Of ``assigned``: held by recovered holders (pods known only from the host after a rebuild)."""
    free_singles: int = 0
    """Free single addresses (not in a prefix; prefix mode's fallback), cooldown included."""

    @classmethod
    def of(
        cls,
        enis: Collection[EniRecord],
        now: float,
        cooldown_s: float,
        pending: int,
        unlisted: Collection[str] = frozenset(),
        listed_elsewhere: Collection[str] = frozenset(),
    ) -> Counts:
        """``unlisted``: addresses IMDS no longer lists (:meth:`Datastore.unlisted`), kept for
        their holders and never handed out. Counted in ``assigned`` (the report counts them in
        use: a pod may carry one) but not in ``total``, as the allocator counts the pool from
        EC2's addresses and its use from the report. Counted in both, a held address EC2 took
        was a surplus the allocator did not see, and every offer of it was taken back (the
        simulation's seeds 1000042 and 1007089); counted in neither (and left out of the report),
        an address EC2 still has while IMDS lags was one the allocator took for free, and a
        waiting pod was not served until IMDS caught up (review 31, B1). Counted so, the agent
        and the allocator agree when EC2 took it; while IMDS only lags, the agent counts one
        address fewer than EC2 has and asks for it, which the allocator does not grant: a
        report more, no pod kept waiting.

        ``listed_elsewhere``: those of ``unlisted`` IMDS lists on another of the node's ENIs (EC2
        moved the address; the record names the ENI it had). EC2 has it on the node, and the
        allocator counts it in the pool: held, it counts in ``total`` too, as a listed held address
        does (counted in use alone, the agent was short by one for good and the allocator rightly
        granted nothing: the simulation's seed 1023538). Still never handed out or offered."""
        total = assigned = cooldown = quarantined = free_prefixes = recovered = free_singles = 0
        for eni in enis:
            busy: dict[str, bool] = {p: False for p in eni.prefixes}
            for a in eni.addrs.values():
                if a.quarantined_at is not None:
                    quarantined += 1
                    if a.prefix is not None:
                        busy[a.prefix] = True
                    continue
                if a.ip in unlisted:
                    if a.in_use:
                        assigned += 1
                        total += a.ip in listed_elsewhere
                        recovered += bool(a.recovered)
                    if a.prefix is not None:
                        busy[a.prefix] = True
                    continue
                if eni.held and not a.in_use:
                    continue  # not usable by pods: kept only for the pods on the ENI
                total += 1
                free_singles += a.prefix is None and not a.in_use
                if a.in_use:
                    assigned += 1
                    recovered += bool(a.recovered)
                    if a.prefix is not None:
                        busy[a.prefix] = True
                elif a.freed_at is not None and now < a.freed_at + cooldown_s:
                    cooldown += 1
            if not eni.held:
                free_prefixes += sum(1 for b in busy.values() if not b)
        return cls(
            total=total,
            assigned=assigned,
            available=total - assigned,
            cooldown=cooldown,
            quarantined=quarantined,
            pending=pending,
            enis=len(enis),
            free_prefixes=free_prefixes,
            recovered=recovered,
            free_singles=free_singles,
        )


@dataclass(frozen=True)
class RecoveredHolder:
    holder: str
    """Host veth name, or :data:`UNKNOWN_HOLDER`."""
    ip: str
    eni_id: str
    """'' while the address is not attached (IMDS may not show it yet)."""
    since: float


@dataclass(frozen=True)
class PodRecord:
    container_id: str
    ifname: str
    netns: str
    ip: str
    eni_id: str
    assigned_at: float
    network: str = ""
