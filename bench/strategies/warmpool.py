"""``warmpool``: the production logic on the bench's event loop.

Per node, the agent's :class:`node_agent.controller.PoolController` and
:class:`node_agent.datastore.Datastore` (IMDS answered by the emulated EC2;
the host side — netlink — is not applied). Reports go through the fast SQS
(:mod:`emulated.sqs`) to the reports queue; the event-source mapping
(:mod:`emulated.esm`) invokes :class:`functions.allocator.Allocator` with the
in-memory stores (:mod:`emulated.memstores`, buckets shared by every cluster of the
account); results come back on each node's result queue. The reconciler runs
every minute. Only AWS, the kernel and the clock are stand-ins.

Wiring assumptions (the bench's, not the product's):

* The agent ticks when a pod comes or goes, when a result arrives, and every
  ``AGENT_TICK_S`` otherwise; a pod whose ADD found nothing is retried (as the
  kubelet would) at every tick and after every result. A grid tick before the
  agent is next due (``PoolController.next_due``, the resync, a waiting ADD's
  renewal, an address out of cooldown) is skipped: it would do nothing
  (``Warmpool.every_tick`` ticks them all; the same run).
* As the production agent's main loop (``node_agent.agent``,
  ``WARMPOOL_RESYNC_S``), the controller reconciles with IMDS every
  ``RESYNC_S``: addresses EC2 attached but whose result never arrived (the
  invocation died after its EC2 call) are found there.
* Every EC2 call takes virtual time from the emulator's latency model (the
  same ``latency_for`` the baselines wait on). Within an invocation, each
  node's calls run one after the other on one of the allocator's
  ``max_workers`` threads (the earliest free); a node's result is sent when
  its calls are done, and received ``RESULT_DELIVERY_S`` later (the agent
  long-polls its queue). The invocation lasts ``INVOKE_BASE_S`` plus its
  cold start plus its busiest thread; the ESM deletes or returns its
  messages at its end. (The EC2 requests themselves reach the emulator at
  the invocation's start: a token is taken up to one invocation early.)
* Cold starts: an invocation finds a warm execution environment (idle, used
  within ``ENV_IDLE_RECLAIM_S``) or starts a new one, which first spends
  ``COLD_START_S`` in its Init phase (results are sent that much later).
* The event-source mapping's pollers (AWS Lambda, "Configuring scaling
  behavior for SQS event source mappings"): when messages arrive, five
  concurrent invocations; while messages remain, up to 300 more per minute,
  up to ``MaximumConcurrency``; back to five once the queue is drained.
* A CNI ADD that finds no address waits up to ``ADD_WAIT_S`` (the production
  agent's ``WARMPOOL_ADD_WAIT_S`` default) for one, then fails; the kubelet
  syncs the pod again 10–15 s later (:meth:`BenchWorld.kubelet_retry_s`).
* Faults: ``lambda-crash`` — an invocation dies (with probability ``rate``)
  after 0–3 of its mutating EC2 calls, failing its whole batch;
  ``duplicate-delivery`` — a sent message (report or result) is delivered
  twice with probability ``rate``.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bench.call_causes import CallCauses
from bench.world import BenchWorld, NodeRt
from emulated import harness
from emulated.esm import EsmConfig, EventSourceMapping
from emulated.iid import IdentitySigner
from emulated.imds import Imds
from emulated.lambda_runtime import LambdaCrash
from emulated.memstores import MemBuckets
from emulated.sqs import FastSqs
from functions.allocator import Record
from node_agent.config import Timing
from node_agent.controller import NEXT_DUE_MARGIN_S, AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.imds import parse_interfaces
from node_agent.records import NodeIdentity
from warmpool import names
from warmpool.buckets import BucketSpec, spec_for
from warmpool.messages import MessageError, parse_result

AGENT_TICK_S = 2.0
RESYNC_S = 60.0
"""The production agent's default ``WARMPOOL_RESYNC_S``."""
RESULT_DELIVERY_S = 0.05
INVOKE_BASE_S = 0.05
COLD_START_S = 1.0
"""Init phase of a new execution environment (Python runtime, boto3 and pydantic imports,
settings): an assumption on the slow side of published Python cold starts (typically 0.2–1 s)."""
ENV_IDLE_RECLAIM_S = 600.0
"""An idle execution environment is assumed gone after 10 minutes (Lambda does not document it)."""
POLLERS_START = 5
POLLERS_PER_S = 300.0 / 60.0
ADD_WAIT_S = 10.0
RECONCILE_EVERY_S = 60.0
BATCH_SIZE = 100
BATCHING_WINDOW_S = 1.0
MAX_CONCURRENCY = 10
FUNCTION_TIMEOUT_S = 30.0
VISIBILITY_TIMEOUT_S = 180


