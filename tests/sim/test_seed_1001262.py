"""Seed 1001262 (stop 50's sweep of seeds 1000000-1009999; failing the same on stop 49's code,
108dfc0): ``agent-double`` at 457.5 s, 10.0.0.7 in two nodes' datastores. n0-p1 got 10.0.0.7 at
93.5 s; its runtime DELed and ADDed the attachment again at 196.3 s (``cni-readd``) and it got
10.0.0.11; the rebuild after a corrupted checkpoint (315.7 s) offered the free 10.0.0.7 back and
EC2 gave it to n1 (n1-p2, 413.8 s); then n0's pod routes and rules were flushed and its agent
restarted on a copy of the checkpoint from before the re-ADD (``host-wiring``, ``old-copy``):
nothing on the host contradicted "n0-p1 holds 10.0.0.7", and the copy was taken. The start now
reads what each listed pod's interface carries (``node_agent.agent.carried_disagreements``;
``tests/unit/test_older_copy_readded_pod.py``): n0-p1's carries 10.0.0.11, the copy is not
taken, and the start rebuilds."""

from __future__ import annotations

import pytest

import node_agent.agent
from simulation.runner import run_seed

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods

SHRUNK = [2, 14, 20, 21, 22, 23, 24, 25]


@pytest.mark.parametrize("keep", [SHRUNK, None], ids=["shrunk", "whole"])
def test_seed_1001262_keeps_one_holder_per_address(keep: list[int] | None) -> None:
    r = run_seed(1001262, keep, shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("host-wiring:old-copy:old-copy") == 1
    assert r.faults.get("checkpoint-rebuilt:damaged", 0) >= 2, "the old copy was taken"


def test_without_the_carried_check_the_old_copy_gives_two_holders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_agent.agent, "carried_disagreements", lambda ds, pods, *_wiring: [])
    r = run_seed(1001262, SHRUNK, shrink=False)
    assert [v["invariant"] for v in r.violations] == ["agent-double"], r.violations
