"""A damaged checkpoint, in real network namespaces: pods wired through the real
agent process and plugin, the agent stopped, its checkpoint truncated or
overwritten with garbage, the agent restarted. It starts, says so, keeps the
damaged file aside, holds every wired pod's address (found from the host's
routes), holds every free address as offered until the allocator answers a
report of the new process (issue 21 defect 2), then gives new pods other
addresses, and a DEL/CHECK/ADD of an old pod finds it again by its host veth
name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import install_cni
from node_agent.hostnet import host_veth_name
from tests.helpers.agents import ec2_node, free_port, moto_client, renew_all, start_agent, wait_ready
from tests.helpers.fakenode import (
    FakeEni,
    FakeImdsServer,
    FakeInstance,
    add_fake_eni,
    ip_json,
    netns,
    netns_available,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow]

_why = netns_available()
if _why:
    pytest.skip(f"network namespaces unavailable: {_why}", allow_module_level=True)

OLD = 3


def cni(plugin: Path, sock: str, command: str, cid: str, pod_ns: str) -> tuple[int, dict[str, Any]]:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": f"/run/netns/{pod_ns}",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(plugin.parent),
        "WARMPOOL_SOCKET": sock,
    }
    p = subprocess.run(
        [str(plugin)],
        input='{"cniVersion":"1.0.0","name":"wp","type":"warmpool-cni"}',
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else {}


def get(metrics: str, path: str) -> Any:
    body = urllib.request.urlopen(f"http://{metrics}{path}", timeout=5).read().decode()
    return body if path == "/metrics" else json.loads(body)


def stop(agent: subprocess.Popen[bytes]) -> None:
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_checkpoint_is_rebuilt_from_imds_and_the_host(tmp_path: Path, moto_endpoint: str, damage: str) -> None:
    with ExitStack() as stack:
        node = stack.enter_context(netns("wpnode"))
        pods = [stack.enter_context(netns("wppod")) for _ in range(OLD + 1)]
        imds = stack.enter_context(FakeImdsServer())
        # the node in EC2 too: the agent's tag look-up asks it for the instance's ENIs
        instance, *eni_ids = ec2_node(moto_endpoint)
        eni0 = FakeEni(
            eni_ids[0],
            "0a:00:00:00:00:c0",
            0,
            "10.0.0.10",
            "subnet-a",
            "10.0.0.0/24",
            ips=["10.0.0.11", "10.0.0.12"],
        )
        eni1 = FakeEni(
            eni_ids[1],
            "0a:00:00:00:00:c1",
            1,
            "10.0.1.10",
            "subnet-a",
            "10.0.1.0/24",
            ips=["10.0.1.11", "10.0.1.12", "10.0.1.13"],
        )
        add_fake_eni(node, "eth0", eni0.mac)  # the primary ENI: the agent sets the node up on it
        add_fake_eni(node, "eth1", eni1.mac)
        imds.instances[instance] = FakeInstance(instance, "m5.large", "us-east-1a", [eni0, eni1])
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        sqs = moto_client("sqs", moto_endpoint)
        reports = sqs.create_queue(QueueName="warmpool-demo-reports")["QueueUrl"]
        sock = str(tmp_path / "agent.sock")
        metrics = f"127.0.0.1:{free_port()}"
        state = tmp_path / "state"
        env = {
            **creds,
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(Path(__file__).parents[2]),
            "CLUSTER_NAME": "demo",
            "WARM_IP_TARGET": "1",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url_for(instance),
            "WARMPOOL_AWS_ENDPOINT_URL": moto_endpoint,
            "WARMPOOL_REPORTS_QUEUE_URL": reports,
            "WARMPOOL_STATE_DIR": str(state),
            "WARMPOOL_SOCKET": sock,
            "WARMPOOL_METRICS_ADDR": metrics,
            "WARMPOOL_HOST_NETNS": node,
            "WARMPOOL_ADD_WAIT_S": "0",
        }
        plugin = install_cni(str(tmp_path / "bin"), sys.executable)
        log = tmp_path / "agent.log"
        agent = start_agent(env, log)
        try:
            wait_ready(metrics)
            # a first start holds the addresses as offered (of unknown origin) until the allocator
            # answers: it unassigns them and grants fresh ones
            renew_all(sqs, reports, "demo", metrics, imds, [eni0, eni1])
            old: dict[str, str] = {}
            for i in range(OLD):
                rc, res = cni(plugin, sock, "ADD", f"old{i}", pods[i])
                assert rc == 0, res
                old[f"old{i}"] = res["ips"][0]["address"].removesuffix("/32")
            assert len(set(old.values())) == OLD
            stop(agent)

            good = (state / "checkpoint.json").read_bytes()
            bad = good[: len(good) // 2] if damage == "truncated" else os.urandom(200)
            (state / "checkpoint.json").write_bytes(bad)
            agent = start_agent(env, log)
            wait_ready(metrics)
            text = log.read_text()
            assert f"checkpoint {state / 'checkpoint.json'} is damaged" in text, text[-3000:]
            kept = [p for p in state.iterdir() if p.name.startswith("checkpoint.json.corrupt-")]
            assert [p.read_bytes() for p in kept] == [bad], "the damaged file is kept aside"
            json.loads((state / "checkpoint.json").read_text())  # and replaced by a good one

            # the wired pods' addresses are held by recovered holders named after their host veths
            view = get(metrics, "/v1/pods")
            recovered = {p["ip"]: p["holder"] for p in view if p["recovered"]}
            assert recovered == {ip: host_veth_name(cid, "eth0") for cid, ip in old.items()}, view
            m = get(metrics, "/metrics")
            assert 'warmpool_checkpoint_rebuilds_total{reason="damaged"} 1' in m
            assert f"warmpool_recovered_holders_total {OLD}" in m
            assert f"warmpool_addresses_recovered {OLD}" in m
            assert f"warmpool_addresses_assigned {OLD}" in m

            # a new pod gets nothing yet: the two free addresses may sit in a report the
            # previous process sent (its checkpoint knew which), so they are held as offered
            rc, res = cni(plugin, sock, "ADD", "new0", pods[OLD])
            assert rc == 1 and res.get("code") == 11, res
            # until the allocator answers a report of this process: of unknown origin, they are
            # never handed back (docs/allocator.md): unassigned, and fresh ones granted
            every = {*eni0.ips, *eni1.ips}
            offer = renew_all(sqs, reports, "demo", metrics, imds, [eni0, eni1])
            assert {ip for o in offer.release for ip in o.ips} == every - set(old.values())
            rc, res = cni(plugin, sock, "ADD", "new0", pods[OLD])
            assert rc == 0, (res, log.read_text()[-2000:])
            new_ip = res["ips"][0]["address"].removesuffix("/32")
            assert new_ip not in old.values()

            # CHECK and a repeated ADD find an old pod by its veth name: same address
            rc, res = cni(plugin, sock, "CHECK", "old0", pods[0])
            assert rc == 0, res
            rc, res = cni(plugin, sock, "ADD", "old0", pods[0])
            assert rc == 0 and res["ips"][0]["address"] == f"{old['old0']}/32", res

            # DEL of an old pod frees its address (cooldown) and removes its wiring
            rc, res = cni(plugin, sock, "DEL", "old1", pods[1])
            assert rc == 0, res
            routes = {r["dst"] for r in ip_json(node, "route", "show", "table", "main")}
            assert old["old1"] not in routes
            rules = subprocess.run(["ip", "-n", node, "-4", "rule"], capture_output=True, text=True).stdout
            assert f"to {old['old1']} lookup main" not in rules
            view = get(metrics, "/v1/pods")
            assert {p["ip"] for p in view if p["recovered"]} == {old["old2"]}
            assert {p["ip"] for p in view if not p["recovered"]} == {old["old0"], new_ip}
            m = get(metrics, "/metrics")
            assert "warmpool_addresses_cooldown 1" in m and "warmpool_addresses_assigned 3" in m

            # nothing handed out twice: every held address once
            held = [p["ip"] for p in view]
            assert len(held) == len(set(held)) == 3

            # the state directory lost altogether: the host still says which addresses pods use
            stop(agent)
            (state / "checkpoint.json").unlink()
            agent = start_agent(env, log)
            wait_ready(metrics)
            view = get(metrics, "/v1/pods")
            assert {p["ip"]: p["recovered"] for p in view} == {ip: True for ip in held}, view
            assert 'warmpool_checkpoint_rebuilds_total{reason="missing"} 1' in get(metrics, "/metrics")
        finally:
            stop(agent)
