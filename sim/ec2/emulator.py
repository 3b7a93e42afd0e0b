"""The emulated EC2: state and every fidelity rule, in one place.

:class:`Ec2Emulator` keeps VPCs, subnets, instances and ENIs in memory and
answers boto3-shaped requests (``dispatch(action, params) -> dict``) with the
rules AWS applies and moto does not: per-instance ENI limits, per-ENI address
limits, /28 prefixes carved without overlap, subnet exhaustion, ClientToken
idempotency, token-bucket throttling (with background load from other
callers), attach visibility delay, fault injection and per-action counters.

Time comes from the injected :class:`warmpool.clock.Clock`; nothing here
sleeps. Everything that happens "later" (an attach becoming visible, a detach
completing, tokens refilling, other callers draining a bucket) is computed
lazily from the clock at the next call, so a virtual clock can jump freely.

The ways in (:meth:`client`, :meth:`boto3_client`, :mod:`sim.ec2.http`)
are thin adapters over :meth:`dispatch`.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import heapq
import ipaddress
import json
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from warmpool.buckets import (
    UNFILTERED_DESCRIBE,
    BucketSpec,
    BucketState,
    full,
    spec_for,
    try_take,
)
from warmpool.clock import Clock
from warmpool.limits import KNOWN_TYPES, InstanceLimits, known

from .cidr import SubnetPool
from .errors import Ec2Error, metadata, not_found
from .state import STATE_CODES, Attachment, Eni, Instance, Subnet, Vpc, tag_list, ts

if TYPE_CHECKING:
    from .client import FastEc2Client

UNFILTERED_SUFFIX = ":unfiltered"
"""Bucket key suffix for unfiltered, unpaginated DescribeInstances/DescribeNetworkInterfaces
(override with ``Ec2Config.buckets["DescribeInstances:unfiltered"]``)."""

MAX_IPV4_PER_ENI = max(t.ipv4_per_eni for t in KNOWN_TYPES.values())
"""Cap on addresses of an ENI that is not attached (no instance type to limit it yet)."""

AttachCallback = Callable[[str, dict[str, Any]], None]


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


@dataclass
class _Fault:
    code: str
    remaining: int
    message: str
    status: int | None


@dataclass
class _Counter:
    calls: int = 0
    throttled: int = 0
    errors: int = 0


Handler = Callable[["Ec2Emulator", dict[str, Any]], dict[str, Any]]
_HANDLERS: dict[str, Handler] = {}


def _action(name: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        _HANDLERS[name] = fn
        return fn

    return deco


def _req(p: Mapping[str, Any], key: str) -> Any:
    v = p.get(key)
    if v is None or v == "":
        raise Ec2Error("MissingParameter", f"The request must contain the parameter {key}")
    return v


def _ids(p: Mapping[str, Any], key: str) -> list[str]:
    v = p.get(key) or []
    return [v] if isinstance(v, str) else list(v)


def _tags_for(p: Mapping[str, Any], resource_type: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in p.get("TagSpecifications") or []:
        if spec.get("ResourceType") == resource_type:
            for t in spec.get("Tags") or []:
                out[str(t["Key"])] = str(t.get("Value", ""))
    return out


class Ec2Emulator:
    """In-memory EC2 with AWS's limits, errors and throttling (see module doc)."""

    def __init__(self, clock: Clock, config: Ec2Config | None = None, seed: int = 0) -> None:
        self.clock = clock
        self.config = config or Ec2Config()
        self._rng = random.Random(seed)
        self._fault_rng = random.Random(seed + 1)
        self._lock = threading.RLock()
        self.vpcs: dict[str, Vpc] = {}
        self.subnets: dict[str, Subnet] = {}
        self.instances: dict[str, Instance] = {}
        self.enis: dict[str, Eni] = {}
        self._attachments: dict[str, str] = {}  # attachment id -> eni id
        self._ip_owner: dict[str, str] = {}  # address or prefix -> eni id
        self._tokens: dict[str, tuple[str, dict[str, Any]]] = {}  # ClientToken -> (fingerprint, response)
        self._run_tokens: dict[str, tuple[str, dict[str, Any]]] = {}
        self._pending: list[tuple[float, int, str, str, str]] = []  # (at, seq, kind, eni id, attachment id)
        self._seq = 0
        self._buckets: dict[str, BucketState] = {}
        self._load: dict[str, float] = {}
        self._faults: dict[str, list[_Fault]] = {}
        self._fault_rates: dict[str, tuple[str, float]] = {}
        self._latency: dict[str, float] = {}
        self._counters: dict[str, _Counter] = {}
        self._on_attach: list[AttachCallback] = []
        self._on_detach: list[AttachCallback] = []
        self._types: dict[str, InstanceLimits] = {**KNOWN_TYPES, **self.config.instance_types}

    # ------------------------------------------------------------------ ids

    def _id(self, prefix: str) -> str:
        return f"{prefix}-{self._rng.getrandbits(68):017x}"

    def _mac(self) -> str:
        b = self._rng.getrandbits(40).to_bytes(5, "big")
        return "02:" + ":".join(f"{x:02x}" for x in b)

    @property
    def owner(self) -> str:
        return self.config.account_id

    # ------------------------------------------------------------ setup API

    def add_vpc(self, cidr: str = "10.0.0.0/16", vpc_id: str | None = None, tags: Mapping[str, str] | None = None) -> str:
        """Create a VPC directly (no throttling, not counted)."""
        with self._lock:
            ipaddress.IPv4Network(cidr, strict=True)
            vid = vpc_id or self._id("vpc")
            self.vpcs[vid] = Vpc(vid, cidr, dict(tags or {}))
            return vid

    def add_subnet(
        self,
        az: str | None = None,
        cidr: str = "10.0.0.0/24",
        vpc_id: str | None = None,
        subnet_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """Create a subnet directly. Without ``vpc_id`` a VPC covering it is made or reused.

        Small subnets (down to /28) make exhaustion easy to set up.
        """
        with self._lock:
            net = ipaddress.IPv4Network(cidr, strict=True)
            if vpc_id is None:
                vpc_id = next(
                    (v.id for v in self.vpcs.values() if net.subnet_of(ipaddress.IPv4Network(v.cidr))), None
                ) or self.add_vpc(str(net.supernet(new_prefix=min(net.prefixlen, 16))))
            return self._create_subnet(vpc_id, cidr, az or f"{self.config.region}a", subnet_id, dict(tags or {}))

    def _create_subnet(self, vpc_id: str, cidr: str, az: str, subnet_id: str | None, tags: dict[str, str]) -> str:
        vpc = self.vpcs.get(vpc_id)
        if vpc is None:
            raise not_found("Vpc", vpc_id)
        try:
            net = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as e:
            raise Ec2Error("InvalidParameterValue", f"Value ({cidr}) for parameter cidrBlock is invalid. {e}") from None
        if not net.subnet_of(ipaddress.IPv4Network(vpc.cidr)) or not 16 <= net.prefixlen <= 28:
            raise Ec2Error("InvalidSubnet.Range", f"The CIDR '{cidr}' is invalid.")
        for s in self.subnets.values():
            if s.vpc_id == vpc_id and net.overlaps(s.pool.network):
                raise Ec2Error("InvalidSubnet.Conflict", f"The CIDR '{cidr}' conflicts with another subnet")
        sid = subnet_id or self._id("subnet")
        if sid in self.subnets:
            raise Ec2Error("InvalidParameterValue", f"subnet {sid} already exists")
        self.subnets[sid] = Subnet(sid, vpc_id, az, cidr, SubnetPool(cidr), tags)
        return sid

    def run_instance(
        self,
        instance_type: str,
        subnet_id: str,
        tags: Mapping[str, str] | None = None,
        instance_id: str | None = None,
        private_ip: str | None = None,
    ) -> str:
        """Launch one running instance with its primary ENI at device 0 (no throttling)."""
        with self._lock:
            self._settle()
            return self._run_instance(instance_type, subnet_id, dict(tags or {}), instance_id, private_ip,
                                      self._id("r"), "ami-00000000000000000")

    def _limits(self, instance_type: str) -> InstanceLimits:
        lim = self._types.get(instance_type)
        if lim is None:
            try:
                lim = known(instance_type)
            except KeyError:
                raise Ec2Error(
                    "InvalidParameterValue", f"Invalid value '{instance_type}' for InstanceType."
                ) from None
        return lim

    def _run_instance(
        self,
        instance_type: str,
        subnet_id: str,
        tags: dict[str, str],
        instance_id: str | None,
        private_ip: str | None,
        reservation_id: str,
        image_id: str,
    ) -> str:
        lim = self._limits(instance_type)
        subnet = self._subnet(subnet_id)
        now = self.clock.now()
        iid = instance_id or self._id("i")
        eni = self._new_eni(subnet, private_ip, 0, [], 0, [], f"Primary network interface of {iid}")
        inst = Instance(iid, instance_type, lim, subnet.id, subnet.vpc_id, subnet.az, now, reservation_id,
                        image_id, eni.id, tags)
        self.instances[iid] = inst
        att = Attachment(self._id("eni-attach"), iid, 0, 0, now, now, True, "attached")
        eni.attachment = att
        self._attachments[att.id] = eni.id
        inst.slots[(0, 0)] = eni.id
        return iid

    def terminate_instance(self, instance_id: str) -> None:
        """Terminate: ENIs marked DeleteOnTermination go, the others are detached."""
        with self._lock:
            self._settle()
            self._terminate(instance_id)

    def _terminate(self, instance_id: str) -> str:
        inst = self._instance(instance_id)
        prev = inst.state
        if prev == "terminated":
            return prev
        for eni_id in list(inst.slots.values()):
            eni = self.enis[eni_id]
            att = eni.attachment
            assert att is not None
            self._finish_detach(eni)
            if att.delete_on_termination:
                self._delete_eni(eni)
        inst.state = "terminated"
        return prev

    def set_subnet_exhausted(self, subnet_id: str, exhausted: bool = True) -> None:
        """Fault: make every allocation in the subnet fail as if it were full."""
        with self._lock:
            self._subnet(subnet_id).pool.exhausted = exhausted

    # ------------------------------------------------------------ faults, load

    def set_background_load(self, action: str, calls_per_s: float) -> None:
        """Other callers in the account spend ``action``'s bucket at this rate from now on."""
        with self._lock:
            self._bucket(action)  # settle the bucket under the old rate first
            if calls_per_s > 0:
                self._load[action] = float(calls_per_s)
            else:
                self._load.pop(action, None)

    def fail_next(self, action: str, code: str, n: int = 1, message: str | None = None,
                  status: int | None = None) -> None:
        """The next ``n`` calls of ``action`` fail with ``code`` (taking no token)."""
        with self._lock:
            self._faults.setdefault(action, []).append(
                _Fault(code, n, message or f"Injected fault: {code}", status)
            )

    def fail_rate(self, action: str, code: str, rate: float) -> None:
        """Each call of ``action`` fails with ``code`` with probability ``rate`` (seeded); 0 clears."""
        with self._lock:
            if rate > 0:
                self._fault_rates[action] = (code, rate)
            else:
                self._fault_rates.pop(action, None)

    def add_latency(self, action: str, seconds: float) -> None:
        """Extra latency for ``action`` on top of ``api_latency_s`` (replaces earlier extra)."""
        with self._lock:
            self._latency[action] = seconds

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._fault_rates.clear()
            self._latency.clear()
            self._load.clear()
            for s in self.subnets.values():
                s.pool.exhausted = False

    def latency_for(self, action: str) -> float:
        """Seconds a caller of ``action`` should wait for the answer."""
        return self.config.api_latency_s + self._latency.get(action, 0.0)

    def on_attach(self, callback: AttachCallback) -> None:
        """Call ``callback(instance_id, eni)`` when an attach becomes visible (``eni`` as Describe shows it)."""
        with self._lock:
            self._on_attach.append(callback)

    def on_detach(self, callback: AttachCallback) -> None:
        """Call ``callback(instance_id, eni)`` when a detach completes (also on termination)."""
        with self._lock:
            self._on_detach.append(callback)

    # ------------------------------------------------------------ stats

    def stats(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{"ec2": {Action: {calls, throttled, errors}}}``; calls include throttled and failed ones."""
        with self._lock:
            return {
                "ec2": {
                    a: {"calls": c.calls, "throttled": c.throttled, "errors": c.errors}
                    for a, c in sorted(self._counters.items())
                }
            }

    def reset_stats(self) -> None:
        with self._lock:
            self._counters.clear()

    def tokens(self, action: str, unfiltered: bool = False) -> float:
        """Tokens in ``action``'s bucket now (for tests and figures)."""
        with self._lock:
            return self._bucket(action + UNFILTERED_SUFFIX if unfiltered else action).tokens

    # ------------------------------------------------------------ ways in

    def client(self) -> FastEc2Client:
        """A fast boto3-shaped client (satisfies :class:`warmpool.ports.Ec2Api`)."""
        from .client import FastEc2Client

        return FastEc2Client(self)

    def boto3_client(self, **kwargs: Any) -> Any:
        """A real boto3 ``ec2`` client whose calls are served in-process by this emulator."""
        from .hooks import boto3_client

        return boto3_client(self, **kwargs)

    def call(self, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`dispatch`, raising ``botocore.exceptions.ClientError`` on errors."""
        try:
            return self.dispatch(action, params)
        except Ec2Error as e:
            raise e.client_error(action) from None

    @staticmethod
    def actions() -> list[str]:
        return sorted(_HANDLERS)

    def dispatch(self, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Serve one request: count it, throttle it, inject faults, apply the rules.

        ``params`` are boto3's keyword arguments; the answer is the dict boto3
        would return (``ResponseMetadata`` included). Raises :class:`Ec2Error`.
        """
        handler = _HANDLERS.get(action)
        with self._lock:
            counter = self._counters.get(action)
            if counter is None:
                counter = self._counters[action] = _Counter()
            counter.calls += 1
            if handler is None:
                counter.errors += 1
                raise Ec2Error("InvalidAction", f"The action {action} is not valid for this web service.")
            try:
                self._settle()
                self._inject(action)
                if self.config.throttling and not self._take(self._bucket_key(action, params)):
                    raise Ec2Error("RequestLimitExceeded", "Request limit exceeded.")
                if params.get("DryRun"):
                    raise Ec2Error(
                        "DryRunOperation", "Request would have succeeded, but DryRun flag is set."
                    )
                out = handler(self, dict(params))
            except Ec2Error as e:
                if e.code == "RequestLimitExceeded":
                    counter.throttled += 1
                else:
                    counter.errors += 1
                raise
            out["ResponseMetadata"] = metadata()
            return out

    def _inject(self, action: str) -> None:
        queue = self._faults.get(action)
        if queue:
            f = queue[0]
            f.remaining -= 1
            if f.remaining <= 0:
                queue.pop(0)
            raise Ec2Error(f.code, f.message, f.status)
        rate = self._fault_rates.get(action)
        if rate is not None and self._fault_rng.random() < rate[1]:
            raise Ec2Error(rate[0], f"Injected fault: {rate[0]}")

    # ------------------------------------------------------------ throttling

    @staticmethod
    def _bucket_key(action: str, p: Mapping[str, Any]) -> str:
        if action in ("DescribeInstances", "DescribeNetworkInterfaces") and not (
            p.get("Filters") or p.get("MaxResults") or p.get("NextToken")
            or p.get("InstanceIds") or p.get("NetworkInterfaceIds")
        ):
            return action + UNFILTERED_SUFFIX
        return action

    def _spec(self, key: str) -> BucketSpec:
        if key.endswith(UNFILTERED_SUFFIX):
            return self.config.buckets.get(key, UNFILTERED_DESCRIBE)
        return spec_for(key, self.config.buckets)

    def _bucket(self, key: str) -> BucketState:
        """The bucket as of now: refilled, and drained by background load."""
        now = self.clock.now()
        spec = self._spec(key)
        st = self._buckets.get(key)
        if st is None:
            st = full(spec, now)
        load = self._load.get(key, 0.0)
        if load > 0.0 and now > st.updated_at:
            # Net flow is linear in time, so clamping once at the end is exact.
            tokens = st.tokens + (spec.refill_per_s - load) * (now - st.updated_at)
            st = BucketState(tokens=min(spec.capacity, max(0.0, tokens)), updated_at=now)
        self._buckets[key] = st
        return st

    def _take(self, key: str) -> bool:
        st = self._bucket(key)
        ok, st = try_take(st, self._spec(key), 1, self.clock.now())
        self._buckets[key] = st
        return ok

    # ------------------------------------------------------------ time

    def _schedule(self, at: float, kind: str, eni_id: str, att_id: str) -> None:
        self._seq += 1
        heapq.heappush(self._pending, (at, self._seq, kind, eni_id, att_id))

    def next_event_at(self) -> float | None:
        """When the next delayed attach/detach completes (for an event loop), or None."""
        with self._lock:
            return self._pending[0][0] if self._pending else None

    def settle(self) -> None:
        """Apply delayed attaches/detaches that are due (every call does this first)."""
        with self._lock:
            self._settle()

    def _settle(self) -> None:
        if not self._pending:
            return
        now = self.clock.now()
        while self._pending and self._pending[0][0] <= now:
            _, _, kind, eni_id, att_id = heapq.heappop(self._pending)
            eni = self.enis.get(eni_id)
            if eni is None or eni.attachment is None or eni.attachment.id != att_id:
                continue
            if kind == "attach" and eni.attachment.status == "attaching":
                eni.attachment.status = "attached"
                self._fire_attach(eni)
            elif kind == "detach" and eni.attachment.status == "detaching":
                self._finish_detach(eni)

    def _fire_attach(self, eni: Eni) -> None:
        if not self._on_attach or eni.attachment is None:
            return
        iid = eni.attachment.instance_id
        view = eni.render(self.owner)
        for cb in self._on_attach:
            cb(iid, view)

    # ------------------------------------------------------------ lookups

    def _subnet(self, sid: str) -> Subnet:
        s = self.subnets.get(sid)
        if s is None:
            raise not_found("Subnet", sid)
        return s

    def _instance(self, iid: str) -> Instance:
        i = self.instances.get(iid)
        if i is None:
            raise not_found("Instance", iid)
        return i

    def _eni(self, eid: str) -> Eni:
        e = self.enis.get(eid)
        if e is None:
            raise not_found("NetworkInterface", eid)
        return e

    def _eni_limit(self, eni: Eni) -> tuple[int, InstanceLimits | None]:
        if eni.attachment is None:
            return MAX_IPV4_PER_ENI, None
        lim = self.instances[eni.attachment.instance_id].limits
        return lim.ipv4_per_eni, lim

    # ------------------------------------------------------------ ENI mechanics

    def _new_eni(
        self,
        subnet: Subnet,
        primary: str | None,
        n_secondary: int,
        secondary: list[str],
        n_prefixes: int,
        prefixes: list[str],
        description: str,
    ) -> Eni:
        pool = subnet.pool
        taken: list[str] = []
        taken_prefixes: list[str] = []
        try:
            for ip in ([primary] if primary else []) + secondary:
                self._take_specific_ip(subnet, ip)
                taken.append(ip)
            n_any = (0 if primary else 1) + n_secondary
            got = pool.take_ips(n_any)
            if got is None:
                raise _insufficient_addresses()
            taken.extend(got)
            if primary is None:
                primary = got[0]
                got = got[1:]
            for pfx in prefixes:
                self._take_specific_prefix(subnet, pfx)
                taken_prefixes.append(pfx)
            gotp = pool.take_prefixes(n_prefixes)
            if gotp is None:
                raise _insufficient_cidr()
            taken_prefixes.extend(gotp)
        except Ec2Error:
            for ip in taken:
                pool.release_ip(ip)
            for pfx in taken_prefixes:
                pool.release_prefix(pfx)
            raise
        eni = Eni(
            self._id("eni"), subnet.id, subnet.vpc_id, subnet.az, self._mac(), primary, self.clock.now(),
            secondary=[ip for ip in taken if ip != primary], prefixes=taken_prefixes, description=description,
        )
        self.enis[eni.id] = eni
        for a in taken:
            self._ip_owner[a] = eni.id
        for pfx in taken_prefixes:
            self._ip_owner[pfx] = eni.id
        return eni

    def _take_specific_ip(self, subnet: Subnet, ip: str) -> None:
        pool = subnet.pool
        if pool.offset(ip) is None:
            raise Ec2Error("InvalidParameterValue", f"Address {ip} does not fall within the subnet's address range")
        if pool.exhausted:
            raise _insufficient_addresses()
        if not pool.take_ip(ip):
            raise Ec2Error("InvalidIPAddress.InUse", f"The specified address {ip} is already in use.")

    def _take_specific_prefix(self, subnet: Subnet, prefix: str) -> None:
        try:
            net = ipaddress.IPv4Network(prefix, strict=True)
        except ValueError:
            raise Ec2Error("InvalidParameterValue", f"Invalid IPv4 prefix {prefix}") from None
        if net.prefixlen != 28 or not net.subnet_of(subnet.pool.network):
            raise Ec2Error("InvalidParameterValue", f"Prefix {prefix} is not a /28 of subnet {subnet.id}")
        if not subnet.pool.take_prefix(prefix):
            raise _insufficient_cidr() if subnet.pool.exhausted else Ec2Error(
                "InvalidParameterValue", f"Prefix {prefix} overlaps addresses in use"
            )

    def _delete_eni(self, eni: Eni) -> None:
        pool = self.subnets[eni.subnet_id].pool
        for ip in [eni.primary_ip, *eni.secondary]:
            pool.release_ip(ip)
            self._ip_owner.pop(ip, None)
        for pfx in eni.prefixes:
            pool.release_prefix(pfx)
            self._ip_owner.pop(pfx, None)
        del self.enis[eni.id]

    def _finish_detach(self, eni: Eni) -> None:
        att = eni.attachment
        if att is None:
            return
        inst = self.instances.get(att.instance_id)
        if inst is not None:
            inst.slots.pop((att.card, att.device_index), None)
        self._attachments.pop(att.id, None)
        eni.attachment = None
        if self._on_detach:
            view = eni.render(self.owner)
            for cb in self._on_detach:
                cb(att.instance_id, view)

    # ------------------------------------------------------------ IMDS view

    def instance_metadata(self, instance_id: str) -> dict[str, Any]:
        """The IMDS ``meta-data`` tree of an instance now: dicts are directories,
        strings are leaves. ENIs appear only once their attach is visible."""
        with self._lock:
            self._settle()
            inst = self._instance(instance_id)
            primary = self.enis.get(inst.primary_eni, None)
            macs: dict[str, Any] = {}
            for (card, dev), eid in sorted(inst.slots.items()):
                eni = self.enis[eid]
                att = eni.attachment
                if att is None or att.status == "attaching":
                    continue
                subnet = self.subnets[eni.subnet_id]
                d: dict[str, Any] = {
                    "device-number": str(dev),
                    "network-card": str(card),
                    "interface-id": eni.id,
                    "local-ipv4s": "\n".join([eni.primary_ip, *eni.secondary]),
                    "mac": eni.mac,
                    "owner-id": self.owner,
                    "security-group-ids": "\n".join(eni.groups),
                    "subnet-id": eni.subnet_id,
                    "subnet-ipv4-cidr-block": subnet.cidr,
                    "vpc-id": eni.vpc_id,
                    "vpc-ipv4-cidr-block": self.vpcs[eni.vpc_id].cidr,
                    "vpc-ipv4-cidr-blocks": self.vpcs[eni.vpc_id].cidr,
                }
                if eni.prefixes:
                    d["ipv4-prefix"] = "\n".join(eni.prefixes)
                macs[eni.mac] = d
            md: dict[str, Any] = {
                "ami-id": inst.image_id,
                "instance-id": inst.id,
                "instance-type": inst.instance_type,
                "local-ipv4": primary.primary_ip if primary else "",
                "mac": primary.mac if primary else "",
                "placement": {"availability-zone": inst.az, "region": self.config.region},
                "network": {"interfaces": {"macs": macs}},
            }
            return md

    # ------------------------------------------------------------ describe helpers

    def _page(
        self, items: list[Any], p: Mapping[str, Any], lo: int = 5, hi: int = 1000, ids_key: str | None = None
    ) -> tuple[list[Any], str | None]:
        max_results = p.get("MaxResults")
        token = p.get("NextToken")
        if max_results is not None and ids_key and p.get(ids_key):
            raise Ec2Error(
                "InvalidParameterCombination",
                f"The parameter {ids_key} cannot be used with the parameter maxResults",
            )
        start = 0
        if token:
            try:
                start = int(json.loads(base64.urlsafe_b64decode(str(token).encode()))["o"])
            except (ValueError, KeyError, TypeError):
                raise Ec2Error("InvalidParameterValue", f"Invalid value '{token}' for nextToken") from None
        if max_results is None:
            return items[start:], None
        n = int(max_results)
        if not lo <= n <= hi:
            raise Ec2Error(
                "InvalidParameterValue",
                f"Value ( {n} ) for parameter maxResults is invalid. Expecting a value between {lo} and {hi}.",
            )
        end = start + n
        nxt = None
        if end < len(items):
            nxt = base64.urlsafe_b64encode(json.dumps({"o": end}).encode()).decode()
        return items[start:end], nxt


def _insufficient_addresses() -> Ec2Error:
    return Ec2Error(
        "InsufficientFreeAddressesInSubnet",
        "The specified subnet does not have enough free addresses to satisfy the request.",
    )


def _insufficient_cidr() -> Ec2Error:
    return Ec2Error(
        "InsufficientCidrBlocks",
        "The specified subnet does not have enough free cidr blocks to satisfy the request.",
    )


# ---------------------------------------------------------------- filters

Getter = Callable[[Any], Iterable[str]]


def _filter_values(filters: list[Mapping[str, Any]] | None) -> list[tuple[str, list[str]]]:
    out = []
    for f in filters or []:
        out.append((str(f.get("Name", "")), [str(v) for v in f.get("Values") or []]))
    return out


def _matches(obj: Any, filters: list[tuple[str, list[str]]], getters: Mapping[str, Getter],
             tags: Callable[[Any], dict[str, str]]) -> bool:
    for name, values in filters:
        if name.startswith("tag:"):
            v = tags(obj).get(name[4:])
            have: Iterable[str] = [] if v is None else [v]
        elif name == "tag-key":
            have = tags(obj).keys()
        else:
            g = getters.get(name)
            if g is None:
                raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
            have = g(obj)
        if not any(_value_match(h, values) for h in have):
            return False
    return True


def _value_match(have: str, wanted: list[str]) -> bool:
    return any(w == have or (("*" in w or "?" in w) and fnmatch.fnmatchcase(have, w)) for w in wanted)


def _check_filters(filters: list[tuple[str, list[str]]], getters: Mapping[str, Getter]) -> None:
    for name, _ in filters:
        if not (name.startswith("tag:") or name == "tag-key" or name in getters):
            raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")



ENI_FILTERS: dict[str, Getter] = {
    "network-interface-id": lambda e: [e.id],
    "attachment.instance-id": lambda e: [e.attachment.instance_id] if e.attachment else [],
    "attachment.attachment-id": lambda e: [e.attachment.id] if e.attachment else [],
    "attachment.status": lambda e: [e.attachment.status] if e.attachment else [],
    "attachment.device-index": lambda e: [str(e.attachment.device_index)] if e.attachment else [],
    "attachment.delete-on-termination": lambda e: (
        [str(e.attachment.delete_on_termination).lower()] if e.attachment else []
    ),
    "status": lambda e: [e.status],
    "subnet-id": lambda e: [e.subnet_id],
    "availability-zone": lambda e: [e.az],
    "vpc-id": lambda e: [e.vpc_id],
    "mac-address": lambda e: [e.mac],
    "description": lambda e: [e.description],
    "interface-type": lambda e: [e.interface_type],
    "private-ip-address": lambda e: [e.primary_ip, *e.secondary],
    "addresses.private-ip-address": lambda e: [e.primary_ip, *e.secondary],
    "ipv4-prefix": lambda e: list(e.prefixes),
    "requester-managed": lambda e: ["false"],
    "owner-id": lambda e: [],  # filled per emulator (account id) below
    "group-id": lambda e: list(e.groups),
}

INSTANCE_FILTERS: dict[str, Getter] = {
    "instance-id": lambda i: [i.id],
    "instance-state-name": lambda i: [i.state],
    "instance-state-code": lambda i: [str(STATE_CODES[i.state])],
    "instance-type": lambda i: [i.instance_type],
    "subnet-id": lambda i: [i.subnet_id],
    "vpc-id": lambda i: [i.vpc_id],
    "availability-zone": lambda i: [i.az],
    "placement-availability-zone": lambda i: [i.az],
    "reservation-id": lambda i: [i.reservation_id],
    "image-id": lambda i: [i.image_id],
}

SUBNET_FILTERS: dict[str, Getter] = {
    "subnet-id": lambda s: [s.id],
    "vpc-id": lambda s: [s.vpc_id],
    "availability-zone": lambda s: [s.az],
    "cidr-block": lambda s: [s.cidr],
    "cidr": lambda s: [s.cidr],
    "state": lambda s: ["available"],
}

VPC_FILTERS: dict[str, Getter] = {
    "vpc-id": lambda v: [v.id],
    "cidr": lambda v: [v.cidr],
    "cidr-block-association.cidr-block": lambda v: [v.cidr],
    "state": lambda v: ["available"],
    "is-default": lambda v: ["false"],
}


def _tags(o: Any) -> dict[str, str]:
    tags: dict[str, str] = o.tags
    return tags


# ---------------------------------------------------------------- handlers


@_action("DescribeNetworkInterfaces")
def _describe_enis(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    filters = _filter_values(p.get("Filters"))
    getters = {**ENI_FILTERS, "owner-id": lambda e: [emu.owner]}
    _check_filters(filters, getters)
    ids = _ids(p, "NetworkInterfaceIds")
    cands: Iterable[Eni]
    if ids:
        missing = [i for i in ids if i not in emu.enis]
        if missing:
            raise not_found("NetworkInterface", missing[0])
        cands = [emu.enis[i] for i in dict.fromkeys(ids)]
    else:
        by_inst = next((v for n, v in filters if n == "attachment.instance-id"), None)
        if by_inst is not None:
            found: list[Eni] = []
            for iid in by_inst:
                inst = emu.instances.get(iid)
                if inst is not None:
                    found.extend(emu.enis[e] for _, e in sorted(inst.slots.items()))
            cands = found
        else:
            cands = emu.enis.values()
    items = [e for e in cands if not filters or _matches(e, filters, getters, _tags)]
    page, nxt = emu._page(items, p, ids_key="NetworkInterfaceIds")
    out: dict[str, Any] = {"NetworkInterfaces": [e.render(emu.owner) for e in page]}
    if nxt:
        out["NextToken"] = nxt
    return out


def _render_instance(emu: Ec2Emulator, inst: Instance) -> dict[str, Any]:
    primary = emu.enis.get(inst.primary_eni)
    nics = [emu.enis[e].render_for_instance(emu.owner) for _, e in sorted(inst.slots.items())]
    d: dict[str, Any] = {
        "AmiLaunchIndex": 0,
        "ImageId": inst.image_id,
        "InstanceId": inst.id,
        "InstanceType": inst.instance_type,
        "LaunchTime": ts(inst.launch_time),
        "Placement": {"AvailabilityZone": inst.az, "GroupName": "", "Tenancy": "default"},
        "State": {"Code": STATE_CODES[inst.state], "Name": inst.state},
        "Architecture": "x86_64",
        "Hypervisor": "xen",
        "VirtualizationType": "hvm",
        "RootDeviceType": "ebs",
        "NetworkInterfaces": nics,
        "Tags": tag_list(inst.tags),
    }
    if inst.state != "terminated":
        d["SubnetId"] = inst.subnet_id
        d["VpcId"] = inst.vpc_id
        if primary is not None:
            d["PrivateIpAddress"] = primary.primary_ip
            d["PrivateDnsName"] = "ip-" + primary.primary_ip.replace(".", "-") + ".ec2.internal"
    return d


def _reservation(emu: Ec2Emulator, rid: str, insts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ReservationId": rid, "OwnerId": emu.owner, "Groups": [], "Instances": insts}


@_action("DescribeInstances")
def _describe_instances(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    filters = _filter_values(p.get("Filters"))
    _check_filters(filters, INSTANCE_FILTERS)
    ids = _ids(p, "InstanceIds")
    cands: Iterable[Instance]
    if ids:
        missing = [i for i in ids if i not in emu.instances]
        if missing:
            raise not_found("Instance", missing[0])
        cands = [emu.instances[i] for i in dict.fromkeys(ids)]
    else:
        by_id = next((v for n, v in filters if n == "instance-id"), None)
        cands = [emu.instances[i] for i in by_id if i in emu.instances] if by_id else emu.instances.values()
    items = [i for i in cands if not filters or _matches(i, filters, INSTANCE_FILTERS, _tags)]
    page, nxt = emu._page(items, p, ids_key="InstanceIds")
    # One reservation per instance launch group, in order of first appearance.
    groups: dict[str, list[dict[str, Any]]] = {}
    for inst in page:
        groups.setdefault(inst.reservation_id, []).append(_render_instance(emu, inst))
    out: dict[str, Any] = {"Reservations": [_reservation(emu, r, v) for r, v in groups.items()]}
    if nxt:
        out["NextToken"] = nxt
    return out


def _describe_store(
    emu: Ec2Emulator,
    p: dict[str, Any],
    store: dict[str, Any],
    spec: Any,
    ids_key: str,
    kind: str,
    result_key: str,
    render: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """Describe* over one id-keyed store: ids (each must exist), filters, pages."""
    filters = _filter_values(p.get("Filters"))
    _check_filters(filters, spec)
    ids = _ids(p, ids_key)
    for i in ids:
        if i not in store:
            raise not_found(kind, i)
    cands = [store[i] for i in dict.fromkeys(ids)] if ids else list(store.values())
    items = [x for x in cands if _matches(x, filters, spec, _tags)]
    page, nxt = emu._page(items, p, ids_key=ids_key)
    out: dict[str, Any] = {result_key: [render(x) for x in page]}
    if nxt:
        out["NextToken"] = nxt
    return out


@_action("DescribeSubnets")
def _describe_subnets(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    return _describe_store(emu, p, emu.subnets, SUBNET_FILTERS, "SubnetIds", "Subnet", "Subnets",
                           lambda s: s.render(emu.owner, emu.config.region))


@_action("DescribeVpcs")
def _describe_vpcs(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    return _describe_store(emu, p, emu.vpcs, VPC_FILTERS, "VpcIds", "Vpc", "Vpcs", lambda v: v.render(emu.owner))


def _render_type(lim: InstanceLimits) -> dict[str, Any]:
    per_card = lim.max_enis // lim.network_cards
    return {
        "InstanceType": lim.instance_type,
        "CurrentGeneration": True,
        "Hypervisor": "nitro" if lim.prefix_capable else "xen",
        "NetworkInfo": {
            "MaximumNetworkInterfaces": lim.max_enis,
            "MaximumNetworkCards": lim.network_cards,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [
                {"NetworkCardIndex": i, "MaximumNetworkInterfaces": per_card} for i in range(lim.network_cards)
            ],
            "Ipv4AddressesPerInterface": lim.ipv4_per_eni,
            "Ipv6AddressesPerInterface": lim.ipv4_per_eni,
            "Ipv6Supported": True,
            "EnaSupport": "required" if lim.prefix_capable else "unsupported",
        },
    }


@_action("DescribeInstanceTypes")
def _describe_instance_types(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    filters = _filter_values(p.get("Filters"))
    getters: dict[str, Getter] = {
        "instance-type": lambda t: [t.instance_type],
        "hypervisor": lambda t: ["nitro" if t.prefix_capable else "xen"],
    }
    _check_filters(filters, getters)
    names = _ids(p, "InstanceTypes")
    for n in names:
        if n not in emu._types:
            raise Ec2Error("InvalidInstanceType", f"The following supplied instance types do not exist: [{n}]")
    cands = [emu._types[n] for n in dict.fromkeys(names)] if names else list(emu._types.values())
    items = [t for t in cands if _matches(t, filters, getters, lambda _t: {})]
    page, nxt = emu._page(items, p, lo=5, hi=100)
    out: dict[str, Any] = {"InstanceTypes": [_render_type(t) for t in page]}
    if nxt:
        out["NextToken"] = nxt
    return out


@_action("DescribeAvailabilityZones")
def _describe_azs(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    region = emu.config.region
    azs = sorted({f"{region}{c}" for c in "abc"} | {s.az for s in emu.subnets.values()})
    wanted = set(_ids(p, "ZoneNames"))
    return {
        "AvailabilityZones": [
            {"ZoneName": z, "ZoneId": f"use1-az{i + 1}", "State": "available", "RegionName": region,
             "ZoneType": "availability-zone", "OptInStatus": "opt-in-not-required", "Messages": []}
            for i, z in enumerate(azs)
            if not wanted or z in wanted
        ]
    }


def _fingerprint(p: Mapping[str, Any]) -> str:
    body = {k: v for k, v in p.items() if k not in ("ClientToken", "DryRun")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _count(p: Mapping[str, Any], key: str) -> int:
    v = p.get(key)
    if v is None:
        return 0
    n = int(v)
    if n < 0:
        raise Ec2Error("InvalidParameterValue", f"Value ({n}) for parameter {key} is invalid.")
    return n


@_action("CreateNetworkInterface")
def _create_eni(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    token = p.get("ClientToken")
    fp = ""
    if token:
        if len(token) > 64:
            raise Ec2Error("InvalidParameterValue", "ClientToken must be at most 64 ASCII characters")
        fp = _fingerprint(p)
        seen = emu._tokens.get(token)
        if seen is not None:
            if seen[0] != fp:
                raise Ec2Error(
                    "IdempotentParameterMismatch",
                    f"The client token '{token}' has already been used with different parameters.",
                )
            return {"NetworkInterface": _copy_eni_view(seen[1]["NetworkInterface"]), "ClientToken": token}
    subnet = emu._subnet(_req(p, "SubnetId"))
    primary = p.get("PrivateIpAddress")
    secondary: list[str] = []
    for entry in p.get("PrivateIpAddresses") or []:
        ip = entry["PrivateIpAddress"]
        if entry.get("Primary"):
            if primary and primary != ip:
                raise Ec2Error("InvalidParameterCombination", "Two primary private IP addresses specified")
            primary = ip
        else:
            secondary.append(ip)
    n_sec = _count(p, "SecondaryPrivateIpAddressCount")
    prefixes = [x["Ipv4Prefix"] for x in p.get("Ipv4Prefixes") or []]
    n_pref = _count(p, "Ipv4PrefixCount")
    if n_sec and secondary:
        raise Ec2Error(
            "InvalidParameterCombination",
            "SecondaryPrivateIpAddressCount cannot be used with secondary PrivateIpAddresses",
        )
    if n_pref and prefixes:
        raise Ec2Error("InvalidParameterCombination", "Ipv4PrefixCount cannot be used with Ipv4Prefixes")
    slots = 1 + n_sec + len(secondary) + n_pref + len(prefixes)
    if slots > MAX_IPV4_PER_ENI:
        raise Ec2Error("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")
    eni = emu._new_eni(subnet, primary, n_sec, secondary, n_pref, prefixes, str(p.get("Description") or ""))
    eni.groups = list(p.get("Groups") or [])
    eni.tags = _tags_for(p, "network-interface")
    if p.get("InterfaceType"):
        eni.interface_type = str(p["InterfaceType"])
    out: dict[str, Any] = {"NetworkInterface": eni.render(emu.owner)}
    if token:
        out["ClientToken"] = token
        emu._tokens[token] = (fp, {"NetworkInterface": _copy_eni_view(out["NetworkInterface"]),
                                   "ClientToken": token})
    return out


def _copy_eni_view(view: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a rendered ENI (datetimes kept)."""
    out: dict[str, Any] = {}
    for k, v in view.items():
        if isinstance(v, dict):
            out[k] = dict(v)
        elif isinstance(v, list):
            out[k] = [dict(x) if isinstance(x, dict) else x for x in v]
        else:
            out[k] = v
    return out


@_action("AssignPrivateIpAddresses")
def _assign(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(_req(p, "NetworkInterfaceId"))
    ips = list(p.get("PrivateIpAddresses") or [])
    n_ips = _count(p, "SecondaryPrivateIpAddressCount")
    prefixes = [str(x) for x in p.get("Ipv4Prefixes") or []]
    n_pref = _count(p, "Ipv4PrefixCount")
    if ips and n_ips:
        raise Ec2Error(
            "InvalidParameterCombination",
            "PrivateIpAddresses and SecondaryPrivateIpAddressCount cannot be used together",
        )
    if prefixes and n_pref:
        raise Ec2Error("InvalidParameterCombination", "Ipv4Prefixes and Ipv4PrefixCount cannot be used together")
    if not (ips or n_ips or prefixes or n_pref):
        raise Ec2Error(
            "MissingParameter",
            "Either PrivateIpAddresses, SecondaryPrivateIpAddressCount, Ipv4Prefixes or Ipv4PrefixCount "
            "must be specified",
        )
    limit, lim = emu._eni_limit(eni)
    if (prefixes or n_pref) and lim is not None and not lim.prefix_capable:
        raise Ec2Error(
            "InvalidParameterValue",
            f"Prefix delegation is not supported for instance type {lim.instance_type}",
        )
    subnet = emu.subnets[eni.subnet_id]
    reassigned = [ip for ip in ips if emu._ip_owner.get(ip) not in (None, eni.id)]
    if reassigned and not p.get("AllowReassignment"):
        raise Ec2Error("InvalidIPAddress.InUse", f"The specified address {reassigned[0]} is already in use.")
    ips = [ip for ip in ips if emu._ip_owner.get(ip) != eni.id]
    if eni.slots_used + len(ips) + n_ips + len(prefixes) + n_pref > limit:
        raise Ec2Error("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")
    pool = subnet.pool
    new_ips: list[str] = []
    new_prefixes: list[str] = []
    try:
        for ip in ips:
            owner_id = emu._ip_owner.get(ip)
            if owner_id is not None:  # AllowReassignment: move it here
                other = emu.enis[owner_id]
                if ip == other.primary_ip:
                    raise Ec2Error("InvalidIPAddress.InUse", f"The specified address {ip} is a primary address.")
                other.secondary.remove(ip)
                pool.release_ip(ip)
            emu._take_specific_ip(subnet, ip)
            new_ips.append(ip)
        got = pool.take_ips(n_ips)
        if got is None:
            raise _insufficient_addresses()
        new_ips.extend(got)
        for pfx in prefixes:
            emu._take_specific_prefix(subnet, pfx)
            new_prefixes.append(pfx)
        gotp = pool.take_prefixes(n_pref)
        if gotp is None:
            raise _insufficient_cidr()
        new_prefixes.extend(gotp)
    except Ec2Error:
        for ip in new_ips:
            pool.release_ip(ip)
        for pfx in new_prefixes:
            pool.release_prefix(pfx)
        raise
    eni.secondary.extend(new_ips)
    eni.prefixes.extend(new_prefixes)
    for a in (*new_ips, *new_prefixes):
        emu._ip_owner[a] = eni.id
    return {
        "NetworkInterfaceId": eni.id,
        "AssignedPrivateIpAddresses": [{"PrivateIpAddress": ip} for ip in new_ips],
        "AssignedIpv4Prefixes": [{"Ipv4Prefix": x} for x in new_prefixes],
    }


@_action("UnassignPrivateIpAddresses")
def _unassign(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(_req(p, "NetworkInterfaceId"))
    ips = list(dict.fromkeys(p.get("PrivateIpAddresses") or []))
    prefixes = list(dict.fromkeys(p.get("Ipv4Prefixes") or []))
    if not (ips or prefixes):
        raise Ec2Error("MissingParameter", "Either PrivateIpAddresses or Ipv4Prefixes must be specified")
    if ips and prefixes:
        raise Ec2Error(
            "InvalidParameterCombination", "PrivateIpAddresses and Ipv4Prefixes cannot be used together"
        )
    have = set(eni.secondary)
    bad = [ip for ip in ips if ip not in have]
    if bad:
        raise Ec2Error(
            "InvalidParameterValue", f"Some of the specified addresses are not assigned to interface {eni.id}"
        )
    havep = set(eni.prefixes)
    if any(x not in havep for x in prefixes):
        raise Ec2Error("InvalidParameterValue", f"Some of the specified prefixes are not assigned to {eni.id}")
    pool = emu.subnets[eni.subnet_id].pool
    drop = set(ips)
    eni.secondary = [ip for ip in eni.secondary if ip not in drop]
    for ip in ips:
        pool.release_ip(ip)
        emu._ip_owner.pop(ip, None)
    dropp = set(prefixes)
    eni.prefixes = [x for x in eni.prefixes if x not in dropp]
    for x in prefixes:
        pool.release_prefix(x)
        emu._ip_owner.pop(x, None)
    return {}


@_action("AttachNetworkInterface")
def _attach(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(_req(p, "NetworkInterfaceId"))
    inst = emu._instance(_req(p, "InstanceId"))
    if p.get("DeviceIndex") is None:
        raise Ec2Error("MissingParameter", "The request must contain the parameter DeviceIndex")
    dev = int(p["DeviceIndex"])
    card = int(p.get("NetworkCardIndex") or 0)
    if inst.state != "running":
        raise Ec2Error("IncorrectInstanceState", f"The instance '{inst.id}' is not in a valid state for this operation.")
    if eni.attachment is not None:
        raise Ec2Error("InvalidNetworkInterface.InUse", f"Interface: [{eni.id}] in use.")
    if eni.az != inst.az or eni.vpc_id != inst.vpc_id:
        raise Ec2Error(
            "InvalidParameterCombination",
            "You may not attach a network interface to an instance if they are not in the same availability zone",
        )
    lim = inst.limits
    if not 0 <= card < lim.network_cards:
        raise Ec2Error("InvalidParameterValue", f"Invalid value '{card}' for networkCardIndex.")
    if dev < 0:
        raise Ec2Error("InvalidParameterValue", f"Invalid value '{dev}' for deviceIndex.")
    if len(inst.slots) >= lim.max_enis:
        raise Ec2Error(
            "AttachmentLimitExceeded",
            f"Interface count {len(inst.slots) + 1} exceeds the limit for {inst.instance_type}",
        )
    if (card, dev) in inst.slots:
        raise Ec2Error(
            "InvalidParameterValue",
            f"Instance '{inst.id}' already has an interface attached at device index '{dev}'.",
        )
    if eni.slots_used > lim.ipv4_per_eni:
        raise Ec2Error(
            "PrivateIpAddressLimitExceeded",
            f"Interface {eni.id} has more addresses than {inst.instance_type} allows per interface.",
        )
    now = emu.clock.now()
    delay = emu.config.attach_delay_s
    att = Attachment(emu._id("eni-attach"), inst.id, dev, card, now, now + delay, False,
                     "attached" if delay <= 0 else "attaching")
    eni.attachment = att
    inst.slots[(card, dev)] = eni.id
    emu._attachments[att.id] = eni.id
    if delay > 0:
        emu._schedule(now + delay, "attach", eni.id, att.id)
    else:
        emu._fire_attach(eni)
    return {"AttachmentId": att.id, "NetworkCardIndex": card}


def _eni_by_attachment(emu: Ec2Emulator, att_id: str) -> Eni:
    eid = emu._attachments.get(att_id)
    if eid is None:
        raise not_found("Attachment", att_id)
    return emu.enis[eid]


@_action("DetachNetworkInterface")
def _detach(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    eni = _eni_by_attachment(emu, _req(p, "AttachmentId"))
    att = eni.attachment
    assert att is not None
    if att.device_index == 0 and att.card == 0:
        raise Ec2Error(
            "OperationNotPermitted",
            "The network interface at device index 0 and networkCard index 0 cannot be detached.",
        )
    if att.status == "detaching":
        return {}
    delay = emu.config.detach_delay_s
    if delay > 0:
        att.status = "detaching"
        emu._schedule(emu.clock.now() + delay, "detach", eni.id, att.id)
    else:
        emu._finish_detach(eni)
    return {}


@_action("DeleteNetworkInterface")
def _delete(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(_req(p, "NetworkInterfaceId"))
    if eni.attachment is not None:
        raise Ec2Error("InvalidNetworkInterface.InUse", f"The network interface '{eni.id}' is currently in use.")
    emu._delete_eni(eni)
    return {}


@_action("ModifyNetworkInterfaceAttribute")
def _modify(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(_req(p, "NetworkInterfaceId"))
    att = p.get("Attachment")
    if att:
        aid = _req(att, "AttachmentId")
        if eni.attachment is None or eni.attachment.id != aid:
            raise not_found("Attachment", aid)
        if att.get("DeleteOnTermination") is not None:
            eni.attachment.delete_on_termination = bool(att["DeleteOnTermination"])
    if p.get("Description") is not None:
        eni.description = str(p["Description"].get("Value", ""))
    if p.get("SourceDestCheck") is not None:
        eni.source_dest_check = bool(p["SourceDestCheck"].get("Value"))
    if p.get("Groups"):
        eni.groups = list(p["Groups"])
    return {}


def _taggable(emu: Ec2Emulator, rid: str) -> Any:
    for prefix, table, kind in (
        ("eni-", emu.enis, "NetworkInterface"),
        ("i-", emu.instances, "Instance"),
        ("subnet-", emu.subnets, "Subnet"),
        ("vpc-", emu.vpcs, "Vpc"),
    ):
        if rid.startswith(prefix) and not (prefix == "eni-" and rid.startswith("eni-attach-")):
            obj = table.get(rid)
            if obj is None:
                raise not_found(kind, rid)
            return obj
    if rid in emu.subnets:
        return emu.subnets[rid]
    raise Ec2Error("InvalidID", f"The ID '{rid}' is not valid")


@_action("CreateTags")
def _create_tags(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    objs = [_taggable(emu, r) for r in _ids(p, "Resources")]
    if not objs:
        raise Ec2Error("MissingParameter", "The request must contain the parameter resourceIdSet")
    tags = [(str(t["Key"]), str(t.get("Value", ""))) for t in _req(p, "Tags")]
    for o in objs:
        for k, v in tags:
            o.tags[k] = v
    return {}


@_action("DeleteTags")
def _delete_tags(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    objs = [_taggable(emu, r) for r in _ids(p, "Resources")]
    for o in objs:
        for t in p.get("Tags") or [{"Key": k} for k in list(o.tags)]:
            k = str(t["Key"])
            if k in o.tags and ("Value" not in t or t["Value"] is None or o.tags[k] == t["Value"]):
                del o.tags[k]
    return {}


@_action("RunInstances")
def _run_instances(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    token = p.get("ClientToken")
    if token and token in emu._run_tokens:
        fp, resp = emu._run_tokens[token]
        if fp != _fingerprint(p):
            raise Ec2Error("IdempotentParameterMismatch", f"The client token '{token}' was used with other parameters.")
        return dict(resp)
    itype = str(p.get("InstanceType") or "m5.large")
    emu._limits(itype)
    n = int(_req(p, "MinCount"))
    m = int(_req(p, "MaxCount"))
    if not 1 <= n <= m:
        raise Ec2Error("InvalidParameterValue", "MinCount must be between 1 and MaxCount")
    sid = p.get("SubnetId")
    if not sid:
        nic: dict[str, Any] = next(iter(p.get("NetworkInterfaces") or []), {})
        sid = nic.get("SubnetId")
    if not sid:
        if not emu.subnets:
            raise Ec2Error("MissingInput", "No subnets found for the default VPC. Please specify a subnet.")
        sid = next(iter(emu.subnets))
    subnet = emu._subnet(str(sid))
    k = min(m, subnet.pool.available)
    if k < n:
        raise _insufficient_addresses()
    rid = emu._id("r")
    tags = _tags_for(p, "instance")
    made = [
        emu._run_instance(itype, subnet.id, dict(tags), None, p.get("PrivateIpAddress") if n == 1 else None,
                          rid, str(p.get("ImageId") or "ami-00000000000000000"))
        for _ in range(k)
    ]
    out = _reservation(emu, rid, [_render_instance(emu, emu.instances[i]) for i in made])
    if token:
        emu._run_tokens[token] = (_fingerprint(p), out)
    return out


@_action("TerminateInstances")
def _terminate_instances(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    ids = _ids(p, "InstanceIds")
    if not ids:
        raise Ec2Error("MissingParameter", "The request must contain the parameter InstanceId")
    for i in ids:
        emu._instance(i)
    out = []
    for i in ids:
        prev = emu._terminate(i)
        out.append({
            "InstanceId": i,
            "CurrentState": {"Code": 48, "Name": "terminated"},
            "PreviousState": {"Code": STATE_CODES[prev], "Name": prev},
        })
    return {"TerminatingInstances": out}


@_action("CreateVpc")
def _create_vpc(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    cidr = str(_req(p, "CidrBlock"))
    try:
        net = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError:
        raise Ec2Error("InvalidParameterValue", f"Value ({cidr}) for parameter cidrBlock is invalid.") from None
    if not 16 <= net.prefixlen <= 28:
        raise Ec2Error("InvalidVpc.Range", f"The CIDR '{cidr}' is invalid.")
    vid = emu.add_vpc(cidr, tags=_tags_for(p, "vpc"))
    return {"Vpc": emu.vpcs[vid].render(emu.owner)}


@_action("CreateSubnet")
def _create_subnet(emu: Ec2Emulator, p: dict[str, Any]) -> dict[str, Any]:
    sid = emu._create_subnet(
        str(_req(p, "VpcId")), str(_req(p, "CidrBlock")),
        str(p.get("AvailabilityZone") or f"{emu.config.region}a"), None, _tags_for(p, "subnet"),
    )
    return {"Subnet": emu.subnets[sid].render(emu.owner, emu.config.region)}
