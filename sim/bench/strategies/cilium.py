"""``cilium``: a model of the Cilium operator's ENI IPAM (one operator per
cluster allocates for every node).

Assumptions (from cilium ``pkg/ipam`` and REFERENCE.md):

* **Knobs.** The scenario's targets become Cilium's so that all strategies
  aim at the same warm pool: ``pre-allocate`` = ``WARM_IP_TARGET`` (or, in
  WARM_ENI mode, one ENI's worth × ``WARM_ENI_TARGET``; in prefix mode with
  ``WARM_PREFIX_TARGET``, 16 × it), ``min-allocate`` = ``MINIMUM_IP_TARGET``,
  ``max-allocate`` unset, ``max-above-watermark`` 0.
* **Arithmetic.** ``needed = pre_allocate − (available − used)``, at least
  ``min_allocate − available``; surge: at least the pods pending on the node.
  ``excess = available − used − pre_allocate − max_above_watermark`` (never
  below ``min_allocate``). Prefix mode asks ``ceil(needed / 16)`` /28s and
  releases only whole free prefixes.
* **What the operator sees.** ``used`` is the CiliumNode status the agent
  writes, at most every 15 s (``ciliumNodeUpdateRate``); pending pods come
  from its pod watch at once. Addresses it assigned are in the CiliumNode
  spec at once; those of a new ENI are usable once the node sees the ENI.
* **Maintenance** of a node (a worker, at most 50 at once): an ENI with free
  slots gets ``AssignPrivateIpAddresses(min(needed, free slots))``; else a
  new ENI ``CreateNetworkInterface`` (with ``min(needed, slots)`` addresses)
  + ``AttachNetworkInterface`` + ``ModifyNetworkInterfaceAttribute``
  (DeleteOnTermination). A node still short is maintained again at once. The
  queue serves the largest deficit first, releases after every deficit.
* **Release**: excess addresses are marked; if still excess 180 s later (plus
  one agent status round, 15 s, for the marked → ready handshake) the free
  ones on the ENI with the most of them are unassigned in one call. ENIs are
  not deleted.
* **Rate limiting**: one client-side limiter (4 calls/s, burst 20) for every
  EC2 call of the operator, Describe included; the SDK's standard retry
  (3 attempts, exponential jitter, cap 20 s) underneath. A failed maintenance
  is retried after a backoff from 5 s (×2, cap 120 s).
* **Resync**: a new node is read with one filtered
  ``DescribeNetworkInterfaces``; every minute a full resync pages through the
  VPC's ENIs (1,000 per page) and reads subnets and VPCs, then triggers every
  node's maintenance.
* No address cooldown (the agent reuses a freed address at once).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from sim.bench.proc import STANDARD, Limiter, Proc, ec2_call, error_code, spawn, wait_until
from sim.bench.world import NodePool, NodeRt, World
from warmpool.limits import PREFIX_SIZE
from warmpool.names import TAG_CLUSTER_NAME, TAG_INSTANCE_ID

LIMIT_RATE = 4.0
LIMIT_BURST = 20
WORKERS = 50
RESYNC_S = 60.0
RELEASE_DELAY_S = 180.0
STATUS_RATE_S = 15.0
RETRY_MIN_S = 5.0
RETRY_MAX_S = 120.0
PAGE = 1000
POLL_S = 1.0


@dataclass
class _Node:
    rt: NodeRt
    pool: NodePool
    pre_allocate: int
    min_allocate: int
    prefix_mode: bool
    enis: dict[str, int] = field(default_factory=dict)  # eni -> device index
    known: bool = False
    status_used: int = 0
    last_push: float = -1e18
    push_scheduled: bool = False
    running: bool = False
    again: bool = False
    failures: int = 0
    retry_at: float | None = None
    marked_at: float | None = None
    release_trigger: bool = False

    @property
    def name(self) -> str:
        return self.rt.spec.name

    def needed(self) -> int:
        avail = self.pool.total
        n = self.pre_allocate - (avail - self.status_used)
        if self.min_allocate > 0:
            n = max(n, self.min_allocate - avail)
        return max(n, len(self.pool.pending), 0)

    def excess(self) -> int:
        avail = self.pool.total
        ex = avail - self.status_used - self.pre_allocate
        if self.min_allocate > 0:
            ex = min(ex, avail - self.min_allocate)
        return max(ex, 0)


class Operator:
    """One cluster's operator (see the module docstring)."""

    def __init__(self, world: World, cluster: str, counts: Counter[str]) -> None:
        self.w = world
        self.cluster = cluster
        self.counts = counts
        self.limiter = Limiter(LIMIT_RATE, LIMIT_BURST)
        self.nodes: dict[str, _Node] = {}
        self.dirty: set[str] = set()
        self.workers = 0

    def call(self, method: str, action: str, **kwargs: Any) -> Proc[dict[str, Any]]:
        return ec2_call(
            self.w.ec2,
            method,
            kwargs,
            latency=self.w.latency(action),
            retry=STANDARD,
            rng=self.w.rng,
            limiter=self.limiter,
            now=self.w.now,
        )

    # --- nodes and agents
    def add_node(self, rt: NodeRt) -> None:
        env = rt.spec.env
        slots = rt.limits.slots_per_eni
        if env.ip_target_mode:
            pre = env.WARM_IP_TARGET
        elif env.ENABLE_PREFIX_DELEGATION and env.WARM_PREFIX_TARGET > 0:
            pre = PREFIX_SIZE * env.WARM_PREFIX_TARGET
        else:
            pre = slots * (PREFIX_SIZE if env.ENABLE_PREFIX_DELEGATION else 1) * env.WARM_ENI_TARGET
        node = _Node(rt, NodePool(0.0), pre, env.MINIMUM_IP_TARGET, env.ENABLE_PREFIX_DELEGATION)
        inst = self.w.emu.instances[rt.instance_id]
        node.enis[inst.primary_eni] = 0
        self.nodes[rt.spec.name] = node
        spawn(self.w.loop, self.register(node))

    def register(self, node: _Node) -> Proc[None]:
        try:
            yield from self.call(
                "describe_network_interfaces",
                "DescribeNetworkInterfaces",
                Filters=[{"Name": "attachment.instance-id", "Values": [node.rt.instance_id]}],
            )
        except ClientError:
            self.counts["instance_sync_failed"] += 1
            return  # the next full resync picks it up
        node.known = True
        self.trigger(node)

    def pod_add(self, rt: NodeRt, pod: str) -> None:
        node = self.nodes[rt.spec.name]
        node.pool.pending.append(pod)
        self.serve(node)
        if node.pool.pending:
            self.trigger(node)  # surge: the operator watches pending pods

    def pod_del(self, rt: NodeRt, pod: str) -> None:
        node = self.nodes[rt.spec.name]
        node.pool.release(pod, self.w.now())
        self.serve(node)
        self.status_changed(node)

    def serve(self, node: _Node) -> None:
        now = self.w.now()
        served = False
        while node.pool.pending:
            ip = node.pool.assign(node.pool.pending[0], now)
            if ip is None:
                break
            pod = node.pool.pending.popleft()
            self.w.pod_ready(node.rt, pod, ip)
            served = True
        if served:
            self.status_changed(node)

    def status_changed(self, node: _Node) -> None:
        """The agent writes CiliumNode status at most every 15 s."""
        if node.push_scheduled:
            return
        at = max(self.w.now(), node.last_push + STATUS_RATE_S)
        node.push_scheduled = True
        self.w.loop.call_at(at, lambda: self.push(node))

    def push(self, node: _Node) -> None:
        node.push_scheduled = False
        node.last_push = self.w.now()
        node.status_used = node.pool.assigned
        self.trigger(node)

    # --- the work queue
    def trigger(self, node: _Node) -> None:
        if not node.known:
            return
        if node.running:
            node.again = True
            return
        self.dirty.add(node.name)
        self.dispatch()

    def dispatch(self) -> None:
        while self.workers < WORKERS and self.dirty:
            # largest deficit first; nodes with only releases after every deficit
            name = max(self.dirty, key=lambda n: (self.nodes[n].needed(), -self.nodes[n].rt.joined_at))
            self.dirty.discard(name)
            node = self.nodes[name]
            node.running = True
            self.workers += 1
            # Start on the loop, not inline: a maintenance with nothing to do ends at
            # once, and finishing it dispatches again (no recursion through 1,000 nodes).
            self.w.loop.call_later(
                0.0,
                lambda node=node: spawn(
                    self.w.loop,
                    self.maintain(node),
                    on_done=lambda ok: self.finished(node, bool(ok)),
                    on_error=lambda exc: self.failed(node, exc),
                ),
            )

    def finished(self, node: _Node, more: bool) -> None:
        self.workers -= 1
        node.running = False
        node.failures = 0
        if more or node.again:
            node.again = False
            self.dirty.add(node.name)
        self.dispatch()

    def failed(self, node: _Node, exc: BaseException) -> None:
        self.workers -= 1
        node.running = False
        node.again = False
        self.counts[f"error:{error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__}"] += 1
        delay = min(RETRY_MAX_S, RETRY_MIN_S * 2**node.failures)
        node.failures += 1
        self.w.loop.call_later(delay, lambda: self.trigger(node))
        self.dispatch()

    def maintain(self, node: _Node) -> Proc[bool]:
        """One maintenance; returns True when the node should be maintained again."""
        needed = node.needed()
        if needed > 0:
            node.marked_at = None
            yield from self.allocate(node, needed)
            return node.needed() > 0
        excess = node.excess()
        if excess <= 0:
            node.marked_at = None
            return False
        now = self.w.now()
        if node.marked_at is None:
            node.marked_at = now
        due = node.marked_at + RELEASE_DELAY_S + STATUS_RATE_S
        if now < due:
            if not node.release_trigger:
                node.release_trigger = True

                def fire() -> None:
                    node.release_trigger = False
                    self.trigger(node)

                self.w.loop.call_at(due, fire)
            return False
        node.marked_at = None
        yield from self.release(node, excess)
        return False

    def allocate(self, node: _Node, needed: int) -> Proc[None]:
        slots = node.rt.limits.slots_per_eni
        units = math.ceil(needed / PREFIX_SIZE) if node.prefix_mode else needed
        key = "Ipv4PrefixCount" if node.prefix_mode else "SecondaryPrivateIpAddressCount"
        pool = node.pool
        for eni_id, _ in sorted(node.enis.items(), key=lambda kv: kv[1]):
            used = len(pool.eni_addrs.get(eni_id, [])) - (PREFIX_SIZE - 1) * len(pool.eni_prefixes.get(eni_id, []))
            free = slots - used
            if free > 0:
                out = yield from self.call(
                    "assign_private_ip_addresses",
                    "AssignPrivateIpAddresses",
                    NetworkInterfaceId=eni_id,
                    **{key: min(units, free)},
                )
                pool.add(
                    eni_id,
                    [a["PrivateIpAddress"] for a in out.get("AssignedPrivateIpAddresses", [])],
                    [p["Ipv4Prefix"] for p in out.get("AssignedIpv4Prefixes", [])],
                )
                self.serve(node)
                return
        if len(node.enis) >= node.rt.limits.enis(node.rt.spec.env.MAX_ENI):
            return
        created = yield from self.call(
            "create_network_interface",
            "CreateNetworkInterface",
            SubnetId=node.rt.spec.subnet,
            Description="Cilium-CNI (" + node.rt.instance_id + ")",
            TagSpecifications=[
                {
                    "ResourceType": "network-interface",
                    "Tags": [
                        {"Key": TAG_CLUSTER_NAME, "Value": self.cluster},
                        {"Key": TAG_INSTANCE_ID, "Value": node.rt.instance_id},
                    ],
                }
            ],
            **{key: min(units, slots)},
        )
        ni = created["NetworkInterface"]
        eni_id = ni["NetworkInterfaceId"]
        device = next(i for i in range(1, 64) if i not in node.enis.values())
        try:
            att = yield from self.call(
                "attach_network_interface",
                "AttachNetworkInterface",
                InstanceId=node.rt.instance_id,
                NetworkInterfaceId=eni_id,
                DeviceIndex=device,
                NetworkCardIndex=0,
            )
        except ClientError:
            self.counts["attach_failed"] += 1
            yield from self.call("delete_network_interface", "DeleteNetworkInterface", NetworkInterfaceId=eni_id)
            raise
        node.enis[eni_id] = device
        ips = [a["PrivateIpAddress"] for a in ni.get("PrivateIpAddresses", []) if not a.get("Primary")]
        prefixes = [p["Ipv4Prefix"] for p in ni.get("Ipv4Prefixes", [])]
        # Reserved in the spec now (counted as available), usable once the node sees the ENI.
        pool.add(eni_id, [], [])
        reserved = len(ips) + PREFIX_SIZE * len(prefixes)
        pool_reserve = self._reserve(node, eni_id, reserved)
        spawn(self.w.loop, self._when_visible(node, eni_id, ips, prefixes, pool_reserve))
        try:
            yield from self.call(
                "modify_network_interface_attribute",
                "ModifyNetworkInterfaceAttribute",
                NetworkInterfaceId=eni_id,
                Attachment={"AttachmentId": att["AttachmentId"], "DeleteOnTermination": True},
            )
        except ClientError:
            self.counts["modify_failed"] += 1

    def _reserve(self, node: _Node, eni_id: str, n: int) -> list[str]:
        """Placeholders so that ``available`` counts a new ENI's addresses before the node sees them."""
        fake = [f"reserved:{eni_id}:{i}" for i in range(n)]
        for a in fake:
            node.pool.eni_of[a] = eni_id
        return fake

    def _when_visible(self, node: _Node, eni_id: str, ips: list[str], prefixes: list[str], fake: list[str]) -> Proc[None]:
        yield from wait_until(lambda: self.w.eni_visible(eni_id), POLL_S, 120.0)
        for a in fake:
            node.pool.eni_of.pop(a, None)
        node.pool.add(eni_id, ips, prefixes)
        self.serve(node)

    def release(self, node: _Node, excess: int) -> Proc[None]:
        pool = node.pool
        now = self.w.now()
        if node.prefix_mode:
            best = max(node.enis, key=lambda e: len(pool.free_prefixes_on(e)))
            prefixes = pool.free_prefixes_on(best)[: excess // PREFIX_SIZE]
            if not prefixes:
                return
            pool.remove(best, prefixes=prefixes)
            try:
                yield from self.call(
                    "unassign_private_ip_addresses",
                    "UnassignPrivateIpAddresses",
                    NetworkInterfaceId=best,
                    Ipv4Prefixes=prefixes,
                )
            except ClientError:
                pool.add(best, prefixes=prefixes)
                raise
            return
        best = max(node.enis, key=lambda e: len(pool.free_on(e, now)))
        ips = pool.free_on(best, now)[:excess]
        if not ips:
            return
        pool.remove(best, ips=ips)
        try:
            yield from self.call(
                "unassign_private_ip_addresses", "UnassignPrivateIpAddresses", NetworkInterfaceId=best, PrivateIpAddresses=ips
            )
        except ClientError:
            pool.add(best, ips=ips)
            raise

    # --- full resync
    def resync_loop(self) -> Proc[None]:
        while True:
            yield RESYNC_S
            try:
                yield from self.resync()
            except ClientError:
                self.counts["resync_failed"] += 1

    def resync(self) -> Proc[None]:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "Filters": [{"Name": "vpc-id", "Values": [self.w.vpc_id]}],
                "MaxResults": PAGE,
            }
            if token:
                kwargs["NextToken"] = token
            out = yield from self.call("describe_network_interfaces", "DescribeNetworkInterfaces", **kwargs)
            token = out.get("NextToken")
            if not token:
                break
        yield from self.call("describe_subnets", "DescribeSubnets")
        yield from self.call("describe_vpcs", "DescribeVpcs")
        for node in sorted(self.nodes.values(), key=lambda n: -n.needed()):
            node.known = True
            self.trigger(node)


class Cilium:
    """One operator per cluster (see the module docstring)."""

    name = "cilium"

    def __init__(self, world: World) -> None:
        self.w = world
        self.counts: Counter[str] = Counter()
        self.operators = {c.name: Operator(world, c.name, self.counts) for c in world.scenario.all_clusters}

    def start(self) -> None:
        for op in self.operators.values():
            spawn(self.w.loop, op.resync_loop())
        self.w.schedule(self._join, self._add, self._delete)

    def _op(self, node: NodeRt) -> Operator:
        return self.operators[node.spec.cluster]

    def _join(self, node: NodeRt) -> None:
        self._op(node).add_node(node)

    def _add(self, node: NodeRt, pod: str) -> None:
        self._op(node).pod_add(node, pod)

    def _delete(self, node: NodeRt, pod: str) -> None:
        self._op(node).pod_del(node, pod)

    def busy(self) -> bool:
        return any(op.workers > 0 or op.dirty for op in self.operators.values())

    def notes(self) -> list[str]:
        return [f"{k}: {v}" for k, v in sorted(self.counts.items())]
