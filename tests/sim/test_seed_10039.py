"""Seed 10039 (stop 48's sweep of seeds 10000-11999 on its final code; failing the same on stop
47's code, f2fcf79): ``address-leaked`` at the end of the run, n0's ENI carrying two addresses EC2
assigned that the agent does not know. A leak (the node's pool short of what EC2 gives it), not a
second holder. Not traced yet: the scenario draws an EC2 call that takes effect and answers
``InternalError``, a stale Describe, a slow detach, SQS duplicates and delays, a corrupt
checkpoint. Open: pinned as a strict xfail until it is."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim

SHRUNK = [1, 5, 6, 7, 11, 12, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]


@pytest.mark.xfail(strict=True, reason="open (stop 48): seed 10039's address-leaked, not traced yet")
def test_seed_10039_keeps_every_invariant() -> None:
    r = run_seed(10039, SHRUNK, shrink=False)
    assert not r.violations, r.violations
