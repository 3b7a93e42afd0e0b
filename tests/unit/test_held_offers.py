"""Seed 1509's class (``warmpool sim --seed 1509 --keep 0,3,23,25``; also 9608, 9892): an
address on offer when a start holds every address (a restored copy's quarantined one, review 15,
Q1; or, after a rebuild, one offered as of unknown origin a moment before) is held by ``?``, and
the offer the process before made stands: the allocator may still answer it by unassigning the
address, and the simulation's check called that ``released-not-offered``. Now the hold notes which
addresses it took from the offers (``node_agent.recovery.HELD_OFFERS``), and the check counts their
Unassign ``released-held-offer`` (its ground truth, ``released-in-use``, still comes first). The
agent cannot tell the offer answered from a pod the hold stands for carrying the address (an older
copy: review 24, H1), so it keeps the alarm, saying which, and counts the held offers apart.
An Unassign of any other ``?``-held address is still the check's finding
(``tests/unit/test_released_while_withheld.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from node_agent.agent import HOLD_REASON_META, lift_unfounded_holds
from node_agent.controller import AttachedEni
from node_agent.datastore import HELD_OFFERS, Datastore
from node_agent.records import UNKNOWN_HOLDER, EniInfo
from tests.helpers.controller import PRIMARY, FakeImds, make, one, result
from tests.helpers.release_check import Violation, check_world, unassign
from warmpool.pool import PoolConfig

E = PRIMARY.eni_id
FREE, OFFERED, POD = "10.0.0.11", "10.0.0.12", "10.0.0.13"


def test_a_hold_of_every_address_notes_the_offered_ones_only() -> None:
    ds = Datastore()
    ds.add_eni(EniInfo("eni-1", 1, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_addresses("eni-1", [FREE, OFFERED])
    ds.quarantine("eni-1", [OFFERED], [], 2.0)
    pod = ds.assign("pod", "eth0", "ns", 1.0)
    assert pod is not None and pod.ip == FREE
    ds.add_addresses("eni-1", [POD])  # free
    assert ds.hold_all(3.0) == 2  # OFFERED and POD, not the pod's
    assert ds.meta.get(HELD_OFFERS) == [OFFERED]
    assert ds.recovered_holder(POD) == UNKNOWN_HOLDER and ds.recovered_holder(OFFERED) == UNKNOWN_HOLDER
    # a second start's hold keeps what the first noted (its copy no longer shows it on offer)
    ds.add_addresses("eni-1", ["10.0.0.14"])
    ds.quarantine("eni-1", ["10.0.0.14"], [], 4.0)
    ds.hold_all(5.0)
    assert ds.meta.get(HELD_OFFERS) == [OFFERED, "10.0.0.14"]


def test_a_hold_with_nothing_on_offer_notes_nothing() -> None:
    ds = Datastore()
    ds.add_eni(EniInfo("eni-1", 1, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_addresses("eni-1", [FREE, OFFERED])
    assert ds.hold_all(3.0) == 2
    assert ds.meta.get(HELD_OFFERS) is None


def _held() -> tuple[Datastore, Any, int]:
    """.11 and .12 on the primary ENI, WARM_IP_TARGET=1: .12 offered in a report, then a start's
    hold of every address (as ``hold_doubtful`` makes it) takes both. Returns the report's seq."""
    imds = FakeImds()
    imds.enis[E] = AttachedEni(PRIMARY, ["10.0.0.11", "10.0.0.12"], [])
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11", "10.0.0.12"], imds=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r1 = one(ctl.tick(61.0))
    assert r1.release[0].ips == ["10.0.0.12"]
    ds.hold_all(62.0)
    return ds, ctl, r1.seq


def test_ec2_taking_a_held_offer_is_still_the_alarm_saying_why(caplog: pytest.LogCaptureFixture) -> None:
    """Review 24, H1: nothing on the node tells the earlier offer answered from an older copy's
    address handed back since and carried by a pod the hold stands for; so the alarm stays
    (``released_in_use``), says which, and the held offers are counted apart."""
    _, ctl, seq = _held()
    notes = ctl.apply_result(result(seq, {"kind": "released", "eni_id": E, "ips": ["10.0.0.12"]}), 63.0)
    assert ctl.stats.released_in_use == 1 and ctl.stats.held_offers_taken == 1
    (msg,) = [r.getMessage() for r in caplog.records if "two holders possible" in r.getMessage()]
    assert "taken while they were on offer" in msg, msg
    assert any("released by EC2 while pods hold" in n for n in notes), notes


