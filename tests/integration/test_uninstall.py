"""Install, run pods, uninstall, and nothing left: on the local stack (emulated EC2, SQS,
DynamoDB, IMDS; the real allocate function), with real agents in-process (pods through
their CNI service, wiring recorded).

The uninstall follows docs/deploy.md, "Uninstall": the agents stop (the DaemonSet is
deleted: each agent's SIGTERM path), the reports queue drains, then ``infra.uninstall``'s
last pass removes warmpool's ENIs, the secondary addresses and tag of each primary ENI,
and the result queues, and measures what is left.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from emulated.local import LocalStack
from infra import uninstall
from node_agent.agent import Agent
from node_agent.config import load
from node_agent.imds import ImdsClient
from tests.helpers.agents import RecordingPods
from warmpool import names
from warmpool.clock import RealClock

CLUSTER = "uninst"
pytestmark = pytest.mark.slow


@pytest.fixture
def stack() -> Iterator[LocalStack]:
    s = LocalStack(
        cluster=CLUSTER,
        batching_window_s=0,
        batch_size=10,
        reconcile_every_s=3600,
        extra_env=(("WARMPOOL_MIN_ENI_AGE_S", "1"),),
    )
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _agent(stack: LocalStack, node: str, instance_id: str, state: Path) -> Agent:
    out = stack.outputs
    env = {
        "CLUSTER_NAME": CLUSTER,
        "MY_NODE_NAME": node,
        "AWS_REGION": out["region"],
        "WARM_IP_TARGET": "2",
        "WARM_ENI_TARGET": "",
        "IP_COOLDOWN_PERIOD": "0",
        names.AGENT_ENV_REPORTS_QUEUE_URL: out["reports_queue_url"],
        names.AGENT_ENV_RESULT_QUEUE_PREFIX: out["result_queue_prefix"],
        names.AGENT_ENV_STATE_DIR: str(state / "state"),
        names.AGENT_ENV_SOCKET: str(state / "agent.sock"),
        names.AGENT_ENV_METRICS_ADDR: "127.0.0.1:0",
        "WARMPOOL_MANAGE_HOST_NETWORK": "false",
        "WARMPOOL_ADD_WAIT_S": "0",
        "WARMPOOL_REPORT_RETRY_S": "1",
    }
    agent = Agent(
        load(env),
        stack.client("sqs"),
        ImdsClient(f"{out['imds_base']}/{instance_id}"),
        pods=RecordingPods(),
        clock=RealClock(),
        poll_wait_s=1,
        serve_http=False,
    )
    agent.start()
    return agent


def _until(agents: list[Agent], done: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for a in agents:
            a.run_once()
        if done():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def _add(agent: Agent, pod: str) -> dict[str, Any]:
    netns = f"/var/run/netns/{pod}"
    return dict(
        agent.cni.handle({"command": "ADD", "container_id": pod, "ifname": "eth0", "netns": netns, "config": {}})
    )


def test_install_run_pods_uninstall_and_nothing_is_left(stack: LocalStack, tmp_path: Path) -> None:
    ec2, sqs = stack.client("ec2"), stack.client("sqs")
    vpc = stack.outputs["vpc_id"]
    # install: two nodes of the cluster, an agent on each (the DaemonSet's pods)
    instances = [
        stack.ec2.run_instance("m5.large", stack.subnet_ids[k], tags={names.cluster_tag_key(CLUSTER): "owned"})
        for k in range(2)
    ]
    agents = [_agent(stack, f"node-{k}", iid, tmp_path / f"node-{k}") for k, iid in enumerate(instances)]
    before = uninstall.leftovers(ec2, sqs, CLUSTER, vpc_id=vpc)
    try:
        # run pods: more than the primary ENI holds on m5.large (9 secondary addresses), so
        # the allocator attaches warmpool ENIs too
        held: dict[str, str] = {}

        def serve() -> bool:
            for k, agent in enumerate(agents):
                for j in range(12):
                    pod = f"pod-{k}-{j}"
                    if pod not in held:
                        reply = _add(agent, pod)
                        if reply.get("ok"):
                            held[pod] = reply["result"]["ips"][0]["address"]
            return len(held) == 24

        _until(agents, serve, timeout=120)
        assert len(set(held.values())) == 24  # one holder per address
        during = uninstall.leftovers(ec2, sqs, CLUSTER, vpc_id=vpc)
        assert during["warmpool_enis"] >= 2 and during["result_queues"] == 2
        assert during["tagged_primary_enis"] == 2 and during["secondary_addresses_on_tagged_primaries"] > 0
    finally:
        for agent in agents:  # the DaemonSet deleted: every agent stops
            agent.stop()
    # the reports queue drains (the allocator answers what was sent before the agents stopped)
    deadline = time.monotonic() + 60
    while uninstall.reports_in_flight(sqs, CLUSTER) and time.monotonic() < deadline:
        time.sleep(0.5)
    planned = uninstall.last_pass(ec2, sqs, CLUSTER, vpc_id=vpc, execute=False)
    assert planned["applied"] is False and planned["plan"]["delete_enis"]
    assert planned["left"] == uninstall.leftovers(ec2, sqs, CLUSTER, vpc_id=vpc) != dict.fromkeys(during, 0)
    result = uninstall.last_pass(ec2, sqs, CLUSTER, vpc_id=vpc, execute=True)
    print(json.dumps({"before": before, "during": during, "after": result["left"]}))
    assert result["left"] == {
        "warmpool_enis": 0,
        "tagged_primary_enis": 0,
        "secondary_addresses_on_tagged_primaries": 0,
        "result_queues": 0,
    }
    # measured from EC2 itself, not from the plan's own filters: each node has its primary ENI
    # only, with its primary address only and no warmpool tag; no ENI of the VPC is left over
    enis = ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["NetworkInterfaces"]
    assert sorted(e["Attachment"]["InstanceId"] for e in enis) == sorted(instances)
    for e in enis:
        assert [a["Primary"] for a in e["PrivateIpAddresses"]] == [True] and not e.get("Ipv4Prefixes")
        assert not [t for t in e.get("TagSet", []) if t["Key"].startswith("warmpool.io/")]
    queues = sqs.list_queues(QueueNamePrefix=names.result_queue_prefix(CLUSTER)).get("QueueUrls", [])
    assert queues == []


class _Sqs:
    """Only what the last pass asks of SQS before it acts."""

    def __init__(self, waiting: int) -> None:
        self.waiting = waiting
        self.deleted: list[str] = []

    def get_queue_url(self, QueueName: str) -> dict[str, str]:
        return {"QueueUrl": f"https://sqs.local/123456789012/{QueueName}"}

    def get_queue_attributes(self, **kw: Any) -> dict[str, Any]:
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(self.waiting),
                "ApproximateNumberOfMessagesNotVisible": "0",
            }
        }

    def list_queues(self, **kw: Any) -> dict[str, Any]:
        return {"QueueUrls": [f"https://sqs.local/123456789012/{names.result_queue(CLUSTER, 'i-0abc')}"]}

    def delete_queue(self, QueueUrl: str) -> None:
        self.deleted.append(QueueUrl)


class _Ec2:
    def describe_network_interfaces(self, **kw: Any) -> dict[str, Any]:
        return {"NetworkInterfaces": []}


def test_the_last_pass_refuses_while_reports_are_in_flight() -> None:
    sqs = _Sqs(waiting=3)
    with pytest.raises(uninstall.UninstallError, match="3 report"):
        uninstall.last_pass(_Ec2(), sqs, CLUSTER, execute=True)
    assert sqs.deleted == []
    sqs.waiting = 0
    out = uninstall.last_pass(_Ec2(), sqs, CLUSTER, execute=True)
    assert out["applied"] and len(sqs.deleted) == 1
