"""The allocator's own rules for handing addresses back, whatever the agent does
(issue 12): which release offers are young enough to act on, how long an offer
stays quarantined and an ENI lives before either is released, and the flip
damping whose histories all containers share (:class:`warmpool.ports.FlipStore`).

Functions over explicit inputs (the allocator passes its settings, clock time,
clock, fair-share book and tally at each call); the flip store is the only I/O.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from functions.errors import AwsError
from functions.execute import offer_expired
from functions.fairness import FairShare
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.calls import DeleteEni, Reclaim, UnassignAddresses
from warmpool.clock import Clock
from warmpool.facts import NodeFacts
from warmpool.messages import PoolReport, ReleaseOffer
from warmpool.names import (
    M_FLIPS_UNSHARED,
    M_NODES_DAMPED,
    M_OFFERS_EXPIRED,
    M_OFFERS_UNDATED,
    M_RELEASES_HELD,
)
from warmpool.planner import Plan
from warmpool.ports import FlipStore

log = logging.getLogger(__name__)


def created_at(tags: dict[str, str]) -> float | None:
    """The ENI's ``createdAt`` tag (``%Y-%m-%dT%H:%M:%SZ``) as epoch seconds, or None."""
    raw = tags.get(names.TAG_CREATED_AT, "")
    try:
        return datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def fresh_offers(report: PoolReport, clock: Clock, max_age_s: float, tally: Tally) -> PoolReport:
    """The report with only the release offers the agent cannot have taken back yet.

    Each offer is aged from its own ``quarantined_at`` (the agent repeats a
    still-quarantined offer in every later report, so the report's
    ``sent_at`` says nothing about it). An offer older than ``max_age_s``
    (``release_offer_max_age_s``), or without ``quarantined_at`` (an agent
    from before the field: how close it is to taking the addresses back is
    unknown), is dropped; the report keeps its demand. Never unassign what
    a pod may hold again. The age is checked again right before each
    Unassign call (:meth:`PlanExecutor.offer_fresh`). The same report when
    every offer stays."""
    if not report.release:
        return report
    now = clock.now()
    keep: list[ReleaseOffer] = []
    expired = undated = 0
    for offer in report.release:
        n = len(offer.ips) + len(offer.prefixes)
        if offer.quarantined_at is None:
            undated += n
        elif offer_expired(offer.quarantined_at, now, max_age_s):
            expired += n
        else:
            keep.append(offer)
    if len(keep) == len(report.release):
        return report
    if expired:
        tally.add(M_OFFERS_EXPIRED, expired)
    if undated:
        tally.add(M_OFFERS_UNDATED, undated)
        log.warning(
            "release offers without quarantined_at ignored (agent predates the field)",
            extra={"node": report.node, "seq": report.seq, "addresses": undated},
        )
    if expired:
        log.info(
            "release offers too old to act on", extra={"node": report.node, "seq": report.seq, "addresses": expired}
        )
    return report.model_copy(update={"release": keep})


