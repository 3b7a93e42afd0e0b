"""The planner: from a node's report, its verified inventory and its limits,
the fewest EC2 calls that meet the need. Output is data, not calls: the calls of
:mod:`warmpool.calls`.

Allocation, fewest calls first:

1. fill ENIs that have free slots, one ``AssignPrivateIpAddresses`` per ENI
   (most free slots first, so fewer ENIs are touched);
2. then new ENIs created *with* their addresses in the
   ``CreateNetworkInterface`` call, attached at the lowest free device index
   of the default network card (each card counts against its own ENI limit),
   and with ``multi_card`` (``WARMPOOL_MULTI_CARD``) once that card is full, of the
   lowest other card with room (:func:`new_eni_slot`), and marked DeleteOnTermination;
   the subnet is, of the node's candidates (:func:`warmpool.subnets.pod_subnets`:
   its zone, and with discovery the VPC CNI's subnet tags), the one with most free
   addresses.

Release: addresses the agent offers back, checked against EC2's inventory and
capped by what the targets allow, unassigned in one call per ENI; an ENI left
empty (not the primary, every secondary address offered) is detached and
deleted instead.

Scope (issue 12): only ENIs warmpool may change are planned on. An ENI tagged
``node.k8s.amazonaws.com/no_manage=true`` (or one with only the cluster's tag,
another tool's) is skipped, as the VPC CNI skips unmanaged ENIs
(``pkg/ipamd/ipamd.go::filterUnmanagedENIs``): not filled, not drained, not
counted in the pool, but it still holds its device index and counts against
the instance's ENI limit. A node's untagged primary ENI is tagged
(``TagPrimaryEni``, one CreateTags) before the first call that touches it.

A plan never both allocates and releases on one node.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from warmpool.calls import (
    CALLS,
    AssignAddresses,
    Call,
    CreateEni,
    DeleteEni,
    Reclaim,
    TagPrimaryEni,
    UnassignAddresses,
)
from warmpool.limits import PREFIX_SIZE, InstanceLimits, is_primary_slot, pod_ceiling
from warmpool.messages import Mode, PoolReport, ReleaseOffer
from warmpool.pool import PoolConfig, PoolDelta, PoolState, ceiling, compute
from warmpool.subnets import NO_CUSTOM_NETWORK, CustomNetwork, Site, Subnet, SubnetRule, node_subnets, pod_subnets

DEFAULT_CARD = 0
"""The network card new ENIs are attached to first (``DefaultNetworkCardIndex`` of every type in
the limits table); the others only with ``multi_card`` (:func:`new_eni_slot`)."""


@dataclass(frozen=True)
class Eni:
    """An ENI attached to the node, as EC2 says."""

    eni_id: str
    device_index: int
    network_card: int
    subnet_id: str
    primary_ip: str
    ips: tuple[str, ...] = ()
    """Secondary addresses (the primary excluded)."""
    prefixes: tuple[str, ...] = ()
    assignable: bool = True
    """Warmpool may (un)assign addresses on it (``warmpool/eni_scope.py``)."""
    lifecycle: bool = True
    """Warmpool may detach and delete it (it created it)."""
    claim_primary: bool = False
    """The node's primary ENI, not yet tagged for the cluster: tag it first, then (un)assign."""
    held_slots: int = 0
    """Address slots EC2 shows taken on it by addresses the release book keeps out of ``ips``
    and ``prefixes`` (:meth:`warmpool.release_book.ReleaseBook.correct`): never the pool's, but
    counted against the ENI's limit while Describe shows them (an Assign past it is refused)."""

    @property
    def usable(self) -> bool:
        """Its addresses are the pool's: warmpool may change it, now or once tagged."""
        return self.assignable or self.claim_primary

    @property
    def used_slots(self) -> int:
        return len(self.ips) + len(self.prefixes) + self.held_slots

    @property
    def addresses(self) -> int:
        return len(self.ips) + PREFIX_SIZE * len(self.prefixes)


