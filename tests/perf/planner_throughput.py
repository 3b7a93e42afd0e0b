"""Planner throughput: node reports planned per second on one core.

Run: ``.venv/bin/python tests/perf/planner_throughput.py`` (or ``make bench-planner``).
Plans a 2,000-node sample batch (coalesce + plan + order, as the allocator
does) several times and prints the median; the target (docs/design.md) is ≥ 20,000/s.
"""

from __future__ import annotations

import statistics
import time

from warmpool_cli.sample_plan import plan_all, sample_cluster


def main() -> None:
    cluster = sample_cluster(2000, seed=7)
    rates = []
    for _ in range(7):
        t0 = time.perf_counter()
        plans = plan_all(cluster)
        dt = time.perf_counter() - t0
        rates.append(len(plans) / dt)
    print(
        f"planner: median {statistics.median(rates):,.0f} reports/s "
        f"(min {min(rates):,.0f}, max {max(rates):,.0f}) over {len(rates)} runs of {len(cluster)} reports"
    )


if __name__ == "__main__":
    main()
