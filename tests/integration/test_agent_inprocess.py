"""The agent against emulated AWS, in-process: moto's SQS, a fixture IMDS
server; a stand-in allocator answers its reports. Start-up discovery, report
on deficit, result verified and applied, addresses to pods, surplus released."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from node_agent.agent import Agent
from node_agent.config import load
from node_agent.hostnet import HostWiring
from node_agent.imds import ImdsClient
from tests.helpers.agents import RecordingPods
from tests.helpers.fakenode import FakeEni, FakeImdsServer, FakeInstance
from warmpool.clock import RealClock
from warmpool.messages import parse_report

INSTANCE = "i-0a1b2c3d4e5f60718"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with mock_aws(), FakeImdsServer() as imds:
        sqs = boto3.client("sqs", region_name="us-east-1")
        reports = sqs.create_queue(QueueName="warmpool-demo-reports")["QueueUrl"]
        eni0 = FakeEni("eni-0000000000000aaa", "0a:00:00:00:00:10", 0, "10.0.0.10", "subnet-a", "10.0.0.0/24")
        imds.instances[INSTANCE] = FakeInstance(INSTANCE, "m5.large", "us-east-1a", [eni0])
        env = {
            "CLUSTER_NAME": "demo",
            "MY_NODE_NAME": "node-1",
            "WARM_IP_TARGET": "2",
            "IP_COOLDOWN_PERIOD": "0",
            "WARMPOOL_RELEASE_DELAY_S": "0.5",
            "WARMPOOL_REPORTS_QUEUE_URL": reports,
            "WARMPOOL_STATE_DIR": str(tmp_path / "state"),
            "WARMPOOL_SOCKET": str(tmp_path / "agent.sock"),
            "WARMPOOL_METRICS_ADDR": "127.0.0.1:0",
            "WARMPOOL_ADD_WAIT_S": "0",
        }
        pods = RecordingPods()
        agent = Agent(load(env), sqs, ImdsClient(imds.url_for(INSTANCE)), pods=pods, poll_wait_s=1, clock=RealClock())
        try:
            yield {"sqs": sqs, "reports": reports, "imds": imds, "agent": agent, "eni0": eni0, "pods": pods}
        finally:
            agent.stop()


def next_report(sqs: Any, url: str, agent: Agent, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        agent.run_once()
        msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if msgs:
            for m in msgs:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            return parse_report(msgs[-1]["Body"])
        agent.wake.wait(0.1)
    raise AssertionError("no report")


def send_result(sqs: Any, agent: Agent, seq: int, *actions: dict[str, Any]) -> None:
    body = {
        "schema": "warmpool.result/v1",
        "cluster": "demo",
        "node": "node-1",
        "instance_id": INSTANCE,
        "in_reply_to": seq,
        "actions": list(actions),
    }
    sqs.send_message(QueueUrl=agent.result_queue_url, MessageBody=json.dumps(body))


def until(agent: Agent, cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        agent.run_once()
        if cond():
            return
        agent.wake.wait(0.1)
    raise AssertionError("condition not met")


def test_every_report_carries_the_identity_imds_serves_byte_for_byte(world: dict[str, Any]) -> None:
    """Issue 12: the allocator refuses reports without the signed identity."""
    sqs, agent = world["sqs"], world["agent"]
    inst = world["imds"].instances[INSTANCE]
    inst.identity_document = '{\n  "instanceId" : "' + INSTANCE + '",\n  "region" : "us-east-1"\n}'
    inst.identity_signature = "c2lnbmF0dXJl\nbGluZTI="
    agent.start()
    r = next_report(sqs, world["reports"], agent)
    assert r.identity is not None
    assert r.identity.document == inst.identity_document and r.identity.signature == inst.identity_signature


def test_agent_reports_applies_serves_pods_and_releases(world: dict[str, Any]) -> None:
    sqs, agent, eni0 = world["sqs"], world["agent"], world["eni0"]
    agent.start()
    assert agent.identity.instance_type == "m5.large"
    assert agent.result_queue_url.endswith(f"warmpool-demo-result-{INSTANCE}")
    r = next_report(sqs, world["reports"], agent)
    assert r.enis[0].eni_id == eni0.eni_id and r.targets.warm_ip == 2 and r.assigned_ips == 0

    # a pod arrives with nothing free: clear error, demand reported at once
    reply = agent.cni.handle({"command": "ADD", "container_id": "p1", "ifname": "eth0", "netns": "/x", "config": {}})
    assert reply["ok"] is False and reply["code"] == 11
    r = next_report(sqs, world["reports"], agent)
    assert r.pending_demand == 1

    # the allocator assigns three; IMDS shows them; the result is applied and acknowledged
    eni0.ips += ["10.0.0.11", "10.0.0.12", "10.0.0.13"]
    send_result(
        sqs, agent, r.seq, {"kind": "assigned", "eni_id": eni0.eni_id, "ips": ["10.0.0.11", "10.0.0.12", "10.0.0.13"]}
    )
    until(agent, lambda: agent.ds.counts(time.time()).total == 3)
    reply = agent.cni.handle({"command": "ADD", "container_id": "p1", "ifname": "eth0", "netns": "/x", "config": {}})
    assert reply["ok"] and reply["result"]["ips"][0]["address"] == "10.0.0.11/32"
    attrs = sqs.get_queue_attributes(QueueUrl=agent.result_queue_url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0"

    # the pod goes: one surplus address is quarantined after the delay and offered
    agent.cni.handle({"command": "DEL", "container_id": "p1", "ifname": "eth0", "netns": "/x", "config": {}})
    deadline = time.monotonic() + 10
    offer = None
    while offer is None and time.monotonic() < deadline:
        r = next_report(sqs, world["reports"], agent)
        offer = r.release[0] if r.release else None
    assert offer is not None and len(offer.ips) == 1
    eni0.ips.remove(offer.ips[0])
    send_result(sqs, agent, r.seq, {"kind": "released", "eni_id": eni0.eni_id, "ips": offer.ips})
    until(agent, lambda: agent.ds.counts(time.time()).quarantined == 0)
    c = agent.ds.counts(time.time())
    assert (c.total, c.assigned) == (2, 0)

    # observability
    host, port = agent.http.address if agent.http else ("", 0)
    base = f"http://{host}:{port}"
    metrics = urllib.request.urlopen(f"{base}/metrics").read().decode()
    assert "warmpool_addresses_total 2" in metrics
    assert 'warmpool_cni_failures_total{command="ADD",reason="no-address"} 1' in metrics
    assert json.loads(urllib.request.urlopen(f"{base}/v1/enis").read())[0]["eni_id"] == eni0.eni_id
    assert json.loads(urllib.request.urlopen(f"{base}/v1/config").read())["targets"]["WARM_IP_TARGET"] == 2
    assert urllib.request.urlopen(f"{base}/readyz").status == 200
    assert urllib.request.urlopen(f"{base}/healthz").status == 200


def test_invalid_and_foreign_results_are_dropped_not_acted_on(world: dict[str, Any]) -> None:
    sqs, agent = world["sqs"], world["agent"]
    agent.start()
    r = next_report(sqs, world["reports"], agent)
    sqs.send_message(QueueUrl=agent.result_queue_url, MessageBody='{"schema": "warmpool.result/v9"}')
    send_result(sqs, agent, r.seq, {"kind": "assigned", "eni_id": world["eni0"].eni_id, "ips": ["10.0.0.99"]})
    until(agent, lambda: agent.counters["results_invalid"] == 1 and agent.controller.stats.results_applied == 1)
    assert agent.ds.counts(time.time()).total == 0  # IMDS never showed 10.0.0.99


class _Killed(BaseException):
    """kill -9 at a checkpoint write: the process stops; nothing after it happens."""


class _DyingCheckpoint:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def load(self) -> Any:
        return self.inner.load()

    def save(self, data: Any) -> None:
        raise _Killed


def test_a_result_killed_before_its_checkpoint_is_not_acknowledged_and_comes_back_soon(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agent receives an ``assigned`` result and dies (kill -9) as its effect is
    # written: the result was not deleted, and comes back after the receive's
    # visibility timeout, which the agent keeps short so a restarted agent (and its
    # quarantine hold) gets it soon. The restarted agent applies it.
    import node_agent.agent as agent_mod

    monkeypatch.setattr(agent_mod, "RESULT_VISIBILITY_S", 1, raising=False)
    # The host's wiring is read and shows no pod (a node with pod wiring to read). The fixture's
    # pods read none, as with WARMPOOL_POD_NETWORK=recorded, where a start without a checkpoint
    # holds every address IMDS shows, now and later (the tenth review's A1): no offer to follow.
    monkeypatch.setattr(world["pods"], "host_wiring", lambda: HostWiring({}, []))
    sqs, agent, eni0 = world["sqs"], world["agent"], world["eni0"]
    agent.start()
    r = next_report(sqs, world["reports"], agent)
    eni0.ips += ["10.0.0.11"]
    store = agent.ds._store
    agent.ds._store = _DyingCheckpoint(store)
    send_result(sqs, agent, r.seq, {"kind": "assigned", "eni_id": eni0.eni_id, "ips": ["10.0.0.11"]})
    deadline = time.monotonic() + 10
    killed = False
    while not killed and time.monotonic() < deadline:
        try:
            agent.run_once()
        except _Killed:
            killed = True
        agent.wake.wait(0.1)
    assert killed
    agent.stop()
    for t in agent._threads:
        t.join(timeout=5)
    assert "10.0.0.11" not in json.dumps(store.load())  # the effect never reached the checkpoint ...
    attrs = sqs.get_queue_attributes(QueueUrl=agent.result_queue_url, AttributeNames=["All"])["Attributes"]
    assert int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"]) == 1
    # ... so the result was not acknowledged; it is visible again within a few seconds.
    deadline = time.monotonic() + 5
    back: list[dict[str, Any]] = []
    while not back and time.monotonic() < deadline:
        # Received and held for a moment, so the restarted agent's first report goes out
        # before the result reaches it: the order is fixed, not left to the threads.
        back = sqs.receive_message(QueueUrl=agent.result_queue_url, WaitTimeSeconds=1, VisibilityTimeout=30).get(
            "Messages", []
        )
    assert back and json.loads(back[0]["Body"])["in_reply_to"] == r.seq
    # The first start found no checkpoint (a new node looks like a lost one: docs/agent.md,
    # "Checkpoint lost or damaged"), so its window of the release timeout still runs at the
    # restart: an address IMDS lists and the checkpoint does not know is held as offered,
    # and the restart's first report offers it.
    again = Agent(agent.cfg, sqs, agent.metadata, pods=world["pods"], poll_wait_s=1, clock=RealClock())
    try:
        again.start()
        offer = next_report(sqs, world["reports"], again)
        assert [x.ips for x in offer.release] == [["10.0.0.11"]] and offer.seq > r.seq
        sqs.change_message_visibility(
            QueueUrl=again.result_queue_url, ReceiptHandle=back[0]["ReceiptHandle"], VisibilityTimeout=0
        )

        def drained() -> bool:
            a = sqs.get_queue_attributes(QueueUrl=again.result_queue_url, AttributeNames=["All"])["Attributes"]
            return a["ApproximateNumberOfMessages"] == a["ApproximateNumberOfMessagesNotVisible"] == "0"

        # The restarted agent applies the old result and only then acknowledges it; its claim
        # replies to a report older than that offer, so it does not take the address back
        # (the answer to the newer report may unassign it): still held, no pod gets it.
        until(again, lambda: again.controller.stats.results_applied == 1 and drained(), timeout=5)
        c = again.ds.counts(time.time())
        assert (c.total, c.quarantined) == (0, 1)
        assert again.controller.stats.handbacks_superseded == 1
        # The offer is of unknown origin (the restart found no checkpoint), so the allocator
        # never hands it back (docs/agent.md, "Checkpoint lost or damaged"): its answer to the
        # newer report unassigns it and assigns a fresh address in its place.
        assert offer.release[0].unknown
        # The restart restored its checkpoint, so it waits for the allocator's word that the
        # checkpoint is current (docs/agent.md, "A restored checkpoint waits for the
        # allocator's word"); the allocator's answer says so first.
        assert offer.restored_from is not None
        eni0.ips = [ip for ip in eni0.ips if ip != "10.0.0.11"] + ["10.0.0.12"]
        send_result(
            sqs,
            again,
            offer.seq,
            {
                "kind": "restore-checked",
                "restored_from": offer.restored_from,
                "wait": offer.restore_wait,
                "current": True,
                "epoch": 1,
            },
            {"kind": "released", "eni_id": eni0.eni_id, "ips": ["10.0.0.11"]},
            {"kind": "assigned", "eni_id": eni0.eni_id, "ips": ["10.0.0.12"]},
        )

        def settled() -> bool:
            c = again.ds.counts(time.time())
            return (c.total, c.quarantined) == (1, 0) and drained()

        until(again, settled, timeout=5)
        # the fresh address is the one pods get; the offered one is gone from the pool
        got = again.ds.assign("pod-a", "eth0", "/var/run/netns/pod-a", time.time())
        assert got is not None and got.ip == "10.0.0.12"
    finally:
        again.stop()


class NoCreateQueue:
    """The agent's SQS client under the issue-12 IAM: CreateQueue is denied (the
    allocator creates a verified node's result queue)."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs
        self.create_calls = 0

    def create_queue(self, **kw: Any) -> Any:
        from botocore.exceptions import ClientError

        self.create_calls += 1
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "CreateQueue")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)


