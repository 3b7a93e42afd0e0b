"""Wire messages: ``warmpool.report/v1`` (agent → allocator) and
``warmpool.result/v1`` (allocator → agent).

Strict by design: every field is bounded, IDs and addresses are checked,
unknown fields and unknown schema versions are rejected with a reason. A
message that fails here is never acted on (docs/design.md, "Wire messages").
"""

from __future__ import annotations

import functools
import ipaddress
import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from warmpool import names
from warmpool.limits import KNOWN_TYPES

REPORT_SCHEMA = "warmpool.report/v1"
RESULT_SCHEMA = "warmpool.result/v1"
MAX_MESSAGE_BYTES = 256 * 1024
"""Largest message either side accepts (SQS allows 1 MiB; a report is ~10 KiB at most)."""

MAX_NETWORK_CARDS = max(t.network_cards for t in KNOWN_TYPES.values())
"""The most network cards any instance type of the limits table has (32: p5.48xlarge)."""
MAX_ENIS = max(t.total_enis for t in KNOWN_TYPES.values())
"""The most ENIs any instance type of the limits table takes on all its cards (64). A report
for a type the table knows is held to that type's own counts (:meth:`PoolReport._consistent`)."""
MAX_IPS_PER_ENI = 64
MAX_PREFIXES_PER_ENI = 64
MAX_ACTIONS = 64
MAX_TARGET = 100_000
MAX_BURST = 100_000
"""The most pods a report may say arrived in a burst (``PoolReport.burst``)."""
FAILED_CODE_MAX = 100
FAILED_MESSAGE_MAX = 500
DEFERRED_REASON_MAX = 200
MAX_KUBELET_MAX_PODS = names.MAX_PODS_OVERRIDE
"""The largest ``kubelet_max_pods`` a report may carry (1000, the bound of ``WARMPOOL_MAX_PODS`` too).
Above every instance type's formula, so a value past it could never lower a ceiling; the agent
does not send one, the parser refuses it."""


class MessageError(ValueError):
    """A message that must not be acted on; ``reason`` is short and loggable."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@functools.lru_cache(maxsize=1 << 16)
def _ipv4(v: str) -> str:
    """The canonical form of an IPv4 address (ValueError if it is none). Cached:
    a node reports the same addresses report after report, and parsing them was
    the largest part of the allocator's report parsing in the bench's profile;
    a failed parse raises every time (lru_cache keeps no exception)."""
    addr = ipaddress.IPv4Address(v)
    return str(addr)


def _prefix28(v: str) -> str:
    net = ipaddress.IPv4Network(v, strict=True)
    if net.prefixlen != 28:
        raise ValueError(f"{v} is not a /28 prefix")
    return str(net)


def _cidr(v: str) -> str:
    return str(ipaddress.IPv4Network(v, strict=True))


IPv4 = Annotated[str, StringConstraints(max_length=15), AfterValidator(_ipv4)]
Prefix28 = Annotated[str, StringConstraints(max_length=18), AfterValidator(_prefix28)]
Cidr = Annotated[str, StringConstraints(max_length=18), AfterValidator(_cidr)]
InstanceId = Annotated[str, StringConstraints(pattern=r"^i-[0-9a-f]{8,17}$")]
EniId = Annotated[str, StringConstraints(pattern=r"^eni-[0-9a-f]{8,17}$")]
SubnetId = Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-zA-Z]{1,17}$")]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$")]
InstanceType = Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]{1,20}\.[a-z0-9-]{1,20}$")]
AvailabilityZone = Annotated[
    str, StringConstraints(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$|^[a-z]{2}-[a-z]+-\d-[a-z]+-\d[a-z]$")
]
Count = Annotated[int, Field(ge=0, le=MAX_TARGET)]
Mode = Literal["secondary-ip", "prefix"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_max_length=1024)


class Targets(_Strict):
    """The VPC CNI-style targets the node runs with (0 = unset)."""

    warm_ip: Count = 0
    minimum_ip: Count = 0
    warm_eni: Annotated[int, Field(ge=0, le=64)] = 1
    warm_prefix: Count = 0
    max_eni: Annotated[int, Field(ge=0, le=MAX_ENIS)] = 0


class EniReport(_Strict):
    """One ENI as the agent sees it."""

    eni_id: EniId
    device_index: Annotated[int, Field(ge=0, le=MAX_ENIS)]
    network_card: Annotated[int, Field(ge=0, lt=MAX_NETWORK_CARDS)] = 0
    subnet_id: SubnetId
    primary_ip: IPv4
    ips: Annotated[list[IPv4], Field(max_length=MAX_IPS_PER_ENI)] = []
    prefixes: Annotated[list[Prefix28], Field(max_length=MAX_PREFIXES_PER_ENI)] = []
    assigned: Annotated[int, Field(ge=0, le=MAX_IPS_PER_ENI * 16)] = 0
    """Addresses of this ENI held by pods."""


OFFER_MAX_AGE_CEILING_S = 60.0
"""The oldest a release offer may be, measured from its ``quarantined_at``,
when the allocator unassigns it. The allocator's own limit
(``WARMPOOL_RELEASE_OFFER_MAX_AGE_S``) may be lower, never higher."""

RELEASE_TIMEOUT_MARGIN_S = 30.0
"""How much longer than :data:`OFFER_MAX_AGE_CEILING_S` the agent keeps an
offered address quarantined before it takes it back: clock skew between node
and Lambda plus the time between the allocator's age check and EC2's answer.
The agent's ``WARMPOOL_RELEASE_TIMEOUT_S`` must be at least the sum."""

