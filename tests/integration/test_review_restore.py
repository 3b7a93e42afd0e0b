"""Hostile review of f75a5ca (a restored checkpoint waits for the allocator's word, C1): the
allocator's side, on the real allocator (tests/helpers/allocate_world.py). Each test is a
finding, strict xfail on the code under review.

The world is tests/integration/test_allocate_restore_check.py's (tests/helpers/restore.py): n1 with
six secondaries on its primary ENI, three in use."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.crashing import Crash, CrashingEc2
from tests.helpers.restore import WAIT
from tests.helpers.restore import actions_of as _actions
from tests.helpers.restore import restore_world as _world
from tests.helpers.restore import restored as _restored
from tests.helpers.restore import unassigned as _unassigned
from tests.helpers.restore import verdicts as _verdicts
from warmpool.messages import Released, RestoreChecked
from warmpool.release_book import ReleaseBook


# review R1, fixed: each answer raises the instance's epoch (ReleaseBook.epoch); a report without it,
# or with a lower one, is never acted on, whatever its seq.
def test_a_report_of_the_previous_process_with_a_higher_seq_is_never_acted_on_after_current() -> None:
    """The copy knew seq 1000. The previous process, its clock ahead, sent seq 5000 offering x;
    the report is still queued (deferred for tokens, SQS out of order). The node restarts on the
    copy with its clock set right: its first report is max(1001, now ms) = 2000, restored_from
    1000. Ledger 1000, no book entry past it: current, 2000 recorded, the agent hands x to a
    pod. Then 5000 comes: above 2000, not stale, its offer young: x is unassigned under the pod."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])  # the copy's last seq
    x = ips[-2:]
    w.clock.advance(30)
    late = w.report(
        "n1", seq=5000, warm_ip=1, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}]
    )
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    said = _verdicts(_actions(w))
    assert said == [RestoreChecked(restored_from=1000, wait=WAIT, current=True, epoch=1)], said
    w.deliver([late])
    released = [a for a in _actions(w) if isinstance(a, Released)]
    assert not released and _unassigned(w) == 0, (
        f"{x} unassigned for a report sent before the restore, after the copy was said current: {released}"
    )


class _SkewedClock:
    """Another container's clock: the world's, ``ahead`` seconds ahead (docs/safety.md, row 11)."""

    def __init__(self, inner: Any, ahead: float) -> None:
        self.inner, self.ahead = inner, ahead

    def now(self) -> float:
        return float(self.inner.now()) + self.ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _BooksThen:
    """The release books; ``then()`` runs once, right before the first write that books an
    Unassign (the write-ahead), before the write itself."""

    def __init__(self, inner: Any, then: Any) -> None:
        self.inner, self.then, self.ran = inner, then, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def load(self, cluster: str, instance_ids: Any) -> dict[str, ReleaseBook]:
        return dict(self.inner.load(cluster, instance_ids))

    def save(self, cluster: str, instance_id: str, book: ReleaseBook, expires_at: float) -> ReleaseBook | None:
        if not self.ran and book.taken:
            self.ran = True
            self.then()
        return self.inner.save(cluster, instance_id, book, expires_at)


