"""Seed 1007923 (prefix mode, a fragmented world with named placement, both runtimes containerd; n0
a t3.medium): n0 ends with 30 pods running and 6 waiting, at its ENI limit, every address a
running pod's. A throttle storm kept n0's agent from reading the tags of the ENI the allocator
gave it (eni-2a78…, a /28: "ENIs not yet classified are not used") until its checkpoint was lost
(407.4 s); the rebuild held the /28 that sixteen running pods carry (10.0.1.80/28) for their
veths (recovered holders) and the new ENI's free /28 as offered, of unknown origin, which the
allocator unassigns rather than hands back (docs/safety.md, row 12) and named placement then
does not name for its hold (docs/allocator.md, "Prefix placement that does not fragment", step
5): no /28 nameable in n0's subnets, its slots filled with singles (412.7-426.7 s) and every
later answer was "unmet: instance at its ENI limit". The check's P2 rule (review 26) counted an
address as a pod's only by the record's container id, and the sixteen recovered holders have
none: the waiting pods were judged ``not-settled``. A recovered holder is a pod's now when the
runtime runs that veth's pod with that very address (or deletes it). Found with the runtime
naming pods in ``CNI_ARGS`` (stop 50); the shrunk events fail the same way without it."""

from __future__ import annotations

import pytest

from simulation import checks
from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim

SHRUNK = [3, 4, 6, 10, 12, 13, 15, 16, 18, 19, 20]


@pytest.mark.usefixtures("pods_named")
@pytest.mark.parametrize("keep", [SHRUNK, None])
def test_seed_1007923_pods_waiting_beside_rebuilt_holds_of_running_pods_are_excused(keep: list[int] | None) -> None:
    violations, (out, w) = run_plan(plan_for(1007923, keep))
    assert not violations, violations
    assert out.faults.get("fragmented:named-placement") == 1
    assert out.faults.get("checkpoint-rebuilt:missing") == 1
    assert out.faults.get("subnet-world:singles-beside-held-28", 0) >= 1
    a = w.agents["n0"]
    assert a.rt.containerd and len(a.rt.adding) == 6 and len(a.rt.up) == 30
    assert checks.no_slot_for_a_28(w.emu, a.iid, a.ctl.limits, a.ctl.pool)
    assert "n0" not in w.nets.singles_beside_28
    recovered = a.ds.recovered_holders()
    assert len(recovered) == 16
    assert checks.holds_all_it_can(w, a)
    assert out.faults.get("settled-short:pods-wait-at-capacity") == 1

    # The rule still reads the runtime: one of the sixteen pods gone from it (its DEL answered,
    # its rebuilt hold kept: a leak), or running with another address, and the node is judged.
    h = recovered[0]
    cid = next(c for c, ip in a.rt.up.items() if ip == h.ip)
    a.rt.up[cid] = "10.0.0.250"
    assert not checks.holds_all_it_can(w, a)
    del a.rt.up[cid]
    assert not checks.holds_all_it_can(w, a)
