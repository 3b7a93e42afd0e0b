"""The lower bound every strategy is measured against (docs/bench.md has the
derivation). Pure: a scenario in, two numbers (and their breakdown) out.

* **Mutating calls.** Per node, the settled pool at the node's peak pod count
  (targets included) needs ``E`` ENIs holding ``N`` units (addresses, or /28
  prefixes in prefix mode). A node starts with its primary ENI and no
  secondary addresses (or its group's ``launch_pool``), so: one
  ``AssignPrivateIpAddresses`` to fill the primary ENI (if it needs more than it
  launched with) plus, per further ENI, ``CreateNetworkInterface`` (with its
  addresses in the same call) + ``AttachNetworkInterface`` +
  ``ModifyNetworkInterfaceAttribute`` (DeleteOnTermination). If the pool the
  targets ask for at the end is smaller than at the peak, the surplus must go:
  one ``UnassignPrivateIpAddresses`` per ENI touched (at best
  ``ceil(surplus / slots)`` ENIs) in the IP-target and prefix modes, or a
  ``DetachNetworkInterface`` + ``DeleteNetworkInterface`` per surplus ENI in
  WARM_ENI mode (which never releases single addresses).
* **Makespan.** Only calls that give pods their addresses gate the last pod
  (the ENIs needed for the peak pods, without the warm surplus). Each call can
  start when its node joins (a clairvoyant allocator knows the demand then).
  Per EC2 action, a fluid token bucket with capacity ``C·f`` (full at the
  start) and net refill ``r·f − background`` serves the calls greedily in
  release order — optimal for the last finish time. With every call released
  at ``t0`` this is ``t0 + max(0, n − C·f) / (r·f − b)``. The makespan bound is
  the latest of those finish times and the creation of the last pod.
  API latency, the create → attach order and the attach delay are left out
  (relaxing a constraint keeps it a lower bound).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bench.output import LowerBound
from bench.scenario import Env, Scenario
from bench.workload import Expanded, WorkloadNode, expand
from warmpool.buckets import MUTATING_ENI_ACTIONS, BucketSpec, spec_for
from warmpool.limits import PREFIX_SIZE, InstanceLimits, known

ASSIGN = "AssignPrivateIpAddresses"
UNASSIGN = "UnassignPrivateIpAddresses"
CREATE = "CreateNetworkInterface"
ATTACH = "AttachNetworkInterface"
MODIFY = "ModifyNetworkInterfaceAttribute"
DETACH = "DetachNetworkInterface"
DELETE = "DeleteNetworkInterface"


@dataclass(frozen=True)
class Settled:
    """A node's settled pool: ``units`` (addresses or prefixes) on ``enis`` ENIs."""

    units: int
    enis: int
    addresses: int


def settled_pool(env: Env, limits: InstanceLimits, pods: int, *, with_warm: bool = True) -> Settled:
    """The pool the targets ask for with ``pods`` pods on the node (docs/design.md, "Outside facts").

    ``with_warm=False`` gives only what holds the pods themselves.
    """
    slots = limits.slots_per_eni
    max_enis = limits.enis(env.MAX_ENI)
    unit = PREFIX_SIZE if env.ENABLE_PREFIX_DELEGATION else 1
    per_eni = slots * unit  # addresses one ENI holds
    if not with_warm:
        units = math.ceil(pods / unit)
    elif env.ip_target_mode:
        units = math.ceil(max(pods + env.WARM_IP_TARGET, env.MINIMUM_IP_TARGET) / unit)
    elif env.ENABLE_PREFIX_DELEGATION and env.WARM_PREFIX_TARGET > 0:
        units = math.ceil(pods / PREFIX_SIZE) + env.WARM_PREFIX_TARGET
    else:
        # WARM_ENI: whole ENIs, ``WARM_ENI_TARGET`` ENIs' worth free (0: low at 0 free)
        warm = env.WARM_ENI_TARGET
        enis = math.ceil(pods / per_eni) + warm if warm > 0 else pods // per_eni + 1
        units = max(1, enis) * slots
    units = min(units, max_enis * slots)
    enis = max(1, math.ceil(units / slots))
    return Settled(units=units, enis=enis, addresses=units * unit)


def primary_need(s: Settled, slots: int) -> int:
    """Units the settled pool ``s`` puts on the primary ENI (all of them, or a full ENI's worth)."""
    return s.units if s.enis <= 1 else slots


