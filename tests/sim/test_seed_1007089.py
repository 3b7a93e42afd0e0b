"""Seed 1007089 (secondary-IP mode, WARM_IP_TARGET 2, quota fraction 0.5; n0 an m5.large): n0
ended ``not-settled``, "2 idle addresses above the targets, none offered" (1 in the kept events).
One pod's veth was set down (``host-wiring``, veth-down) and the agent started again at 368.9 s on
an older copy naming four pods DELeted since: their records were released and, a routeless veth
being on the host, held by ``unrouted`` (``agent.doubtful_records``); IMDS no longer listed one of
them, 10.0.0.8, unassigned after the DEL (kept for its holder, never handed out). The routeless pod
runs to the end, so the holds stand; but the agent counted 10.0.0.8 in its pool and the allocator
did not (EC2's addresses with the report's count in use): every surplus offer was taken back, each
release delay to the end (436-872 s). An address IMDS no longer lists now counts in neither the
pool nor its use (``node_agent.records.Counts.of``, ``node_agent.report.build_report``): the offer
is taken and the node settles.

The whole seed's timing was drawn with an address joining an offer dating it anew at once: since
review 33's Y1 fix one joining a young offer waits out of it, which moves the whole run past the
situation pinned here (no violation either way), so that run keeps the earlier dating
(``offers_dated_anew_at_every_join``)."""

from __future__ import annotations

import pytest

from simulation.runner import plan_for, run_plan
from tests.helpers.controller import offers_dated_anew_at_every_join

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods


@pytest.mark.parametrize("keep", [[0, 1, 3, 7, 27, 29], None])
def test_seed_1007089_an_unrouted_hold_ec2_took_does_not_make_a_surplus_the_allocator_refuses(
    keep: list[int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if keep is None:
        offers_dated_anew_at_every_join(monkeypatch)
    violations, (out, w) = run_plan(plan_for(1007089, keep))
    assert not violations, violations
    a = w.agents["n0"]
    assert out.faults.get("host-wiring:old-copy:old-copy") == 1
    mine = [e for e in w.emu.enis.values() if e.attachment and e.attachment.instance_id == a.iid]
    on_ec2 = {ip for e in mine for ip in e.secondary}
    held = {h.ip for h in a.ds.recovered_holders() if h.holder == "unrouted"}
    assert held - on_ec2, (held, on_ec2)
    assert set(a.ds.unlisted()) == held - on_ec2
    assert a.ds.counts(w.now()).total == len(on_ec2)
    assert a.ctl.delta(w.now()).over_units == 0
