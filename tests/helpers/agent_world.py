"""An :class:`node_agent.agent.Agent` in-process on stand-ins for what it talks to:
SQS (:class:`MemorySqs`, answers dated by an AWS clock of the test's choosing),
IMDS (:class:`MetadataStub`, a fixed identity document), the host's pod wiring
(:class:`WiredPods`), all in virtual time. No child process, no network namespace:
the unit tier may use it (tests/unit/test_agent_safety.py)."""

from __future__ import annotations

import tempfile
import threading
from email.utils import formatdate
from pathlib import Path
from typing import Any

from emulated.clock import VirtualClock
from node_agent.agent import Agent
from node_agent.config import load
from node_agent.controller import AttachedEni
from node_agent.hostnet import HostWiring
from node_agent.imds import Identity
from tests.helpers.agents import RecordingPods
from tests.helpers.controller import ID, PRIMARY, FakeImds
from warmpool.messages import AllocationResult, PoolReport, parse_report

REPORTS_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/warmpool-demo-reports"


class MemorySqs:
    """The SQS calls the agent makes. ``aws_clock`` dates every answer (its ``Date`` header)."""

    def __init__(self, aws_clock: VirtualClock | None = None) -> None:
        self.aws_clock = aws_clock
        self.sent: list[str] = []
        self.deleted: list[str] = []

    def _meta(self) -> dict[str, Any]:
        if self.aws_clock is None:
            return {}
        return {"ResponseMetadata": {"HTTPHeaders": {"date": formatdate(self.aws_clock.now(), usegmt=True)}}}

    def reports(self) -> list[PoolReport]:
        return [parse_report(b) for b in self.sent]

    # --- the SqsApi port ---
    def create_queue(self, **kw: Any) -> dict[str, Any]:
        return {"QueueUrl": f"https://sqs.us-east-1.amazonaws.com/123456789012/{kw['QueueName']}", **self._meta()}

    def get_queue_url(self, **kw: Any) -> dict[str, Any]:
        return self.create_queue(**kw)

    def delete_queue(self, **kw: Any) -> dict[str, Any]:
        return self._meta()

    def send_message(self, **kw: Any) -> dict[str, Any]:
        self.sent.append(str(kw["MessageBody"]))
        return {"MessageId": str(len(self.sent)), **self._meta()}

    def send_message_batch(self, **kw: Any) -> dict[str, Any]:
        for e in kw["Entries"]:
            self.sent.append(str(e["MessageBody"]))
        return {"Successful": [{"Id": e["Id"]} for e in kw["Entries"]], **self._meta()}

    def receive_message(self, **kw: Any) -> dict[str, Any]:
        """Nothing: tests hand results to the agent with :func:`give` (deterministic)."""
        threading.Event().wait(0.02)  # a long poll, kept short
        return {"Messages": [], **self._meta()}

    def delete_message(self, **kw: Any) -> dict[str, Any]:
        self.deleted.append(str(kw["ReceiptHandle"]))
        return self._meta()

    def delete_message_batch(self, **kw: Any) -> dict[str, Any]:
        self.deleted.extend(str(e["ReceiptHandle"]) for e in kw["Entries"])
        return self._meta()

    def change_message_visibility(self, **kw: Any) -> dict[str, Any]:
        return self._meta()

    def get_queue_attributes(self, **kw: Any) -> dict[str, Any]:
        return {"Attributes": {}, **self._meta()}

    def list_queues(self, **kw: Any) -> dict[str, Any]:
        return {"QueueUrls": [], **self._meta()}


class MetadataStub:
    """IMDS for :class:`Agent`: the ENIs of a :class:`FakeImds`, an identity, a signed document."""

    def __init__(self, imds: FakeImds) -> None:
        self.imds = imds

    def identity(self) -> Identity:
        return Identity(ID.instance_id, ID.instance_type, ID.availability_zone, PRIMARY.mac)

    def interfaces(self) -> list[AttachedEni]:
        return self.imds.interfaces()

    def get(self, path: str, missing_ok: bool = False, tree: str = "meta-data") -> str | None:
        return {"instance-identity/document": "{}", "instance-identity/signature": "c2ln"}.get(path)


