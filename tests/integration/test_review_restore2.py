"""Hostile review 5 of the restore check (after R1-R6 were fixed: the release book's fence
``epoch``, the write-back before the answer, R3, R4, R6). Each finding is a strict xfail that
fails on the code it was written against; docs/safety.md names them."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.helpers.crashing import Crash, CrashingEc2
from tests.helpers.restore import WAIT
from tests.helpers.restore import actions_of as _actions
from tests.helpers.restore import restore_world as _world
from tests.helpers.restore import restored as _restored
from tests.helpers.restore import verdicts as _verdicts
from warmpool.messages import Assigned, Attached, Fenced, Released, RestoreChecked


class UnreadBooks:
    """The release books fail their first ``fail`` loads (a throttled or unprocessed read), then
    answer as the store does."""

    def __init__(self, inner: Any, fail: int) -> None:
        self.inner, self.fail = inner, fail

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def load(self, cluster: str, instance_ids: Any) -> Any:
        if self.fail > 0:
            self.fail -= 1
            raise ValueError("release book not read (test)")
        return self.inner.load(cluster, instance_ids)


# review 5 V1, fixed: the same wait asking again raises no epoch, and the agent adopts any answer's.
def test_a_retried_restored_report_after_current_does_not_fence_the_current_agent() -> None:
    """The agent re-sends its restored report on the retry back-off while it waits (every report
    of the wait carries ``restored_from``). The first is answered current (epoch 1) and the agent
    stops waiting; the retry, queued behind it in another batch, is answered not current (R5) with
    epoch 2. The agent ignores it (``_restore_checked``: no restore awaited), so it keeps sending
    epoch 1, and the book's epoch 2 fences every report of this current agent until
    ``fenced_until``: no grant for a node whose pods wait."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1000, wait=WAIT, current=True, epoch=1)]
    w.clock.advance(2)
    w.deliver([_restored(w, 1000, seq=3000, warm_ip=1)])  # the same wait's retry
    said = _verdicts(_actions(w))
    # fixed: the same wait asking again raises nothing (ReleaseBook.raised_for), and is said the
    # verdict it was given (ReleaseBook.raised_current; R5 fixed, seed 189)
    assert said == [RestoreChecked(restored_from=1000, wait=WAIT, current=True, epoch=1)], said
    # the agent: no restore awaited any more, the answer ignored, epoch 1 in every report
    w.clock.advance(2)
    w.deliver([w.report("n1", seq=4000, warm_ip=1, pending=4, assigned=6, extra={"epoch": 1})])
    actions = _actions(w)
    assert w.tally.get("ReportsFenced") == 0, "the current agent's own report fenced"
    assert any(isinstance(a, Assigned | Attached) for a in actions), actions


