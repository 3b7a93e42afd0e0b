"""What the agent does with an unanswered offer at the release timeout (docs/safety.md, step 6;
docs/agent.md, "Taking quarantined addresses back"), as short sequences in virtual time:
renewed when IMDS lists it, dropped as released when a read that is evidence lacks it, kept
when the read is no evidence, and the members of a prefix in no offer."""

from __future__ import annotations

import pytest

from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds, make, one, result
from warmpool.limits import known
from warmpool.messages import Assigned
from warmpool.pool import PoolConfig

X = "10.0.0.12"
PFX = "10.0.0.32/28"


def _offered(imds: FakeImds) -> tuple[Datastore, PoolController, float]:
    """.11 held by a pod, .12 quarantined and offered at 61 s (its timeout: 181 s)."""
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11", X], [])
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    assert ds.assign("p1", "eth0", "ns", 0.5) == ("10.0.0.11", PRIMARY.eni_id)
    ds.quarantine(PRIMARY.eni_id, [X], [], 61.0)
    ctl.retry_soon()
    r = one(ctl.tick(61.0))
    assert r.release[0].ips == [X]
    return ds, ctl, 61.0 + TIMING.release_timeout_s


def test_an_offer_a_read_from_before_the_pods_lacks_is_kept_until_a_read_that_is_evidence() -> None:
    # Seed 905 of ``warmpool sim`` on the first cut of step 6: IMDS answered from before the
    # node's pods had their addresses, so it lacked the offered ones too; dropped as released
    # at the timeout, they were never used again while EC2 kept them on the node.
    imds = FakeImds()
    ds, ctl, due = _offered(imds)
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [], [])  # lacks .11, which a pod holds
    ctl.tick(due + 1)
    assert ds.quarantined() == {PRIMARY.eni_id: ([X], [])}
    assert ctl.stats.released_without_result == 0 and ctl.stats.take_back_postponed >= 1
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11"], [])  # lists the pod's, not .12
    ctl.tick(due + 2)
    assert ds.quarantined() == {} and ctl.stats.released_without_result == 1
    assert X in ds.recently_gone(due + 2)[0]


def test_an_offer_a_read_without_the_primary_eni_lacks_is_kept() -> None:
    # A read without the primary ENI (never detached) is torn or older than the boot.
    imds = FakeImds()
    ds, ctl, due = _offered(imds)
    ds.release("p1", "eth0", 100.0)
    del imds.enis[PRIMARY.eni_id]
    ctl.tick(due + 1)
    assert ds.quarantined() == {PRIMARY.eni_id: ([X], [])} and ctl.stats.released_without_result == 0


def test_an_offer_imds_still_lists_is_renewed_every_timeout_until_the_allocator_answers() -> None:
    imds = FakeImds()
    ds, ctl, due = _offered(imds)
    first = one(ctl.tick(due + 1))
    assert ctl.stats.offers_renewed == 1 and first.release[0].quarantined_at == pytest.approx(due + 1)
    ctl.tick(due + 1 + TIMING.release_timeout_s - 1)
    assert ctl.stats.offers_renewed == 1  # the timeout runs again in full from the renewal
    ctl.retry_soon()
    second = one(ctl.tick(due + 1 + TIMING.release_timeout_s + 1))
    assert ctl.stats.offers_renewed == 2 and second.release[0].ips == [X]
    # a hand-back replying to the first renewal is older than the newest offer: not taken
    ctl.apply_result(result(first.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), due + 400)
    assert ds.quarantined() == {PRIMARY.eni_id: ([X], [])}
    # the allocator's answer to the newest one decides: here, it unassigned it
    ctl.apply_result(result(second.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), due + 401)
    assert ds.quarantined() == {} and ds.eni_of(X) is None


def _prefix_node(imds: FakeImds) -> tuple[Datastore, PoolController]:
    """Prefix mode after a checkpoint loss: a pod holds one address of the node's /28, the
    rebuild holds its 15 other members as offered (``_hold_unknown``)."""
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [], [PFX])
    ds = Datastore(cooldown_s=0.0)
    # what the rebuild found on the host: a pod's /32 route to 10.0.0.33 (node_agent/recovery.py)
    ds._recovered["10.0.0.33"] = ("recovered-pod", 0.0)
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_prefix=1, prefix_mode=True), ds, TIMING, metadata=imds)
    ctl.start(10.0, checkpoint_lost=True)
    return ds, ctl


def test_members_of_a_prefix_in_no_offer_go_back_on_imds_listing_at_the_timeout() -> None:
    # Seeds 117, 164, 218, 701 on the first cut of step 6: the members were renewed for ever,
    # in no report's offer (a report offers whole prefixes only), and pods waited to the end.
    imds = FakeImds()
    ds, ctl = _prefix_node(imds)
    r = one(ctl.tick(10.0))
    assert ds.counts(10.0).quarantined == 15 and r.release == []  # in no offer
    ctl.tick(10.0 + TIMING.release_timeout_s - 1)
    assert ds.counts(20.0).quarantined == 15
    ctl.tick(10.0 + TIMING.release_timeout_s + 1)
    assert ds.counts(200.0).quarantined == 0 and ctl.stats.offers_renewed == 0
    assert ds.assign("p2", "eth0", "ns", 200.0) is not None


def test_members_of_a_prefix_in_no_offer_wait_while_imds_shows_it_lags() -> None:
    imds = FakeImds()
    ds, ctl = _prefix_node(imds)
    ctl.tick(10.0)
    # a result's claim still waits for IMDS: the read is behind EC2
    ctl._unverified.park(Assigned(kind="assigned", eni_id=PRIMARY.eni_id, ips=["10.0.0.99"]), 10.0, 0)
    ctl.tick(10.0 + TIMING.release_timeout_s + 1)
    assert ds.counts(200.0).quarantined == 15 and ctl.stats.take_back_postponed >= 1
