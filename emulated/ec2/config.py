"""How the emulated EC2 behaves (:class:`Ec2Config`), below the emulator and its
handler modules, which all read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from warmpool.buckets import BucketSpec
from warmpool.limits import InstanceLimits

from .cidr import SinglePlacement


@dataclass
class Ec2Config:
    """How the emulated EC2 behaves. Every number is configurable, none hard-wired."""

    buckets: Mapping[str, BucketSpec] = field(default_factory=dict)
    """Per-action overrides of :data:`warmpool.buckets.DEFAULT_SPECS`."""
    api_latency_s: float = 0.0
    """What every call costs a caller in time (see :meth:`Ec2Emulator.latency_for`)."""
    attach_delay_s: float = 0.0
    """Seconds before an attach shows as ``attached`` in Describe and appears in IMDS."""
    detach_delay_s: float = 0.0
    """Seconds an ENI stays ``detaching`` (and cannot be deleted) after DetachNetworkInterface."""
    throttling: bool = True
    region: str = "us-east-1"
    account_id: str = "123456789012"
    instance_types: Mapping[str, InstanceLimits] = field(default_factory=dict)
    """Extra instance types beyond :data:`warmpool.limits.KNOWN_TYPES`."""
    describe_lag_min_s: float = 0.0
    describe_lag_max_s: float = 0.0
    """Eventually consistent Describe (:mod:`.lag`): when the max is above 0, each
    DescribeNetworkInterfaces and DescribeInstances answers from the state of a moment
    a lag drawn in [min, max] ago. Off by default."""
    single_placement: SinglePlacement = "packed"
    """Where EC2 puts a single address asked for by count (:mod:`.cidr`): ``"packed"``
    from the bottom of the subnet (never fragments), or ``"scattered"`` anywhere in it,
    drawn per subnet from ``placement_seed`` (fragments /28s, as AWS may)."""
    placement_seed: int = 0


class AmbiguousOutcome(Enum):
    """How a mutating call that took effect may answer (:meth:`Ec2Emulator.set_ambiguous`)."""

    INTERNAL_ERROR = "InternalError"
    """An HTTP 500 ``InternalError``: the caller does not know the call took effect."""
    SDK_RETRY = "sdk-retry"
    """The connection dropped before the answer: the SDK sends the same request again."""