class _CrashingEc2:
    """The allocator's EC2 client; may kill the invocation after a mutating call."""

    def __init__(self, inner: Any, latency: Callable[[str], float] | None = None) -> None:
        self._inner = inner
        self._latency = latency
        self.crash_after: int | None = None
        self.mutating = 0
        self.requests = 0
        self.chain_s = 0.0
        """EC2 time of the calls since the last result was sent (one node's chain)."""

    def arm(self, crash_after: int | None) -> None:
        self.crash_after = crash_after
        self.mutating = 0
        self.requests = 0
        self.chain_s = 0.0

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        fn = getattr(self._inner, name)
        mutating = not name.startswith(("describe_", "get_", "list_"))

        action = "".join(p.capitalize() for p in name.split("_"))

        def call(**kwargs: Any) -> dict[str, Any]:
            self.requests += 1
            if self._latency is not None:
                self.chain_s += self._latency(action)
            if mutating and self.crash_after is not None and self.mutating >= self.crash_after:
                raise LambdaCrash()
            out: dict[str, Any] = fn(**kwargs)
            if mutating:
                self.mutating += 1
            return out

        return call


class _DupSqs:
    """An SQS client that sometimes delivers a message twice; tells the strategy
    about every message sent to a result queue."""

    def __init__(
        self,
        inner: Any,
        world: BenchWorld,
        on_result: Callable[[str, float], None] | None = None,
        offset: Callable[[], float] | None = None,
    ) -> None:
        self._inner = inner
        self._w = world
        self._on_result = on_result
        self._offset = offset

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _dup(self) -> bool:
        rate = self._w.fault_rate("duplicate-delivery")
        return rate > 0 and self._w.rng.random() < rate

    def _notify(self, url: str, delay: float = 0.0) -> None:
        if self._on_result is not None:
            self._on_result(url, delay + (self._offset() if self._offset is not None else 0.0))

    def send_message(self, **kw: Any) -> dict[str, Any]:
        out: dict[str, Any] = self._inner.send_message(**kw)
        if self._dup():
            self._inner.send_message(**kw)
        self._notify(kw["QueueUrl"], float(kw.get("DelaySeconds", 0)))
        return out

    def send_message_batch(self, **kw: Any) -> dict[str, Any]:
        out: dict[str, Any] = self._inner.send_message_batch(**kw)
        if self._dup():
            self._inner.send_message_batch(**kw)
        delays = [float(e.get("DelaySeconds", 0)) for e in kw.get("Entries", [])] or [0.0]
        self._notify(kw["QueueUrl"], min(delays))
        return out


class _EmuMetadata:
    """IMDS as the emulated EC2 answers it (ENIs appear once their attach is visible)."""

    def __init__(self, world: BenchWorld, instance_id: str) -> None:
        self._w = world
        self._iid = instance_id

    def interfaces(self) -> list[AttachedEni]:
        return parse_interfaces(self._w.emu.instance_metadata(self._iid))


