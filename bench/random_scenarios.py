"""``warmpool bench --random N --seed S``: scenarios drawn across the space the
scenario format allows, every strategy run on each, and the distribution of
each figure over them (docs/bench.md, "Random scenarios").

A scenario is drawn from ``random.Random(f"{seed}:{index}")`` alone, so scenario
*i* of a seed is the same whatever ``N`` and ``--jobs`` are, and each is run in
its own process when ``--jobs`` > 1 (the runs share nothing). The draw:

* 1 to 3 node groups of 2 to 12 nodes each (at most 24 in all), each of a type
  from :data:`TYPES` (Nitro and Xen, 3 to 8 ENIs), joining at 0 to 60 s over
  0 to 240 s;
* targets, one of: ``WARM_IP_TARGET`` (1 to 5) with ``MINIMUM_IP_TARGET`` (0 or
  up to 20) sometimes; ``MINIMUM_IP_TARGET`` alone; ``WARM_ENI_TARGET`` (0 to
  2, the default mode); prefix delegation with ``WARM_PREFIX_TARGET`` 1 or
  ``WARM_IP_TARGET`` (Nitro types only);
* a burst per group of 20 % to 85 % of the type's address capacity (at most
  50 pods a node, 240 a group) over 0 to 120 s, sometimes a second wave, churn (pods replaced every 60 to 180 s,
  2 to 6 times) and a scale-down at the end;
* foreign load (0.5 to 3 calls/s on some ENI actions, at most 80 % of the action's real
  refill), real quotas 35 % to
  100 % of the default table (``account.buckets``, which warmpool is not told),
  and faults (throttle storms, Lambda crashes, duplicate deliveries, attach
  failures, a subnet exhausted for a minute), each with its own probability.

Sized so that one scenario takes a few seconds of wall time for all three
strategies (docs/bench.md gives the measured total for 200).
"""

from __future__ import annotations

import json
import math
import random
import signal
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.call_causes import RunCalls, why_table
from bench.output import BenchResult, StrategyResult
from bench.scenario import STRATEGIES, Scenario, parse_scenario
from warmpool.buckets import DEFAULT_SPECS, MUTATING_ACTIONS
from warmpool.limits import KNOWN_TYPES

TYPES: tuple[str, ...] = (
    "t3.medium",
    "m5.large",
    "c5.large",
    "t3.large",
    "m5.xlarge",
    "c6i.xlarge",
    "r5.xlarge",
    "m5.2xlarge",
    "c5.2xlarge",
    "m5.4xlarge",
    "r5.4xlarge",
    "m6i.8xlarge",
    "m4.large",
    "m4.xlarge",
)
"""Instance types drawn from (Xen ``m4`` ones only outside prefix mode)."""

MAX_NODES = 24
MAX_PODS_PER_NODE = 50
MAX_PODS_PER_GROUP = 240
"""Sizes that keep one scenario (all three strategies) at a few CPU seconds."""

ENI_ACTIONS: tuple[str, ...] = tuple(sorted(a for a in MUTATING_ACTIONS if a in DEFAULT_SPECS))

FIGURES: tuple[str, ...] = ("calls_vs_bound", "makespan_vs_bound", "throttled_pct", "p99_time_to_ip_s")
"""The figures summarised over the scenarios, per strategy."""

FIGURE_TITLES = {
    "calls_vs_bound": "mutating calls / bound",
    "makespan_vs_bound": "makespan / bound",
    "throttled_pct": "throttled % of mutating",
    "p99_time_to_ip_s": "p99 time to IP s",
    "calls_vs_online_bound": "mutating calls / online",
    "makespan_vs_online_bound": "makespan / online",
}


FOREIGN_MAX_SHARE = 0.8
"""Drawn foreign load on an action is at most this share of the action's real refill."""


