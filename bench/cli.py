"""``warmpool bench SCENARIO.yaml [--json OUT] [--plot OUT.png] [--strategy S ...]``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from bench.report import Progress, table
from bench.runner import run_bench
from bench.scenario import STRATEGIES, ScenarioError, load_scenario


def bench_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="warmpool bench",
        description="Run a scenario in virtual time for each strategy and compare them with the lower bound.",
    )
    ap.add_argument("scenario", help="scenario YAML (see docs/bench.md)")
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON")
    ap.add_argument("--plot", metavar="OUT.png", help="write the figure (matplotlib)")
    ap.add_argument("--strategy", action="append", choices=STRATEGIES, help="run only these (repeatable)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"warmpool bench: {exc}", file=sys.stderr)
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
    if args.json:
        Path(args.json).write_text(result.model_dump_json(indent=2) + "\n")
    if args.plot:
        from bench.plot import plot

        plot(result, series, args.plot)
    return 0


def main() -> None:  # pragma: no cover - convenience: python -m bench.cli
    raise SystemExit(bench_main(sys.argv[1:]))


if __name__ == "__main__":  # pragma: no cover
    main()
