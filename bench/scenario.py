"""The scenario file (docs/design.md, "Scenario file"): a pydantic model that
rejects unknown fields, and a loader whose errors name the file and the field,
e.g. ``scenarios/x.yaml: node_groups[0].count: must be > 0``.

Two optional extensions of the single-cluster, one-shot form:

* ``clusters: [...]`` instead of ``cluster: {...}`` for several clusters in one
  account (each node group then names its ``cluster``);
* a workload entry may ``repeat`` every ``every_s`` seconds (churn).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from emulated.ec2.cidr import SinglePlacement
from warmpool.buckets import DEFAULT_SPECS, BucketSpec
from warmpool.limits import KNOWN_TYPES, known
from warmpool.names import TAG_SUBNET_ROLE
from warmpool.pool import PoolConfig

Strategy = Literal["warmpool", "vpc-cni", "cilium"]
STRATEGIES: tuple[Strategy, ...] = ("warmpool", "vpc-cni", "cilium")
FaultKind = Literal["throttle-storm", "lambda-crash", "duplicate-delivery", "attach-failure", "subnet-exhausted"]

NonNeg = Annotated[float, Field(ge=0)]
DISCOVERY_TAG = TAG_SUBNET_ROLE


class ScenarioError(ValueError):
    """A scenario that cannot run; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Account(_Model):
    budget_fraction: Annotated[float, Field(gt=0, le=1)] = 0.8
    background_load: dict[str, NonNeg] = {}
    """Other callers in the account, calls/s per EC2 action."""
    buckets: dict[str, BucketSpec] = {}
    """Overrides of the default bucket table (``warmpool.buckets.DEFAULT_SPECS``) (an account with other quotas)."""
    quotas_told: bool = False
    """warmpool is configured with ``buckets`` (``WARMPOOL_BUCKET_CAPACITY`` and
    ``WARMPOOL_BUCKET_REFILL``, as an operator whose quotas AWS changed sets them); by default it
    is not told and paces at the default table. The baselines have no such setting."""

    @field_validator("background_load", "buckets")
    @classmethod
    def _known_actions(cls, v: dict[str, Any]) -> dict[str, Any]:
        for action in v:
            if action not in DEFAULT_SPECS and not action.endswith(("NetworkInterface", "Addresses")):
                raise ValueError(f"unknown EC2 action {action!r}")
        return v


class Env(_Model):
    """The VPC CNI variables a node runs with (docs/design.md, "Configuration"); 0/None = unset."""

    WARM_IP_TARGET: Annotated[int, Field(ge=0)] = 0
    MINIMUM_IP_TARGET: Annotated[int, Field(ge=0)] = 0
    WARM_ENI_TARGET: Annotated[int, Field(ge=0)] = 1
    WARM_PREFIX_TARGET: Annotated[int, Field(ge=0)] = 0
    MAX_ENI: Annotated[int, Field(ge=0)] = 0
    ENABLE_PREFIX_DELEGATION: bool = False
    ENABLE_SUBNET_DISCOVERY: bool = True
    """The vpc-cni model's new ENIs: the node's subnet or one tagged ``kubernetes.io/role/cni``
    in its zone, the one with the most free addresses first (as ipamd does by default since
    1.18). warmpool discovers by tag when a subnet of the scenario carries the tag."""
    AWS_VPC_ENI_MTU: Annotated[int, Field(ge=576, le=9001)] = 9001
    IP_COOLDOWN_PERIOD: Annotated[float, Field(ge=0)] = 30.0

    @property
    def ip_target_mode(self) -> bool:
        return self.WARM_IP_TARGET > 0 or self.MINIMUM_IP_TARGET > 0

    def pool_config(self) -> PoolConfig:
        """The core's pool targets for these variables (warmpool's agent and the vpc-cni model)."""
        return PoolConfig(
            warm_ip=self.WARM_IP_TARGET,
            minimum_ip=self.MINIMUM_IP_TARGET,
            warm_eni=self.WARM_ENI_TARGET,
            warm_prefix=self.WARM_PREFIX_TARGET,
            max_eni=self.MAX_ENI,
            prefix_mode=self.ENABLE_PREFIX_DELEGATION,
        )


class ZoneNetworkSpec(_Model):
    """One zone's entry of ``cluster.custom_network`` (an ``ENIConfig``)."""

    subnets: Annotated[list[str], Field(min_length=1)]
    security_groups: list[Annotated[str, Field(pattern=r"^sg-[0-9a-zA-Z]{1,17}$")]] = []


