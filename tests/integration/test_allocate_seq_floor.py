"""The allocator's side of L1 (docs/safety.md): a report below its instance's ledger seq is
answered ``seq-floor`` with that seq and nothing else is done (``Allocator._say_floors``); the
bound on a seq ahead (``SEQ_AHEAD_LIMIT``) lies above every clock a valid report can carry."""

from __future__ import annotations

import json

from functions.intake import SEQ_AHEAD_LIMIT
from tests.helpers.allocate_world import AllocatorWorld
from warmpool.messages import SeqFloor


def test_a_report_below_the_ledger_seq_is_answered_with_the_ledger_seq_and_nothing_is_done() -> None:
    w = AllocatorWorld()
    iid = w.add_node("n1")
    assert w.deliver([w.report("n1", seq=5_000, warm_ip=1)]).served == 1
    w.results("n1")
    calls = w.mutating_calls()
    out = w.deliver([w.report("n1", seq=4_000, warm_ip=4, pending=4), w.report("n1", seq=3_000, warm_ip=4)])
    assert out.stale == 2 and out.served == 0
    answers = w.results("n1")
    assert [(r.in_reply_to, r.actions) for r in answers] == [(4_000, [SeqFloor(floor=5_000)])], (
        "one answer, to the newest stale report"
    )
    assert w.mutating_calls() == calls and w.ledger.last_seq("demo", iid) == 5_000


def test_the_served_report_delivered_again_is_not_answered() -> None:
    """At the ledger's seq: the report that was served, delivered again (SQS delivers at least
    once): the agent is past it, nothing to say."""
    w = AllocatorWorld()
    w.add_node("n1")
    body = w.report("n1", seq=5_000, warm_ip=1).to_json()
    assert w.deliver([body]).served == 1
    w.results("n1")
    out = w.deliver([body])
    assert out.stale == 1 and w.results("n1") == []


def test_a_stale_report_under_another_nodes_name_is_answered_to_its_instance_only() -> None:
    """Rows are keyed by verified instance: n2's stale report under n1's name answers n2's
    instance (labelled n1: n2's agent ignores it, n1's queue gets nothing)."""
    w = AllocatorWorld()
    w.add_node("n1")
    w.add_node("n2")
    assert w.deliver([w.report("n1", seq=9_000, warm_ip=1), w.report("n2", seq=5_000, warm_ip=1)]).served == 2
    w.results("n1"), w.results("n2")
    spoof = json.loads(w.report("n2", seq=4_000, warm_ip=1).to_json())
    spoof["node"] = "n1"
    assert w.deliver([json.dumps(spoof)]).stale == 1
    assert w.results("n1") == []
    assert [(r.node, r.actions) for r in w.results("n2")] == [("n1", [SeqFloor(floor=5_000)])]


def test_a_report_at_the_latest_clock_a_report_can_carry_is_served() -> None:
    """``sent_at`` is at most 1e11 s: a node whose clock reads that (in ms, its seq) is served
    on an empty row, and the bound stays far below the seq schema's top."""
    w = AllocatorWorld()
    w.add_node("n1")
    assert int(1e11 * 1000) <= SEQ_AHEAD_LIMIT and SEQ_AHEAD_LIMIT * 2**14 < 2**62
    out = w.deliver([w.report("n1", seq=int(1e11 * 1000), warm_ip=2, pending=2)])
    assert out.served == 1 and w.addresses("n1") >= 2
