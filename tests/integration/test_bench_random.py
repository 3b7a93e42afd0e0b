"""``warmpool bench --random``: the same seed gives the same figures, in one
process or several, and the worst scenario's file reruns as a scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import bench_main
from bench.random_scenarios import run_one, run_random
from bench.scenario import load_scenario


def test_same_seed_same_figures_whatever_the_jobs() -> None:
    one = run_random(3, 5, jobs=1, strategies=("warmpool", "vpc-cni"))
    two = run_random(3, 5, jobs=2, strategies=("warmpool", "vpc-cni"))
    assert [(o.name, o.figures) for o in one] == [(o.name, o.figures) for o in two]
    assert len({o.name for o in one}) == 3


def test_the_command_writes_the_worst_scenario_and_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    worst, out = tmp_path / "worst.yaml", tmp_path / "out.json"
    argv = [
        "--random",
        "2",
        "--seed",
        "5",
        "--strategy",
        "warmpool",
        "--quiet",
        "--worst",
        str(worst),
        "--json",
        str(out),
    ]
    assert bench_main(argv) == 0
    printed = capsys.readouterr().out
    assert "mutating calls / bound" in printed and str(worst) in printed
    data = json.loads(out.read_text())
    assert data["scenarios"] == 2 and data["worst_scenario"] == str(worst)
    assert set(data["summary"]["warmpool"]) >= {
        "calls_vs_bound",
        "makespan_vs_bound",
        "throttled_pct",
        "p99_time_to_ip_s",
    }
    assert load_scenario(worst).name in {s["name"] for s in data["per_scenario"]}


def test_a_scale_down_s_detached_enis_are_deleted_before_the_run_ends() -> None:
    # Seed 1, index 16: WARM_ENI_TARGET=1, ten nodes, ten pods deleted per node at 393 s: each
    # of seven nodes detaches its surplus ENI; the Delete right after the Detach finds it still
    # detaching, so the reconciler's GC marks it and deletes it gc_age_s (300 s) later. The run
    # settled 240 s after the mark and counted all seven as leaked; it now ends after the GC.
    o = run_one(1, 16, ("warmpool",))
    assert o.leaked == 0
    assert o.duplicates == 0


def test_a_node_whose_launch_ec2_refuses_joins_later_and_its_pods_get_addresses() -> None:
    """Seed 2's scenario 118 (``warmpool bench --random 200 --seed 2`` stopped there): a node of it
    joins while ``subnet-exhausted`` holds its subnet, EC2 refuses ``RunInstances``
    (``InsufficientFreeAddressesInSubnet``) and the run raised. Now the node is launched again
    every ``LAUNCH_RETRY_S`` (``bench.world.BenchWorld._join``) and its pods are created once it
    runs: every strategy readies every pod, none twice."""
    from bench.random_scenarios import draw
    from bench.runner import run_bench
    from bench.scenario import parse_scenario

    data = draw(2, 118)
    assert any(f["kind"] == "subnet-exhausted" for f in data["faults"]), "setup: the fault over a join"
    result, _ = run_bench(parse_scenario(data, data["name"]))
    for name, r in result.strategies.items():
        assert r.pods_ready == r.pods_requested, name
        assert r.duplicate_ips == 0, name
        assert any("launch refused (InsufficientFreeAddressesInSubnet)" in n for n in r.notes), (name, r.notes)
