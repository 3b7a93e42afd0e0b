"""Hostile review 38 of ``PoolController._unlisted_since`` (109dc98): an offered single address IMDS
has not listed on its ENI, resync after resync, is dropped as released a release timeout after the
first such read, whatever its offer's date.

Findings (strict xfails until fixed after the review, passing since): the rule left out every
address a /28 stands for, so the seed's leak class (an offer dated anew at every join, its release
timeout never reached) stayed open where EC2 had given the address back inside a /28 (F1), or moved
an offered /28 (F2); and any read listing the address on its ENI again, or lacking that ENI,
restarted the clock (F3). Fixed: a single address is dropped when the take-back's read does not list
it as such (as the stamp's timeout reads it), a wholly offered /28 when that read does not list it,
and only the take-back's read decides (the review's pin of the first reading, a single address
listed inside a /28 never dropped by the clock, went with F1's fix). Pinned as sound: the drop's seq
keeps a late hand-back or a re-said claim of the dropped address from freeing it, a read listing it
again holds it as offered of unknown origin, and ``next_due`` is never later than the drop."""

from __future__ import annotations

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, never_free, result
from warmpool.limits import known

X, Y = "10.0.0.40", "10.0.0.60"
P = "10.0.0.32/28"  # holds X, not Y
T0 = 1000.0
TEN_MINUTES = 20  # resyncs 30 s apart


def _node(ips: list[str], prefixes: list[str] = ()) -> tuple[FakeImds, Datastore, PoolController]:  # type: ignore[assignment]
    imds = FakeImds()
    imds.add(SECOND, ips, list(prefixes))
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    return imds, ds, ctl


def _where(ds: Datastore, ip: str) -> list[str]:
    return [e.info.eni_id for e in ds.enis() if ip in e.addrs]


def _prefixes(ds: Datastore, eni_id: str) -> list[str]:
    return next(list(e.prefixes) for e in ds.enis() if e.info.eni_id == eni_id)


def _no_pod_gets(ds: Datastore, ip: str, now: float) -> None:
    got = [ds.assign(f"pod{i}", "eth0", f"/var/run/netns/pod{i}", now) for i in range(20)]
    assert all(a is None or a.ip != ip for a in got), f"{ip} went to a pod"
    for i in range(20):
        ds.release(f"pod{i}", "eth0", now)


def _ten_minutes(ctl: PoolController, joins: bool) -> None:
    """Resyncs and ticks every 30 s; with ``joins``, every 30 s an address joins the second
    ENI's offer and dates it anew (review 32, D1: what a node giving back surplus does)."""
    for i in range(1, TEN_MINUTES + 1):
        t = T0 + 30 * i
        if joins:
            ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")
        ctl.resync(t)
        ctl.tick(t + 1)


# --- findings ------------------------------------------------------------------------------------


def _x_given_back_inside_a_28(joins: bool) -> Datastore:
    """X offered on the second ENI; EC2 unassigned it (the ``released`` lost) and gave the node a
    /28 holding X on the same ENI (prefix mode's grants; a subnet with few free blocks): IMDS lists
    the /28 there, not X alone."""
    imds, ds, ctl = _node([X, Y])
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [P])
    _ten_minutes(ctl, joins)
    return ds


def test_an_offered_address_ec2_gave_back_inside_a_28_never_keeps_the_28_unknown() -> None:
    quiet = _x_given_back_inside_a_28(joins=False)
    assert _prefixes(quiet, SECOND.eni_id) == [P], "setup: without joins the stamp's timeout frees the /28's way"
    ds = _x_given_back_inside_a_28(joins=True)
    assert _prefixes(ds, SECOND.eni_id) == [P], "the /28 EC2 gave is still unknown after ten minutes"


def _offered_28_moved(joins: bool) -> tuple[Datastore, PoolController]:
    """A /28 offered on the second ENI (prefix mode's surplus), Y offered there too; EC2 moved the
    /28 to the primary (an answer the agent never got, as in seed 1060384)."""
    imds, ds, ctl = _node([Y], [P])
    assert ds.quarantine(SECOND.eni_id, [Y], [P], T0 + 1) == 17
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [])
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [], [P])
    _ten_minutes(ctl, joins)
    return ds, ctl


