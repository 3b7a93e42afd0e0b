"""Review 36 of the merge of h33 (1ee3640): what was attacked and held. Driven by ``next_due``
alone (as the bench drives it), a node with an address waiting out of a young offer neither
spins (a due time in the past, tick after tick) nor sleeps past the join; and a restart with an
address still waiting out of its offer dates the offer anew, never offering it dated before
that address was quarantined."""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import OFFER_DATE_KEPT_S, AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import ID, SECOND, TIMING, FakeImds
from warmpool.limits import known
from warmpool.messages import PoolReport

X = "10.0.0.40"
J = "10.0.0.41"
T0 = 1000.0


def _joining() -> tuple[FakeImds, Datastore, PoolController, MemoryCheckpoint]:
    imds = FakeImds()
    imds.add(SECOND, [X])
    cp = MemoryCheckpoint()
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0, checkpoint_lost=True)
    ctl.tick(T0 + 1)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [X, J], [])
    ctl.resync(T0 + 20)
    ctl.tick(T0 + 20)
    return imds, ds, ctl, cp


def _offered(r: PoolReport) -> dict[str, float]:
    return {ip: o.quarantined_at for o in r.release for ip in o.ips if o.quarantined_at is not None}


def test_driven_by_next_due_the_join_comes_on_time_without_spinning() -> None:
    _, _, ctl, _ = _joining()
    t, ticks, joined_at = T0 + 20, 0, None
    while t < T0 + 2 * OFFER_DATE_KEPT_S and joined_at is None:
        due = ctl.next_due(t)
        t = max(due, t + 1e-3)  # a due time at or before now is a tick now
        ticks += 1
        for r in ctl.tick(t):
            if J in _offered(r):
                joined_at = t
    assert joined_at is not None and abs(joined_at - (T0 + OFFER_DATE_KEPT_S)) < 1.0, joined_at
    assert ticks < 20, ticks


def test_a_restart_while_an_address_waits_out_of_its_offer_offers_it_dated_no_earlier_than_it_joined() -> None:
    imds, ds, _, cp = _joining()
    quarantined = ds.quarantined_at()[SECOND.eni_id]
    assert quarantined[J] > quarantined[X]
    ds2 = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ctl2 = PoolController(ID, known("m5.large"), POOL, ds2, TIMING, metadata=imds)
    ctl2.start(T0 + 30)
    offered = [_offered(r) for t in range(31, 120) for r in ctl2.tick(T0 + t)]
    assert offered
    for got in offered:
        for ip, date in got.items():
            assert date >= quarantined[ip], (ip, date - T0, quarantined[ip] - T0)
    assert any(J in got for got in offered)
