"""``cluster.primary_eni_tagging: launch-template``: the nodes launch with the primary ENI's tag
(a launch template's ``TagSpecifications`` for ``network-interface``), so warmpool makes no
first-contact ``CreateTags``; the random draw never sets it."""

from __future__ import annotations

from typing import Any

import pytest

from bench.random_scenarios import draw
from bench.runner import run_bench
from bench.scenario import ScenarioError, parse_scenario
from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from warmpool import names

TAG = {names.TAG_PRIMARY_ENI_OF: "c"}


def emulator() -> Ec2Emulator:
    emu = Ec2Emulator(VirtualClock(), Ec2Config(), seed=1)
    vpc = emu.add_vpc("10.0.0.0/16")
    emu.add_subnet(az="us-east-1a", cidr="10.0.0.0/24", vpc_id=vpc, subnet_id="subnet-a")
    return emu


def primary_tags(emu: Ec2Emulator, iid: str) -> dict[str, str]:
    out = emu.client().describe_instances(InstanceIds=[iid])
    ni = next(
        n for n in out["Reservations"][0]["Instances"][0]["NetworkInterfaces"] if n["Attachment"]["DeviceIndex"] == 0
    )
    enis = emu.client().describe_network_interfaces(NetworkInterfaceIds=[ni["NetworkInterfaceId"]])
    return {t["Key"]: t["Value"] for t in enis["NetworkInterfaces"][0].get("TagSet", [])}


def test_the_emulator_launches_the_primary_eni_with_the_tags_asked_for() -> None:
    emu = emulator()
    assert primary_tags(emu, emu.run_instance("m5.large", "subnet-a", eni_tags=TAG)) == TAG
    assert primary_tags(emu, emu.run_instance("m5.large", "subnet-a")) == {}
    out = emu.client().run_instances(
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.large",
        SubnetId="subnet-a",
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": k, "Value": v} for k, v in TAG.items()]},
            {"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "n1"}]},
        ],
    )
    assert primary_tags(emu, out["Instances"][0]["InstanceId"]) == TAG


def _run(tagging: str | None) -> Any:
    data = draw(1, 20)  # eleven nodes joining one at a time: eleven first-contact tags by default
    if tagging is not None:
        data["cluster"]["primary_eni_tagging"] = tagging
    result, _ = run_bench(parse_scenario(data, data["name"]), strategies=["warmpool"])
    return result.strategies["warmpool"]


def test_with_the_tag_at_launch_warmpool_makes_no_first_contact_call_and_serves_the_same_pods() -> None:
    default, at_launch = _run(None), _run("launch-template")
    first_contact = {k: v for k, v in default.calls_by_cause.items() if "first-contact" in k}
    assert sum(first_contact.values()) == 11
    assert not any("first-contact" in k for k in at_launch.calls_by_cause)
    assert at_launch.ec2_calls.get("CreateTags", 0) == 0
    assert at_launch.mutating_calls == default.mutating_calls - 11
    assert (at_launch.pods_ready, at_launch.makespan_s) == (default.pods_ready, default.makespan_s)
    assert at_launch.duplicate_ips == 0


def test_the_draw_never_sets_it_and_the_key_takes_only_the_two_values() -> None:
    assert all("primary_eni_tagging" not in draw(1, i)["cluster"] for i in range(50))
    data = draw(1, 20)
    data["cluster"]["primary_eni_tagging"] = "user-data"
    with pytest.raises(ScenarioError, match="primary_eni_tagging"):
        parse_scenario(data, "x.yaml")
