"""Figures for issue 8: faults injected and survived, fuzz cases run.

Runs the reliability suite and the fuzzers once (Hypothesis under its `ci`
profile) and prints the counts:
    .venv/bin/python tests/perf/fault_figures.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITES = [
    "tests/reliability",
    "tests/unit/test_fuzz_cni.py",
    "tests/unit/test_fuzz_messages.py",
    "tests/integration/test_fuzz_cni_process.py",
]


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        figures = Path(d) / "faults.jsonl"
        # the examples CI runs (tests/conftest.py's `ci` Hypothesis profile)
        env = {
            **os.environ,
            "WARMPOOL_FAULT_FIGURES": str(figures),
            "PYTHONPATH": str(ROOT),
            "HYPOTHESIS_PROFILE": "ci",
        }
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics", *SUITES],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - t0
        injected: Counter[str] = Counter()
        survived: Counter[str] = Counter()
        if figures.exists():
            for line in figures.read_text().splitlines():
                r = json.loads(line)
                injected[r["fault"]] += r["injected"]
                survived[r["fault"]] += r["survived"]
    fuzz = sum(int(n) for n in re.findall(r"- (\d+) passing, \d+ failing", p.stdout))
    failing = sum(int(n) for n in re.findall(r"- \d+ passing, (\d+) failing", p.stdout))
    summary = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-500:]
    print(f"test run: {summary}  ({wall:.1f} s wall)")
    print(f"{'fault':45} {'injected':>9} {'survived':>9}")
    for k in sorted(injected):
        print(f"{k:45} {injected[k]:9d} {survived[k]:9d}")
    print(f"{'total':45} {sum(injected.values()):9d} {sum(survived.values()):9d}")
    print(f"hypothesis examples run: {fuzz} passing, {failing} failing")
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
