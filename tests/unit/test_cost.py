"""``warmpool cost``: the bill's parts add up, grow with the nodes, bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warmpool_cli import cost
from warmpool_cli.main import main


def test_parts_add_up_and_scale_with_the_cluster() -> None:
    small, big = cost.estimate(cost.Workload(nodes=1000)), cost.estimate(cost.Workload(nodes=10_000))
    for out in (small, big):
        assert set(out) >= {"nodes", "monthly_usd", "by_service", "assumptions"}
        assert set(out["by_service"]) == {"lambda", "sqs", "dynamodb", "cloudwatch"}
        assert out["monthly_usd"] == pytest.approx(sum(out["by_service"].values()), abs=0.02)
    # SQS is per request: ten times the nodes, ten times the requests less the mapping's fixed polls
    assert big["by_service"]["sqs"] == pytest.approx(10 * small["by_service"]["sqs"], rel=0.01)
    # the metrics and alarms are per cluster, not per node
    assert big["usage"]["cloudwatch_metrics"] == small["usage"]["cloudwatch_metrics"]


def test_more_churn_or_faster_reports_cost_more() -> None:
    base = cost.estimate(cost.Workload(nodes=1000))["monthly_usd"]
    assert cost.estimate(cost.Workload(nodes=1000, churn_per_hour=2.0))["monthly_usd"] > base
    assert cost.estimate(cost.Workload(nodes=1000, report_every_s=30))["monthly_usd"] > base


def test_json_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.json"
    assert main(["cost", "--nodes", "100", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["nodes"] == 100 and data["monthly_usd"] > 0
    assert "$" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--nodes", "0"],
        ["--nodes", "x"],
        ["--nodes", "10", "--churn", "-1"],
        ["--nodes", "10", "--report-every", "0"],
    ],
)
def test_bad_input_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["cost", *argv])
    assert exc.value.code == 2
