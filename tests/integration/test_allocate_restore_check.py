"""The allocator's answer to a report of a restored checkpoint (``restored_from``;
docs/allocator.md, "Restored checkpoints"; docs/safety.md, row 12): under the node's lease
it says whether the checkpoint is the node's newest state, from its ledger and release book,
records the report's seq before saying "current", and does nothing else for a report of a
checkpoint that is not."""

from __future__ import annotations

from typing import Any

import pytest

from functions.allocator import FENCE_MARGIN_S
from tests.helpers.crashing import Crash, CrashingEc2
from tests.helpers.restore import WAIT
from tests.helpers.restore import actions_of as _actions
from tests.helpers.restore import restore_world as _world
from tests.helpers.restore import restored as _restored
from tests.helpers.restore import unassigned as _unassigned
from tests.helpers.restore import verdicts as _verdicts
from warmpool.messages import Assigned, Attached, Fenced, Released, RestoreChecked
from warmpool.ports import LedgerUnread


def test_a_checkpoint_that_knew_the_last_recorded_report_is_current() -> None:
    w, _, _ = _world()
    w.deliver([w.report("n1", warm_ip=1)])  # seq 1, recorded (nothing to do)
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1
    w.deliver([_restored(w, 1, warm_ip=1)])  # seq 2: a quiet report, yet answered
    actions = _actions(w)
    assert _verdicts(actions) == [RestoreChecked(restored_from=1, wait=WAIT, current=True, epoch=1)], actions
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 2
    assert w.tally.get("RestoresChecked", current="true") == 1


def test_a_current_checkpoint_is_served_as_any_report_and_the_answer_comes_first() -> None:
    w, _, _ = _world()
    w.deliver([w.report("n1", warm_ip=1)])
    w.deliver([_restored(w, 1, warm_ip=1, pending=4, assigned=6)])  # pods wait: a grant
    actions = _actions(w)
    assert isinstance(actions[0], RestoreChecked) and actions[0].current, actions
    assert any(isinstance(a, Assigned | Attached) for a in actions[1:]), actions


def test_a_checkpoint_older_than_a_served_offer_is_not_current_and_nothing_else_is_done() -> None:
    """C1: the copy knew seq 1; report 2 (after it) offered x and had it unassigned. The report of
    the copy (seq 3) is answered "not current" alone: its plan is made from a pool the node no
    longer has (x free in it)."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", warm_ip=1)])  # seq 1: the copy's last
    x = ips[-2:]
    w.clock.advance(30)
    w.deliver([w.report("n1", warm_ip=1, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}])])
    assert any(isinstance(a, Released) for a in _actions(w))
    calls = w.mutating_calls()
    w.clock.advance(5)
    w.deliver([_restored(w, 1, warm_ip=1, pending=4, assigned=6)])
    actions = _actions(w)
    assert actions == [RestoreChecked(restored_from=1, wait=WAIT, current=False, epoch=1)], actions
    assert w.mutating_calls() == calls, "a call made for the report of a checkpoint that is not current"
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 3  # older reports are stale from now on
    assert w.tally.get("RestoresChecked", current="false") == 1


def test_a_later_report_seen_only_in_the_release_book_makes_it_not_current() -> None:
    """The invocation serving report 2 booked its Unassign and died before the call, so before
    recording seq 2: the ledger still says 1, the book says 2."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", warm_ip=1)])
    x = ips[-2:]
    w.clock.advance(30)
    n = w.report("n1", warm_ip=1, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}])
    plain = w.ec2_client
    w.ec2_client = CrashingEc2(plain, "unassign_private_ip_addresses", before=True)
    crashing = w.allocator()
    w.ec2_client = plain
    with pytest.raises(Crash):
        crashing.handle_batch(w.records([n]))
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1
    w.clock.advance(w.settings.lease_ttl_s)
    w.deliver([_restored(w, 1, warm_ip=1)])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1, wait=WAIT, current=False, epoch=1)]


def test_an_instance_the_ledger_does_not_know_is_not_current() -> None:
    w, _, _ = _world()
    w.deliver([_restored(w, 0, warm_ip=1)])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=0, wait=WAIT, current=False, epoch=1)]


def test_an_older_report_delivered_after_a_current_answer_is_never_acted_on() -> None:
    """Report 2 (offering x) is still queued when the copy's report 3 is answered current: the
    ledger then says 3, and report 2 is stale, so x is never unassigned under a pod."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", warm_ip=1)])
    x = ips[-2:]
    w.clock.advance(30)
    late = w.report("n1", warm_ip=1, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}])
    w.deliver([_restored(w, 1, warm_ip=1)])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1, wait=WAIT, current=True, epoch=1)]
    w.deliver([late])
    assert not any(isinstance(a, Released) for a in _actions(w))
    assert set(x) <= set(w.enis("n1")[0].secondary)
    assert w.ec2_stats().get("UnassignPrivateIpAddresses", {}).get("calls", 0) == 0


class UnreadLedger:
    """The ledger answers the batch's read, then fails every read after (under the lease)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.reads = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def last_seqs(self, cluster: str, nodes: list[str]) -> dict[str, int]:
        self.reads += 1
        if self.reads > 2:
            raise LedgerUnread(frozenset(nodes), {})
        return dict(self.inner.last_seqs(cluster, nodes))


def test_no_answer_without_reading_the_ledger_under_the_lease() -> None:
    w, _, _ = _world()
    w.deliver([w.report("n1", warm_ip=1)])
    alloc = w.allocator(ledger=UnreadLedger(w.ledger))
    out = w.deliver([_restored(w, 1, warm_ip=1)], alloc=alloc)
    assert _verdicts(_actions(w)) == []
    assert out.deferred == 1
    w.drain()  # re-sent, read this time
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1, wait=WAIT, current=True, epoch=1)]