class _Agent:
    def __init__(self, strat: Warmpool, node: NodeRt, controller: PoolController, sqs: Any, result_url: str) -> None:
        self.s = strat
        self.node = node
        self.c = controller
        self.sqs = sqs
        self.result_url = result_url
        self.pending: dict[str, float] = {}  # pod -> when its current ADD started (inf: kubelet backoff)
        self._noted: dict[str, float] = {}  # pod -> when the datastore last counted its ADD as waiting
        self._resynced_at = strat.w.now()
        self._grid = math.inf
        """The next time of the ``AGENT_TICK_S`` grid not yet passed (see :meth:`start_ticks`)."""
        self._timer: Any = None
        self._timer_at = math.inf

    def start_ticks(self, start: float) -> None:
        """Periodic ticks on the grid ``start``, ``start + AGENT_TICK_S``, ... Every one of
        them (:attr:`Warmpool.every_tick`), or only those at or after the time the agent is
        next due (:meth:`_reschedule`): a grid tick before it is a no-op, so both give the
        same run (``tests/unit/test_bench_skip_ticks.py``)."""
        w = self.s.w
        if self.s.every_tick:
            w.loop.every(AGENT_TICK_S, self.periodic, start=start)
            return
        self._grid = start
        self._reschedule()

    def _due(self, now: float) -> float:
        """When a grid tick could next do anything, given no event: the controller's
        :meth:`~node_agent.controller.PoolController.next_due`, the periodic resync, and
        :meth:`serve`'s own clocks (a waiting pod's ADD renewed, an address out of cooldown)."""
        due = min(self.c.next_due(now), self._resynced_at + RESYNC_S - NEXT_DUE_MARGIN_S)
        waiting = [pod for pod, started in self.pending.items() if started <= now]
        if waiting:
            renew = self.c.ds.pending_ttl_s / 4
            due = min(due, *(self._noted.get(pod, -math.inf) + renew for pod in waiting))
            free_at = self.c.ds.next_assignable(now)
            if free_at is not None:
                due = min(due, free_at)
            due -= NEXT_DUE_MARGIN_S
        return due

    def _reschedule(self) -> None:
        """After anything reached the agent: its timer at the first grid time at or after it is due."""
        if self.s.every_tick or self._grid == math.inf:
            return
        loop = self.s.w.loop
        now = loop.now()
        while self._grid < now:  # passed, skipped: as ``every`` adds the period to each
            self._grid += AGENT_TICK_S
        due = self._due(now)
        g = self._grid
        while g < due:
            g += AGENT_TICK_S
        if self._timer is not None:
            if self._timer_at <= g:
                return  # an earlier timer looks again when it fires
            loop.cancel(self._timer)
        self._timer_at = g
        self._timer = loop.call_at(g, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = self.s.w.now()
        self._grid = now + AGENT_TICK_S
        if now >= self._due(now):
            self.periodic()  # ends in _reschedule (tick)
        else:
            self._reschedule()  # not due (it moved later since): skipped

    def add(self, pod: str) -> None:
        self._attempt(pod)
        self.tick()

    def _attempt(self, pod: str) -> None:
        """A CNI ADD: it waits up to ``ADD_WAIT_S`` for an address, then fails
        and the kubelet tries again 10–15 s later."""
        w = self.s.w
        started = w.now()
        self.pending[pod] = started
        self.serve()
        if pod in self.pending:
            w.loop.call_later(ADD_WAIT_S, lambda: self._add_timeout(pod, started))

    def _add_timeout(self, pod: str, started: float) -> None:
        w = self.s.w
        if self.pending.get(pod) != started:
            return  # served, deleted, or a later attempt
        self.pending[pod] = float("inf")
        self.s.counts["cni_add_failed"] += 1
        w.loop.call_later(w.kubelet_retry_s(), lambda: self._retry(pod))
        self._reschedule()

    def _retry(self, pod: str) -> None:
        if self.pending.get(pod) == float("inf"):
            self._attempt(pod)
            self._reschedule()

    def delete(self, pod: str) -> None:
        w = self.s.w
        if pod in self.pending:
            del self.pending[pod]
        self._noted.pop(pod, None)
        self.c.ds.release(pod, "eth0", w.now())
        self.tick()

    def serve(self) -> None:
        w = self.s.w
        now = w.now()
        for pod, started in list(self.pending.items()):
            if started > now:
                continue  # between ADDs (kubelet backoff): nothing to hand the address to
            got = self.c.ds.assign(pod, "eth0", f"/var/run/netns/{pod}", now)
            if got is None:
                self._noted[pod] = now
                break
            del self.pending[pod]
            self._noted.pop(pod, None)
            w.pod_ready(self.node, pod, got.ip)
        # ADDs that found nothing stay counted as waiting demand: the datastore
        # keeps them until they are older than its pending TTL. Nothing is free
        # now (the loop above stopped), so a repeated ADD would only renew that
        # time; renewing it well inside the TTL counts exactly the same pods
        # and spares a scan of the pool per waiting pod per tick.
        renew = self.c.ds.pending_ttl_s / 4
        for pod, started in self.pending.items():
            if started <= now and now - self._noted.get(pod, -math.inf) >= renew:
                self.c.ds.assign(pod, "eth0", f"/var/run/netns/{pod}", now)
                self._noted[pod] = now

    def tick(self) -> None:
        w = self.s.w
        now = w.now()
        self.serve()
        for report in self.c.tick(now):
            self.sqs.send_message(QueueUrl=self.s.reports_url[self.node.spec.cluster], MessageBody=report.to_json())
            self.s.counts["reports"] += 1
        self._reschedule()

    def periodic(self) -> None:
        now = self.s.w.now()
        if now - self._resynced_at >= RESYNC_S:
            self._resynced_at = now
            self.c.resync(now)
        self.tick()

    def receive(self) -> None:
        w = self.s.w
        while True:
            out = self.sqs.receive_message(QueueUrl=self.result_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            msgs = out.get("Messages", [])
            if not msgs:
                break
            for m in msgs:
                try:
                    result = parse_result(m["Body"])
                except MessageError:
                    self.s.counts["bad_results"] += 1
                else:
                    self.c.apply_result(result, w.now())
                self.sqs.delete_message(QueueUrl=self.result_url, ReceiptHandle=m["ReceiptHandle"])
        self.tick()


def _told_quotas(acct: Any) -> dict[str, Any]:
    """The stack's ``WARMPOOL_BUCKET_CAPACITY`` and ``WARMPOOL_BUCKET_REFILL`` for an account whose
    scenario says warmpool is told its quotas (``account.quotas_told``)."""
    if not acct.quotas_told or not acct.buckets:
        return {}
    return {
        "bucket_capacity": {a: b.capacity for a, b in acct.buckets.items()},
        "bucket_refill": {a: b.refill_per_s for a, b in acct.buckets.items()},
    }


class _Cluster:
    """One cluster's queues, allocator, event-source mapping and reconciler."""

    def __init__(self, strat: Warmpool, name: str, buckets: MemBuckets) -> None:
        w = strat.w
        self.s = strat
        self.name = name
        raw = strat.sqs.client()
        acct = w.scenario.account
        spec = next(c for c in w.scenario.all_clusters if c.name == name)
        self.ec2 = _CrashingEc2(w.ec2, w.emu.latency_for)
        self.harness = harness.build(
            name,
            emu=w.emu,
            sqs=strat.sqs,
            clock=w.loop.clock,
            certificates=strat.imds.signer.certificate_pem,
            ec2=w.ec2,
            buckets=buckets,
            visibility_s=VISIBILITY_TIMEOUT_S,
            max_receive=5,
            budget_fraction=acct.budget_fraction,
            # every subnet listed, unless the scenario tags subnets for discovery (then none is
            # listed and the allocator discovers by tag, as by default in a real stack)
            allowed_subnets=() if w.scenario.discovers_subnets else tuple(s.id for s in w.scenario.subnets),
            named_placement=spec.named_placement,
            **_scarce_setting(spec.scarce_free),
            custom_network={az: e.model_dump() for az, e in spec.custom_network.items()},
            # the account's real quotas (``account.buckets``) are told only with ``quotas_told``:
            # otherwise warmpool assumes the default table
            **_told_quotas(acct),
        )
        self.reports_url = self.harness.reports_url
        self.settings = self.harness.settings
        self._envs: list[float] = []  # execution environments: busy until
        self._env = -1
        self._cold_s = 0.0
        self._lanes: list[float] = []
        self._active_since: float | None = None
        self.ledger = self.harness.ports.ledger
        self.leases = self.harness.ports.leases
        self.allocator = self.harness.allocator(
            ec2=self.ec2, sqs=_DupSqs(strat.sqs.client(), w, strat.result_sent, self._send_offset)
        )
        self.reconciler = self.harness.reconciler()
        self.esm = EventSourceMapping(
            raw,
            self.reports_url,
            self.handler,
            EsmConfig(
                function_name=f"warmpool-{name}-allocate",
                batch_size=BATCH_SIZE,
                batching_window_s=BATCHING_WINDOW_S,
                maximum_concurrency=MAX_CONCURRENCY,
                function_timeout_s=FUNCTION_TIMEOUT_S,
            ),
            w.loop.clock,
            duration=self.duration,
        )
        self._wake: set[float] = set()
        self._last_requests = 0

    def _start_env(self, now: float) -> None:
        """A warm environment for this invocation, or a new one (cold start)."""
        self._envs = [b for b in self._envs if b > now or now - b <= ENV_IDLE_RECLAIM_S]
        free = [i for i, b in enumerate(self._envs) if b <= now]
        if free:
            self._env, self._cold_s = free[0], 0.0
        else:
            self._envs.append(now)
            self._env, self._cold_s = len(self._envs) - 1, COLD_START_S
            self.s.counts["cold_starts"] += 1
        self._lanes = [0.0] * max(1, self.settings.max_workers)

    def _send_offset(self) -> float:
        """Seconds after the invocation's start at which a message sent now leaves:
        cold start, then the sending node's EC2 chain on the earliest free thread."""
        i = min(range(len(self._lanes)), key=self._lanes.__getitem__) if self._lanes else 0
        if not self._lanes:
            return self._cold_s + self.ec2.chain_s
        self._lanes[i] += self.ec2.chain_s
        self.ec2.chain_s = 0.0
        return self._cold_s + self._lanes[i]

    def handler(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        w = self.s.w
        self._start_env(w.now())
        rate = w.fault_rate("lambda-crash")
        crash = rate > 0 and w.rng.random() < rate
        self.ec2.arm(w.rng.randint(0, 3) if crash else None)
        records = [
            Record(
                message_id=r["messageId"],
                body=r["body"],
                sender_id=str((r.get("attributes") or {}).get("SenderId", "")),
            )
            for r in event["Records"]
        ]
        self.s.counts["invocations"] += 1
        try:
            with self.s.causes.allocator(event["Records"]):
                out = self.allocator.handle_batch(records)
            if crash:
                raise LambdaCrash()
        except LambdaCrash:
            self.s.counts["lambda_crashes"] += 1
            self._last_requests = self.ec2.requests
            self.ec2.arm(None)
            raise RuntimeError("injected fault: the invocation died mid-batch") from None
        self._last_requests = self.ec2.requests
        self.ec2.arm(None)
        return out.batch_item_failures()

    def duration(self, batch: list[dict[str, Any]], outcome: Any) -> float:
        busiest = max(self._lanes, default=0.0) + self.ec2.chain_s
        d = INVOKE_BASE_S + self._cold_s + busiest
        if 0 <= self._env < len(self._envs):
            self._envs[self._env] = self.s.w.now() + d
        return d

    def pollers(self, now: float) -> int:
        """Concurrent invocations the ESM's pollers allow now (5, then +300 a minute)."""
        cap = self.esm.config.maximum_concurrency
        if self._active_since is None:
            return min(cap, POLLERS_START)
        return min(cap, POLLERS_START + int(POLLERS_PER_S * (now - self._active_since)))

    def kick(self, at: float) -> None:
        w = self.s.w
        at = max(at, w.now())
        if at in self._wake:
            return
        self._wake.add(at)

        def fire() -> None:
            self._wake.discard(at)
            now = w.now()
            if self._active_since is None:
                self._active_since = now
            self.esm.tick(now, max_invocations=0)  # complete what is due first
            allowed = self.pollers(now) - self.esm.in_flight
            started = self.esm.tick(now, max_invocations=max(0, allowed))
            nxt = self.esm.next_wakeup(now)
            if nxt is None and self.esm.in_flight == 0:
                self._active_since = None  # drained: the pollers scale back to five
            elif allowed <= started and self.pollers(now) < self.esm.config.maximum_concurrency:
                # poller-limited: look again when the next poller comes (or an invocation ends)
                soon = now + 1.0 / POLLERS_PER_S
                nxt = soon if nxt is None or nxt <= now else min(nxt, soon)
            if nxt is not None:
                if nxt <= w.now() and not started:
                    # A wake-up due now that started nothing: never spin at one
                    # instant of virtual time; step past it.
                    nxt = w.now() + 1e-3
                self.kick(nxt)

        w.loop.call_at(at, fire)


class Warmpool:
    """The production agent + allocator (see the module docstring)."""

    name = "warmpool"
    every_tick = False
    """Tick every agent at every ``AGENT_TICK_S`` (True), or skip the grid ticks before it is
    next due (False, the default: the same run, at a cost that grows with the work, not
    with agents × virtual time)."""

    def __init__(self, world: BenchWorld) -> None:
        self.w = world
        self.counts: Counter[str] = Counter()
        self.causes = CallCauses(world.emu, world.deleted_before)
        """Where the accepted mutating calls go (``calls_by_cause`` of the bench's JSON)."""
        world.ec2.on_mutating = self.causes.accepted
        world.calls_by_cause = self.causes.counts
        self.sqs = FastSqs(world.loop.clock)
        acct = world.scenario.account
        fraction = acct.budget_fraction
        told = acct.buckets if acct.quotas_told else {}

        def spec_of(action: str) -> BucketSpec:
            # what warmpool assumes: the default table whatever the account really has, unless
            # told the account's quotas (``account.quotas_told``, as the stack's settings would)
            return told.get(action, spec_for(action)).scaled(fraction)

        self.buckets = MemBuckets(spec_of)  # one account: every cluster shares these
        # Agents carry identities signed by this IMDS's test key; the allocators verify them.
        self.imds = Imds(world.emu, signer=IdentitySigner())
        self._identities: dict[str, Any] = {}
        self.clusters = {c.name: _Cluster(self, c.name, self.buckets) for c in world.scenario.all_clusters}
        self.reports_url = {k: c.reports_url for k, c in self.clusters.items()}
        self.agents: dict[str, _Agent] = {}
        self.by_result_url: dict[str, _Agent] = {}
        self._rng = random.Random(f"{world.scenario.seed}/agents")

    def start(self) -> None:
        self.w.schedule(self._join, self._add, self._delete)
        for c in self.clusters.values():
            self.w.loop.every(RECONCILE_EVERY_S, functools.partial(self._reconcile, c), start=RECONCILE_EVERY_S)

    def _reconcile(self, c: _Cluster) -> None:
        try:
            with self.causes.reconciler():
                c.reconciler.run()
        except Exception as exc:  # a failed run is retried by the next schedule
            self.counts[f"reconcile_error:{type(exc).__name__}"] += 1

    def result_sent(self, url: str, delay: float) -> None:
        agent = self.by_result_url.get(url)
        if agent is not None:
            self.w.loop.call_later(delay + RESULT_DELIVERY_S, agent.receive)
            return
        for c in self.clusters.values():
            if url == c.reports_url:
                c.kick(self.w.now() + delay)

    def _identity(self, instance_id: str) -> Any:
        """The instance's signed identity, signed once (IMDS serves the same bytes for its life)."""
        got = self._identities.get(instance_id)
        if got is None:
            got = self._identities[instance_id] = self.imds.identity(instance_id)
        return got

    def _join(self, node: NodeRt) -> None:
        w = self.w
        spec = node.spec
        env = spec.env
        sqs = _DupSqs(self.sqs.client(sender_id=f"AROAEXAMPLE:{node.instance_id}"), w, self._agent_sent)
        result_url = sqs.create_queue(QueueName=names.result_queue(spec.cluster, node.instance_id))["QueueUrl"]
        ds = Datastore(cooldown_s=env.IP_COOLDOWN_PERIOD)
        controller = PoolController(
            NodeIdentity(
                cluster=spec.cluster,
                node=spec.name,
                instance_id=node.instance_id,
                instance_type=spec.instance_type,
                availability_zone=spec.az,
            ),
            node.limits,
            replace(
                env.pool_config(), custom_networking=bool(self.w.scenario.cluster_named(spec.cluster).custom_network)
            ),
            ds,
            Timing(cooldown_s=env.IP_COOLDOWN_PERIOD),
            metadata=_EmuMetadata(w, node.instance_id),
            mtu=env.AWS_VPC_ENI_MTU,
            signed_identity=functools.partial(self._identity, node.instance_id),
        )
        agent = _Agent(self, node, controller, sqs, result_url)
        self.agents[spec.name] = agent
        self.by_result_url[result_url] = agent
        # A node that boots with addresses on its primary ENI (``launch_pool``) starts its agent as
        # production does on a first start: no checkpoint and no pod wired on the host, so
        # ``start(checkpoint_lost=True, first_start=True)`` (``node_agent.agent._rebuild``, "empty"):
        # what IMDS alone shows is held as offered, of unknown origin, until the allocator confirms
        # the first start, and then it is the node's pool (docs/agent.md). Without a launch pool
        # the bench keeps its plain start, as the shipped scenarios were measured (burst-200 gave
        # the same run either way: nothing but the primary's own address is there to hold).
        launch = bool(spec.launch_units)
        controller.start(w.now(), checkpoint_lost=launch, first_start=launch)  # WARMPOOL_ADOPT_LAUNCH_POOL=true
        agent.tick()
        agent.start_ticks(w.now() + self._rng.uniform(0, AGENT_TICK_S))

    def _agent_sent(self, url: str, delay: float) -> None:
        for c in self.clusters.values():
            if url == c.reports_url:
                c.kick(self.w.now() + delay)

    def _add(self, node: NodeRt, pod: str) -> None:
        self.agents[node.spec.name].add(pod)

    def _delete(self, node: NodeRt, pod: str) -> None:
        self.agents[node.spec.name].delete(pod)

    def busy(self) -> bool:
        """Reports in flight, or ENIs of a warmpool cluster left detached: the reconciler's GC
        deletes those (marked, then ``gc_age_s`` later), and the run is not over until it has.
        Before, a run settled 240 s after the GC's mark, before its 300 s age, and counted every
        ENI a scale-down detached as leaked (118 over 200 random scenarios, all deleted later)."""
        if any(c.esm.in_flight for c in self.clusters.values()):
            return True
        mine = set(self.clusters)
        return any(
            e.status == "available" and e.tags.get(names.TAG_CLUSTER_NAME) in mine for e in self.w.emu.enis.values()
        )

    def notes(self) -> list[str]:
        return [f"{k}: {v}" for k, v in sorted(self.counts.items())]


def _scarce_setting(scarce_free: int | None) -> dict[str, Any]:
    """``WARMPOOL_SCARCE_FREE`` when the scenario sets it (else the allocator's default)."""
    return {} if scarce_free is None else {"scarce_free": scarce_free}
