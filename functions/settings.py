"""The functions' typed settings, read from the environment once at cold start.

Logic never reads the environment: the handler builds :class:`Settings` once
per container and passes it in. The bench and the tests build it directly.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from warmpool import names
from warmpool.buckets import BucketSpec, spec_for
from warmpool.messages import MIN_RELEASE_TIMEOUT_S, OFFER_MAX_AGE_CEILING_S
from warmpool.subnets import CustomNetwork, SubnetRule, ZoneNetwork

IdentityMode = Literal["none", "sender-id"]
IdentityVerification = Literal["required", "off"]

LEASE_TTL_MARGIN_S = 30.0
"""How much longer than the function timeout a node's lease lasts: clock skew
between containers, and the store writes after the last EC2 call."""


def _csv(v: object) -> object:
    if isinstance(v, str):
        return tuple(p.strip() for p in v.split(",") if p.strip())
    return v


class Settings(BaseSettings):
    """What one cluster's allocator and reconciler need to know."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    cluster: str = Field(alias=names.ENV_CLUSTER)
    reports_queue_url: str = Field(default="", alias=names.ENV_REPORTS_QUEUE_URL)
    dlq_url: str = Field(default="", alias=names.ENV_DLQ_URL)
    result_queue_prefix: str = Field(default="", alias=names.ENV_RESULT_QUEUE_PREFIX)
    """A queue-name prefix (``warmpool-C-result-``) or a URL prefix (``http...``); empty: the
    cluster's default (:mod:`functions.result_queues` names the queues)."""
    ledger_table: str = Field(default="", alias=names.ENV_LEDGER_TABLE)
    buckets_table: str = Field(default=names.BUCKETS_TABLE, alias=names.ENV_BUCKETS_TABLE)
    budget_fraction: float = Field(default=0.8, gt=0, le=1, alias=names.ENV_BUDGET_FRACTION)
    allowed_subnets: Annotated[tuple[str, ...], NoDecode] = Field(default=(), alias=names.ENV_ALLOWED_SUBNETS)
    """Subnet ids new ENIs may be created in: an explicit list wins over discovery (tags unread)."""
    subnet_discovery: bool = Field(default=True, alias=names.ENV_SUBNET_DISCOVERY)
    """Without an explicit list: ``True`` finds the pod subnets by the VPC CNI's tags
    (``warmpool/subnets.py``); ``False`` uses those tagged for the cluster, else every subnet of
    the nodes' VPC, as before discovery."""
    subnet_tag: str = Field(default="", alias=names.ENV_SUBNET_TAG)
    """``KEY=VALUE``: without an explicit list, the subnets so tagged (the stack's
    ``subnet_tag``, which its IAM statement allows); tags of discovery unread. Empty: unset."""
    security_groups: Annotated[tuple[str, ...], NoDecode] = Field(default=(), alias=names.ENV_SECURITY_GROUPS)
    custom_network: dict[str, dict[str, list[str]]] = Field(default_factory=dict, alias=names.ENV_CUSTOM_NETWORK)
    """Custom networking (docs/deploy.md): JSON ``{"ZONE": {"subnets": [...], "security_groups":
    [...]}}``, an ``ENIConfig`` per zone. Nodes reporting ``custom_networking`` get new ENIs only in
    their zone's subnets, with its groups (none: the stack's, else the node's primary ENI's);
    other nodes never use these subnets. Empty: no custom networking."""
    identity_mode: IdentityMode = Field(default="none", alias=names.ENV_IDENTITY_MODE)
    endpoint_url: str = Field(default="", alias=names.ENV_ENDPOINT_URL)
    """Local stack only; boto3 also honours ``AWS_ENDPOINT_URL`` by itself."""
    gc_age_s: float = Field(default=300.0, ge=0, alias=names.ENV_GC_AGE_S)

    # Not in names.py (defaults are right for production; tests/bench pass them).
    account: str = Field(default="000000000000", alias="WARMPOOL_ACCOUNT")
    region: str = Field(default="us-east-1", alias="AWS_REGION")
    allocate_timeout_s: float = Field(default=30.0, gt=0, le=900, alias=names.ENV_ALLOCATE_TIMEOUT_S)
    """The allocate function's timeout (the stack passes its ``allocate_timeout_s``)."""
    lease_ttl_s: float = Field(default=0.0, ge=0, alias="WARMPOOL_LEASE_TTL_S")
    """How long a node's lease lasts. 0 (the default) derives it:
    ``allocate_timeout_s + LEASE_TTL_MARGIN_S``; a set value may not be shorter,
    or a slow invocation could outlive its lease and a second one act on the node."""
    deadline_margin_s: float = Field(default=0.0, ge=0, alias="WARMPOOL_DEADLINE_MARGIN_S")
    """No new work (Describe round, payment, node, EC2 call) starts this close
    to the invocation's deadline: what is left is deferred, and the ledger
    writes, result pushes and re-sends still fit before the function times out.
    0 (the default) derives it: ``min(5 s, allocate_timeout_s / 5)``."""
    ledger_ttl_s: float = Field(default=7 * 86400.0, gt=0, alias="WARMPOOL_LEDGER_TTL_S")
    subnet_cache_ttl_s: float = Field(default=30.0, ge=0, le=3600, alias="WARMPOOL_SUBNET_CACHE_TTL_S")
    """How long the subnets read from EC2 (their tags and free counts) are used before they are
    read again, paid from the DescribeSubnets bucket: a subnet tagged later is used within it."""
    named_placement: bool = Field(default=False, alias=names.ENV_NAMED_PLACEMENT)
    """Name the addresses and /28 prefixes of each AssignPrivateIpAddresses (``warmpool/placement.py``:
    singles packed into broken /28s, prefixes from whole ones) from what the ENI's subnet holds, read
    with a paid DescribeNetworkInterfaces by ``subnet-id`` and GetSubnetCidrReservations, less what
    any container released there within ``placement_release_hold_s``; and in prefix mode leave a
    subnet with no whole /28 before a call fails there. Off: EC2 places them (by count), as before."""
    scarce_free: int = Field(
        default=names.SCARCE_FREE_DEFAULT, ge=0, le=names.SCARCE_FREE_MAX, alias=names.ENV_SCARCE_FREE
    )
    """Fair sharing (docs/allocator.md, "Scarce addresses shared fairly"): a node's zone is scarce
    when its candidate pod subnets have fewer free addresses in all than this (a lean node's: at
    most twice this); results to agents that understand it then say ``scarce``. 0: off."""
    multi_card: bool = Field(default=False, alias=names.ENV_MULTI_CARD)
    """New ENIs on the other network cards of a multi-card type (p5.48xlarge: 32 cards of 2 ENIs)
    once the default card is full, at the lowest card with room (``warmpool.planner.new_eni_slot``),
    and every node's ceiling counting every card's ENIs. Off (the default, as in the VPC CNI):
    card 0 alone. Set the agents' ``WARMPOOL_MULTI_CARD`` alike (their pool's ceiling)."""
    placement_cache_ttl_s: float = Field(default=10.0, ge=0, le=600, alias="WARMPOOL_PLACEMENT_CACHE_TTL_S")
    """How long a subnet's usage read for named placement is used (with this container's own
    placements added) before it is read again."""
    placement_release_hold_s: float = Field(
        default=300.0, ge=MIN_RELEASE_TIMEOUT_S, le=86400, alias="WARMPOOL_PLACEMENT_RELEASE_HOLD_S"
    )
    """Named placement never names an address or prefix the allocator unassigned (or freed by
    deleting its ENI) this recently, in any container: its owner's agent may not have applied the
    ``released`` yet. At least the agents' ``WARMPOOL_RELEASE_TIMEOUT_S`` (240 s by default, at
    least ``MIN_RELEASE_TIMEOUT_S``), counted from the call, which comes after the quarantine the
    agent's timeout counts from."""
    max_workers: int = Field(default=8, ge=1, le=64, alias="WARMPOOL_MAX_WORKERS")
    max_defer_s: int = Field(default=900, ge=1, le=900, alias="WARMPOOL_MAX_DEFER_S")
    release_offer_max_age_s: float = Field(
        default=OFFER_MAX_AGE_CEILING_S, gt=0, alias="WARMPOOL_RELEASE_OFFER_MAX_AGE_S"
    )
    """Release offers older than this, measured from each offer's
    ``quarantined_at``, are not acted on: the agent takes quarantined addresses
    back after its release timeout, so acting on an old offer could unassign an
    address a pod holds again. At most ``OFFER_MAX_AGE_CEILING_S`` (the agent's
    release timeout is checked against that ceiling plus a margin)."""
    lease_retry_s: int = Field(default=5, ge=1, le=900, alias="WARMPOOL_LEASE_RETRY_S")
    bucket_capacity: dict[str, float] = Field(default_factory=dict, alias="WARMPOOL_BUCKET_CAPACITY")
    """Per-action capacity overrides (JSON), when the account's quotas differ."""
    bucket_refill: dict[str, float] = Field(default_factory=dict, alias="WARMPOOL_BUCKET_REFILL")
    identity_certificates: str = Field(default="", alias=names.ENV_IDENTITY_CERTIFICATES)
    """PEM certificate(s) whose RSA keys sign instance identity documents
    (``functions/identity.py``: ``TrustedKeys.from_pem``). The stack sets the
    region's AWS certificate, ``warmpool local up`` its test key's. Empty only
    where Settings is built directly (bench, unit tests)."""
    fair_window_s: float = Field(default=5.0, ge=0, alias="WARMPOOL_FAIR_WINDOW_S")
    """Fair shares (``functions/fairness.py``): over this window an instance may
    spend at most ``(capacity + refill × window) / active instances`` of each
    bucket while others spend too. 0 turns fair shares off."""
    flip_limit: int = Field(default=6, ge=0, alias="WARMPOOL_FLIP_LIMIT")
    """Flips between allocating and releasing within ``flip_window_s`` that damp
    an instance (its releases are taken back for ``damp_s``). 0: never damp.
    An honest agent flips at most about once a minute (its release delay)."""
    flip_window_s: float = Field(default=120.0, gt=0, alias="WARMPOOL_FLIP_WINDOW_S")
    damp_s: float = Field(default=600.0, ge=0, alias="WARMPOOL_DAMP_S")
    release_delay_s: float = Field(default=10.0, ge=0, alias="WARMPOOL_ALLOCATOR_RELEASE_DELAY_S")
    """The allocator unassigns or deletes only what has been offered (quarantined,
    per the offer's ``quarantined_at``) for at least this long, whatever the agent does."""
    min_eni_age_s: float = Field(default=60.0, ge=0, alias="WARMPOOL_MIN_ENI_AGE_S")
    """The allocator deletes no ENI younger than this (its ``createdAt`` tag), whatever the agent does."""
    max_pods: int = Field(default=0, ge=0, le=names.MAX_PODS_OVERRIDE, alias=names.ENV_MAX_PODS)
    """The kubelet's ``--max-pods`` on the cluster's nodes; 0 (the default) = the VPC CNI's
    formula per instance type and mode (``warmpool max-pods``). No node is planned more
    addresses than this, whatever its report asks for (``warmpool.planner.node_max_pods``).
    Set it, on the agents too, where the kubelets run a custom ``--max-pods``."""
    identity_verification: IdentityVerification = Field(default="required", alias="WARMPOOL_IDENTITY_VERIFICATION")
    """``required`` (the default): every report's signed identity is verified
    against ``identity_certificates`` and a report that fails goes to the DLQ;
    the allocator refuses to start without a usable certificate. ``off``: for
    explicit local tests only; the allocator then logs a warning at cold start
    and counts ``ReportsIdentityUnverified`` for every report it takes unverified,
    never silently."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Constructed directly (tests, bench), settings come only from arguments."""
        return (init_settings,)

    @classmethod
    def from_env(cls) -> Settings:
        """The production path: the function's environment, once at cold start."""
        return _EnvSettings()

    @field_validator("allowed_subnets", "security_groups", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        return _csv(v)

    @field_validator("allowed_subnets")
    @classmethod
    def _subnet_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in v if not s.startswith("subnet-") or len(s) == len("subnet-")]
        if bad:
            raise ValueError(f"{names.ENV_ALLOWED_SUBNETS} lists {', '.join(bad)}: not subnet ids (subnet-...)")
        if len(set(v)) != len(v):
            raise ValueError(f"{names.ENV_ALLOWED_SUBNETS} lists a subnet twice")
        return v

    @field_validator("custom_network", mode="before")
    @classmethod
    def _custom_json(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                return json.loads(v) if v.strip() else {}
            except json.JSONDecodeError as err:
                raise ValueError(f"{names.ENV_CUSTOM_NETWORK} is not JSON ({err})") from None
        return v

    @field_validator("custom_network")
    @classmethod
    def _custom_network(cls, v: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
        seen: set[str] = set()
        for zone, entry in v.items():
            where = f"{names.ENV_CUSTOM_NETWORK}[{zone!r}]"
            if not zone.strip():
                raise ValueError(f"{names.ENV_CUSTOM_NETWORK} has an empty zone name")
            extra = set(entry) - {"subnets", "security_groups"}
            if extra:
                raise ValueError(f"{where} has {', '.join(sorted(extra))}: only subnets and security_groups")
            subnets = entry.get("subnets", [])
            if not subnets:
                raise ValueError(f"{where} names no subnet")
            bad = [x for x in subnets if not x.startswith("subnet-") or x == "subnet-"]
            bad += [x for x in entry.get("security_groups", []) if not x.startswith("sg-") or x == "sg-"]
            if bad:
                raise ValueError(f"{where} lists {', '.join(bad)}: not subnet (subnet-...) or group (sg-...) ids")
            twice = (seen & set(subnets)) | {x for x in subnets if subnets.count(x) > 1}
            if twice:
                raise ValueError(f"{where} lists a subnet twice: {', '.join(sorted(twice))}")
            seen |= set(subnets)
        return v

    @property
    def custom(self) -> CustomNetwork:
        """:attr:`custom_network` as the planner takes it."""
        return CustomNetwork(
            {
                zone: ZoneNetwork(tuple(e.get("subnets", [])), tuple(e.get("security_groups", [])))
                for zone, e in self.custom_network.items()
            }
        )

    @field_validator("subnet_tag")
    @classmethod
    def _subnet_tag(cls, v: str) -> str:
        key, eq, _value = v.partition("=")
        if v and (not eq or not key.strip()):
            raise ValueError(f"{names.ENV_SUBNET_TAG}={v!r}: expected KEY=VALUE")
        return v

    @property
    def subnet_rule(self) -> SubnetRule:
        """How the planner picks a node's subnets among those :meth:`functions.ec2.Ec2.subnets` read."""
        if self.subnet_discovery and not self.allowed_subnets and not self.subnet_tag:
            return SubnetRule.DISCOVER
        return SubnetRule.LISTED

    @model_validator(mode="after")
    def _lease_outlives_the_function(self) -> Settings:
        floor = self.allocate_timeout_s + LEASE_TTL_MARGIN_S
        if self.lease_ttl_s == 0:
            object.__setattr__(self, "lease_ttl_s", floor)  # derived (the model is frozen)
        elif self.lease_ttl_s < floor:
            raise ValueError(
                f"WARMPOOL_LEASE_TTL_S={self.lease_ttl_s:g} is shorter than the allocate function's timeout "
                f"({self.allocate_timeout_s:g} s) plus {LEASE_TTL_MARGIN_S:g} s: a slow invocation would outlive "
                "its lease; leave it unset to derive it"
            )
        if self.deadline_margin_s == 0:
            object.__setattr__(self, "deadline_margin_s", min(5.0, self.allocate_timeout_s / 5))
        elif self.deadline_margin_s >= self.allocate_timeout_s:
            raise ValueError(
                f"WARMPOOL_DEADLINE_MARGIN_S={self.deadline_margin_s:g} leaves no time to work within the "
                f"allocate function's timeout of {self.allocate_timeout_s:g} s"
            )
        return self

    @model_validator(mode="after")
    def _offer_age_within_ceiling(self) -> Settings:
        if self.release_offer_max_age_s > OFFER_MAX_AGE_CEILING_S:
            raise ValueError(
                f"WARMPOOL_RELEASE_OFFER_MAX_AGE_S={self.release_offer_max_age_s:g} exceeds the ceiling of "
                f"{OFFER_MAX_AGE_CEILING_S:g} s: agents take quarantined addresses back after their release "
                "timeout, which is only checked against that ceiling"
            )
        return self

    def bucket_spec(self, action: str) -> BucketSpec:
        """The share of ``action``'s account bucket this allocator may spend."""
        base = spec_for(action)
        spec = BucketSpec(
            capacity=self.bucket_capacity.get(action, base.capacity),
            refill_per_s=self.bucket_refill.get(action, base.refill_per_s),
        )
        return spec.scaled(self.budget_fraction)


class _EnvSettings(Settings):
    @model_validator(mode="after")
    def _certificates_when_verifying(self) -> _EnvSettings:
        if self.identity_verification == "required" and not self.identity_certificates.strip():
            raise ValueError(
                f"{names.ENV_IDENTITY_CERTIFICATES} is empty but report identities must be verified: set the "
                "region's AWS instance identity certificate (the stack does), or WARMPOOL_IDENTITY_VERIFICATION=off "
                "for local testing only"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)
