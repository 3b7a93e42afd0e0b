"""Token-bucket arithmetic for EC2's per-action throttling, and the AIMD
adjustment warmpool applies to its own refill rate after a throttle.

Pure: the DynamoDB store (functions/) and the emulated EC2 (sim/) both keep a
:class:`BucketState` and call these functions with the time they were given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class BucketSpec(BaseModel):
    """Capacity and refill of one EC2 action's bucket (REFERENCE.md)."""

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
"""REFERENCE.md defaults. Describe* here are the filtered/paginated kind."""

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
    return BucketState(
        tokens=0.0, updated_at=now, rate_factor=max(AIMD_FLOOR, cur.rate_factor * AIMD_DECREASE)
    )
