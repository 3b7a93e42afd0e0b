"""``warmpool sim``: run seeds, summarise, replay and shrink failing ones.

    warmpool sim --seeds 0-9999 [--json OUT] [--jobs 2]
    warmpool sim --seed 17 [--keep 3,8,12]      # replay one seed exactly (prints its schedule)

A failing seed is shrunk (delta debugging over its event list: the smallest
subset, found by replaying deterministically, that still breaks the same
invariant) and printed with the one command that replays it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from emulated.figures import percentile
from simulation.kinds import ChurnerLaunch
from simulation.schedule import EVENT_KINDS, FAULT_KINDS, SPAN_S, SeedPlan, draw
from warmpool.argtypes import int_at_least, output_path

Mutation = Callable[[Any], None]


@dataclass
class SeedResult:
    seed: int
    events: int
    faults: dict[str, int]
    violations: list[dict[str, str]] = field(default_factory=list)
    loop_events: int = 0
    wall_s: float = 0.0


def plan_for(seed: int, keep: list[int] | None = None, without: frozenset[str] = frozenset()) -> SeedPlan:
    plan = draw(seed)
    if without:
        plan = plan.kept([i for i, e in enumerate(plan.events) if e.kind not in without])
    return plan.kept(keep)


def replay_command(seed: int, keep: list[int] | None = None, without: frozenset[str] = frozenset()) -> str:
    cmd = f"warmpool sim --seed {seed}"
    if without:
        cmd += f" --without {','.join(sorted(without))}"
    if keep is not None:
        cmd += f" --keep {','.join(map(str, keep)) or 'none'}"
    return cmd


def run_plan(plan: SeedPlan, mutate: Mutation | None = None) -> tuple[list[tuple[str, str]], Any]:
    from simulation.world import SimWorld

    w = SimWorld(plan, mutate)
    try:
        out = w.run()
    except Exception as exc:  # a harness bug must not end a many-seed run: report it as one
        import traceback

        tb = traceback.format_exc(limit=-3).replace("\n", " | ")
        w.violations.append(("harness-error", f"{type(exc).__name__}: {exc} ({tb[-600:]})"))
        from simulation.world import SeedOutcome

        out = SeedOutcome(plan.seed, len(plan.events), w.faults, w.violations, w.now())
    return out.violations, (out, w)


def run_seed(
    seed: int,
    keep: list[int] | None = None,
    mutate: Mutation | None = None,
    *,
    shrink: bool = True,
    shrink_budget: int = 60,
    without: frozenset[str] = frozenset(),
) -> SeedResult:
    t0 = time.perf_counter()
    plan = plan_for(seed, keep, without)
    violations, (out, w) = run_plan(plan, mutate)
    res = SeedResult(seed, len(plan.events), dict(out.faults), loop_events=w.events_run)
    if violations:
        inv, detail = violations[0]
        small = keep
        if shrink:
            small = shrink_events(seed, inv, keep, mutate, budget=shrink_budget, without=without)
        res.violations.append(
            {"seed": str(seed), "invariant": inv, "detail": detail, "replay": replay_command(seed, small, without)}
        )
    res.wall_s = time.perf_counter() - t0
    return res


def fails_with(
    seed: int, invariant: str, keep: list[int], mutate: Mutation | None, without: frozenset[str] = frozenset()
) -> bool:
    violations, _ = run_plan(plan_for(seed, keep, without), mutate)
    return bool(violations) and violations[0][0] == invariant


def shrink_events(
    seed: int,
    invariant: str,
    keep: list[int] | None,
    mutate: Mutation | None,
    budget: int = 60,
    without: frozenset[str] = frozenset(),
) -> list[int]:
    """ddmin over the kept event indices; at most ``budget`` replays."""
    cur = list(range(len(plan_for(seed, None, without).events))) if keep is None else list(keep)
    runs = 0
    n = 2
    while len(cur) >= 1 and runs < budget:
        chunk = max(1, len(cur) // n)
        parts = [cur[i : i + chunk] for i in range(0, len(cur), chunk)]
        reduced = False
        for part in parts:
            if runs >= budget:
                break
            rest = [i for i in cur if i not in part]
            runs += 1
            if fails_with(seed, invariant, rest, mutate, without):
                cur, n, reduced = rest, max(n - 1, 2), True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(cur), n * 2)
    return cur


# --- the fairness figure (issue 12) ---------------------------------------------------------

CHURN_PERIOD_S = 2.0


def fairness_plans(seed: int) -> tuple[SeedPlan, SeedPlan, str]:
    """The seed's pods alone (no faults), and the same with a rogue instance churning for the
    whole span (:class:`simulation.hostile.Churner`, flipping every :data:`CHURN_PERIOD_S`)."""
    base = plan_for(seed, without=frozenset(FAULT_KINDS))
    ev = (*base.events, ChurnerLaunch(at=1.0, itype="c5.xlarge", dur=SPAN_S, period=CHURN_PERIOD_S))
    return base, replace(base, events=tuple(sorted(ev, key=lambda e: (e.at, e.kind)))), "churner"


def honest_waits(w: Any, churner: str) -> tuple[list[float], int]:
    """Every honest pod's wait for an address, and how many honest pods still wait at the end
    (the seeds ask some nodes for more pods than they can hold: those wait whatever happens)."""
    out: list[float] = []
    left = 0
    for a in w.agents.values():
        if a.name == churner:
            continue
        out += a.rt.waits
        left += len(a.rt.asked)
    return out, left


def _fair_one(seed: int) -> tuple[list[float], list[float], list[str], list[int]]:
    logging.disable(logging.WARNING)
    base, churned, churner = fairness_plans(seed)
    bad: list[str] = []
    waits = []
    left = []
    for plan in (base, churned):
        violations, (_, w) = run_plan(plan)
        bad += [f"seed {seed}{' (churner)' if plan is churned else ''}: {i}: {d[:160]}" for i, d in violations]
        got, n = honest_waits(w, churner)
        waits.append(got)
        left.append(n)
    return waits[0], waits[1], bad, left


def p99(xs: list[float]) -> float:
    """:func:`emulated.figures.percentile` (0.0 for no waits)."""
    return percentile(xs, 99) or 0.0


def fairness(seeds: Iterable[int], jobs: int = 1) -> dict[str, Any]:
    """Honest nodes' p99 wait for an address, with one node churning and without, same seeds."""
    seeds = list(seeds)
    if jobs <= 1:
        outs = [_fair_one(s) for s in seeds]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            outs = list(pool.map(_fair_one, seeds, chunksize=4))
    without = [x for o in outs for x in o[0]]
    churned = [x for o in outs for x in o[1]]
    a, b = p99(without), p99(churned)
    modes = {s: draw(s).prefix_mode for s in seeds}
    by_mode = {}
    for name, want in (("secondary-ip", False), ("prefix", True)):
        ws = [x for s, o in zip(seeds, outs, strict=True) if modes[s] == want for x in o[0]]
        wc = [x for s, o in zip(seeds, outs, strict=True) if modes[s] == want for x in o[1]]
        by_mode[name] = {
            "seeds": sum(1 for s in seeds if modes[s] == want),
            "p99_without_s": round(p99(ws), 2),
            "p99_with_churner_s": round(p99(wc), 2),
            "ratio": round(p99(wc) / p99(ws), 3) if p99(ws) else None,
        }
    return {
        "seeds": len(seeds),
        "by_mode": by_mode,
        "pods": [len(without), len(churned)],
        "p99_without_s": round(a, 2),
        "p99_with_churner_s": round(b, 2),
        "ratio": round(b / a, 3) if a else None,
        "still_waiting": [sum(o[3][0] for o in outs), sum(o[3][1] for o in outs)],
        "violations": [v for o in outs for v in o[2]],
    }


