"""The agent's defects the whole-system simulation found after issue 11 (docs/reliability.md,
findings A, B and C), each reproduced as the short sequence of events the seeds show.

A (seeds 197, 225, 2720): IMDS lag alone. An address is released and then assigned to the
same ENI again; a lagging IMDS still lists it from *before* the release, which is no
evidence of the new assignment; when IMDS catches up with the release, resync must not
take it from the pod holding it (and later hand it to a second pod).
B (seeds 303, 1325): a ``released`` result delivered after the release timeout, older than
the ``assigned`` result that gave the address back, must not take it away.
C (seed 4890): two ENIs in one device slot must never stop the node's reports.
"""

from __future__ import annotations

import copy

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, make, one, result
from warmpool.limits import known
from warmpool.pool import PoolConfig

X = "10.0.0.12"
THIRD = EniInfo("eni-00000003", 1, "0a:00:00:00:00:03", "10.0.0.30", "subnet-a", "10.0.0.0/24")


def listed(imds: FakeImds, *ips: str) -> None:
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, list(ips), [])


def holders(ds: Datastore) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in ds.pods():
        out.setdefault(p.ip, []).append(p.container_id)
    return out


def released_x(imds: FakeImds) -> tuple[Datastore, PoolController, int]:
    """.11 and .12 attached; .12 quarantined, offered, released by EC2; IMDS (lagging) still lists it."""
    listed(imds, "10.0.0.11", X)
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING, metadata=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r1 = one(ctl.tick(61.0))
    assert r1.release[0].ips == [X]
    ctl.apply_result(result(r1.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), 62.0)
    assert ds.eni_of(X) is None
    return ds, ctl, r1.seq


def test_a_lagging_imds_listing_a_released_address_is_no_evidence_of_its_reassignment() -> None:
    imds = FakeImds()
    ds, ctl, _ = released_x(imds)
    assert ds.assign("p1", "eth0", "ns", 63.0) is not None  # .11
    r2 = one(ctl.tick(64.0))  # short: pods wait for more
    # EC2 assigns .12 to the ENI again; IMDS still shows the state from before the release.
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 65.0)
    assert ds.assign("p2", "eth0", "ns", 66.0) is None, "IMDS from before the release taken as evidence"
    listed(imds, "10.0.0.11")  # IMDS catches up with the release
    ctl.tick(67.0)
    ctl.resync(67.0)
    assert ds.assign("p2", "eth0", "ns", 68.0) is None
    listed(imds, "10.0.0.11", X)  # ... then with the new assignment: now it is evidence
    ctl.tick(69.0)
    assert ds.assign("p2", "eth0", "ns", 70.0) == (X, PRIMARY.eni_id)
    ctl.resync(71.0)
    assert ds.assign("p3", "eth0", "ns", 200.0) is None
    assert all(len(h) == 1 for h in holders(ds).values())


def test_resync_never_takes_an_address_from_a_running_pod_nor_hands_it_out_again() -> None:
    # The sequence of seed 197 once the pod has the address: IMDS stops listing it for
    # a while (catching up with an earlier release), then lists it again.
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds, ctl = make(PoolConfig(warm_ip=0), imds=imds)
    ctl.start(0.0)
    assert ds.assign("p1", "eth0", "ns", 1.0) == ("10.0.0.11", PRIMARY.eni_id)
    assert ds.assign("p2", "eth0", "ns", 1.0) == (X, PRIMARY.eni_id)
    listed(imds, "10.0.0.11")
    notes = ctl.resync(2.0)
    assert ds.lookup("p2", "eth0") == (X, PRIMARY.eni_id), notes
    assert ctl.stats.held_not_in_imds == 1
    listed(imds, "10.0.0.11", X)
    ctl.resync(3.0)
    assert ds.assign("p3", "eth0", "ns", 100.0) is None
    assert holders(ds) == {"10.0.0.11": ["p1"], X: ["p2"]}
    # EC2 truly took it: once the pod is gone, the next resync drops it; never handed out meanwhile.
    listed(imds, "10.0.0.11")
    ctl.resync(101.0)
    ds.release("p2", "eth0", 102.0)
    assert ds.assign("p3", "eth0", "ns", 200.0) is None
    ctl.resync(201.0)
    assert ds.eni_of(X) is None and ds.unlisted() == []