def test_agent_starts_without_creating_its_queue_and_picks_it_up_once_the_allocator_has(
    world: dict[str, Any], tmp_path: Path
) -> None:
    sqs, imds = world["sqs"], world["imds"]
    env = {
        "CLUSTER_NAME": "demo",
        "MY_NODE_NAME": "node-1",
        "WARM_IP_TARGET": "2",
        "WARMPOOL_REPORTS_QUEUE_URL": world["reports"],
        "WARMPOOL_STATE_DIR": str(tmp_path / "s2"),
        "WARMPOOL_SOCKET": str(tmp_path / "a2.sock"),
        "WARMPOOL_METRICS_ADDR": "127.0.0.1:0",
    }
    denied = NoCreateQueue(sqs)
    agent = Agent(
        load(env), denied, ImdsClient(imds.url_for(INSTANCE)), pods=RecordingPods(), poll_wait_s=1, clock=RealClock()
    )
    try:
        agent.start()  # raised QueueDoesNotExist before: the agent could only create its queue itself
        assert agent.ready and agent.result_queue_url == "" and denied.create_calls >= 1  # the poller retries
        next_report(sqs, world["reports"], agent)  # it still reports (that is what gets its queue created)
        url = sqs.create_queue(QueueName=f"warmpool-demo-result-{INSTANCE}")["QueueUrl"]  # the allocator
        deadline = time.monotonic() + 10
        while agent.result_queue_url != url and time.monotonic() < deadline:
            time.sleep(0.1)
        assert agent.result_queue_url == url
        send_result(sqs, agent, 999)  # a reply to a seq it never sent: received, then dropped as stale
        deadline = time.monotonic() + 10
        while agent.controller.stats.results_rejected + agent.controller.stats.results_applied == 0:
            agent.run_once()
            assert time.monotonic() < deadline, agent.controller.stats
            time.sleep(0.1)
    finally:
        agent.stop()
