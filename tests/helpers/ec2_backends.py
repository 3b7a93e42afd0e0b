"""The EC2 backends the semantic suite runs against.

- ``moto``: moto's EC2 in-process (the reference where moto matches AWS);
- ``fast``: the emulator's fast boto3-shaped client;
- ``boto3``: a real boto3 client served in-process via botocore hooks;
- ``http``: a real boto3 client against the emulator's EC2 Query server on 127.0.0.1.

Emulator backends run on a :class:`VirtualClock`. The EC2 tests open them
with :func:`open_backend` (tests/integration/conftest.py's ``any_backend``
fixture runs a test on each) and make a VPC, subnet and instance with
:func:`world`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.ec2.http import serve

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
            yield Backend(
                name,
                boto3.client(
                    "ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y", config=NO_RETRY
                ),
            )
        return
    clock = VirtualClock(1_700_000_000.0)
    emu = Ec2Emulator(clock, config or Ec2Config(), seed=0)
    if name == "fast":
        yield Backend(name, emu.client(), emu, clock)
    elif name == "boto3":
        yield Backend(name, emu.boto3_client(), emu, clock)
    else:
        with serve(emu) as srv:
            client = boto3.client(
                "ec2",
                endpoint_url=srv.url,
                region_name="us-east-1",
                aws_access_key_id="x",
                aws_secret_access_key="y",
                config=NO_RETRY,
            )
            yield Backend(name, client, emu, clock)


@dataclass
class Ec2World:
    vpc: str
    subnet: str
    instance: str


def world(ec2: Any, cidr: str = "10.0.0.0/24", instance_type: str = "m5.large") -> Ec2World:
    """A VPC, a subnet and one running instance, made through the API (same on every backend)."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    inst = ec2.run_instances(
        ImageId="ami-12345678", InstanceType=instance_type, MinCount=1, MaxCount=1, SubnetId=subnet
    )["Instances"][0]["InstanceId"]
    return Ec2World(vpc, subnet, inst)


def error_of(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    r = exc.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]
