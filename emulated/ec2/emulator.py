"""The emulated EC2: its state, its time and its throttling.

:class:`Ec2Emulator` keeps VPCs, subnets, instances and ENIs in memory and
answers boto3-shaped requests (``dispatch(action, params) -> dict``) with the
rules AWS applies and moto does not. Here: counting, fault injection,
token-bucket throttling (with background load from other callers), attach and
detach delays, and the direct set-up methods. The actions themselves are served
by the handler tables of :mod:`.describe` (Describe* and the IMDS view, with
:mod:`.filters`), :mod:`.enis` (ENI and address operations: per-instance ENI
limits, per-ENI address limits, /28 prefixes carved without overlap, subnet
exhaustion, ClientToken idempotency) and :mod:`.resources` (VPCs, subnets,
instances, tags); :mod:`.registry` holds what they share.

Time comes from the injected :class:`warmpool.clock.Clock`; nothing here
sleeps. Everything that happens "later" (an attach becoming visible, a detach
completing, tokens refilling, other callers draining a bucket) is computed
lazily from the clock at the next call, so a virtual clock can jump freely.

The ways in (:meth:`client`, :meth:`boto3_client`, :mod:`emulated.ec2.http`)
are thin adapters over :meth:`dispatch`.
"""

from __future__ import annotations

import heapq
import ipaddress
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from warmpool.buckets import (
    UNFILTERED_DESCRIBE,
    BucketSpec,
    BucketState,
    full,
    spec_for,
    try_take,
)
from warmpool.clock import Clock
from warmpool.limits import KNOWN_TYPES, InstanceLimits

from . import describe, enis, resources
from .authz import Denial, Principal, authorize
from .client import FastEc2Client
from .config import AmbiguousOutcome, Ec2Config
from .describe import instance_metadata
from .errors import Ec2Error, metadata, not_found
from .lag import LAGGED, DescribeLag
from .registry import MAX_IPV4_PER_ENI, Handler
from .resources import launch_instance, new_subnet, terminate
from .state import EmulatedEni, EmulatedSubnet, Instance, Vpc

UNFILTERED_SUFFIX = ":unfiltered"
"""Bucket key suffix for unfiltered, unpaginated DescribeInstances/DescribeNetworkInterfaces
(override with ``Ec2Config.buckets["DescribeInstances:unfiltered"]``)."""

AttachCallback = Callable[[str, dict[str, Any]], None]

_HANDLERS: dict[str, Handler[Ec2Emulator]] = {**describe.HANDLERS, **enis.HANDLERS, **resources.HANDLERS}
"""Every action served: the handler modules' tables (an action name is in exactly one)."""


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
    codes: dict[str, int] = field(default_factory=dict)
    """Errors by code."""


