"""The ninth review's R1 (docs/safety.md), drawn: a re-plan inside one invocation, made from the
same report on a fresher Describe, unassigned an offered address the plan before it had handed
back, so one answer said ``assigned`` x and then ``released`` x (the directed test:
``tests/integration/test_review_r1_replan.py``).

The fix: a re-plan makes no Unassign and no Delete (``functions.execute._no_releases``), and the
agent does not put in its pool what a later action of the same answer releases or deletes
(``node_agent.controller._gone_later``). The simulation checks every answer on the wire
(``result-contradicts``, ``simulation.node.result_problems``), so the agent's guard hides nothing.

Before ``stale-churn``, 1,000 seeds with the allocator's half reverted found nothing. In the 51
seeds of 0-199 that draw a ``describe-stale`` window, the reverted code made 1,164 plans and 163
re-plans after ``PrivateIpAddressLimitExceeded``, but only 60 plans handed offers back, and one of
them also asked EC2 for more (the node short by more than its offers): the agent offers its newest
free addresses, which a grant inside the window just made, a lagging read does not show them, and
a hand-back names only what Describe shows; of the 64 plans with offers and an allocation, 57 had
offers of unknown origin (never handed back). ``stale-churn`` (``simulation.schedule._stale_churn``,
a generator of its own, listed after every other event; in every ``describe-stale`` window of at
least 150 s lagging up to 2 or 5 min) bursts pods on the busiest node, deletes the oldest (whose
addresses are often from before the window, so a lagging read shows them) and creates pods
again, over and over while the window is open."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from functions import execute
from node_agent import controller
from simulation import runner
from simulation.kinds import DescribeStale, StaleChurn
from simulation.runner import plan_for, run_seed
from simulation.schedule import draw
from warmpool.messages import Action

pytestmark = pytest.mark.sim

REVERTED_SEEDS = (1516, 3493, 3724)
"""Seeds that report ``result-contradicts`` with the fix reverted (both halves), each on the node
``stale-churn`` runs on: of the 260 seeds of 0-3999 that draw it, 1516, 3144, 3493 and 3724 (none
of the 17 in 0-299); with the fix, none of them."""


def _no_releases_as_before(plan: object) -> object:
    """``PlanExecutor.run`` before the fix: a re-plan keeps its Unassigns and Deletes."""
    return plan


def _gone_later_as_before(actions: Sequence[Action]) -> list[tuple[frozenset[str], frozenset[str]]]:
    """``apply_result`` before the fix: an ``assigned`` puts all it names in the pool."""
    return [(frozenset(), frozenset())] * len(actions)


def _revert(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execute, "_no_releases", _no_releases_as_before)
    monkeypatch.setattr(controller, "_gone_later", _gone_later_as_before)


def test_the_churn_is_drawn_from_a_generator_of_its_own_in_the_long_lagging_windows() -> None:
    churned = 0
    for seed in range(300):
        # issue 21's host wiring and the agent killed mid-ADD, drawn later, are listed after the churn
        # (simulation.schedule.HOST_KINDS, CUT_KINDS)
        plan = plan_for(seed, without=frozenset({"host-wiring", "add-cut"}))
        churn = [e for e in plan.events if isinstance(e, StaleChurn)]
        stale = [e for e in plan.events if isinstance(e, DescribeStale)]
        long_lagging = [e for e in stale if e.lag_s >= 120.0 and e.dur >= 150.0]
        assert len(churn) == len(long_lagging) <= 1
        if not churn:
            continue
        churned += 1
        (ev,), (window,) = churn, long_lagging
        assert plan.events[-1] == ev and ev.at == window.at  # listed last, from the window's start
        times = [s for s, _ in ev.steps]
        assert times == sorted(times) and times[-1] < window.dur  # inside the window
        assert ev.steps[0][1] >= 4 and all((n > 0) == (i % 2 == 0) for i, (_, n) in enumerate(ev.steps))
        # every other event is the one the seed drew before (each keeps its --keep index)
        assert list(plan.events[:-1]) == list(
            plan_for(seed, without=frozenset({"stale-churn", "host-wiring", "add-cut"})).events
        )
        assert list(draw(seed).events[: len(plan.events)]) == list(plan.events)
    assert churned == 17  # of the 71 describe-stale windows of seeds 0-299


def test_with_the_fix_the_seeds_pass() -> None:
    results = runner.run_many(REVERTED_SEEDS, jobs=1, shrink=False)
    assert [r.violations for r in results] == [[] for _ in REVERTED_SEEDS]
    for r in results:
        assert r.faults.get("stale-churn") == 1 and r.faults.get("stale-churn:pods", 0) > 0


def test_the_simulation_finds_the_contradicting_answer_with_the_fix_reverted(monkeypatch: pytest.MonkeyPatch) -> None:
    _revert(monkeypatch)
    for seed in REVERTED_SEEDS:
        r = run_seed(seed, shrink=False)
        assert [v["invariant"] for v in r.violations] == ["result-contradicts"], (seed, r.violations)
        assert "assigned then released" in r.violations[0]["detail"]


def test_without_the_churn_the_reverted_code_passes_the_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The churn is what reaches it: the same seeds, their windows lagging as drawn, no churn."""
    _revert(monkeypatch)
    for seed in REVERTED_SEEDS:
        r = run_seed(seed, shrink=False, without=frozenset({"stale-churn"}))
        assert not r.violations and "stale-churn" not in r.faults, (seed, r.violations)
