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


def _newest_report(sqs: Any, reports_url: str, wanted: Any, what: str, timeout: float) -> PoolReport:
    """The newest report on the reports queue that ``wanted`` picks (the queue is drained)."""
    deadline = time.monotonic() + timeout
    picked: list[PoolReport] = []
    while time.monotonic() < deadline:
        msgs = sqs.receive_message(QueueUrl=reports_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        for m in msgs:
            r = parse_report(m["Body"])
            if wanted(r):
                picked.append(r)
            sqs.delete_message(QueueUrl=reports_url, ReceiptHandle=m["ReceiptHandle"])
        if picked and not msgs:
            break
    assert picked, f"no report {what}"
    return max(picked, key=lambda r: r.seq)


def newest_offer(sqs: Any, reports_url: str, timeout: float = 30.0) -> PoolReport:
    """The newest report on the reports queue that offers addresses back (the queue is drained)."""
    return _newest_report(sqs, reports_url, lambda r: bool(r.release), "offered anything back", timeout)


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


def _answer(sqs: Any, cluster: str, offer: PoolReport, actions: list[dict[str, Any]]) -> None:
    result = AllocationResult.model_validate(
        {
            "cluster": cluster,
            "node": offer.node,
            "instance_id": offer.instance_id,
            "in_reply_to": offer.seq,
            "actions": actions,
        }
    )
    prefix = f"warmpool-{cluster}-result-"
    url = sqs.get_queue_url(QueueName=prefix + offer.instance_id)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=result.to_json())


def confirm_restore(sqs: Any, reports_url: str, cluster: str, timeout: float = 30.0) -> PoolReport:
    """What the allocator answers an agent that restored its checkpoint and whose checkpoint is
    the node's newest state (docs/allocator.md, "Restored checkpoints"): ``restore-checked``,
    current, in reply to its newest report naming the checkpoint (the queue is drained). Returns
    that report."""
    report = _newest_report(
        sqs, reports_url, lambda r: r.restored_from is not None, "named a restored checkpoint", timeout
    )
    assert report.restored_from is not None
    answer = {"kind": "restore-checked", "restored_from": report.restored_from, "current": True}
    answer["wait"] = report.restore_wait
    _answer(sqs, cluster, report, [{**answer, "epoch": (report.epoch or 0) + 1}])
    return report


def renew_all(
    sqs: Any, reports_url: str, cluster: str, metrics: str, imds: Any, enis: list[Any], timeout: float = 60.0
) -> PoolReport:
    """What the allocator answers a node whose offers are of unknown origin (a start without a
    checkpoint holds every free address so, docs/agent.md): never a hand-back; EC2 unassigns
    them and assigns as many fresh ones (``imds``, a ``FakeImdsServer``, lists those instead on
    ``enis``, its ``FakeEni`` objects), and the answer says ``released`` and ``assigned``. Until
    the agent holds nothing quarantined; the first offer answered is returned."""
    deadline = time.monotonic() + timeout
    by_id = {e.eni_id: e for e in enis}
    first: PoolReport | None = None
    granted = 0
    while True:
        offer = newest_offer(sqs, reports_url, timeout=max(1.0, deadline - time.monotonic()))
        first = first or offer
        actions: list[dict[str, Any]] = []
        for o in offer.release:
            assert o.unknown, o
            eni = by_id[o.eni_id]
            base = eni.primary_ip.rsplit(".", 1)[0]
            with imds.lock:
                taken = {eni.primary_ip, *eni.ips}
                fresh = [f"{base}.{n}" for n in range(100, 250) if f"{base}.{n}" not in taken][: len(o.ips)]
                eni.ips = [ip for ip in eni.ips if ip not in o.ips] + fresh
            actions.append({"kind": "released", "eni_id": o.eni_id, "ips": o.ips})
            actions.append({"kind": "assigned", "eni_id": o.eni_id, "ips": fresh})
            granted = granted or len(fresh)
        _answer(sqs, cluster, offer, actions)
        try:
            wait_metric(metrics, "warmpool_addresses_quarantined 0", timeout=3.0)
            # and the fresh ones in the pool (a grant waits for IMDS to list it: the next pass)
            while _metric(metrics, "warmpool_addresses_available") < granted:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the {granted} fresh addresses never reached the pool")
                time.sleep(0.1)
            return first
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def _metric(metrics: str, name: str) -> float:
    """The value of the unlabelled metric ``name`` on ``/metrics`` (0 when absent)."""
    text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