def test_the_answer_raises_the_fence_and_reports_of_the_process_before_are_dropped() -> None:
    """Each answer raises the instance's epoch; a report that carries a lower one (or none) comes
    from a process before the answer and is dropped as stale, whatever its seq, while one that
    carries the new epoch is served."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1000, wait=WAIT, current=True, epoch=1)]
    iid = w.nodes["n1"]
    assert w.books.load("demo", [iid])[iid].epoch == 1
    x = ips[-2:]
    offer = [{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}]
    # the previous process's report, no epoch, a seq above the restored agent's: dropped
    w.deliver([w.report("n1", seq=9000, warm_ip=1, release=offer)])
    answered = _actions(w)
    assert not [a for a in answered if isinstance(a, Released)]
    assert w.tally.get("ReportsFenced") == 1 and _unassigned(w) == 0
    # answered "fenced" with the epoch: an agent that missed the answer carries it from now on
    assert answered == [Fenced(epoch=1)], answered
    # the restored agent's own report, with the epoch the answer gave: served (x unassigned)
    w.deliver([w.report("n1", seq=9001, warm_ip=1, release=offer, extra={"epoch": 1})])
    assert [a for a in _actions(w) if isinstance(a, Released)]
    # a second restore raises it again, from what the report carries
    w.deliver([_restored(w, 9001, seq=9500, warm_ip=1, extra={"epoch": 1})])
    said = _verdicts(_actions(w))
    assert [v.epoch for v in said] == [2], said


def test_a_copy_from_before_an_answer_is_not_current() -> None:
    """The book's epoch is past the copy's: an answer came after the copy was written."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])  # epoch 1 from here
    _actions(w)
    # the ledger says 2000 and the book epoch 1; another process's copy knowing 2000 but no epoch asks
    w.deliver([_restored(w, 2000, seq=3000, warm_ip=1, extra={"restore_wait": "b" * 32})])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=2000, wait="b" * 32, current=False, epoch=2)]


def test_the_fence_lapses_once_no_offer_of_the_process_before_can_be_acted_on() -> None:
    """An agent rolled back to a version without ``epoch`` is served again once every offer its
    process could have made before the answer is too old to act on."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    _actions(w)
    iid = w.nodes["n1"]
    until = w.books.load("demo", [iid])[iid].fenced_until
    assert until == pytest.approx(w.clock.now() + w.settings.release_offer_max_age_s + FENCE_MARGIN_S)
    w.clock.set(until + 1)
    x = ips[-2:]
    offer = [{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}]
    w.deliver([w.report("n1", seq=9000, warm_ip=1, release=offer)])
    assert [a for a in _actions(w) if isinstance(a, Released)], "a report without epoch after the fence"
    assert w.tally.get("ReportsFenced") == 0


def test_the_wait_s_retry_answered_before_the_first_answer_arrives_is_current_too() -> None:
    """Seed 189 (``warmpool sim --seed 189``, review 4's R5): the agent's first restored report
    (seq 2000) is answered current and recorded; its retry of the same wait (seq 3000), sent on the
    back-off before that answer came, is judged after the ledger holds 2000, a report of this very
    wait. Its answer must be current as well: results are not ordered (an SQS delay brought the
    retry's answer first, and the agent, still waiting, took the lost-checkpoint way on it)."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1, pending=4, assigned=6)])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1000, wait=WAIT, current=True, epoch=1)]
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 2000
    w.clock.advance(6)
    w.deliver([_restored(w, 1000, seq=3000, warm_ip=1, pending=4, assigned=6)])
    said = _verdicts(_actions(w))
    assert said == [RestoreChecked(restored_from=1000, wait=WAIT, current=True, epoch=1)], said


def test_the_wait_s_retry_after_not_current_is_not_current() -> None:
    """The verdict said again is the one given, never a better one: a copy older than a served
    offer stays not current for every ask of its wait."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    offer = [{"eni_id": eni, "ips": ips[-2:], "quarantined_at": w.clock.now() - 20}]
    w.deliver([w.report("n1", seq=1500, warm_ip=1, release=offer)])
    _actions(w)
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    assert [v.current for v in _verdicts(_actions(w))] == [False]
    w.clock.advance(6)
    w.deliver([_restored(w, 1000, seq=3000, warm_ip=1)])
    assert [v.current for v in _verdicts(_actions(w))] == [False]


def test_another_wait_asking_about_the_same_copy_is_judged_afresh() -> None:
    """A restart draws a new wait: the verdict given to the wait before is not its (that process
    may have acted after it), and its ask is judged on the ledger as it is now."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1, pending=4, assigned=6)])
    assert [v.current for v in _verdicts(_actions(w))] == [True]
    w.clock.advance(6)
    other = w.report("n1", seq=3000, warm_ip=1, extra={"restored_from": 1000, "restore_wait": "b" * 32})
    w.deliver([other])
    assert [v.current for v in _verdicts(_actions(w))] == [False]


def test_once_the_fence_lapses_the_wait_s_retry_is_judged_afresh() -> None:
    """The verdict is said again only while the fence holds (while every later seq is this
    wait's own); after it, the ledger as it is now judges."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1, pending=4, assigned=6)])
    assert [v.current for v in _verdicts(_actions(w))] == [True]
    iid = w.nodes["n1"]
    w.clock.set(w.books.load("demo", [iid])[iid].fenced_until + 1)
    w.deliver([_restored(w, 1000, seq=9000, warm_ip=1)])
    assert [v.current for v in _verdicts(_actions(w))] == [False]
