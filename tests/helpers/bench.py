"""Small bench scenarios, and bench output without its wall-clock fields."""

from __future__ import annotations

from typing import Any

from bench.scenario import Scenario, parse_scenario


def small(
    strategies: list[str], env: dict[str, Any] | None = None, nodes: int = 1, pods: int = 5, **extra: Any
) -> Scenario:
    d: dict[str, Any] = {
        "name": "small",
        "seed": 3,
        "duration_s": 900,
        "strategies": strategies,
        "cluster": {"name": "demo", "env": env or {"WARM_IP_TARGET": 1}},
        "subnets": [{"id": "subnet-a", "az": "us-east-1a", "cidr": "10.0.0.0/16"}],
        "node_groups": [{"name": "ng", "instance_type": "m5.4xlarge", "count": nodes}],
        "workload": [{"at_s": 30, "node_group": "ng", "add_pods_per_node": pods}],
    }
    d.update(extra)
    return parse_scenario(d)


def without_wall(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: without_wall(v) for k, v in obj.items() if k != "wall_s"}
    if isinstance(obj, list):
        return [without_wall(v) for v in obj]
    return obj