def hold_releases(
    r: PoolReport,
    f: NodeFacts,
    plan: Plan,
    *,
    instance_id: str,
    fair: FairShare,
    clock: Clock,
    settings: Settings,
    tally: Tally,
) -> Plan:
    """The plan under the release rules: an offer is acted on only once
    quarantined for ``release_delay_s``; an ENI is deleted only once
    ``min_eni_age_s`` old (its ``createdAt`` tag); a damped instance's offers
    are taken back (``Reclaim``) instead."""
    if not any(isinstance(c, UnassignAddresses | DeleteEni) for c in plan.calls):
        return plan
    now = clock.now()
    offered_at = {o.eni_id: o.quarantined_at for o in r.release}
    created = {e.eni.eni_id: created_at(e.tags) for e in f.enis}
    shows = {e.eni.eni_id: e.eni for e in f.enis}
    damped = fair.damped(instance_id, now)
    calls: list[Any] = []
    held = 0
    for c in plan.calls:
        if not isinstance(c, UnassignAddresses | DeleteEni):
            calls.append(c)
            continue
        young_offer = now - (offered_at.get(c.eni_id) or now) < settings.release_delay_s
        born = created.get(c.eni_id)
        young_eni = isinstance(c, DeleteEni) and born is not None and now - born < settings.min_eni_age_s
        if damped:
            o = next((o for o in r.release if o.eni_id == c.eni_id), None)
            seen = shows.get(c.eni_id)
            if o is not None and seen is not None and o.may_hand_back:
                # Hand back only what EC2 still shows on the ENI: an address an
                # earlier invocation unassigned (its result late or lost) is not
                # the node's to take back (hostile review, finding 2). Never an offer of
                # unknown origin: Describe showing it proves nothing (``planner._split_unknown``).
                ips = tuple(ip for ip in o.ips if ip in seen.ips)
                pfx = tuple(p for p in o.prefixes if p in seen.prefixes)
                if ips or pfx:
                    calls.append(Reclaim(c.eni_id, ips, pfx))
            held += 1
        elif young_offer or young_eni:
            held += 1
        else:
            calls.append(c)
    if not held:
        return plan
    tally.add(M_RELEASES_HELD, held)
    log.info("release calls held", extra={"node": r.node, "instance_id": instance_id, "calls": held, "damped": damped})
    mutating = [c for c in calls if not isinstance(c, Reclaim)]
    kind = plan.kind if mutating else ("allocate" if calls else "none")
    return replace(plan, calls=tuple(calls), kind=kind)


def offers_held(
    r: PoolReport, *, instance_id: str, fair: FairShare, clock: Clock, settings: Settings
) -> frozenset[str]:
    """The ENIs whose offers :func:`hold_releases` holds now: every offer's while the instance
    is damped, else each quarantined less than ``release_delay_s`` ago (the same reading of
    the report's offers). The release book's repeats make no new Unassign on them either
    (:meth:`warmpool.release_book.ReleaseBook.repeats`, ``hold``): before, one on another ENI
    of an offer made this very second was made while the ordinary Unassign of the same offer
    was held (review of settle7, F3). Only ever fewer or later releases."""
    now = clock.now()
    if fair.damped(instance_id, now):
        return frozenset(o.eni_id for o in r.release)
    offered_at = {o.eni_id: o.quarantined_at for o in r.release}
    return frozenset(e for e, at in offered_at.items() if now - (at or now) < settings.release_delay_s)


def count_flip(
    fair: FairShare, r: PoolReport, plan: Plan, *, instance_id: str, clock: Clock, damp_s: float, tally: Tally
) -> None:
    """Count what the node asks for, whatever the rules then let happen:
    addresses back (release offers) or more (a deficit or waiting pods). ``r`` is the
    report as the node sent it: an offer :func:`fresh_offers` dropped (too old for this
    container's clock) is still asked for."""
    if r.release:
        kind = "release"
    elif plan.delta.low or r.pending_demand:
        kind = "allocate"
    else:
        return
    if fair.asked(instance_id, kind, clock.now()):
        tally.add(M_NODES_DAMPED)
        log.warning(
            "node flips between filling and releasing: damped (its releases are taken back)",
            extra={"node": r.node, "instance_id": instance_id, "damp_s": damp_s},
        )


def load_flips(fair: FairShare, store: FlipStore | None, cluster: str, instance_ids: list[str], tally: Tally) -> None:
    """The batch's instances' shared flip histories, before any flip of this batch is counted."""
    if store is None or not instance_ids:
        return
    try:
        fair.hydrate(store.load(cluster, instance_ids))
    except (AwsError, ClientError) as err:  # this container's view still damps what it saw
        fair.unshared(instance_ids)  # and is not written over the rows it could not read
        tally.add(M_FLIPS_UNSHARED)
        log.warning("flip histories not read", extra={"error": str(err)[:200]})


def save_flips(fair: FairShare, store: FlipStore | None, cluster: str, tally: Tally, now: float) -> None:
    """The flip histories this batch changed, back to the shared store."""
    if store is None:
        fair.take_dirty()
        return
    changed = fair.take_dirty()
    for iid, st in sorted(changed.items()):
        try:
            store.save(cluster, iid, st, fair.expires_at(st, now))
        except (AwsError, ClientError) as err:
            fair.unsaved(iid)
            tally.add(M_FLIPS_UNSHARED)
            log.warning("flip history not saved", extra={"instance_id": iid, "error": str(err)[:200]})
