"""Review 16 (attack on the L1 fix): two processes of a node that take the same ``seq-floor``
number their reports over the same seqs, the later one below the earlier one's.

``PoolController._take_seq_floor`` sets the seq offset to ``floor + SEQ_FLOOR_GAP_MS - now``: the
gap is counted from the floor, not from what the other process sent, and a process that takes
the floor later numbers *lower* at any wall time than one that took it earlier. The floor is the
ledger seq, which does not move until a report above it is served: a process (P1) that took the
floor and sent its next report (deferred by the allocator, re-sent: not recorded; or merely still
queued) and then died, its checkpoint lost again (or the same older copy restored again), leaves
the ledger where it was. Its successor (P2) is answered the same floor and numbers its next report
with P1's very seq (or below P1's queued ones). Then the allocator records P2's report and drops
P1's of the same seq unanswered (at the ledger's seq: "the served one delivered again"), or it
serves P1's queued report of a higher seq after P2's: an offer of another process acted on after
this one's answer, and its result taken by P2 as the answer to its own report of that seq. The
docstring of ``SEQ_FLOOR_GAP_MS`` says "no report of this agent shares a seq with one of them"."""

from __future__ import annotations

from tests.helpers.seq_floor import two_processes

FLOOR = 700_000  # the ledger's seq: a process before them ran its clock ten minutes ahead


def test_a_process_answered_the_floor_its_predecessor_was_numbers_above_every_seq_that_one_sent() -> None:
    # P1: floor taken, three reports sent, then gone; P1's reports not yet recorded (deferred and
    # re-sent, or queued): the ledger is still FLOOR when P2, a minute later, its checkpoint lost
    # again, is answered
    p1, p2 = two_processes(FLOOR, 100.0, 160.0)
    assert min(p2) > max(p1), f"P2 numbers {p2} over P1's queued {p1}: shared seqs {sorted(set(p1) & set(p2))}"
