"""Review 24, H2 and H3: what ``hold_all`` notes of a ``/28``, and what ``_held_on(offers=True)``
says of it.

H2: ``hold_all`` notes every quarantined address (``quarantined_at`` set), not what is on offer.
A member of a ``/28`` that is not wholly quarantined is in no offer (``offers.quarantined``; the
controller's ``_take_back``: "no allocator can answer them, nor can it have unassigned the prefix
since a pod took that member"): after a checkpoint loss, the free members of a ``/28`` whose other
member a pod holds are quarantined that way. The hold notes them as held offers anyway; once the
pod's member is quarantined too (its release under ``UNKNOWN_ON_RELEASE``, after a restore found
not current) a later start's hold notes it, and the whole ``/28``, never offered whole since the
pod took its member, is an "answered offer" when EC2 takes it: no alarm.

H3: a ``/28`` whose members are partly held offers and partly free (a member a retried ADD
recovered for its pod, ``CniService._known_again``, then let go by the pod's DEL) is neither:
``pods_hold`` skips the held offers, the free member is in no one's use, and ``all(...)`` fails
for ``offers=True``. Before the change, the ``?``-held members were the alarm. (A member held by
a named holder, or by ``?`` unnoted, is still the alarm; every member noted is an answered offer.)
The free member stays in the datastore (``remove_addresses`` keeps a ``/28`` any member of which
is in use), so it may go to a pod while EC2 has taken the ``/28``, until a read drops the ``/28``:
so before the change too (the last test), but then the alarm said so."""

from __future__ import annotations

import ipaddress

import pytest

from node_agent.controller import PoolController
from node_agent.datastore import HELD_OFFERS, UNKNOWN_ON_RELEASE, Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, result
from warmpool.limits import known
from warmpool.pool import PoolConfig

E = PRIMARY.eni_id
P = "10.0.0.32/28"
MEMBERS = [str(h) for h in ipaddress.IPv4Network(P)]
M1 = MEMBERS[0]


def _controller() -> tuple[Datastore, PoolController]:
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(E, (), [P])
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_prefix=1), ds, TIMING)
    ctl.start(0.0)
    assert ctl.tick(0.0), "setup: a first report (the results below reply to it)"
    return ds, ctl


def _released(ctl: PoolController, now: float) -> list[str]:
    return ctl.apply_result(result(ctl.last_seq, {"kind": "released", "eni_id": E, "prefixes": [P]}), now)


def _loose_then_whole(ds: Datastore) -> None:
    """A pod on M1; the /28's other members quarantined (as a rebuild's ``_hold_unknown`` leaves
    them: in no offer); a start's hold; the pod's release quarantines M1 as of unknown origin
    (``UNKNOWN_ON_RELEASE``, ``PoolController._restore_stale``); a later start's hold."""
    assert ds.assign("pod", "eth0", "ns", 1.0) is not None
    assert ds.lookup("pod", "eth0").ip == M1  # type: ignore[union-attr]
    ds.quarantine(E, MEMBERS[1:], [], 2.0)
    assert P not in ds.quarantined().get(E, ([], []))[1], "setup: the /28 is in no offer"
    ds.hold_all(3.0)
    ds.set_meta(UNKNOWN_ON_RELEASE, [P])
    ds.release("pod", "eth0", 4.0)
    ds.hold_all(5.0)


def test_a_hold_notes_only_what_is_on_offer() -> None:
    ds, _ctl = _controller()
    assert ds.assign("pod", "eth0", "ns", 1.0) is not None
    ds.quarantine(E, MEMBERS[1:], [], 2.0)
    offered = {k for ips, pfx in ds.quarantined().values() for k in (*ips, *pfx)}
    assert P not in offered, "setup: a /28 a pod holds a member of is in no offer"
    ds.hold_all(3.0)
    noted = set(ds.meta.get(HELD_OFFERS) or ())
    assert not noted - offered, f"noted as held offers, in no offer: {sorted(noted - offered)}"


def test_ec2_taking_a_prefix_never_offered_whole_is_the_alarm(caplog: pytest.LogCaptureFixture) -> None:
    """Before H2's fix every member was noted here (the first hold noted the members in no offer);
    now none is, and EC2 taking the /28 is the alarm and no answered offer."""
    ds, ctl = _controller()
    _loose_then_whole(ds)
    assert not ds.meta.get(HELD_OFFERS), ds.meta.get(HELD_OFFERS)
    _released(ctl, 6.0)
    assert ctl.stats.held_offers_taken == 0
    assert ctl.stats.released_in_use == 1, f"answered instead: held_offers_taken={ctl.stats.held_offers_taken}"
    assert any("two holders possible" in r.message for r in caplog.records)


def test_a_prefix_partly_held_offers_partly_free_is_not_silent(caplog: pytest.LogCaptureFixture) -> None:
    ds, ctl = _controller()
    ds.quarantine(E, [], [P], 1.0)
    ds.hold_all(2.0)
    assert sorted(ds.meta.get(HELD_OFFERS) or ()) == sorted(MEMBERS)
    ds.recover({M1: "enia1b2c3d4e5f6"}, 3.0)  # a retried ADD's pod carries M1 (``_known_again``)
    ds.release_recovered("enia1b2c3d4e5f6", 4.0)  # its DEL: M1 free (cooldown)
    notes = _released(ctl, 5.0)
    st = ctl.stats
    assert (st.released_in_use, st.held_offers_taken) != (0, 0), f"neither the alarm nor an answered offer: {notes}"
    assert st.released_in_use == 1 and any("two holders possible" in r.message for r in caplog.records)


def test_the_free_member_of_a_prefix_ec2_took_goes_to_a_pod() -> None:
    """Evidence for H3's cost (passes; the same before the change): after EC2's ``released`` of
    the /28, its free member is handed to the next pod, while another node may get it."""
    ds, ctl = _controller()
    ds.quarantine(E, [], [P], 1.0)
    ds.hold_all(2.0)
    ds.recover({M1: "enia1b2c3d4e5f6"}, 3.0)
    ds.release_recovered("enia1b2c3d4e5f6", 4.0)
    _released(ctl, 5.0)
    got = ds.assign("next", "eth0", "ns", 5.0 + TIMING.cooldown_s + 1)
    assert got is not None and got.ip == M1
