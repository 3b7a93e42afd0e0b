"""``cilium``: a model of the Cilium operator's ENI IPAM (cilium/cilium
``pkg/ipam``; one operator per cluster allocates for every node).
docs/bench.md cites the source function of each behaviour.

* **Knobs.** The scenario's targets become Cilium's so that all strategies
  aim at the same warm pool: ``pre-allocate`` = ``WARM_IP_TARGET`` (or, in
  WARM_ENI mode, one ENI's worth × ``WARM_ENI_TARGET``; in prefix mode with
  ``WARM_PREFIX_TARGET``, 16 × it), ``min-allocate`` = ``MINIMUM_IP_TARGET``,
  ``max-allocate`` unset, ``max-above-watermark`` 0.
* **Arithmetic** (``calculateNeededIPs``, ``calculateExcessIPs``):
  ``needed = pre_allocate − (available − used)``, at least
  ``min_allocate − available``; ``excess = available − used − pre_allocate``.
  Surge (``determineMaintenanceAction``): only when ``needed > 0``, the
  allocation is raised to the node's pending pods. Prefix mode asks
  ``ceil(n / 16)`` /28s and releases only whole free prefixes.
* **What triggers a maintenance** — never a pod creation itself: the
  CiliumNode update the agent writes (its ``used`` count, at most every 15 s,
  ``ciliumNodeUpdateRate``), a resync of the node manager, and the retry after
  a failure. A node is maintained only while ``allocationNeeded`` (or
  ``releaseNeeded``): no maintenance in flight and no resync pending.
* **Maintenance** of a node (at most 50 at once, ``parallel-alloc-workers``):
  release first if there is excess; else an ENI with free slots gets
  ``AssignPrivateIpAddresses(min(n, free slots))``; else a new ENI
  ``CreateNetworkInterface`` (with ``min(n, slots)`` addresses) +
  ``AttachNetworkInterface`` + ``ModifyNetworkInterfaceAttribute``.
* **Resync after a mutation** (``MaintainIPPool`` → ``requireResync``,
  ``instanceSync``): the node may not allocate again until an instance
  sync started after its maintenance has finished: one filtered
  ``DescribeNetworkInterfaces`` through the same limiter. Only then does the
  operator's view (``available``) and the CiliumNode's pool hold the new
  addresses; a new ENI's addresses are usable once the node sees the ENI.
  Each finished sync resyncs every node (``NodeManager.Resync``), which
  clears older pending resyncs and re-triggers nodes still in deficit.
* **Release**: excess addresses are marked; if still excess 180 s later (plus
  one agent status round, 15 s, for the marked → ready handshake) the free
  ones on the ENI with the most of them are unassigned in one call. ENIs are
  not deleted.
* **Rate limiting**: one client-side limiter (4 calls/s, burst 20) for every
  EC2 call of the operator, Describe included; aws-sdk-go-v2's standard
  retryer (3 attempts, quota) underneath.
* **Failure backoff** (``pkg/backoff`` ``Exponential`` with the node
  manager): after the n-th consecutive failure the node's maintainer waits
  ``U[1, min(2^n, 300)) × ln(1 + nodes)`` s (at most 300 s; the count resets
  after 10 min without failures), then runs again if triggered meanwhile.
* **Periodic resync**: every minute a full resync pages through the VPC's
  ENIs (1,000 per page) and reads subnets and VPCs, then resyncs every node.
* A new node is read with one filtered ``DescribeNetworkInterfaces``; what its
  ENIs already hold (the scenario's ``launch_pool``) becomes its pool as
  ``ResyncInterfacesAndIPs`` (``pkg/aws/eni/node.go``) makes it available
  (:meth:`Operator.adopt`).
* The agent's CNI ADD fails when the node has no free address; the kubelet
  syncs the pod again 10–15 s later. No address cooldown.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from bench.proc import Limiter, Proc, StandardRetryer, ec2_call, error_code, spawn, wait_until
from bench.world import BenchWorld, NodePool, NodeRt
from warmpool.limits import PREFIX_SIZE
from warmpool.names import TAG_CLUSTER_NAME, TAG_INSTANCE_ID

LIMIT_RATE = 4.0
LIMIT_BURST = 20
WORKERS = 50
RESYNC_S = 60.0
RELEASE_DELAY_S = 180.0
STATUS_RATE_S = 15.0
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 300.0
BACKOFF_RESET_S = 600.0
PAGE = 1000
POLL_S = 1.0


def backoff_s(failures: int, nodes: int, u: float) -> float:
    """``backoff.Exponential{Min: 1 s, Max: 5 min, Jitter, NodeManager}.Duration(failures)``:
    ``U[min, min·2^failures)`` capped at ``max``, times ``ln(1 + nodes)``, capped at ``max``."""
    t = min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2.0**failures)
    t = BACKOFF_MIN_S + u * (t - BACKOFF_MIN_S)
    if nodes > 0:
        t *= math.log1p(nodes)
    return min(BACKOFF_MAX_S, t)


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
    waiting: bool = False
    again: bool = False
    failures: int = 0
    last_backoff_at: float = -1e18
    resync_needed: float | None = None
    unsynced: list[tuple[str, list[str], list[str], bool]] = field(default_factory=list)
    marked_at: float | None = None
    release_trigger: bool = False

    @property
    def name(self) -> str:
        return self.rt.spec.name

    def needed(self) -> int:
        """``calculateNeededIPs`` (no surge: pending pods count only in an allocation)."""
        avail = self.pool.total
        n = self.pre_allocate - (avail - self.status_used)
        if self.min_allocate > 0:
            n = max(n, self.min_allocate - avail)
        return max(n, 0)

    def to_allocate(self) -> int:
        """``determineMaintenanceAction``: ``needed`` raised to the pending pods (surge), if ``needed > 0``."""
        n = self.needed()
        if n <= 0:
            return 0
        return max(n, len(self.pool.pending))

    def excess(self) -> int:
        avail = self.pool.total
        ex = avail - self.status_used - self.pre_allocate
        if self.min_allocate > 0:
            ex = min(ex, avail - self.min_allocate)
        return max(ex, 0)


class Operator:
    """One cluster's operator (see the module docstring)."""

    def __init__(self, world: BenchWorld, cluster: str, counts: Counter[str]) -> None:
        self.w = world
        self.cluster = cluster
        self.counts = counts
        self.limiter = Limiter(LIMIT_RATE, LIMIT_BURST)
        self.retryer = StandardRetryer()  # the operator's one EC2 client: SDK defaults (3 attempts)
        self.nodes: dict[str, _Node] = {}
        self.dirty: set[str] = set()
        self.workers = 0

    def call(self, method: str, action: str, **kwargs: Any) -> Proc[dict[str, Any]]:
        return ec2_call(
            self.w.ec2,
            method,
            kwargs,
            latency=self.w.latency(action),
            retry=self.retryer,
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

    def describe_node_enis(self, node: _Node) -> Proc[dict[str, Any]]:
        """One ``DescribeNetworkInterfaces`` filtered by the node's instance (``InstanceSync``)."""
        return self.call(
            "describe_network_interfaces",
            "DescribeNetworkInterfaces",
            Filters=[{"Name": "attachment.instance-id", "Values": [node.rt.instance_id]}],
        )

    def register(self, node: _Node) -> Proc[None]:
        try:
            out = yield from self.describe_node_enis(node)
        except ClientError:
            self.counts["instance_sync_failed"] += 1
            return  # the next full resync picks it up
        self.adopt(node, out.get("NetworkInterfaces", []))
        node.known = True
        self.updated_resource(node)

    def adopt(self, node: _Node, interfaces: list[dict[str, Any]]) -> None:
        """What EC2 lists on a node's ENIs the first time the operator reads it (addresses a launch
        template put on the primary ENI): ``ResyncInterfacesAndIPs`` (``pkg/aws/eni/node.go``) makes
        every secondary address and prefix of an ENI at or above ``FirstInterfaceIndex`` (0 here:
        the primary too) available to the node's pool, with no EC2 call."""
        if node.known:
            return
        for ni in interfaces:
            eni_id = ni["NetworkInterfaceId"]
            if node.enis.get(eni_id) != 0 or ni.get("Attachment", {}).get("InstanceId") != node.rt.instance_id:
                continue
            ips = [a["PrivateIpAddress"] for a in ni.get("PrivateIpAddresses", []) if not a.get("Primary")]
            prefixes = [p["Ipv4Prefix"] for p in ni.get("Ipv4Prefixes", [])]
            if ips or prefixes:
                node.pool.add(eni_id, ips, prefixes)
                self.counts["launch_addresses_adopted"] += len(ips) + PREFIX_SIZE * len(prefixes)

    def pod_add(self, rt: NodeRt, pod: str) -> None:
        node = self.nodes[rt.spec.name]
        node.pool.pending.append(pod)  # Pending in the pod watch: counted for surge, triggers nothing
        self.try_add(node, pod)

    def pod_del(self, rt: NodeRt, pod: str) -> None:
        node = self.nodes[rt.spec.name]
        node.pool.release(pod, self.w.now())
        self.status_changed(node)

    def try_add(self, node: _Node, pod: str) -> None:
        """The agent's CNI ADD: an address from the node's pool, or a failure the kubelet retries."""
        if pod not in node.pool.pending:
            return  # deleted while waiting
        ip = node.pool.assign(pod, self.w.now())
        if ip is None:
            self.counts["cni_add_failed"] += 1
            self.w.loop.call_later(self.w.kubelet_retry_s(), lambda: self.try_add(node, pod))
            return
        node.pool.pending.remove(pod)
        self.w.pod_ready(node.rt, pod, ip)
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
        self.updated_resource(node)

    def updated_resource(self, node: _Node) -> None:
        """``UpdatedResource``: maintain the node only if an allocation is needed."""
        if self.allocation_needed(node):
            self.trigger(node)

    # --- the work queue
    def allocation_needed(self, node: _Node) -> bool:
        return node.known and node.resync_needed is None and not node.waiting and node.needed() > 0

    def release_needed(self, node: _Node) -> bool:
        return node.known and node.resync_needed is None and not node.waiting and node.excess() > 0

    def trigger(self, node: _Node) -> None:
        if not node.known:
            return
        if node.running:
            node.again = True  # the trigger folds into one more run after this one
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
            node.waiting = True
            self.workers += 1
            # Start on the loop, not inline: a maintenance with nothing to do ends at
            # once, and finishing it dispatches again (no recursion through 1,000 nodes).
            self.w.loop.call_later(0.0, functools.partial(self._spawn_maintenance, node))

    def _spawn_maintenance(self, node: _Node) -> None:
        spawn(
            self.w.loop,
            self.maintain(node),
            on_done=lambda mutated: self.finished(node, mutated=bool(mutated)),
            on_error=lambda exc: self.failed(node, exc),
        )

    def _release_worker(self, node: _Node) -> None:
        self.workers -= 1
        node.running = False
        if node.again:
            node.again = False
            if node.resync_needed is None:
                self.dirty.add(node.name)
        self.dispatch()

    def finished(self, node: _Node, *, mutated: bool) -> None:
        """``MaintainIPPool`` succeeded: a resync is required before the next
        allocation; a mutation triggers the node's instance sync."""
        node.waiting = False
        if self.w.now() - node.last_backoff_at > BACKOFF_RESET_S:
            node.failures = 0
        node.resync_needed = self.w.now()
        if mutated:
            spawn(self.w.loop, self.instance_sync(node))
        self._release_worker(node)

    def failed(self, node: _Node, exc: BaseException) -> None:
        """``MaintainIPPool`` failed: instance sync, and the maintainer waits out its backoff."""
        self.counts[f"error:{error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__}"] += 1
        node.waiting = False
        now = self.w.now()
        if now - node.last_backoff_at > BACKOFF_RESET_S:
            node.failures = 0
        node.failures += 1
        node.last_backoff_at = now
        delay = backoff_s(node.failures, len(self.nodes), self.w.rng.random())
        spawn(self.w.loop, self.instance_sync(node))
        self.w.loop.call_later(delay, lambda: self._release_worker(node))

    def maintain(self, node: _Node) -> Proc[bool]:
        """One ``maintainIPPool``; returns True when it changed the instance."""
        excess = node.excess()
        if excess > 0:
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
            released = yield from self.release(node, excess)
            return released
        node.marked_at = None
        n = node.to_allocate()
        if n <= 0:
            return False
        if n > node.needed():
            self.counts["surge_allocations"] += 1
        mutated = yield from self.allocate(node, n)
        return mutated

    def instance_sync(self, node: _Node) -> Proc[None]:
        """The node's instance sync (one filtered DescribeNetworkInterfaces), then ``NodeManager.Resync``."""
        started = self.w.now()
        try:
            yield from self.describe_node_enis(node)
        except ClientError:
            self.counts["instance_sync_failed"] += 1
            return
        self.counts["instance_syncs"] += 1
        self.apply_synced(node)
        self.resync_nodes(started)

    def apply_synced(self, node: _Node) -> None:
        """What the sync read: the node's new addresses join its pool (a new ENI's once the node sees it)."""
        for eni_id, ips, prefixes, new_eni in node.unsynced:
            if new_eni and not self.w.eni_visible(eni_id):
                node.pool.add(eni_id, [], [])
                fake = self._reserve(node, eni_id, len(ips) + PREFIX_SIZE * len(prefixes))
                spawn(self.w.loop, self._when_visible(node, eni_id, ips, prefixes, fake))
            else:
                node.pool.add(eni_id, ips, prefixes)
        node.unsynced.clear()

    def resync_nodes(self, sync_started: float) -> None:
        """``NodeManager.Resync``: clear resyncs older than the sync, re-trigger nodes in need."""
        for n in sorted(self.nodes.values(), key=lambda n: -n.needed()):
            if n.resync_needed is not None and n.resync_needed <= sync_started:
                n.resync_needed = None
            if self.allocation_needed(n) or self.release_needed(n):
                self.trigger(n)

    def allocate(self, node: _Node, needed: int) -> Proc[bool]:
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
                node.unsynced.append(
                    (
                        eni_id,
                        [a["PrivateIpAddress"] for a in out.get("AssignedPrivateIpAddresses", [])],
                        [p["Ipv4Prefix"] for p in out.get("AssignedIpv4Prefixes", [])],
                        False,
                    )
                )
                return True
        if len(node.enis) >= node.rt.limits.enis(node.rt.spec.env.MAX_ENI):
            return False
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
        # Known to the operator after the instance sync; usable once the node sees the ENI.
        node.unsynced.append((eni_id, ips, prefixes, True))
        try:
            yield from self.call(
                "modify_network_interface_attribute",
                "ModifyNetworkInterfaceAttribute",
                NetworkInterfaceId=eni_id,
                Attachment={"AttachmentId": att["AttachmentId"], "DeleteOnTermination": True},
            )
        except ClientError:
            self.counts["modify_failed"] += 1
        return True

    def _reserve(self, node: _Node, eni_id: str, n: int) -> list[str]:
        """Placeholders so that ``available`` counts a new ENI's addresses before the node sees them."""
        fake = [f"reserved:{eni_id}:{i}" for i in range(n)]
        for a in fake:
            node.pool.eni_of[a] = eni_id
        return fake

    def _when_visible(
        self, node: _Node, eni_id: str, ips: list[str], prefixes: list[str], fake: list[str]
    ) -> Proc[None]:
        yield from wait_until(lambda: self.w.eni_visible(eni_id), POLL_S, 120.0)
        for a in fake:
            node.pool.eni_of.pop(a, None)
        node.pool.add(eni_id, ips, prefixes)

    def release(self, node: _Node, excess: int) -> Proc[bool]:
        pool = node.pool
        now = self.w.now()
        if node.prefix_mode:
            best = max(node.enis, key=lambda e: len(pool.free_prefixes_on(e)))
            prefixes = pool.free_prefixes_on(best)[: excess // PREFIX_SIZE]
            if not prefixes:
                return False
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
            return True
        best = max(node.enis, key=lambda e: len(pool.free_on(e, now)))
        ips = pool.free_on(best, now)[:excess]
        if not ips:
            return False
        pool.remove(best, ips=ips)
        try:
            yield from self.call(
                "unassign_private_ip_addresses",
                "UnassignPrivateIpAddresses",
                NetworkInterfaceId=best,
                PrivateIpAddresses=ips,
            )
        except ClientError:
            pool.add(best, ips=ips)
            raise
        return True

    # --- full resync
    def resync_loop(self) -> Proc[None]:
        while True:
            yield RESYNC_S
            try:
                yield from self.resync()
            except ClientError:
                self.counts["resync_failed"] += 1

    def resync(self) -> Proc[None]:
        started = self.w.now()
        token: str | None = None
        listed: list[dict[str, Any]] = []
        while True:
            kwargs: dict[str, Any] = {
                "Filters": [{"Name": "vpc-id", "Values": [self.w.vpc_id]}],
                "MaxResults": PAGE,
            }
            if token:
                kwargs["NextToken"] = token
            out = yield from self.call("describe_network_interfaces", "DescribeNetworkInterfaces", **kwargs)
            listed.extend(out.get("NetworkInterfaces", []))
            token = out.get("NextToken")
            if not token:
                break
        yield from self.call("describe_subnets", "DescribeSubnets")
        yield from self.call("describe_vpcs", "DescribeVpcs")
        for node in self.nodes.values():
            self.adopt(node, listed)
            node.known = True
            self.apply_synced(node)
        self.resync_nodes(started)


class Cilium:
    """One operator per cluster (see the module docstring)."""

    name = "cilium"

    def __init__(self, world: BenchWorld) -> None:
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