IMDS_LAG_BOUND_S = 120.0
"""How long IMDS usually lags EC2 (nothing documents a bound, docs/safety.md row 4). No
safety rule rests on it: at the release timeout the agent drops an offered address IMDS no
longer lists as released and renews the offer of one it lists (the allocator's answer
decides). The timeout covers this lag so that an unassign is usually visible by then (a
drop rather than a renewal that the allocator then answers ``released`` again)."""

MIN_RELEASE_TIMEOUT_S = OFFER_MAX_AGE_CEILING_S + RELEASE_TIMEOUT_MARGIN_S + IMDS_LAG_BOUND_S
"""210 s: ceiling 60 + margin 30 + IMDS lag 120."""


class ReleaseOffer(_Strict):
    """Addresses the agent has quarantined and offers back.

    ``quarantined_at`` (epoch seconds) is when the agent quarantined them; an
    offer's age is measured from it, never from the report's ``sent_at`` (the
    agent repeats a still-quarantined offer in every later report). An offer
    without it (agents before the field existed) is never acted on: the
    allocator cannot know how close the agent is to taking it back."""

    eni_id: EniId
    ips: Annotated[list[IPv4], Field(max_length=MAX_IPS_PER_ENI)] = []
    prefixes: Annotated[list[Prefix28], Field(max_length=MAX_PREFIXES_PER_ENI)] = []
    quarantined_at: Annotated[float, Field(ge=0, le=1e11)] | None = None
    unknown: bool = False
    """Some of these addresses the agent holds on IMDS's word alone, knowing neither whether
    nor when an earlier offer of them was acted on (learnt after a checkpoint loss, with no
    grant naming them): EC2 may have unassigned them before, and a Describe that lags may still
    show them. Never handed back (``Reclaim``); the allocator unassigns what EC2 shows of them
    (an address already unassigned is answered "not assigned", said ``released``) and grants
    fresh ones for the node's need (docs/allocator.md, "Offers of unknown origin")."""

    @property
    def may_hand_back(self) -> bool:
        """Whether the allocator may answer this offer with a hand-back: never one of unknown origin."""
        return not self.unknown