@dataclass(frozen=True)
class Inventory:
    """A node as EC2 says it is (verified before any mutating call)."""

    instance_id: str
    instance_type: str
    availability_zone: str
    enis: tuple[Eni, ...]
    vpc_id: str = ""
    """The instance's VPC (empty when not known: subnets are then not checked against it)."""

    @property
    def own_subnet(self) -> str:
        """The subnet of the node's primary ENI (empty when EC2 showed none)."""
        return next((e.subnet_id for e in self.enis if is_primary_slot(e.network_card, e.device_index)), "")


@dataclass(frozen=True)
class Plan:
    node: str
    instance_id: str
    seq: int
    kind: Literal["allocate", "release", "none"]
    calls: tuple[Call, ...]
    unmet: int
    """Units (addresses or prefixes) the limits or subnets did not allow."""
    delta: PoolDelta
    mode: Mode = "secondary-ip"
    notes: tuple[str, ...] = field(default=())

    def tokens(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for call in self.calls:
            for action, n in CALLS[type(call)].cost.items():
                out[action] = out.get(action, 0) + n
        return out

    @property
    def mutating_calls(self) -> int:
        return sum(self.tokens().values())

    @property
    def units_planned(self) -> int:
        n = 0
        for c in self.calls:
            if isinstance(c, AssignAddresses | CreateEni):
                n += c.ips + c.prefixes
        return n


def client_token(cluster: str, instance_id: str, seq: int, network_card: int, device_index: int) -> str:
    """Deterministic ``ClientToken`` (≤ 64 ASCII): a redelivered report
    re-creates nothing, EC2 answers with the ENI it already made."""
    raw = f"{cluster}|{instance_id}|{seq}|{network_card}|{device_index}".encode()
    return "wp-" + hashlib.sha256(raw).hexdigest()[:48]


def inventory_state(report: PoolReport, inventory: Inventory) -> PoolState:
    """EC2 is the truth for what is attached; the agent for what is in use."""
    enis = tuple(e for e in inventory.enis if e.usable)
    total = sum(e.addresses for e in enis)
    by_id = {e.eni_id: e for e in report.enis}
    # Pods on an ENI left out of the pool (a custom-networking node's primary, one tagged
    # ``no_manage``) are not the pool's: its addresses are not in ``total``, so they are not in
    # ``assigned`` either (counted, they asked for addresses the node then offered back).
    outside = sum(by_id[e.eni_id].assigned for e in inventory.enis if not e.usable and e.eni_id in by_id)
    free_prefixes = free_singles = 0
    for e in enis:
        rep = by_id.get(e.eni_id)
        used = rep.assigned if rep is not None else 0
        free_prefixes += max(0, len(e.prefixes) - math.ceil(max(0, used - len(e.ips)) / PREFIX_SIZE))
        free_singles += max(0, len(e.ips) - used)
    return PoolState(
        total=total,
        assigned=max(0, report.assigned_ips - outside),
        pending=report.pending_demand,
        enis=len(enis),
        free_prefixes=free_prefixes,
        free_singles=free_singles,
    )


@dataclass(frozen=True)
class SurgeHint:
    """How many pods a node is expected to reach, for sizing a surge (pods waiting, or a burst):
    its new ENIs, and with ``fills`` the fill of an ENI a top-up touches, are sized to that many
    pods plus ``WARM_IP_TARGET`` beyond its pool, not filled to their slots. The allocator gives
    none (it cannot know a node's peak); ``tests/perf/surge_sizing.py`` measures what a hint
    would win, from an oracle (the clairvoyant bound's peak) or from settled peers."""

    pods: int
    fills: bool = True


def plan_node(
    report: PoolReport,
    inventory: Inventory,
    limits: InstanceLimits,
    subnets: Sequence[Subnet],
    *,
    cluster: str,
    exclude_subnets: frozenset[str] = frozenset(),
    force_mode: Mode | None = None,
    max_pods: int = 0,
    subnet_rule: SubnetRule = SubnetRule.LISTED,
    custom: CustomNetwork = NO_CUSTOM_NETWORK,
    multi_card: bool = False,
    lean: bool = False,
    surge_hint: SurgeHint | None = None,
) -> Plan:
    """Plan one node. ``subnets`` are those warmpool may use (any AZ); the node's
    candidates among them are chosen here by ``subnet_rule``
    (:func:`warmpool.subnets.pod_subnets`), after ``custom`` gave a custom-networking node its
    zone's subnets and every other node the rest (:func:`warmpool.subnets.node_subnets`). A
    custom-networking node's primary ENI is not the pool's (:func:`pods_inventory`).

    ``force_mode="secondary-ip"`` re-plans a prefix-mode node with single
    addresses (the fallback on ``InsufficientCidrBlocks``). ``max_pods`` (0 =
    none) caps what the node may hold, whatever its report asks for
    (:func:`node_max_pods`): a node cannot take more of a subnet than its
    kubelet could ever use. ``multi_card`` (``WARMPOOL_MULTI_CARD``): new ENIs may go on the
    type's other network cards once the default one is full, and the pool's ceiling counts them.
    ``lean``: the allocator says ``scarce`` to this report (:func:`warmpool.scarcity.scarce`) and
    the agent understands it (``report.lean`` is not None): planned lean now, as the agent will
    be once it has the answer, so no warm address is granted only to be offered back. The
    report's own ``lean`` plans it lean regardless. ``surge_hint``: how many pods the node is
    expected to reach (:class:`SurgeHint`); None, as the allocator plans: a surge fills.
    """
    multi_card = wires_cards(report, multi_card)
    if lean and report.lean is False:
        report = report.model_copy(update={"lean": True})
    inventory = pods_inventory(report, inventory)
    subnets, subnet_rule = node_subnets(
        subnets, inventory.availability_zone, subnet_rule, custom, custom_node=bool(report.custom_networking)
    )
    return _claim_primary(
        _plan_node(
            report,
            inventory,
            limits,
            subnets,
            cluster=cluster,
            exclude_subnets=exclude_subnets,
            force_mode=force_mode,
            max_pods=max_pods,
            subnet_rule=subnet_rule,
            multi_card=multi_card,
            surge_hint=surge_hint,
        ),
        inventory,
    )


def pods_inventory(report: PoolReport, inventory: Inventory) -> Inventory:
    """The node as its pods may use it: with custom networking (the report's
    ``custom_networking``) its primary ENI serves no pod, as the VPC CNI's ipamd leaves it out
    (``pkg/ipamd/ipamd.go``, ``useCustomNetworking``): it is neither assigned to nor released
    from, nor tagged on first contact."""
    if not report.custom_networking:
        return inventory
    return replace(
        inventory,
        enis=tuple(
            replace(e, assignable=False, claim_primary=False) if is_primary_slot(e.network_card, e.device_index) else e
            for e in inventory.enis
        ),
    )


def wires_cards(report: PoolReport, multi_card: bool) -> bool:
    """Whether the node's ENIs may go on network cards above 0: the allocator's
    ``WARMPOOL_MULTI_CARD`` and the report's ``multi_card`` both (an agent from before the
    setting, or with it off, puts device 0 of any card in the main table and shares tables
    across cards: it must never be given such an ENI, whatever the allocator's setting, as
    during a DaemonSet rollout; review of the multi-card change, F2)."""
    return multi_card and report.multi_card is True


def node_max_pods(report: PoolReport, limits: InstanceLimits, override: int = 0, *, multi_card: bool = False) -> int:
    """The ceiling the allocator holds a node to (:func:`warmpool.limits.pod_ceiling`), from what
    EC2 and the cluster say, never from the report's own numbers (its mode, ``MAX_ENI`` and its
    kubelet's ``kubelet_max_pods`` only lower it). ``multi_card``: the allocator's
    ``WARMPOOL_MULTI_CARD``, every network card's ENIs counted."""
    return pod_ceiling(
        limits,
        prefix=report.mode == "prefix",
        max_eni=report.targets.max_eni,
        override=override,
        kubelet=report.kubelet_max_pods,
        custom_networking=bool(report.custom_networking),
        multi_card=wires_cards(report, multi_card),
    )


def quiet(report: PoolReport, limits: InstanceLimits, max_pods: int = 0, *, multi_card: bool = False) -> bool:
    """True when the report, taken at its word, cannot lead to an EC2 call: it offers
    nothing back, no pod waits, and its own pool meets its targets (the planner's rules on
    the agent's view instead of EC2's). The allocator records such a report without a
    Describe round. A node whose view is behind EC2's (more than EC2 holds: an address
    released under it) reports a deficit once its view catches up; a node that lies only
    goes unserved itself."""
    if report.release or report.pending_demand:
        return False
    cfg = replace(PoolConfig.from_report(report), multi_card=wires_cards(report, multi_card))
    if cfg.prefix_mode and not limits.prefix_capable:
        cfg = replace(cfg, prefix_mode=False)
    if max_pods > 0:
        cfg = replace(cfg, max_pods=max_pods)
    return not compute(cfg, PoolState.from_report(report), limits).low


def _claim_primary(plan: Plan, inventory: Inventory) -> Plan:
    """Put the first-contact tag before the first call on an untagged primary ENI."""
    claim = {e.eni_id for e in inventory.enis if e.claim_primary}
    touched = [c.eni_id for c in plan.calls if isinstance(c, AssignAddresses | UnassignAddresses) and c.eni_id in claim]
    if not touched:
        return plan
    tags = tuple(TagPrimaryEni(i) for i in dict.fromkeys(touched))
    return replace(plan, calls=tags + plan.calls)


def _plan_node(
    report: PoolReport,
    inventory: Inventory,
    limits: InstanceLimits,
    subnets: Sequence[Subnet],
    *,
    cluster: str,
    exclude_subnets: frozenset[str] = frozenset(),
    force_mode: Mode | None = None,
    max_pods: int = 0,
    subnet_rule: SubnetRule = SubnetRule.LISTED,
    multi_card: bool = False,
    surge_hint: SurgeHint | None = None,
) -> Plan:
    _, unknown = _split_unknown(report, inventory)
    plan = _plan_known(
        report,
        inventory,
        limits,
        _freed(subnets, inventory, unknown),
        cluster=cluster,
        exclude_subnets=exclude_subnets,
        force_mode=force_mode,
        max_pods=max_pods,
        subnet_rule=subnet_rule,
        multi_card=multi_card,
        surge_hint=surge_hint,
    )
    if not unknown:
        return plan
    # First, so an address slot they free is there for an Assign of the same plan.
    drop = tuple(UnassignAddresses(eni_id, ips, pfx) for eni_id, ips, pfx in unknown)
    return replace(plan, kind="release" if plan.kind == "none" else plan.kind, calls=drop + plan.calls)


def _plan_known(
    report: PoolReport,
    inventory: Inventory,
    limits: InstanceLimits,
    subnets: Sequence[Subnet],
    *,
    cluster: str,
    exclude_subnets: frozenset[str] = frozenset(),
    force_mode: Mode | None = None,
    max_pods: int = 0,
    subnet_rule: SubnetRule = SubnetRule.LISTED,
    multi_card: bool = False,
    surge_hint: SurgeHint | None = None,
) -> Plan:
    cfg = replace(PoolConfig.from_report(report), multi_card=multi_card)
    if cfg.prefix_mode and not limits.prefix_capable:
        cfg = replace(cfg, prefix_mode=False)
    if max_pods > 0:
        cfg = replace(cfg, max_pods=max_pods)
    report, unknown = _split_unknown(report, inventory)
    state = _without(inventory_state(report, inventory), unknown)
    mode: Mode = "prefix" if cfg.prefix_mode else "secondary-ip"
    # Addresses the agent has quarantined and offers back are not usable by
    # its pods: judge the need without them.
    offered = _offers_ec2_shows(report, inventory)
    held_back = sum(len(ips) + PREFIX_SIZE * len(pfx) for _, ips, pfx in offered)
    live = replace(state, total=state.total - held_back)
    live_delta = compute(cfg, live, limits)
    if live_delta.low:
        reclaim, rest = _split_offers(offered, live_delta.short)
        delta = compute(cfg, state, limits)
        if not delta.low:
            # Taking enough offers back meets the need: no EC2 call for it; what
            # is still offered beyond the targets may go as usual.
            released = _plan_release(report.model_copy(update={"release": rest}), inventory, delta, mode)
            if not released.calls:  # nothing more may go now: take every offer back
                reclaim = tuple(Reclaim(eni_id, ips, pfx) for eni_id, ips, pfx in offered)
            return Plan(
                report.node,
                inventory.instance_id,
                report.seq,
                "release" if released.calls else "allocate",
                reclaim + released.calls,
                0,
                live_delta,
                mode,
            )
        alloc_mode: Mode = force_mode or mode

        def allocation(in_mode: Mode) -> Plan:
            return _plan_allocation(
                report,
                inventory,
                limits,
                subnets,
                cfg,
                state,
                delta,
                cluster,
                exclude_subnets,
                in_mode,
                subnet_rule,
                surge_hint,
            )

        plan = allocation(alloc_mode)
        if (
            alloc_mode == "prefix"
            and plan.unmet
            and not any(isinstance(c, AssignAddresses | CreateEni) for c in plan.calls)
        ):
            # No candidate subnet has a /28's worth of free addresses (an Assign is capped at its
            # subnet's free count, a new ENI needs room for its prefixes): no call is made, so
            # none fails with InsufficientCidrBlocks and the executor's fallback never comes.
            # Single addresses now, as that fallback would give (docs/allocator.md, step 7;
            # issue 24's subnet worlds in the simulation, seeds 178 and 207).
            singles = allocation("secondary-ip")
            if singles.calls:
                plan = singles
        if reclaim:
            plan = replace(plan, kind="allocate", calls=reclaim + plan.calls)
        return plan
    delta = compute(cfg, state, limits)
    if report.release and delta.high:
        return _plan_release(report, inventory, delta, mode)
    return Plan(report.node, inventory.instance_id, report.seq, "none", (), 0, delta, mode)


def _freed(
    subnets: Sequence[Subnet], inventory: Inventory, unknown: list[tuple[str, tuple[str, ...], tuple[str, ...]]]
) -> Sequence[Subnet]:
    """``subnets`` with the addresses the plan's first calls unassign (offers of unknown origin,
    :func:`_split_unknown`) counted free in their ENI's subnet: the plan's Assigns come after."""
    if not unknown:
        return subnets
    where = {e.eni_id: e.subnet_id for e in inventory.enis}
    freed: dict[str, int] = {}
    for eni_id, ips, pfx in unknown:
        sid = where.get(eni_id, "")
        freed[sid] = freed.get(sid, 0) + len(ips) + PREFIX_SIZE * len(pfx)
    return [replace(s, free=s.free + freed[s.subnet_id]) if s.subnet_id in freed else s for s in subnets]


def _split_unknown(
    report: PoolReport, inventory: Inventory
) -> tuple[PoolReport, list[tuple[str, tuple[str, ...], tuple[str, ...]]]]:
    """The report without its offers of unknown origin (``ReleaseOffer.unknown``), and what EC2
    shows of those. Such an offer is never handed back: the agent learnt the addresses from
    IMDS alone after it lost its checkpoint, so EC2 may have unassigned them before (an earlier
    invocation's release book entry settled since) while a Describe that lags still shows them
    (docs/safety.md, row 12). They are not the node's pool; what EC2 shows of them is
    unassigned (one already unassigned is refused "not assigned" and said ``released``), and
    the node's need is met with fresh addresses."""
    if all(o.may_hand_back for o in report.release):
        return report, []
    known = [o for o in report.release if o.may_hand_back]
    unknown = _offers_ec2_shows(
        report.model_copy(update={"release": [o for o in report.release if not o.may_hand_back]}), inventory
    )
    return report.model_copy(update={"release": known}), unknown


def _without(state: PoolState, unknown: list[tuple[str, tuple[str, ...], tuple[str, ...]]]) -> PoolState:
    """The node's pool without the addresses of offers of unknown origin (:func:`_split_unknown`)."""
    if not unknown:
        return state
    ips = sum(len(i) for _, i, _ in unknown)
    pfx = sum(len(p) for _, _, p in unknown)
    return replace(
        state,
        total=max(0, state.total - ips - PREFIX_SIZE * pfx),
        free_singles=max(0, state.free_singles - ips),
        free_prefixes=max(0, state.free_prefixes - pfx),
    )


def _split_offers(
    offered: list[tuple[str, tuple[str, ...], tuple[str, ...]]], need: int
) -> tuple[tuple[Reclaim, ...], list[ReleaseOffer]]:
    """Take back offered addresses until ``need`` addresses are covered (whole
    prefixes at a time); the rest stays offered."""
    reclaim: list[Reclaim] = []
    rest: list[ReleaseOffer] = []
    for eni_id, ips, pfx in offered:
        take_ips = ips[: max(0, need)]
        need -= len(take_ips)
        take_pfx = pfx[: max(0, math.ceil(need / PREFIX_SIZE))] if need > 0 else ()
        need -= PREFIX_SIZE * len(take_pfx)
        if take_ips or take_pfx:
            reclaim.append(Reclaim(eni_id, take_ips, take_pfx))
        left_ips, left_pfx = ips[len(take_ips) :], pfx[len(take_pfx) :]
        if left_ips or left_pfx:
            rest.append(ReleaseOffer(eni_id=eni_id, ips=list(left_ips), prefixes=list(left_pfx)))
    return tuple(reclaim), rest


def _offers_ec2_shows(report: PoolReport, inventory: Inventory) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """The release offers, kept to what EC2 still shows on each ENI."""
    by_id = {e.eni_id: e for e in inventory.enis if e.usable}
    out = []
    for offer in report.release:
        eni = by_id.get(offer.eni_id)
        if eni is None:
            continue
        ips = tuple(ip for ip in offer.ips if ip in eni.ips)
        pfx = tuple(p for p in offer.prefixes if p in eni.prefixes)
        if ips or pfx:
            out.append((offer.eni_id, ips, pfx))
    return out


def _free_device_index(used: Collection[tuple[int, int]], card: int = DEFAULT_CARD) -> int:
    """The lowest free device index of ``card``: from 1 on the default card (0 is the primary
    ENI's), from 0 on any other (each card numbers its own devices; EC2's EFA guide attaches
    "the next unused network card index, device index 0")."""
    idx = 0 if card != DEFAULT_CARD else 1
    while (card, idx) in used:
        idx += 1
    return idx


def new_eni_slot(
    used: Collection[tuple[int, int]], limits: InstanceLimits, *, multi_card: bool = False, max_eni: int = 0
) -> tuple[int, int] | None:
    """Where the next new ENI goes, ``(network_card, device_index)``, given the slots ``used``
    (every attached ENI, warmpool's or not); None when there is no room.

    The default card first, up to its own ENI limit (``limits.max_enis``, capped by
    ``MAX_ENI``), as the VPC CNI does. With ``multi_card`` (``WARMPOOL_MULTI_CARD``, off by
    default as the VPC CNI's multi-NIC support is), once that card is full: the lowest other
    card of the type with room for one more ENI (each card takes ``limits.per_card_enis``),
    ``MAX_ENI`` then capping the ENIs of all cards together. Its lowest free device index,
    0 included (device 0 of a card other than 0 is not the primary ENI)."""
    per_card: dict[int, int] = {}
    for card, _ in used:
        per_card[card] = per_card.get(card, 0) + 1
    if not multi_card:
        if per_card.get(DEFAULT_CARD, 0) >= limits.enis(max_eni):
            return None
        return DEFAULT_CARD, _free_device_index(used, DEFAULT_CARD)
    if len(used) >= limits.enis(max_eni, multi_card=True):
        return None
    for card in range(limits.network_cards):
        if per_card.get(card, 0) < limits.per_card_enis:
            return card, _free_device_index(used, card)
    return None


def _plan_allocation(
    report: PoolReport,
    inventory: Inventory,
    limits: InstanceLimits,
    subnets: Sequence[Subnet],
    cfg: PoolConfig,
    state: PoolState,
    delta: PoolDelta,
    cluster: str,
    exclude_subnets: frozenset[str],
    alloc_mode: Mode,
    subnet_rule: SubnetRule,
    surge_hint: SurgeHint | None = None,
) -> Plan:
    prefix = alloc_mode == "prefix"
    unit = PREFIX_SIZE if prefix else 1
    need = math.ceil(delta.short / unit)
    # Room left under the node's ceiling (in addresses, as the node's mode
    # counts them), in units of this allocation. Slots cap each ENI below.
    room = math.ceil(max(0, ceiling(cfg, limits) - state.total) / unit)  # a max-pods ceiling needs its last /28
    slots = limits.slots_per_eni
    calls: list[Call] = []
    notes: list[str] = []

    site = Site(cluster, inventory.availability_zone, inventory.vpc_id, inventory.own_subnet)
    candidates = {
        s.subnet_id: s.free for s in pod_subnets(subnets, site, subnet_rule) if s.subnet_id not in exclude_subnets
    }
    # Surge: pods are waiting because demand outran the pool. An assign costs
    # one call whatever its count, so fill the ENI it touches: the next pods
    # find addresses at once instead of costing a call each. What turns out
    # surplus goes back through the release path (one call per ENI, after the
    # cooldown and release delay), so a settled pool still holds exactly its
    # targets. Single addresses only: a full ENI of /28s would be far too much.
    # Not for a node planned lean (its zone short of addresses): it gets what its pods wait
    # for, no more, or it takes what other nodes' waiting pods need and offers it back after
    # the delay (review of fair sharing, F1).
    #
    # A burst (``report.burst``: pods given addresses within the agent's window) is the same
    # sign before any pod waits: its next pods are coming. Not in prefix mode either: a /28 is
    # already sixteen pods' worth, and a burst's extra /28 measured (bench --random) saved no
    # call where it was not released again by one more.
    surge = (report.pending_demand > 0 or report.burst is not None) and not prefix and not cfg.lean
    # What a hint says the node still needs beyond its pool (None: no hint, a surge fills).
    hinted = None if surge_hint is None or not surge else max(0, surge_hint.pods + cfg.warm_ip - state.total)
    # Free addresses of every subnet read, candidate for new ENIs or not: an ENI's own subnet
    # (the node's, say, once tagged subnets take the new ENIs) bounds what an Assign on it can
    # get. EC2 refuses one that asks for more than the subnet has
    # (InsufficientFreeAddressesInSubnet); the count is the cached one, so a stale count costs
    # a refused call and a re-plan without that subnet, as before.
    known = {s.subnet_id: s.free for s in subnets}
    for eni in sorted(inventory.enis, key=lambda e: (-(slots - e.used_slots), e.device_index)):
        if need <= 0 or room <= 0:
            break
        free = slots - eni.used_slots
        if free <= 0 or eni.subnet_id in exclude_subnets or not eni.usable:
            continue
        n = min(free if delta.whole_enis else min(free, need), room)
        if surge and not delta.whole_enis:
            spare = candidates.get(eni.subnet_id, 0)  # never fill into a tight subnet
            fill = free if hinted is None or not surge_hint or not surge_hint.fills else min(free, hinted)
            n = max(n, min(fill, room, spare // 2))
        left = candidates.get(eni.subnet_id, known.get(eni.subnet_id))
        if left is not None:
            n = min(n, left // unit)
            if n <= 0:
                continue  # its subnet is full: new ENIs in a candidate subnet instead
        if eni.subnet_id in candidates:
            candidates[eni.subnet_id] -= n * unit
        elif eni.subnet_id in known:
            known[eni.subnet_id] -= n * unit
        calls.append(AssignAddresses(eni.eni_id, ips=0 if prefix else n, prefixes=n if prefix else 0))
        need -= n
        room -= n

    # New ENIs go on the default card, as the VPC CNI's pods' ENIs do (its max-pods formula,
    # and so the node's ceiling, counts that card), and with multi_card then on the other cards
    # (the ceiling counts them too; the agent's host routing numbers their tables apart). Each
    # card has its own ENI limit: interfaces other tools attached to the other cards (EFA on a
    # p5.48xlarge: one on each of 32) take none of the default card's.
    used = {(e.network_card, e.device_index) for e in inventory.enis}
    slot = new_eni_slot(used, limits, multi_card=cfg.multi_card, max_eni=cfg.max_eni)
    while need > 0 and room > 0 and slot is not None:
        n = min(slots if delta.whole_enis else min(slots, need), room)
        if hinted is not None and not delta.whole_enis:
            # a hint sizes the new ENI for the pods still expected (what the calls before it
            # have not already asked for), never into a tight subnet
            asked = sum(c.ips for c in calls if isinstance(c, AssignAddresses | CreateEni))
            spare_new = max(candidates.values(), default=0)
            n = max(n, min(slots, room, hinted - asked, spare_new // 2))
        # Most free addresses first; ties by id so plans are deterministic.
        fitting = [(free, sid) for sid, free in candidates.items() if free >= n * unit + 1]
        if not fitting:
            notes.append("no allowed subnet in the AZ has room")
            break
        _, sid = max(fitting, key=lambda t: (t[0], t[1]))
        card, idx = slot
        used.add(slot)
        candidates[sid] -= n * unit + 1
        calls.append(
            CreateEni(
                subnet_id=sid,
                device_index=idx,
                network_card=card,
                ips=0 if prefix else n,
                prefixes=n if prefix else 0,
                client_token=client_token(cluster, inventory.instance_id, report.seq, card, idx),
            )
        )
        slot = new_eni_slot(used, limits, multi_card=cfg.multi_card, max_eni=cfg.max_eni)
        need -= n
        room -= n
    if need > 0 and slot is None:
        notes.append("instance at its ENI limit")
    return Plan(
        report.node,
        inventory.instance_id,
        report.seq,
        "allocate" if calls else "none",
        tuple(calls),
        max(need, 0),
        delta,
        alloc_mode,
        tuple(notes),
    )


def _plan_release(report: PoolReport, inventory: Inventory, delta: PoolDelta, mode: Mode) -> Plan:
    by_id = {e.eni_id: e for e in inventory.enis if e.usable}
    reported = {e.eni_id: e for e in report.enis}
    budget_addrs = delta.over
    budget_enis = delta.over_enis
    whole_only = delta.over_enis > 0 and delta.over_units == 0
    calls: list[Call] = []
    for offer in sorted(report.release, key=lambda o: o.eni_id):
        eni = by_id.get(offer.eni_id)
        if eni is None:
            continue
        ips = tuple(ip for ip in offer.ips if ip in eni.ips)
        prefixes = tuple(p for p in offer.prefixes if p in eni.prefixes)
        rep = reported.get(eni.eni_id)
        # Deleted only when every secondary address was offered by the owner
        # (quarantined, so no pod holds it), never on the reported counts alone.
        empties = (
            not is_primary_slot(eni.network_card, eni.device_index)
            and eni.lifecycle
            and set(ips) == set(eni.ips)
            and set(prefixes) == set(eni.prefixes)
            and (rep is None or rep.assigned == 0)
        )
        if whole_only:
            if empties and budget_enis > 0:
                calls.append(DeleteEni(eni.eni_id))
                budget_enis -= 1
            continue
        amount = len(ips) + PREFIX_SIZE * len(prefixes)
        if amount == 0:
            continue
        if amount > budget_addrs:
            # Trim to what the targets allow; never drop below them.
            keep_ips = ips[: max(0, budget_addrs)]
            left = budget_addrs - len(keep_ips)
            keep_pfx = prefixes[: max(0, left // PREFIX_SIZE)]
            ips, prefixes = keep_ips, keep_pfx
            amount = len(ips) + PREFIX_SIZE * len(prefixes)
            empties = False
            if amount == 0:
                continue
        budget_addrs -= amount
        calls.append(DeleteEni(eni.eni_id) if empties else UnassignAddresses(eni.eni_id, ips, prefixes))
    return Plan(
        report.node,
        inventory.instance_id,
        report.seq,
        "release" if calls else "none",
        tuple(calls),
        0,
        delta,
        mode,
    )