class WiredPods(RecordingPods):
    """The host's pod wiring, recorded (survives agent restarts); what a rebuild reads."""

    def host_wiring(self) -> HostWiring:
        from node_agent.hostnet import host_veth_name

        return HostWiring({ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}, [])


def agent_env(state: Path, **extra: str) -> dict[str, str]:
    sock = Path(tempfile.mkdtemp(prefix="wp-")) / "agent.sock"  # short: a unix socket path has 108 bytes
    return {
        "CLUSTER_NAME": ID.cluster,
        "MY_NODE_NAME": ID.node,
        "WARM_IP_TARGET": "1",
        "IP_COOLDOWN_PERIOD": "0",
        "WARMPOOL_REPORTS_QUEUE_URL": REPORTS_URL,
        "WARMPOOL_STATE_DIR": str(state),
        "WARMPOOL_SOCKET": str(sock),
        "WARMPOOL_ADD_WAIT_S": "0",
        **extra,
    }


def make_agent(state: Path, imds: FakeImds, sqs: MemorySqs, clock: VirtualClock, pods: WiredPods, **env: str) -> Agent:
    """Built and started (threads: CNI socket, result poller; no HTTP). Stop it with ``stop()``."""
    agent = Agent(
        load(agent_env(state, **env)),
        sqs,
        MetadataStub(imds),
        pods=pods,
        clock=clock,
        poll_wait_s=0,
        serve_http=False,
    )
    agent.start()
    return agent


def cni(agent: Agent, command: str, cid: str, *, prev_ip: str | None = None, pod: str = "") -> dict[str, Any]:
    """One CNI request to the agent's service, as the plugin sends it (interface ``eth0``).
    ``prev_ip``: with the runtime's cached result of the attachment's ADD as ``prevResult``
    (:func:`cached_result`), as libcni passes it to CHECK and DEL. ``pod``: the pod's
    ``namespace/name`` in ``CNI_ARGS``, as kubelet's runtimes pass it (none when empty)."""
    config: dict[str, Any] = {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool-cni"}
    if prev_ip is not None:
        config["prevResult"] = cached_result(cid, prev_ip)
    return agent.cni.handle(
        {
            "command": command,
            "container_id": cid,
            "ifname": "eth0",
            "netns": f"/var/run/netns/{cid}",
            "config": config,
            "args": _pod_args(pod),
        }
    )


def _pod_args(pod: str) -> str:
    if not pod:
        return ""
    ns, name = pod.split("/", 1)
    return f"IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name}"


def cached_result(cid: str, ip: str, prefix: str = "eni") -> dict[str, Any]:
    """The result an ADD of ``cid`` (interface ``eth0``) that got ``ip`` answered, as the runtime
    caches it: the host veth, the pod's interface in its sandbox, the ``/32`` on the latter."""
    from node_agent.hostnet import host_veth_name

    return {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": host_veth_name(cid, "eth0", prefix), "mac": "ee:ee:ee:ee:ee:ee"},
            {"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": f"/var/run/netns/{cid}"},
        ],
        "ips": [{"address": f"{ip}/32", "interface": 1, "gateway": "169.254.1.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}],
    }


def cni_add(agent: Agent, cid: str, pod: str = "") -> str | None:
    """The address an ADD of ``cid`` got, or None when it failed (nothing free for it)."""
    reply = cni(agent, "ADD", cid, pod=pod)
    if not reply.get("ok"):
        return None
    return str(reply["result"]["ips"][0]["address"]).removesuffix("/32")


_receipts = iter(range(1, 1 << 62))


def give(agent: Agent, result: AllocationResult) -> str:
    """A result received from the node's queue (as the poller hands it over); returns its
    receipt handle (in ``MemorySqs.deleted`` once the agent acknowledged it)."""
    receipt = f"r{next(_receipts)}"
    agent.results.put({"Body": result.to_json(), "ReceiptHandle": receipt, "MessageId": receipt})
    return receipt
