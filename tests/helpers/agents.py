"""Running a node agent in a test: as a real process (started, waited for) or
in-process with pods that are only recorded."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from node_agent.hostnet import HostWiring, PodNet
from warmpool.messages import AllocationResult, PoolReport, parse_report


class RecordingPods:
    def __init__(self) -> None:
        self.wired: dict[tuple[str, str], str] = {}

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        self.wired[(container_id, ifname)] = ip
        return PodNet("eni0", "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        self.wired.pop((container_id, ifname), None)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return []

    def host_wiring(self) -> HostWiring | None:
        return None  # nothing recorded for a rebuild (WiredPods in agent_world.py reads it back)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def moto_client(service: str, endpoint: str) -> Any:
    """A boto3 client of ``service`` for moto's server at ``endpoint`` (test credentials)."""
    import boto3

    return boto3.client(
        service,
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def ec2_node(endpoint: str) -> tuple[str, str, str]:
    """An m5.large in the EC2 at ``endpoint`` (moto's server) with a second ENI attached at
    device index 1: (instance id, primary ENI id, second ENI id). The agent's tag look-up
    (``node_agent/unmanaged.py``) asks EC2 for the instance's ENIs; an ENI EC2 does not list
    stays unknown (held), so a fake IMDS must serve these ids."""
    ec2 = moto_client("ec2", endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
        for cidr in ("10.0.0.0/24", "10.0.1.0/24")
    ]
    inst = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.large", SubnetId=subnets[0]
    )["Instances"][0]
    second = ec2.create_network_interface(SubnetId=subnets[1])["NetworkInterface"]["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=second, InstanceId=inst["InstanceId"], DeviceIndex=1)
    return inst["InstanceId"], inst["NetworkInterfaces"][0]["NetworkInterfaceId"], second


def start_agent(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        [sys.executable, "-c", "from node_agent.agent import main; main(['run'])"],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def wait_ready(metrics: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://{metrics}/readyz", timeout=1).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("agent not ready")


def newest_offer(sqs: Any, reports_url: str, timeout: float = 30.0) -> PoolReport:
    """The newest report on the reports queue that offers addresses back (the queue is drained)."""
    deadline = time.monotonic() + timeout
    offering: list[PoolReport] = []
    while time.monotonic() < deadline:
        msgs = sqs.receive_message(QueueUrl=reports_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        for m in msgs:
            r = parse_report(m["Body"])
            if r.release:
                offering.append(r)
            sqs.delete_message(QueueUrl=reports_url, ReceiptHandle=m["ReceiptHandle"])
        if offering and not msgs:
            break
    assert offering, "no report offered anything back"
    return max(offering, key=lambda r: r.seq)


def hand_back(sqs: Any, reports_url: str, cluster: str, timeout: float = 30.0) -> PoolReport:
    """What the allocator answers when a node needs the addresses it offers: ``assigned`` for
    each offer, replying to the newest report that offered them (a started agent with no
    checkpoint holds its free addresses as offered until such an answer: docs/agent.md)."""
    offer = newest_offer(sqs, reports_url, timeout)
    handback = AllocationResult.model_validate(
        {
            "cluster": cluster,
            "node": offer.node,
            "instance_id": offer.instance_id,
            "in_reply_to": offer.seq,
            "actions": [
                {"kind": "assigned", "eni_id": o.eni_id, "ips": o.ips, "prefixes": o.prefixes} for o in offer.release
            ],
        }
    )
    prefix = f"warmpool-{cluster}-result-"
    url = sqs.get_queue_url(QueueName=prefix + offer.instance_id)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=handback.to_json())
    return offer


def wait_metric(metrics: str, line: str, timeout: float = 30.0) -> None:
    """Until ``/metrics`` shows ``line``."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode()
        if line in text.splitlines():
            return
        time.sleep(0.1)
    raise AssertionError(f"{line!r} not in /metrics:\n{text[-2000:]}")


def hand_back_all(sqs: Any, reports_url: str, cluster: str, metrics: str, timeout: float = 60.0) -> PoolReport:
    """:func:`hand_back` until the agent holds nothing quarantined: a hand-back replying to a
    report older than the newest one offering the same addresses is rightly not taken
    (docs/agent.md, hand-backs), and the agent repeats its offer every few seconds."""
    deadline = time.monotonic() + timeout
    while True:
        offer = hand_back(sqs, reports_url, cluster, timeout=max(1.0, deadline - time.monotonic()))
        try:
            wait_metric(metrics, "warmpool_addresses_quarantined 0", timeout=3.0)
            return offer
        except AssertionError:
            if time.monotonic() > deadline:
                raise
