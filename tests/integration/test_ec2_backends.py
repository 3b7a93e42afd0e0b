"""The EC2 backends the semantic suite runs against, and their smoke tests.

- ``moto``: moto's EC2 in-process (the reference where moto matches AWS);
- ``fast``: the emulator's fast boto3-shaped client;
- ``boto3``: a real boto3 client served in-process via botocore hooks;
- ``http``: a real boto3 client against the emulator's EC2 Query server on 127.0.0.1.

Emulator backends run on a :class:`VirtualClock`. Other test modules import
:func:`backend` (a fixture factory) and :func:`world` from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sim.clock import VirtualClock
from sim.ec2 import Ec2Config, Ec2Emulator
from sim.ec2.http import serve

EMULATED = ("fast", "boto3", "http")
ALL = ("moto", *EMULATED)
NO_RETRY = Config(retries={"total_max_attempts": 1})


@dataclass
class Backend:
    name: str
    ec2: Any
    emu: Ec2Emulator | None = None
    clock: VirtualClock | None = None


def open_backend(name: str, config: Ec2Config | None = None) -> Iterator[Backend]:
    if name == "moto":
        from moto import mock_aws

        with mock_aws():
            yield Backend(name, boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                                             aws_secret_access_key="y", config=NO_RETRY))
        return
    clock = VirtualClock(1_700_000_000.0)
    emu = Ec2Emulator(clock, config or Ec2Config(), seed=0)
    if name == "fast":
        yield Backend(name, emu.client(), emu, clock)
    elif name == "boto3":
        yield Backend(name, emu.boto3_client(), emu, clock)
    else:
        with serve(emu) as srv:
            client = boto3.client("ec2", endpoint_url=srv.url, region_name="us-east-1", aws_access_key_id="x",
                                  aws_secret_access_key="y", config=NO_RETRY)
            yield Backend(name, client, emu, clock)


@dataclass
class World:
    vpc: str
    subnet: str
    instance: str


def world(ec2: Any, cidr: str = "10.0.0.0/24", instance_type: str = "m5.large") -> World:
    """A VPC, a subnet and one running instance, made through the API (same on every backend)."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    inst = ec2.run_instances(ImageId="ami-12345678", InstanceType=instance_type, MinCount=1, MaxCount=1,
                             SubnetId=subnet)["Instances"][0]["InstanceId"]
    return World(vpc, subnet, inst)


def error_of(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    r = exc.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture(params=ALL)
def any_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from open_backend(request.param)


@pytest.fixture(params=EMULATED)
def emulated(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from open_backend(request.param)


def test_world_has_primary_eni_at_device_zero(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    inst = ec2.describe_instances(InstanceIds=[w.instance])["Reservations"][0]["Instances"][0]
    assert [n["Attachment"]["DeviceIndex"] for n in inst["NetworkInterfaces"]] == [0]
    assert inst["InstanceType"] == "m5.large"
    assert inst["Placement"]["AvailabilityZone"] == "us-east-1a"


def test_boto3_paths_validate_parameters_like_boto3() -> None:
    for b in open_backend("boto3"):
        with pytest.raises(Exception, match="Parameter validation failed"):
            b.ec2.attach_network_interface(NetworkInterfaceId="eni-1", InstanceId="i-1", DeviceIndex="x")
