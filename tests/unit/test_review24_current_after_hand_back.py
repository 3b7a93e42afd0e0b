"""Review 24, evidence for H1 (passes): the allocator calls a copy "current" although an address
the copy shows offered was handed back in the answer to the copy's own report.

docs/reliability.md (seed 1509) suggests "once the allocator says the restored checkpoint is
current, the addresses it had on offer go back on offer (none can have been handed back since)",
and ``HELD_OFFERS`` rests on the same belief that an offer a copy shows still stands. But the
verdict asks only whether the ledger or the release book saw a report *past* the copy's, and
the release book records no hand-back: the answer to the copy's last report may hand the offer
back, a pod get it, and the agent's next report be lost. Review 15's Q1, with a current verdict."""

from __future__ import annotations

from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.restore import actions_of, restored, verdicts
from warmpool.messages import Assigned


def test_a_copy_whose_offer_was_handed_back_in_reply_to_its_own_report_is_current() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=5)])
    eni = w.enis("n1")[0]
    actions_of(w)
    x = list(eni.secondary)[-1]
    w.clock.advance(30)
    w.pods["n1"] = 5
    # the copy's last report: x offered, pods waiting (the copy is taken as it is sent)
    offer = {"eni_id": eni.id, "ips": [x], "quarantined_at": w.clock.now() - 20}
    copy = w.report("n1", warm_ip=5, pending=4, release=[offer])
    w.deliver([copy])
    handed = {k for a in actions_of(w) if isinstance(a, Assigned) for k in a.ips}
    assert x in handed, "setup: x handed back in the answer to the copy's report"
    # a pod gets x; the agent's next report is lost, its writes after the copy too; restored:
    w.clock.advance(5)
    w.deliver([restored(w, copy.seq, warm_ip=5)])
    assert [v.current for v in verdicts(actions_of(w))] == [True]