def _below_refill(load: dict[str, float], buckets: dict[str, dict[str, float]]) -> dict[str, float]:
    """Foreign load below the real refill: above it the account's bucket never refills for
    anyone and no strategy finishes (seed 1's scenario 61 drew 3.0 Attach calls a second against
    a real refill of 2.49). Capped, not drawn again, so every other draw stays as it was."""
    real = {a: buckets.get(a, {}).get("refill_per_s", DEFAULT_SPECS[a].refill_per_s) for a in load}
    return {a: min(x, round(FOREIGN_MAX_SHARE * real[a], 1)) for a, x in load.items()}


def _account(rng: random.Random) -> dict[str, Any]:
    """The account: foreign load and real quotas, each sometimes."""
    account: dict[str, Any] = {"budget_fraction": 0.8}
    if rng.random() < 0.3:
        actions = rng.sample(ENI_ACTIONS, rng.randint(1, len(ENI_ACTIONS)))
        account["background_load"] = {a: round(rng.uniform(0.5, 3.0), 1) for a in sorted(actions)}
    if rng.random() < 0.35:
        frac = rng.uniform(0.35, 1.0)
        account["buckets"] = {
            a: {
                "capacity": max(5, round(DEFAULT_SPECS[a].capacity * frac)),
                "refill_per_s": round(max(0.5, DEFAULT_SPECS[a].refill_per_s * frac), 2),
            }
            for a in ENI_ACTIONS
        }
    if "background_load" in account:
        account["background_load"] = _below_refill(account["background_load"], account.get("buckets", {}))
    return account


