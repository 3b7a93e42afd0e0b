"""The physical limit of the account's buckets for a scenario's node joins (docs/bench.md,
"EKS-scale joins"). Pure: a scenario in, per EC2 action the calls a join needs and what the
bucket allows, out.

A join needs, before its pods can have addresses, the calls of the clairvoyant bound's growth
(:func:`bench.lower_bound.growth_calls` of the pool that holds the node's peak pods, from the
primary ENI as it launched): one ``AssignPrivateIpAddresses`` unless the launch pool already
holds what the primary ENI must, and per further ENI a create, an attach and a modify. Whatever
the allocator, those calls go through the account's real buckets (``account.buckets`` over the
default table, the whole of it, less ``background_load``): a bucket of capacity ``C`` refilled at
``r``/s serves ``C + r·t`` calls by ``t``. So joins needing ``k`` calls of an action each can be
served at ``r / k`` joins a second at most, and the last join's calls finish no earlier than the
fluid bucket's finish of every join's calls released at its join
(:func:`bench.lower_bound.bucket_finish`, the budget fraction 1).
"""

from __future__ import annotations

import math
from collections import Counter

from bench.lower_bound import bucket_finish, growth_calls, pod_counts, settled_pool
from bench.output import JoinLimit, JoinLimitAction
from bench.scenario import Scenario
from bench.workload import Expanded, expand
from warmpool.buckets import spec_for
from warmpool.limits import known


def join_limit(scenario: Scenario, expanded: Expanded | None = None) -> JoinLimit | None:
    """The limit for the scenario's joins, or None when its nodes do not join over time (all at once)."""
    ex = expanded if expanded is not None else expand(scenario)
    if not ex.nodes:
        return None
    first = min(n.join_at for n in ex.nodes)
    last = max(n.join_at for n in ex.nodes)
    window = last - first
    if window <= 0:
        return None
    per_node = ex.by_node()
    calls: dict[str, list[float]] = {}
    for node in ex.nodes:
        limits = known(node.instance_type)
        peak, _ = pod_counts((e.at, e.kind) for e in per_node[node.name])
        if peak <= 0:
            continue
        serving = settled_pool(node.env, limits, peak, with_warm=False)
        need: Counter[str] = growth_calls(serving, node.launch_units, limits.slots_per_eni)
        for action, n in need.items():
            calls.setdefault(action, []).extend([node.join_at] * n)
    joins = len(ex.nodes)
    rate = joins / window
    specs = scenario.bucket_specs()
    acct = scenario.account
    actions = []
    for action, times in sorted(calls.items()):
        spec = spec_for(action, specs)
        background = acct.background_load.get(action, 0.0)
        refill = max(spec.refill_per_s - background, 0.0)
        per_join = len(times) / joins
        finish = bucket_finish(times, spec, 1.0, background)
        actions.append(
            JoinLimitAction(
                action=action,
                calls_per_join=round(per_join, 3),
                needed_per_s=round(per_join * rate, 3),
                refill_per_s=refill,
                capacity=spec.capacity,
                max_joins_per_min=round(60 * refill / per_join, 1) if refill > 0 else 0.0,
                last_call_no_earlier_s=round(finish, 1) if math.isfinite(finish) else None,
            )
        )
    return JoinLimit(
        joins=joins,
        window_s=round(window, 3),
        joins_per_min=round(60 * rate, 1),
        actions=actions,
    )


def describe(limit: JoinLimit) -> list[str]:
    """The limit as the report prints it."""
    head = (
        f"physical limit of the buckets: {limit.joins} joins over {limit.window_s:g} s "
        f"({limit.joins_per_min:g} joins/min)"
    )
    if not limit.actions:
        return [head + ": no mutating call is needed before a join's pods (the launch pool holds them)"]
    lines = [head + ":"]
    for a in limit.actions:
        last = "never" if a.last_call_no_earlier_s is None else f"{a.last_call_no_earlier_s:g} s"
        lines.append(
            f"  {a.action}: {a.calls_per_join:g} a join = {a.needed_per_s:g}/s needed, bucket refills "
            f"{a.refill_per_s:g}/s (capacity {a.capacity:g}): at most {a.max_joins_per_min:g} joins/min; "
            f"the last join's call no earlier than {last}"
        )
    return lines
