"""``warmpool``: the production logic on the bench's event loop.

Per node, the agent's :class:`node_agent.controller.PoolController` and
:class:`node_agent.datastore.Datastore` (IMDS answered by the emulated EC2;
the host side — netlink — is not applied). Reports go through the fast SQS
(:mod:`sim.sqs`) to the reports queue; the event-source mapping
(:mod:`sim.esm`) invokes :class:`functions.allocator.Allocator` with the
in-memory stores (:mod:`sim.memstores`, buckets shared by every cluster of the
account); results come back on each node's result queue. The reconciler runs
every minute. Only AWS, the kernel and the clock are stand-ins.

Wiring assumptions (the bench's, not the product's):

* The agent ticks when a pod comes or goes, when a result arrives, and every
  ``AGENT_TICK_S`` otherwise; a pod whose ADD found nothing is retried (as the
  kubelet would) at every tick and after every result.
* As the production agent's main loop (``node_agent.agent``,
  ``WARMPOOL_RESYNC_S``), the controller reconciles with IMDS every
  ``RESYNC_S``: addresses EC2 attached but whose result never arrived (the
  invocation died after its EC2 call) are found there.
* A result is received by its node ``RESULT_DELIVERY_S`` after it is sent
  (the agent long-polls its queue).
* An invocation lasts ``INVOKE_BASE_S`` plus the EC2 latency of the calls it
  made, spread over the allocator's ``max_workers`` threads; its effects
  happen at its start (the ESM deletes or returns its messages at its end).
* Faults: ``lambda-crash`` — an invocation dies (with probability ``rate``)
  after 0–3 of its mutating EC2 calls, failing its whole batch;
  ``duplicate-delivery`` — a sent message (report or result) is delivered
  twice with probability ``rate``.
"""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from sim.bench.world import NodeRt, World
from warmpool import names

try:  # the parts other engineers own; the strategy says so if one is missing
    from functions.allocator import Allocator, Record, serial_map
    from functions.reconciler import Reconciler
    from functions.settings import Settings
    from node_agent.config import Timing
    from node_agent.controller import AttachedEni, NodeIdentity, PoolController
    from node_agent.datastore import Datastore, EniInfo
    from sim.esm import EsmConfig, EventSourceMapping
    from sim.iid import IdentitySigner
    from sim.imds import Imds
    from sim.memstores import MemBuckets, MemLeases, MemLedger
    from sim.sqs import FastSqs

    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # pragma: no cover - only while parts are landing
    _IMPORT_ERROR = f"{exc}"

from warmpool.buckets import BucketSpec, spec_for
from warmpool.messages import MessageError, parse_result
from warmpool.pool import PoolConfig

AGENT_TICK_S = 2.0
RESYNC_S = 60.0
"""The production agent's default ``WARMPOOL_RESYNC_S``."""
RESULT_DELIVERY_S = 0.05
INVOKE_BASE_S = 0.05
RECONCILE_EVERY_S = 60.0
BATCH_SIZE = 100
BATCHING_WINDOW_S = 1.0
MAX_CONCURRENCY = 10
FUNCTION_TIMEOUT_S = 30.0
VISIBILITY_TIMEOUT_S = 180


class LambdaCrash(BaseException):
    """The invocation dies (not an EC2 error: nothing in the allocator catches it)."""


