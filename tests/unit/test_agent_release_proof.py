"""The agent's side of issue 21's defect 3 (docs/allocator.md, "Offers, releases and stale
Describe"): only EC2's own re-assignment, replying to a later report, makes a ``released``
stale; a hand-back of an offered address proves nothing (the allocator may have planned
it from a Describe older than the unassignment); a claim older than the newest offer is
never taken; a release naming what a pod holds is a violation, logged and counted."""

from __future__ import annotations

from typing import Any

from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import PRIMARY, SECOND, FakeImds, make, one, result
from warmpool.messages import PoolReport
from warmpool.pool import PoolConfig

X = "10.0.0.12"
E = PRIMARY.eni_id


def _released(seq: int, *ips: str) -> Any:
    return result(seq, {"kind": "released", "eni_id": E, "ips": list(ips)})


def _assigned(seq: int, *ips: str) -> Any:
    return result(seq, {"kind": "assigned", "eni_id": E, "ips": list(ips)})


def _offered_twice(imds: FakeImds | None) -> tuple[Datastore, PoolController, PoolReport, PoolReport]:
    """.11 and .12 on the primary ENI, WARM_IP_TARGET=1: .12 quarantined, offered in r1 and again in r2."""
    if imds is not None:
        imds.enis[E] = AttachedEni(PRIMARY, ["10.0.0.11", X], [])
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11", X], imds=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r1 = one(ctl.tick(61.0))
    ctl.retry_soon()
    r2 = one(ctl.tick(62.0))
    assert r1.release[0].ips == [X] and r2.release[0].ips == [X] and r2.seq > r1.seq
    return ds, ctl, r1, r2


def test_a_release_older_than_a_hand_back_still_takes_the_free_address() -> None:
    # EC2 unassigned X for r1; r2 was planned from a Describe still showing X and handed it
    # back; r2's answer came first (IMDS lags: it still lists X).
    ds, ctl, r1, r2 = _offered_twice(FakeImds())
    ctl.apply_result(_assigned(r2.seq, X), 63.0)
    assert ctl.stats.addresses_reclaimed == 1  # the newest offer's answer: taken
    ctl.apply_result(_released(r1.seq, X), 64.0)
    assert ds.eni_of(X) is None, "a hand-back made r1's release look stale"
    assert ctl.stats.stale_releases == 0 and ctl.stats.released_in_use == 0


def test_a_release_naming_an_address_a_pod_holds_is_counted_and_the_pod_keeps_it() -> None:
    ds, ctl, r1, r2 = _offered_twice(FakeImds())
    ctl.apply_result(_assigned(r2.seq, X), 63.0)
    assert ds.assign("p1", "eth0", "ns", 63.5) is not None
    assert ds.assign("p2", "eth0", "ns", 63.5) is not None
    notes = ctl.apply_result(_released(r1.seq, X), 64.0)
    assert {p.ip for p in ds.pods()} == {"10.0.0.11", X}  # never yanked from a running pod
    assert ctl.stats.released_in_use == 1
    assert any("while pods hold" in n for n in notes), notes


def test_ec2s_own_reassignment_replying_to_a_later_report_makes_an_older_release_stale() -> None:
    # The allocator's answer to r2 repeats the release from its book, then EC2 assigned X
    # to the node again (Assign's response): r1's release, arriving last, is stale for X.
    ds, ctl, r1, r2 = _offered_twice(None)
    regrant = result(
        r2.seq,
        {"kind": "released", "eni_id": E, "ips": [X]},
        {"kind": "assigned", "eni_id": E, "ips": [X]},
    )
    ctl.apply_result(regrant, 63.0)
    ctl.apply_result(_released(r1.seq, X), 64.0)
    assert ds.eni_of(X) is not None and ctl.stats.stale_releases == 1
    assert ds.assign("p1", "eth0", "ns", 65.0) is not None
    assert ds.assign("p2", "eth0", "ns", 65.0) is not None


def test_a_claim_older_than_the_newest_offer_never_adds_a_released_address_again() -> None:
    # r2's answer released X; r1's hand-back of X arrives long after (SQS), past the
    # "recently released" memory. Without IMDS (results trusted as they come) only the
    # offer's seq tells it is outdated.
    ds, ctl, r1, r2 = _offered_twice(None)
    ctl.apply_result(_released(r2.seq, X), 63.0)
    assert ds.eni_of(X) is None
    ctl.apply_result(_assigned(r1.seq, X), 400.0)
    assert ds.eni_of(X) is None, "an outdated hand-back put a released address back in the pool"
    assert ctl.stats.handbacks_superseded == 1


def test_deleted_while_pods_hold_its_addresses_is_counted_and_the_pods_keep_them() -> None:
    ds, ctl = make(PoolConfig(warm_ip=0))
    ds.add_eni(SECOND, 0.0)
    ds.add_addresses(SECOND.eni_id, ["10.0.0.21"])
    assert ds.assign("p1", "eth0", "ns", 1.0) == ("10.0.0.21", SECOND.eni_id)
    ctl.last_seq = 5
    notes = ctl.apply_result(result(5, {"kind": "deleted", "eni_id": SECOND.eni_id}), 2.0)
    assert ds.lookup("p1", "eth0") == ("10.0.0.21", SECOND.eni_id)
    assert ctl.stats.deleted_in_use == 1 and ctl.stats.enis_deleted == 0
    assert any("while pods hold" in n for n in notes), notes
