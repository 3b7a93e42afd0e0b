"""``warmpool bench SCENARIO.yaml [--json OUT] [--plot OUT.png] [--strategy S ...]``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from bench.feasibility import over_ceiling
from bench.report import Progress, table
from bench.runner import run_bench
from bench.scenario import STRATEGIES, ScenarioError, load_scenario
from bench.workload import expand
from warmpool.argtypes import output_path


def bench_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="warmpool bench",
        description="Run a scenario in virtual time for each strategy and compare them with the lower bound.",
    )
    ap.add_argument("scenario", nargs="?", help="scenario YAML (see docs/bench.md); not with --random")
    ap.add_argument("--json", metavar="OUT", type=output_path, help="write the results as JSON")
    ap.add_argument("--plot", metavar="OUT.png", type=output_path, help="write the figure (matplotlib)")
    ap.add_argument("--strategy", action="append", choices=STRATEGIES, help="run only these (repeatable)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--random", type=int, metavar="N", help="run N scenarios drawn at random instead of a file")
    ap.add_argument("--seed", type=int, default=0, help="seed of the drawn scenarios (with --random)")
    ap.add_argument("--jobs", type=int, default=1, help="processes for --random (this machine: 2)")
    ap.add_argument(
        "--why", action="store_true", help="with --random: where warmpool's mutating calls go, by action and cause"
    )
    ap.add_argument(
        "--worst",
        metavar="OUT.yaml",
        type=output_path,
        default="worst-scenario.yaml",
        help="where --random writes its worst scenario",
    )
    args = ap.parse_args(argv)
    if args.random is not None:
        return _random(ap, args)
    if args.why:
        ap.error("--why is for --random")
    if args.scenario is None:
        ap.error("give a scenario file, or --random N")
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"warmpool bench: {exc}", file=sys.stderr)
        return 2
    impossible = over_ceiling(expand(scenario))
    if impossible:
        for item in impossible:
            print(f"warmpool bench: {args.scenario}: {item.describe()}", file=sys.stderr)
        print("warmpool bench: refused before the run: no strategy could finish it", file=sys.stderr)
        return 2
    progress = None if args.quiet else Progress(scenario.duration_s)
    # Injected faults make the production code log every crash and retry; the
    # bench reports them as counts (notes), so keep the terminal to the table.
    for name in ("emulated.esm", "functions", "node_agent", "warmpool"):
        logging.getLogger(name).setLevel(logging.CRITICAL)

    def unavailable(name: str, why: str) -> None:
        print(f"warmpool bench: strategy {name} not available: {why}", file=sys.stderr)

    result, series = run_bench(
        scenario,
        strategies=args.strategy,
        progress=progress.update if progress else None,
        on_unavailable=unavailable,
    )
    if progress:
        progress.close()
    print(table(result))
    try:
        if args.json:
            Path(args.json).write_text(result.model_dump_json(indent=2) + "\n")
        if args.plot:
            from bench.plot import plot

            plot(result, series, args.plot)
    except OSError as exc:  # checked before the run; this is a folder removed meanwhile, a full disk
        print(f"warmpool bench: cannot write {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _random(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.scenario is not None:
        ap.error("--random draws its scenarios: give no scenario file")
    if args.random < 1:
        ap.error("--random: must be >= 1")
    if args.jobs < 1:
        ap.error("--jobs: must be >= 1")
    if args.plot:
        ap.error("--plot is for one scenario, not --random")
    from bench.random_scenarios import random_main

    return random_main(args.random, args.seed, args, strategies=tuple(args.strategy or STRATEGIES))


def main() -> None:  # pragma: no cover - convenience: python -m bench.cli
    raise SystemExit(bench_main(sys.argv[1:]))


if __name__ == "__main__":  # pragma: no cover
    main()