def growth_calls(s: Settled, launch: int = 0, slots: int = 0) -> Counter[str]:
    """Fewest calls from a primary ENI holding ``launch`` units (``slots`` a full ENI) to the
    settled pool ``s``."""
    c: Counter[str] = Counter()
    if s.units <= 0:
        return c
    if primary_need(s, slots) > launch or not launch:
        c[ASSIGN] += 1
    extra = s.enis - 1
    if extra > 0:
        c[CREATE] += extra
        c[ATTACH] += extra
        c[MODIFY] += extra
    return c


def release_calls(env: Env, limits: InstanceLimits, peak: Settled, end: Settled) -> Counter[str]:
    """Fewest calls from the peak pool down to the end pool."""
    c: Counter[str] = Counter()
    if end.units >= peak.units:
        return c
    if env.ip_target_mode or env.ENABLE_PREFIX_DELEGATION:
        c[UNASSIGN] += math.ceil((peak.units - end.units) / limits.slots_per_eni)
    elif peak.enis > end.enis:
        c[DETACH] += peak.enis - end.enis
        c[DELETE] += peak.enis - end.enis
    return c


def pod_counts(events: Iterable[tuple[float, str]]) -> tuple[int, int]:
    """(peak, final) pod count from ``(time, "add"|"del")`` events; at equal
    times deletes come first (the smaller peak: a bound must not overshoot)."""
    peak = cur = 0
    for _, kind in sorted(events, key=lambda e: (e[0], 0 if e[1] == "del" else 1)):
        cur += 1 if kind == "add" else -1
        peak = max(peak, cur)
    return peak, cur


def bucket_finish(release_times: list[float], spec: BucketSpec, fraction: float, background: float) -> float:
    """Time the last of the calls (released at ``release_times``) can be made
    through a fluid token bucket of capacity ``C·f`` refilled at ``r·f − b``,
    full at time 0. 0.0 with no calls."""
    if not release_times:
        return 0.0
    cap = spec.capacity * fraction
    rate = spec.refill_per_s * fraction - background
    if rate <= 0:
        rate = max(spec.refill_per_s - background, 1e-6)
    tokens = cap
    t = 0.0
    for r in sorted(release_times):
        if r > t:
            tokens = min(cap, tokens + (r - t) * rate)
            t = r
        if tokens < 1.0:
            t += (1.0 - tokens) / rate
            tokens = 1.0
        tokens -= 1.0
    return t


def bucket_finish_varying(
    calls: list[tuple[float, tuple[tuple[float, float], ...]]],
    spec: BucketSpec,
    fraction: float,
    background: float,
    storms: tuple[tuple[float, float, float], ...] = (),
) -> float:
    """The last of :func:`bucket_times` (0.0 with no calls)."""
    times = bucket_times(calls, spec, fraction, background, storms)
    return max(times, default=0.0)


def bucket_times(
    calls: list[tuple[float, tuple[tuple[float, float], ...]]],
    spec: BucketSpec,
    fraction: float,
    background: float,
    storms: tuple[tuple[float, float, float], ...] = (),
) -> list[float]:
    """:func:`bucket_finish` with other callers' load varying in time and calls
    that cannot be made inside some windows.

    ``calls`` are ``(release time, windows in which this call cannot succeed)``;
    ``storms`` are ``(start, end, extra calls/s)`` on top of ``background``. The
    net refill is ``r·f − load(t)`` (when that is not positive: ``r − load(t)``,
    floored at 0). Returns each call's time, served greedily in release order
    (in the order of ``calls`` at equal release times).
    """
    if not calls:
        return []
    cap = spec.capacity * fraction
    breaks = sorted({b for a, e, _ in storms for b in (a, e)})

    def rate_at(t: float) -> float:
        load = background + sum(x for a, e, x in storms if a <= t < e)
        r = spec.refill_per_s * fraction - load
        return r if r > 0 else max(spec.refill_per_s - load, 0.0)

    def next_break(t: float) -> float:
        return next((b for b in breaks if b > t), math.inf)

    tokens = cap
    t = 0.0

    def advance(to: float) -> None:
        nonlocal tokens, t
        while t < to:
            nb = min(next_break(t), to)
            tokens = min(cap, tokens + (nb - t) * rate_at(t))
            t = nb

    out: list[float] = []
    for release, blocked in sorted(calls, key=lambda c: c[0]):
        advance(max(t, release))
        while True:
            while tokens < 1.0 - 1e-12:
                r = rate_at(t)
                nb = next_break(t)
                if r > 0 and t + (1.0 - tokens) / r <= nb:
                    t += (1.0 - tokens) / r
                    tokens = 1.0
                else:
                    if nb == math.inf:
                        return [*out, *([math.inf] * (len(calls) - len(out)))]
                    advance(nb)
            inside = next(((a, e) for a, e in blocked if a <= t < e), None)
            if inside is None:
                break
            advance(inside[1])
        tokens -= 1.0
        out.append(t)
    return out


