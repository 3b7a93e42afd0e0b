"""The scenario file: shipped scenarios parse (faults.yaml: the design's example); wrong fields are named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]


def base() -> dict[str, Any]:
    return {
        "name": "t",
        "seed": 1,
        "duration_s": 600,
        "cluster": {"name": "demo", "env": {"WARM_IP_TARGET": 1}},
        "subnets": [{"id": "subnet-a", "az": "us-east-1a", "cidr": "10.0.0.0/16"}],
        "node_groups": [{"name": "ng1", "instance_type": "m5.large", "count": 2}],
        "workload": [{"at_s": 10, "node_group": "ng1", "add_pods_per_node": 3}],
    }


def test_every_shipped_scenario_is_valid() -> None:
    files = sorted((ROOT / "scenarios").glob("*.yaml"))
    assert len(files) >= 8
    for f in files:
        load_scenario(f)


def test_design_example_with_every_fault_parses() -> None:
    s = load_scenario(ROOT / "scenarios" / "faults.yaml")
    assert {f.kind for f in s.faults} == {
        "throttle-storm",
        "lambda-crash",
        "duplicate-delivery",
        "attach-failure",
        "subnet-exhausted",
    }


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["node_groups"][0].update(count=0), "x.yaml: node_groups[0].count: must be > 0"),
        (lambda d: d["node_groups"][0].update(colour="red"), "x.yaml: node_groups[0].colour: unknown field"),
        (
            lambda d: d["node_groups"][0].update(instance_type="m9.huge"),
            "node_groups[0].instance_type: unknown instance type",
        ),
        (lambda d: d["workload"][0].update(node_group="nope"), "workload[0].node_group: no node group 'nope'"),
        (lambda d: d["cluster"]["env"].update(WARM_IP_TARGETS=1), "cluster.env.WARM_IP_TARGETS: unknown field"),
        (lambda d: d.pop("duration_s"), "x.yaml: duration_s: required"),
        (lambda d: d["workload"][0].update(delete_pods_per_node=1), "exactly one of add_pods_per_node"),
        (lambda d: d.update(strategies=["warmpool", "flannel"]), "x.yaml: strategies[1]:"),
        (
            lambda d: d.update(faults=[{"at_s": 0, "duration_s": 5, "kind": "subnet-exhausted", "rate": 1}]),
            "subnet-exhausted needs a subnet",
        ),
        (lambda d: d.update(faults=[{"at_s": 0, "duration_s": 5, "kind": "lambda-crash", "rate": 2}]), "must be <= 1"),
        (lambda d: d.update(account={"budget_fraction": 1.5}), "x.yaml: account.budget_fraction: must be <= 1"),
    ],
)
def test_wrong_field_is_named(mutate: Any, expected: str) -> None:
    d = base()
    mutate(d)
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(d, "x.yaml")
    assert expected in str(exc.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump({**base(), "node_groups": [{"name": "ng1", "instance_type": "m5.large", "count": -1}]}))
    with pytest.raises(ScenarioError, match=r"bad.yaml: node_groups\[0\].count: must be > 0"):
        load_scenario(p)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_several_clusters_need_each_group_to_name_one() -> None:
    d = base()
    d.pop("cluster")
    d["clusters"] = [{"name": "a"}, {"name": "b"}]
    with pytest.raises(ScenarioError, match=r"node_groups\[0\]\.cluster: required"):
        parse_scenario(d, "x.yaml")
    d["node_groups"][0]["cluster"] = "b"
    assert parse_scenario(d).cluster_of(parse_scenario(d).node_groups[0]).name == "b"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(ec2={"single_placement": "random"}), "x.yaml: ec2.single_placement:"),
        (
            lambda d: d["subnets"][0].update(cidr="10.0.0.0/24", foreign_addresses=240),
            "foreign_addresses: more than 90% of what 10.0.0.0/24 holds",
        ),
        (lambda d: d["subnets"][0].update(foreign_addresses=-1), "subnets[0].foreign_addresses"),
        (lambda d: d["cluster"].update(named_placement="sometimes"), "cluster.named_placement"),
    ],
)
def test_placement_fields_are_checked(mutate: Any, expected: str) -> None:
    d = base()
    mutate(d)
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(d, "x.yaml")
    assert expected in str(exc.value)


def test_placement_fields_default_to_before() -> None:
    s = parse_scenario(base(), "x.yaml")
    assert s.ec2.single_placement == "packed"
    assert s.subnets[0].foreign_addresses == 0
    assert s.cluster is not None and s.cluster.named_placement is False
    frag = load_scenario(ROOT / "scenarios" / "prefix-fragmented.yaml")
    assert frag.ec2.single_placement == "scattered" and frag.subnets[0].foreign_addresses == 300
    assert frag.cluster is not None and frag.cluster.named_placement