def test_a_late_released_result_older_than_the_reassignment_is_ignored() -> None:
    # Seeds 303/1325: the ``released`` for .12 sits in SQS past the release timeout;
    # meanwhile EC2 assigned .12 to the node again and a pod got it.
    cp = MemoryCheckpoint()
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds = Datastore(cooldown_s=TIMING.cooldown_s, checkpoint=cp)
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING, metadata=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r1 = one(ctl.tick(61.0))
    late = result(r1.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]})  # delayed in SQS
    listed(imds, "10.0.0.11")
    ctl.tick(100.0)
    ctl.tick(190.0)  # past the release timeout, IMDS without .12: released, its result late
    assert ds.quarantined() == {} and ctl.stats.released_without_result == 1
    listed(imds, "10.0.0.11", X)  # assigned again
    assert ds.assign("p1", "eth0", "ns", 201.0) is not None
    ctl.retry_soon()
    r2 = one(ctl.tick(202.0))
    assert not r2.release  # the grant below answers a report that offered nothing: EC2's own
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 203.0)
    got = ds.assign("p2", "eth0", "ns", 204.0)
    assert got == (X, PRIMARY.eni_id)
    # A restart in between keeps the evidence (checkpointed).
    ds = Datastore(cooldown_s=TIMING.cooldown_s, checkpoint=MemoryCheckpoint(copy.deepcopy(cp.data)))
    assert ds.restore()
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING, metadata=imds)
    ctl.start(205.0)
    ctl.apply_result(late, 206.0)
    ctl.resync(207.0)
    ctl.tick(400.0)
    assert ds.lookup("p2", "eth0") == (X, PRIMARY.eni_id)
    assert ctl.stats.stale_releases == 1
    assert X not in ds.recently_gone(400.0)[0]
    assert ds.quarantined() == {}


def test_a_release_newer_than_the_last_claim_still_applies() -> None:
    imds = FakeImds()
    ds, ctl, _ = released_x(imds)
    listed(imds, "10.0.0.11")
    ctl.resync(63.0)  # the periodic resync sees IMDS without .12
    listed(imds, "10.0.0.11", X)
    ctl.retry_soon()
    r2 = one(ctl.tick(64.0))
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 65.0)
    assert ds.eni_of(X) is not None
    ds.quarantine(PRIMARY.eni_id, [X], [], 66.0)
    ctl.retry_soon()
    r3 = one(ctl.tick(67.0))
    ctl.apply_result(result(r3.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), 68.0)
    assert ds.eni_of(X) is None and ctl.stats.stale_releases == 0


