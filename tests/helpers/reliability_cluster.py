"""A closed loop in virtual time for the fault suite: the real allocator
(``AllocatorWorld``: emulated EC2, fast SQS, in-memory stores) and, per node, the real
agent logic (``Datastore`` + ``PoolController``) reading an IMDS view of the
emulator, with pods that ADD (retrying like a runtime) and DEL.

Fault hooks: results lost or delivered twice, IMDS failing or lagging, and
whatever the test does to the emulator, the allocator or the stores.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions.allocator import Allocator, Record
from functions.reconciler import Reconciler
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.config import Timing
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.imds import parse_interfaces
from node_agent.records import NodeIdentity
from tests.helpers import invariants as inv
from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names
from warmpool.limits import known
from warmpool.pool import PoolConfig

TIMING = Timing(cooldown_s=30, release_delay_s=60, release_timeout_s=120, heartbeat_s=60, retry_s=5)


class EmuImds:
    """:class:`MetadataView` over the emulator's IMDS tree, with faults:
    ``failing`` (every call raises), ``frozen`` (answers a stale snapshot)."""

    def __init__(self, emu: Any, instance_id: str) -> None:
        self.emu, self.instance_id = emu, instance_id
        self.failing = False
        self.frozen: list[AttachedEni] | None = None
        self.calls = 0

    def live(self) -> list[AttachedEni]:
        return parse_interfaces(self.emu.instance_metadata(self.instance_id))

    def interfaces(self) -> list[AttachedEni]:
        self.calls += 1
        if self.failing:
            raise OSError("IMDS: connection refused")
        return list(self.frozen) if self.frozen is not None else self.live()


@dataclass
class Node:
    name: str
    instance_id: str
    ds: Datastore
    ctl: PoolController
    imds: EmuImds
    checkpoint: MemoryCheckpoint
    pool: PoolConfig
    wanted: int = 0
    started: int = 0
    """Pods created so far (container ids ``<node>-p<i>``)."""
    live: set[str] = field(default_factory=set)
    last_sent: int = -1
    resynced_at: float = 0.0


class ReliabilityCluster:
    def __init__(
        self,
        nodes: int = 3,
        *,
        instance_type: str = "m5.large",
        pool: PoolConfig | None = None,
        seed: int = 0,
        gc_age_s: float = 300,
        reconcile_every_s: float = 60,
        timing: Timing = TIMING,
        **world: Any,
    ) -> None:
        self.w = AllocatorWorld(gc_age_s=gc_age_s, **world)
        self.timing = timing
        self.clock = self.w.clock
        self.rng = random.Random(seed)
        self.pool = pool or PoolConfig(warm_ip=2)
        self.gc_age_s = gc_age_s
        self.reconcile_every_s = reconcile_every_s
        self.resync_every_s = 60.0
        self._next_reconcile = self.clock.now() + reconcile_every_s
        self.nodes: dict[str, Node] = {}
        self.lose_results = 0.0
        self.duplicate_results = 0.0
        self.counts: Counter[str] = Counter()
        self.allocators: list[Allocator] = [self.w.alloc]
        self.before_batch: Callable[[list[Record]], None] | None = None
        self.faults = inv.FaultLog()
        for i in range(nodes):
            self.add_node(f"n{i}", instance_type)

    # --- nodes and pods ---------------------------------------------------------------

    def add_node(self, name: str, instance_type: str = "m5.large", pool: PoolConfig | None = None) -> Node:
        iid = self.w.add_node(name, instance_type)
        cp = MemoryCheckpoint()
        node = self._agent(name, iid, instance_type, pool or self.pool, cp)
        self.nodes[name] = node
        return node

    def _agent(
        self,
        name: str,
        iid: str,
        instance_type: str,
        pool: PoolConfig,
        cp: MemoryCheckpoint,
        imds: EmuImds | None = None,
    ) -> Node:
        ds = Datastore(cooldown_s=self.timing.cooldown_s, pending_ttl_s=self.timing.pending_ttl_s, checkpoint=cp)
        ds.restore()
        imds = imds or EmuImds(self.w.emu, iid)
        ident = NodeIdentity(self.w.cluster, name, iid, instance_type, "us-east-1a")
        ctl = PoolController(
            ident,
            known(instance_type),
            pool,
            ds,
            self.timing,
            metadata=imds,
            signed_identity=functools.partial(self.w.imds.identity, iid),
        )
        ctl.start(self.clock.now())
        return Node(name, iid, ds, ctl, imds, cp, pool, resynced_at=self.clock.now())

    def restart(self, name: str) -> Node:
        """The agent process dies (kill -9) and starts again from its checkpoint and IMDS."""
        old = self.nodes[name]
        inst = self.w.emu.instances[old.instance_id].instance_type
        new = self._agent(name, old.instance_id, inst, old.pool, old.checkpoint, old.imds)
        new.wanted, new.started, new.live = old.wanted, old.started, old.live
        new.last_sent = old.last_sent
        self.nodes[name] = new
        return new

    def scale(self, name: str, pods: int) -> None:
        """Run ``pods`` pods on the node: new ones ADD (and retry), surplus ones DEL."""
        n = self.nodes[name]
        now = self.clock.now()
        while len(n.live) > pods:
            cid = sorted(n.live)[-1]
            n.live.discard(cid)
            n.ds.release(cid, "eth0", now)
        while len(n.live) < pods:
            n.live.add(f"{name}-p{n.started}")
            n.started += 1
        n.wanted = pods

    def ceiling(self, n: Node) -> int:
        lim = known(self.w.emu.instances[n.instance_id].instance_type)
        return lim.capacity(prefix_mode=n.pool.prefix_mode, max_eni=n.pool.max_eni or None)

    # --- the loop -----------------------------------------------------------------------

    def _results(self, n: Node, now: float) -> None:
        c = self.w.sqs.client()
        try:
            url = c.get_queue_url(QueueName=names.result_queue(self.w.cluster, n.instance_id))["QueueUrl"]
        except Exception:
            return
        while True:
            msgs = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if not msgs:
                return
            for m in msgs:
                c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                if self.lose_results and self.rng.random() < self.lose_results:
                    self.faults.inject("result-lost")
                    continue
                from warmpool.messages import parse_result

                res = parse_result(m["Body"])
                n.ctl.apply_result(res, now)
                if self.duplicate_results and self.rng.random() < self.duplicate_results:
                    self.faults.inject("result-duplicated")
                    n.ctl.apply_result(res, now)

    def step(self, dt: float = 1.0) -> None:
        now = self.clock.now()
        for n in self.nodes.values():
            if self.w.emu.instances[n.instance_id].state != "running":
                continue
            self._results(n, now)
            if now - n.resynced_at >= self.resync_every_s:  # the agent's periodic IMDS reconcile
                n.resynced_at = now
                try:
                    n.ctl.resync(now)
                except OSError:
                    self.counts["resync_failed"] += 1
            for cid in sorted(n.live):
                n.ds.assign(cid, "eth0", f"/run/netns/{cid}", now)  # the runtime retries
            for r in n.ctl.tick(now):
                self.w.sqs.client().send_message(QueueUrl=self.w.reports_url, MessageBody=r.to_json())
                n.last_sent = r.seq
        self._serve()
        if now >= self._next_reconcile:
            self._next_reconcile = now + self.reconcile_every_s
            self.reconciler().run()
        self.clock.advance(dt)

    def _serve(self) -> None:
        """The event-source mapping: every visible report, one batch per allocator."""
        c = self.w.sqs.client()
        msgs = []
        while True:
            got = c.receive_message(QueueUrl=self.w.reports_url, MaxNumberOfMessages=10).get("Messages", [])
            if not got:
                break
            msgs.extend(got)
        if not msgs:
            return
        recs = [Record(m["MessageId"], m["Body"]) for m in msgs]
        if self.before_batch is not None:
            self.before_batch(recs)
        k = len(self.allocators)
        handles = {m["MessageId"]: m["ReceiptHandle"] for m in msgs}
        for i, alloc in enumerate(self.allocators):
            part = recs[i::k]
            if not part:
                continue
            out = alloc.handle_batch(part)
            failed = set(out.failed_message_ids)
            for r in part:
                if r.message_id not in failed:
                    c.delete_message(QueueUrl=self.w.reports_url, ReceiptHandle=handles[r.message_id])

    def run(self, seconds: float, dt: float = 1.0) -> None:
        end = self.clock.now() + seconds
        while self.clock.now() < end:
            self.step(dt)

    def settle(self, max_s: float = 900) -> None:
        """Run until every wanted pod holds an address and nothing is queued (or ``max_s``)."""
        end = self.clock.now() + max_s
        while self.clock.now() < end:
            self.step()
            if self.w.sqs.depth(self.w.reports_url) == 0 and all(
                len(n.ds.pods()) >= min(n.wanted, self.ceiling(n)) for n in self.nodes.values() if self._alive(n)
            ):
                break
        self.run(5)

    def _alive(self, n: Node) -> bool:
        return self.w.emu.instances[n.instance_id].state == "running"

    def reconciler(self) -> Reconciler:
        w = self.w
        return w.reconciler()

    # --- the invariants -----------------------------------------------------------------

    def check(self, *, dlq: Counter[str] | None = None, short_ok: tuple[str, ...] = ()) -> None:
        """Drain what is queued, then every invariant (see ``invariants``)."""
        for _ in range(600):
            if self.w.sqs.depth(self.w.reports_url) == 0:
                break
            self.step()
        alive = {k: n for k, n in self.nodes.items() if self._alive(n)}
        problems = inv.ec2_problems(self.w.emu)
        problems += inv.agent_problems(self.w.emu, {k: (n.instance_id, n.ds) for k, n in alive.items()})
        problems += inv.dlq_problems(self.w, dlq)
        problems += inv.served_problems(self.w, {k: n.last_sent for k, n in alive.items() if n.last_sent >= 0})
        problems += inv.pod_problems(
            {k: (self.ceiling(n), n.ds, n.wanted) for k, n in alive.items()}, short_ok=short_ok
        )
        problems += inv.leak_problems(self.w, self.reconciler(), gc_age_s=self.gc_age_s)
        inv.assert_ok(problems)
