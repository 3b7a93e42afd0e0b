"""Review 32 of f80086d, finding D2: a report dates each ENI's offer no later than the steady clock's
age of the ENI's oldest quarantined address (``PoolController._report``'s ``steady_since``), and that
counts every quarantined address of the ENI, also those in no offer: the members of a /28 not wholly
quarantined (after a checkpoint loss, the free members of a /28 a running pod holds a member of:
``PoolController._take_back``'s "loose" ones). ``node_agent.offers.quarantined_since`` leaves them
out; the steady cap does not. So in prefix mode, after a checkpoint loss, a /28 learnt later on an
ENI where a pod runs on another /28 is offered dated at the start, however late it was learnt: the
case of seed 1008551 (a /28 shown late by a lagging IMDS), which f80086d's dating when learnt does
not reach. Too old for the allocator to act on, the offer is dropped at intake, and the /28 EC2
shows counted as the node's free pool while the node's pods wait, until the loose members' take-back
(the release timeout after the start, longer while IMDS seems to lag: ``_imds_lagging``).

Fixed: only the addresses the offers hold cap their date (``PoolController._report``)."""

from __future__ import annotations

import ipaddress

from emulated.clock import VirtualClock
from functions.releases import fresh_offers
from functions.telemetry import Tally
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds, one
from warmpool.limits import known
from warmpool.messages import OFFER_MAX_AGE_CEILING_S
from warmpool.pool import PoolConfig

E = PRIMARY.eni_id
P1 = "10.0.0.32/28"
P2 = "10.0.0.48/28"
MEMBERS = [str(h) for h in ipaddress.IPv4Network(P1)]
T0 = 1000.0
LEARNT = T0 + 90.0
"""Inside the window, later than the offers' max age after the start."""


def test_a_28_learnt_late_beside_a_pods_28_is_offered_dated_when_learnt() -> None:
    imds = FakeImds()
    imds.enis[E] = AttachedEni(PRIMARY, [], [P1])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ds.add_eni(PRIMARY, T0 - 100)
    ds.add_addresses(E, (), [P1])
    assert ds.assign("pod", "eth0", "ns", T0 - 50) is not None  # a running pod on a member of P1
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_prefix=1), ds, TIMING, metadata=imds)
    ctl.start(T0, checkpoint_lost=True)
    # What the rebuild leaves of P1 (``_hold_unknown``): its free members quarantined, the /28 in
    # no offer, since the pod holds one of them.
    ds.quarantine(E, MEMBERS[1:], [], T0)
    assert P1 not in ds.quarantined().get(E, ([], []))[1]
    r0 = one(ctl.tick(T0 + 1))
    assert r0.release == []
    # 90 s into the window a lagging IMDS shows P2, which the allocator put on the ENI.
    imds.add(PRIMARY, prefixes=[P2])
    ctl.resync(LEARNT)
    assert ds.quarantined()[E] == ([], [P2]), "P2 held as offered, of unknown origin"
    assert ds.assign("p1", "eth0", "ns", LEARNT + 0.5) is None  # a pod waits
    r = one(ctl.tick(LEARNT + 1))
    (offer,) = r.release
    assert offer.unknown and offer.prefixes == [P2] and r.pending_demand == 1
    # P2 is the only thing offered, quarantined when learnt (the datastore says so) ...
    assert min(ds.quarantined_at()[E][ip] for ip in ds.quarantined_at()[E] if ip not in MEMBERS) == LEARNT
    # ... yet the offer is dated at the start, by the members of P1 it does not name.
    assert offer.quarantined_at is not None and offer.quarantined_at >= LEARNT - 1, offer
    fresh = fresh_offers(r, VirtualClock(LEARNT + 2), OFFER_MAX_AGE_CEILING_S, Tally())
    assert fresh.release == r.release
