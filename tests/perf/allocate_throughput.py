"""Figures for the allocator on the 200-node batch (issue 4).

    .venv/bin/python tests/perf/allocate_throughput.py [--nodes 200] [--reports 500]

Prints, for a batch of ``--reports`` reports from ``--nodes`` nodes served in
virtual time until every deferred report is served (emulated EC2, fast SQS):

* EC2 mutating calls per address delivered, and the lower bound (one call per ENI touched);
* throttled EC2 calls;
* DynamoDB calls per report (the DynamoDB stores on moto, every call counted);
* the allocator's wall time per 1,000 reports (in-process; in-memory stores,
  and DynamoDB stores on moto).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from moto import mock_aws

from tests.helpers.allocate_world import AllocatorWorld, moto_dynamo


class CountingDynamo:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if not callable(fn) or name.startswith("_") or name in ("exceptions", "meta"):
            return fn

        def call(*a: Any, **kw: Any) -> Any:
            self.calls[name] += 1
            return fn(*a, **kw)

        return call


def burst(w: AllocatorWorld, nodes: int, reports: int) -> list[Any]:
    for i in range(nodes):
        w.add_node(f"n{i:04d}")
    out: list[Any] = []
    rnd = 0
    while len(out) < reports:
        for i in range(nodes):
            if len(out) >= reports:
                break
            out.append(w.report(f"n{i:04d}", warm_ip=5, pending=10 * (rnd + 1) + (i % 3) * 5))
        rnd += 1
    return out


def run(nodes: int, reports: int, dynamo: Any = None) -> dict[str, Any]:
    w = AllocatorWorld(dynamo=dynamo)
    batch = burst(w, nodes, reports)
    t0 = time.perf_counter()
    first = w.deliver(batch)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    outs = w.drain()
    t_drain = time.perf_counter() - t0
    handled = reports + sum(o.served + o.deferred + o.stale + o.superseded for o in outs)
    stats = w.ec2_stats()
    addresses = sum(w.addresses(f"n{i:04d}") for i in range(nodes))
    enis_touched = nodes + sum(len(w.enis(f"n{i:04d}")) - 1 for i in range(nodes))
    new_enis = enis_touched - nodes
    lower = nodes + 3 * new_enis  # one Assign per primary ENI, Create+Attach+Modify per new ENI
    return {
        "reports": reports,
        "nodes": nodes,
        "batches": 1 + len(outs),
        "first_batch": {"served": first.served, "deferred": first.deferred, "superseded": first.superseded},
        "mutating_calls": w.mutating_calls(),
        "mutating_lower_bound": lower,
        "addresses": addresses,
        "mutating_calls_per_address": round(w.mutating_calls() / max(1, addresses), 4),
        "throttled": w.throttled(),
        "describe_calls": {a: v["calls"] for a, v in stats.items() if a.startswith("Describe")},
        "wall_s_first_batch": round(t_first, 3),
        "wall_s_drain": round(t_drain, 3),
        "records_handled": handled,
        "wall_s_per_1000_reports": round((t_first + t_drain) / handled * 1000, 3),
        "virtual_s_to_serve_all": round(w.clock.now() - 1_700_000_000.0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--reports", type=int, default=500)
    args = ap.parse_args()
    mem = run(args.nodes, args.reports)
    with mock_aws():
        db = CountingDynamo(moto_dynamo())
        dyn = run(args.nodes, args.reports, dynamo=db)
        dyn["dynamodb_calls"] = dict(db.calls)
        total = sum(db.calls.values()) - db.calls["create_table"] - db.calls["list_tables"]
        dyn["dynamodb_calls_per_report"] = round(total / dyn["records_handled"], 3)
    print(json.dumps({"in_memory_stores": mem, "dynamodb_stores_on_moto": dyn}, indent=2))


if __name__ == "__main__":
    main()
