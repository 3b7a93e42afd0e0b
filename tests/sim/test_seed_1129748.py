"""Seed 1129748 (stop 52's sweep of seeds 1120000-1129999 on 15939c4; failing on 4313d62, stop 51's
code, too): ``released-not-offered`` at 392.5 s, a safety invariant: the allocator unassigns
10.0.0.8 from n0 while n0's agent holds it in its pool, not offered. Open, not traced. Shrunk:
``warmpool sim --seed 1129748 --keep 4,10,11,20,21``, drawing an agent restarted on an older copy
of its checkpoint (``host-wiring:old-copy``) with the host's pod routes and rules flushed, beside a
report flood that saturates the allocator's intake: at 377.9 s the start found the copy's pod
n0-p2 holding 10.0.0.8 with no wiring on the host and released its record; 15 s later the allocator
unassigned the address, from an offer the copy predates. At that moment (read in the datastore
at the violation) the address is not free: the start's ``unrouted`` hold has it (a pod rule with
no route on the host), the datastore is withheld (the restore wait), and no pod's namespace
carries it (``released-in-use`` does not fire). So likely the check's gap rather than two holders:
it exempts an offered address a start's ``?`` hold took (review 15, Q1; seed 1509) but not one an
``unrouted`` hold took. Not settled: whether the pod behind that rule can be running (then two
holders) is what the next stop must answer before changing the check. Pinned as a strict xfail;
docs/reliability.md, "Stop 52"."""

from __future__ import annotations

import pytest

from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim


@pytest.mark.xfail(strict=True, reason="open: an address an older copy's start released is unassigned (not traced)")
def test_seed_1129748_the_allocator_unassigns_only_what_the_agent_offers() -> None:
    violations, (out, _w) = run_plan(plan_for(1129748, [4, 10, 11, 20, 21]))
    assert out.faults.get("host-wiring:old-copy:old-copy") == 1, "setup"
    assert not violations, violations
