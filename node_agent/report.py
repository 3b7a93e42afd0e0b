"""A pool report's content from the datastore: the node's ENIs, what pods use, and
the standing release offers (the contract's ``PoolReport``, docs/contract).

Pure: the controller decides when to report and with which sequence number,
and keeps what it must remember about the reports it sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set

from node_agent.datastore import Datastore
from node_agent.records import NodeIdentity
from warmpool import messages
from warmpool.messages import EniReport, PoolReport, ReleaseOffer, Targets
from warmpool.pool import PoolConfig

Offers = dict[str, tuple[list[str], list[str]]]
"""Per ENI: the quarantined addresses and prefixes offered back (:meth:`Datastore.quarantined`)."""


def build_report(
    identity: NodeIdentity,
    pool: PoolConfig,
    ds: Datastore,
    offers: Offers,
    *,
    seq: int,
    now: float,
    signed: messages.SignedIdentity | None,
    skipped: Callable[[str, tuple[int, int]], None],
    offer_shift: float = 0.0,
    steady_since: Mapping[str, float] | None = None,
    unknown: Set[str] = frozenset(),
    restored_from: int | None = None,
    epoch: int | None = None,
    restore_wait: str | None = None,
    first_start: bool = False,
    lean: bool | None = None,
    burst: int = 0,
) -> PoolReport:
    """The report (``ValidationError`` if the datastore cannot make a valid one).

    Two ENIs in one (network card, device index) slot, or with one primary address, make a
    report invalid (EC2 never has that): the newest is reported, an older one (whose removal
    was missed) is left out, and so is its offer (taken out of ``offers``);
    ``skipped(eni_id, slot)`` is told.
    Quarantined addresses and prefixes are reported only as offers, never as the pool's.
    An address IMDS no longer lists (held for its holder, never handed out), or that is another
    ENI's primary address, is not reported as the pool's (EC2 may have taken it; the allocator
    counts the pool from EC2's) but counts in ``assigned`` when held (a pod may carry it), as
    ``Counts.of`` counts it.
    Each offer is dated ``offer_shift`` seconds before its quarantine time (how far this
    node's clock may be ahead of the allocator's: never an offer younger than it is). A
    negative shift (the clock at least that far behind) dates offers and the report that
    much later, in the allocator's time and never past it.
    ``steady_since`` (per ENI: ``now`` less how long the controller's steady clock has seen
    its oldest quarantined address quarantined) caps the date too: a wall clock stepped
    back makes ``now`` earlier than the datastore's quarantine time, and without the cap
    every report would date the offer ``now``, 0 s old in the allocator's eyes, while the
    agent's release timeout runs on the steady clock and ends regardless.
    ``unknown``: quarantined keys of unknown origin; an offer naming one is marked
    (``ReleaseOffer.unknown``: never handed back).
    ``restored_from``: the restored checkpoint's seq the allocator has yet to call current;
    ``epoch``: the fence of the last restore check.
    ``lean``: fair sharing (``PoolReport.lean``; None: off on this node, the field left out).
    """
    c = ds.counts(now)
    unlisted = set(ds.unlisted())  # not the pool's (EC2 may have taken it), still in use (``Counts.of``)
    # Another ENI's primary address is that ENI's (an address is on one interface at a time,
    # docs/safety.md row 1), whatever an earlier read recorded: a result's new ENI whose primary
    # EC2 drew from an address the rebuild had held on the first ENI from a stale read, before
    # the next resync found it gone there (seed 1100805: the report listed it twice, invalid).
    primaries = {e.info.primary_ip for e in ds.enis()}
    since = ds.quarantined_since(offers)
    enis = []
    slots: set[tuple[int, int]] = set()
    # Of two ENIs with one primary address (one deleted and kept for its offer or holds, the next
    # given its address in another slot: review 39, P1), the one the last IMDS read listed is
    # reported, the newer if both or neither (review 40, P2 and P3: by ``added_at`` alone, a wall
    # clock stepped back, or one read listing both, left out the one IMDS lists).
    unseen = set(ds.unseen())
    newest: dict[str, str] = {}
    for e in sorted(ds.enis(), key=lambda e: (e.info.eni_id in unseen, -e.added_at)):
        newest.setdefault(e.info.primary_ip, e.info.eni_id)
    for e in sorted(ds.enis(), key=lambda e: (e.info.network_card, e.info.device_index, -e.added_at)):
        slot = (e.info.network_card, e.info.device_index)
        if slot in slots or newest[e.info.primary_ip] != e.info.eni_id:
            skipped(e.info.eni_id, slot)
            offers.pop(e.info.eni_id, None)
            continue
        slots.add(slot)
        offered = set(offers.get(e.info.eni_id, ((), ()))[1])
        gone_prefixes = {a.prefix for a in e.addrs.values() if a.prefix is not None and a.ip in unlisted}
        enis.append(
            EniReport(
                eni_id=e.info.eni_id,
                device_index=e.info.device_index,
                network_card=e.info.network_card,
                subnet_id=e.info.subnet_id,
                primary_ip=e.info.primary_ip,
                ips=[
                    ip
                    for ip in e.ips
                    if e.addrs[ip].quarantined_at is None and ip not in unlisted and ip not in primaries
                ],
                prefixes=[p for p in e.prefixes if p not in offered and p not in gone_prefixes],
                assigned=sum(1 for a in e.addrs.values() if a.in_use),
            )
        )
    return PoolReport(
        cluster=identity.cluster,
        node=identity.node,
        instance_id=identity.instance_id,
        instance_type=identity.instance_type,
        availability_zone=identity.availability_zone,
        seq=seq,
        sent_at=now - min(0.0, offer_shift),
        mode="prefix" if pool.prefix_mode else "secondary-ip",
        targets=Targets(
            warm_ip=pool.warm_ip,
            minimum_ip=pool.minimum_ip,
            warm_eni=pool.warm_eni,
            warm_prefix=pool.warm_prefix,
            max_eni=pool.max_eni,
        ),
        enis=enis,
        assigned_ips=c.assigned,
        pending_demand=c.pending,
        release=[
            # Dated no later than the report (the contract's rule; a clock stepped
            # back after a restart only makes the offer look older, never younger),
            # and earlier by as much as this node's clock may be ahead (later by as much
            # as it is at least behind: the report's sent_at moves with it).
            ReleaseOffer(
                eni_id=k,
                ips=v[0],
                prefixes=v[1],
                quarantined_at=max(0.0, min(since.get(k, now), (steady_since or {}).get(k, now), now) - offer_shift),
                unknown=any(x in unknown for x in (*v[0], *v[1])),
            )
            for k, v in sorted(offers.items())
        ],
        identity=signed,
        restored_from=restored_from,
        restore_wait=restore_wait,
        first_start=True if first_start and restored_from is not None else None,
        epoch=epoch,
        kubelet_max_pods=pool.kubelet_max_pods or None,
        custom_networking=True if pool.custom_networking else None,
        multi_card=True if pool.multi_card else None,
        lean=lean,
        burst=burst or None,
    )
