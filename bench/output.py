"""The bench's output (docs/design.md, "Bench output"): every key, always present."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Percentiles(_Out):
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


class LowerBound(_Out):
    mutating_calls: int
    makespan_s: float
    calls_by_action: dict[str, int] = {}
    """How the fewest mutating calls split across EC2 actions (growth and release)."""


class FinalNode(_Out):
    node: str
    instance_type: str
    enis: int
    total_ips: int
    assigned_ips: int
    prefixes: int


class PrefixUse(_Out):
    """How prefix delegation went (scenarios with a cluster in prefix mode)."""

    insufficient_cidr_blocks: int
    """``InsufficientCidrBlocks`` answers: prefix calls made where no whole /28 was left."""
    prefixes: int
    """/28 prefixes on the nodes at the end."""
    singles: int
    """Single secondary addresses on the nodes at the end: the fallback's."""
    utilisation: float | None
    """Pods on a prefix's address / addresses in the prefixes (None without prefixes)."""


class Ratios(_Out):
    """Each figure against the lower bound (1.0 = optimal); None where undefined."""

    mutating_calls_vs_lower_bound: float | None = None
    makespan_vs_lower_bound: float | None = None
    mutating_calls_vs_online_bound: float | None = None
    makespan_vs_online_bound: float | None = None


class StrategyResult(_Out):
    strategy: str
    pods_requested: int
    pods_ready: int
    time_to_ip_s: Percentiles
    makespan_s: float | None
    """Virtual time the last pod got its address (None if some never did)."""
    finished: bool = True
    """Every pod still alive at the end got its address. False: the run did not finish, and
    no ratio against a bound is given (fewer calls for fewer pods is no saving)."""
    ec2_calls: dict[str, int]
    """Every request per action, throttled and failed ones included."""
    mutating_calls: int
    """Mutating requests EC2 accepted (throttled ones did nothing and are not counted)."""
    calls_by_cause: dict[str, int] = {}
    """Those by ``"<Action>: <cause>"`` (warmpool's, ``bench/call_causes.py``; empty for the
    baselines): they add up to ``mutating_calls``."""
    throttled_calls: int
    calls_per_ip: float | None
    """All EC2 requests divided by the pods that got an address."""
    idle_ips_end: int
    idle_ips_target: int
    """What the targets ask to be idle at the end (for comparison with idle_ips_end)."""
    final_nodes: list[FinalNode]
    duplicate_ips: int
    leaked_enis: int
    lower_bound: LowerBound
    ratios: Ratios
    ec2_throttled: dict[str, int] = {}
    ec2_errors: dict[str, int] = {}
    prefix_use: PrefixUse | None = None
    settled_at_s: float
    """Virtual time the run stopped (settled, or duration_s)."""
    notes: list[str] = []
    wall_s: float


class JoinLimitAction(_Out):
    action: str
    calls_per_join: float
    needed_per_s: float
    """At the scenario's join rate."""
    refill_per_s: float
    capacity: float
    max_joins_per_min: float
    """What the bucket's refill sustains."""
    last_call_no_earlier_s: float | None
    """The fluid bucket's finish of every join's calls (None: never)."""


class JoinLimit(_Out):
    """The physical limit of the account's buckets for the scenario's joins (``bench/joins.py``)."""

    joins: int
    window_s: float
    joins_per_min: float
    actions: list[JoinLimitAction] = []


class BenchResult(_Out):
    scenario: str
    seed: int
    duration_s: float
    lower_bound: LowerBound
    strategies: dict[str, StrategyResult]
    wall_s: float
    online_lower_bound: LowerBound | None = None
    """The bound for an allocator that learns each pod's demand when it arrives."""
    join_limit: JoinLimit | None = None
    """When the nodes join over time: what the buckets allow at that join rate."""
