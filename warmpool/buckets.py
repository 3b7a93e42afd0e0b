"""Token-bucket arithmetic for EC2's per-action throttling, and the AIMD
adjustment warmpool applies to its own refill rate after a throttle.

Pure: the DynamoDB store (functions/) and the emulated EC2 (sim/) both keep a
:class:`BucketState` and call these functions with the time they were given.

Sharing the buckets among the nodes of one batch (:func:`allot`): the store
reads every bucket the batch needs once, calls :func:`allot`, and writes the
new states back in one conditional write; on a conflict it reads again and
allots again. So a batch costs two store calls, not one per node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field


class BucketSpec(BaseModel):
    """Capacity and refill of one EC2 action's bucket (docs/design.md, "Outside facts")."""

    model_config = ConfigDict(frozen=True)

    capacity: float = Field(gt=0)
    refill_per_s: float = Field(gt=0)

    def scaled(self, fraction: float) -> BucketSpec:
        """The share of this bucket warmpool may spend (``budget_fraction``)."""
        if not 0 < fraction <= 1:
            raise ValueError(f"budget fraction must be in (0, 1], got {fraction}")
        return BucketSpec(capacity=self.capacity * fraction, refill_per_s=self.refill_per_s * fraction)


MUTATING_ENI_ACTIONS = (
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
    "CreateNetworkInterface",
    "DeleteNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "AttachNetworkInterface",
    "DetachNetworkInterface",
)
"""EC2's mutating ENI actions: what a throttle storm loads and the allocator's buckets guard."""

MUTATING_ACTIONS = (*MUTATING_ENI_ACTIONS, "CreateTags", "DeleteTags")
"""Every mutating EC2 action warmpool or a baseline calls: the ENI actions and tagging. The
``mutating_calls`` figure of the bench and the demo counts these."""

DEFAULT_SPECS: dict[str, BucketSpec] = {
    "AssignPrivateIpAddresses": BucketSpec(capacity=100, refill_per_s=5),
    "UnassignPrivateIpAddresses": BucketSpec(capacity=100, refill_per_s=5),
    "CreateNetworkInterface": BucketSpec(capacity=100, refill_per_s=5),
    "DeleteNetworkInterface": BucketSpec(capacity=100, refill_per_s=5),
    "ModifyNetworkInterfaceAttribute": BucketSpec(capacity=100, refill_per_s=5),
    "CreateTags": BucketSpec(capacity=100, refill_per_s=10),
    "AttachNetworkInterface": BucketSpec(capacity=50, refill_per_s=5),
    "DetachNetworkInterface": BucketSpec(capacity=50, refill_per_s=5),
    "DescribeNetworkInterfaces": BucketSpec(capacity=100, refill_per_s=20),
    "DescribeInstances": BucketSpec(capacity=100, refill_per_s=20),
    "DescribeSubnets": BucketSpec(capacity=100, refill_per_s=20),
    "DescribeInstanceTypes": BucketSpec(capacity=100, refill_per_s=20),
}
"""The documented defaults (docs/design.md, "Outside facts"). Describe* here are the filtered/paginated kind."""

UNFILTERED_DESCRIBE = BucketSpec(capacity=50, refill_per_s=10)
"""DescribeInstances/DescribeNetworkInterfaces with no filter and no pagination."""

NON_MUTATING_DEFAULT = BucketSpec(capacity=100, refill_per_s=20)
MUTATING_DEFAULT = BucketSpec(capacity=50, refill_per_s=5)


def spec_for(action: str, overrides: Mapping[str, BucketSpec] | None = None) -> BucketSpec:
    """The bucket for ``action``: an override, the table, or the general default."""
    if overrides and action in overrides:
        return overrides[action]
    if action in DEFAULT_SPECS:
        return DEFAULT_SPECS[action]
    return NON_MUTATING_DEFAULT if action.startswith(("Describe", "Get", "List")) else MUTATING_DEFAULT


class BucketState(BaseModel):
    """Tokens in a bucket at ``updated_at``, and the AIMD factor on its refill."""

    model_config = ConfigDict(frozen=True)

    tokens: float
    updated_at: float
    rate_factor: float = 1.0


AIMD_DECREASE = 0.5
AIMD_FLOOR = 0.1
AIMD_RECOVERY_PER_S = 0.01
"""Additive recovery of the rate factor, per second without throttling."""


def full(spec: BucketSpec, now: float) -> BucketState:
    return BucketState(tokens=spec.capacity, updated_at=now)


