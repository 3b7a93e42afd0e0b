"""Nodes of the local stack (``warmpool local up``) with their agents in this process: the
stack's own agent environment (:meth:`emulated.local.LocalStack.agent_env`, what ``local up``
hands an agent), the stack's SQS over HTTP, the instance's IMDS over HTTP, pods recorded.
The functions run as the stack runs them (behind its event-source mapping)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulated.local import LocalStack
from node_agent.agent import Agent
from node_agent.config import load
from node_agent.imds import ImdsClient
from tests.helpers.agents import RecordingPods
from warmpool import names
from warmpool.clock import RealClock

FAST_STACK: dict[str, Any] = {"batch_size": 10, "batching_window_s": 0, "reconcile_every_s": 3600}
"""LocalStack options for tests: each report invoked at once, no reconcile pass meanwhile."""

QUIET_AGENT = {
    # the node's kubelet files are not this machine's: read none unless a test says so
    "WARMPOOL_KUBELET_CONFIG": "none",
    "WARMPOOL_KUBELET_FLAGS": "none",
    "IP_COOLDOWN_PERIOD": "0",
    "WARMPOOL_ADD_WAIT_S": "0",
    "WARMPOOL_REPORT_RETRY_S": "1",
    names.AGENT_ENV_METRICS_ADDR: "127.0.0.1:0",
}


@dataclass
class Node:
    """One instance of the stack and its agent."""

    stack: LocalStack
    instance_id: str
    agent: Agent
    pods: dict[str, str] = field(default_factory=dict)
    """Pod name -> its address, for every ADD answered."""

    def add(self, pod: str) -> bool:
        """A CNI ADD through the agent's service; True when it was answered with an address."""
        reply = dict(
            self.agent.cni.handle(
                {
                    "command": "ADD",
                    "container_id": pod,
                    "ifname": "eth0",
                    "netns": f"/var/run/netns/{pod}",
                    "config": {},
                }
            )
        )
        if reply.get("ok"):
            self.pods[pod] = str(reply["result"]["ips"][0]["address"]).split("/")[0]
            return True
        return False

    def delete(self, pod: str) -> None:
        self._cni("DEL", pod)
        self.pods.pop(pod, None)

    def _cni(self, command: str, pod: str) -> dict[str, Any]:
        netns = f"/var/run/netns/{pod}"
        request = {"command": command, "container_id": pod, "ifname": "eth0", "netns": netns, "config": {}}
        return dict(self.agent.cni.handle(request))

    def enis(self) -> list[Any]:
        """The instance's ENIs in EC2 (the emulator's records), by card and device index."""
        mine = [
            e for e in self.stack.ec2.enis.values() if e.attachment and e.attachment.instance_id == self.instance_id
        ]
        return sorted(mine, key=lambda e: (e.attachment.card, e.attachment.device_index))

    def addresses(self) -> int:
        """Secondary addresses the instance holds in EC2, those of its /28 prefixes counted."""
        return sum(len(e.secondary) + 16 * len(e.prefixes) for e in self.enis())


def launch(stack: LocalStack, instance_type: str, work: Path, *, subnet: str | None = None, **env: str) -> Node:
    """An instance tagged for the stack's cluster (in ``subnet``, default the stack's first), and
    its agent started with the stack's agent environment plus ``env``."""
    cluster = stack.options.cluster
    iid = stack.ec2.run_instance(
        instance_type, subnet or stack.subnet_ids[0], tags={names.cluster_tag_key(cluster): "owned"}
    )
    full = {**stack.agent_env(iid, node_name=f"node-{iid[-6:]}", work_dir=str(work / iid)), **QUIET_AGENT, **env}
    agent = Agent(
        load(full),
        stack.client("sqs"),
        ImdsClient(f"{stack.outputs['imds_base']}/{iid}"),
        pods=RecordingPods(),
        clock=RealClock(),
        poll_wait_s=1,
        serve_http=False,
    )
    agent.start()
    return Node(stack, iid, agent)


def run_until(nodes: Iterable[Node], done: Callable[[], bool], timeout: float = 30.0, step: float = 0.1) -> bool:
    """Each agent's main loop, pass after pass, until ``done()`` or ``timeout``; whether it was done."""
    nodes = list(nodes)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            n.agent.run_once()
        if done():
            return True
        time.sleep(step)
    return bool(done())


@contextmanager
def agents_stopped_at_exit() -> Iterator[list[Node]]:
    """A list to put nodes in; their agents stop at exit (before the stack's endpoint goes: put it
    after the stack in one ``with``)."""
    nodes: list[Node] = []
    try:
        yield nodes
    finally:
        for n in nodes:
            n.agent.stop()
