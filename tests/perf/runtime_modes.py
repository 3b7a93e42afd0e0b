"""What the runtime's handling of a failed ADD costs, side by side (stop 49).

    .venv/bin/python tests/perf/runtime_modes.py [--seeds 0-59] [--json OUT]

Runs the whole-system simulation over the same seeds twice, every node's runtime one way
(``simulation.node.FORCE_CONTAINERD``): ``same-sandbox`` retries a failed ADD of the same sandbox
with no DEL (the variant the CNI spec forbids), ``containerd`` DELs it at once and makes the
pod's next sandbox, a new container id, after kubelet's 10-15 s back-off, and sends no CNI GC;
``containerd-no-linger`` is that with ``node_agent.datastore.PENDING_LINGER_S`` at 0, the agent
before stop 50 (a waiting pod not counted between its failed sandbox's DEL and its next ADD).
Prints, per mode: pods that got an address, their wait from start to answered ADD (median, p90,
p99, worst), the allocator's mutating EC2 calls, sandboxes made again, violating seeds.
No assertions: figures, measured in one run; the behaviour is held by
``tests/sim/test_containerd_runtime.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import node_agent.datastore
import simulation.node
from simulation.runner import plan_for, run_plan


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


AGENTS: list[Any] = []
"""Every node agent the runs made (a replaced node's too)."""


def _collect() -> None:
    init = simulation.node.SimAgent.__init__

    def made(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        AGENTS.append(self)

    simulation.node.SimAgent.__init__ = made  # type: ignore[method-assign]


MODES = ("same-sandbox", "containerd", "containerd-no-linger")


def measure(seeds: range, mode: str) -> dict[str, Any]:
    simulation.node.FORCE_CONTAINERD = mode != "same-sandbox"
    linger = node_agent.datastore.PENDING_LINGER_S
    if mode == "containerd-no-linger":
        node_agent.datastore.PENDING_LINGER_S = 0.0
    waits: list[float] = []
    calls = again = violating = 0
    for seed in seeds:
        AGENTS.clear()
        violations, (_, w) = run_plan(plan_for(seed, None))
        violating += bool(violations)
        for a in AGENTS:
            waits += a.rt.waits
        calls += sum(len(v) for v in w.calls_by_iid.values())
        again += w.faults.get("containerd:sandbox-again", 0)
    node_agent.datastore.PENDING_LINGER_S = linger
    waits.sort()
    return {
        "pods": len(waits),
        "wait_median_s": round(statistics.median(waits), 1) if waits else None,
        "wait_p90_s": round(_quantile(waits, 0.9), 1) if waits else None,
        "wait_p99_s": round(_quantile(waits, 0.99), 1) if waits else None,
        "wait_max_s": round(waits[-1], 1) if waits else None,
        "mutating_calls": calls,
        "sandboxes_again": again,
        "violating_seeds": violating,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-59", help="A-B, inclusive")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.seeds.split("-"))
    logging.disable(logging.CRITICAL)
    _collect()
    out = {mode: measure(range(lo, hi + 1), mode) for mode in MODES}
    for mode, fig in out.items():
        print(f"{mode:21} " + "  ".join(f"{k} {v}" for k, v in fig.items()))
    base = out["same-sandbox"]["mutating_calls"]
    for mode in MODES[1:]:
        if base:
            print(f"{mode} / same-sandbox mutating calls: {out[mode]['mutating_calls'] / base:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"seeds": args.seeds, **out}, indent=2))


if __name__ == "__main__":
    main()
