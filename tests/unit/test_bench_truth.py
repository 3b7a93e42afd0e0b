"""The bench tells the truth about impossible and unfinished runs: a workload beyond a
node's max-pods is found before the run, and a run that ended with pods still waiting is
marked "did not finish" in the table and the plot, with no ratio against a bound."""

from __future__ import annotations

from typing import Any

from bench.feasibility import over_ceiling
from bench.output import BenchResult, LowerBound, Percentiles, Ratios, StrategyResult
from bench.plot import failed_per_second, title
from bench.report import DID_NOT_FINISH, table
from bench.runner import Series
from bench.workload import expand
from tests.helpers.bench import small


def _scenario(itype: str, steps: list[dict[str, Any]], env: dict[str, Any] | None = None) -> Any:
    s = small(["warmpool"], env=env, nodes=2)
    data = s.model_dump()
    data["node_groups"][0]["instance_type"] = itype
    data["workload"] = steps
    return type(s).model_validate(data)


def test_more_live_pods_than_max_pods_is_found_before_the_run() -> None:
    (found,) = over_ceiling(expand(_scenario("m5.large", [{"at_s": 10, "node_group": "ng", "add_pods_per_node": 30}])))
    assert (found.group, found.peak_pods, found.ceiling) == ("ng", 30, 29)
    assert "max-pods is 29" in found.describe()
    assert (
        over_ceiling(expand(_scenario("m5.large", [{"at_s": 10, "node_group": "ng", "add_pods_per_node": 29}]))) == []
    )


def test_pods_deleted_before_more_come_free_their_slots() -> None:
    steps = [
        {"at_s": 10, "node_group": "ng", "add_pods_per_node": 20},
        {"at_s": 100, "node_group": "ng", "delete_pods_per_node": 15},
        {"at_s": 200, "node_group": "ng", "add_pods_per_node": 20},
    ]
    assert over_ceiling(expand(_scenario("m5.large", steps))) == []  # 25 at most
    steps[1]["delete_pods_per_node"] = 5  # 35 alive after the second add
    (found,) = over_ceiling(expand(_scenario("m5.large", steps)))
    assert found.peak_pods == 35 and found.at_s >= 200


def test_prefix_mode_raises_the_ceiling_as_max_pods_does() -> None:
    steps = [{"at_s": 10, "node_group": "ng", "add_pods_per_node": 100}]
    assert over_ceiling(expand(_scenario("m5.large", steps))) != []
    assert over_ceiling(expand(_scenario("m5.large", steps, env={"ENABLE_PREFIX_DELEGATION": True}))) == []


def _result(*, finished: bool) -> BenchResult:
    lb = LowerBound(mutating_calls=10, makespan_s=20.0)
    r = StrategyResult(
        strategy="vpc-cni",
        pods_requested=30,
        pods_ready=30 if finished else 12,
        time_to_ip_s=Percentiles(p50=1.0, p99=2.0),
        makespan_s=40.0 if finished else None,
        finished=finished,
        ec2_calls={"AssignPrivateIpAddresses": 5},
        mutating_calls=5,
        throttled_calls=2,
        calls_per_ip=0.4,
        idle_ips_end=0,
        idle_ips_target=0,
        final_nodes=[],
        duplicate_ips=0,
        leaked_enis=0,
        lower_bound=lb,
        ratios=Ratios(),
        settled_at_s=900.0,
        wall_s=0.1,
    )
    return BenchResult(scenario="s", seed=1, duration_s=900, lower_bound=lb, strategies={"vpc-cni": r}, wall_s=0.1)


def test_a_run_that_did_not_finish_says_so_with_no_ratio_in_the_table() -> None:
    text = table(_result(finished=False))
    row = next(line for line in text.splitlines() if line.startswith("vpc-cni "))
    assert DID_NOT_FINISH in row and "0.50x" not in row  # 5 calls for 12 of 30 pods is no saving
    assert "vpc-cni: did not finish" in text and "12/30" in text
    finished = next(line for line in table(_result(finished=True)).splitlines() if line.startswith("vpc-cni "))
    assert DID_NOT_FINISH not in finished and "0.50x" in finished


def test_the_plots_title_says_did_not_finish_instead_of_a_ratio() -> None:
    res = _result(finished=False)
    t = title("vpc-cni", res.strategies["vpc-cni"], res)
    assert "DID NOT FINISH" in t and "LB" not in t and "12/30" in t
    res = _result(finished=True)
    assert "0.50x LB" in title("vpc-cni", res.strategies["vpc-cni"], res)


def test_failed_calls_are_counted_apart_from_throttled_ones() -> None:
    s = Series(call_log=[(1.2, "A", "ok"), (1.5, "A", "throttled"), (1.7, "A", "InternalError"), (3.0, "B", "X")])
    assert failed_per_second(s) == {1: 1, 3: 1}
