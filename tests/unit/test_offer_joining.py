"""Addresses joining an ENI's offer (review 33, Y1): left out of it while its date stands
(``PoolController._date_joined_offers``), offered with the whole offer dated anew once it is
``OFFER_DATE_KEPT_S`` old or nothing older is left on offer (``_offer_joined``), and never
offered dated before they were quarantined, across a restart too (``_date_mixed_offers``). While
pods wait the offer is dated anew at once (as review 32's D1 fix did:
``tests/unit/test_agent_safety.py::test_after_a_rebuild_addresses_imds_shows_late_are_held_too_and_the_take_back_applies``)."""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import OFFER_DATE_KEPT_S, AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, make
from warmpool.limits import known
from warmpool.messages import PoolReport

X = "10.0.0.40"
J = "10.0.0.41"
T0 = 1000.0


def _lost() -> tuple[FakeImds, Datastore, PoolController]:
    imds = FakeImds()
    imds.add(SECOND, [X])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0, checkpoint_lost=True)
    assert ds.quarantined().get(SECOND.eni_id) == ([X], [])
    return imds, ds, ctl


def _offered(r: PoolReport) -> dict[str, float]:
    """Every offered address with the date its offer goes out with."""
    return {ip: o.quarantined_at for o in r.release for ip in o.ips if o.quarantined_at is not None}


def _pool(r: PoolReport) -> set[str]:
    return {ip for e in r.enis for ip in e.ips}


def test_an_address_joining_a_young_offer_waits_out_of_it_and_is_never_offered_dated_before_it_joined() -> None:
    imds, ds, ctl = _lost()
    joined_at = T0 + 20
    quarantined = {X: T0}
    reports: list[tuple[float, PoolReport]] = []
    t = T0
    while t < T0 + 90:
        t += 1.0
        if t == joined_at:
            imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [X, J], [])
            ctl.resync(t)
            assert J in ds.quarantined()[SECOND.eni_id][0], "held as offered, of unknown origin"
            quarantined[J] = t
        reports += [(t, r) for r in ctl.tick(t)]
    for t, r in reports:
        for ip, date in _offered(r).items():
            assert date >= quarantined[ip], ("an address offered dated before it was quarantined", t, ip, date)
        assert J not in _pool(r), (t, r.enis)
    waiting = [r for t, r in reports if joined_at <= t < T0 + OFFER_DATE_KEPT_S]
    assert waiting and all(_offered(r) == {X: T0} for r in waiting), "X's offer keeps its date, J left out"
    joined = [(t, r) for t, r in reports if J in _offered(r)]
    assert joined and joined[0][0] == T0 + OFFER_DATE_KEPT_S, [t for t, _ in joined]
    assert _offered(joined[0][1]) == {X: T0 + OFFER_DATE_KEPT_S, J: T0 + OFFER_DATE_KEPT_S}


def test_an_address_left_out_is_offered_at_once_when_nothing_older_is_left_on_offer() -> None:
    imds, ds, ctl = _lost()
    assert ctl.tick(T0 + 1)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [X, J], [])
    ctl.resync(T0 + 20)
    assert [_offered(r) for r in ctl.tick(T0 + 20)] in ([], [{X: T0}])
    assert ctl.next_due(T0 + 21) <= T0 + OFFER_DATE_KEPT_S
    ds.remove_addresses(SECOND.eni_id, [X], [])  # the allocator took X (its ``released`` applied)
    assert ctl.next_due(T0 + 25) == T0 + 25, "a tick now offers J"
    got = [_offered(r) for r in ctl.tick(T0 + 25)]
    assert got == [{J: T0 + 25}], got


def test_a_start_dates_anew_an_offer_whose_addresses_were_quarantined_at_different_times() -> None:
    """What is left out of an offer is in memory only: the checkpoint holds the addresses'
    dates, and a start finds one ENI's quarantined addresses dated apart."""
    ds, _ = make(POOL, [X, J])
    ds.quarantine(PRIMARY.eni_id, [X], [], 100.0)
    ds.quarantine(PRIMARY.eni_id, [J], [], 130.0)
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING)
    ctl.start(200.0)
    (r,) = ctl.tick(201.0)
    assert _offered(r) == {X: 200.0, J: 200.0}, r.release


def test_after_a_restart_an_offer_dated_too_old_to_act_on_is_joined_at_once() -> None:
    """After a restart the stamps start again, but the reports date a restored offer by its
    checkpointed date: one already past the offer age is dated anew with what joins it, not kept."""
    ds, _ = make(POOL, [X, J])
    ds.quarantine(PRIMARY.eni_id, [X], [], 100.0)
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING)
    ctl.start(200.0)
    assert [_offered(r) for r in ctl.tick(201.0)] == [{X: 100.0}]
    ds.quarantine(PRIMARY.eni_id, [J], [], 210.0)
    got = [_offered(r) for r in ctl.tick(210.0)]
    assert got == [{X: 210.0, J: 210.0}], got