def lower_bound(scenario: Scenario, expanded: Expanded | None = None) -> LowerBound:
    ex = expanded if expanded is not None else expand(scenario)
    per_node = ex.by_node()
    total: Counter[str] = Counter()
    gating: dict[str, list[float]] = {}
    for node in ex.nodes:
        limits = known(node.instance_type)
        peak, final = pod_counts((e.at, e.kind) for e in per_node[node.name])
        at_peak = settled_pool(node.env, limits, peak)
        at_end = settled_pool(node.env, limits, final)
        launch, slots = node.launch_units, limits.slots_per_eni
        total.update(growth_calls(at_peak, launch, slots))
        total.update(release_calls(node.env, limits, _with_launch(at_peak, launch), at_end))
        if peak > 0:
            serving = settled_pool(node.env, limits, peak, with_warm=False)
            for action, n in growth_calls(serving, launch, slots).items():
                gating.setdefault(action, []).extend([node.join_at] * n)
    makespan = ex.last_add_at if ex.pods_requested else 0.0
    acct = scenario.account
    specs = scenario.bucket_specs()
    for action, times in gating.items():
        finish = bucket_finish(
            times, spec_for(action, specs), acct.budget_fraction, acct.background_load.get(action, 0.0)
        )
        makespan = max(makespan, finish)
    return LowerBound(
        mutating_calls=sum(total.values()),
        makespan_s=round(makespan, 3),
        calls_by_action=dict(sorted(total.items())),
    )