def test_ec2_taking_a_held_address_never_on_offer_is_the_plain_alarm(caplog: pytest.LogCaptureFixture) -> None:
    _, ctl, seq = _held()
    ctl.apply_result(result(seq, {"kind": "released", "eni_id": E, "ips": ["10.0.0.11"]}), 63.0)
    assert ctl.stats.released_in_use == 1 and ctl.stats.held_offers_taken == 0
    (msg,) = [r.getMessage() for r in caplog.records if "two holders possible" in r.getMessage()]
    assert "on offer" not in msg, msg


def test_a_pod_on_a_held_offer_is_no_held_offer() -> None:
    """A holder named after a pod's veth (a retried ADD found its pod carrying it) is no held offer."""
    ds, ctl, seq = _held()
    ds.recover({"10.0.0.12": "eniabc"}, 62.5)
    ctl.apply_result(result(seq, {"kind": "released", "eni_id": E, "ips": ["10.0.0.12"]}), 63.0)
    assert ctl.stats.released_in_use == 1 and ctl.stats.held_offers_taken == 0


def test_the_hold_s_end_forgets_the_held_offers() -> None:
    ds, ctl, _seq = _held()
    ds.set_meta(HOLD_REASON_META, [])  # every pod the hold stood for DELeted
    assert sorted(lift_unfounded_holds(ds, ctl, 4.0)) == ["10.0.0.11", "10.0.0.12"]
    assert ds.meta.get(HELD_OFFERS) is None


def test_the_check_takes_an_unassign_of_a_held_offer_and_calls_any_other_held_one() -> None:
    ds = Datastore()
    ds.add_eni(EniInfo("eni-1", 1, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_addresses("eni-1", ["10.0.0.18"])
    ds.quarantine("eni-1", ["10.0.0.18"], [], 1.0)
    ds.hold_all(2.0)
    w = check_world(ds)
    unassign(w, "10.0.0.18")  # a held offer
    assert w.faults == ["released-held-offer"]
    ds.set_meta(HELD_OFFERS, None)  # the same hold, had it not noted the offer
    with pytest.raises(Violation, match="released-not-offered"):
        unassign(w, "10.0.0.18")


def test_an_address_leaving_the_hold_is_no_longer_a_held_offer() -> None:
    """The note names only addresses held by ``?`` since the hold took them from the offers: one a
    retried ADD finds its pod carrying (``recover``), one that leaves the node, one whose holder
    lets it go, or one on an ENI EC2 deleted, never excuses a later Unassign."""
    ds = Datastore()
    ds.add_eni(EniInfo("eni-1", 1, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_eni(EniInfo("eni-2", 2, "0e:00:00:00:00:02", "10.0.0.40", "subnet-1", "10.0.0.0/24"), 0.0)
    ips = ["10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"]
    ds.add_addresses("eni-1", ips)
    ds.add_addresses("eni-2", ["10.0.0.41"])
    ds.quarantine("eni-1", ips, [], 1.0)
    ds.quarantine("eni-2", ["10.0.0.41"], [], 1.0)
    ds.hold_all(2.0)
    assert ds.meta.get(HELD_OFFERS) == [*ips, "10.0.0.41"]
    ds.recover({"10.0.0.11": "eniabc"}, 3.0)
    assert "10.0.0.11" not in ds.meta[HELD_OFFERS]
    ds.release_recovered("eniabc", 4.0)
    ds.set_meta(HOLD_REASON_META, [])
    assert ds.remove_addresses("eni-1", ["10.0.0.11"])  # free again, then gone from the node
    ds.remove_eni("eni-2", unknown_holds=True)
    assert ds.meta.get(HELD_OFFERS) == ["10.0.0.12", "10.0.0.13", "10.0.0.14"]
    ds.recover({"10.0.0.12": UNKNOWN_HOLDER}, 5.0)  # an unknown holder names no pod: unchanged
    assert ds.meta.get(HELD_OFFERS) == ["10.0.0.12", "10.0.0.13", "10.0.0.14"]
    ds.release_recovered(UNKNOWN_HOLDER, 6.0)
    assert ds.meta.get(HELD_OFFERS) is None
