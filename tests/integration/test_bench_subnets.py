"""The subnet scenarios of issue 24 end to end: scenarios/custom-networking.yaml (pods only in
their zone's mapped subnet, never on a primary ENI, for warmpool and the vpc-cni model) and
scenarios/two-subnets-unequal.yaml (the nodes' own subnet too small; two tagged subnets of
unequal size found by tag). Each strategy is run in its own world and the pods' addresses are
read back from it (which subnet holds each)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from bench.lower_bound import lower_bound
from bench.runner import run_bench, strategy_class
from bench.scenario import ScenarioError, load_scenario, parse_scenario
from bench.workload import expand
from bench.world import BenchWorld

ROOT = Path(__file__).resolve().parents[2]


def _run(name: str, strategy: str) -> tuple[BenchWorld, dict[str, str]]:
    """The world after the run, and the subnet (scenario id) of every pod's address."""
    scenario = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    expanded = expand(scenario)
    lower_bound(scenario, expanded)
    world = BenchWorld(scenario, expanded, strategy)
    strat = strategy_class(strategy)(world)
    strat.start()
    world.run(busy=strat.busy)
    nets = {s.id: ipaddress.IPv4Network(s.cidr) for s in scenario.subnets}
    where = {
        pod: next(sid for sid, net in nets.items() if ipaddress.IPv4Address(ip) in net)
        for pod, ip in world.book.ip_of.items()
    }
    return world, where


def _primary_addresses(world: BenchWorld) -> set[str]:
    out: set[str] = set()
    for e in world.emu.enis.values():
        if e.attachment is not None and e.attachment.device_index == 0:
            out.update(e.secondary)
            for p in e.prefixes:
                out.update(str(a) for a in ipaddress.IPv4Network(p))
    return out


@pytest.mark.parametrize("strategy", ["warmpool", "vpc-cni"])
def test_custom_networking_puts_every_pod_in_its_zones_subnet_and_none_on_a_primary(strategy: str) -> None:
    world, where = _run("custom-networking", strategy)
    book = world.book
    assert len(book.ready_at) == len(book.created) > 0 and book.duplicates == 0
    zone_subnet = {"a": "subnet-podsa", "b": "subnet-podsb"}
    for pod, sid in where.items():
        group = world.nodes[book.node_of[pod]].spec.group
        assert sid == zone_subnet[group], (pod, sid)
    assert not _primary_addresses(world) & set(book.ip_of.values())


@pytest.mark.parametrize("strategy", ["warmpool", "vpc-cni"])
def test_tagged_subnets_take_the_pods_the_nodes_own_subnet_cannot(strategy: str) -> None:
    world, where = _run("two-subnets-unequal", strategy)
    book = world.book
    assert len(book.ready_at) == len(book.created) > 0 and book.duplicates == 0
    used = {sid: sum(1 for s in where.values() if s == sid) for sid in ("subnet-nodes", "subnet-big", "subnet-small")}
    assert used["subnet-big"] > 0, used  # the roomiest tagged subnet is used
    assert used["subnet-nodes"] + used["subnet-big"] + used["subnet-small"] == len(where)


BASE = {
    "name": "x",
    "duration_s": 60,
    "cluster": {"name": "demo"},
    "subnets": [
        {"id": "subnet-a", "az": "us-east-1a", "cidr": "10.0.0.0/24"},
        {"id": "subnet-p", "az": "us-east-1a", "cidr": "10.0.4.0/22"},
        {"id": "subnet-q", "az": "us-east-1b", "cidr": "10.0.8.0/22"},
    ],
    "node_groups": [{"name": "ng", "instance_type": "m5.large", "count": 1}],
}


@pytest.mark.parametrize(
    ("custom", "strategies", "message"),
    [
        ({"us-east-1a": {"subnets": ["subnet-z"]}}, ["warmpool"], "no subnet 'subnet-z'"),
        ({"us-east-1a": {"subnets": ["subnet-q"]}}, ["warmpool"], "subnet-q is in us-east-1b"),
        ({"us-east-1a": {"subnets": ["subnet-p"]}}, ["warmpool", "cilium"], "the cilium model has none"),
        ({"us-east-1a": {"subnets": []}}, ["warmpool"], "subnets"),
    ],
)
def test_a_bad_custom_network_is_refused_naming_what(custom: dict, strategies: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({**BASE, "strategies": strategies, "cluster": {"name": "demo", "custom_network": custom}})


def test_warmpool_asks_the_full_nodes_subnet_for_nothing_and_beats_the_vpc_cni_model() -> None:
    # The nodes' own /23 cannot hold every primary ENI's addresses: an Assign asks no more than
    # the subnet's cached free count (before: 244 of 434 Assigns refused, p99 time to IP 94 s).
    # A few refusals remain where the cached count is stale (the cache lives 30 s).
    result, _ = run_bench(load_scenario(ROOT / "scenarios" / "two-subnets-unequal.yaml"))
    w, v = result.strategies["warmpool"], result.strategies["vpc-cni"]
    assigns = w.ec2_calls["AssignPrivateIpAddresses"]
    assert w.ec2_errors.get("AssignPrivateIpAddresses", 0) <= 0.1 * assigns, (w.ec2_errors, assigns)
    assert w.pods_ready == w.pods_requested and w.duplicate_ips == 0
    assert w.makespan_s is not None and v.makespan_s is not None and w.makespan_s < v.makespan_s
