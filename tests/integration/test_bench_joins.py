"""The EKS-scale joins scenario (issue 25) at a size a test runs: the shipped
``scenarios/eks-joins-2000-30s*.yaml`` with 40 nodes joining at the same rate
(2,000 a minute), with and without a launch-time pool, all three strategies in
one run each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.output import BenchResult
from bench.runner import run_bench
from bench.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[2]
NODES = 40
RATE_PER_S = 2000 / 60
ASSIGN = "AssignPrivateIpAddresses"
UNASSIGN = "UnassignPrivateIpAddresses"


def run(name: str) -> BenchResult:
    d: dict[str, Any] = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    d["node_groups"] = d["node_groups"][:1]
    d["workload"] = [w for w in d["workload"] if w["node_group"] == d["node_groups"][0]["name"]]
    d["node_groups"][0].update(count=NODES, join_spread_s=NODES / RATE_PER_S)
    result, _ = run_bench(parse_scenario(d, name))
    assert set(result.strategies) == {"warmpool", "vpc-cni", "cilium"}
    return result


@pytest.fixture(scope="module")
def without() -> BenchResult:
    return run("eks-joins-2000-30s")


@pytest.fixture(scope="module")
def with_pool() -> BenchResult:
    return run("eks-joins-2000-30s-launch-pool")


@pytest.mark.parametrize("which", ["without", "with_pool"])
def test_every_pod_ready_no_duplicate_no_leak(which: str, request: pytest.FixtureRequest) -> None:
    result: BenchResult = request.getfixturevalue(which)
    for name, r in result.strategies.items():
        assert r.pods_requested == NODES * 10, name
        assert r.pods_ready == r.pods_requested, name
        assert r.duplicate_ips == 0, name
        assert r.leaked_enis == 0, name


def test_without_a_launch_pool_every_join_costs_an_assign(without: BenchResult) -> None:
    limit = without.join_limit
    assert limit is not None and limit.joins == NODES
    assert limit.joins_per_min == pytest.approx(2000, rel=0.1)
    assert [(a.action, a.calls_per_join) for a in limit.actions] == [(ASSIGN, 1.0)]
    for name, r in without.strategies.items():
        assert r.ec2_calls.get(ASSIGN, 0) >= NODES, name


def test_with_a_launch_pool_the_baselines_make_no_call_for_addresses(with_pool: BenchResult) -> None:
    # Every node's 10 pods fit the /28 it booted with: ipamd (setupENI) and the Cilium operator
    # (ResyncInterfacesAndIPs) take it from what EC2 lists, and never assign or unassign.
    limit = with_pool.join_limit
    assert limit is not None and limit.actions == []
    assert with_pool.lower_bound.mutating_calls == 0
    for name in ("vpc-cni", "cilium"):
        r = with_pool.strategies[name]
        assert r.mutating_calls == 0, name
        assert r.ec2_calls.get(ASSIGN, 0) == 0 and r.ec2_calls.get(UNASSIGN, 0) == 0, name


def test_warmpool_adopts_a_launch_pool_once_its_first_start_is_confirmed(with_pool: BenchResult) -> None:
    # Launch-pool nodes run the agent with WARMPOOL_ADOPT_LAUNCH_POOL on: its first start (no
    # checkpoint, no pod) holds what IMDS alone shows as offered, of unknown origin, and asks; the
    # allocator confirms (no ledger row, no release book, launched lately: docs/allocator.md,
    # "First starts") and the launch pool is the node's pool. Before the adoption the allocator
    # unassigned and replaced it: at least an Unassign and an Assign a node.
    w = with_pool.strategies["warmpool"]
    assert w.pods_ready == w.pods_requested
    assert w.ec2_calls.get(UNASSIGN, 0) == 0
    assert w.ec2_calls.get(ASSIGN, 0) == 0
    assert w.mutating_calls == 0
