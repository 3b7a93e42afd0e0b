"""``warmpool bench --random``: the same seed gives the same figures, in one
process or several, and the worst scenario's file reruns as a scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import bench_main
from bench.random_scenarios import run_random
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