def _mode(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """Targets: WARM_IP 40 %, MINIMUM_IP alone 15 %, WARM_ENI 20 %, prefix delegation 25 %."""
    mode = rng.choices(("warm-ip", "minimum-ip", "warm-eni", "prefix"), weights=(40, 15, 20, 25))[0]
    if mode == "warm-ip":
        env: dict[str, Any] = {"WARM_IP_TARGET": rng.randint(1, 5)}
        if rng.random() < 0.3:
            env["MINIMUM_IP_TARGET"] = rng.randint(5, 20)
        return mode, env
    if mode == "minimum-ip":
        return mode, {"MINIMUM_IP_TARGET": rng.randint(5, 30)}
    if mode == "warm-eni":
        return mode, {"WARM_ENI_TARGET": rng.randint(0, 2)}
    env = {"ENABLE_PREFIX_DELEGATION": True}
    if rng.random() < 0.5:
        env["WARM_PREFIX_TARGET"] = 1
    else:
        env["WARM_ENI_TARGET"] = 0
        env["WARM_IP_TARGET"] = rng.randint(2, 8)
    return mode, env


def draw(seed: int, index: int) -> dict[str, Any]:
    """Scenario ``index`` of ``seed``: the scenario file's data (a dict, valid)."""
    rng = random.Random(f"{seed}:{index}")
    mode, env = _mode(rng)
    types = [t for t in TYPES if KNOWN_TYPES[t].prefix_capable] if mode == "prefix" else list(TYPES)
    n_groups = rng.choice((1, 1, 2, 3))
    groups: list[dict[str, Any]] = []
    workload: list[dict[str, Any]] = []
    total = 0
    last_t = 0.0
    for g in range(n_groups):
        count = min(rng.randint(2, 12), MAX_NODES - total)
        if count <= 0:
            break
        total += count
        itype = rng.choice(types)
        limits = KNOWN_TYPES[itype]
        join_at = float(rng.choice((0, 0, rng.randint(0, 60))))
        spread = float(rng.choice((0, rng.randint(10, 240))))
        name = f"ng{g + 1}"
        groups.append(
            {"name": name, "instance_type": itype, "count": count, "join_at_s": join_at, "join_spread_s": spread}
        )
        capacity = limits.enis() * limits.slots_per_eni
        if mode == "prefix":
            capacity = min(110, capacity * 16)
        pods = max(1, min(MAX_PODS_PER_NODE, MAX_PODS_PER_GROUP // count, int(capacity * rng.uniform(0.2, 0.85))))
        t = join_at + spread + rng.randint(0, 120)
        workload.append({"at_s": t, "node_group": name, "add_pods_per_node": pods, "spread_s": rng.randint(0, 120)})
        last_t = max(last_t, t + 120)
        if rng.random() < 0.25:  # a second wave
            more = max(1, int(pods * rng.uniform(0.1, 0.3)))
            if pods + more <= capacity:
                t2 = t + rng.randint(180, 600)
                workload.append({"at_s": t2, "node_group": name, "add_pods_per_node": more, "spread_s": 30})
                pods += more
                last_t = max(last_t, t2 + 30)
        if rng.random() < 0.3:  # churn: replace some pods again and again
            k = max(1, pods // rng.randint(3, 6))
            every = rng.randint(60, 180)
            times = rng.randint(2, 6)
            t3 = last_t + 60
            workload.append(
                {
                    "at_s": t3,
                    "node_group": name,
                    "delete_pods_per_node": k,
                    "spread_s": 20,
                    "repeat": {"every_s": every, "times": times},
                }
            )
            workload.append(
                {
                    "at_s": t3 + 20,
                    "node_group": name,
                    "add_pods_per_node": k,
                    "spread_s": 20,
                    "repeat": {"every_s": every, "times": times},
                }
            )
            last_t = max(last_t, t3 + every * times + 40)
        if rng.random() < 0.25:  # scale down
            workload.append(
                {
                    "at_s": last_t + 60,
                    "node_group": name,
                    "delete_pods_per_node": max(1, int(pods * rng.uniform(0.3, 0.9))),
                    "spread_s": 10,
                }
            )
            last_t += 70
    account = _account(rng)
    faults: list[dict[str, Any]] = []
    if rng.random() < 0.15:
        faults.append(
            {
                "at_s": rng.randint(0, 300),
                "duration_s": rng.randint(30, 180),
                "kind": "throttle-storm",
                "rate": round(rng.uniform(1, 5), 1),
            }
        )
    for kind, p, hi in (("lambda-crash", 0.1, 0.1), ("duplicate-delivery", 0.1, 0.2), ("attach-failure", 0.1, 0.1)):
        if rng.random() < p:
            faults.append({"at_s": 0, "duration_s": 3600, "kind": kind, "rate": round(rng.uniform(0.01, hi), 3)})
    if rng.random() < 0.05:
        faults.append(
            {
                "at_s": rng.randint(60, 300),
                "duration_s": 60,
                "kind": "subnet-exhausted",
                "subnet": "subnet-a",
                "rate": 1.0,
            }
        )
    data: dict[str, Any] = {
        "name": f"random-{seed}-{index}-{mode}",
        "seed": rng.randrange(1 << 30),
        "duration_s": float(max(1800, math.ceil((last_t + 900) / 60) * 60)),
        "strategies": list(STRATEGIES),
        "account": account,
        "cluster": {"name": "rnd", "env": env},
        "subnets": [{"id": "subnet-a", "az": "us-east-1a", "cidr": "10.0.0.0/16"}],
        "node_groups": groups,
        "workload": workload,
    }
    if faults:
        data["faults"] = faults
    return data


# --- figures --------------------------------------------------------------------


def figures_of(r: StrategyResult) -> dict[str, float | None]:
    """One scenario's figures for one strategy (None where undefined: no bound, a pod never ready)."""
    thr = 100.0 * r.throttled_calls / r.mutating_calls if r.mutating_calls else 0.0
    return {
        "calls_vs_bound": r.ratios.mutating_calls_vs_lower_bound,
        "makespan_vs_bound": r.ratios.makespan_vs_lower_bound if r.makespan_s is not None else math.inf,
        "throttled_pct": round(thr, 3),
        "p99_time_to_ip_s": r.time_to_ip_s.p99,
        "calls_vs_online_bound": r.ratios.mutating_calls_vs_online_bound,
        "makespan_vs_online_bound": r.ratios.makespan_vs_online_bound if r.makespan_s is not None else math.inf,
    }


@dataclass(frozen=True)
class Outcome:
    """One scenario's run: its data, figures per strategy, and what the runs flagged."""

    index: int
    name: str
    mode: str
    unknown_quota: bool
    figures: dict[str, dict[str, float | None]]
    duplicates: int
    leaked: int
    wall_s: float
    nodes: int = 0
    calls_by_cause: dict[str, int] = field(default_factory=dict)
    """Warmpool's accepted mutating calls by ``"<Action>: <cause>"`` (``bench/call_causes.py``)."""
    online_by_action: dict[str, int] = field(default_factory=dict)
    """The online bound's fewest calls per action."""


def run_one(seed: int, index: int, strategies: tuple[str, ...]) -> Outcome:
    """Draw scenario ``index`` of ``seed`` and run it (a top-level function: it runs in a worker process)."""
    import logging

    from bench.runner import run_bench

    for name in ("emulated.esm", "functions", "node_agent", "warmpool"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    data = draw(seed, index)
    scenario = parse_scenario(data, data["name"])
    result, _ = run_bench(scenario, strategies=list(strategies))
    return outcome_of(index, scenario, result)


def mode_of(scenario: Scenario) -> str:
    """``prefix``, ``ip`` (WARM_IP / MINIMUM_IP targets) or ``eni`` (WARM_ENI_TARGET)."""
    env = scenario.all_clusters[0].env
    if env.ENABLE_PREFIX_DELEGATION:
        return "prefix"
    return "ip" if env.ip_target_mode else "eni"


def outcome_of(index: int, scenario: Scenario, result: BenchResult) -> Outcome:
    return Outcome(
        index=index,
        name=scenario.name,
        mode=mode_of(scenario),
        unknown_quota=bool(scenario.account.buckets),
        figures={name: figures_of(r) for name, r in result.strategies.items()},
        duplicates=sum(r.duplicate_ips for r in result.strategies.values()),
        leaked=sum(r.leaked_enis for r in result.strategies.values() if r.strategy == "warmpool"),
        wall_s=result.wall_s,
        nodes=sum(g.count for g in scenario.node_groups),
        calls_by_cause=dict(result.strategies["warmpool"].calls_by_cause) if "warmpool" in result.strategies else {},
        online_by_action=dict(result.online_lower_bound.calls_by_action) if result.online_lower_bound else {},
    )


def _pct(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (``emulated.figures.percentile``'s rule), inf-aware."""
    rank = q / 100 * (len(xs) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    if math.isinf(xs[hi]) and ((hi != lo and rank > lo) or math.isinf(xs[lo])):
        return math.inf
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo) if hi != lo else xs[lo]


def summary(values: Iterable[float | None]) -> dict[str, Any]:
    """Median, p90 and worst of a figure (undefined values left out; inf = a pod never got an address)."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {"n": 0, "median": None, "p90": None, "worst": None}
    return {"n": len(xs), "median": _pct(xs, 50), "p90": _pct(xs, 90), "worst": xs[-1]}


def aggregate(outcomes: list[Outcome], *, subset: Callable[[Outcome], bool] | None = None) -> dict[str, dict[str, Any]]:
    """Per strategy, per figure: median, p90 and worst over the outcomes (or the subset)."""
    chosen = [o for o in outcomes if subset is None or subset(o)]
    strategies = sorted({s for o in chosen for s in o.figures}, key=lambda s: STRATEGIES.index(s))
    out: dict[str, dict[str, Any]] = {}
    keys = (*FIGURES, "calls_vs_online_bound", "makespan_vs_online_bound")
    for s in strategies:
        out[s] = {f: summary(o.figures[s].get(f) for o in chosen if s in o.figures) for f in keys}
    return out


def worst_of(outcomes: list[Outcome], strategy: str = "warmpool") -> Outcome | None:
    """The scenario where ``strategy`` is furthest from the bound (calls ratio × makespan ratio)."""

    def badness(o: Outcome) -> float:
        f = o.figures.get(strategy, {})
        c = f.get("calls_vs_bound") or 1.0
        m = f.get("makespan_vs_bound") or 1.0
        return c * m

    scored = [o for o in outcomes if strategy in o.figures]
    return max(scored, key=badness) if scored else None


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "dnf"
    return f"{x:.2f}"


def _three(v: dict[str, Any]) -> str:
    return f"median {_fmt(v['median'])}, p90 {_fmt(v['p90'])}, worst {_fmt(v['worst'])}"


def table(agg: dict[str, dict[str, Any]], title: str) -> str:
    lines = [title]
    head = f"{'figure':<26}{'strategy':<10}{'n':>5}{'median':>9}{'p90':>9}{'worst':>9}"
    lines.append(head)
    lines.append("-" * len(head))
    for f in FIGURE_TITLES:
        for s, figs in agg.items():
            v = figs[f]
            lines.append(
                f"{FIGURE_TITLES[f]:<26}{s:<10}{v['n']:>5}{_fmt(v['median']):>9}{_fmt(v['p90']):>9}{_fmt(v['worst']):>9}"
            )
    return "\n".join(lines)


def report(outcomes: list[Outcome]) -> str:
    parts = [table(aggregate(outcomes), f"all {len(outcomes)} scenarios")]
    groups: list[tuple[str, Callable[[Outcome], bool]]] = [
        ("secondary-IP modes (WARM_IP / MINIMUM_IP)", lambda o: o.mode == "ip"),
        ("prefix mode", lambda o: o.mode == "prefix"),
        ("real quotas below the configured ones", lambda o: o.unknown_quota),
    ]
    for title, pick in groups:
        n = sum(1 for o in outcomes if pick(o))
        if n:
            parts.append(table(aggregate(outcomes, subset=pick), f"{title}: {n} scenarios"))
    pre = aggregate([o for o in outcomes if o.mode == "prefix"]).get("warmpool")
    if pre:
        v = pre["calls_vs_online_bound"]
        parts.append("prefix mode, mutating calls of warmpool / online bound: " + _three(v))
    dup = sum(o.duplicates for o in outcomes)
    parts.append(f"duplicate addresses over all runs: {dup}; ENIs left by warmpool: {sum(o.leaked for o in outcomes)}")
    return "\n\n".join(parts)


def why_report(outcomes: list[Outcome]) -> str:
    """Where warmpool's mutating calls go, by action and cause, against the online bound's
    (``--why``; docs/bench.md, "Where the calls go"): secondary-IP, prefix and WARM_ENI runs
    apart. Only runs where warmpool finished (as the calls ratios)."""
    parts = []
    for title, mode in (("secondary-IP modes", "ip"), ("prefix mode", "prefix"), ("WARM_ENI mode", "eni")):
        runs = [
            RunCalls(o.nodes, o.calls_by_cause, o.online_by_action)
            for o in outcomes
            if o.mode == mode and o.figures.get("warmpool", {}).get("calls_vs_online_bound") is not None
        ]
        if runs:
            parts.append(why_table(runs, f"where warmpool's mutating calls go, {title}"))
    return "\n\n".join(parts)


def to_json(outcomes: list[Outcome], seed: int, worst_file: str | None) -> dict[str, Any]:
    def clean(x: Any) -> Any:
        if isinstance(x, float) and math.isinf(x):
            return "dnf"
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    data: dict[str, Any] = clean(
        {
            "seed": seed,
            "scenarios": len(outcomes),
            "summary": aggregate(outcomes),
            "secondary_ip": aggregate(outcomes, subset=lambda o: o.mode == "ip"),
            "prefix": aggregate(outcomes, subset=lambda o: o.mode == "prefix"),
            "unknown_quota": aggregate(outcomes, subset=lambda o: o.unknown_quota),
            "worst_scenario": worst_file,
            "per_scenario": [
                {
                    "index": o.index,
                    "name": o.name,
                    "mode": o.mode,
                    "unknown_quota": o.unknown_quota,
                    "figures": o.figures,
                    "duplicates": o.duplicates,
                    "leaked_enis": o.leaked,
                    "wall_s": o.wall_s,
                    "nodes": o.nodes,
                    "calls_by_cause": o.calls_by_cause,
                    "online_by_action": o.online_by_action,
                }
                for o in outcomes
            ],
        }
    )
    return data


def run_random(
    n: int,
    seed: int,
    *,
    jobs: int = 1,
    strategies: tuple[str, ...] = STRATEGIES,
    progress: Callable[[int, int, float], None] | None = None,
) -> list[Outcome]:
    """Run scenarios ``0 .. n-1`` of ``seed``; outcomes in index order (the same for any ``jobs``).

    Interrupted (SIGINT, or SIGTERM from :func:`random_main`), it returns the
    scenarios done so far: the report then says how many of ``n`` it covers.
    """
    t0 = time.perf_counter()
    out: list[Outcome] = []

    def done(o: Outcome) -> None:
        out.append(o)
        if progress:
            progress(len(out), n, time.perf_counter() - t0)

    if jobs <= 1:
        try:
            for i in range(n):
                done(run_one(seed, i, strategies))
        except KeyboardInterrupt:
            pass
        return out
    pool = ProcessPoolExecutor(jobs)
    try:
        futures = [pool.submit(run_one, seed, i, strategies) for i in range(n)]
        for fut in as_completed(futures):
            done(fut.result())
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
    else:
        pool.shutdown()
    return sorted(out, key=lambda o: o.index)


def _indices(outcomes: list[Outcome]) -> str:
    return ",".join(str(o.index) for o in outcomes) or "none"


def _sigterm(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def random_main(n: int, seed: int, opts: Any, *, strategies: tuple[str, ...]) -> int:
    """``opts``: the parsed ``--jobs``, ``--json``, ``--worst``, ``--quiet`` and ``--why`` of ``warmpool bench``."""
    jobs, json_out, worst_out, quiet = opts.jobs, opts.json, opts.worst, opts.quiet

    def bar(done: int, total: int, wall: float) -> None:
        eta = wall / done * (total - done)
        print(
            f"random scenarios: {done}/{total} done, {wall:.0f} s wall, ~{eta:.0f} s left", file=sys.stderr, flush=True
        )

    previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        outcomes = run_random(n, seed, jobs=jobs, strategies=strategies, progress=None if quiet else bar)
    finally:
        signal.signal(signal.SIGTERM, previous)
    worst = worst_of(outcomes, "warmpool" if "warmpool" in strategies else strategies[0])
    worst_file = None
    if worst is not None:
        Path(worst_out).write_text(
            f"# warmpool bench --random {n} --seed {seed}: the scenario furthest from the bound\n"
            + yaml.safe_dump(draw(seed, worst.index), sort_keys=False)
        )
        worst_file = worst_out
    print(f"warmpool bench --random {n} --seed {seed}")
    if len(outcomes) < n:
        print(f"interrupted: {len(outcomes)} of {n} scenarios done (indices {_indices(outcomes)})")
    print(report(outcomes))
    if opts.why and "warmpool" in strategies:
        print("\n" + why_report(outcomes))
    if worst is not None:
        print(f"\nworst scenario for warmpool: {worst.name} -> {worst_out} (rerun: warmpool bench {worst_out})")
    if json_out:
        Path(json_out).write_text(json.dumps(to_json(outcomes, seed, worst_file), indent=2) + "\n")
    return 0
