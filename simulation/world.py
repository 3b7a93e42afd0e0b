"""One seed's world: the real allocator, reconciler and agents against the
emulated AWS, in virtual time, with the faults of the seed's schedule.

What is real: :class:`functions.allocator.Allocator` (driven by the emulated
event-source mapping, :class:`emulated.esm.EventSourceMapping`),
:class:`functions.reconciler.Reconciler`, and per node the agent's
:class:`~node_agent.datastore.Datastore` (with its checkpoint),
:class:`~node_agent.controller.PoolController` and
:class:`~node_agent.cniserver.CniService` (ADD/DEL/CHECK; GC and hostile
input go through the real plugin, :func:`node_agent.cni.run`, and the real
socket server). What stands in: EC2 (:mod:`emulated.ec2`), SQS (:mod:`emulated.sqs`),
the ledger, leases and buckets (:mod:`emulated.memstores`; the ledger's batched
read goes through :class:`functions.stores.DynamoLedger` over a small
DynamoDB stand-in so UnprocessedKeys can be injected), IMDS (a per-node
lagging view of EC2), the pod wiring (recorded) and the container runtime.

The parts: :mod:`simulation.base` (settings and the exceptions that stop a part),
:mod:`simulation.node` (a node: its agent and the host's stand-ins),
:mod:`simulation.clients` (the functions' clients, with the schedule's faults),
:mod:`simulation.events` (the schedule's events applied), :mod:`simulation.checks`
(the invariants) and :mod:`simulation.hostile` (issue 12's hostile nodes); this
module holds the world's state, wires them, delivers messages and invocations,
and runs the loop. The run stops at the first violation.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from emulated import harness
from emulated.clock import EventLoop, VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.ec2.errors import Ec2Error
from emulated.esm import EsmConfig, EventSourceMapping
from emulated.iam import PolicyPrincipal, load_snapshot, snapshot_principals
from emulated.iid import IdentitySigner
from emulated.imds import Imds
from emulated.lambda_runtime import LambdaCrash
from emulated.memstores import MemFlips
from emulated.sqs import FastSqs
from functions.allocator import Record
from node_agent.datastore import HELD_OFFERS
from node_agent.records import UNKNOWN_HOLDER
from simulation import checks, events, hostile, subnets
from simulation import kinds as k
from simulation.base import (
    AGENT_EVERY_S,
    CLUSTER,
    ESM_BATCH_SIZE,
    ESM_CONCURRENCY,
    ESM_EVERY_S,
    FUNCTION_TIMEOUT_S,
    GC_AGE_S,
    INTAKE_PASS,
    OVERRUN_LIMIT_S,
    RECONCILE_EVERY_S,
    REPORTS_VISIBILITY_S,
    SUBNET_CIDR,
    T0,
    TIMING,
    Stop,
)
from simulation.clients import (
    AllocEc2,
    AllocSqs,
    InvClock,
    Invocation,
    ReconcilerEc2,
    ReconcilerSqs,
    SimLedger,
    TrackedLeases,
)
from simulation.node import SimAgent
from simulation.schedule import QUIET_S, SeedPlan, quiet_from
from warmpool import names
from warmpool.buckets import DEFAULT_SPECS, BucketSpec
from warmpool.limits import KNOWN_TYPES
from warmpool.messages import Assigned, Attached, MessageError, parse_result


@functools.cache
def _signer() -> IdentitySigner:
    """One test key per process (making one costs a few milliseconds)."""
    return IdentitySigner()


IAM_POLICIES = Path(__file__).resolve().parent / "iam_policies.json"
"""The EC2 statements of the allocator's, the reconciler's and the agent's roles, as the CDK app
synthesizes them for the default configuration (written by ``python -m infra.policy_snapshot``;
``tests/infra/test_policy_snapshot.py`` fails when it differs from a fresh synth)."""


@functools.cache
def _policies(variant: str | None = None) -> dict[str, Any]:
    return load_snapshot(IAM_POLICIES if variant is None else IAM_POLICIES.with_name(f"iam_policies_{variant}.json"))


def stack_roles(
    emu: Ec2Emulator, vpc: str, subnet: str, *, variant: str | None = None, custom: tuple[str, ...] = ()
) -> dict[str, PolicyPrincipal]:
    """The stack's roles as principals of ``emu``: the snapshot's statements for its account and
    region, the VPC and subnet the stack was configured with being this world's (their ids are
    drawn from the seed). ``variant``: another configuration's snapshot (issue 24's subnet worlds,
    :mod:`simulation.subnets`: pod subnets by discovery, no subnet ids; ``custom`` the world's
    custom-networking subnets, named in the order of the snapshot's map, one it does not use
    renamed to a subnet that does not exist)."""
    snapshot = _policies(variant)
    context = snapshot["context"]
    if context["cluster"] != CLUSTER:
        raise ValueError(f"{IAM_POLICIES} is for cluster {context['cluster']!r}, not {CLUSTER!r}")
    ids = {str(context["vpc_id"]): vpc}
    if "subnet_ids" in context:
        (subnet_id,) = str(context["subnet_ids"]).split(",")
        ids[subnet_id] = subnet
    mapped = [s for z in json.loads(context.get("custom_network") or "{}").values() for s in z["subnets"]]
    for i, placeholder in enumerate(mapped):
        ids[placeholder] = custom[i] if i < len(custom) else f"subnet-{i:017x}"
    return snapshot_principals(
        snapshot,
        partition="aws",
        region=emu.config.region,
        account=emu.owner,
        ids=ids,
        record=False,
    )


@dataclass
class SeedOutcome:
    seed: int
    events: int
    faults: Counter[str]
    violations: list[tuple[str, str]]
    virtual_s: float


class SimWorld:
    def __init__(self, plan: SeedPlan, mutate: Callable[[SimWorld], None] | None = None) -> None:
        self.plan = plan
        self.loop = EventLoop(VirtualClock(T0))
        self.faults: Counter[str] = Counter()
        self.violations: list[tuple[str, str]] = []
        self.active: dict[str, Any] = {}
        self._rngs: dict[str, random.Random] = {}
        fraction = plan.quota_fraction
        real = (
            {
                a: BucketSpec(capacity=max(1.0, s.capacity * fraction), refill_per_s=s.refill_per_s * fraction)
                for a, s in DEFAULT_SPECS.items()
            }
            if fraction < 1
            else {}
        )
        if real:
            self.faults["quota-below"] += 1
        self.emu = Ec2Emulator(
            self.loop.clock, Ec2Config(buckets=real, attach_delay_s=2.0, detach_delay_s=1.0), seed=plan.seed
        )
        vpc = self.emu.add_vpc("10.0.0.0/16")
        self.subnet = self.emu.add_subnet(
            az="us-east-1a", cidr=SUBNET_CIDR, vpc_id=vpc, tags={names.cluster_tag_key(CLUSTER): "shared"}
        )
        self.nets = subnets.build(self.emu, vpc, self.subnet, plan.seed, plan.events)
        bursts = [e for e in plan.events if isinstance(e, k.AgentBursts)]
        self.agent_timing = replace(TIMING, burst_window_s=bursts[0].window if bursts else 0.0)
        """The agents' clocks: bursts on only where the seed draws ``agent-bursts`` (issue 25)."""
        launch = [e for e in plan.events if isinstance(e, k.LaunchPool)]
        self.launch_units = launch[0].units if launch else 0
        """What every node boots with on its primary ENI (``launch-pool``, issue 25): addresses, or
        /28s in prefix mode; 0: none."""
        """Issue 24's pod subnets (:mod:`simulation.subnets`): the nodes' own alone, unless the
        plan draws a subnet world, which also picks the stack variant below."""
        self.roles = stack_roles(self.emu, vpc, self.subnet, variant=self.nets.variant, custom=self.nets.custom)
        """The allocator's, the reconciler's and the agents' roles (``allocate``, ``reconcile``,
        ``agent``): their EC2 clients call as them, and a refusal is a violation (``iam-denied``).
        Set-up and fault injection call as the administrator (no principal)."""
        self.sqs = FastSqs(self.loop.clock)
        self.signer_imds = Imds(self.emu, signer=_signer())
        """Signs each instance's identity document; agents carry it in every report and the
        allocator verifies it against this signer's certificate (``identity_verification`` is
        left at its default, ``required``: fail-closed)."""
        raw = self.sqs.client()
        self.clock_inv = InvClock(self.loop.clock)
        self.ledger = SimLedger(self)
        self.leases = TrackedLeases()
        self.flips = MemFlips()
        """The allocator's shared flip histories (who is damped, and until when)."""
        self.harness = harness.build(
            CLUSTER,
            emu=self.emu,
            sqs=self.sqs,
            clock=self.clock_inv,
            certificates=self.signer_imds.signer.certificate_pem,
            ledger=self.ledger,
            leases=self.leases,
            flips=self.flips,
            visibility_s=REPORTS_VISIBILITY_S,
            max_receive=5,
            gc_age_s=GC_AGE_S,
            allocate_timeout_s=FUNCTION_TIMEOUT_S,
            **self.nets.settings(),
        )
        # lease TTL and deadline margin derived from the function timeout, as in the stack
        self.settings = self.harness.settings
        self.nets.hold_s = subnets.hold_for_check(self.settings.placement_release_hold_s, plan.events)
        self.reports_url = self.harness.reports_url
        self.dlq_url = self.harness.dlq_url
        self.buckets = self.harness.ports.buckets
        self.recorded: dict[str, tuple[str, int]] = {}
        self.invocations: list[Invocation] = []
        self.skew_taken: set[str] = set()
        """Invocations whose lease another container took on a clock ahead (``lambda-clock-skew``)."""
        self.alloc_ec2 = AllocEc2(self)
        self.allocator = self.harness.allocator(ec2=self.alloc_ec2, sqs=AllocSqs(self))
        self._handle_kw = set(inspect.signature(self.allocator.handle_batch).parameters)
        self.reconciler_ec2 = ReconcilerEc2(self)
        self.reconciler = self.harness.reconciler(
            ec2=self.reconciler_ec2, sqs=ReconcilerSqs(self), clock=self.loop.clock
        )
        self.esm = EventSourceMapping(
            raw,
            self.reports_url,
            self.handler,
            EsmConfig(
                function_name="warmpool-dst-allocate",
                batch_size=ESM_BATCH_SIZE,
                maximum_concurrency=ESM_CONCURRENCY,
                function_timeout_s=FUNCTION_TIMEOUT_S,
            ),
            self.clock_inv,
            duration=lambda batch, out: 0.2,
        )
        self.agents: dict[str, SimAgent] = {}
        self.by_url: dict[str, SimAgent] = {}
        self.by_iid: dict[str, SimAgent] = {}
        self.terminated: dict[str, float] = {}  # instance -> when
        self._saturated: list[tuple[float, float]] = []  # spans the intake ran at capacity
        self._saturated_since: float | None = None
        self._deleted_seen = 0
        self.pushed: dict[str, int] = {}  # node -> highest in_reply_to of a result with EC2 effects
        self.detached_since: dict[str, float] = {}
        self.arm_terminate: set[str] = set()
        self.overlap_done: set[str] = set()
        self.events_run = 0
        self.invocation_count = 0
        self.version = 0
        """Bumped by every change the checks look at (checkpoint saves, pods, EC2 calls)."""
        self.checked: tuple[Any, ...] = ()
        self.sockdir: str | None = None
        # issue 12's hostile nodes (simulation.hostile)
        self.last_report: dict[str, str] = {}  # instance -> the last report its agent sent
        self.forged: set[tuple[str, int]] = set()  # (instance, seq) of every crafted report
        self.crafted_bodies: set[str] = set()  # every hostile report (left out of the DLQ check)
        self.churners: list[hostile.Churner] = []
        self.calls_by_iid: dict[str, list[tuple[float, str]]] = {}  # the allocator's mutating EC2 calls
        self.sprayed: set[str] = set()  # node names a node sprayed
        self.outsider_sqs = self.sqs.client(sender_id="AROAEXAMPLE:outsider")
        for name, itype in plan.nodes:
            self.join(name, itype)
        if mutate is not None:
            mutate(self)

    # --- helpers
    def now(self) -> float:
        return self.loop.now()

    def rng(self, purpose: str) -> random.Random:
        r = self._rngs.get(purpose)
        if r is None:
            r = self._rngs[purpose] = random.Random(f"{self.plan.seed}/{purpose}")
        return r

    def fault(self, kind: str, n: int = 1) -> None:
        self.faults[kind] += n

    def violation(self, invariant: str, detail: str) -> None:
        self.violations.append((invariant, f"t={self.now() - T0:.1f}s: {detail}"))
        if threading.current_thread() is not threading.main_thread():
            return  # the CNI socket server's thread: the plugin call's caller stops the run
        raise Stop()

    def join(self, name: str, itype: str, efa_only: tuple[tuple[int, int], ...] = ()) -> SimAgent:
        tags = {names.cluster_tag_key(CLUSTER): "owned", "Name": name}
        # Not a custom-networking node's: its pods never use the primary ENI (the bench refuses
        # the pair too: a launch pool there is addresses no pod can have)
        custom = name in self.nets.custom_nodes
        units = 0 if custom else min(self.launch_units, KNOWN_TYPES[itype].slots_per_eni)
        n_pfx, n_sec = (units, 0) if self.plan.prefix_mode else (0, units)
        try:
            iid = self.emu.run_instance(
                itype, subnet_id=self.subnet, tags=tags, efa_only=efa_only, secondary_count=n_sec, prefix_count=n_pfx
            )
        except Ec2Error as err:
            # the subnet cannot give the launch pool (a subnet world's small or broken subnet):
            # launched without one, as a launch template without it would
            self.fault(f"launch-pool:refused:{err.code}")
            iid = self.emu.run_instance(itype, subnet_id=self.subnet, tags=tags, efa_only=efa_only)
        a = SimAgent(self, name, iid, itype)
        a.efa_only = efa_only
        self.agents[name] = a
        self.by_url[a.result_url] = a
        self.by_iid[iid] = a
        self.loop.every(AGENT_EVERY_S, a.periodic, start=self.now() + self.rng("jitter").uniform(0, AGENT_EVERY_S))
        return a

    def iid_of_call(self, kw: dict[str, Any]) -> str | None:
        """The instance an EC2 call of the allocator acts for: the instance it names, the one
        the ENI it names is attached to (or was created for: warmpool's instance-id tag), the
        ENI of the attachment it names, the ENI it tags, or the instance a new ENI is tagged for."""
        iid = kw.get("InstanceId")
        if iid:
            return str(iid)
        eni_id = kw.get("NetworkInterfaceId")
        if not eni_id and kw.get("Resources"):
            eni_id = kw["Resources"][0]
        e = self.emu.enis.get(eni_id) if eni_id else None
        if e is None and kw.get("AttachmentId"):
            e = next(
                (
                    x
                    for x in self.emu.enis.values()
                    if x.attachment is not None and x.attachment.id == kw["AttachmentId"]
                ),
                None,
            )
        if e is not None:
            if e.attachment is not None:
                return e.attachment.instance_id
            return e.tags.get(names.TAG_INSTANCE_ID) or None
        for spec in kw.get("TagSpecifications") or ():
            for t in spec.get("Tags", ()):
                if t.get("Key") == names.TAG_INSTANCE_ID:
                    return str(t["Value"])
        return None

    def node_of_iid(self, iid: str | None) -> str | None:
        a = self.by_iid.get(iid) if iid else None
        return a.name if a is not None else None

    def node_of_call(self, kw: dict[str, Any]) -> str | None:
        return self.node_of_iid(self.iid_of_call(kw))

    def ledger_row(self, a: SimAgent) -> dict[str, Any] | None:
        """The agent's ledger row: keyed by its instance id (``node`` is only a label)."""
        return self.ledger._items.get((CLUSTER, a.iid))

    # --- messages
    def deliver(self, client: Any, kw: dict[str, Any]) -> dict[str, Any]:
        """Send with the schedule's SQS faults: a delay, duplicates (each with its own delay)."""
        copies = 1
        dup = self.active.get("sqs-duplicate")
        if dup and self.rng("sqs").random() < dup[0]:
            copies = dup[1]
            self.fault(f"sqs-duplicate-x{copies}")
        out: dict[str, Any] = {}
        for _ in range(copies):
            one = dict(kw)
            max_delay = self.active.get("sqs-delay")
            if max_delay:
                d = int(self.rng("sqs").uniform(0, max_delay))
                if d:
                    self.fault("sqs-delay")
                    one["DelaySeconds"] = min(900, int(one.get("DelaySeconds", 0)) + d)
            out = client.send_message(**one)
        return out

    def crafted_only(self, iid: str, seq: int) -> bool:
        """Only a crafted report carries this seq: the instance's own agent never sent it. A
        crafted seq is a millisecond clock reading, as the agent's is, so the two can be one
        (10,000-seed run, seed 1621: an agent and a forged report both at seq ...291300, the
        agent's report served and taken for the forged one's)."""
        if (iid, seq) not in self.forged:
            return False
        a = self.by_iid.get(iid)
        return a is None or all(s != seq for _, s in a.sent)

    def send_report(self, agent: SimAgent, body: str) -> None:
        self.deliver(agent.sqs, {"QueueUrl": self.reports_url, "MessageBody": body})

    def on_message(self, url: str, body: str) -> None:
        """Every message the allocator sends: results are checked (a stale report acted on)."""
        agent = self.by_url.get(url)
        if agent is None:
            return
        try:
            res = parse_result(body)
        except MessageError:
            self.violation("bad-result", f"allocator sent an unparseable result: {body[:200]}")
            return
        subnets.note_outcome(self, "result", None, scarce=bool(res.scarce))
        if self.crafted_only(res.instance_id, res.in_reply_to):
            self.violation(
                "forged-served",
                f"{res.node} ({res.instance_id}): a result in reply to crafted report "
                f"{res.in_reply_to}: {[a.kind for a in res.actions]}",
            )
        granted = frozenset(
            k for act in res.actions if isinstance(act, (Assigned, Attached)) for k in [*act.ips, *act.prefixes]
        )
        if granted:
            agent.grants_pushed.append((self.now(), granted))
        if any(a.kind in ("attached", "assigned", "released", "deleted") for a in res.actions):
            last = self.pushed.get(res.instance_id, -1)
            if res.in_reply_to < last:
                self.violation(
                    "stale-report-served",
                    f"{res.node} ({res.instance_id}): report {res.in_reply_to} "
                    f"acted on after report {last} had been (kinds {[a.kind for a in res.actions]})",
                )
            self.pushed[res.instance_id] = max(last, res.in_reply_to)

    # --- the allocator
    def handler(self, event: dict[str, Any], ctx: Any) -> dict[str, Any]:
        # the invocation's id (the allocator's lease owner) from the seed, not the
        # context's random request id: violation messages replay word for word
        self.invocation_count += 1
        return self._invoke(event["Records"], f"inv-{self.plan.seed}-{self.invocation_count}", ctx)

    def _container_offset(self, forced: float | None) -> float:
        """The clock offset of the container an invocation runs in: under ``lambda-clock-skew``
        one of the window's containers (drawn from its own generator), else 0."""
        if forced is not None:
            return forced
        skews = self.active.get("lambda-clock-skew")
        if not skews:
            return 0.0
        off: float = skews[self.rng("lambda-clock-skew").randrange(len(skews))]
        self.fault(f"lambda-clock-skew:{'ahead' if off > 0 else 'behind' if off < 0 else 'in-step'}")
        return off

    def _invoke(
        self, recs: list[dict[str, Any]], owner: str, ctx: Any = None, offset: float | None = None
    ) -> dict[str, Any]:
        outer_offset = self.clock_inv.offset
        self.clock_inv.offset = self._container_offset(offset)
        try:
            return self._invoke_in(recs, owner, ctx)
        finally:
            self.clock_inv.offset = outer_offset

    def _invoke_in(self, recs: list[dict[str, Any]], owner: str, ctx: Any) -> dict[str, Any]:
        crash: tuple[str, int] | None = None
        rate = self.active.get("lambda-crash", 0.0)
        r = self.rng("lambda")
        if rate and r.random() < rate:
            crash = r.choice(
                (("ec2", 0), ("ec2", 1), ("ec2", 2), ("ledger-before", 0), ("ledger-after", 0), ("push", 0))
            )
        slow = 0.0
        srate = self.active.get("slow-invocation", 0.0)
        if srate and r.random() < srate:
            slow = r.choice((45.0, 90.0, 150.0))
            self.fault("slow-invocation")
        nested = bool(self.invocations)
        inv = Invocation(
            owner,
            crash,
            slow,
            timeout_at=self.clock_inv.now() + FUNCTION_TIMEOUT_S,
            bodies=[x["body"] for x in recs],
            offset=self.clock_inv.offset,
        )
        records = [
            Record(
                message_id=x["messageId"],
                body=x["body"],
                sender_id=str((x.get("attributes") or {}).get("SenderId", "")),
            )
            for x in recs
        ]
        kw: dict[str, Any] = {"invocation_id": owner}
        if "context" in self._handle_kw and ctx is not None:
            kw["context"] = ctx
        if "deadline" in self._handle_kw:
            kw["deadline"] = inv.timeout_at
        self.invocations.append(inv)
        try:
            out = self.allocator.handle_batch(records, **kw)
        except LambdaCrash as c:
            self.fault(f"lambda-crash:{c}")
            raise RuntimeError(f"injected: {c}") from None
        except Stop:
            raise
        except Exception as exc:
            self.violation("allocator-raised", f"handle_batch raised {type(exc).__name__}: {exc}")
            raise
        finally:
            self.invocations.pop()
            if not nested:
                self.clock_inv.elapsed = 0.0
        if crash is not None:
            # the crash point was never reached (no EC2 call, no write): the process dies at the end
            self.fault("lambda-crash:after the batch")
            raise RuntimeError("injected: died after the batch")
        result: dict[str, Any] = out.batch_item_failures()
        return result

    def maybe_overlap(self, inv: Invocation) -> None:
        """A slow invocation past its lease: a copy of one of its reports (SQS delivers at
        least once) is handled by a second invocation while the first still runs. Past it on
        the first's clock, or (``lambda-clock-skew``) on the clock of another container, which
        then claims the lease while the first still acts on it (safety.md row 11)."""
        if len(self.invocations) > 1:
            return
        skews = self.active.get("lambda-clock-skew") or []
        true_now = self.clock_inv.true_now()
        for node, (owner, until) in list(self.leases.held.items()):
            if owner != inv.owner:
                continue
            if self.clock_inv.now() >= until:
                offset, why = None, "lease-overrun"
            else:
                later = [o for o in skews if true_now + o >= until]
                if not later:
                    continue
                offset, why = max(later), "lambda-clock-skew:lease-taken"
            body = next((b for b in inv.bodies if f'"node":"{node}"' in b or f'"instance_id":"{node}"' in b), None)
            if body is None:
                continue
            self.fault(why)
            if offset is not None:
                self.skew_taken.add(inv.owner)
            with contextlib.suppress(RuntimeError):
                self._invoke(
                    [{"messageId": f"dup-{self.events_run}", "body": body, "attributes": {}}],
                    owner=f"overlap-{self.events_run}",
                    offset=offset,
                )
            return

    def check_lease(self, inv: Invocation, node: str, call: str, iid: str) -> None:
        """The allocator's leases are keyed by instance id (``node`` is the label, for the message)."""
        held = self.leases.held.get(iid)
        if inv.owner in self.skew_taken and (held is None or held[0] != inv.owner):
            # another container's clock, ahead, saw the lease expired and took it: the lease
            # promises nothing then (docs/safety.md row 11); the address checks judge the overlap
            self.fault("lambda-clock-skew:acted-after-lease-taken")
            return
        if held is None or held[0] != inv.owner:
            self.violation(
                "lease",
                f"invocation {inv.owner} called {call} on {node} ({iid}) without holding its "
                f"lease (held by {held[0] if held else 'nobody'})",
            )
        elif self.clock_inv.now() > held[1]:
            self.violation(
                "lease",
                f"invocation {inv.owner} called {call} on {node} ({iid}) "
                f"{self.clock_inv.now() - held[1]:.0f}s after its lease expired",
            )

    def check_release(self, node: str, kw: dict[str, Any]) -> None:
        """EC2 is about to take addresses back from a node: no pod there may hold one, and
        the (running) agent must still have each one quarantined, i.e. on offer. Or, while a
        restored checkpoint awaits the allocator's word (``Datastore.withhold``: no free address
        goes to a pod), free in it: the copy may be older than the offer (docs/agent.md, "A
        restored checkpoint waits for the allocator's word"). Such an address is noted
        (``released_withheld``) and must not be free once the wait ends
        (:func:`simulation.checks.withheld_releases`)."""
        a = self.agents.get(node)
        if a is None or a.gone:
            return
        ips = set(kw.get("PrivateIpAddresses") or [])
        prefixes = list(kw.get("Ipv4Prefixes") or [])
        for cid, ip in a.rt.up.items():
            if ip in ips or (prefixes and checks._in_prefix(ip, prefixes)):
                self.violation("released-in-use", f"the allocator unassigns {ip} from {node} while pod {cid} holds it")
        for (cid, ifname), ip in sorted(a.pods.wired.items()):
            # what a namespace carries, whatever the runtime believes (review 27, H1: a failed
            # set-up's interface, a pod the runtime forgot): EC2 would give it to another pod
            if a.rt.up.get(cid) != ip and (ip in ips or (prefixes and checks._in_prefix(ip, prefixes))):
                self.violation(
                    "released-in-use",
                    f"the allocator unassigns {ip} from {node} while the namespace of {cid} ({ifname}) carries it",
                )
        if not a.alive:
            return
        held_offers = set(a.ds.meta.get(HELD_OFFERS) or ())
        for e in a.ds.enis():
            for ip, addr in e.addrs.items():
                hit = ip in ips or (addr.prefix is not None and addr.prefix in prefixes)
                if hit and addr.quarantined_at is None and a.ds.withheld and not addr.in_use:
                    a.released_withheld.add(ip)
                    self.fault("released-while-withheld")
                elif hit and ip in held_offers and addr.recovered == UNKNOWN_HOLDER and not addr.container_id:
                    # on offer, then held by a start's hold of every address (review 15, Q1): the
                    # offer stands, and the agent says so (seed 1509); a pod carrying it is
                    # released-in-use above
                    self.fault("released-held-offer")
                elif hit and addr.quarantined_at is None:
                    self.violation(
                        "released-not-offered",
                        f"the allocator unassigns {addr.prefix or ip} from "
                        f"{node}, which its agent no longer offers (taken back into the pool)",
                    )

    def esm_tick(self) -> None:
        self.esm.tick(self.clock_inv.now())
        self._note_intake()

    def _note_intake(self) -> None:
        """A pass of the intake at capacity: every slot busy, a full pass still visible in the
        queue after it, and a pass's worth deleted since the last one (an allocator failing
        its batches deletes nothing: that is an outage, not a backlog)."""
        now = self.now()
        deleted, self._deleted_seen = self.esm.stats.deleted - self._deleted_seen, self.esm.stats.deleted
        over = (
            self.sqs.depth(self.reports_url) > INTAKE_PASS
            and self.esm.in_flight >= ESM_CONCURRENCY
            and deleted >= INTAKE_PASS // 2
            and self.sqs.visible(self.reports_url) >= INTAKE_PASS
        )
        if over and self._saturated_since is None:
            self._saturated_since = now
            self.fault("intake-saturated")
        elif not over and self._saturated_since is not None:
            self._saturated.append((self._saturated_since, now))
            self._saturated_since = None

    # --- pods and the runtime
    def note_carried(self, node: str, key: tuple[str, str], ip: str) -> None:
        for other in self.agents.values():
            if other.gone:
                continue
            for att, carried in other.pods.wired.items():
                if carried == ip and (other.name, att) != (node, key):
                    self.violation(
                        "two-holders",
                        f"{ip}: the namespace of {key[0]} on {node} and of {att[0]} on {other.name} both carry it",
                    )

    def pod_up(self, agent: SimAgent, cid: str, ip: str) -> None:
        self.version += 1
        checks.pod_up(self, agent, cid, ip)

    def maybe_terminate_now(self, node: str) -> None:
        if node in self.arm_terminate:
            self.arm_terminate.discard(node)
            self.terminate(node)

    def terminate(self, node: str) -> None:
        a = self.agents.get(node)
        if a is None or a.gone:
            return
        self.fault("terminate")
        self.emu.terminate_instance(a.iid)
        a.gone = True
        a.alive = False
        self.terminated[a.iid] = self.now()

    # --- the run
    def run(self) -> SeedOutcome:
        end = T0 + quiet_from(self.plan.events) + QUIET_S
        for ev in self.plan.events:
            self.loop.call_at(T0 + ev.at, functools.partial(events.apply, self, ev))
        self.loop.every(ESM_EVERY_S, self.esm_tick, start=T0 + 0.5)
        self.loop.every(RECONCILE_EVERY_S, self.reconcile, start=T0 + RECONCILE_EVERY_S)
        try:
            self.loop.run_until(end, stop=self._after)
            self._overrun(end + OVERRUN_LIMIT_S)
            self._damped_overrun(end + OVERRUN_LIMIT_S)
            checks.at_end(self)
        except Stop:
            pass
        finally:
            if self.sockdir is not None:
                with contextlib.suppress(OSError):
                    for f in os.listdir(self.sockdir):
                        os.unlink(os.path.join(self.sockdir, f))
                    os.rmdir(self.sockdir)
        return SeedOutcome(self.plan.seed, len(self.plan.events), self.faults, self.violations, self.now() - T0)

    def _overrun(self, limit: float) -> None:
        """A report flood above the intake's capacity leaves a backlog past the schedule: run on
        until the intake has kept up for a whole quiet period, so the checks at the end ask
        everything of a world that has caught up, their bounds unchanged (no consumer of one
        shared queue serves faster than its capacity: docs/safety.md, row 25). Bounded: a
        backlog still there at ``limit`` fails them."""
        while self.now() < limit:
            if self._saturated_since is not None:
                busy_end = self.now()
            elif self._saturated:
                busy_end = self._saturated[-1][1]
            else:
                return
            target = min(limit, busy_end + QUIET_S)
            if target <= self.now():
                return
            self.fault("intake-overrun")
            self.loop.run_until(target, stop=self._after)

    def _damped_overrun(self, limit: float) -> None:
        """A node the allocator damped for flipping (``WARMPOOL_DAMP_S``, 600 s: longer than
        :data:`QUIET_S`) has its offers handed back and nothing released until the damping ends
        (docs/allocator.md, "Flip damping"): a damping that began late in the schedule outlasts
        the quiet period, and the checks at the end found the node unsettled while a documented
        timer of the product still ran (seeds 1289, 3179, 3912, 7194, 9068: honest nodes whose
        reports alternated between a deficit and an offer of unknown origin under
        ``ec2-ambiguous``, lost answers and stale reads). Run on until no live node is damped
        and a whole quiet period has passed since (counted as ``damped-overrun``), the checks
        unchanged, as for a window (:func:`simulation.schedule.quiet_from`, seed 1072). Bounded:
        a node still damped at ``limit`` (damped again and again with no fault left) fails
        them.

        A damping that ended less than a quiet period before the end counts too (seed 4779,
        ``--keep 0,2,3,5,7,8,9,13,14``: n2 damped until 892.5 s, its offer handed back at
        874 s, the checks at 923 s, 30.5 s after the damping, before its next offer, due a
        release delay after the hand-back at 934 s): the node's surplus goes only at its first
        offer after the damping, so the checks wait a whole quiet period after the damping's
        end, wherever that falls."""
        while self.now() < limit:
            iids = [a.iid for a in self.agents.values() if not a.gone]
            until = max((st.damped_until for st in self.flips.load(CLUSTER, iids).values()), default=0.0)
            if until + QUIET_S <= self.now():
                return
            self.fault("damped-overrun")
            self.loop.run_until(min(limit, until + QUIET_S), stop=self._after)

    def _after(self) -> bool:
        """After every event of the loop: IMDS sees what changed, then every invariant."""
        self.events_run += 1
        for a in self.agents.values():
            if not a.gone:
                a.imds.observe()
        checks.after_event(self)
        return False

    def reconcile(self) -> None:
        try:
            self.reconciler.run()
        except Stop:
            raise
        except Exception as exc:  # a failed run is retried by the next schedule (as EventBridge does)
            self.fault(f"reconcile-error:{type(exc).__name__}")
