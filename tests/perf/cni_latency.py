"""CNI ADD latency with a warm address, process start included.

Runs the installed plugin (``#!python -S``, stdlib only) exactly as a runtime
does, against the agent-side CNI service wiring real namespaces (a node
namespace, one pod namespace per run), and prints p50/p99 over N runs
(default 200). Also prints the interpreter/import start-up costs that decided
the thin-shim design. Needs root (network namespaces).

    .venv/bin/python tests/perf/cni_latency.py [--runs 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from node_agent.agent import install_cni
from node_agent.cniserver import CniService, CniSocketServer, NetlinkPods
from node_agent.datastore import Datastore
from node_agent.hostnet import setup_eni
from node_agent.netlink import Netlink
from node_agent.records import EniInfo
from tests.helpers.fakenode import add_fake_eni, netns, sh
from warmpool.clock import RealClock

ENI1 = EniInfo("eni-0000000000000001", 1, "0a:11:22:33:44:01", "10.1.0.20", "subnet-a", "10.1.0.0/16")


def startup_ms(code: str, *flags: str, n: int = 10) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, *flags, "-c", code], check=True)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()
    startup = {
        "bare_-S": startup_ms("pass", "-S"),
        "bare": startup_ms("pass"),
        "import_pyroute2": startup_ms("import pyroute2"),
        "import_pydantic": startup_ms("import pydantic"),
    }
    tmp = Path(tempfile.mkdtemp(prefix="wp-cni-perf-"))
    add_ms: list[float] = []
    del_ms: list[float] = []
    with netns("wpperfnode") as node:
        add_fake_eni(node, "eth1", ENI1.mac)
        with Netlink.open(node) as nl:
            setup_eni(nl, ENI1, 9001)
        ds = Datastore(cooldown_s=0.0)
        ds.add_eni(ENI1, 0.0)
        ds.add_addresses(ENI1.eni_id, [f"10.1.{i // 250}.{i % 250 + 2}" for i in range(args.runs + 10)])
        service = CniService(ds, NetlinkPods(node), mtu=9001, clock=RealClock())
        sock = str(tmp / "agent.sock")
        server = CniSocketServer(sock, service)
        server.serve_in_thread()
        plugin = install_cni(str(tmp / "bin"), sys.executable)
        conf = json.dumps({"cniVersion": "1.0.0", "name": "wp", "type": "warmpool-cni"})
        try:
            for i in range(args.runs):
                with netns("wpperfpod") as pod:
                    env = {
                        "CNI_COMMAND": "ADD",
                        "CNI_CONTAINERID": f"perf{i}",
                        "CNI_NETNS": f"/run/netns/{pod}",
                        "CNI_IFNAME": "eth0",
                        "CNI_PATH": str(plugin.parent),
                        "WARMPOOL_SOCKET": sock,
                    }
                    t = time.perf_counter()
                    p = subprocess.run([str(plugin)], input=conf, env=env, capture_output=True, text=True)
                    add_ms.append((time.perf_counter() - t) * 1000)
                    assert p.returncode == 0, p.stdout
                    t = time.perf_counter()
                    p = subprocess.run(
                        [str(plugin)], input=conf, env={**env, "CNI_COMMAND": "DEL"}, capture_output=True, text=True
                    )
                    del_ms.append((time.perf_counter() - t) * 1000)
                    assert p.returncode == 0, p.stdout
        finally:
            server.shutdown()
            server.server_close()
            sh("rm", "-rf", str(tmp))
    out = {
        "runs": args.runs,
        "add_ms": {"p50": round(pct(add_ms, 50), 1), "p99": round(pct(add_ms, 99), 1), "max": round(max(add_ms), 1)},
        "del_ms": {"p50": round(pct(del_ms, 50), 1), "p99": round(pct(del_ms, 99), 1)},
        "startup_ms": {k: round(v, 1) for k, v in startup.items()},
        "targets": {"p50": 100, "p99": 250},
    }
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
