"""Review 36 of the merge of h33 (1ee3640: an address joining a young offer waits out of it,
``PoolController._date_joined_offers``) and of f096a96's cap on an ENI's offer
(``node_agent.offers.quarantined``). What docs/safety.md (hand-over step 1) promises: an offer
is never dated before any address in it was quarantined.

C1 (cost, the stall of review 32's D1; fixed after the review: such an offer is dated anew): a /28
whose last member is quarantined while the /28 is
the only thing its ENI offers is offered dated by its oldest member. ``_date_joined_offers``
dates an offer anew only when something else stands on offer (``standing is None and not
waiting``: "a new offer, all of it quarantined just now"), but a /28 completed by its last member
is not all of it quarantined just now: its other members were quarantined (in no offer, a /28
not wholly quarantined) since the start. Before h33 the join dated the whole offer anew (some
stamps new, some not). After a stale checkpoint (``_restore_stale``) the free members of a /28 a
pod holds are quarantined at the start and the pod's member is quarantined when the pod lets it
go (``UNKNOWN_ON_RELEASE``): released more than 60 s into the window, the /28 goes out too old for
the allocator to act on (``fresh_offers`` drops it) and what EC2 shows of it counts as the node's
free pool until the oldest members' renewal at the release timeout.

C2 (cost; open, a strict xfail): an address beyond the cap (quarantined later than the 64 offered) enters the offer
when an older one leaves it, and the offer keeps the older addresses' date: dated before the
address was quarantined (the cap's docstring: "its date does not date the offer" holds only
while it stays out).

D1 (double, on the IMDS lag docs/safety.md rows 4 and 6 allow; fixed after the review: the take-back treats
every whole quarantined /28 as offered, the cap's too): ``PoolController._take_back``
takes the members of a /28 in no offer back into the pool on IMDS's listing ("loose": meant for
a /28 not wholly quarantined, which no allocator was offered), and a whole quarantined /28 the cap
leaves out counts as in no offer. A renewal dates every quarantined address of the ENI alike, and
the cap then keeps the first 64 /28s by their text: one offered in every report until then may
drop out, and at its next release timeout it comes back free on IMDS's listing. Had the
allocator unassigned it in answer to one of those reports (its ``released`` lost) and IMDS
answered from before the unassign, a pod gets an address EC2 no longer gives the node, the
hazard the take-back refuses for offered addresses (``STEP6_REGRESSED_TAKE_BACK``)."""

from __future__ import annotations

import ipaddress

import pytest

from emulated.clock import VirtualClock
from functions.releases import fresh_offers
from functions.telemetry import Tally
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import UNKNOWN_ON_RELEASE, Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, one
from warmpool.limits import known
from warmpool.messages import MAX_IPS_PER_ENI, MAX_PREFIXES_PER_ENI, OFFER_MAX_AGE_CEILING_S
from warmpool.pool import PoolConfig

E = PRIMARY.eni_id
P1 = "10.0.0.32/28"
MEMBERS = [str(h) for h in ipaddress.IPv4Network(P1)]
T0 = 1000.0


def test_a_28_completed_by_its_last_member_is_offered_dated_no_earlier_than_that_member() -> None:
    imds = FakeImds()
    imds.enis[E] = AttachedEni(PRIMARY, [], [P1])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ds.add_eni(PRIMARY, T0 - 100)
    ds.add_addresses(E, (), [P1])
    pod = ds.assign("pod", "eth0", "ns", T0 - 50)  # a running pod on a member of P1
    assert pod is not None
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_prefix=1), ds, TIMING, metadata=imds)
    ctl.start(T0, checkpoint_lost=True)
    # What a stale checkpoint leaves of P1 (``_restore_stale``): its free members quarantined (in
    # no offer: the pod holds one), the pod's /28 offered as of unknown origin when it lets go.
    ds.quarantine(E, [m for m in MEMBERS if m != pod.ip], [], T0)
    ds.set_meta(UNKNOWN_ON_RELEASE, [P1])
    assert P1 not in ds.quarantined().get(E, ([], []))[1]
    t = T0
    while t < T0 + 70:
        t += 1.0
        for r in ctl.tick(t):
            assert r.release == [], r.release
    released_at = T0 + 70.5
    ds.release("pod", "eth0", released_at)  # the last member quarantined now: P1 whole
    assert ds.quarantined()[E] == ([], [P1])
    assert ds.quarantined_at()[E][pod.ip] == released_at
    r = one(ctl.tick(T0 + 71))
    (offer,) = r.release
    assert offer.prefixes == [P1]
    assert offer.quarantined_at is not None
    # Never dated before any address in it was quarantined (docs/safety.md, step 1) ...
    assert offer.quarantined_at >= released_at, (offer.quarantined_at - T0, released_at - T0)
    # ... so the allocator can act on it once its release delay is over.
    late = fresh_offers(r, VirtualClock(released_at + 15), OFFER_MAX_AGE_CEILING_S, Tally())
    assert late.release == r.release


