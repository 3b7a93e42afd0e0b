"""L1 (docs/safety.md) in the whole-system simulation: a node whose clock runs 20 min ahead, then
is set right (its checkpoint kept), and another whose clock ran 15 min ahead when its checkpoint
was lost and is set right at the restart. The seeded ``clock-skew`` draws at most 300 s, under the
old bound; these worlds draw the skews by hand (seed 1's nodes, none of its events)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from functions import allocator
from simulation import kinds as k
from simulation.runner import plan_for, run_plan
from simulation.schedule import SeedPlan

EVENTS = (
    k.ClockSkew(at=5.0, node="n0", skew=1200.0),
    k.PodsAdd(at=40.0, node="n0", n=6),
    k.ClockSkew(at=300.0, node="n0", skew=0.0),
    k.PodsAdd(at=330.0, node="n0", n=4),
    k.ClockSkew(at=400.0, node="n1", skew=900.0),
    k.CheckpointLost(at=500.0, node="n1", down=5.0),
    k.ClockSkew(at=502.0, node="n1", skew=0.0),
    k.PodsAdd(at=540.0, node="n1", n=6),
)


def _plan() -> SeedPlan:
    return replace(plan_for(1, []), events=EVENTS)


def _no_floors(w: Any) -> None:
    """The allocator dropping a report below its ledger seq unanswered, as before."""
    w.allocator._say_floors = lambda stale, b: None


def test_nodes_whose_clocks_ran_far_ahead_are_served_and_settle() -> None:
    violations, (out, _) = run_plan(_plan())
    assert violations == []
    assert out.faults["clock-skew:ahead"] == 2 and out.faults["checkpoint-lost"] == 1


def test_the_simulation_finds_the_old_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """2^20 ms ahead, as before: n0's reports refused while its clock is ahead (to the DLQ)."""
    monkeypatch.setattr(allocator, "SEQ_AHEAD_LIMIT", 2**20)
    violations, _ = run_plan(_plan(), _no_floors)
    assert [inv for inv, _ in violations][:1] == ["report-dead-lettered"], violations
    assert '"node":"n0"' in violations[0][1]


def test_the_simulation_finds_a_rebuild_behind_its_seqs_without_the_floor() -> None:
    """The rebuilt n1 numbers from its clock, 15 min below its ledger row: unanswered, its pods
    wait until the clock passes it (past the run's end)."""
    violations, _ = run_plan(_plan(), _no_floors)
    assert violations == [("not-settled", violations[0][1])] and "n1: 6 pods" in violations[0][1], violations