def _parse_seeds(s: str) -> list[int]:
    """``A-B`` (inclusive, ``A <= B``) or a comma list of seeds, each a whole number >= 0;
    anything else is refused (argparse type: exit 2 with the reason)."""

    def seed(text: str) -> int:
        t = text.strip()
        if not t.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r} is not a seed (a whole number >= 0)")
        return int(t)

    text = s.strip()
    if text.startswith("-"):
        raise argparse.ArgumentTypeError(f"{s!r}: seeds are whole numbers >= 0")
    if "-" in text:
        a, _, b = text.partition("-")
        lo, hi = seed(a), seed(b)
        if lo > hi:
            raise argparse.ArgumentTypeError(f"{s!r}: the range is empty (A-B needs A <= B)")
        return list(range(lo, hi + 1))
    seeds = [seed(x) for x in text.split(",")]
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{s!r}: a seed repeated")
    return seeds


def _parse_keep(s: str) -> list[int]:
    """``none`` or a comma list of event indices (whole numbers >= 0)."""
    if s.strip() == "none":
        return []
    parts = [x.strip() for x in s.split(",")]
    if not all(x.isdigit() for x in parts):
        raise argparse.ArgumentTypeError(f"{s!r}: give 'none' or event indices such as 0,3,7")
    return [int(x) for x in parts]