def _many(imds: FakeImds, n: int) -> list[str]:
    ips = [f"10.0.1.{10 + i}" for i in range(n)]
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, ips, [])
    return ips


@pytest.mark.xfail(strict=True, reason="review 36 C2: an address past the cap enters the offer with the older date")
def test_an_address_past_the_cap_enters_the_offer_dated_no_earlier_than_its_quarantine() -> None:
    imds = FakeImds()
    ips = _many(imds, MAX_IPS_PER_ENI + 1)
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ds.add_eni(PRIMARY, T0 - 100)
    ds.add_eni(SECOND, T0 - 100)
    ds.add_addresses(SECOND.eni_id, ips, ())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    first, late = ips[:MAX_IPS_PER_ENI], ips[MAX_IPS_PER_ENI]
    ds.quarantine(SECOND.eni_id, first, [], T0)  # offered (as a surplus is, stamped at once)
    ctl.tick(T0)
    late_at = T0 + 5
    ds.quarantine(SECOND.eni_id, [late], [], late_at)  # past the cap: quarantined, not offered
    r = one(ctl.tick(T0 + 5))
    (offer,) = r.release
    assert late not in offer.ips and len(offer.ips) == MAX_IPS_PER_ENI
    # The allocator hands one back (a pod needs it): the late address now fits.
    ds.reclaim(SECOND.eni_id, [first[0]])
    reports = [r for t in (T0 + 7, T0 + 9, T0 + 12) for r in ctl.tick(t)]
    with_late = [o for r in reports for o in r.release if late in o.ips]
    assert with_late, [o.ips for r in reports for o in r.release]
    assert all(o.quarantined_at is not None and o.quarantined_at >= late_at for o in with_late), [
        (o.quarantined_at or 0) - T0 for o in with_late
    ]


def _prefixes(n: int) -> list[str]:
    return [f"10.1.{j // 16}.{(j % 16) * 16}/28" for j in range(n)]


def test_a_28_once_offered_is_never_taken_back_on_imds_listing_after_the_cap_leaves_it_out() -> None:
    pfx = _prefixes(MAX_PREFIXES_PER_ENI + 1)
    imds = FakeImds()
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [], pfx)
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ds.add_eni(PRIMARY, T0 - 100)
    ds.add_eni(SECOND, T0 - 100)
    ds.add_addresses(SECOND.eni_id, (), pfx)
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_prefix=1), ds, TIMING, metadata=imds)
    ctl.start(T0)
    late = min(pfx)  # the first by the cap's tie-break: in the offer once the dates are equal
    ds.quarantine(SECOND.eni_id, [], [p for p in pfx if p != late], T0)
    ctl.tick(T0)
    ds.quarantine(SECOND.eni_id, [], [late], T0 + 5)  # past the cap: quarantined, not offered
    offered: set[str] = set()
    t = T0
    while t < T0 + 3 * TIMING.release_timeout_s:
        t += 2.0
        for r in ctl.tick(t):
            offered |= {p for o in r.release for p in o.prefixes}
        # Whatever a report offered, the allocator may have unassigned (its ``released`` lost,
        # IMDS behind it: docs/safety.md rows 4 and 6); only its answer returns it to the pool.
        back = [p for p in sorted(offered) if _free(ds, p)]
        assert not back, (t - T0, back)
    assert late in offered, "the late /28 was offered once the renewal dated them all alike"


def _free(ds: Datastore, p: str) -> bool:
    """Whether any member of ``p`` is back in the pool (neither quarantined nor in use)."""
    at = ds.quarantined_at().get(SECOND.eni_id, {})
    members = [str(h) for h in ipaddress.IPv4Network(p)]
    e = next(e for e in ds.enis() if e.info.eni_id == SECOND.eni_id)
    return any(m in e.addrs and m not in at and not e.addrs[m].in_use for m in members)
