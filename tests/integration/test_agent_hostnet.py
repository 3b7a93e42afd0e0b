"""The agent's node-level networking end to end in a namespace: set up at start from IMDS (VPC
CIDRs included), checked on /readyz, reported in /v1/config, restored by the periodic
reconcile; /v1/max-pods."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from node_agent.agent import Agent
from node_agent.config import load
from node_agent.imds import Identity, ImdsClient
from node_agent.netlink import sysctl_get, sysctl_set
from node_agent.nodenet import NodeNetworking, spec_from_imds
from tests.helpers.agents import RecordingPods
from tests.helpers.fakenode import FakeEni, FakeImdsServer, FakeInstance, netns, netns_available, sh
from warmpool.clock import RealClock

pytestmark = pytest.mark.netns

_why = netns_available() or ("" if shutil.which("nft") else "nft (Debian package nftables) is not installed")
if _why:
    pytest.skip(f"needs namespaces and nft: {_why}", allow_module_level=True)

INSTANCE = "i-0a1b2c3d4e5f60799"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with mock_aws(), FakeImdsServer() as imds, netns("wpagent") as ns:
        sh("ip", "-n", ns, "link", "add", "eth0", "address", "0a:00:00:00:00:10", "type", "veth", "peer", "name", "p0")
        sh("ip", "-n", ns, "addr", "add", "10.0.0.10/24", "dev", "eth0")
        sqs = boto3.client("sqs", region_name="us-east-1")
        reports = sqs.create_queue(QueueName="warmpool-demo-reports")["QueueUrl"]
        eni0 = FakeEni(
            "eni-0000000000000aaa",
            "0a:00:00:00:00:10",
            0,
            "10.0.0.10",
            "subnet-a",
            "10.0.0.0/24",
            vpc_cidrs=["10.0.0.0/16", "100.64.0.0/16"],
        )
        imds.instances[INSTANCE] = FakeInstance(INSTANCE, "m5.large", "us-east-1a", [eni0])
        env = {
            "CLUSTER_NAME": "demo",
            "MY_NODE_NAME": "node-1",
            "WARMPOOL_REPORTS_QUEUE_URL": reports,
            "WARMPOOL_STATE_DIR": str(tmp_path / "state"),
            "WARMPOOL_SOCKET": str(tmp_path / "agent.sock"),
            "WARMPOOL_METRICS_ADDR": "127.0.0.1:0",
            "WARMPOOL_HOST_NETNS": ns,
            "WARMPOOL_RESYNC_S": "1",
            "ENABLE_PREFIX_DELEGATION": "true",
            "POD_MTU": "1400",
            # the kubelet's files in this test's directory, never the host's (empty until a test writes them)
            "WARMPOOL_KUBELET_CONFIG": str(tmp_path / "kubelet" / "config.json"),
            "WARMPOOL_KUBELET_FLAGS": str(tmp_path / "kubelet.service.d"),
        }
        cfg = load(env)
        client = ImdsClient(imds.url_for(INSTANCE))

        def node_net(ident: Identity) -> NodeNetworking:
            def spec() -> Any:
                return spec_from_imds(client, ident.mac, cfg)

            return NodeNetworking(spec(), ns, refresh=spec)

        agent = Agent(cfg, sqs, client, pods=RecordingPods(), poll_wait_s=1, node_net=node_net, clock=RealClock())
        try:
            yield {"agent": agent, "ns": ns, "eni0": eni0, "sqs": sqs, "reports": reports, "dir": tmp_path}
        finally:
            agent.stop()


def get(agent: Agent, path: str) -> tuple[int, Any]:
    assert agent.http is not None
    host, port = agent.http.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}") as r:
            body = r.read().decode()
            return r.status, json.loads(body) if body.startswith(("{", "[")) else body
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_node_network_is_set_up_checked_reported_and_restored(world: dict[str, Any]) -> None:
    agent, ns = world["agent"], world["ns"]
    agent.start()
    assert sysctl_get(ns, "net.ipv4.ip_forward") == "1"
    status, _ = get(agent, "/readyz")
    assert status == 200
    status, cfg = get(agent, "/v1/config")
    kernel = cfg["kernel"]
    assert kernel["net.ipv4.ip_forward"] == "1" and kernel["net.ipv4.conf.eth0.rp_filter"] == "2"
    assert kernel["vpc_cidrs"] == ["10.0.0.0/16", "100.64.0.0/16"]  # every VPC CIDR, from IMDS
    assert kernel["snat"] == {
        "on": True,
        "to": "10.0.0.10",
        "exempt": ["10.0.0.0/16", "100.64.0.0/16"],
        "ports": "prng",
    }
    assert cfg["AWS_VPC_K8S_CNI_RANDOMIZESNAT"] == "prng"
    # drift: /readyz says what is wrong, the periodic reconcile repairs it
    sysctl_set(ns, "net.ipv4.ip_forward", "0")
    status, body = get(agent, "/readyz")
    assert status == 503 and "ip_forward" in str(body)
    agent._last_resync = -1e9  # due now
    agent.run_once()
    assert sysctl_get(ns, "net.ipv4.ip_forward") == "1"
    assert get(agent, "/readyz")[0] == 200
    # a CIDR associated with the VPC later is exempt from SNAT after the next resync
    world["eni0"].vpc_cidrs.append("172.20.0.0/16")
    agent._last_resync = -1e9
    agent.run_once()
    assert "172.20.0.0/16" in get(agent, "/v1/config")[1]["kernel"]["snat"]["exempt"]
    assert "172.20.0.0/16" in sh("nsenter", f"--net=/run/netns/{ns}", "nft", "list", "table", "ip", "warmpool").stdout


def test_max_pods_endpoint(world: dict[str, Any]) -> None:
    agent = world["agent"]
    agent.start()
    status, body = get(agent, "/v1/max-pods")
    assert status == 200
    assert body == {
        "max_pods": 110,
        "instance_type": "m5.large",
        "prefix": True,
        "max_eni": None,
        "kubelet_max_pods": None,
        "kubelet_source": f"not sent: none of {world['dir'] / 'kubelet/config.json'} exists, and no --max-pods flag",
        "pool_ceiling": 110,
    }
    agent.run_once()
    sent = _reports(world)
    assert sent and all("kubelet_max_pods" not in r for r in sent)  # an older allocator takes these


def _reports(world: dict[str, Any]) -> list[dict[str, Any]]:
    got = world["sqs"].receive_message(QueueUrl=world["reports"], MaxNumberOfMessages=10, WaitTimeSeconds=1)
    return [json.loads(m["Body"]) for m in got.get("Messages", [])]


def test_the_kubelets_max_pods_is_read_reported_and_caps_the_pool(world: dict[str, Any]) -> None:
    """Issue 24: a node group's own maxPods (nodeadm's drop-in over its config.json) lowers the
    agent's ceiling and rides in the report; without it the report has no such field (above)."""
    agent, d = world["agent"], world["dir"]
    (d / "kubelet" / "config.json.d").mkdir(parents=True)
    (d / "kubelet" / "config.json").write_text(json.dumps({"kind": "KubeletConfiguration", "maxPods": 110}))
    (d / "kubelet" / "config.json.d" / "00-nodeadm.conf").write_text(json.dumps({"maxPods": 58}))
    agent.start()
    agent.run_once()
    status, body = get(agent, "/v1/max-pods")
    assert status == 200 and body["max_pods"] == 110  # the formula, for comparison
    assert body["kubelet_max_pods"] == 58 and body["pool_ceiling"] == 58
    assert body["kubelet_source"] == str(d / "kubelet" / "config.json.d" / "00-nodeadm.conf")
    sent = _reports(world)
    assert sent and {r["kubelet_max_pods"] for r in sent} == {58}


def test_pod_veths_get_pod_mtu_and_enis_keep_eni_mtu(world: dict[str, Any]) -> None:
    agent, ns = world["agent"], world["ns"]
    agent.start()
    assert agent.cni.mtu == 1400  # what every pod veth is created with
    assert json.loads(sh("ip", "-j", "-n", ns, "link", "show", "eth0").stdout)[0]["mtu"] == 9001


def test_uninstall_removes_the_table_and_the_rule(world: dict[str, Any]) -> None:
    import subprocess
    import sys

    agent, ns = world["agent"], world["ns"]
    agent.start()
    agent.stop()
    listing = sh("nsenter", f"--net=/run/netns/{ns}", "nft", "list", "tables").stdout
    assert "table ip warmpool" in listing
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "WARMPOOL_HOST_NETNS": ns,
    }
    cmd = [sys.executable, "-c", "from node_agent.agent import main; main(['uninstall'])"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and "2 objects removed" in p.stdout, p.stderr
    assert "warmpool" not in sh("nsenter", f"--net=/run/netns/{ns}", "nft", "list", "tables").stdout
    assert "fwmark" not in sh("ip", "-n", ns, "rule").stdout
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and "0 objects removed" in p.stdout  # again: nothing left, still fine
