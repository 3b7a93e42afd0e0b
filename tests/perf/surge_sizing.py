"""How much of warmpool's distance to the bound better sizing of a surge could close (docs/bench.md,
"How far sizing can go"): the random set of ``warmpool bench --random N --seed S``, warmpool alone,
each sizing in turn in one process, side by side. Each gives the planner a
:class:`warmpool.planner.SurgeHint` (the allocator itself gives none):

* ``main``: no hint, as the allocator plans (a surge fills the ENI it touches; a new ENI gets
  what the report is short of);
* ``oracle``: each node's own peak pod count (the clairvoyant bound's, ``bench.lower_bound``),
  for its new ENIs and fills: what no online allocator can know, so the most sizing could win;
* ``oracle-new-enis``: the same, new ENIs only;
* ``peers``: the highest pod count reported in the last ``PEER_WINDOW_S`` by settled nodes (no
  burst, none waiting) of the same instance type, once at least ``PEER_MIN`` reported, for new
  ENIs only: what an allocator that remembered the cluster could learn;
* ``peers-fills``: the same for fills too.

    .venv/bin/python tests/perf/surge_sizing.py --random 200 --seed 1 --sizing main oracle peers

Prints, per sizing, the command's table for warmpool and the calls summed by action.
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import functions.allocator
import functions.execute
from bench.lower_bound import pod_counts
from bench.random_scenarios import Outcome, draw, outcome_of, report
from bench.runner import run_bench
from bench.scenario import parse_scenario
from bench.workload import expand
from warmpool.messages import PoolReport
from warmpool.planner import SurgeHint, plan_node

SIZINGS = ("main", "oracle", "oracle-new-enis", "peers", "peers-fills")
PEER_WINDOW_S = 600.0
PEER_MIN = 3

Hinter = Callable[[PoolReport], SurgeHint | None]


@contextmanager
def hinted(hint: Hinter) -> Iterator[None]:
    """The allocator's planner with ``hint`` for every report it plans."""

    def planned(report: PoolReport, *a: Any, **k: Any) -> Any:
        return plan_node(report, *a, surge_hint=hint(report), **k)

    modules = (functions.allocator, functions.execute)
    saved = [m.__dict__["plan_node"] for m in modules]
    for m in modules:
        m.plan_node = planned  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, was in zip(modules, saved, strict=True):
            m.plan_node = was  # type: ignore[attr-defined]


def oracle(peaks: dict[str, int], fills: bool) -> Hinter:
    return lambda r: SurgeHint(peaks[r.node], fills) if r.node in peaks else None


def peers(fills: bool) -> Hinter:
    seen: dict[str, collections.deque[tuple[float, int]]] = collections.defaultdict(collections.deque)

    def hint(r: PoolReport) -> SurgeHint | None:
        q = seen[r.instance_type]
        while q and q[0][0] < r.sent_at - PEER_WINDOW_S:
            q.popleft()
        if r.burst is None and r.pending_demand == 0 and r.assigned_ips > 0:
            q.append((r.sent_at, r.assigned_ips))
        return SurgeHint(max(a for _, a in q), fills) if len(q) >= PEER_MIN else None

    return hint


def run(seed: int, index: int, sizing: str) -> tuple[Outcome, collections.Counter[str]]:
    data = draw(seed, index)
    scenario = parse_scenario(data, data["name"])
    ex = expand(scenario)
    peaks = {name: pod_counts((e.at, e.kind) for e in events)[0] for name, events in ex.by_node().items()}
    hint: Hinter = {
        "main": lambda r: None,
        "oracle": oracle(peaks, True),
        "oracle-new-enis": oracle(peaks, False),
        "peers": peers(False),
        "peers-fills": peers(True),
    }[sizing]
    with hinted(hint):
        result, _ = run_bench(scenario, strategies=["warmpool"])
    out = outcome_of(index, scenario, result)
    by_action: collections.Counter[str] = collections.Counter()
    for cause, n in out.calls_by_cause.items():
        by_action[cause.split(":")[0]] += n
    return out, by_action


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sizing", nargs="+", choices=SIZINGS, default=["main", "oracle", "peers"])
    args = ap.parse_args(argv)
    for name in ("emulated.esm", "functions", "node_agent", "warmpool"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for sizing in args.sizing:
        t0 = time.perf_counter()
        outcomes, calls = [], collections.Counter[str]()
        for i in range(args.random):
            out, by_action = run(args.seed, i, sizing)
            outcomes.append(out)
            if out.mode == "ip":
                calls.update(by_action)
            print(f"\r{sizing}: {i + 1}/{args.random}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        print(f"\n== sizing {sizing}: random set {args.random} of seed {args.seed}, warmpool")
        print(report(outcomes))
        print(f"secondary-IP calls by action: {dict(sorted(calls.items()))}, all {sum(calls.values())}")
        print(f"wall {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
