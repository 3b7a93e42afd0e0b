"""Shipped scenarios end to end (slow): invariants every strategy must keep,
the targets warmpool is held to, and the 1,000-node wall-time target."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sim.bench.runner import run_bench
from sim.bench.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["burst-200", "two-clusters", "faults"])
def test_scenario_invariants(name: str) -> None:
    result, _ = run_bench(load_scenario(ROOT / "scenarios" / f"{name}.yaml"))
    for sname, r in result.strategies.items():
        assert r.pods_ready <= r.pods_requested, sname
        assert r.duplicate_ips == 0, sname
    w = result.strategies["warmpool"]
    assert w.leaked_enis == 0
    assert w.pods_ready == w.pods_requested
    if name != "faults":
        assert w.throttled_calls == 0
        for other in ("vpc-cni", "cilium"):
            b = result.strategies[other]
            assert w.makespan_s is not None and b.makespan_s is not None
            assert w.makespan_s < b.makespan_s, other


def test_thousand_nodes_under_three_minutes() -> None:
    t0 = time.perf_counter()
    result, _ = run_bench(load_scenario(ROOT / "scenarios" / "burst-1000.yaml"))
    assert time.perf_counter() - t0 < 180
    assert result.strategies["warmpool"].pods_ready == 30_000
