"""How long the node-level reconcile takes (root, network namespaces, nft): the first set-up,
a no-change run (what every resync costs), a repair after drift, and a /readyz check.

    sudo .venv/bin/python tests/perf/nodenet_reconcile.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from node_agent.config import HostNetSettings
from node_agent.netlink import sysctl_set
from node_agent.nodenet import NodeNetworking, NodeSpec
from tests.helpers.fakenode import netns, sh


def ms(f: object) -> float:
    t = time.perf_counter()
    f()  # type: ignore[operator]
    return (time.perf_counter() - t) * 1000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    runs = p.parse_args().runs
    first, noop, repair, ready = [], [], [], []
    for _ in range(runs):
        with netns("wpperf") as ns:
            sh(
                "ip",
                "-n",
                ns,
                "link",
                "add",
                "eth0",
                "address",
                "0a:00:00:00:00:01",
                "type",
                "veth",
                "peer",
                "name",
                "p",
            )
            spec = NodeSpec("0a:00:00:00:00:01", "10.0.0.10", ("10.0.0.0/16",), HostNetSettings())
            net = NodeNetworking(spec, ns)
            first.append(ms(net.setup))
            noop.append(ms(net.setup))
            ready.append(ms(net.problems))
            sysctl_set(ns, "net.ipv4.ip_forward", "0")
            sh("nsenter", f"--net=/run/netns/{ns}", "nft", "flush", "chain", "ip", "warmpool", "postrouting")
            repair.append(ms(net.setup))
    for name, xs in (
        ("first set-up", first),
        ("no-change run (resync)", noop),
        ("repair after drift", repair),
        ("/readyz check", ready),
    ):
        print(f"{name:24s} median {statistics.median(xs):6.1f} ms   max {max(xs):6.1f} ms   ({runs} runs)")


if __name__ == "__main__":
    main()
