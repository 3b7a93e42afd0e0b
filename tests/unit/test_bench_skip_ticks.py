"""The bench's warmpool skips an agent's grid ticks before it is next due
(``Warmpool.every_tick`` False, ``PoolController.next_due``): the same run as
ticking every agent every ``AGENT_TICK_S``, with fewer ticks."""

from __future__ import annotations

from typing import Any

import pytest

from bench.runner import run_bench
from bench.strategies import warmpool as wp
from tests.helpers.bench import small, without_wall

FAULTS = [
    {"at_s": 0, "duration_s": 1200, "kind": "lambda-crash", "rate": 0.3},
    {"at_s": 0, "duration_s": 1200, "kind": "duplicate-delivery", "rate": 0.1},
    {"at_s": 100, "duration_s": 60, "kind": "throttle-storm", "rate": 4.0},
]
STEPS = [
    {"at_s": 30, "node_group": "ng", "add_pods_per_node": 40, "spread_s": 20},
    {"at_s": 400, "node_group": "ng", "delete_pods_per_node": 30, "spread_s": 10},
    {"at_s": 420, "node_group": "ng", "add_pods_per_node": 25, "spread_s": 5},
    {"at_s": 700, "node_group": "ng", "add_pods_per_node": 10, "spread_s": 5},
]


def _run(monkeypatch: pytest.MonkeyPatch, every: bool, env: dict[str, Any]) -> tuple[Any, int]:
    ticks = 0
    periodic = wp._Agent.periodic

    def counted(self: wp._Agent) -> None:
        nonlocal ticks
        ticks += 1
        periodic(self)

    monkeypatch.setattr(wp.Warmpool, "every_tick", every)
    monkeypatch.setattr(wp._Agent, "periodic", counted)
    scenario = small(["warmpool"], env=env, nodes=6, duration_s=1200, workload=STEPS, faults=FAULTS)
    result, _ = run_bench(scenario, strategies=["warmpool"])
    return without_wall(result.model_dump()), ticks


@pytest.mark.parametrize(
    "env",
    [{"WARM_IP_TARGET": 1}, {"WARM_ENI_TARGET": 1}, {"ENABLE_PREFIX_DELEGATION": True, "WARM_PREFIX_TARGET": 1}],
)
def test_skipping_ticks_before_due_gives_the_same_run(monkeypatch: pytest.MonkeyPatch, env: dict[str, Any]) -> None:
    every, every_ticks = _run(monkeypatch, True, env)
    skip, skip_ticks = _run(monkeypatch, False, env)
    assert skip == every
    assert skip_ticks < every_ticks / 2
