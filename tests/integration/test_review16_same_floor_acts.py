"""Review 16: what two processes answered the same ``seq-floor`` lead the allocator to do (the
agents' seqs from ``tests/helpers/seq_floor.py``, reports as EC2 shows the node).

P1 (its checkpoint lost) is answered the floor, numbers above it and offers an address of unknown
origin (every free address after a loss is one) in its last report, which the allocator defers
(or which is still queued) when P1 dies. P2 (its checkpoint lost again) is answered the same
floor and numbers from the same place, below P1's last report. P2's report is served: its pods
hold the address. Then P1's last report comes: its seq is above the ledger's, so it is served as
the newest, and its offer (fresh by its ``quarantined_at``; no epoch fences a lost checkpoint's
process) is unassigned under P2's pod: EC2 may give the address to another node. With P2
numbering above every seq P1 sent, P1's report would be stale (answered the floor, nothing done)."""

from __future__ import annotations

from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.seq_floor import two_processes
from warmpool.messages import Released

FLOOR = 700_000


def test_a_queued_report_of_a_process_answered_the_same_floor_never_unassigns_what_the_next_ones_pods_hold() -> None:
    p1, p2 = two_processes(FLOOR, 100.0, 130.0)
    w = AllocatorWorld()
    w.add_node("n1")
    assert w.deliver([w.report("n1", seq=FLOOR - 1, warm_ip=4, pending=4)]).served == 1
    w.results("n1")
    eni = w.enis("n1")[0]
    ips = list(eni.secondary)
    assert len(ips) >= 4
    assert w.deliver([w.report("n1", seq=FLOOR, warm_ip=1)]).served == 1  # the row P1 and P2 see
    w.results("n1")
    w.clock.advance(30)
    # P2's report: its pods hold every address
    assert w.deliver([w.report("n1", seq=p2[0], warm_ip=1, assigned=len(ips))]).served == 1
    w.results("n1")
    # P1's last report, deferred and re-sent (or queued), 31 s after it offered the address
    x = ips[-1]
    late = w.report(
        "n1",
        seq=p1[2],
        warm_ip=1,
        assigned=0,
        release=[{"eni_id": eni.id, "ips": [x], "unknown": True, "quarantined_at": w.clock.now() - 31}],
    )
    w.deliver([late])
    released = [a for r in w.results("n1") for a in r.actions if isinstance(a, Released)]
    assert not released and x in w.enis("n1")[0].secondary, (
        f"P1's report {p1[2]} (after P2's {p2[0]}) unassigned {x}, which P2's pods hold"
    )