def test_quarantined_addresses_imds_no_longer_lists_are_not_taken_back_on_timeout() -> None:
    # The allocator unassigned .12 (within its offer-age ceiling); the ``released``
    # result is late or lost. Taking .12 back would hand a pod an address EC2 may
    # give to another node.
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    assert one(ctl.tick(61.0)).release[0].ips == [X]
    listed(imds, "10.0.0.11")
    ctl.tick(200.0)  # past the release timeout
    assert ds.eni_of(X) is None and ds.quarantined() == {}
    assert ctl.stats.released_without_result == 1
    ds.assign("p1", "eth0", "ns", 201.0)
    assert ds.assign("p2", "eth0", "ns", 201.0) is None
    # Still listed: never taken back on IMDS's word (it may answer from before the unassign,
    # docs/safety.md step 6): offered again, dated now, until the allocator's answer decides.
    imds2 = FakeImds()
    listed(imds2, "10.0.0.11", X)
    ds2, ctl2 = make(PoolConfig(warm_ip=1), imds=imds2)
    ctl2.start(0.0)
    ctl2.tick(0.0)
    ctl2.tick(1.0)
    assert one(ctl2.tick(61.0)).release[0].ips == [X]
    renewed = one(ctl2.tick(200.0))
    assert ds2.quarantined() == {PRIMARY.eni_id: ([X], [])} and ctl2.stats.offers_renewed == 1
    assert renewed.release[0].ips == [X] and renewed.release[0].quarantined_at == pytest.approx(200.0)
    ds2.assign("p1", "eth0", "ns", 201.0)
    assert ds2.assign("p2", "eth0", "ns", 201.0) is None
    # the allocator declines (pods need it): its hand-back to the renewed offer returns it
    ctl2.apply_result(result(renewed.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 202.0)
    assert ds2.quarantined() == {} and ds2.assign("p2", "eth0", "ns", 203.0) == (X, PRIMARY.eni_id)


def two_in_slot_one(imds: FakeImds | None) -> tuple[Datastore, PoolController]:
    """The datastore holds SECOND and THIRD at device index 1 (how finding C's datastore ended up)."""
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11"], imds=imds)
    ds.add_eni(SECOND, 0.0)
    ds.add_addresses(SECOND.eni_id, ["10.0.0.21"])
    ds.add_eni(THIRD, 5.0)
    ds.add_addresses(THIRD.eni_id, ["10.0.0.31"])
    assert [e.info.device_index for e in ds.enis()] == [0, 1, 1]
    return ds, ctl


def test_two_enis_in_one_slot_are_repaired_from_imds_and_reports_go_on() -> None:
    imds = FakeImds()
    listed(imds, "10.0.0.11")
    imds.add(THIRD, ["10.0.0.31"])
    ds, ctl = two_in_slot_one(imds)
    r = one(ctl.tick(10.0))
    assert [e.eni_id for e in r.enis] == [PRIMARY.eni_id, THIRD.eni_id]
    assert ds.slot_conflicts() == [] and ds.eni(SECOND.eni_id) is None
    assert ctl.stats.datastore_repairs == 1
    assert ctl.tick(100.0)  # still reporting


def test_two_enis_in_one_slot_without_imds_still_report_leaving_the_older_out() -> None:
    ds, ctl = two_in_slot_one(None)
    for t in (10.0, 100.0, 200.0):
        r = one(ctl.tick(t))
        assert [e.eni_id for e in r.enis] == [PRIMARY.eni_id, THIRD.eni_id]
    assert ctl.stats.report_enis_skipped == 3 and ctl.stats.datastore_repairs == 3
    assert ds.eni(SECOND.eni_id) is not None  # without IMDS truth nothing is dropped, only left out


def test_take_back_waits_while_imds_shows_it_lags_behind_ec2() -> None:
    # IMDS still lists .13, which a ``released`` result took: it is behind EC2, so its
    # listing the timed-out .12 proves nothing (the unassign may not show yet). Since step 6
    # no longer takes anything back on IMDS's word, nor does it once IMDS caught up: the
    # offer is renewed and the allocator's answer decides.
    imds = FakeImds()
    listed(imds, "10.0.0.11", X, "10.0.0.13")
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    ds.assign("p1", "eth0", "ns", 0.0)  # .11
    ds.quarantine(PRIMARY.eni_id, [X], [], 100.0)
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.13"], [], 150.0)
    ctl.retry_soon()
    r = one(ctl.tick(151.0))
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.13"]}), 152.0)
    renewed = one(ctl.tick(230.0))  # .12 past the release timeout, IMDS still lists .13
    assert ds.quarantined() == {PRIMARY.eni_id: ([X], [])}
    assert ctl.stats.offers_renewed == 1 and renewed.release[0].ips == [X]
    listed(imds, "10.0.0.11", X)  # IMDS caught up: .12 still there
    ctl.tick(231.0)
    assert ds.quarantined() == {PRIMARY.eni_id: ([X], [])} and ds.assign("p2", "eth0", "ns", 232.0) is None
    ctl.apply_result(result(renewed.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 233.0)
    assert ds.quarantined() == {} and ds.assign("p2", "eth0", "ns", 234.0) == (X, PRIMARY.eni_id)


def test_take_back_waits_out_an_imds_lag_up_to_the_bound_with_the_default_timeout() -> None:
    """Hostile review, finding 3: EC2 unassigns an offered address 57 s after its
    quarantine (the allocator's age checks pass), the ``released`` result is lost,
    and IMDS lags 64 s. With the old 120 s default the agent took the address back
    at quarantine + 120 s because the lagging IMDS still listed it, and a pod got an
    address EC2 had freed. The release timeout now also covers the IMDS lag bound
    (``IMDS_LAG_BOUND_S``): once it is due, an IMDS within the bound no longer lists it."""
    import dataclasses

    from node_agent.config import load

    timeout = load({"CLUSTER_NAME": "demo", "WARMPOOL_REPORTS_QUEUE_URL": "http://q/r"}).timing.release_timeout_s
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ctl = PoolController(
        ID,
        known("m5.large"),
        PoolConfig(warm_ip=1),
        ds,
        dataclasses.replace(TIMING, release_timeout_s=timeout),
        metadata=imds,
    )
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r1 = one(ctl.tick(61.0))
    assert r1.release[0].ips == [X] and r1.release[0].quarantined_at == 61.0
    # EC2 unassigns X at 118 s; the result never comes; IMDS, 64 s behind, still lists X at 182 s.
    ctl.tick(182.0)
    assert ds.assign("p1", "eth0", "ns", 183.0) is not None  # .11
    assert ds.assign("p2", "eth0", "ns", 183.0) is None, "taken back while a lagging IMDS still listed it"
    # Due now; an IMDS lagging at most the bound reflects EC2 after 118 s: X is gone, never handed out.
    listed(imds, "10.0.0.11")
    ctl.tick(61.0 + timeout + 1)
    assert X not in holders(ds) and ds.eni_of(X) is None
    assert ds.assign("p3", "eth0", "ns", 61.0 + timeout + 2) is None


def test_a_hand_back_older_than_a_later_offer_keeps_the_address_quarantined() -> None:
    """Hostile review, finding 1: report R1 offers X; R1.5 (a retry) offers it again.
    The allocator hands X back in reply to R1 (pods waited then) and unassigns it in
    reply to R1.5 (they no longer did). Taking X back on R1's answer gave it to a pod
    while EC2 freed it. A hand-back older than the newest offer of X is not taken: X
    stays quarantined until R1.5's answer (here: released) or the take-back."""
    from tests.helpers.controller import make

    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r1 = one(ctl.tick(61.0))
    ctl.retry_soon()
    r15 = one(ctl.tick(66.0))
    assert r15.seq > r1.seq and r15.release[0].ips == [X]
    ctl.apply_result(result(r1.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 70.0)
    assert ctl.stats.handbacks_superseded == 1
    assert ds.assign("p1", "eth0", "ns", 70.5) is not None  # .11
    assert ds.assign("p2", "eth0", "ns", 70.5) is None, "an outdated hand-back put X back in the pool"
    ctl.apply_result(result(r15.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), 72.0)
    assert X not in holders(ds) and ds.eni_of(X) is None


def test_a_hand_back_replying_to_the_newest_offer_is_taken_at_once() -> None:
    from tests.helpers.controller import make

    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r1 = one(ctl.tick(61.0))
    ctl.apply_result(result(r1.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 62.0)
    assert ctl.stats.handbacks_superseded == 0 and ctl.stats.addresses_reclaimed == 1
    assert ds.assign("p1", "eth0", "ns", 63.0) is not None
    assert ds.assign("p2", "eth0", "ns", 63.0) is not None  # X, handed back
