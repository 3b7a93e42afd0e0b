"""Reports an hour from one node agent, by the answers it gets (issue 25).

    .venv/bin/python tests/perf/report_cadence.py [--hours 1] [--rtt 3] [--json OUT]

Drives the real :class:`node_agent.controller.PoolController` (default timing: ``heartbeat_s``
60, ``retry_s`` 5; ``node_agent.config.Timing``) on its pass loop in virtual time, every report
answered ``--rtt`` seconds later as the allocator would answer it, for each case:

* ``quiet``: the pool at its target, nothing to ask (heartbeats only);
* ``unmet``: one address and ``WARM_IP_TARGET=5``, every answer ``failed``/``unmet`` (a node at
  its ENI limit, or its subnets full: nothing the allocator can do);
* ``failing``: the same node, every answer a transient ``failed`` (``InternalError``: retried
  at the retry interval, as before).

Prints reports an hour per case (the SQS messages an agent sends; each answer is one more).
No assertions: a figure, measured side by side in one run; ``tests/unit/test_unmet_backoff.py``
holds the behaviour.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers.controller import make, result
from warmpool.pool import PoolConfig

CASES: dict[str, tuple[PoolConfig, list[str], dict[str, Any] | None]] = {
    "quiet": (PoolConfig(warm_ip=2), ["10.0.0.11", "10.0.0.12"], None),
    "unmet": (
        PoolConfig(warm_ip=5),
        ["10.0.0.11"],
        {"kind": "failed", "code": "unmet", "message": "4 units: instance at its ENI limit"},
    ),
    "failing": (PoolConfig(warm_ip=5), ["10.0.0.11"], {"kind": "failed", "code": "InternalError", "message": "x"}),
}


def reports_an_hour(case: str, hours: float, rtt: float, step: float = 0.5) -> float:
    pool, ips, answer = CASES[case]
    _, ctl = make(pool, ips)
    ctl.start(0.0)
    due: list[tuple[float, int]] = []
    sent = 0
    t, end = 0.0, hours * 3600.0
    while t < end:
        for at, seq in [d for d in due if d[0] <= t]:
            due.remove((at, seq))
            ctl.apply_result(result(seq, *([answer] if answer else [])), t)
        for r in ctl.tick(t):
            sent += 1
            due.append((t + rtt, r.seq))
        t += step
    return sent / hours


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--rtt", type=float, default=3.0, help="seconds from a report to its answer")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if a.hours <= 0 or a.rtt < 0:
        ap.error("--hours must be above 0 and --rtt at least 0")
    out = {case: round(reports_an_hour(case, a.hours, a.rtt), 1) for case in CASES}
    print(f"{'case':<10}{'reports/h':>10}")
    for case, n in out.items():
        print(f"{case:<10}{n:>10.1f}")
    if a.json:
        a.json.write_text(json.dumps({"hours": a.hours, "rtt_s": a.rtt, "reports_an_hour": out}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
