"""``warmpool plan``: the core planning a sample cluster's reports.

A scale-out in one picture, with no AWS at all: a few hundred nodes of mixed
types report their pools; the batch is coalesced, ordered and planned, and the
EC2 calls the plan needs are compared with what per-node ipamd would make for
the same demand (one call per address at ``WARM_IP_TARGET=1``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import time
from collections import Counter

from warmpool.argtypes import int_at_least
from warmpool.limits import known
from warmpool.messages import EniReport, PoolReport, Targets
from warmpool.planner import Eni, Inventory, Plan, plan_node
from warmpool.pool import PoolConfig, PoolState, compute
from warmpool.scheduling import coalesce, priority_key
from warmpool.subnets import Subnet

AZS = ("us-east-1a", "us-east-1b")
TYPES = ("m5.large", "m5.xlarge", "m5.4xlarge")


def sample_cluster(
    nodes: int, seed: int, warm_ip: int = 1, pods: tuple[int, int] = (5, 40)
) -> list[tuple[PoolReport, Inventory]]:
    """Nodes that just joined (primary ENI only) with pods arriving."""
    rng = random.Random(seed)
    out = []
    for i in range(nodes):
        itype = TYPES[i % len(TYPES)]
        lim = known(itype)
        az = AZS[i % len(AZS)]
        base = ipaddress.IPv4Address("10.0.0.0") + 256 * (i + 1)
        prim = Eni(f"eni-{i:08x}", 0, 0, f"subnet-{az[-1]}", str(base + 4))
        want = min(rng.randint(*pods), lim.max_pods() - 2)
        report = PoolReport(
            cluster="demo",
            node=f"node-{i:04d}",
            instance_id=f"i-{i:017x}",
            instance_type=itype,
            availability_zone=az,
            seq=1,
            sent_at=0,
            targets=Targets(warm_ip=warm_ip),
            enis=[EniReport(eni_id=prim.eni_id, device_index=0, subnet_id=prim.subnet_id, primary_ip=prim.primary_ip)],
            pending_demand=want,
        )
        out.append((report, Inventory(report.instance_id, itype, az, (prim,))))
    return out


SUBNETS = [
    Subnet("subnet-a", "us-east-1a", "10.0.0.0/17", 30000),
    Subnet("subnet-b", "us-east-1b", "10.0.128.0/17", 30000),
]


def plan_all(cluster: list[tuple[PoolReport, Inventory]]) -> list[Plan]:
    inventories = {r.node: inv for r, inv in cluster}
    batch = coalesce([r for r, _ in cluster], {})
    plans = []
    for report in batch.keep:
        plans.append(plan_node(report, inventories[report.node], known(report.instance_type), SUBNETS, cluster="demo"))
    order = {p.node: priority_key(r, p.delta) for p, r in zip(plans, batch.keep, strict=True)}
    plans.sort(key=lambda p: order[p.node])
    return plans


def ipamd_calls(report: PoolReport) -> int:
    """Mutating calls per-node ipamd makes for the same demand: one
    AssignPrivateIpAddresses per address with ``WARM_IP_TARGET`` (a whole
    ENI's worth per call otherwise), plus create and attach per new ENI."""
    lim = known(report.instance_type)
    cfg = PoolConfig.from_report(report)
    need = compute(cfg, PoolState.from_report(report), lim).short
    per_call = 1 if cfg.ip_targets else lim.slots_per_eni
    new_enis = -(-max(0, need - lim.slots_per_eni) // lim.slots_per_eni)
    return -(-need // per_call) + 2 * new_enis


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="warmpool plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int_at_least(1), default=300, help="nodes in the sample cluster (default 300)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--warm-ip", type=int_at_least(0), default=1, help="WARM_IP_TARGET of every node (default 1)")
    ap.add_argument("--json", action="store_true", help="print the plans as JSON lines")
    a = ap.parse_args(argv)
    cluster = sample_cluster(a.nodes, a.seed, a.warm_ip)
    t0 = time.perf_counter()
    plans = plan_all(cluster)
    dt = time.perf_counter() - t0
    if a.json:
        for p in plans:
            print(
                json.dumps(
                    {
                        "node": p.node,
                        "kind": p.kind,
                        "tokens": p.tokens(),
                        "unmet": p.unmet,
                        "calls": [type(c).__name__ for c in p.calls],
                    }
                )
            )
        return 0
    calls: Counter[str] = Counter()
    for p in plans:
        calls.update(p.tokens())
    addresses = sum(p.delta.short for p in plans)
    ipamd = sum(ipamd_calls(r) for r, _ in cluster)
    print(f"planned {len(plans)} node reports in {dt * 1000:.1f} ms ({len(plans) / dt:,.0f} reports/s on one core)")
    print(f"addresses short across the cluster: {addresses:,}")
    print(f"{'EC2 action':34} {'calls':>7}")
    for action, n in sorted(calls.items()):
        print(f"{action:34} {n:>7}")
    total = sum(calls.values())
    print(f"{'total mutating calls (warmpool)':34} {total:>7}   ({total / max(addresses, 1):.3f} per address)")
    print(f"{'per-node ipamd, same demand':34} {ipamd:>7}   ({ipamd / max(addresses, 1):.3f} per address)")
    print("first plans, in priority order:")
    for p in plans[:5]:
        desc = ", ".join(f"{type(c).__name__}({getattr(c, 'ips', 0) or getattr(c, 'prefixes', 0)})" for c in p.calls)
        print(f"  {p.node} {p.kind:8} short={p.delta.short:<3} {desc}")
    return 0