class ClusterSpec(_Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    env: Env = Env()
    named_placement: bool = False
    """warmpool only: ``WARMPOOL_NAMED_PLACEMENT`` (name addresses and prefixes, docs/allocator.md)."""
    scarce_free: Annotated[int, Field(ge=0)] | None = None
    """warmpool only: ``WARMPOOL_SCARCE_FREE`` (fair sharing of scarce addresses, docs/allocator.md;
    0: off); None: the allocator's default."""
    primary_eni_tagging: Literal["allocator", "launch-template"] = "allocator"
    """Who tags each node's primary ENI ``warmpool.io/primary-eni-of=<cluster>``, as the stack's
    ``primary_eni_tagging`` (docs/deploy.md): ``allocator`` (warmpool's first-contact
    ``CreateTags``) or ``launch-template`` (the nodes launch with the tag, from their launch
    template's ``TagSpecifications`` for ``network-interface``; no ``CreateTags``). Every strategy
    sees the same tagged ENIs; only warmpool reads the tag."""
    custom_network: dict[str, ZoneNetworkSpec] = {}
    """Custom networking (docs/allocator.md, "Custom networking"): zone → the subnets (and
    security groups) new ENIs use; every node's primary ENI serves no pod. warmpool gets it as
    ``WARMPOOL_CUSTOM_NETWORK`` and its agents the switch; the vpc-cni model as one
    ``ENIConfig`` per zone (its first subnet). Not for the cilium model."""


class Ec2Timing(_Model):
    """How the emulated EC2 answers (the same for every strategy)."""

    api_latency_s: NonNeg = 0.1
    attach_delay_s: NonNeg = 3.0
    """Until an attached ENI is visible to the node (EC2: up to about 10 s)."""
    detach_delay_s: NonNeg = 2.0
    single_placement: SinglePlacement = "packed"
    """Where EC2 puts a single address asked for by count (``Ec2Config.single_placement``):
    ``packed`` from the bottom of the subnet, ``scattered`` anywhere in it (fragments /28s)."""


class SubnetSpec(_Model):
    id: Annotated[str, Field(pattern=r"^subnet-[0-9a-zA-Z]{1,17}$")]
    az: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")]
    cidr: str
    foreign_addresses: Annotated[int, Field(ge=0, le=60_000)] = 0
    """Addresses other callers' instances hold in the subnet from the start (placed as
    ``ec2.single_placement`` says): with ``scattered``, a fragmented subnet."""
    tags: dict[str, str] = {}
    """The subnet's own tags (besides the clusters' ``kubernetes.io/cluster/<name>``), e.g.
    ``{kubernetes.io/role/cni: "1"}`` for subnet discovery."""

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        net = ipaddress.IPv4Network(v, strict=True)
        if not 16 <= net.prefixlen <= 28:
            raise ValueError("must be a /16 to /28 block")
        return str(net)

    @model_validator(mode="after")
    def _room(self) -> SubnetSpec:
        size = ipaddress.IPv4Network(self.cidr).num_addresses
        if self.foreign_addresses > (size - 5) * 0.9:  # their ENIs' and instances' primaries take room too
            raise ValueError(f"foreign_addresses: more than 90% of what {self.cidr} holds")
        return self


class LaunchPool(_Model):
    """Addresses (or /28 prefixes) the node's primary ENI boots with: what RunInstances gives when
    the launch template's first network interface sets ``SecondaryPrivateIpAddressCount`` (or
    ``Ipv4PrefixCount``). The node's CNI then finds its first pool already there."""

    addresses: Annotated[int, Field(ge=0, le=49)] = 0
    prefixes: Annotated[int, Field(ge=0, le=49)] = 0

    @model_validator(mode="after")
    def _one(self) -> LaunchPool:
        if (self.addresses > 0) == (self.prefixes > 0):
            raise ValueError("give exactly one of addresses, prefixes (> 0)")
        return self


class NodeGroup(_Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    instance_type: str
    count: Annotated[int, Field(gt=0, le=20_000)]
    join_at_s: NonNeg = 0.0
    join_spread_s: NonNeg = 0.0
    cluster: str | None = None
    """Which cluster (by name); may be left out when there is only one."""
    subnet: str | None = None
    """Subnet of the nodes' primary ENIs (by scenario id); default: the first."""
    launch_pool: LaunchPool | None = None
    """What each node's primary ENI holds at launch (a launch template's network interface)."""

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        try:
            known(v)
        except KeyError as exc:  # names the closest few, not all the known types
            raise ValueError(str(exc.args[0])) from None
        return v


class Repeat(_Model):
    every_s: Annotated[float, Field(gt=0)]
    times: Annotated[int, Field(ge=1, le=10_000)]


class WorkloadStep(_Model):
    at_s: NonNeg
    node_group: str
    add_pods_per_node: Annotated[int, Field(ge=0, le=10_000)] = 0
    delete_pods_per_node: Annotated[int, Field(ge=0, le=10_000)] = 0
    spread_s: NonNeg = 0.0
    repeat: Repeat | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> WorkloadStep:
        if (self.add_pods_per_node > 0) == (self.delete_pods_per_node > 0):
            raise ValueError("give exactly one of add_pods_per_node, delete_pods_per_node (> 0)")
        return self

    def times(self) -> list[float]:
        """Start of every occurrence of this step."""
        if self.repeat is None:
            return [self.at_s]
        return [self.at_s + i * self.repeat.every_s for i in range(self.repeat.times)]


class Fault(_Model):
    at_s: NonNeg
    duration_s: Annotated[float, Field(gt=0)]
    kind: FaultKind
    rate: NonNeg
    subnet: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> Fault:
        if self.kind == "subnet-exhausted" and self.subnet is None:
            raise ValueError("subnet-exhausted needs a subnet")
        if self.kind != "subnet-exhausted" and self.subnet is not None:
            raise ValueError(f"subnet is only for subnet-exhausted, not {self.kind}")
        if self.kind in ("lambda-crash", "duplicate-delivery", "attach-failure") and self.rate > 1:
            raise ValueError(f"rate of {self.kind} is a probability: must be <= 1")
        return self

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s


class Scenario(_Model):
    name: Annotated[str, Field(min_length=1, max_length=100)]
    seed: int = 0
    duration_s: Annotated[float, Field(gt=0, le=86_400)]
    strategies: Annotated[list[Strategy], Field(min_length=1)] = list(STRATEGIES)
    account: Account = Account()
    ec2: Ec2Timing = Ec2Timing()
    cluster: ClusterSpec | None = None
    clusters: list[ClusterSpec] | None = None
    subnets: Annotated[list[SubnetSpec], Field(min_length=1)]
    node_groups: Annotated[list[NodeGroup], Field(min_length=1)]
    workload: list[WorkloadStep] = []
    faults: list[Fault] = []

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        if len(set(self.strategies)) != len(self.strategies):
            raise ValueError("strategies: listed twice")
        if (self.cluster is None) == (self.clusters is None):
            raise ValueError("give exactly one of cluster, clusters")
        clusters = self.all_clusters
        names = [c.name for c in clusters]
        if len(set(names)) != len(names):
            raise ValueError("clusters: two clusters share a name")
        subnet_ids = [s.id for s in self.subnets]
        if len(set(subnet_ids)) != len(subnet_ids):
            raise ValueError("subnets: two subnets share an id")
        nets = [ipaddress.IPv4Network(s.cidr) for s in self.subnets]
        for i, a in enumerate(nets):
            for b in nets[i + 1 :]:
                if a.overlaps(b):
                    raise ValueError(f"subnets: {a} overlaps {b}")
        groups = [g.name for g in self.node_groups]
        if len(set(groups)) != len(groups):
            raise ValueError("node_groups: two groups share a name")
        for i, g in enumerate(self.node_groups):
            if g.cluster is None and len(clusters) > 1:
                raise ValueError(f"node_groups[{i}].cluster: required with several clusters")
            if g.cluster is not None and g.cluster not in names:
                raise ValueError(f"node_groups[{i}].cluster: no cluster named {g.cluster!r}")
            if g.subnet is not None and g.subnet not in subnet_ids:
                raise ValueError(f"node_groups[{i}].subnet: no subnet {g.subnet!r}")
            env = self.cluster_of(g).env
            if env.ENABLE_PREFIX_DELEGATION and not KNOWN_TYPES[g.instance_type].prefix_capable:
                raise ValueError(f"node_groups[{i}].instance_type: {g.instance_type} cannot hold prefixes")
            if g.launch_pool is not None:
                _check_launch_pool(f"node_groups[{i}].launch_pool", g, self.cluster_of(g))
        for i, w in enumerate(self.workload):
            if w.node_group not in groups:
                raise ValueError(f"workload[{i}].node_group: no node group {w.node_group!r}")
        for i, f in enumerate(self.faults):
            if f.subnet is not None and f.subnet not in subnet_ids:
                raise ValueError(f"faults[{i}].subnet: no subnet {f.subnet!r}")
        zones = {s.id: s.az for s in self.subnets}
        for c in clusters:
            if c.custom_network and "cilium" in self.strategies:
                raise ValueError(f"cluster {c.name}: custom_network: the cilium model has none; leave cilium out")
            for az, entry in c.custom_network.items():
                for sid in entry.subnets:
                    if sid not in zones:
                        raise ValueError(f"cluster {c.name}: custom_network.{az}: no subnet {sid!r}")
                    if zones[sid] != az:
                        raise ValueError(f"cluster {c.name}: custom_network.{az}: {sid} is in {zones[sid]}")
        return self

    @property
    def discovers_subnets(self) -> bool:
        """Whether a subnet carries the discovery tag: warmpool then discovers its subnets by
        tag (``WARMPOOL_SUBNET_DISCOVERY``, no list) instead of being given every subnet."""
        return any(DISCOVERY_TAG in s.tags for s in self.subnets)

    @property
    def all_clusters(self) -> list[ClusterSpec]:
        if self.clusters is not None:
            return list(self.clusters)
        assert self.cluster is not None
        return [self.cluster]

    def cluster_of(self, group: NodeGroup) -> ClusterSpec:
        clusters = self.all_clusters
        if group.cluster is None:
            return clusters[0]
        return next(c for c in clusters if c.name == group.cluster)

    def cluster_named(self, name: str) -> ClusterSpec:
        return next(c for c in self.all_clusters if c.name == name)

    def group(self, name: str) -> NodeGroup:
        return next(g for g in self.node_groups if g.name == name)

    def subnet_of(self, group: NodeGroup) -> SubnetSpec:
        if group.subnet is None:
            return self.subnets[0]
        return next(s for s in self.subnets if s.id == group.subnet)

    def bucket_specs(self) -> dict[str, BucketSpec]:
        """The account's buckets: the default table with the scenario's overrides."""
        return {**DEFAULT_SPECS, **self.account.buckets}

    @property
    def total_nodes(self) -> int:
        return sum(g.count for g in self.node_groups)


def _check_launch_pool(where: str, g: NodeGroup, cluster: ClusterSpec) -> None:
    """A launch pool the node's CNI can use: its kind matches the cluster's mode, it fits the
    primary ENI, and the primary ENI serves pods."""
    lp = g.launch_pool
    assert lp is not None
    env = cluster.env
    lim = KNOWN_TYPES[g.instance_type]
    if lp.prefixes and not env.ENABLE_PREFIX_DELEGATION:
        raise ValueError(f"{where}.prefixes: the cluster is not in prefix mode (ENABLE_PREFIX_DELEGATION)")
    if lp.addresses and env.ENABLE_PREFIX_DELEGATION:
        raise ValueError(f"{where}.addresses: the cluster is in prefix mode: give prefixes")
    if lp.prefixes and not lim.prefix_capable:
        raise ValueError(f"{where}.prefixes: {g.instance_type} cannot hold prefixes")
    slots = lim.slots_per_eni
    if max(lp.addresses, lp.prefixes) > slots:
        raise ValueError(f"{where}: {g.instance_type}'s primary ENI holds at most {slots} beside its own address")
    if cluster.custom_network:
        raise ValueError(f"{where}: with custom_network the primary ENI serves no pod")


# --- loading ------------------------------------------------------------------

_MESSAGES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown field",
    "missing": "required",
    "too_short": "must not be empty",
}


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "literal[")):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(err: Mapping[str, Any]) -> str:
    template = _MESSAGES.get(str(err["type"]))
    if template is not None:
        try:
            return template.format(**(err.get("ctx") or {}))
        except (KeyError, IndexError):
            pass
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def explain(exc: ValidationError, source: str) -> str:
    lines = []
    for err in exc.errors():
        where = _loc(tuple(err["loc"]))
        lines.append(f"{source}: {where}: {_message(err)}" if where else f"{source}: {_message(err)}")
    return "\n".join(lines)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(explain(exc, source)) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; :class:`ScenarioError` naming file and field."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {exc}") from None
    return parse_scenario(data, str(p))
