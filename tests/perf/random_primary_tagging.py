"""The random set of ``warmpool bench --random N --seed S`` run for warmpool with every drawn
cluster's ``primary_eni_tagging`` set (docs/bench.md, "Where the calls go"): ``launch-template``
(the nodes launch with their primary ENI tagged, no first-contact ``CreateTags``) or
``allocator`` (the draw's own: the same figures as the command). The draw itself never sets it.

    .venv/bin/python tests/perf/random_primary_tagging.py --random 200 --seed 1 --tagging launch-template

Prints the command's tables for warmpool and its ``--why`` breakdown.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from bench.random_scenarios import Outcome, draw, outcome_of, report, why_report
from bench.runner import run_bench
from bench.scenario import parse_scenario


def run(seed: int, index: int, tagging: str) -> Outcome:
    data = draw(seed, index)
    data["cluster"]["primary_eni_tagging"] = tagging
    scenario = parse_scenario(data, data["name"])
    result, _ = run_bench(scenario, strategies=["warmpool"])
    return outcome_of(index, scenario, result)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tagging", choices=("allocator", "launch-template"), default="launch-template")
    args = ap.parse_args(argv)
    for name in ("emulated.esm", "functions", "node_agent", "warmpool"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    t0 = time.perf_counter()
    outcomes = [run(args.seed, i, args.tagging) for i in range(args.random)]
    print(f"random set {args.random} of seed {args.seed}, warmpool, primary_eni_tagging: {args.tagging}")
    print(report(outcomes))
    print("\n" + why_report(outcomes))
    print(f"\nwall {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