def _with_launch(s: Settled, launch: int) -> Settled:
    """The pool ``s`` where the primary ENI launched with more units than ``s`` holds."""
    if launch <= s.units:
        return s
    return Settled(units=launch, enis=s.enis, addresses=s.addresses * launch // max(s.units, 1))


def _first_time_at(events: Sequence[tuple[float, str]], joined: float, count: int) -> float | None:
    """When a node first holds ``count`` pods (deletes first at equal times), or None."""
    if count <= 0:
        return joined
    cur = 0
    for t, kind in sorted(events, key=lambda e: (e[0], 0 if e[1] == "del" else 1)):
        cur += 1 if kind == "add" else -1
        if cur >= count:
            return max(t, joined)
    return None


def _first_count_needing(env: Env, limits: InstanceLimits, peak: int, test: Callable[[Settled], bool]) -> int | None:
    """The smallest pod count ``k <= peak`` whose settled pool passes ``test``."""
    for k in range(peak + 1):
        if test(settled_pool(env, limits, k)):
            return k
    return None


def _outgrows_primary(slots: int, units: int) -> Callable[[Settled], bool]:
    def test(s: Settled) -> bool:
        return min(s.units, slots) > units

    return test


def _needs_enis(n: int) -> Callable[[Settled], bool]:
    def test(s: Settled) -> bool:
        return s.enis >= n

    return test


def online_lower_bound(scenario: Scenario, expanded: Expanded | None = None) -> LowerBound:
    """The fewest calls and the shortest makespan for an allocator that learns
    each pod's demand when the pod arrives (same buckets; docs/bench.md).

    Such an allocator holds no more than the targets ask for the pods present
    and may spend the account's whole real buckets (no budget fraction),
    so per node: the join-time pool (the targets at 0 pods) is one assign, and
    if the peak needs more units on the primary ENI, another assign is needed
    once pods come (the clairvoyant bound does both in one) — counted where the
    join-time assign, made in join order as soon as ``budget_fraction`` of the
    real bucket allows, comes before the node's first pod. A further ENI's
    create/attach/modify can be released only when the pods present make the
    targets ask for it; the primary top-up only when they exceed the join-time
    pool. The makespan is the fluid-bucket finish of the calls that gate pods,
    each released at that moment, or the last pod's creation if later. Unlike
    the clairvoyant bound it counts the faults no allocator can avoid: a
    throttle storm's load on the buckets, and no address from an exhausted
    subnet (assigns and creates wait for its end).
    """
    ex = expanded if expanded is not None else expand(scenario)
    per_node = ex.by_node()
    acct = scenario.account
    specs = scenario.bucket_specs()
    total: Counter[str] = Counter()
    gating: dict[str, list[tuple[float, tuple[tuple[float, float], ...]]]] = {}
    exhausted: dict[str, tuple[tuple[float, float], ...]] = {}
    for f in scenario.faults:
        if f.kind == "subnet-exhausted" and f.subnet is not None:
            exhausted[f.subnet] = (*exhausted.get(f.subnet, ()), (f.at_s, f.end_s))
    storms = tuple((f.at_s, f.end_s, f.rate) for f in scenario.faults if f.kind == "throttle-storm")

    def times(
        action: str, calls: list[tuple[float, tuple[tuple[float, float], ...]]], fraction: float = 1.0
    ) -> list[float]:
        return bucket_times(
            calls,
            spec_for(action, specs),
            fraction,  # 1.0: any allocator may spend the account's whole real bucket
            acct.background_load.get(action, 0.0),
            storms if action in MUTATING_ENI_ACTIONS else (),  # a storm loads every ENI action
        )

    # Which nodes must split the primary's fill in two: those whose join-time
    # assign, made in join order as soon as ``budget_fraction`` of the bucket
    # allows, comes before their first pod; a node whose join-time assign could
    # not be made before its pods came may make it one call with theirs.
    split: list[tuple[WorkloadNode, float]] = []
    for node in sorted(ex.nodes, key=lambda n: n.join_at):
        limits = known(node.instance_type)
        peak, _ = pod_counts((e.at, e.kind) for e in per_node[node.name])
        u0 = min(settled_pool(node.env, limits, 0).units, limits.slots_per_eni)
        if max(0, node.launch_units) < u0 < min(settled_pool(node.env, limits, peak).units, limits.slots_per_eni):
            first = min((e.at for e in per_node[node.name] if e.kind == "add"), default=math.inf)
            split.append((node, first))
    join_done = times(ASSIGN, [(n.join_at, exhausted.get(n.subnet, ())) for n, _ in split], acct.budget_fraction)
    forced = {n.name for (n, first), done in zip(split, join_done, strict=True) if done < first}
    candidates = {n.name for n, _ in split}

    for node in ex.nodes:
        limits = known(node.instance_type)
        blocked = exhausted.get(node.subnet, ())
        events = [(e.at, e.kind) for e in per_node[node.name]]
        peak, final = pod_counts(events)
        at_peak = settled_pool(node.env, limits, peak)
        at_end = settled_pool(node.env, limits, final)
        at_join = settled_pool(node.env, limits, 0)
        slots = limits.slots_per_eni
        launch = node.launch_units
        total.update(growth_calls(at_peak, launch, slots))
        total.update(release_calls(node.env, limits, _with_launch(at_peak, launch), at_end))
        primary_join = max(min(at_join.units, slots), launch)
        if node.name in forced:
            total[ASSIGN] += 1  # the join-time pool, then the top-up once pods come
            gating.setdefault(ASSIGN, []).append((node.join_at, blocked))  # spends a token, gates no pod
        if peak <= 0:
            continue
        serving = settled_pool(node.env, limits, peak, with_warm=False)
        # the primary's addresses gate pods: released at join (clairvoyant) or, when
        # the join-time pool holds less than the peak needs there, once the pods outgrow it
        if serving.units > 0 and (primary_need(serving, slots) > launch or not launch):
            release = node.join_at
            if node.name in candidates or launch:
                k = _first_count_needing(node.env, limits, peak, _outgrows_primary(slots, primary_join))
                t = _first_time_at(events, node.join_at, k) if k is not None else None
                release = t if t is not None else node.join_at
            gating.setdefault(ASSIGN, []).append((release, blocked))
        for j in range(2, serving.enis + 1):
            k = _first_count_needing(node.env, limits, peak, _needs_enis(j))
            t = _first_time_at(events, node.join_at, k) if k is not None else None
            release = t if t is not None else node.join_at
            for action in (CREATE, ATTACH, MODIFY):
                # only the create takes addresses from the subnet
                gating.setdefault(action, []).append((release, blocked if action == CREATE else ()))
    makespan = ex.last_add_at if ex.pods_requested else 0.0
    for action, calls in gating.items():
        makespan = max(makespan, max(times(action, calls), default=0.0))
    return LowerBound(
        mutating_calls=sum(total.values()),
        makespan_s=round(makespan, 3),
        calls_by_action=dict(sorted(total.items())),
    )


def idle_target(nodes: Iterable[WorkloadNode], pods_at_end: dict[str, int]) -> int:
    """Idle addresses the targets ask for at the end, summed over nodes."""
    total = 0
    for node in nodes:
        pods = pods_at_end.get(node.name, 0)
        s = settled_pool(node.env, known(node.instance_type), pods)
        total += max(0, s.addresses - pods)
    return total