# review 5 V2, fixed: a report whose release book was not read waits.
def test_a_fenced_report_is_never_recorded_when_the_book_was_unread_at_planning() -> None:
    """R1's scenario (a clock set back across the restart): the previous process's queued report
    carries no epoch and a seq above the restored agent's. With the book read, it is dropped
    unrecorded. With the batch's book reads failing, ``_record_quiet`` and ``_verify_and_plan`` see
    no book, so no fence: the report is planned, its plan has no release call (the only place
    ``_check_book`` looks at the fence), and it is recorded: the ledger jumps to the old process's
    seq and every report of the restored agent is refused as stale until its clock passes it."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    assert _verdicts(_actions(w)) == [RestoreChecked(restored_from=1000, wait=WAIT, current=True, epoch=1)]
    alloc = w.allocator(release_books=UnreadBooks(w.books, fail=2))
    w.deliver([w.report("n1", seq=9_000_000, warm_ip=1)], alloc=alloc)  # the previous process
    _actions(w)
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 2000, "a fenced report recorded"
    w.deliver([w.report("n1", seq=3000, warm_ip=1, pending=4, assigned=6, extra={"epoch": 1})])
    assert any(isinstance(a, Assigned | Attached) for a in _actions(w))


# review 5 V3, fixed: a report whose release book was not read waits.
def test_a_fenced_report_with_an_unread_book_makes_no_call() -> None:
    """As V2, the old report asking for addresses: the grant is made for a report the fence says
    is never acted on (its answer, replying to a seq above the restored agent's, may be refused by
    it; the ``given`` entry then repeats it)."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    _actions(w)
    calls = w.mutating_calls()
    alloc = w.allocator(release_books=UnreadBooks(w.books, fail=1))
    w.deliver([w.report("n1", seq=9_000_000, warm_ip=1, pending=4, assigned=6)], alloc=alloc)
    _actions(w)
    assert w.mutating_calls() == calls, "EC2 called for a fenced report"


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="V4 (cost, open): an agent that lost its checkpoint carries no epoch, so a restore check "
    "of the node before it fences its first report; it is answered 'fenced' with the epoch and served "
    "one round trip later (test_a_lost_checkpoint_agent_is_served_after_one_fenced_answer)",
)
def test_a_lost_checkpoint_agent_after_a_restore_check_is_served() -> None:
    """The node restarts with its checkpoint lost (no ``restored_from``: nothing to check; no epoch:
    its meta is gone) within ``fenced_until`` of a restore check: every report it sends is
    dropped as the previous process's, a node whose pods wait gets nothing for
    ``release_offer_max_age_s + FENCE_MARGIN_S``. It cannot learn the epoch: only a
    ``restore-checked`` gives one, and a lost checkpoint is never asked about."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    _actions(w)
    w.clock.advance(20)
    w.deliver([w.report("n1", seq=5000, warm_ip=1, pending=4, assigned=6)])  # the new process
    assert w.tally.get("ReportsFenced") == 0
    assert any(isinstance(a, Assigned | Attached | Released) for a in _actions(w))


# review 5 V7, fixed: an ask of the wait whose answer raised the epoch is judged as before it (ReleaseBook.raised_for).
def test_a_crash_after_the_write_back_does_not_make_a_current_checkpoint_stale() -> None:
    """The copy is current (the ledger says 1000, the book is empty). The invocation answering its
    report writes the book back with epoch 1 (R2, R1), then dies in the plan's first call (a grant
    for the pods that wait; a throttle or the deadline, which defer unrecorded, drop the verdict the
    same way). Nothing was recorded or said; the agent, still waiting with no epoch, asks again
    (the same report re-delivered, or its retry). Now ``(r.epoch or 0) >= book.epoch`` fails and a
    current checkpoint is answered not current: handled as lost, every free address replaced (and
    the same on each further crash)."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    ask = _restored(w, 1000, seq=2000, warm_ip=1, pending=4, assigned=6)
    plain = w.ec2_client
    w.ec2_client = CrashingEc2(plain, "assign_private_ip_addresses", before=True)
    crashing = w.allocator()
    w.ec2_client = plain
    with pytest.raises(Crash):
        crashing.handle_batch(w.records([ask]))
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1000
    assert _verdicts(_actions(w)) == []
    w.clock.advance(w.settings.lease_ttl_s)
    w.deliver([ask])  # re-delivered (SQS visibility)
    said = _verdicts(_actions(w))
    assert [v.current for v in said] == [True], said


class ThrottledOnce:
    """EC2 throttles the first ``action`` (``RequestLimitExceeded``), then passes calls through."""

    def __init__(self, inner: Any, action: str) -> None:
        self.inner, self.action, self.done = inner, action, False

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if name != self.action:
            return fn

        def call(**kw: Any) -> Any:
            if not self.done:
                self.done = True
                raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, name)
            return fn(**kw)

        return call


# review 5 V7b, fixed: as V7.
def test_a_throttled_plan_after_the_write_back_does_not_make_a_current_checkpoint_stale() -> None:
    """V7 without a crash: the DaemonSet restarts, every node's restored report asks for addresses,
    and EC2 throttles (the common case then). The verdict raised the epoch to 1; the Assign is
    throttled before any action, the outcome is DEFERRED with a re-send, so the verdict is not said
    (``recorded`` is false). The re-sent report carries no epoch: not current."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    ask = _restored(w, 1000, seq=2000, warm_ip=1, pending=4, assigned=6)
    plain = w.ec2_client
    w.ec2_client = ThrottledOnce(plain, "assign_private_ip_addresses")
    throttled = w.allocator()
    w.ec2_client = plain
    throttled.handle_batch(w.records([ask]))
    assert _verdicts(_actions(w)) == []  # deferred, nothing said
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1000
    w.clock.advance(30)
    w.drain(alloc=throttled)  # the re-sent report
    said = _verdicts(_actions(w))
    assert said and all(v.current for v in said), said


def test_a_lost_checkpoint_agent_is_served_after_one_fenced_answer() -> None:
    """V4's cost as built: the first report of the new process is dropped and answered ``fenced``
    with the epoch; the agent carries it, and its next report is served."""
    w, _, _ = _world()
    w.deliver([w.report("n1", seq=1000, warm_ip=1)])
    w.deliver([_restored(w, 1000, seq=2000, warm_ip=1)])
    _actions(w)
    w.clock.advance(20)
    w.deliver([w.report("n1", seq=5000, warm_ip=1, pending=4, assigned=6)])
    assert _actions(w) == [Fenced(epoch=1)]
    w.deliver([w.report("n1", seq=5001, warm_ip=1, pending=4, assigned=6, extra={"epoch": 1})])
    assert any(isinstance(a, Assigned | Attached) for a in _actions(w))
