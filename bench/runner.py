"""Run a scenario: each strategy in its own world (fresh emulated EC2, same
seed, same events), then the figures of docs/design.md's "Bench output"."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.joins import join_limit
from bench.lower_bound import idle_target, lower_bound, online_lower_bound
from bench.output import BenchResult, FinalNode, LowerBound, Percentiles, PrefixUse, Ratios, StrategyResult
from bench.scenario import Scenario
from bench.strategies.base import Strategy
from bench.workload import Expanded, expand
from bench.world import BenchWorld
from emulated.figures import leaked_enis, percentile


class StrategyUnavailable(RuntimeError):
    """A strategy whose parts have not landed (the run says so and goes on)."""


def strategy_class(name: str) -> type[Strategy]:
    if name == "vpc-cni":
        from bench.strategies.vpc_cni import VpcCni

        return VpcCni
    if name == "cilium":
        from bench.strategies.cilium import Cilium

        return Cilium
    if name == "warmpool":
        from bench.strategies.warmpool import Warmpool

        return Warmpool
    raise ValueError(f"unknown strategy {name!r}")


@dataclass
class Series:
    """What the plot draws for one strategy."""

    ready_times: list[float] = field(default_factory=list)
    per_second: dict[int, list[int]] = field(default_factory=dict)
    """second -> [calls, throttled, mutating accepted]"""
    end_s: float = 0.0
    call_log: list[tuple[float, str, str]] = field(default_factory=list)
    """Every EC2 request: (time, action, "ok" | "throttled" | error code)."""
    created_times: list[float] = field(default_factory=list)
    """When each pod was created (the arrival curve), sorted."""


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 3)


def run_strategy(
    scenario: Scenario,
    expanded: Expanded,
    name: str,
    lb: LowerBound,
    progress: Callable[[float], None] | None = None,
) -> tuple[StrategyResult, Series]:
    t0 = time.perf_counter()
    cls = strategy_class(name)
    world = BenchWorld(scenario, expanded, name)
    strategy = cls(world)
    strategy.start()
    world.run(progress=progress, busy=strategy.busy)
    result = collect(world, strategy, lb)
    result.wall_s = round(time.perf_counter() - t0, 3)
    series = Series(
        ready_times=sorted(world.book.ready_at.values()),
        per_second=world.ec2.per_second,
        end_s=world.settled_at or world.now(),
        call_log=world.ec2.log,
        created_times=sorted(world.book.created.values()),
    )
    return result, series


def collect(world: BenchWorld, strategy: Strategy, lb: LowerBound) -> StrategyResult:
    book = world.book
    end = world.settled_at if world.settled_at is not None else world.now()
    waits: list[float] = []
    unready_alive = 0
    for pod, created in book.created.items():
        if pod in book.ready_at:
            waits.append(book.ready_at[pod] - created)
        elif pod not in book.deleted:
            unready_alive += 1
            waits.append(end - created)  # censored: still waiting when the run ended
    waits.sort()
    ready = len(book.ready_at)
    makespan = max(book.ready_at.values()) if ready and unready_alive == 0 else None
    finished = unready_alive == 0

    emu = world.emu
    emu.settle()
    owner_of: dict[str, str] = {}  # address -> instance
    final_nodes: list[FinalNode] = []
    live_on: dict[str, int] = {}
    for pod in book.live():
        if pod in book.ready_at:
            live_on[book.node_of[pod]] = live_on.get(book.node_of[pod], 0) + 1
    idle = 0
    for name, node in sorted(world.nodes.items()):
        inst = emu.instances[node.instance_id]
        enis = [emu.enis[e] for e in inst.slots.values() if e in emu.enis]
        total = 0
        prefixes = 0
        for e in enis:
            total += len(e.secondary) + 16 * len(e.prefixes)
            prefixes += len(e.prefixes)
            for a in e.secondary:
                owner_of[a] = node.instance_id
            for p in e.prefixes:
                for addr in ipaddress.IPv4Network(p):
                    owner_of[str(addr)] = node.instance_id
        assigned = live_on.get(name, 0)
        idle += max(0, total - assigned)
        final_nodes.append(
            FinalNode(
                node=name,
                instance_type=node.spec.instance_type,
                enis=len(enis),
                total_ips=total,
                assigned_ips=assigned,
                prefixes=prefixes,
            )
        )
    prefix_use = (
        _prefix_use(world) if any(c.env.ENABLE_PREFIX_DELEGATION for c in world.scenario.all_clusters) else None
    )
    duplicates = book.duplicates
    for pod in book.live():
        ip = book.ip_of.get(pod)
        if ip is not None and owner_of.get(ip) != world.nodes[book.node_of[pod]].instance_id:
            duplicates += 1  # a pod holding an address EC2 does not give its node

    calls = dict(sorted(world.ec2.calls.items()))
    total_calls = sum(calls.values())
    mutating = world.ec2.mutating_ok
    return StrategyResult(
        strategy=world.strategy,
        pods_requested=world.expanded.pods_requested,
        pods_ready=ready,
        time_to_ip_s=Percentiles(
            p50=_r(percentile(waits, 50)),
            p90=_r(percentile(waits, 90)),
            p99=_r(percentile(waits, 99)),
            max=_r(waits[-1] if waits else None),
        ),
        makespan_s=_r(makespan),
        finished=finished,
        ec2_calls=calls,
        mutating_calls=mutating,
        calls_by_cause=dict(sorted(world.calls_by_cause.items())),
        throttled_calls=sum(world.ec2.throttled.values()),
        calls_per_ip=_r(total_calls / ready) if ready else None,
        idle_ips_end=idle,
        idle_ips_target=idle_target(world.expanded.nodes, live_on),
        final_nodes=final_nodes,
        duplicate_ips=duplicates,
        leaked_enis=leaked_enis(emu),
        lower_bound=lb,
        ratios=Ratios(
            mutating_calls_vs_lower_bound=_ratio(mutating, lb.mutating_calls) if finished else None,
            makespan_vs_lower_bound=_ratio(makespan, lb.makespan_s),
        ),
        ec2_throttled=dict(sorted(world.ec2.throttled.items())),
        ec2_errors=dict(sorted(world.ec2.errors.items())),
        prefix_use=prefix_use,
        settled_at_s=round(end, 3),
        notes=([f"{unready_alive} pods never got an address"] if unready_alive else [])
        + world.notes
        + strategy.notes(),
        wall_s=0.0,
    )


def _prefix_use(world: BenchWorld) -> PrefixUse:
    """Prefixes and fallback singles on the nodes at the end, and how full the prefixes are."""
    emu, book = world.emu, world.book
    blocks: set[int] = set()  # first address of each prefix held
    prefixes = singles = 0
    for node in world.nodes.values():
        for e in (emu.enis[x] for x in emu.instances[node.instance_id].slots.values() if x in emu.enis):
            singles += len(e.secondary)
            prefixes += len(e.prefixes)
            blocks.update(int(ipaddress.IPv4Network(p).network_address) for p in e.prefixes)
    used = 0
    for pod in book.live():
        ip = book.ip_of.get(pod)
        if pod in book.ready_at and ip is not None and int(ipaddress.IPv4Address(ip)) & ~15 in blocks:
            used += 1
    return PrefixUse(
        insufficient_cidr_blocks=sum(1 for _, _, outcome in world.ec2.log if outcome == "InsufficientCidrBlocks"),
        prefixes=prefixes,
        singles=singles,
        utilisation=round(used / (16 * prefixes), 3) if prefixes else None,
    )


def run_bench(
    scenario: Scenario,
    strategies: list[str] | None = None,
    progress: Callable[[str, float], None] | None = None,
    on_unavailable: Callable[[str, str], None] | None = None,
) -> tuple[BenchResult, dict[str, Series]]:
    """Every strategy of the scenario (or ``strategies``), one after the other."""
    t0 = time.perf_counter()
    expanded = expand(scenario)
    lb = lower_bound(scenario, expanded)
    olb = online_lower_bound(scenario, expanded)
    results: dict[str, StrategyResult] = {}
    series: dict[str, Series] = {}
    for name in strategies or scenario.strategies:
        cb = (lambda t, name=name: progress(name, t)) if progress is not None else None
        try:
            res, ser = run_strategy(scenario, expanded, name, lb, cb)
        except StrategyUnavailable as exc:
            if on_unavailable is None:
                raise
            on_unavailable(name, str(exc))
            continue
        res.ratios.mutating_calls_vs_online_bound = (
            _ratio(res.mutating_calls, olb.mutating_calls) if res.finished else None
        )
        res.ratios.makespan_vs_online_bound = _ratio(res.makespan_s, olb.makespan_s)
        results[name] = res
        series[name] = ser
    return (
        BenchResult(
            scenario=scenario.name,
            seed=scenario.seed,
            duration_s=scenario.duration_s,
            lower_bound=lb,
            online_lower_bound=olb,
            join_limit=join_limit(scenario, expanded),
            strategies=results,
            wall_s=round(time.perf_counter() - t0, 3),
        ),
        series,
    )