def test_an_offered_28_ec2_moved_to_the_other_eni_is_known_there_within_ten_minutes() -> None:
    quiet, _ = _offered_28_moved(joins=False)
    assert _where(quiet, X) == [PRIMARY.eni_id], "setup: without joins the stamp's timeout lets it go"
    ds, _ = _offered_28_moved(joins=True)
    assert _where(ds, X) == [PRIMARY.eni_id], f"the /28 still held on {_where(ds, X)} after ten minutes"


# --- attacks that failed (sound cases) -----------------------------------------------------------


def _dropped_after_a_move() -> tuple[FakeImds, Datastore, PoolController, int]:
    """X offered on the second ENI, moved by EC2 to the primary, the offer dated anew at every
    join; dropped by the new rule. Returns the newest report's seq before the drop."""
    imds, ds, ctl = _node([X, Y])
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [])
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [X], [])
    ctl.resync(T0 + 10)
    newest = -1
    for t in (T0 + 40, T0 + 70, T0 + 100, T0 + 125):
        ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")
        ctl.resync(t)
        reports = ctl.tick(t + 1)
        if reports:
            newest = reports[-1].seq
        assert _where(ds, X) == [SECOND.eni_id], "setup: held until the unlisted clock ends"
    reports = ctl.tick(T0 + 10 + TIMING.release_timeout_s + 1)
    assert _where(ds, X) == [], "setup: dropped"
    assert ctl.last_seq >= newest
    return imds, ds, ctl, ctl.last_seq


def test_a_hand_back_of_the_young_offer_replying_to_the_newest_report_never_frees_the_dropped_address() -> None:
    """The offer was dated 25 s before the drop, so the allocator may still answer it. Its
    hand-back replying to the newest report (not stale for the drop's seq), with a regressed read
    showing X on the second ENI again: X was never seen absent (the primary lists it), and the
    claim is no grant of EC2's, so it waits and is dropped; X ends held as offered, never free."""
    imds, ds, ctl, newest = _dropped_after_a_move()
    t = T0 + 140
    moved = dict(imds.enis)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [X, Y], [])  # a read from before the move
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [], [])
    ctl.apply_result(result(newest, {"kind": "assigned", "eni_id": SECOND.eni_id, "ips": [X]}), t)
    _no_pod_gets(ds, X, t + 1)
    imds.enis = moved
    for dt in (30, 60, 90):
        ctl.resync(t + dt)
        ctl.tick(t + dt + 1)
        _no_pod_gets(ds, X, t + dt + 2)
    assert _where(ds, X) == [PRIMARY.eni_id] and X in ds.quarantined()[PRIMARY.eni_id][0]


def test_a_late_released_or_regrant_replying_to_an_older_report_changes_nothing_after_the_drop() -> None:
    for kind in ("released", "assigned"):
        _imds, ds, ctl, newest = _dropped_after_a_move()
        ctl.resync(T0 + 140)
        assert X in ds.quarantined()[PRIMARY.eni_id][0], "setup: held as offered, of unknown origin"
        ctl.apply_result(result(newest - 1, {"kind": kind, "eni_id": SECOND.eni_id, "ips": [X]}), T0 + 141)
        ctl.resync(T0 + 170)
        ctl.tick(T0 + 171)
        assert _where(ds, X) == [PRIMARY.eni_id], kind
        _no_pod_gets(ds, X, T0 + 172)


def test_an_address_truly_unassigned_and_listed_again_by_a_regressed_read_is_held_never_free() -> None:
    """EC2 unassigned X (the ``released`` lost) and IMDS lists it nowhere; dropped by the new
    rule with the offer young, then a regressed read lists it on its ENI again, and a hand-back
    of that young offer replying to the newest report comes late: X is never free."""
    imds, ds, ctl = _node([X, Y])
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [])
    ctl.resync(T0 + 10)
    for t in (T0 + 40, T0 + 70, T0 + 100):
        ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")
        ctl.resync(t)
        ctl.tick(t + 1)
    ctl.tick(T0 + 131)
    assert _where(ds, X) == [], "setup: dropped"
    newest = ctl.last_seq
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [X, Y], [])  # regressed
    ctl.resync(T0 + 140)
    assert X in ds.quarantined()[SECOND.eni_id][0] and X in ctl._unknown
    (r,) = ctl.tick(T0 + 141)
    ctl.apply_result(result(newest, {"kind": "assigned", "eni_id": SECOND.eni_id, "ips": [X]}), T0 + 142)
    _no_pod_gets(ds, X, T0 + 143)
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": SECOND.eni_id, "ips": [X]}), T0 + 144)
    assert _where(ds, X) == [], "the unknown offer's unassign took it"
    ctl.resync(T0 + 170)  # the regressed read again: held as offered once more, never free
    assert never_free(ds, ctl, X)
    _no_pod_gets(ds, X, T0 + 171)


