"""``node_groups[].launch_pool`` (issue 25): the scenario key and its errors, the emulated
EC2 launching instances with addresses on the primary ENI, the bounds starting from them,
and the physical limit of the buckets for a scenario's joins (``bench/joins.py``)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from bench.joins import describe, join_limit
from bench.lower_bound import lower_bound, online_lower_bound
from bench.scenario import ScenarioError, parse_scenario
from bench.workload import expand
from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.ec2.errors import Ec2Error


def data(env: dict[str, Any], launch: dict[str, int] | None, *, count: int = 4, pods: int = 10, **group: Any) -> Any:
    ng: dict[str, Any] = {"name": "ng", "instance_type": "m5.xlarge", "count": count, **group}
    if launch is not None:
        ng["launch_pool"] = launch
    return {
        "name": "lp",
        "duration_s": 600,
        "cluster": {"name": "c", "env": env},
        "subnets": [{"id": "subnet-a", "az": "us-east-1a", "cidr": "10.0.0.0/16"}],
        "node_groups": [ng],
        "workload": [{"at_s": 0, "node_group": "ng", "add_pods_per_node": pods}] if pods else [],
    }


PREFIX = {"ENABLE_PREFIX_DELEGATION": True, "WARM_IP_TARGET": 4, "MINIMUM_IP_TARGET": 16}


@pytest.mark.parametrize(
    ("env", "launch", "group", "expected"),
    [
        (PREFIX, {}, {}, "node_groups[0].launch_pool: give exactly one of addresses, prefixes (> 0)"),
        (PREFIX, {"prefixes": 1, "addresses": 2}, {}, "give exactly one of addresses, prefixes"),
        (PREFIX, {"prefixes": -1}, {}, "node_groups[0].launch_pool.prefixes: must be >= 0"),
        (PREFIX, {"blocks": 1}, {}, "node_groups[0].launch_pool.blocks: unknown field"),
        ({"WARM_IP_TARGET": 1}, {"prefixes": 1}, {}, "launch_pool.prefixes: the cluster is not in prefix mode"),
        (PREFIX, {"addresses": 3}, {}, "launch_pool.addresses: the cluster is in prefix mode: give prefixes"),
        ({"WARM_IP_TARGET": 1}, {"addresses": 15}, {}, "m5.xlarge's primary ENI holds at most 14"),
        ({"WARM_IP_TARGET": 1}, {"addresses": 2}, {"instance_type": "m4.large"}, None),
    ],
)
def test_launch_pool_errors_name_the_field(
    env: dict[str, Any], launch: dict[str, int], group: dict[str, Any], expected: str | None
) -> None:
    d = data(env, launch, **group)
    if expected is None:
        s = parse_scenario(d, "x.yaml")
        assert s.node_groups[0].launch_pool is not None
        return
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(d, "x.yaml")
    assert expected in str(exc.value)
    assert str(exc.value).startswith("x.yaml: ")


def test_prefixes_need_a_nitro_type() -> None:
    d = data({"ENABLE_PREFIX_DELEGATION": True}, {"prefixes": 1}, instance_type="m4.large")
    with pytest.raises(ScenarioError, match="cannot hold prefixes"):
        parse_scenario(d, "x.yaml")


def test_custom_networking_refuses_a_launch_pool() -> None:
    d = data({"WARM_IP_TARGET": 1}, {"addresses": 2})
    d["strategies"] = ["warmpool", "vpc-cni"]
    d["cluster"]["custom_network"] = {"us-east-1a": {"subnets": ["subnet-a"]}}
    with pytest.raises(ScenarioError, match="primary ENI serves no pod"):
        parse_scenario(d, "x.yaml")


def emulator() -> Ec2Emulator:
    emu = Ec2Emulator(VirtualClock(), Ec2Config(), seed=1)
    vpc = emu.add_vpc("10.0.0.0/16")
    emu.add_subnet(az="us-east-1a", cidr="10.0.0.0/24", vpc_id=vpc, subnet_id="subnet-a")
    return emu


def primary(emu: Ec2Emulator, iid: str) -> dict[str, Any]:
    out = emu.client().describe_instances(InstanceIds=[iid])
    nis = out["Reservations"][0]["Instances"][0]["NetworkInterfaces"]
    return next(n for n in nis if n["Attachment"]["DeviceIndex"] == 0)


def test_the_emulator_launches_with_addresses_or_prefixes_on_the_primary_eni() -> None:
    emu = emulator()
    with_ips = emu.run_instance("m5.xlarge", "subnet-a", secondary_count=5)
    with_pfx = emu.run_instance("m5.xlarge", "subnet-a", prefix_count=2)
    ni = primary(emu, with_ips)
    assert sum(1 for a in ni["PrivateIpAddresses"] if not a["Primary"]) == 5
    ni = primary(emu, with_pfx)
    prefixes = [p["Ipv4Prefix"] for p in ni["Ipv4Prefixes"]]
    assert len(prefixes) == 2
    assert all(ipaddress.IPv4Network(p).prefixlen == 28 for p in prefixes)
    # what it launched with counts against the ENI's slots, as an Assign's would
    with pytest.raises(Ec2Error, match=r"limit for instance type m5\.xlarge"):
        emu.run_instance("m5.xlarge", "subnet-a", secondary_count=15)


def test_run_instances_takes_the_launch_template_counts_of_the_primary_interface() -> None:
    emu = emulator()
    out = emu.client().run_instances(
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.xlarge",
        NetworkInterfaces=[{"DeviceIndex": 0, "SubnetId": "subnet-a", "Ipv4PrefixCount": 1}],
    )
    iid = out["Instances"][0]["InstanceId"]
    assert len(primary(emu, iid)["Ipv4Prefixes"]) == 1
    out = emu.client().run_instances(
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.xlarge",
        NetworkInterfaces=[{"DeviceIndex": 0, "SubnetId": "subnet-a", "SecondaryPrivateIpAddressCount": 3}],
    )
    iid = out["Instances"][0]["InstanceId"]
    assert sum(1 for a in primary(emu, iid)["PrivateIpAddresses"] if not a["Primary"]) == 3


def test_the_bounds_start_from_the_launch_pool() -> None:
    # 10 pods + 4 warm, at least 16: one /28 on the primary ENI; launched with it, no call at all
    without = parse_scenario(data(PREFIX, None))
    with_lp = parse_scenario(data(PREFIX, {"prefixes": 1}))
    assert lower_bound(without).calls_by_action == {"AssignPrivateIpAddresses": 4}
    assert online_lower_bound(without).mutating_calls == 4
    assert lower_bound(with_lp).mutating_calls == 0
    assert online_lower_bound(with_lp).mutating_calls == 0
    # 20 pods outgrow the launched /28: the top-up assign is still owed
    more = parse_scenario(data(PREFIX, {"prefixes": 1}, pods=20))
    assert lower_bound(more).calls_by_action == {"AssignPrivateIpAddresses": 4}
    # launched with more than the targets keep at the end: the surplus goes (one unassign a node)
    big = parse_scenario(data(PREFIX, {"prefixes": 4}, pods=0))
    assert lower_bound(big).calls_by_action == {"UnassignPrivateIpAddresses": 4}


def test_join_limit_is_the_refill_over_the_calls_a_join_needs() -> None:
    # 600 joins over 60 s (10/s), one assign each, against 5/s and a capacity of 100
    s = parse_scenario(data(PREFIX, None, count=600, join_spread_s=60))
    limit = join_limit(s)
    assert limit is not None
    (a,) = limit.actions
    assert a.action == "AssignPrivateIpAddresses"
    assert a.calls_per_join == 1
    assert a.refill_per_s == 5 and a.max_joins_per_min == 300
    assert a.needed_per_s == pytest.approx(600 / limit.window_s, rel=1e-3)
    # the fluid bucket: (600 - 100) / 5 = 100 s at the earliest, whatever the allocator
    assert a.last_call_no_earlier_s is not None and 100 <= a.last_call_no_earlier_s < 101
    assert "at most 300 joins/min" in "\n".join(describe(limit))
    # other callers' load takes from the refill
    s = parse_scenario(
        {
            **data(PREFIX, None, count=600, join_spread_s=60),
            "account": {"background_load": {"AssignPrivateIpAddresses": 2}},
        }
    )
    got = join_limit(s)
    assert got is not None and got.actions[0].max_joins_per_min == 180


def test_join_limit_with_a_launch_pool_needs_no_mutating_call() -> None:
    s = parse_scenario(data(PREFIX, {"prefixes": 1}, count=600, join_spread_s=60))
    limit = join_limit(s)
    assert limit is not None and limit.actions == []
    assert "no mutating call is needed" in describe(limit)[0]


def test_join_limit_is_none_when_every_node_joins_at_once() -> None:
    assert join_limit(parse_scenario(data(PREFIX, None))) is None


def test_expanded_nodes_carry_their_launch_pool() -> None:
    ex = expand(parse_scenario(data(PREFIX, {"prefixes": 1})))
    assert {(n.launch_prefixes, n.launch_addresses, n.launch_units) for n in ex.nodes} == {(1, 0, 1)}
