"""Agent resident memory: idle after start, and with 100 pods wired.

Starts the real ``warmpool-agent`` process against moto's SQS server and a
fixture IMDS (an m5.4xlarge with 110 warm addresses), waits for /readyz,
reads VmRSS, then runs 100 CNI ADDs (real pod namespaces) and reads it again.
Needs root.

    .venv/bin/python tests/perf/agent_memory.py [--pods 100]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


from node_agent.agent import install_cni  # noqa: E402
from tests.helpers.agents import moto_client  # noqa: E402
from tests.helpers.fakenode import FakeEni, FakeImdsServer, FakeInstance, netns  # noqa: E402

INSTANCE = "i-0123456789abcdef9"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=100)
    args = ap.parse_args()
    from moto.server import ThreadedMotoServer

    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    endpoint = f"http://127.0.0.1:{port}"
    tmp = Path(tempfile.mkdtemp(prefix="wp-mem-"))
    with ExitStack() as stack:
        node = stack.enter_context(netns("wpmemnode"))
        imds = stack.enter_context(FakeImdsServer())
        eni0 = FakeEni(
            "eni-00000000000000c0",
            "0a:00:00:00:00:c0",
            0,
            "10.2.0.10",
            "subnet-a",
            "10.2.0.0/16",
            ips=[f"10.2.1.{i}" for i in range(1, args.pods + 11)][:29],
        )
        imds.instances[INSTANCE] = FakeInstance(INSTANCE, "m5.4xlarge", "us-east-1a", [eni0])
        # m5.4xlarge: 29 secondary addresses per ENI; spread the rest over secondary ENIs
        need = args.pods + 10 - len(eni0.ips)
        d = 1
        while need > 0:
            n = min(need, 29)
            mac = f"0a:00:00:00:00:{0xC0 + d:02x}"
            e = FakeEni(
                f"eni-00000000000000c{d}",
                mac,
                d,
                f"10.2.{d + 1}.250",
                "subnet-a",
                "10.2.0.0/16",
                ips=[f"10.2.{d + 1}.{i}" for i in range(1, n + 1)],
            )
            imds.instances[INSTANCE].enis.append(e)
            subprocess.run(
                [
                    "ip",
                    "-n",
                    node,
                    "link",
                    "add",
                    f"eth{d}",
                    "address",
                    mac,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    f"eth{d}p",
                ],
                check=True,
            )
            need -= n
            d += 1
        sqs = moto_client("sqs", endpoint)
        reports = sqs.create_queue(QueueName="warmpool-demo-reports")["QueueUrl"]
        metrics = f"127.0.0.1:{free_port()}"
        sock = str(tmp / "agent.sock")
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "CLUSTER_NAME": "demo",
            "WARM_IP_TARGET": "5",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url_for(INSTANCE),
            "WARMPOOL_AWS_ENDPOINT_URL": endpoint,
            "WARMPOOL_REPORTS_QUEUE_URL": reports,
            "WARMPOOL_STATE_DIR": str(tmp / "state"),
            "WARMPOOL_SOCKET": sock,
            "WARMPOOL_METRICS_ADDR": metrics,
            "WARMPOOL_HOST_NETNS": node,
        }
        agent = subprocess.Popen(
            [sys.executable, "-c", "from node_agent.agent import main; main(['run'])"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if urllib.request.urlopen(f"http://{metrics}/readyz", timeout=1).status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            time.sleep(2.0)
            idle = rss_mib(agent.pid)
            plugin = install_cni(str(tmp / "bin"), sys.executable)
            conf = '{"cniVersion":"1.0.0","name":"wp","type":"warmpool-cni"}'
            for i in range(args.pods):
                pod = stack.enter_context(netns("wpmempod"))
                cni_env = {
                    "CNI_COMMAND": "ADD",
                    "CNI_CONTAINERID": f"m{i}",
                    "CNI_NETNS": f"/run/netns/{pod}",
                    "CNI_IFNAME": "eth0",
                    "CNI_PATH": str(plugin.parent),
                    "WARMPOOL_SOCKET": sock,
                }
                p = subprocess.run([str(plugin)], input=conf, env=cni_env, capture_output=True, text=True)
                assert p.returncode == 0, p.stdout
            time.sleep(1.0)
            loaded = rss_mib(agent.pid)
            pods = len(json.loads(urllib.request.urlopen(f"http://{metrics}/v1/pods").read()))
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()
            moto.stop()
    print(json.dumps({"rss_mib": {"idle": round(idle, 1), f"with_{pods}_pods": round(loaded, 1)}}, indent=1))


if __name__ == "__main__":
    main()