# review R2, fixed: the verdict writes the release book back (one version higher) before it is said,
# so the other invocation's write-ahead fails (functions/allocator.py::_restore_verdict).
def test_an_invocation_past_its_lease_never_unassigns_after_a_current_answer() -> None:
    """Invocation X serves report 2 (after the copy, offering x): planned, leased, its book check
    made; before its write-ahead it stalls. Invocation Y, in a container whose clock is past X's
    lease (row 11: clocks apart, the lambda-clock-skew fault), serves the copy's report 3
    (restored_from 1): ledger 1, book empty, so current; 3 recorded. X then books (the book's
    version unchanged: the verdict wrote nothing) and unassigns x, which the agent has handed to
    a pod on Y's word. Row 11's argument ("every Unassign and Detach is booked ... whichever
    comes second fails") does not cover the verdict."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", warm_ip=1)])  # seq 1: the copy's last
    x = ips[-2:]
    w.clock.advance(30)
    offer = w.report("n1", warm_ip=1, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}])
    restored = _restored(w, 1, warm_ip=1)
    other = w.allocator(clock=_SkewedClock(w.clock, w.settings.lease_ttl_s + 1))
    verdicts: list[RestoreChecked] = []

    def y_runs() -> None:
        other.handle_batch(w.records([restored]))
        verdicts.extend(_verdicts(_actions(w)))

    x_alloc = w.allocator(release_books=_BooksThen(w.books, y_runs))
    x_alloc.handle_batch(w.records([offer]))
    assert verdicts, "Y gave no answer (the scenario did not happen)"
    current = verdicts == [RestoreChecked(restored_from=1, wait=WAIT, current=True, epoch=1)]
    assert not (current and _unassigned(w) > 0), (
        f"Y said current (its seq recorded), then X unassigned {x}: {verdicts}, {_unassigned(w)} Unassign calls"
    )


# review R5, fixed: the same wait asking again while its raise's fence holds is said the verdict
# it was given (ReleaseBook.raised_current; seed 189).
def test_a_report_asking_again_after_its_answer_was_lost_is_still_current() -> None:
    """The copy is the node's newest state (seq 1). Report 2 (restored_from 1) is answered
    current and recorded; the result is lost (a push failure, the agent restarted before it
    came). The agent's retry, report 3 (restored_from 1), is answered not current: ledger 2 >
    1, though 2 was this same wait's report. Every free address of a current checkpoint is
    then replaced."""
    w, _, _ = _world()
    w.deliver([w.report("n1", warm_ip=1)])  # seq 1
    w.deliver([_restored(w, 1, warm_ip=1)])  # seq 2: current
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1, wait=WAIT, current=True, epoch=1)]
    w.clock.advance(5)
    w.deliver([_restored(w, 1, warm_ip=1)])  # seq 3: the same question again
    said = _verdicts(_actions(w))
    assert said == [RestoreChecked(restored_from=1, wait=WAIT, current=True, epoch=1)], said


# review R6, fixed: a report of a restored checkpoint settles nothing before its answer
# (functions/allocator.py::_verify_and_plan).
def test_the_restored_report_does_not_settle_away_the_entry_that_makes_it_not_current() -> None:
    """The invocation serving report 2 (after the copy, offering x) booked and made the Unassign,
    then died before recording 2: ledger 1, book {x: 2}. The node restarts on the copy (seq 1):
    its resync drops x (IMDS no longer lists it), so report 3 (restored_from 1) does not name x.
    The batch settles the book with report 3 (x's entry is older and not listed: dropped, and
    stored) before the verdict re-reads it: ledger 1, book empty, current. The copy lacks
    everything the agent learnt from report 2's answer (none came: x's release is not in its
    recent-results memory), so a regressed IMDS read that lists x again gives it back free,
    while a lost checkpoint would have held it as an unknown offer (docs/safety.md, row 12)."""
    w, eni, ips = _world()
    w.deliver([w.report("n1", warm_ip=1)])  # seq 1: the copy's last
    x = ips[-2:]
    w.clock.advance(30)
    n = w.report("n1", warm_ip=1, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}])
    plain = w.ec2_client
    w.ec2_client = CrashingEc2(plain, "unassign_private_ip_addresses")  # dies right after the call
    crashing = w.allocator()
    w.ec2_client = plain
    with pytest.raises(Crash):
        crashing.handle_batch(w.records([n]))
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1
    assert not set(x) & set(w.enis("n1")[0].secondary), "the Unassign was made"
    assert {t.seq for t in w.books.load("demo", [w.nodes["n1"]])[w.nodes["n1"]].taken} == {2}
    w.clock.advance(w.settings.lease_ttl_s)
    w.deliver([_restored(w, 1, warm_ip=1)])  # names what EC2 shows: x no more
    said = _verdicts(_actions(w))
    assert said == [RestoreChecked(restored_from=1, wait=WAIT, current=False, epoch=1)], said
