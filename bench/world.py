"""One strategy's world for one run: the event loop, a fresh emulated EC2
(same seed for every strategy), the nodes joining, the pods coming and going,
the faults, and the books every figure is computed from.

A strategy (``bench/strategies/``) only reacts: a node joined, a pod was
added or deleted. It gives pods their addresses with :meth:`BenchWorld.pod_ready`
and makes every EC2 call through :attr:`BenchWorld.ec2` (which records them).
"""

from __future__ import annotations

import functools
import ipaddress
import math
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from bench.proc import error_code
from bench.scenario import Scenario
from bench.workload import Expanded, WorkloadNode
from emulated.clock import EventLoop
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.ec2.errors import Ec2Error
from warmpool.buckets import MUTATING_ACTIONS, MUTATING_ENI_ACTIONS
from warmpool.eni_scope import primary_eni_tag
from warmpool.limits import PREFIX_SIZE, InstanceLimits, known
from warmpool.names import cluster_tag_key

ATTACH_FAILURE_CODE = "InternalError"
QUIET_S = 240.0
"""A run has settled when nothing is pending and no mutating call happened for this long
(longer than Cilium's 180 s release delay plus its status round trip)."""
CHECK_EVERY_S = 5.0
KUBELET_BACKOFF_S = 10.0
"""kubelet ``backOffPeriod`` (pkg/kubelet/kubelet.go): a pod whose sync failed
(its CNI ADD found no address) is synced again after ``wait.Jitter(10 s, 0.5)``
(pkg/kubelet/pod_workers.go, ``completeWork``)."""
KUBELET_JITTER = 0.5


def _snake(action: str) -> str:
    out = []
    for i, ch in enumerate(action):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _camel(method: str) -> str:
    return "".join(p.capitalize() for p in method.split("_"))