class SignedIdentity(_Strict):
    """The instance identity document and its signature exactly as IMDS serves
    them (``/latest/dynamic/instance-identity/document`` and ``.../signature``:
    base64 RSA over SHA-256 of the document's bytes). Not a nonce: it proves
    which instance, not when."""

    document: Annotated[str, StringConstraints(max_length=4096)]
    signature: Annotated[str, StringConstraints(max_length=2048)]


class PoolReport(_Strict):
    """``warmpool.report/v1``: a node's pool as the agent sees it."""

    schema_: Literal["warmpool.report/v1"] = Field(default="warmpool.report/v1", alias="schema")
    cluster: Name
    node: Name
    instance_id: InstanceId
    instance_type: InstanceType
    availability_zone: AvailabilityZone
    seq: Annotated[int, Field(ge=0, le=2**62)]
    sent_at: Annotated[float, Field(ge=0, le=1e11)]
    mode: Mode = "secondary-ip"
    targets: Targets = Targets()
    enis: Annotated[list[EniReport], Field(max_length=MAX_ENIS)] = []
    assigned_ips: Count = 0
    pending_demand: Count = 0
    release: Annotated[list[ReleaseOffer], Field(max_length=MAX_ENIS)] = []
    identity: SignedIdentity | None = None
    restore_wait: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")] | None = None
    """With ``restored_from``: a random id of this start's wait, drawn at every start. The answer
    echoes it, and the agent takes only an answer with its own (not one said to another
    process's report and delivered again: seqs follow the wall clock, and a copy of the
    checkpoint may name the same first report)."""
    restored_from: Annotated[int, Field(strict=True, ge=0, le=2**62)] | None = None
    """Set while the agent runs on a checkpoint it restored and the allocator has not yet said
    whether it is the node's newest state: the last report seq that checkpoint knew. A copy
    restored from before later reports (a backup, a disk that lost its last writes) passes
    every check the node can make, and an address free in it may since have been offered and
    unassigned, or be about to be. The allocator answers with :class:`RestoreChecked`: current
    when no report after it was recorded or acted on (its ledger and release book say so,
    read under the node's lease). Until then the agent hands no free address to a pod
    (docs/safety.md, row 12; absent: no such wait, or an agent from before the field)."""
    first_start: Literal[True] | None = None
    """With ``restored_from`` 0: the agent started with no checkpoint and no pod wired on the host,
    and asks the allocator to confirm that this is the instance's first start (no report of it
    ever recorded, nothing ever written in its release book, launched within
    ``FIRST_START_MAX_AGE_S``), so that what the node booted with (a launch template's addresses or
    prefixes) is its own, free. The answer is a :class:`RestoreChecked` (``current``: confirmed),
    said alone: nothing of the report's plan is done (docs/safety.md, row 30; absent: no such ask,
    or an agent from before the field)."""
    epoch: Annotated[int, Field(strict=True, ge=1, le=2**62)] | None = None
    """The fence the allocator's last :class:`RestoreChecked` gave this agent (absent: none yet).
    A report with a lower one (or none), once a check has raised the instance's, was sent by a
    process from before it and is never acted on (``ReleaseBook.fences``)."""
    kubelet_max_pods: Annotated[int, Field(strict=True, ge=1, le=MAX_KUBELET_MAX_PODS)] | None = None
    """The node's kubelet's configured ``maxPods`` as the agent read it from the node (absent: not
    known, or an agent from before the field). The allocator holds the node to the lower of its own
    ceiling and this (:func:`warmpool.limits.pod_ceiling`): it can only lower that node's ceiling."""
    custom_networking: Literal[True] | None = None
    """The node runs with custom networking (the agent's ``AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG``): its pods
    use ENIs in the subnets and security groups the allocator's per-zone map names
    (``WARMPOOL_CUSTOM_NETWORK``), never the node's primary ENI, and its ceiling counts one ENI
    fewer (:func:`warmpool.limits.max_pods`). Absent: not custom (an allocator from before the
    field refuses a report that carries it: its node waits, never unsafe)."""
    lean: bool | None = None
    """Fair sharing of scarce addresses (docs/allocator.md, "Scarce addresses shared fairly").
    Absent: an agent from before the field (never told ``scarce``, never planned lean). False: the
    agent understands ``scarce`` and is not lean. True: it is lean (told ``scarce`` within its
    hold): its warm targets are suspended, it keeps only ``MINIMUM_IP_TARGET`` addresses in all
    beyond what its pods wait for, and offers the rest back. The allocator plans with the same
    flag (:meth:`warmpool.pool.PoolConfig.from_report`), so it neither hands back what a lean
    agent offers nor grants what it would offer again."""

    burst: Annotated[int, Field(strict=True, ge=2, le=MAX_BURST)] | None = None
    """Pods are arriving in a burst: this many (at least two) got an address within the agent's
    ``WARMPOOL_BURST_WINDOW_S``. A top-up of single addresses the node is short for then fills
    the ENI it goes on (:func:`warmpool.planner._plan_allocation`, "surge"), for the burst's
    next pods; a new ENI and prefix mode are unchanged. What turns out surplus goes back through
    the release path once the burst is over (the agent holds it until then).
    Absent: no burst, or an agent from before the field (an allocator from before it refuses a
    report that carries it: its node waits, never unsafe)."""

    multi_card: Literal[True] | None = None
    """The agent runs with ``WARMPOOL_MULTI_CARD`` and wires ENIs on network cards above 0
    (their own route tables, device 0 of such a card never the primary). The allocator places
    ENIs there only when its own setting is on too (:func:`warmpool.planner.wires_cards`).
    Absent: the setting off, or an agent from before it (an allocator from before the field
    refuses a report that carries it: its node waits, never unsafe)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _consistent(self) -> PoolReport:
        limits = KNOWN_TYPES.get(self.instance_type)
        if limits is not None:
            # The contract: network cards and ENIs up to what the instance type has.
            if len(self.enis) > limits.total_enis:
                raise ValueError(f"{len(self.enis)} ENIs > the {limits.total_enis} a {self.instance_type} takes")
            for eni in self.enis:
                if eni.network_card >= limits.network_cards:
                    raise ValueError(
                        f"ENI {eni.eni_id} on network card {eni.network_card}: "
                        f"a {self.instance_type} has {limits.network_cards}"
                    )
        seen: set[str] = set()
        devices: set[tuple[int, int]] = set()
        addrs: set[str] = set()
        for eni in self.enis:
            if eni.eni_id in seen:
                raise ValueError(f"ENI {eni.eni_id} listed twice")
            seen.add(eni.eni_id)
            key = (eni.network_card, eni.device_index)
            if key in devices:
                raise ValueError(f"device index {eni.device_index} used twice")
            devices.add(key)
            for a in [eni.primary_ip, *eni.ips]:
                if a in addrs:
                    raise ValueError(f"address {a} listed twice")
                addrs.add(a)
        if self.restored_from is not None and self.restored_from >= self.seq:
            raise ValueError(f"restored_from {self.restored_from} is not below the report's seq {self.seq}")
        self._check_restore()
        for offer in self.release:
            if offer.eni_id not in seen:
                raise ValueError(f"release names ENI {offer.eni_id} not in the report")
            if offer.quarantined_at is not None and offer.quarantined_at > self.sent_at:
                raise ValueError(f"release offer for {offer.eni_id} quarantined after the report was sent")
        return self

    def _check_restore(self) -> None:
        if (self.restore_wait is None) != (self.restored_from is None):
            raise ValueError("restore_wait and restored_from come together")
        if self.first_start and self.restored_from != 0:
            raise ValueError("a first start asks with restored_from 0")

    def to_json(self) -> str:
        # Without the field when not known: an allocator from before it (which refuses unknown
        # fields) still takes the reports of a newer agent that has no value to send.
        # Likewise ``unknown`` on offers while none is: only a report with an offer of unknown
        # origin is refused by an allocator that predates it (its node waits: never unsafe).
        exclude: dict[str, Any] = {}
        if self.kubelet_max_pods is None:
            exclude["kubelet_max_pods"] = True
        if self.restored_from is None:
            exclude["restored_from"] = True
            exclude["restore_wait"] = True
        if self.first_start is None:
            exclude["first_start"] = True
        if self.epoch is None:
            exclude["epoch"] = True
        if self.custom_networking is None:
            exclude["custom_networking"] = True
        if self.lean is None:
            exclude["lean"] = True
        if not any(o.unknown for o in self.release):
            exclude["release"] = {"__all__": {"unknown"}}
        return self.model_dump_json(by_alias=True, exclude=exclude or None)


# --- results ---------------------------------------------------------------


class Assigned(_Strict):
    kind: Literal["assigned"] = "assigned"
    eni_id: EniId
    ips: Annotated[list[IPv4], Field(max_length=MAX_IPS_PER_ENI)] = []
    prefixes: Annotated[list[Prefix28], Field(max_length=MAX_PREFIXES_PER_ENI)] = []


class Attached(_Strict):
    kind: Literal["attached"] = "attached"
    eni_id: EniId
    device_index: Annotated[int, Field(ge=0, le=MAX_ENIS)]
    network_card: Annotated[int, Field(ge=0, lt=MAX_NETWORK_CARDS)] = 0
    mac: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")]
    subnet_id: SubnetId
    subnet_cidr: Cidr
    primary_ip: IPv4
    ips: Annotated[list[IPv4], Field(max_length=MAX_IPS_PER_ENI)] = []
    prefixes: Annotated[list[Prefix28], Field(max_length=MAX_PREFIXES_PER_ENI)] = []


class Released(_Strict):
    kind: Literal["released"] = "released"
    eni_id: EniId
    ips: Annotated[list[IPv4], Field(max_length=MAX_IPS_PER_ENI)] = []
    prefixes: Annotated[list[Prefix28], Field(max_length=MAX_PREFIXES_PER_ENI)] = []


class Deleted(_Strict):
    kind: Literal["deleted"] = "deleted"
    eni_id: EniId


class RestoreChecked(_Strict):
    """The allocator's answer to a report with ``restored_from``: whether the checkpoint the
    agent restored is the node's newest state as the allocator knows it (``current``: no
    report after ``restored_from`` was recorded in its ledger or left an entry in its
    release book, read under the node's lease, and this report's seq is recorded before the
    answer is sent, so no older report is acted on after it). Not current: nothing else is
    done for the report, and the agent forgets what it had free, as after a lost checkpoint
    (every free address offered back as of unknown origin)."""

    kind: Literal["restore-checked"] = "restore-checked"
    restored_from: Annotated[int, Field(ge=0, le=2**62)]
    wait: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
    """The report's ``restore_wait``: the agent takes only an answer to its own wait."""
    current: bool
    epoch: Annotated[int, Field(ge=1, le=2**62)]
    """The instance's new fence: the agent sends it in every report from now on; reports of the
    process before (a lower one, or none) are never acted on, whatever their seq."""


