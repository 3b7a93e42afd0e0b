"""The allocator's answer to a first start's ask (``first_start``; docs/allocator.md, "First
starts"; docs/safety.md, row 30): confirmed only for an instance it never recorded a report of,
whose release book was never written, launched within ``FIRST_START_MAX_AGE_S``; the answer is
said alone (nothing of the report's plan is done), raises the instance's fence, and is never
said again to a later start, whatever the reconciler forgot."""

from __future__ import annotations

from typing import Any

from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.first_start import LATER, WAIT
from tests.helpers.first_start import ask as _ask
from tests.helpers.first_start import booted_world as _world
from warmpool.messages import Action, Released, RestoreChecked
from warmpool.scheduling import FIRST_START_MAX_AGE_S


def _actions(w: AllocatorWorld) -> list[Action]:
    return [a for r in w.results("n1") for a in r.actions]


def _verdicts(w: AllocatorWorld) -> list[RestoreChecked]:
    return [a for a in _actions(w) if isinstance(a, RestoreChecked)]


def _book(w: AllocatorWorld) -> Any:
    iid = w.nodes["n1"]
    return w.books.load("demo", [iid])[iid]


def test_a_new_instance_s_first_start_is_confirmed_and_nothing_else_is_done() -> None:
    w, eni, ips = _world()
    w.clock.advance(20)
    calls = w.mutating_calls()  # the launch's own (the Assign standing in for it, the tag)
    w.deliver([_ask(w, eni, ips, pending=4)])
    assert _actions(w) == [RestoreChecked(restored_from=0, wait=WAIT, current=True, epoch=1)], _actions(w)
    assert w.mutating_calls() == calls, "the plan of a first start's ask (its unknown offers) was made"
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1  # older reports are stale from now on
    book = _book(w)
    assert book.version == 1 and book.epoch == 1 and book.raised_current
    assert w.tally.get("RestoresChecked", current="true") == 1


def test_the_same_wait_asking_again_is_said_the_same() -> None:
    w, eni, ips = _world()
    calls = w.mutating_calls()
    w.deliver([_ask(w, eni, ips)])
    w.clock.advance(3)
    w.deliver([_ask(w, eni, ips)])  # its first answer late: asked again on the back-off
    assert [v.current for v in _verdicts(w)] == [True, True]
    assert w.mutating_calls() == calls


def test_an_instance_with_a_recorded_report_is_not_confirmed() -> None:
    w, eni, ips = _world()
    w.deliver([w.report("n1", warm_ip=1)])  # an earlier process's report
    w.clock.advance(10)
    calls = w.mutating_calls()
    w.deliver([_ask(w, eni, ips)])
    assert [v.current for v in _verdicts(w)] == [False]
    assert w.mutating_calls() == calls


def test_a_forgotten_ledger_row_does_not_make_a_later_start_look_first() -> None:
    """Row 8: the reconciler forgot the row (the instance missing from DescribeInstances) after
    an Unassign; the agent's checkpoint is lost since and it asks. The book (written before the
    Unassign, never deleted by the reconciler) says no."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", warm_ip=1)])
    w.clock.advance(30)
    x = ips[-2:]
    w.deliver([w.report("n1", warm_ip=1, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}])])
    assert any(isinstance(a, Released) for a in _actions(w))
    iid = w.nodes["n1"]
    assert w.ledger.forget("demo", iid, instance_id=iid, last_seq=w.ledger.last_seq("demo", iid))
    assert w.ledger.last_seq("demo", iid) < 0
    calls = w.mutating_calls()
    w.clock.advance(5)
    w.deliver([_ask(w, eni, ips[:4])])
    assert [v.current for v in _verdicts(w)] == [False]
    assert w.mutating_calls() == calls


def test_a_lost_checkpoint_after_a_confirmed_first_start_is_not_a_first_start() -> None:
    """The first start was confirmed; its row is forgotten since (row 8) and every entry of the
    book settled; the checkpoint is lost and the next process asks: the book's raise says no."""
    w, eni, ips = _world()
    w.deliver([_ask(w, eni, ips)])
    assert [v.current for v in _verdicts(w)] == [True]
    iid = w.nodes["n1"]
    assert w.ledger.forget("demo", iid, instance_id=iid, last_seq=w.ledger.last_seq("demo", iid))
    w.clock.advance(FIRST_START_MAX_AGE_S / 2)
    w.deliver([_ask(w, eni, ips, wait=LATER)])
    assert [v.current for v in _verdicts(w)] == [False]  # (the results read so far are gone)


def test_an_instance_launched_long_ago_is_not_confirmed() -> None:
    """No row and no book, but launched more than FIRST_START_MAX_AGE_S ago: a book written then
    may have expired (its time to live), so nothing proves warmpool never took from it."""
    w, eni, ips = _world()
    w.clock.advance(FIRST_START_MAX_AGE_S + 1)
    w.deliver([_ask(w, eni, ips)])
    assert [v.current for v in _verdicts(w)] == [False]


def test_a_queued_report_of_an_earlier_process_is_fenced_after_the_confirmation() -> None:
    """A report with no epoch (a process before the answer) offering an address, delivered after
    the first start was confirmed: never acted on (its offer would unassign an address the
    confirmed agent now hands to pods)."""
    w, eni, ips = _world()
    calls = w.mutating_calls()
    w.deliver([_ask(w, eni, ips)])
    assert [v.current for v in _verdicts(w)] == [True]
    w.clock.advance(30)
    old = w.report(
        "n1", seq=2, warm_ip=1, release=[{"eni_id": eni, "ips": ips[:2], "quarantined_at": w.clock.now() - 25}]
    )
    w.deliver([old])
    assert not any(isinstance(a, Released) for a in _actions(w))
    assert w.mutating_calls() == calls