class Recorder:
    """The strategies' EC2 client: the emulator's fast client, with every call
    recorded (time, action, outcome) for the counts and the plot."""

    def __init__(self, inner: Any, now: Callable[[], float]) -> None:
        self._inner = inner
        self._now = now
        self.calls: dict[str, int] = {}
        self.throttled: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.mutating_ok = 0
        self.last_mutating_at = -math.inf
        self.log: list[tuple[float, str, str]] = []
        """(time, action, "ok" | "throttled" | error code), in order."""
        self.per_second: dict[int, list[int]] = {}
        """second -> [calls, throttled, mutating accepted]"""
        self._methods: dict[str, Callable[..., dict[str, Any]]] = {}
        self.on_mutating: Callable[[str, dict[str, Any], dict[str, Any]], None] | None = None
        """Told (action, request, response) of each mutating call EC2 accepted (the warmpool
        strategy's :class:`bench.call_causes.CallCauses`)."""

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._methods.get(name)
        if fn is None:
            fn = self._wrap(name, getattr(self._inner, name))
            self._methods[name] = fn
        return fn

    def _wrap(self, method: str, target: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        action = _camel(method)
        mutating = action in MUTATING_ACTIONS

        def call(**kwargs: Any) -> dict[str, Any]:
            now = self._now()
            self.calls[action] = self.calls.get(action, 0) + 1
            sec = self.per_second.setdefault(int(now), [0, 0, 0])
            sec[0] += 1
            try:
                out = target(**kwargs)
            except ClientError as exc:
                code = error_code(exc)
                self.log.append((now, action, "throttled" if code == "RequestLimitExceeded" else code))
                if code == "RequestLimitExceeded":
                    self.throttled[action] = self.throttled.get(action, 0) + 1
                    sec[1] += 1
                else:
                    self.errors[action] = self.errors.get(action, 0) + 1
                    if mutating:
                        self.last_mutating_at = now
                raise
            self.log.append((now, action, "ok"))
            if mutating:
                self.mutating_ok += 1
                self.last_mutating_at = now
                sec[2] += 1
                if self.on_mutating is not None:
                    self.on_mutating(action, kwargs, out)
            return out

        return call


@dataclass
class NodeRt:
    """A node as the world knows it."""

    spec: WorkloadNode
    instance_id: str
    limits: InstanceLimits
    joined_at: float
    pods: set[str] = field(default_factory=set)


class PodBook:
    """Every pod: created, ready (with its address), deleted; duplicates caught
    when an address is handed to a pod while another live pod holds it."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.node_of: dict[str, str] = {}
        self.ready_at: dict[str, float] = {}
        self.ip_of: dict[str, str] = {}
        self.deleted: set[str] = set()
        self.holder: dict[str, str] = {}  # address -> live pod
        self.duplicates = 0
        self.waiting = 0

    def add(self, pod: str, node: str, now: float) -> None:
        self.created[pod] = now
        self.node_of[pod] = node
        self.waiting += 1

    def ready(self, pod: str, ip: str, now: float) -> None:
        if pod in self.ready_at or pod in self.deleted:
            raise RuntimeError(f"bench bug: {pod} given an address twice or after deletion")
        self.ready_at[pod] = now
        self.ip_of[pod] = ip
        self.waiting -= 1
        other = self.holder.get(ip)
        if other is not None and other != pod:
            self.duplicates += 1
        self.holder[ip] = pod

    def delete(self, pod: str) -> None:
        self.deleted.add(pod)
        if pod not in self.ready_at:
            self.waiting -= 1
            return
        ip = self.ip_of[pod]
        if self.holder.get(ip) == pod:
            del self.holder[ip]

    def live(self) -> Iterable[str]:
        return (p for p in self.created if p not in self.deleted)


class NodePool:
    """A node's address pool for the baselines (ipamd's datastore, Cilium's
    agent): addresses by ENI, pods holding them, freed ones cooling down, and
    the pods waiting for one (FIFO)."""

    def __init__(self, cooldown_s: float) -> None:
        self.cooldown_s = cooldown_s
        self.eni_addrs: dict[str, list[str]] = {}  # eni -> addresses (secondaries, prefix members)
        self.eni_prefixes: dict[str, list[str]] = {}
        self.eni_of: dict[str, str] = {}
        self.free: dict[str, None] = {}  # ordered set of usable addresses
        self.cooling: deque[tuple[float, str]] = deque()
        self.cooling_set: set[str] = set()
        self.pod_ip: dict[str, str] = {}
        self.ip_pod: dict[str, str] = {}
        self.pending: deque[str] = deque()

    # --- addresses
    def add(self, eni_id: str, ips: Iterable[str] = (), prefixes: Iterable[str] = ()) -> None:
        addrs = self.eni_addrs.setdefault(eni_id, [])
        pfx = self.eni_prefixes.setdefault(eni_id, [])
        new = list(ips)
        for p in prefixes:
            pfx.append(p)
            new.extend(str(a) for a in ipaddress.IPv4Network(p))
        for a in new:
            addrs.append(a)
            self.eni_of[a] = eni_id
            self.free[a] = None

    def remove(self, eni_id: str, ips: Iterable[str] = (), prefixes: Iterable[str] = ()) -> None:
        drop = set(ips)
        for p in prefixes:
            self.eni_prefixes[eni_id].remove(p)
            drop.update(str(a) for a in ipaddress.IPv4Network(p))
        for a in drop:
            if a in self.ip_pod or a in self.cooling_set:
                raise RuntimeError(f"bench bug: releasing {a} while in use")
            self.free.pop(a, None)
            self.eni_of.pop(a, None)
        self.eni_addrs[eni_id] = [a for a in self.eni_addrs[eni_id] if a not in drop]

    def drop_eni(self, eni_id: str) -> None:
        self.remove(
            eni_id,
            [a for a in self.eni_addrs.get(eni_id, []) if a not in self._prefix_members(eni_id)],
            list(self.eni_prefixes.get(eni_id, [])),
        )
        self.eni_addrs.pop(eni_id, None)
        self.eni_prefixes.pop(eni_id, None)

    def _prefix_members(self, eni_id: str) -> set[str]:
        return {str(a) for p in self.eni_prefixes.get(eni_id, []) for a in ipaddress.IPv4Network(p)}

    def _expire(self, now: float) -> None:
        while self.cooling and self.cooling[0][0] <= now:
            _, a = self.cooling.popleft()
            self.cooling_set.discard(a)
            if a in self.eni_of:
                self.free[a] = None

    # --- pods
    def assign(self, pod: str, now: float) -> str | None:
        self._expire(now)
        if not self.free:
            return None
        a = next(iter(self.free))
        del self.free[a]
        self.pod_ip[pod] = a
        self.ip_pod[a] = pod
        return a

    def release(self, pod: str, now: float) -> None:
        a = self.pod_ip.pop(pod, None)
        if a is None:
            try:
                self.pending.remove(pod)
            except ValueError:
                pass
            return
        del self.ip_pod[a]
        if self.cooldown_s > 0:
            self.cooling.append((now + self.cooldown_s, a))
            self.cooling_set.add(a)
        else:
            self.free[a] = None

    def next_cool_at(self) -> float | None:
        return self.cooling[0][0] if self.cooling else None

    # --- views
    @property
    def total(self) -> int:
        return len(self.eni_of)

    @property
    def assigned(self) -> int:
        return len(self.ip_pod)

    def free_on(self, eni_id: str, now: float) -> list[str]:
        """Addresses of the ENI that are neither held nor cooling (secondaries only)."""
        self._expire(now)
        members = self._prefix_members(eni_id)
        return [a for a in self.eni_addrs.get(eni_id, []) if a in self.free and a not in members]

    def free_prefixes_on(self, eni_id: str) -> list[str]:
        out = []
        for p in self.eni_prefixes.get(eni_id, []):
            if all(str(a) not in self.ip_pod and str(a) not in self.cooling_set for a in ipaddress.IPv4Network(p)):
                out.append(p)
        return out

    def free_prefixes(self) -> int:
        return sum(len(self.free_prefixes_on(e)) for e in self.eni_prefixes)

    def used_on(self, eni_id: str) -> int:
        return sum(1 for a in self.eni_addrs.get(eni_id, []) if a in self.ip_pod or a in self.cooling_set)


LAUNCH_RETRY_S = 30.0
"""How long after a refused launch a node is launched again: EC2 refuses ``RunInstances`` when the
subnet cannot give the primary interface (and a launch template's addresses or prefixes) what it
asks, and the node's group launches it again later (a model's choice of interval, not AWS's)."""
LAUNCH_REFUSALS = ("InsufficientFreeAddressesInSubnet", "InsufficientCidrBlocks")


class BenchWorld:
    """See the module docstring."""

    def __init__(self, scenario: Scenario, expanded: Expanded, strategy: str) -> None:
        self.scenario = scenario
        self.expanded = expanded
        self.strategy = strategy
        self.loop = EventLoop()
        self.rng = random.Random(f"{scenario.seed}/{strategy}")
        t = scenario.ec2
        self.emu = Ec2Emulator(
            self.loop.clock,
            Ec2Config(
                buckets=dict(scenario.account.buckets),
                api_latency_s=t.api_latency_s,
                attach_delay_s=t.attach_delay_s,
                detach_delay_s=t.detach_delay_s,
                single_placement=t.single_placement,
                placement_seed=scenario.seed,
            ),
            seed=scenario.seed,
        )
        self.vpc_id = self.emu.add_vpc(_covering([s.cidr for s in scenario.subnets]))
        cluster_tags = {cluster_tag_key(c.name): "shared" for c in scenario.all_clusters}
        for s in scenario.subnets:
            self.emu.add_subnet(
                az=s.az, cidr=s.cidr, vpc_id=self.vpc_id, subnet_id=s.id, tags={**cluster_tags, **s.tags}
            )
            if s.foreign_addresses:
                self.emu.hold_addresses(s.id, s.foreign_addresses)
        self.background: dict[str, float] = dict(scenario.account.background_load)
        for action, rate in self.background.items():
            self.emu.set_background_load(action, rate)
        self.ec2 = Recorder(self.emu.client(), self.loop.now)
        self.book = PodBook()
        self.nodes: dict[str, NodeRt] = {}
        self.by_instance: dict[str, NodeRt] = {}
        self.notes: list[str] = []
        self.calls_by_cause: dict[str, int] = {}
        """The strategy's accepted mutating calls by ``"<Action>: <cause>"`` (warmpool's:
        :mod:`bench.call_causes`; empty for the baselines)."""
        self.done = False
        self.settled_at: float | None = None
        self.active_faults: dict[str, float] = {}  # kind -> rate, while active
        self.launches_refused = 0
        """Launches EC2 refused (the node's subnet had no free address): each tried again
        :data:`LAUNCH_RETRY_S` later."""
        self._unlaunched: dict[str, list[Callable[[], None]]] = {}
        """Pod adds and deletes of a node EC2 has not launched yet, done once it has, in order."""
        self._handlers: dict[str, Callable[[NodeRt], None] | Callable[[NodeRt, str], None]] = {}

    def now(self) -> float:
        return self.loop.now()

    def latency(self, action: str) -> Callable[[], float]:
        return lambda: self.emu.latency_for(action)

    def kubelet_retry_s(self) -> float:
        """When the kubelet retries a pod whose CNI ADD failed: 10–15 s later."""
        return KUBELET_BACKOFF_S * (1.0 + KUBELET_JITTER * self.rng.random())

    def fault_rate(self, kind: str) -> float:
        return self.active_faults.get(kind, 0.0)

    # --- ENI visibility (IMDS in production; no EC2 call)
    def eni_visible(self, eni_id: str) -> bool:
        self.emu.settle()
        eni = self.emu.enis.get(eni_id)
        return eni is not None and eni.attachment is not None and eni.attachment.status == "attached"

    def eni_gone_or_detached(self, eni_id: str) -> bool:
        self.emu.settle()
        eni = self.emu.enis.get(eni_id)
        return eni is None or eni.attachment is None

    # --- pods
    def pod_ready(self, node: NodeRt, pod: str, ip: str) -> None:
        self.book.ready(pod, ip, self.now())

    # --- the run
    def schedule(
        self,
        on_join: Callable[[NodeRt], None],
        on_add: Callable[[NodeRt, str], None],
        on_delete: Callable[[NodeRt, str], None],
    ) -> None:
        for spec in self.expanded.nodes:
            self.loop.call_at(spec.join_at, functools.partial(self._join, spec, on_join))
        for ev in self.expanded.events:
            if ev.kind == "add":
                self.loop.call_at(ev.at, functools.partial(self._add, ev.node, ev.pod, on_add))
            else:
                self.loop.call_at(ev.at, functools.partial(self._delete, ev.node, ev.pod, on_delete))
        for f in self.scenario.faults:
            self.loop.call_at(f.at_s, functools.partial(self._fault, f.kind, f.rate, f.subnet, on=True))
            self.loop.call_at(f.end_s, functools.partial(self._fault, f.kind, f.rate, f.subnet, on=False))

    def _join(self, spec: WorkloadNode, on_join: Callable[[NodeRt], None]) -> None:
        tagging = self.scenario.cluster_named(spec.cluster).primary_eni_tagging
        try:
            iid = self.emu.run_instance(
                spec.instance_type,
                subnet_id=spec.subnet,
                tags={cluster_tag_key(spec.cluster): "owned", "Name": spec.name},
                secondary_count=spec.launch_addresses,
                prefix_count=spec.launch_prefixes,
                # the launch template's tag (``cluster.primary_eni_tagging: launch-template``)
                eni_tags=primary_eni_tag(spec.cluster) if tagging == "launch-template" else None,
            )
        except Ec2Error as exc:
            if exc.code not in LAUNCH_REFUSALS:
                raise
            # The subnet has no address for the node's primary interface (or its launch pool):
            # launched again later, its pods waiting for it (before, the run stopped here: the
            # random bench's seed 2, scenarios 118 and 196, a join during ``subnet-exhausted``).
            self.launches_refused += 1
            if spec.name not in self._unlaunched:
                self.notes.append(
                    f"{spec.name}: launch refused ({exc.code}); launched again every {LAUNCH_RETRY_S:g} s"
                )
            self._unlaunched.setdefault(spec.name, [])
            self.loop.call_at(self.now() + LAUNCH_RETRY_S, functools.partial(self._join, spec, on_join))
            return
        node = NodeRt(spec=spec, instance_id=iid, limits=known(spec.instance_type), joined_at=self.now())
        self.nodes[spec.name] = node
        self.by_instance[iid] = node
        on_join(node)
        for op in self._unlaunched.pop(spec.name, []):
            op()

    def deleted_before(self, instance_id: str) -> bool:
        """Whether a pod of the node on ``instance_id`` has been deleted by now."""
        node = self.by_instance.get(instance_id)
        return node is not None and any(self.book.node_of[p] == node.spec.name for p in self.book.deleted)

    def _add(self, node_name: str, pod: str, on_add: Callable[[NodeRt, str], None]) -> None:
        if node_name in self._unlaunched:  # not launched yet: its pod is created once it is
            self._unlaunched[node_name].append(functools.partial(self._add, node_name, pod, on_add))
            return
        node = self.nodes[node_name]
        node.pods.add(pod)
        self.book.add(pod, node_name, self.now())
        on_add(node, pod)

    def _delete(self, node_name: str, pod: str, on_delete: Callable[[NodeRt, str], None]) -> None:
        if node_name in self._unlaunched:
            self._unlaunched[node_name].append(functools.partial(self._delete, node_name, pod, on_delete))
            return
        node = self.nodes[node_name]
        node.pods.discard(pod)
        self.book.delete(pod)
        on_delete(node, pod)

    def _fault(self, kind: str, rate: float, subnet: str | None, *, on: bool) -> None:
        if on:
            self.active_faults[kind] = rate
        else:
            self.active_faults.pop(kind, None)
        if kind == "throttle-storm":
            for action in MUTATING_ENI_ACTIONS:  # a throttle storm loads every ENI action's bucket
                self.emu.set_background_load(action, self.background.get(action, 0.0) + (rate if on else 0.0))
        elif kind == "attach-failure":
            self.emu.fail_rate("AttachNetworkInterface", ATTACH_FAILURE_CODE, rate if on else 0.0)
        elif kind == "subnet-exhausted":
            assert subnet is not None
            self.emu.set_subnet_exhausted(subnet, exhausted=on)

    def settled(self) -> bool:
        now = self.now()
        if now < self.expanded.last_event_at or len(self.nodes) < len(self.expanded.nodes):
            return False
        if self.book.waiting > 0:
            return False
        if any(
            f.end_s > now for f in self.scenario.faults if f.kind != "lambda-crash" and f.kind != "duplicate-delivery"
        ):
            return False
        return now - max(self.ec2.last_mutating_at, self.expanded.last_event_at) >= QUIET_S

    def run(self, progress: Callable[[float], None] | None = None, busy: Callable[[], bool] | None = None) -> None:
        duration = self.scenario.duration_s

        def check() -> None:
            if progress is not None:
                progress(self.now())
            if self.settled() and (busy is None or not busy()):
                self.done = True
                self.settled_at = self.now()

        self.loop.every(CHECK_EVERY_S, check, start=CHECK_EVERY_S)
        self.loop.run_until(duration, stop=lambda: self.done)
        if self.settled_at is None:
            self.settled_at = min(self.now(), duration)
        self.emu.settle()


def _covering(cidrs: list[str]) -> str:
    nets = [ipaddress.IPv4Network(c) for c in cidrs]
    net = nets[0]
    while not all(n.subnet_of(net) for n in nets):
        net = net.supernet()
    return str(net.supernet(new_prefix=min(net.prefixlen, 16)) if net.prefixlen > 16 else net)


def prefix_addresses(prefix: str) -> list[str]:
    return [str(a) for a in ipaddress.IPv4Network(prefix)]


assert PREFIX_SIZE == 16
