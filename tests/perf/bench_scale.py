"""The bench's own cost against the work: a burst of N nodes (30 pods a node,
mixed types, two AZs) run for warmpool, wall time and peak RSS per size.

    .venv/bin/python tests/perf/bench_scale.py [--nodes 1000 3000 10000] [--strategy warmpool]
    .venv/bin/python tests/perf/bench_scale.py --nodes 300 --profile out.prof   # cProfile, one size
    .venv/bin/python tests/perf/bench_scale.py --quotas scaled [--nodes ...]    # quotas grown with N
    .venv/bin/python tests/perf/bench_scale.py --pool launch [--nodes ...]      # nodes boot with their pool

Each size runs in its own process (``warmpool bench`` on a generated file), so
the peak RSS is that run's alone (``ru_maxrss`` of the child). The scenario:
nodes in four groups (m5.4xlarge, c5.2xlarge, r5.xlarge, m5.2xlarge; 30 pods
each fit every type; one more group, types in turn, per 1,500 nodes above 6,000,
each in its own /16 subnet), joining over ``max(120, N / 25)`` s, pods over 60 s from
180 s, ``WARM_IP_TARGET=1``.

``--quotas default``: the account's default EC2 quotas, so the burst lasts
longer as N grows (one account's budget serves it) and the work (reports,
retries, heartbeats over a longer burst) grows faster than N. ``--quotas
scaled``: every bucket's capacity and refill multiplied by ``max(1, N / 300)``
and warmpool told so (``account.quotas_told``), so the burst lasts about as long
at every size and the work grows with N: the bench's own cost against the work.

``--pool launch``: prefix mode, and each node boots with two /28s on its
primary ENI (``launch_pool: {prefixes: 2}``, a launch template's
``Ipv4PrefixCount``; the agent adopts them, ``WARMPOOL_ADOPT_LAUNCH_POOL``;
``MINIMUM_IP_TARGET=32`` keeps them), so the 30 pods need no mutating EC2 call
and no quota sets the pace.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from warmpool.buckets import DEFAULT_SPECS

ROOT = Path(__file__).resolve().parents[2]
TYPES = ("m5.4xlarge", "c5.2xlarge", "r5.xlarge", "m5.2xlarge")


SCALE_BASE = 300
"""Nodes the default quotas serve; ``--quotas scaled`` multiplies them by ``nodes / SCALE_BASE``."""


def scaled_buckets(nodes: int) -> dict[str, dict[str, float]]:
    """Every bucket of the default table grown by ``max(1, nodes / SCALE_BASE)``."""
    f = max(1.0, nodes / SCALE_BASE)
    return {a: {"capacity": b.capacity * f, "refill_per_s": b.refill_per_s * f} for a, b in DEFAULT_SPECS.items()}


GROUP_MAX = 1500
"""Nodes a group (and its subnet) holds at most: AWS subnets are at most /16 (65,531 usable
addresses), and 1,500 nodes of 30 pods, their pools and their ENIs' primaries fit one."""


def scenario(nodes: int, quotas: str = "default", pool: str = "ask") -> dict[str, Any]:
    groups = max(len(TYPES), -(-nodes // GROUP_MAX))
    per = [nodes // groups + (1 if i < nodes % groups else 0) for i in range(groups)]
    spread = max(120.0, nodes / 25)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return {
        "name": f"scale-{nodes}",
        "seed": 41,
        "duration_s": 3600,
        "strategies": ["warmpool", "vpc-cni", "cilium"],
        "account": {"budget_fraction": 0.8}
        if quotas == "default"
        else {"budget_fraction": 0.8, "buckets": scaled_buckets(nodes), "quotas_told": True},
        "cluster": {
            "name": "scale",
            # with a launch pool, MINIMUM_IP_TARGET keeps it (WARM_IP_TARGET alone would give one
            # /28 back before the pods come, and ask for it again when they do)
            "env": {"WARM_IP_TARGET": 1}
            if pool == "ask"
            else {"WARM_IP_TARGET": 1, "MINIMUM_IP_TARGET": 32, "ENABLE_PREFIX_DELEGATION": True},
        },
        "subnets": [
            {"id": f"subnet-{letters[i]}", "az": f"us-east-1{'abcd'[i % 4]}", "cidr": f"10.{i}.0.0/16"}
            for i in range(groups)
        ],
        "node_groups": [
            {
                "name": f"g{i}",
                "instance_type": TYPES[i % len(TYPES)],
                "count": n,
                "join_at_s": 0,
                "join_spread_s": spread,
                "subnet": f"subnet-{letters[i]}",
                **({} if pool == "ask" else {"launch_pool": {"prefixes": 2}}),
            }
            for i, n in enumerate(per)
            if n
        ],
        "workload": [
            {"at_s": spread + 60, "node_group": f"g{i}", "add_pods_per_node": 30, "spread_s": 60}
            for i, n in enumerate(per)
            if n
        ],
    }


def run(nodes: int, strategy: str, profile: str | None, quotas: str = "default", pool: str = "ask") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"scale-{nodes}.yaml"
        path.write_text(yaml.safe_dump(scenario(nodes, quotas, pool), sort_keys=False))
        out = Path(tmp) / "out.json"
        cmd = [sys.executable]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
        cmd += ["-m", "bench.cli", str(path), "--strategy", strategy, "--json", str(out), "--quiet"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(
            cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL
        )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = json.loads(out.read_text())["strategies"][strategy]
    return {
        "nodes": nodes,
        "pods": res["pods_requested"],
        "ready": res["pods_ready"],
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "peak_rss_mb": round(after.ru_maxrss / 1024, 1),
        "makespan_s": res["makespan_s"],
        "mutating_vs_bound": res["ratios"]["mutating_calls_vs_lower_bound"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 3000, 10000])
    ap.add_argument("--strategy", default="warmpool")
    ap.add_argument("--quotas", choices=("default", "scaled"), default="default", help="see the module's text")
    ap.add_argument("--pool", choices=("ask", "launch"), default="ask", help="see the module's text")
    ap.add_argument("--profile", metavar="OUT.prof", help="cProfile the (single) run into this file")
    a = ap.parse_args()
    if a.profile and len(a.nodes) != 1:
        ap.error("--profile: give one size")
    head = ("nodes", "pods", "ready", "wall s", "cpu s", "peak RSS MB", "makespan s", "calls/LB")
    widths = (6, 7, 7, 8, 8, 12, 11, 9)
    print(" ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for n in a.nodes:
        r = run(n, a.strategy, a.profile, a.quotas, a.pool)
        print(
            f"{r['nodes']:>6} {r['pods']:>7} {r['ready']:>7} {r['wall_s']:>8} {r['cpu_s']:>8} "
            f"{r['peak_rss_mb']:>12} {r['makespan_s']!s:>11} {r['mutating_vs_bound']!s:>9}",
            flush=True,
        )


if __name__ == "__main__":
    main()