class Ec2Emulator:
    """In-memory EC2 with AWS's limits, errors and throttling (see module doc)."""

    def __init__(self, clock: Clock, config: Ec2Config | None = None, seed: int = 0) -> None:
        self.clock = clock
        self.config = config or Ec2Config()
        self._rng = random.Random(seed)
        self._fault_rng = random.Random(seed + 1)
        self._lock = threading.RLock()
        self.vpcs: dict[str, Vpc] = {}
        self.subnets: dict[str, EmulatedSubnet] = {}
        self.instances: dict[str, Instance] = {}
        self.enis: dict[str, EmulatedEni] = {}
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
        self.denials: list[Denial] = []
        """Every request a principal was refused (:mod:`.authz`), in order."""
        self._lag_seed = seed + 2
        self.unlisted: dict[str, float] = {}
        """Instances DescribeInstances does not show yet: id -> when it starts to (:meth:`unlist_instance`)."""
        self.stuck_detach_rate = 0.0
        """Probability that a DetachNetworkInterface (not forced) answers success and leaves the ENI attached."""
        self.stuck: set[str] = set()
        """Attachments a detach call left in place: the next detach (a retry, or a forced one) detaches."""
        self._stuck_rng = random.Random(seed + 3)
        self._ambiguous: dict[str, tuple[AmbiguousOutcome, float]] = {}
        self._ambiguous_rng = random.Random(seed + 4)
        self._in_sdk_retry = False
        self.describe_lag: DescribeLag | None = None
        """Set while Describe lags (its ``lags`` lists every lag drawn)."""
        if self.config.describe_lag_max_s > 0:
            self.describe_lag = DescribeLag(self.config.describe_lag_min_s, self.config.describe_lag_max_s, seed + 2)
            self._changed()  # the empty start: a resource just made is missing from Describe at first

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

    def add_vpc(
        self, cidr: str = "10.0.0.0/16", vpc_id: str | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
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
            return new_subnet(self, vpc_id, cidr, az or f"{self.config.region}a", subnet_id, dict(tags or {}))

    def run_instance(
        self,
        instance_type: str,
        subnet_id: str,
        tags: Mapping[str, str] | None = None,
        instance_id: str | None = None,
        private_ip: str | None = None,
        secondary_count: int = 0,
        prefix_count: int = 0,
        efa_only: Sequence[tuple[int, int]] = (),
        eni_tags: Mapping[str, str] | None = None,
    ) -> str:
        """Launch one running instance with its primary ENI at device 0 (no throttling), holding
        ``secondary_count`` addresses or ``prefix_count`` /28s from the start (a launch template's
        network interface), and an EFA-only interface (no IP address) at each ``(network card,
        device index)`` of ``efa_only``, as p5, p5en and trn2 instances are launched (one per
        network card); its interfaces tagged ``eni_tags`` (a launch template's ``TagSpecifications``
        for ``network-interface``)."""
        with self._lock:
            self._settle()
            iid = launch_instance(
                self,
                instance_type,
                subnet_id,
                dict(tags or {}),
                instance_id,
                private_ip,
                self._id("r"),
                "ami-00000000000000000",
                secondary_count,
                prefix_count,
                efa_only,
                eni_tags,
            )
            self._changed()
            return iid

    def hold_addresses(self, subnet_id: str, n: int, instance_type: str = "c5.18xlarge") -> list[str]:
        """Another caller's instances in the subnet, their ENIs holding ``n`` secondary addresses
        placed as ``config.single_placement`` says (set-up: not counted, no throttling). What
        other workloads leave in a shared subnet, visible to Describe as theirs."""
        out: list[str] = []
        with self._lock:
            while len(out) < n:
                iid = self.run_instance(instance_type, subnet_id)
                inst = self.instances[iid]
                per_eni = inst.limits.ipv4_per_eni - 1
                for dev in range(1, inst.limits.max_enis):
                    if len(out) >= n:
                        break
                    k = min(per_eni, n - len(out))
                    made = enis.create_eni(self, {"SubnetId": subnet_id, "SecondaryPrivateIpAddressCount": k})
                    eid = made["NetworkInterface"]["NetworkInterfaceId"]
                    enis.attach(self, {"NetworkInterfaceId": eid, "InstanceId": iid, "DeviceIndex": dev})
                    out += self.enis[eid].secondary
            self._changed()
        return out

    def terminate_instance(self, instance_id: str) -> None:
        """Terminate: ENIs marked DeleteOnTermination go, the others are detached."""
        with self._lock:
            self._settle()
            terminate(self, instance_id)
            self._changed()

    def set_describe_lag(self, min_s: float, max_s: float) -> None:
        """Fault: from now on, DescribeNetworkInterfaces and DescribeInstances answer from the
        state a lag drawn in [min_s, max_s] ago (at the oldest, the state now); ``max_s`` 0 ends it."""
        with self._lock:
            self._settle()
            if max_s <= 0:
                self.describe_lag = None
                return
            self.describe_lag = DescribeLag(min_s, max_s, self._lag_seed)
            self._changed()

    def unlist_instance(self, instance_id: str, until: float) -> None:
        """Fault: DescribeInstances leaves the instance out until ``until`` (an instance just
        launched, not yet in the eventually consistent view); named by id, it is NotFound."""
        with self._lock:
            self.unlisted[instance_id] = until

    def set_stuck_detach(self, rate: float) -> None:
        """Fault: each DetachNetworkInterface without ``Force`` answers success yet leaves the ENI
        ``in-use`` with probability ``rate`` (seeded); its next detach call detaches. 0 ends it."""
        with self._lock:
            self.stuck_detach_rate = rate

    def set_ambiguous(self, action: str, outcome: AmbiguousOutcome, rate: float) -> None:
        """Fault: each call of ``action`` takes effect and then, with probability ``rate``
        (seeded), its answer is lost: ``INTERNAL_ERROR`` answers ``InternalError`` (HTTP 500);
        ``SDK_RETRY`` drops the connection, and the caller's SDK sends the same request again,
        whose answer the caller gets (what botocore's retry of a connection error does). 0 ends it."""
        with self._lock:
            if rate > 0:
                self._ambiguous[action] = (outcome, rate)
            else:
                self._ambiguous.pop(action, None)

    def set_subnet_exhausted(self, subnet_id: str, *, exhausted: bool = True) -> None:
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

    def fail_next(
        self, action: str, code: str, n: int = 1, message: str | None = None, status: int | None = None
    ) -> None:
        """The next ``n`` calls of ``action`` fail with ``code`` (taking no token)."""
        with self._lock:
            self._faults.setdefault(action, []).append(_Fault(code, n, message or f"Injected fault: {code}", status))

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

    def error_codes(self) -> dict[str, dict[str, int]]:
        """``{Action: {code: count}}`` of the errors answered (throttling apart), by action."""
        with self._lock:
            return {a: dict(c.codes) for a, c in sorted(self._counters.items()) if c.codes}

    def reset_stats(self) -> None:
        with self._lock:
            self._counters.clear()

    def tokens(self, action: str, *, unfiltered: bool = False) -> float:
        """Tokens in ``action``'s bucket now (for tests and figures)."""
        with self._lock:
            return self._bucket(action + UNFILTERED_SUFFIX if unfiltered else action).tokens

    # ------------------------------------------------------------ ways in

    def client(self, principal: Principal | None = None) -> FastEc2Client:
        """A fast boto3-shaped client (satisfies :class:`warmpool.ports.Ec2Api`); with a
        ``principal``, each call is authorized against its policies first (:mod:`.authz`)."""
        return FastEc2Client(self, principal)

    def boto3_client(self, principal: Principal | None = None, **kwargs: Any) -> Any:
        """A real boto3 ``ec2`` client whose calls are served in-process by this emulator
        (authorized as :meth:`client`'s when a ``principal`` is given)."""
        from .hooks import boto3_client

        return boto3_client(self, principal=principal, **kwargs)

    def call(self, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`dispatch`, raising ``botocore.exceptions.ClientError`` on errors."""
        try:
            return self.dispatch(action, params)
        except Ec2Error as e:
            raise e.client_error(action) from None

    @staticmethod
    def actions() -> list[str]:
        return sorted(_HANDLERS)

    def dispatch(self, action: str, params: Mapping[str, Any], principal: Principal | None = None) -> dict[str, Any]:
        """Serve one request: count it, throttle it, inject faults, authorize it
        (when a ``principal`` makes it), apply the rules.

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
                counter.codes["InvalidAction"] = counter.codes.get("InvalidAction", 0) + 1
                raise Ec2Error("InvalidAction", f"The action {action} is not valid for this web service.")
            try:
                self._settle()
                self._inject(action)
                if self.config.throttling and not self._take(self._bucket_key(action, params)):
                    raise Ec2Error("RequestLimitExceeded", "Request limit exceeded.")
                if principal is not None:
                    authorize(self, principal, action, params, self.denials)
                if params.get("DryRun"):
                    raise Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
                if self.describe_lag is not None and action in LAGGED:
                    out = handler(self.describe_lag.view(self, self.clock.now()), dict(params))
                else:
                    out = handler(self, dict(params))
                    if not action.startswith("Describe"):
                        self._changed()
                        lost = self._answer_lost(action)
                        if lost is AmbiguousOutcome.INTERNAL_ERROR:
                            raise Ec2Error(
                                "InternalError", "An internal error has occurred (the request took effect).", 500
                            )
                        if lost is AmbiguousOutcome.SDK_RETRY:
                            self._in_sdk_retry = True
                            try:
                                return self.dispatch(action, params, principal)
                            finally:
                                self._in_sdk_retry = False
            except Ec2Error as e:
                if e.code == "RequestLimitExceeded":
                    counter.throttled += 1
                else:
                    counter.errors += 1
                    counter.codes[e.code] = counter.codes.get(e.code, 0) + 1
                raise
            out["ResponseMetadata"] = metadata()
            return out

    def stuck_draw(self) -> float:
        return self._stuck_rng.random()

    def _answer_lost(self, action: str) -> AmbiguousOutcome | None:
        amb = self._ambiguous.get(action)
        if amb is None or self._in_sdk_retry or self._ambiguous_rng.random() >= amb[1]:
            return None
        return amb[0]

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
            p.get("Filters")
            or p.get("MaxResults")
            or p.get("NextToken")
            or p.get("InstanceIds")
            or p.get("NetworkInterfaceIds")
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

    def _changed(self) -> None:
        """The ENIs or instances may have changed: what a lagging Describe will show later."""
        if self.describe_lag is not None:
            self.describe_lag.record(self, self.clock.now())

    def _settle(self) -> None:
        if not self._pending:
            return
        now = self.clock.now()
        applied = False
        while self._pending and self._pending[0][0] <= now:
            _, _, kind, eni_id, att_id = heapq.heappop(self._pending)
            eni = self.enis.get(eni_id)
            if eni is None or eni.attachment is None or eni.attachment.id != att_id:
                continue
            applied = True
            if kind == "attach" and eni.attachment.status == "attaching":
                eni.attachment.status = "attached"
                self._fire_attach(eni)
            elif kind == "detach" and eni.attachment.status == "detaching":
                self._finish_detach(eni)
        if applied:
            self._changed()

    def _fire_attach(self, eni: EmulatedEni) -> None:
        if not self._on_attach or eni.attachment is None:
            return
        iid = eni.attachment.instance_id
        view = eni.render(self.owner)
        for cb in self._on_attach:
            cb(iid, view)

    # ------------------------------------------------------------ lookups

    def _subnet(self, sid: str) -> EmulatedSubnet:
        s = self.subnets.get(sid)
        if s is None:
            raise not_found("Subnet", sid)
        return s

    def _instance(self, iid: str) -> Instance:
        i = self.instances.get(iid)
        if i is None:
            raise not_found("Instance", iid)
        return i

    def _eni(self, eid: str) -> EmulatedEni:
        e = self.enis.get(eid)
        if e is None:
            raise not_found("NetworkInterface", eid)
        return e

    def _eni_limit(self, eni: EmulatedEni) -> tuple[int, InstanceLimits | None]:
        if eni.attachment is None:
            return MAX_IPV4_PER_ENI, None
        lim = self.instances[eni.attachment.instance_id].limits
        return lim.ipv4_per_eni, lim

    # ------------------------------------------------------------ attachments

    def _finish_detach(self, eni: EmulatedEni) -> None:
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
            return instance_metadata(self, self._instance(instance_id))