class Fenced(_Strict):
    """The answer to a report the allocator dropped because it carried an epoch below the
    instance's (or none) since a restore check: the report's process may be one from before the
    check, or this agent may have missed the answer that raised it (lost, or late after its wait
    ended). The agent carries ``epoch`` from now on and reports again."""

    kind: Literal["fenced"] = "fenced"
    epoch: Annotated[int, Field(ge=1, le=2**62)]


class SeqFloor(_Strict):
    """The answer to a report the allocator dropped as stale because its seq is below the one
    the instance's ledger row holds (docs/design.md, "Seq"): a process of the node sent higher
    seqs (its wall clock ahead of this one's, a checkpoint lost or restored from an older copy)
    or the node itself sent a seq far ahead. ``floor`` is that ledger seq: the agent numbers its
    reports above it from now on, and takes every seq up to it as sent by another process. It
    says nothing was done; a late or repeated one only says a floor the agent has passed."""

    kind: Literal["seq-floor"] = "seq-floor"
    floor: Annotated[int, Field(ge=0, le=2**62)]


class Deferred(_Strict):
    kind: Literal["deferred"] = "deferred"
    retry_after_s: Annotated[float, Field(ge=0, le=3600)]
    reason: Annotated[str, StringConstraints(max_length=DEFERRED_REASON_MAX)]

    @classmethod
    def clipped(cls, retry_after_s: float, reason: str) -> Deferred:
        """With the reason cut to what the model allows."""
        return cls(retry_after_s=retry_after_s, reason=reason[:DEFERRED_REASON_MAX])


