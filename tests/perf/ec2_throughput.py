"""Calls per second the emulated EC2 serves, per way in, against moto in-process.

    .venv/bin/python tests/perf/ec2_throughput.py [--runs 3] [--scale 1.0]

Each run repeats one ENI life cycle (create with an address, attach, assign,
describe by instance, unassign, detach, delete: 7 calls) on a fresh world with
throttling off; the figure is the median over runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from botocore.config import Config

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.ec2.http import serve

CALLS_PER_CYCLE = 7


def cycle(ec2: Any, subnet: str, instance: str) -> None:
    eni = ec2.create_network_interface(SubnetId=subnet, SecondaryPrivateIpAddressCount=1)["NetworkInterface"]
    eid = eni["NetworkInterfaceId"]
    aid = ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=instance, DeviceIndex=1)["AttachmentId"]
    new = ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)
    ec2.describe_network_interfaces(Filters=[{"Name": "attachment.instance-id", "Values": [instance]}])
    ip = new["AssignedPrivateIpAddresses"][0]["PrivateIpAddress"] if new.get("AssignedPrivateIpAddresses") else None
    if ip:
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=[ip])
    else:  # moto lists every address; unassign the last one
        ips = [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"] if not a["Primary"]]
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=ips[-1:])
    ec2.detach_network_interface(AttachmentId=aid)
    ec2.delete_network_interface(NetworkInterfaceId=eid)


def setup(ec2: Any) -> tuple[str, str]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    sub = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/16", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    inst = ec2.run_instances(ImageId="ami-12345678", InstanceType="m5.large", MinCount=1, MaxCount=1, SubnetId=sub)[
        "Instances"
    ][0]["InstanceId"]
    return sub, inst


def _emu() -> Ec2Emulator:
    return Ec2Emulator(VirtualClock(), Ec2Config(throttling=False))


@contextmanager
def fast() -> Iterator[Any]:
    yield _emu().client()


@contextmanager
def hooks() -> Iterator[Any]:
    yield _emu().boto3_client()


@contextmanager
def http() -> Iterator[Any]:
    with serve(_emu()) as srv:
        yield boto3.client(
            "ec2",
            endpoint_url=srv.url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="y",
            config=Config(retries={"total_max_attempts": 1}),
        )


@contextmanager
def moto() -> Iterator[Any]:
    from moto import mock_aws

    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")


BACKENDS: dict[str, tuple[Callable[[], Any], int]] = {
    "fast client": (fast, 3000),
    "boto3 in-process (hooks)": (hooks, 300),
    "HTTP (boto3 -> 127.0.0.1)": (http, 100),
    "moto in-process": (moto, 60),
}


def measure(factory: Callable[[], Any], cycles: int) -> float:
    with factory() as ec2:
        subnet, inst = setup(ec2)
        cycle(ec2, subnet, inst)  # warm up
        t0 = time.perf_counter()
        for _ in range(cycles):
            cycle(ec2, subnet, inst)
        return cycles * CALLS_PER_CYCLE / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the number of cycles")
    args = ap.parse_args()
    for name, (factory, cycles) in BACKENDS.items():
        n = max(1, int(cycles * args.scale))
        rates = [measure(factory, n) for _ in range(args.runs)]
        print(f"{name:28s} {statistics.median(rates):10,.0f} calls/s  (median of {args.runs}, {n * 7} calls each)")


if __name__ == "__main__":
    main()