def refill(state: BucketState, spec: BucketSpec, now: float) -> BucketState:
    """Tokens and rate factor as of ``now`` (never earlier than ``updated_at``)."""
    dt = max(0.0, now - state.updated_at)
    if dt == 0.0:
        return state
    # The rate factor recovers linearly; integrate the refill over the ramp.
    f0 = state.rate_factor
    t_full = (1.0 - f0) / AIMD_RECOVERY_PER_S if f0 < 1.0 else 0.0
    if dt <= t_full:
        f1 = f0 + AIMD_RECOVERY_PER_S * dt
        added = spec.refill_per_s * dt * (f0 + f1) / 2
    else:
        f1 = 1.0
        added = spec.refill_per_s * (t_full * (f0 + 1.0) / 2 + (dt - t_full))
    return BucketState(tokens=min(spec.capacity, state.tokens + added), updated_at=now, rate_factor=f1)


def try_take(state: BucketState, spec: BucketSpec, n: float, now: float) -> tuple[bool, BucketState]:
    """Take ``n`` tokens if they are there; a refused take takes nothing."""
    cur = refill(state, spec, now)
    if cur.tokens + 1e-9 >= n:
        return True, cur.model_copy(update={"tokens": cur.tokens - n})
    return False, cur


def time_until(state: BucketState, spec: BucketSpec, n: float, now: float) -> float:
    """Seconds from ``now`` until ``n`` tokens will be there (0 if already).

    ``inf`` if ``n`` exceeds the capacity. Assumes the current rate factor
    holds (a safe over-estimate while it recovers).
    """
    if n > spec.capacity + 1e-9:
        return math.inf
    cur = refill(state, spec, now)
    missing = n - cur.tokens
    if missing <= 1e-9:
        return 0.0
    return missing / (spec.refill_per_s * cur.rate_factor)


def on_throttled(state: BucketState, spec: BucketSpec, now: float) -> BucketState:
    """EC2 said ``RequestLimitExceeded``: someone else spends this bucket too.

    Cut our refill multiplicatively and empty our view of the bucket, so we
    back off at once and come back slowly (AIMD).
    """
    cur = refill(state, spec, now)
    return BucketState(tokens=0.0, updated_at=now, rate_factor=max(AIMD_FLOOR, cur.rate_factor * AIMD_DECREASE))


SpecOf = Callable[[str], BucketSpec]


def allot(
    states: Mapping[str, BucketState | None],
    spec_of: SpecOf,
    requests: Sequence[Mapping[str, float]],
    now: float,
) -> tuple[dict[str, BucketState], list[float]]:
    """Grant the requests, in order, that the buckets can pay for now.

    A request is all-or-nothing across its actions. A request that does not
    fit takes nothing and queues behind the earlier ones that did not fit
    either: its wait is when the bucket will have paid for all of them, so
    deferred nodes come back staggered instead of all at once. Later requests
    that fit may still be granted (no token left idle). ``inf`` if a request
    can never fit (more than a bucket's capacity).

    Returns the new states of the buckets that changed and one wait per
    request (0.0 = granted).
    """
    cur: dict[str, BucketState] = {}
    for action in {a for r in requests for a in r}:
        st = states.get(action)
        spec = spec_of(action)
        cur[action] = full(spec, now) if st is None else refill(st, spec, now)
    avail = {a: s.tokens for a, s in cur.items()}
    waits: list[float] = []
    deferred: list[int] = []
    for i, req in enumerate(requests):
        need = {a: n for a, n in req.items() if n > 0}
        if all(avail[a] + 1e-9 >= n for a, n in need.items()):
            for a, n in need.items():
                avail[a] -= n
            waits.append(0.0)
        else:
            waits.append(math.nan)
            deferred.append(i)
    debt: dict[str, float] = {}
    for i in deferred:
        wait = 0.0
        for a, n in requests[i].items():
            if n <= 0:
                continue
            spec = spec_of(a)
            if n > spec.capacity + 1e-9:
                wait = math.inf
                continue
            debt[a] = debt.get(a, 0.0) + n
            rate = spec.refill_per_s * cur[a].rate_factor
            wait = max(wait, max(0.0, debt[a] - avail[a]) / rate)
        waits[i] = max(wait, 1e-3)
    changed = {
        a: BucketState(tokens=max(0.0, avail[a]), updated_at=now, rate_factor=cur[a].rate_factor)
        for a in cur
        if avail[a] != cur[a].tokens
    }
    return changed, waits