class Failed(_Strict):
    kind: Literal["failed"] = "failed"
    code: Annotated[str, StringConstraints(max_length=FAILED_CODE_MAX)]
    message: Annotated[str, StringConstraints(max_length=FAILED_MESSAGE_MAX)]

    @classmethod
    def clipped(cls, code: str, message: str) -> Failed:
        """With code and message cut to what the model allows (an AWS error's text can be long)."""
        return cls(code=code[:FAILED_CODE_MAX], message=message[:FAILED_MESSAGE_MAX])


Action = Annotated[
    Assigned | Attached | Released | Deleted | RestoreChecked | Fenced | SeqFloor | Deferred | Failed,
    Field(discriminator="kind"),
]


class AllocationResult(_Strict):
    """``warmpool.result/v1``: what the allocator did for one report."""

    schema_: Literal["warmpool.result/v1"] = Field(default="warmpool.result/v1", alias="schema")
    cluster: Name
    node: Name
    instance_id: InstanceId
    in_reply_to: Annotated[int, Field(ge=0, le=2**62)]
    actions: Annotated[list[Action], Field(max_length=MAX_ACTIONS)] = []
    scarce: Literal[True] | None = None
    """The node's zone is short of free addresses (docs/allocator.md, "Scarce addresses shared
    fairly"): the agent goes lean for its hold. Said only in answer to a report carrying ``lean``
    (an agent from before the field refuses a result with a field it does not know, and would
    lose its grants); absent otherwise."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> str:
        # Without ``scarce`` when not said: an agent from before the field still takes the result.
        return self.model_dump_json(by_alias=True, exclude={"scarce"} if self.scarce is None else None)


_REPORT = TypeAdapter(PoolReport)
_RESULT = TypeAdapter(AllocationResult)


def _load(raw: str | bytes | dict[str, Any], expected: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        obj: Any = raw
    else:
        size = len(raw.encode() if isinstance(raw, str) else raw)
        if size > MAX_MESSAGE_BYTES:
            raise MessageError("oversized", f"{size} bytes > {MAX_MESSAGE_BYTES}")
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            # RecursionError: JSON nested deeper than the interpreter's stack (a few KiB of "[").
            raise MessageError("not-json", str(exc)[:200]) from None
    if not isinstance(obj, dict):
        raise MessageError("not-an-object", type(obj).__name__)
    schema = obj.get("schema")
    if schema != expected:
        raise MessageError("unknown-schema", f"expected {expected!r}, got {str(schema)[:80]!r}")
    return obj


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)[:400]


def parse_report(raw: str | bytes | dict[str, Any]) -> PoolReport:
    """Parse and validate a report; :class:`MessageError` with a reason if invalid."""
    obj = _load(raw, REPORT_SCHEMA)
    try:
        return _REPORT.validate_python(obj)
    except ValidationError as exc:
        raise MessageError("invalid", _explain(exc)) from None


def parse_result(raw: str | bytes | dict[str, Any]) -> AllocationResult:
    """Parse and validate a result; :class:`MessageError` with a reason if invalid."""
    obj = _load(raw, RESULT_SCHEMA)
    try:
        return _RESULT.validate_python(obj)
    except ValidationError as exc:
        raise MessageError("invalid", _explain(exc)) from None