def test_next_due_is_never_later_than_the_drop_and_a_tick_before_it_drops_nothing() -> None:
    imds, ds, ctl = _node([X, Y])
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [])
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [X], [])
    ctl.resync(T0 + 10)
    t = T0 + 11
    ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")  # the stamp's timeout later
    ctl.tick(t)
    drop_at = T0 + 10 + TIMING.release_timeout_s
    while True:
        due = ctl.next_due(t)
        assert due <= drop_at, f"next_due {due} after the drop's time {drop_at}"
        if due >= drop_at - 1e-3:
            break
        t = max(due, t + 1e-3)
        ctl.tick(t)
        assert _where(ds, X) == [SECOND.eni_id], f"dropped at {t - T0:g}, before its time"
    ctl.tick(drop_at)
    assert _where(ds, X) == []


def _moved_with_odd_reads(odd: str) -> Datastore:
    """X offered on the second ENI and moved by EC2 to the primary, joins dating the offer anew;
    every fourth read is odd for ten minutes: ``listed`` (a regressed read from before the move,
    X on the second ENI), ``eni-missing`` (a torn or lagging read without the second ENI), or
    ``none`` (every read true)."""
    imds, ds, ctl = _node([X, Y])
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    true_state = {
        PRIMARY.eni_id: AttachedEni(PRIMARY, [X], []),
        SECOND.eni_id: AttachedEni(SECOND, [Y], []),
    }
    for i in range(1, TEN_MINUTES + 1):
        t = T0 + 30 * i
        imds.enis = dict(true_state)
        if i % 4 == 0 and odd == "listed":
            imds.enis = {PRIMARY.eni_id: AttachedEni(PRIMARY, [], []), SECOND.eni_id: AttachedEni(SECOND, [X, Y], [])}
        elif i % 4 == 0 and odd == "eni-missing":
            del imds.enis[SECOND.eni_id]
        ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")
        ctl.resync(t)
        imds.enis = dict(true_state)  # the take-back's own read is true
        ctl.tick(t + 1)
        _no_pod_gets(ds, X, t + 2)
    return ds


@pytest.mark.parametrize("odd", ["listed", "eni-missing"])
def test_an_odd_read_now_and_then_never_keeps_a_moved_address_unknown(odd: str) -> None:
    assert _where(_moved_with_odd_reads("none"), X) == [PRIMARY.eni_id], "setup"
    ds = _moved_with_odd_reads(odd)
    assert _where(ds, X) == [PRIMARY.eni_id], f"X still held on {_where(ds, X)} after ten minutes"


def test_a_relisted_address_imds_lists_on_its_eni_is_never_dropped_by_the_unlisted_clock() -> None:
    """A ``released`` came while IMDS still lists X (its lag): held as offered, of unknown origin.
    The resync's filter of released keys leaves it out of the reconcile, so the unlisted clock runs
    for it (a take-back read each release timeout: cost), but the take-back's own read lists it:
    never dropped while listed, never free."""
    _imds, ds, ctl = _node([X, Y])
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    (r,) = ctl.tick(T0 + 2)
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": SECOND.eni_id, "ips": [X]}), T0 + 3)
    ctl.resync(T0 + 10)
    assert X in ds.quarantined()[SECOND.eni_id][0] and X in ctl._unknown, "setup: held as offered"
    for i in range(1, TEN_MINUTES + 1):
        t = T0 + 10 + 30 * i
        ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")
        ctl.resync(t)
        ctl.tick(t + 1)
        assert _where(ds, X) == [SECOND.eni_id], f"dropped at {t - T0:g} while IMDS lists it"
        _no_pod_gets(ds, X, t + 2)
