"""Fair shares under a churning node (issue 12, finding 3): other nodes' p99
wait for an address with one hostile churner among them, against the same run
without it.

Run: ``PYTHONPATH=. .venv/bin/python tests/perf/churn_fairness.py`` (add
``--no-defences`` to turn the allocator's fair shares, flip damping, release
delay and minimum ENI age off, as before issue 12).

The world is the allocator's integration world (emulated EC2 with its
throttling buckets, fast SQS, in-memory stores, virtual clock, identities
signed by the emulated IMDS). ``--nodes`` honest m5.large nodes start empty;
pods arrive on each at random (exponential gaps, mean ``--pod-gap-s``); every
second each node with waiting pods or fewer than WARM_IP_TARGET=2 free
addresses reports, and the reports of that second (plus re-sent deferred ones)
go to the allocator as one batch, as the event-source mapping would. A pod's
wait is from its arrival to the first second EC2 shows an address for it on
its node. The churner (m5.24xlarge, a valid identity: it reports only for
itself) alternates every ``--churn-every-s`` between asking for every address
the instance can hold and offering all of them back, dating its offers back to
look long quarantined: the cycle the issue measured (about 1,220 each of
Create/Attach/Modify/Detach/Delete in 300 s).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import Counter, deque
from typing import Any

from tests.helpers.allocate_world import AllocatorWorld
from warmpool.limits import known

OFF = {"fair_window_s": 0.0, "flip_limit": 0, "release_delay_s": 0.0, "min_eni_age_s": 0.0}


def run(
    nodes: int,
    duration_s: int,
    churner: bool,
    defences: bool,
    seed: int,
    pod_gap_s: float,
    churn_every_s: int,
    **settings: Any,
) -> dict[str, Any]:
    rng = random.Random(seed)
    w = AllocatorWorld(**({**settings} if defences else {**settings, **OFF}))
    names = [f"n{i}" for i in range(nodes)]
    for n in names:
        w.add_node(n, "m5.large")
    cap = known("m5.large").capacity(prefix_mode=False)
    arrivals: dict[str, deque[float]] = {n: deque() for n in names}
    next_pod = {n: rng.expovariate(1 / pod_gap_s) for n in names}
    waits: list[float] = []
    start = w.clock.now()
    if churner:
        w.add_node("churn", "m5.24xlarge")
        churn_cap = known("m5.24xlarge").capacity(prefix_mode=False)
    c = w.sqs.client()
    for tick in range(duration_s):
        now = w.clock.now()
        t = now - start
        reports: list[Any] = []
        for n in names:
            while next_pod[n] <= t and w.pods[n] + len(arrivals[n]) < cap:
                arrivals[n].append(start + next_pod[n])
                next_pod[n] += rng.expovariate(1 / pod_gap_s)
            free = w.addresses(n) - w.pods[n]
            if arrivals[n] or free < 2:
                reports.append(w.report(n, warm_ip=2, warm_eni=0, pending=max(0, len(arrivals[n]) - free)))
        if churner and tick % churn_every_s == 0:
            if (tick // churn_every_s) % 2 == 0:
                reports.append(w.report("churn", warm_ip=churn_cap, warm_eni=0, pending=churn_cap, assigned=0))
            else:
                offers = [
                    {"eni_id": e.id, "ips": list(e.secondary), "quarantined_at": now - 30}
                    for e in w.enis("churn")
                    if e.secondary
                ]
                reports.append(w.report("churn", warm_ip=0, warm_eni=0, assigned=0, release=offers))
        bodies: list[Any] = list(reports)
        while True:  # deferred reports the allocator re-sent, now visible
            msgs = c.receive_message(QueueUrl=w.reports_url, MaxNumberOfMessages=10).get("Messages", [])
            if not msgs:
                break
            for m in msgs:
                bodies.append(m["Body"])
                c.delete_message(QueueUrl=w.reports_url, ReceiptHandle=m["ReceiptHandle"])
        for i in range(0, len(bodies), 100):
            w.deliver(bodies[i : i + 100])
        w.clock.advance(1.0)
        now = w.clock.now()
        for n in names:
            room = w.addresses(n) - w.pods[n]
            while arrivals[n] and room > 0:
                waits.append(now - arrivals[n].popleft())
                w.pods[n] += 1
                room -= 1
    stats = w.ec2_stats()
    mutating = Counter({a: s["calls"] for a, s in stats.items() if not a.startswith("Describe")})
    waits.sort()
    return {
        "pods": len(waits),
        "still_waiting": sum(len(q) for q in arrivals.values()),
        "p50_s": waits[len(waits) // 2] if waits else math.nan,
        "p99_s": waits[min(len(waits) - 1, int(len(waits) * 0.99))] if waits else math.nan,
        "max_s": waits[-1] if waits else math.nan,
        "calls": dict(sorted(mutating.items())),
        "damped": w.tally.get("NodesDamped"),
        "fair_share_deferred": w.tally.get("FairShareDeferred"),
        "releases_held": w.tally.get("ReleasesHeld"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=60)
    ap.add_argument("--duration-s", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pod-gap-s", type=float, default=4.0)
    ap.add_argument("--churn-every-s", type=int, default=1)
    ap.add_argument(
        "--budget-fraction",
        type=float,
        default=0.8,
        help="warmpool's share of the account's EC2 buckets (other clusters use the rest); "
        "default 0.8, the allocator's; lower, the buckets, not the report cycle, bound "
        "the others' wait",
    )
    ap.add_argument("--no-defences", action="store_true", help="only the runs without the defences")
    ap.add_argument("--fair-window-s", type=float, default=None, help="override the allocator setting")
    a = ap.parse_args()
    if not 0 < a.budget_fraction <= 1:
        ap.error("--budget-fraction must be in (0, 1]")
    extra: dict[str, Any] = {"budget_fraction": a.budget_fraction}
    if a.fair_window_s is not None:
        extra["fair_window_s"] = a.fair_window_s
    runs = [(False, False), (False, True)] if a.no_defences else [(True, False), (True, True), (False, True)]
    out = {}
    for defences, churn in runs:
        label = f"defences {'on' if defences else 'off'}, {'with' if churn else 'without'} churner"
        t0 = time.perf_counter()
        out[label] = run(a.nodes, a.duration_s, churn, defences, a.seed, a.pod_gap_s, a.churn_every_s, **extra)
        out[label]["wall_s"] = round(time.perf_counter() - t0, 1)
        print(f"{label:34s} " + json.dumps(out[label]), flush=True)
    print(f"{a.nodes} nodes, {a.duration_s} s, seed {a.seed}, budget fraction {a.budget_fraction}")
    base = next(r for k, r in out.items() if "without" in k)["p99_s"]
    print("| run | others' p50 / p99 / max wait (s) | p99 vs without | Create / Delete calls (all nodes) |")
    print("|---|---|---|---|")
    for label, r in out.items():
        calls = r["calls"]
        print(
            f"| {label} | {r['p50_s']:.2f} / {r['p99_s']:.2f} / {r['max_s']:.2f} | "
            f"{(r['p99_s'] / base - 1) * 100:+.1f}% | {calls.get('CreateNetworkInterface', 0)} / "
            f"{calls.get('DeleteNetworkInterface', 0)} |"
        )


if __name__ == "__main__":
    main()
