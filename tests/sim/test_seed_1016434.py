"""Seed 1016434 (stop 50's sweep of seeds 1010000-1019999 on 543bc61; failing on 40850b2 too):
``agent-double`` at 475.0 s, open. Shrunk: ``warmpool sim --seed 1016434 --keep 0,1,3,24,28,29``.
n1-p3 got 10.0.0.9 at 45.5 s; n1's host wiring was disturbed (one pod's veth set down) and its
agent restarted at 348.0 s on an older copy, which held 10.0.0.9 by ``unrouted`` (its pod rule with
no route) and was answered "not current" (handled as lost); n1-p3's DEL at 421.5 s tore its veth
down; at 423.5 s the start's hold ended (every pod it stood for DELeted) and 10.0.0.9 was offered,
unassigned (437.5 s) and given to n2 (456.0 s); at 475.0 s n1's agent restarted on an older copy
still, listing n1-p3 holding 10.0.0.9. Something of 10.0.0.9 was left on n1's host (its pod rule:
the DEL knew the address only by the ``unrouted`` holder, not by the attachment), a trace of a pod
by the restore's rule (``unwired_pods``), so the record was kept, for a pod DELeted 54 s before:
10.0.0.9 in two datastores. n1's agent keeps it for n1-p3, never handed out (IMDS does not list it
on n1), and n1-p3 runs no more, so no namespace carries it twice; the datastore invariant is
broken all the same. Pinned as a strict xfail until traced to the end."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim

SHRUNK = [0, 1, 3, 24, 28, 29]


@pytest.mark.xfail(
    strict=True, reason="open: an older copy's record of a pod DELeted since, kept by a rule its DEL left"
)
def test_seed_1016434_keeps_one_holder_per_address() -> None:
    r = run_seed(1016434, SHRUNK, shrink=False)
    assert not r.violations, r.violations