def _one(args: tuple[int, bool, frozenset[str]]) -> SeedResult:
    logging.disable(logging.WARNING)
    return run_seed(args[0], shrink=args[1], without=args[2])


def run_many(
    seeds: Iterable[int],
    jobs: int = 1,
    *,
    shrink: bool = True,
    progress: Callable[[int, int, int], None] | None = None,
    without: frozenset[str] = frozenset(),
) -> list[SeedResult]:
    seeds = list(seeds)
    out: list[SeedResult] = []
    bad = 0
    if jobs <= 1:
        for s in seeds:
            r = run_seed(s, shrink=shrink, without=without)
            out.append(r)
            bad += bool(r.violations)
            if progress:
                progress(len(out), len(seeds), bad)
        return out
    with ProcessPoolExecutor(jobs) as pool:
        for r in pool.map(_one, [(s, shrink, without) for s in seeds], chunksize=8):
            out.append(r)
            bad += bool(r.violations)
            if progress:
                progress(len(out), len(seeds), bad)
    return out


def summary(results: list[SeedResult]) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults)
    return {
        "seeds": len(results),
        "events": sum(r.events for r in results),
        "loop_events": sum(r.loop_events for r in results),
        "faults": dict(sorted(faults.items())),
        "violations": [v for r in results for v in r.violations],
    }