class _CrashingEc2:
    """The allocator's EC2 client; may kill the invocation after a mutating call."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.crash_after: int | None = None
        self.mutating = 0
        self.requests = 0

    def arm(self, crash_after: int | None) -> None:
        self.crash_after = crash_after
        self.mutating = 0
        self.requests = 0

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        fn = getattr(self._inner, name)
        mutating = not name.startswith(("describe_", "get_", "list_"))

        def call(**kwargs: Any) -> dict[str, Any]:
            self.requests += 1
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

    def __init__(self, inner: Any, world: World, on_result: Callable[[str, float], None] | None = None) -> None:
        self._inner = inner
        self._w = world
        self._on_result = on_result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _dup(self) -> bool:
        rate = self._w.fault_rate("duplicate-delivery")
        return rate > 0 and self._w.rng.random() < rate

    def _notify(self, url: str, delay: float = 0.0) -> None:
        if self._on_result is not None:
            self._on_result(url, delay)

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

    def __init__(self, world: World, instance_id: str) -> None:
        self._w = world
        self._iid = instance_id

    def interfaces(self) -> list[AttachedEni]:
        md = self._w.emu.instance_metadata(self._iid)
        out = []
        for mac, d in md["network"]["interfaces"]["macs"].items():
            local = d["local-ipv4s"].split("\n")
            prefixes = [p for p in d.get("ipv4-prefix", "").split("\n") if p]
            info = EniInfo(
                eni_id=d["interface-id"],
                device_index=int(d["device-number"]),
                network_card=int(d["network-card"]),
                mac=mac,
                primary_ip=local[0],
                subnet_id=d["subnet-id"],
                subnet_cidr=d["subnet-ipv4-cidr-block"],
            )
            out.append(AttachedEni(info, local[1:], prefixes))
        out.sort(key=lambda a: (a.info.network_card, a.info.device_index))
        return out


class _Agent:
    def __init__(self, strat: Warmpool, node: NodeRt, controller: PoolController, sqs: Any, result_url: str) -> None:
        self.s = strat
        self.node = node
        self.c = controller
        self.sqs = sqs
        self.result_url = result_url
        self.pending: dict[str, None] = {}
        self._tick_at: float | None = None
        self._resynced_at = strat.w.now()

    def add(self, pod: str) -> None:
        self.pending[pod] = None
        self.serve()
        self.tick()

    def delete(self, pod: str) -> None:
        w = self.s.w
        if pod in self.pending:
            del self.pending[pod]
        self.c.ds.release(pod, "eth0", w.now())
        self.tick()

    def serve(self) -> None:
        w = self.s.w
        now = w.now()
        for pod in list(self.pending):
            got = self.c.ds.assign(pod, "eth0", f"/var/run/netns/{pod}", now)
            if got is None:
                break
            del self.pending[pod]
            w.pod_ready(self.node, pod, got.ip)
        if self.pending:
            # the kubelet retries; keep the ADDs that found nothing counted as demand
            for pod in list(self.pending)[1:]:
                self.c.ds.assign(pod, "eth0", f"/var/run/netns/{pod}", now)

    def tick(self) -> None:
        w = self.s.w
        now = w.now()
        self.serve()
        for report in self.c.tick(now):
            self.sqs.send_message(QueueUrl=self.s.reports_url[self.node.spec.cluster], MessageBody=report.to_json())
            self.s.counts["reports"] += 1

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


class _Cluster:
    """One cluster's queues, allocator, event-source mapping and reconciler."""

    def __init__(self, strat: Warmpool, name: str, buckets: MemBuckets) -> None:
        w = strat.w
        self.s = strat
        self.name = name
        raw = strat.sqs.client()
        dlq = raw.create_queue(QueueName=names.reports_dlq(name))["QueueUrl"]
        dlq_arn = raw.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.reports_url = raw.create_queue(
            QueueName=names.reports_queue(name),
            Attributes={
                "VisibilityTimeout": str(VISIBILITY_TIMEOUT_S),
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}),
            },
        )["QueueUrl"]
        acct = w.scenario.account
        self.settings = Settings(
            cluster=name,
            reports_queue_url=self.reports_url,
            dlq_url=dlq,
            result_queue_prefix=names.result_queue_prefix(name),
            budget_fraction=acct.budget_fraction,
            allowed_subnets=tuple(s.id for s in w.scenario.subnets),
            bucket_capacity={k: v.capacity for k, v in acct.buckets.items()},
            bucket_refill={k: v.refill_per_s for k, v in acct.buckets.items()},
            identity_certificates=strat.imds.signer.certificate_pem,
            account=w.emu.owner,
            region=w.emu.config.region,
        )
        self.ec2 = _CrashingEc2(w.ec2)
        self.ledger = MemLedger()
        self.leases = MemLeases()
        self.allocator = Allocator(
            ec2=self.ec2,
            sqs=_DupSqs(strat.sqs.client(), w, strat.result_sent),
            buckets=buckets,
            ledger=self.ledger,
            leases=self.leases,
            clock=w.loop.clock,
            settings=self.settings,
            mapper=serial_map,
        )
        self.reconciler = Reconciler(
            ec2=w.ec2,
            sqs=strat.sqs.client(),
            buckets=buckets,
            ledger=self.ledger,
            leases=self.leases,
            clock=w.loop.clock,
            settings=self.settings,
        )
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

    def handler(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        w = self.s.w
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
        lat = self.s.w.scenario.ec2.api_latency_s
        return INVOKE_BASE_S + self._last_requests * lat / max(1, self.settings.max_workers)

    def kick(self, at: float) -> None:
        w = self.s.w
        at = max(at, w.now())
        if at in self._wake:
            return
        self._wake.add(at)

        def fire() -> None:
            self._wake.discard(at)
            started = self.esm.tick(w.now())
            nxt = self.esm.next_wakeup(w.now())
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

    def __init__(self, world: World) -> None:
        if _IMPORT_ERROR is not None:
            from sim.bench.runner import StrategyUnavailable

            raise StrategyUnavailable(f"a part of warmpool has not landed yet: {_IMPORT_ERROR}")
        self.w = world
        self.counts: Counter[str] = Counter()
        self.sqs = FastSqs(world.loop.clock)
        specs = world.scenario.bucket_specs()
        fraction = world.scenario.account.budget_fraction

        def spec_of(action: str) -> BucketSpec:
            return spec_for(action, specs).scaled(fraction)

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
            self.w.loop.every(RECONCILE_EVERY_S, lambda c=c: self._reconcile(c), start=RECONCILE_EVERY_S)

    def _reconcile(self, c: _Cluster) -> None:
        try:
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
            PoolConfig(
                warm_ip=env.WARM_IP_TARGET,
                minimum_ip=env.MINIMUM_IP_TARGET,
                warm_eni=env.WARM_ENI_TARGET,
                warm_prefix=env.WARM_PREFIX_TARGET,
                max_eni=env.MAX_ENI,
                prefix_mode=env.ENABLE_PREFIX_DELEGATION,
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
        controller.start(w.now())
        agent.tick()
        w.loop.every(AGENT_TICK_S, agent.periodic, start=w.now() + self._rng.uniform(0, AGENT_TICK_S))

    def _agent_sent(self, url: str, delay: float) -> None:
        for c in self.clusters.values():
            if url == c.reports_url:
                c.kick(self.w.now() + delay)

    def _add(self, node: NodeRt, pod: str) -> None:
        self.agents[node.spec.name].add(pod)

    def _delete(self, node: NodeRt, pod: str) -> None:
        self.agents[node.spec.name].delete(pod)

    def busy(self) -> bool:
        return any(c.esm.in_flight for c in self.clusters.values())

    def notes(self) -> list[str]:
        return [f"{k}: {v}" for k, v in sorted(self.counts.items())]
