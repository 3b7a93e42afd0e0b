"""Seed 1000042 (secondary-IP mode, WARM_IP_TARGET 1, MINIMUM_IP_TARGET 2; n0 a c5.xlarge): n0
ended ``not-settled``, "1 idle addresses above the targets, none offered". An ADD cut after its
pod's veth (``add-cut``) made the restart at 290.4 s hold every free address for that veth; its
retried ADD ended the hold at 292.9 s, and 10.0.0.9 was offered as of unknown origin and
unassigned (306.9 s). An older copy put back at 324 s (``checkpoint-damaged-parses``, old-copy)
brought the hold back with its reason (review 19's C1, counted ``hold-unfounded:older-copy``):
10.0.0.9 held by ``?``, which IMDS no longer lists (kept, never handed out). The agent counted
it in its pool (total 5, 3 in use) and the allocator did not (EC2's 4 with the report's 3 in
use): every surplus offer (one free address above WARM_IP_TARGET) was taken back, each release
delay to the end (388-893 s). An address IMDS no longer lists now counts in neither the pool nor
its use, in the agent's counts and in its report (``node_agent.records.Counts.of``,
``node_agent.report.build_report``): the offer is taken and the node settles."""

from __future__ import annotations

import pytest

from simulation.runner import plan_for, run_plan

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods


@pytest.mark.parametrize("keep", [[2, 12, 13, 24], None])
def test_seed_1000042_a_held_address_ec2_took_does_not_make_a_surplus_the_allocator_refuses(
    keep: list[int] | None,
) -> None:
    violations, (out, w) = run_plan(plan_for(1000042, keep))
    assert not violations, violations
    a = w.agents["n0"]
    assert out.faults.get("checkpoint-damaged-parses:old-copy") == 1
    # the older copy's hold is still there: an address held by ``?`` that EC2 no longer has
    mine = [e for e in w.emu.enis.values() if e.attachment and e.attachment.instance_id == a.iid]
    on_ec2 = {ip for e in mine for ip in e.secondary}
    held = {h.ip for h in a.ds.recovered_holders() if h.holder == "?"}
    assert held - on_ec2, (held, on_ec2)
    assert set(a.ds.unlisted()) == held - on_ec2
    c = a.ds.counts(w.now())
    assert c.total == len(on_ec2)
    assert a.ctl.delta(w.now()).over_units == 0
