"""kill -9 the agent in the middle of CNI ADDs, restart it: no address lost or
doubled (checkpoint restore + IMDS reconcile). The agent runs as a real
process against moto's SQS server and a fixture IMDS, wiring real namespaces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import install_cni
from tests.helpers.agents import (
    confirm_restore,
    ec2_node,
    free_port,
    moto_client,
    renew_all,
    start_agent,
    wait_metric,
    wait_ready,
)
from tests.helpers.fakenode import FakeEni, FakeImdsServer, FakeInstance, add_fake_eni, netns, netns_available

pytestmark = [pytest.mark.netns, pytest.mark.slow]

_why = netns_available()
if _why:
    pytest.skip(f"network namespaces unavailable: {_why}", allow_module_level=True)

PODS = 8


def add(plugin: Path, sock: str, cid: str, pod_ns: str) -> tuple[int, dict[str, Any]]:
    env = {
        "CNI_COMMAND": "ADD",
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


def test_kill_9_mid_add_loses_and_doubles_nothing(tmp_path: Path, moto_endpoint: str) -> None:
    with ExitStack() as stack:
        node = stack.enter_context(netns("wpnode"))
        pods = [stack.enter_context(netns("wppod")) for _ in range(PODS)]
        imds = stack.enter_context(FakeImdsServer())
        # the node in EC2 too: the agent's tag look-up asks it for the instance's ENIs
        instance, *eni_ids = ec2_node(moto_endpoint)
        eni0 = FakeEni(
            eni_ids[0],
            "0a:00:00:00:00:b0",
            0,
            "10.0.0.10",
            "subnet-a",
            "10.0.0.0/24",
            ips=[f"10.0.0.{i}" for i in range(11, 11 + PODS)],
        )
        eni1 = FakeEni(
            eni_ids[1],
            "0a:00:00:00:00:b1",
            1,
            "10.0.1.10",
            "subnet-a",
            "10.0.1.0/24",
            ips=[f"10.0.1.{i}" for i in range(11, 14)],
        )
        add_fake_eni(node, "eth0", eni0.mac)  # the primary ENI: the agent sets the node up on it
        add_fake_eni(node, "eth1", eni1.mac)
        imds.instances[instance] = FakeInstance(instance, "m5.large", "us-east-1a", [eni0, eni1])
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        sqs = moto_client("sqs", moto_endpoint)
        reports = sqs.create_queue(QueueName="warmpool-demo-reports")["QueueUrl"]
        sock = str(tmp_path / "agent.sock")
        metrics = f"127.0.0.1:{free_port()}"
        env = {
            **creds,
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(Path(__file__).parents[2]),
            "CLUSTER_NAME": "demo",
            "WARM_IP_TARGET": "1",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url_for(instance),
            "WARMPOOL_AWS_ENDPOINT_URL": moto_endpoint,
            "WARMPOOL_REPORTS_QUEUE_URL": reports,
            "WARMPOOL_STATE_DIR": str(tmp_path / "state"),
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
            # the secondary ENI was set up on the host at start-up
            rules = subprocess.run(["ip", "-n", node, "-4", "rule"], capture_output=True, text=True).stdout
            assert "from 10.0.1.10 lookup 2" in rules, rules
            # a first start holds the addresses as offered (of unknown origin) until the allocator
            # answers: it unassigns them and grants fresh ones
            renew_all(sqs, reports, "demo", metrics, imds, [eni0, eni1])
            first: dict[str, dict[str, Any]] = {}
            with ThreadPoolExecutor(PODS) as pool:
                futs = {f"c{i}": pool.submit(add, plugin, sock, f"c{i}", pods[i]) for i in range(PODS)}
                time.sleep(0.05)
                os.kill(agent.pid, signal.SIGKILL)
                agent.wait()
                for cid, f in futs.items():
                    rc, res = f.result()
                    if rc == 0:
                        first[cid] = res
            agent = start_agent(env, log)
            wait_ready(metrics)
            # the restart restored its checkpoint: nothing free goes to a new pod until the
            # allocator says the checkpoint is current (docs/agent.md)
            confirm_restore(sqs, reports, "demo")
            wait_metric(metrics, "warmpool_restore_unconfirmed 0")
            # the runtime retries every ADD that did not succeed (and may repeat the ones that did).
            # An ADD killed between its veth and its route leaves a pod veth with no route the
            # checkpoint lacks: the restart holds every free address for it (its pod's address is
            # unknown) until that attachment's retried ADD reads what its pod's interface carries
            # (CniService._known_again): its address given back, or none; the other held
            # addresses are then offered back as of unknown origin and the allocator replaces
            # them. ADDs killed before their set-up leave records the restart releases into
            # cooldown: the retries wait that out. Any other failure of an ADD fails the test.
            final: dict[str, str] = {}
            deadline = time.monotonic() + 120
            while True:
                for i in range(PODS):
                    if f"c{i}" in final:
                        continue
                    rc, res = add(plugin, sock, f"c{i}", pods[i])
                    if rc == 0:
                        final[f"c{i}"] = res["ips"][0]["address"]
                    else:
                        assert res.get("code") == 11, (res, log.read_text()[-2000:])
                if len(final) == PODS:
                    break
                assert time.monotonic() < deadline, ("the pods never all got an address", log.read_text()[-2000:])
                if "pod veths with no route the checkpoint lacks" in log.read_text():
                    renew_all(sqs, reports, "demo", metrics, imds, [eni0, eni1], timeout=30)
                else:
                    # the records of ADDs killed before their set-up were released into cooldown
                    # (IP_COOLDOWN_PERIOD): free again once it has passed
                    time.sleep(1)
            for cid, res in first.items():
                assert final[cid] == res["ips"][0]["address"], "an acknowledged address changed"
            assert len(set(final.values())) == PODS, f"an address was handed out twice: {final}"
            held = json.loads(urllib.request.urlopen(f"http://{metrics}/v1/pods").read())
            assert sorted(p["ip"] + "/32" for p in held) == sorted(final.values())
            text = urllib.request.urlopen(f"http://{metrics}/metrics").read().decode()
            assert f"warmpool_addresses_assigned {PODS}" in text
            assert f"warmpool_addresses_total {PODS + 3}" in text  # nothing lost
        finally:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
                try:
                    agent.wait(10)
                except subprocess.TimeoutExpired:
                    agent.kill()
                    agent.wait()