def _bar(done: int, total: int, bad: int, t0: float) -> None:
    width = 30
    fill = int(width * done / max(total, 1))
    el = time.monotonic() - t0
    eta = el / max(done, 1) * (total - done)
    sys.stderr.write(
        f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} seeds, {bad} failing, "
        f"{el:.0f}s elapsed, ~{eta:.0f}s left "
    )
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _table(s: dict[str, Any], wall: float) -> str:
    lines = [
        f"seeds        {s['seeds']}",
        f"events       {s['events']} scheduled, {s['loop_events']} run",
        f"violations   {len(s['violations'])}",
        f"wall time    {wall:.1f}s",
        "faults injected:",
    ]
    for k, n in s["faults"].items():
        lines.append(f"  {k:<44} {n}")
    by_inv = Counter(v["invariant"] for v in s["violations"])
    if by_inv:
        lines.append("violations by invariant:")
        for k, n in by_inv.most_common():
            lines.append(f"  {k:<44} {n}")
        lines.append("failing seeds (replay with the command shown):")
        for v in s["violations"][:50]:
            lines.append(f"  seed {v['seed']}: {v['invariant']}: {v['detail'][:160]}")
            lines.append(f"      {v['replay']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)  # the components log every injected fault; the summary tells
    p = argparse.ArgumentParser(prog="warmpool sim", description="the whole system under deterministic simulation")
    p.add_argument("--seeds", type=_parse_seeds, help="A-B (inclusive) or a comma list")
    p.add_argument("--seed", type=int_at_least(0), help="replay one seed exactly (prints its schedule and outcome)")
    p.add_argument(
        "--keep", type=_parse_keep, help="with --seed: only these event indices (comma list; 'none' for no events)"
    )
    p.add_argument("--replay", action="store_true", help="with --seed: the same as --seed alone (kept for clarity)")
    p.add_argument("--json", type=output_path, help="write the summary as JSON here")
    p.add_argument("--jobs", type=int_at_least(1), default=1, help="processes (this machine: 2)")
    p.add_argument("--without", default="", help="leave these event kinds out of every schedule (comma list)")
    p.add_argument("--no-shrink", action="store_true", help="do not shrink failing seeds")
    p.add_argument(
        "--fairness",
        action="store_true",
        help="with --seeds: honest nodes' p99 wait for an address with one node churning vs without "
        "(each seed's pods, no faults, run twice)",
    )
    a = p.parse_args(argv)
    without = frozenset(k for k in a.without.split(",") if k)
    unknown = without - set(EVENT_KINDS)
    if unknown:
        p.error(f"unknown event kinds {sorted(unknown)}; choose from {', '.join(EVENT_KINDS)}")
    if a.seeds is not None and a.seed is not None:
        p.error("give --seeds A-B or --seed N, not both")
    if a.keep is not None and a.seed is None:
        p.error("--keep needs --seed N")
    if a.fairness and a.seeds is None:
        p.error("--fairness needs --seeds A-B")
    if a.seed is not None:
        keep = a.keep
        plan = plan_for(a.seed, None, without)
        print(
            f"seed {a.seed}: nodes {list(plan.nodes)}, prefix_mode={plan.prefix_mode}, warm_ip={plan.warm_ip}, "
            f"minimum_ip={plan.minimum_ip}, quota_fraction={plan.quota_fraction}"
        )
        for i, ev in enumerate(plan.events):
            if keep is None or i in keep:
                print(f"  [{i}] {ev.summary()}")
        r = run_seed(a.seed, keep=keep, shrink=not a.no_shrink, without=without)
        print(f"faults: {r.faults}")
        if not r.violations:
            print("no violation")
            return 0
        for v in r.violations:
            print(f"VIOLATION {v['invariant']}: {v['detail']}\nreplay (shrunk): {v['replay']}")
        return 1
    if not a.seeds:
        p.error("give --seeds A-B or --seed N")
    seeds = a.seeds
    if a.fairness:
        t0 = time.monotonic()
        fig = fairness(seeds, jobs=a.jobs)
        print(
            f"seeds        {fig['seeds']} (pods only, a rogue instance churning every {CHURN_PERIOD_S:g} s vs not)\n"
            f"honest pods  {fig['pods'][0]} without, {fig['pods'][1]} with the churner served; "
            f"{fig['still_waiting'][0]} and {fig['still_waiting'][1]} still waiting at the end\n"
            f"p99 wait     {fig['p99_without_s']} s without, {fig['p99_with_churner_s']} s with "
            f"(ratio {fig['ratio']}; the bound: 1.10)\n"
            + "".join(
                f"  {m:<13} {d['seeds']} seeds: p99 {d['p99_without_s']} s without, "
                f"{d['p99_with_churner_s']} s with (ratio {d['ratio']})\n"
                for m, d in fig["by_mode"].items()
            )
            + f"violations   {len(fig['violations'])}\nwall time    {time.monotonic() - t0:.1f}s"
        )
        for v in fig["violations"][:20]:
            print(f"  {v}")
        if a.json and not _write_json(a.json, fig):
            return 2
        return 1 if fig["violations"] or (fig["ratio"] or 0) > 1.10 else 0
    t0 = time.monotonic()
    results = run_many(
        seeds, jobs=a.jobs, shrink=not a.no_shrink, without=without, progress=lambda d, t, b: _bar(d, t, b, t0)
    )
    wall = time.monotonic() - t0
    s = summary(results)
    print(_table(s, wall))
    doc = {
        "seeds": s["seeds"],
        "events": s["events"],
        "faults": s["faults"],
        "violations": s["violations"],
        "wall_s": round(wall, 1),
    }
    if a.json and not _write_json(a.json, doc):
        return 2
    return 1 if s["violations"] else 0


def _write_json(path: str, doc: Any) -> bool:
    """Write ``doc``; on failure (the path was checked at start: a folder removed since, a
    full disk) say so on stderr and return False."""
    try:
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)
    except OSError as exc:
        print(f"warmpool sim: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True
