"""Carrying out one node's plan: the EC2 calls, the recoveries, the result actions.

The tokens for the plan were taken before the first call. Recoveries re-plan
(with a fresh inventory of the node) and take the new plan's tokens first:

* ``InsufficientCidrBlocks`` → re-plan without that subnet (another candidate may have a whole
  /28), and when that leaves the node short, with single addresses on the ENIs of every subnet
  left for want of a /28 (prefix fallback; named placement does the same before the call);
* ``InsufficientFreeAddressesInSubnet`` → re-plan without that subnet;
* ``PrivateIpAddressLimitExceeded`` → re-read the node, re-plan;
* ``RequestLimitExceeded`` → AIMD cut, stop, defer the node (its report is
  re-sent; the deterministic ClientToken makes a half-made ENI come back);
* attach failure → delete the ENI just created.

The instance's release book (``warmpool/release_book.py``) is read again, after the
lease, before the first call that releases, hands back or repeats a release; it is
written before each Unassign and Detach (a crash after the call, or a server error, leaves
it said: the agent then drops what EC2 may still have, never the other way round; a call
EC2 refused is unbooked, but not an Unassign refused as "not assigned to interface": it is
said released), and EC2's assigning a booked address again takes it out.

With named placement, the shared records (``warmpool.ports.PlacementRecords``) are written
before the calls whose safety rests on them: the keys of each Unassign and DeleteEni, held in
their subnet (never named within the hold), and each Create's parameters, by ClientToken (a
re-sent Create, in any container, sends them again). docs/allocator.md, "Prefix placement
that does not fragment".
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from functions.errors import (
    AddressLimit,
    AddressTaken,
    AwsError,
    InUse,
    NoCidrBlocks,
    NotAssigned,
    NotFound,
    SubnetFull,
    Throttled,
    TokenMismatch,
    rejected,
)
from functions.reasons import NodeStatus, Why
from functions.release_book import BOOK_ERRORS
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.buckets import time_until
from warmpool.calls import (
    AssignAddresses,
    Call,
    CreateEni,
    DeleteEni,
    Reclaim,
    RepeatGrant,
    RepeatRelease,
    TagPrimaryEni,
    UnassignAddresses,
)
from warmpool.clock import Clock
from warmpool.eni_scope import primary_eni_tag
from warmpool.facts import EniFacts, NodeFacts
from warmpool.limits import PREFIX_SIZE, InstanceLimits, is_primary_slot
from warmpool.messages import (
    Action,
    AllocationResult,
    Assigned,
    Attached,
    Deleted,
    Failed,
    Mode,
    PoolReport,
    Released,
)
from warmpool.placement import Usage, place
from warmpool.planner import Plan, plan_node
from warmpool.ports import BucketStore, Ec2Port, PlacementRecords, ReleaseBookStore
from warmpool.release_book import ReleaseBook, Taken
from warmpool.subnets import Subnet

log = logging.getLogger(__name__)

MAX_REPLANS = 3
MAX_BLOCKLESS_SUBNETS = 2
"""Subnets an invocation leaves for want of a whole /28 before it falls back to single
addresses: each costs a refused call by count (EC2 answers InsufficientCidrBlocks) and one of the
:data:`MAX_REPLANS`, so the fallback comes while a re-plan is left for it."""


BLOCKLESS_MEMORY_S = 300.0
"""How long a container remembers a subnet EC2 refused /28s asked by count with
``InsufficientCidrBlocks`` (from the last refusal), unless a fresh read shows
:data:`~warmpool.limits.PREFIX_SIZE` more free addresses in it than the fewest read since:
meanwhile no plan asks it by count for as many /28s as were refused
(:meth:`PlanExecutor.avoid_blockless`), so a fragmented subnet costs one refused call per
container and period, not one per growth report (hostile review of the prefix fallback, F4).
Longer keeps nodes on single addresses longer after a /28 is whole again; shorter pays more
refused calls."""


def _by_count_prefix_asks(plan: Plan, facts: NodeFacts) -> list[tuple[str, int]]:
    """Each call of ``plan`` asking EC2 for /28s by count (named asks are checked before the
    call): its subnet and how many."""
    return [
        (sid, c.prefixes)
        for c in plan.calls
        if isinstance(c, (AssignAddresses, CreateEni)) and (sid := _by_count_subnet(c, facts))
    ]


def _by_count_subnet(c: Call, facts: NodeFacts) -> str:
    """The subnet a call asks /28s of by count (named asks are checked before the call); "" for
    any other call, or an Assign on an ENI whose subnet is not known."""
    if not isinstance(c, (AssignAddresses, CreateEni)) or not c.prefixes or c.at_prefixes:
        return ""
    return c.subnet_id if isinstance(c, CreateEni) else _subnet_of(c.eni_id, facts)


def _capped(plan: Plan, facts: NodeFacts, known: dict[str, Remembered]) -> Plan | None:
    """``plan`` with each by-count ask of /28s in a remembered subnet for as many as were refused
    there (or more) cut to one fewer than were refused (:data:`BLOCKLESS_MEMORY_S`): EC2's
    refusal said fewer are whole, not none (review S4: a node refused two /28s beside one whole
    one took single addresses into every slot and waited there for good). The units cut are
    added to ``unmet``. None when there is nothing to cut, or a cut would ask no /28 (one was
    refused: none is whole there)."""
    calls: list[Call] = []
    cut = 0
    for c in plan.calls:
        r = known.get(_by_count_subnet(c, facts))
        if r is not None and isinstance(c, (AssignAddresses, CreateEni)) and c.prefixes >= r.prefixes:
            if r.prefixes < 2:
                return None
            cut += c.prefixes - (r.prefixes - 1)
            c = replace(c, prefixes=r.prefixes - 1)
        calls.append(c)
    if not cut:
        return None
    note = f"{cut} /28s not asked: fewer are whole in a subnet that refused them"
    return replace(plan, calls=tuple(calls), unmet=plan.unmet + cut, notes=(*plan.notes, note))


def _no_releases(plan: Plan) -> Plan:
    """A re-plan without its Unassigns and Deletes: the offers it would act on are answered by the
    report after, through the allocator's release rules (``Allocator._release_rules``: the release
    delay, the damping, the repeats), which a re-plan skips. A re-plan is made from the same report
    on a fresher Describe, so it may judge the node no longer short and unassign an offered
    address the calls before it in the same run handed back: the answer said ``assigned`` and then
    ``released`` for it, and an ADD between the two on the agent kept it for a pod while EC2 had
    taken it (review of the one-holder argument, R1; a re-plan that unassigned an offer younger
    than the release delay, R2)."""
    calls = tuple(c for c in plan.calls if not isinstance(c, (UnassignAddresses, DeleteEni)))
    if len(calls) == len(plan.calls):
        return plan
    return replace(plan, calls=calls)


def _unsaid(actions: list[Action], keys: set[str]) -> list[Action]:
    """``actions`` without ``keys`` in their ``assigned`` (an action left empty is dropped)."""
    out: list[Action] = []
    for a in actions:
        if isinstance(a, Assigned) and keys.intersection((*a.ips, *a.prefixes)):
            ips = [k for k in a.ips if k not in keys]
            a = a.model_copy(update={"ips": ips, "prefixes": [k for k in a.prefixes if k not in keys]})
            if not (a.ips or a.prefixes):
                continue
        out.append(a)
    return out


def _asks_prefixes(plan: Plan) -> bool:
    """Whether ``plan`` asks EC2 for a /28 (by count or by name), in an Assign or a Create."""
    return any(isinstance(c, (AssignAddresses, CreateEni)) and (c.prefixes or c.at_prefixes) for c in plan.calls)


def unmet(plan: Plan) -> Failed:
    """The ``failed`` action for what a plan could not provide."""
    return Failed.clipped("unmet", f"{plan.unmet} units: {'; '.join(plan.notes)}")


def offer_expired(quarantined_at: float, now: float, max_age_s: float) -> bool:
    """An offer older than ``max_age_s`` (from its quarantine) may have been
    taken back by the agent: it must not be unassigned."""
    return now - quarantined_at > max_age_s


Status = NodeStatus


@dataclass
class NodeJob:
    """One node of a batch, verified and planned."""

    report: PoolReport
    facts: NodeFacts
    limits: InstanceLimits
    plan: Plan
    record_id: str = ""
    body: str = ""
    max_pods: int = 0
    """The node's ceiling (``warmpool.planner.node_max_pods``); re-plans keep it."""
    book: ReleaseBook | None = None
    """The instance's release book the plan was made with (None: not read); the executor
    replaces it with the stored one once it has read or written it."""
    scarce: bool = False
    """The allocator says ``scarce`` to this report (:func:`warmpool.scarcity.node_scarce`): it is
    planned lean (``plan_node``'s ``lean``), re-plans too, and its result says so."""
    book_checked: bool = False
    """The stored book was read after the lease (once per run, before the first release,
    hand-back or repeat)."""
    booked: tuple[Taken, ...] = ()
    """What the last write-ahead added to the book (unbooked if EC2 refuses the call)."""
    stop_at: float | None = None
    """The run's deadline (:meth:`PlanExecutor.run`), for the calls one planned call may become."""
    memory_gen: int = 0
    """``PlanExecutor.memory_gen`` before the plan was made (re-plans move it on)."""
    handed: set[str] = field(default_factory=set)
    """What the run's hand-backs (``Reclaim``) said so far (:meth:`PlanExecutor._deferred_by`)."""


@dataclass
class NodeOutcome:
    node: str
    instance_id: str
    seq: int
    status: Status
    actions: list[Action] = field(default_factory=list)
    retry_after_s: float = 0.0
    reason: str = ""
    calls: int = 0
    result: AllocationResult | None = None
    """The result pushed to the node (None if none was owed)."""
    resend: bool = False
    """Deferred with an ENI created but not attached: the report must come back
    with the same seq, so the same ClientToken finds that ENI again."""


@dataclass(frozen=True)
class _Blockless:
    """A subnet EC2 refused ``prefixes`` /28s asked by count (fewer than that many are whole)."""

    at: float
    free: int
    """Its free addresses in the subnets read then, or the fewest read since (:data:`UNKNOWN_FREE`
    when none were fresh)."""
    prefixes: int
    gen: int
    """``PlanExecutor.memory_gen`` once it was remembered."""


@dataclass(frozen=True)
class Remembered:
    """What :meth:`PlanExecutor.known_blockless` says of a subnet."""

    prefixes: int
    """The fewest /28s refused there by count."""
    gen: int


UNKNOWN_FREE = 1 << 30
"""A refusal remembered while the cached subnets were stale: no count to compare, the period
alone ends the memory (a hostile review of the memory, R2: recorded as 0, the next read forgot
it at once)."""


class _Replan(Exception):
    def __init__(
        self,
        why: str,
        *,
        exclude: str = "",
        force: Mode | None = None,
        refresh: bool = True,
        fallback: Mode | None = None,
        prefixes: int = 0,
    ) -> None:
        super().__init__(why)
        self.why = why
        self.exclude = exclude
        self.force = force
        self.refresh = refresh
        self.fallback = fallback
        """When the re-plan without ``exclude`` leaves the node short, plan again in this mode
        instead (a subnet left for want of a whole /28: single addresses, if no other has one)."""
        self.prefixes = prefixes
        """With ``fallback``: how many /28s the refused call asked for (EC2 refuses them all when
        fewer are whole)."""


class _Defer(Exception):
    def __init__(self, retry_after_s: float, reason: str, *, resend: bool = False) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s
        self.reason = reason
        self.resend = resend


class _Unrecorded(Exception):
    """Named placement's shared record of a Create could not be read or written."""

    def __init__(self, what: str, err: Exception) -> None:
        super().__init__(what)
        self.what = what
        self.err = err


def _leave(rp: _Replan, exclude: set[str], blockless: set[str], remember: Callable[[_Replan], None]) -> None:
    """Leave the subnet ``rp`` names: in ``blockless`` too when only for want of a whole /28 (a
    fallback to single addresses brings it back; ``remember`` keeps it for the container's next
    plans), out of it when refused for want of room."""
    if not rp.exclude:
        return
    if rp.fallback is None:
        blockless.discard(rp.exclude)
    else:
        remember(rp)
        if rp.exclude not in exclude:
            blockless.add(rp.exclude)
    exclude.add(rp.exclude)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PlanExecutor:
    """Executes plans through the EC2 adapter; one instance serves a whole batch (thread-safe)."""

    def __init__(
        self,
        ec2: Ec2Port,
        buckets: BucketStore,
        settings: Settings,
        tally: Tally,
        clock: Clock,
        books: ReleaseBookStore | None = None,
    ) -> None:
        self.ec2 = ec2
        self.buckets = buckets
        self.settings = settings
        self.tally = tally
        self.clock = clock
        self.books = books
        """The release books (None: none kept; only unit tests of single calls run so)."""
        self.records: PlacementRecords | None = books if isinstance(books, PlacementRecords) else None
        """Named placement's shared records (kept beside the release books): what was released
        recently per subnet, and each Create's parameters by ClientToken. None: named placement
        names nothing (it could not know what other containers released)."""
        self._created_names: dict[str, CreateEni] = {}
        """The Creates this container recorded, by ClientToken: used only while the shared
        record cannot be read (then a Create this container sent is sent again as it was)."""
        self._blockless: dict[str, _Blockless] = {}
        """Subnets EC2 refused /28s by count (:data:`BLOCKLESS_MEMORY_S`); per container, shared
        by its threads under ``_blockless_lock``."""
        self._blockless_lock = threading.Lock()
        self._blockless_gen = 0

    @property
    def cluster(self) -> str:
        return self.settings.cluster

    def run(self, job: NodeJob, stop_at: float | None = None) -> NodeOutcome:
        """Carry out the plan. No call starts at or after ``stop_at`` (the
        invocation's deadline less its margin): the node is deferred there,
        with what was done so far."""
        rep = job.report
        job.stop_at = stop_at
        out = NodeOutcome(rep.node, job.facts.instance_id, rep.seq, NodeStatus.SERVED)
        facts = job.facts
        queue: list[Call] = list(job.plan.calls)
        exclude: set[str] = set()
        blockless: set[str] = set()
        """Subnets left only for want of a whole /28 (``_Replan.fallback``): a fallback to single
        addresses brings every one of them back, not the last alone."""
        force: Mode | None = None
        replans = 0
        capped = False
        """A re-plan asked a refused subnet for fewer /28s (``_replan``): once a run."""
        job.handed = set()
        while queue:
            if stop_at is not None and self.clock.now() >= stop_at:
                return self._deferred(out, 1.0, Why.DEADLINE)
            call = queue.pop(0)
            try:
                _extend_merged(out.actions, self._do(call, job, facts))
                out.calls += 1
            except _Replan as rp:
                if replans >= MAX_REPLANS:
                    self._remember_blockless(rp)  # its refusal still says what the subnet has
                    out.actions.append(Failed.clipped("replan-limit", rp.why))
                    break
                replans += 1
                _leave(rp, exclude, blockless, self._remember_blockless)
                force = rp.force or force
                try:
                    if rp.refresh or out.actions:
                        facts = self._refresh(facts)
                        if job.book is not None:
                            facts = job.book.correct(facts)
                    subnets = list(self.ec2.subnets().values())
                except Throttled as err:
                    d = self._throttled(err)
                    return self._deferred(out, d.retry_after_s, d.reason)
                job.memory_gen = self.memory_gen
                plan, force, cut = self._replan(job, facts, subnets, exclude, blockless, force, rp, not capped)
                plan = _no_releases(plan)
                capped = capped or cut
                log.info(
                    "re-planned", extra={"node": rep.node, "seq": rep.seq, "why": rp.why, "calls": len(plan.calls)}
                )
                if plan.calls:
                    wait = self.buckets.take_batch([plan.tokens()], self.clock.now())[0]
                    if wait > 0:
                        return self._deferred(out, wait, f"tokens after re-plan ({rp.why})")
                queue = list(plan.calls)
                if plan.unmet:
                    out.actions.append(unmet(plan))
            except _Defer as d:
                return self._deferred_by(out, job, d)
            except AwsError as err:
                out.actions.append(Failed.clipped(err.code, str(err)))
        else:
            if job.plan.unmet and not replans:
                out.actions.append(unmet(job.plan))
        if out.actions and all(isinstance(a, Failed) for a in out.actions):
            out.status = NodeStatus.FAILED
        return out

    def _replan(
        self,
        job: NodeJob,
        facts: NodeFacts,
        subnets: list[Subnet],
        exclude: set[str],
        blockless: set[str],
        force: Mode | None,
        rp: _Replan,
        may_cap: bool = True,
    ) -> tuple[Plan, Mode | None, bool]:
        """The node's plan again (``exclude`` and ``force`` as the re-plans so far left them),
        the mode it was made in, and whether it asks a refused subnet for fewer /28s
        (:func:`_capped`, only while ``may_cap``)."""
        plan = self._plan(job, facts, subnets, exclude, force)
        fallback = rp.fallback or ("secondary-ip" if blockless else None)
        if fallback is not None and (plan.unmet or not _asks_prefixes(plan) or len(blockless) >= MAX_BLOCKLESS_SUBNETS):
            # Leaving the subnet did not get the node /28s elsewhere (no other candidate, no ENI
            # left to create, the planner's own fallback to singles in another subnet, or
            # enough subnets refused already): single addresses instead, on the ENIs of every
            # subnet left for want of a whole /28 too (seed 7325: only the last came back, the
            # primary ENI's subnet with hundreds of free addresses did not), also when the last
            # refusal was another subnet's room (a hostile review's F3), before the node takes
            # a new ENI in a scarcer subnet (F2) or the re-plans run out (F1).
            exclude.difference_update(blockless)
            if rp.fallback is not None and rp.exclude:
                exclude.discard(rp.exclude)
            blockless.clear()
            singles = self._plan(job, facts, subnets, exclude, fallback)
            if singles.unmet and may_cap and rp.prefixes >= 2:
                # Singles leave the node short (its slots run out): ask the refused subnet for
                # fewer /28s, once a run (a refusal of the cut ask gives singles: review S4).
                first = self._plan_once(job, facts, subnets, frozenset(exclude), None)
                capped = _capped(first, facts, self.known_blockless())
                if capped is not None and _asks_prefixes(capped):
                    return capped, force, True
            force = fallback
            plan = singles
        return plan, force, False

    def _remember_blockless(self, rp: _Replan) -> None:
        """Remember ``rp``'s subnet refused its /28s by count (nothing under named placement: its
        subnet usage read says where whole /28s are, ``_no_block``, fresher than this). Each
        refusal starts the period again; the count kept is the fewest refused while remembered."""
        if rp.fallback is None or not rp.exclude or self.settings.named_placement:
            return
        sub = self.ec2.known_subnets().get(rp.exclude)
        asked = max(1, rp.prefixes)
        now = self.clock.now()
        with self._blockless_lock:
            had = self._blockless.get(rp.exclude)
            if had is not None and self._live(had, sub, now):
                asked = min(asked, had.prefixes)  # only a live entry (second review, S3)
            self._blockless_gen += 1
            self._blockless[rp.exclude] = _Blockless(
                now, sub.free if sub is not None else UNKNOWN_FREE, asked, self._blockless_gen
            )
        self.tally.add(names.M_SUBNETS_BLOCKLESS)

    @staticmethod
    def _live(b: _Blockless, sub: Subnet | None, now: float) -> bool:
        return now - b.at < BLOCKLESS_MEMORY_S and not (sub is not None and sub.free >= b.free + PREFIX_SIZE)

    @property
    def memory_gen(self) -> int:
        """How many refusals were remembered so far: a plan made now knows of them all."""
        return self._blockless_gen

    def known_blockless(self) -> dict[str, Remembered]:
        """The subnets remembered refused /28s by count (:data:`BLOCKLESS_MEMORY_S`): forgotten
        when its memory is old, or when the subnets read last show a /28's worth more free
        addresses in it than the fewest read since it was refused (a release there may have made
        one whole)."""
        now = self.clock.now()
        known = self.ec2.known_subnets()
        with self._blockless_lock:
            out: dict[str, Remembered] = {}
            for sid, b in list(self._blockless.items()):
                sub = known.get(sid)
                if not self._live(b, sub, now):
                    del self._blockless[sid]
                    continue
                if sub is not None and sub.free < b.free:
                    # the lowest count seen since: what was given out since (this node's own
                    # singles too) is not read as a release
                    b = self._blockless[sid] = replace(b, free=sub.free)
                out[sid] = Remembered(b.prefixes, b.gen)
            return out

    def avoid_blockless(
        self,
        plan_fn: Callable[[frozenset[str], Mode | None], Plan],
        facts: NodeFacts,
        exclude: frozenset[str] = frozenset(),
        force: Mode | None = None,
    ) -> Plan:
        """``plan_fn(exclude, force)``, re-planned before any call, as the executor re-plans after
        a refusal, when it asks by count at least as many /28s as a subnet was refused
        (:meth:`known_blockless`; fewer may be whole there, so fewer are still asked): without
        such subnets, and in single addresses (with them back) when that leaves the node short
        or asks no /28. Leaving a remembered subnet costs no call, so, unlike ``_replan``, no
        count of subnets left forces singles while another candidate has whole /28s (review R3).
        When the singles cannot meet the need either and the plan as first made could, a first
        plan (``exclude`` empty: no refusal yet) is kept: one refused call if the memory is right
        (then ``_replan`` gives the same singles), the node's pods served if a /28 became whole
        unseen (a release the node's own singles hid from the free count), where taking the
        memory at its word would fill the node's slots with singles it keeps for good (review R1;
        the second review's S1, the refused call, is that cost, left so). A re-plan's singles go
        to ``_replan``, which brings back the subnets the invocation left for want of a /28.
        Makes no EC2 call."""
        first = plan = plan_fn(exclude, force)
        if force is not None:
            return plan
        known = self.known_blockless()
        left: set[str] = set()
        while known:
            hit = {sid for sid, n in _by_count_prefix_asks(plan, facts) if sid in known and n >= known[sid].prefixes}
            hit -= left
            if not hit:
                break
            left |= hit
            hitting, plan = plan, plan_fn(exclude | left, None)
            if plan.unmet or not _asks_prefixes(plan):
                singles = plan_fn(exclude, "secondary-ip")
                if singles.unmet:
                    capped = _capped(hitting, facts, known)
                    if capped is not None:  # fewer /28s there, as after the refusal (S4)
                        plan = capped
                        break
                    if not first.unmet and not exclude:
                        return first
                plan = singles
                break
        if left:
            self.tally.add(names.M_BLOCKLESS_AVOIDED)
        return plan

    def remembered_since(self, job: NodeJob, subnet_id: str, prefixes: int) -> None:
        """Before a call asking ``subnet_id`` for ``prefixes`` /28s by count: if a refusal there of
        as many or fewer was remembered after ``job``'s plan was made (another node of the same
        batch, second review S2), re-plan as that refusal would, without the call."""
        if not prefixes or not subnet_id or self._blockless_gen <= job.memory_gen:
            return  # nothing remembered since the plan: no lookup on the call's path
        r = self.known_blockless().get(subnet_id)
        if r is not None and r.gen > job.memory_gen and r.prefixes <= prefixes:
            self.tally.add(names.M_BLOCKLESS_AVOIDED)
            raise _Replan(
                f"no whole /28 in {subnet_id} since planned",
                exclude=subnet_id,
                refresh=False,
                fallback="secondary-ip",
                prefixes=r.prefixes,
            )

    def _plan(
        self, job: NodeJob, facts: NodeFacts, subnets: list[Subnet], exclude: set[str], force: Mode | None
    ) -> Plan:
        return self.avoid_blockless(
            lambda ex, fo: self._plan_once(job, facts, subnets, ex, fo), facts, frozenset(exclude), force
        )

    def _plan_once(
        self, job: NodeJob, facts: NodeFacts, subnets: list[Subnet], exclude: frozenset[str], force: Mode | None
    ) -> Plan:
        return plan_node(
            job.report,
            facts.inventory(self.cluster),
            job.limits,
            subnets,
            cluster=self.cluster,
            exclude_subnets=exclude,
            force_mode=force,
            max_pods=job.max_pods,
            subnet_rule=self.settings.subnet_rule,
            custom=self.settings.custom,
            multi_card=self.settings.multi_card,
            lean=job.scarce,
        )

    def _deferred_by(self, out: NodeOutcome, job: NodeJob, d: _Defer) -> NodeOutcome:
        """``out`` deferred as ``d`` says. Re-sent (``resend``), the same report comes back and is
        planned again, maybe on a fresher Describe that finds the node no longer short: its answer
        may unassign an offer this run handed back, after the agent took it back (review 11, R3:
        R1 across two answers to one report). A hand-back makes no EC2 call: it is not said, the
        offer stays quarantined, and the re-sent report's run alone decides it."""
        out.resend = d.resend
        if d.resend and job.handed:
            out.actions = _unsaid(out.actions, job.handed)
        return self._deferred(out, d.retry_after_s, d.reason)

    def _deferred(self, out: NodeOutcome, wait: float, reason: str) -> NodeOutcome:
        out.status = NodeStatus.DEFERRED
        out.retry_after_s = min(float(self.settings.max_defer_s), max(1.0, wait if math.isfinite(wait) else 900.0))
        out.reason = reason
        return out

    def _refresh(self, facts: NodeFacts) -> NodeFacts:
        enis = self.ec2.describe_attached([facts.instance_id]).get(facts.instance_id, [])
        return facts.with_enis(tuple(enis))

    def _throttled(self, err: Throttled) -> _Defer:
        now = self.clock.now()
        self.buckets.throttled(err.action, now)
        spec = self.settings.bucket_spec(err.action)
        wait = time_until(self.buckets.load(err.action, now), spec, 1, now)
        return _Defer(wait, f"{err.action} throttled")

    # --- calls ---------------------------------------------------------------

    def offer_fresh(self, job: NodeJob, eni_id: str) -> bool:
        """Every offer of ``eni_id`` in the report is dated and still young
        enough *now*, right before the call that unassigns it (an invocation
        can take long between its start and this call)."""
        offers = [o for o in job.report.release if o.eni_id == eni_id]
        if not offers:
            return False
        now = self.clock.now()
        max_age = self.settings.release_offer_max_age_s
        return all(o.quarantined_at is not None and not offer_expired(o.quarantined_at, now, max_age) for o in offers)

    def _too_old(self, job: NodeJob, call: UnassignAddresses | DeleteEni) -> list[Action]:
        n = sum(len(o.ips) + len(o.prefixes) for o in job.report.release if o.eni_id == call.eni_id)
        self.tally.add(names.M_OFFERS_EXPIRED, n)
        log.info(
            "release offer aged out before its call; not released",
            extra={"node": job.report.node, "seq": job.report.seq, "eni_id": call.eni_id},
        )
        return self._said_again(job, call.eni_id)

    def _said_again(self, job: NodeJob, eni_id: str) -> list[Action]:
        """A booked ENI's delete not made now (no fresh offer, or EC2 no longer shows it): the
        answer says ``deleted`` again, as :class:`RepeatRelease` would (``ReleaseBook.repeats``)."""
        if job.book is None or eni_id not in job.book.deleted:
            return []
        self.tally.add(names.M_RELEASES_REPEATED)
        return [Deleted(eni_id=eni_id)]

    def _do(self, call: Call, job: NodeJob, facts: NodeFacts) -> list[Action]:
        try:
            return EXECUTORS[type(call)](self, call, job, facts)
        except Throttled as err:
            raise self._throttled(err) from None

    # --- one method per call (``EXECUTORS``) -------------------------------------

    def _run_assign(self, call: AssignAddresses, job: NodeJob, facts: NodeFacts) -> list[Action]:
        if not self.settings.named_placement:
            subnet = _subnet_of(call.eni_id, facts)
            self.remembered_since(job, subnet, call.prefixes)
        return self._regranted(job, self._assign(call, facts))

    def _run_create(self, call: CreateEni, job: NodeJob, facts: NodeFacts) -> list[Action]:
        if not self.settings.named_placement:
            self.remembered_since(job, call.subnet_id, call.prefixes)
        return self._regranted(job, self._create(call, job, facts))

    def _run_unassign(self, call: UnassignAddresses, job: NodeJob, facts: NodeFacts) -> list[Action]:
        keys = call.ips + call.prefixes
        # Booked before this run: planned again because EC2 still showed it (``ReleaseBook.
        # repeats``; the booking invocation may have died before its call). Whatever stops
        # or fails this second call, the answer says released, as a plain repeat would.
        again = job.book is not None and all(k in job.book.keys for k in keys)
        if not self.offer_fresh(job, call.eni_id):
            return self._released_again(call) if again else self._too_old(job, call)
        self._check_book(job)
        if self.settings.named_placement:
            self._hold(job, _subnet_of(call.eni_id, facts, job.facts), keys)
        if not self._write_ahead(job, call, keys):
            return self._released_again(call) if again else []
        try:
            return self._unassign(call, job)
        except Throttled:
            raise
        except NotAssigned:
            # Not on the ENI: taken by an earlier request (booked before, Describe lagging; or
            # this one, made, its answer lost and sent again). Booked, it is said released.
            # EC2 refuses the whole request for one key not on the ENI: with several, the others
            # may still be on it; saying them released would leave them EC2's and the node's
            # pool short for good (a hostile review's finding). Asked key by key instead.
            if len(keys) > 1:
                return self._unassign_each(call, job)
        except AwsError:
            if not again:
                raise
        return self._released_again(call)

    def _unassign_each(self, call: UnassignAddresses, job: NodeJob) -> list[Action]:
        """One Unassign per key of ``call`` (each paid from the bucket first): released are those
        EC2 took now or had not (``NotAssigned``). Each call is made only while the offer is
        young enough and before the run's deadline, as any Unassign (a second hostile review:
        the split had neither check); a key not asked, or whose call fails otherwise, stays
        booked and unsaid, for the next report's repeat. Unpaid: none asked, all booked and
        unsaid (``repeats`` splits them on the next report, paid from its plan)."""
        keys = (*call.ips, *call.prefixes)
        if self.buckets.take_batch([{"UnassignPrivateIpAddresses": len(keys)}], self.clock.now())[0] > 0:
            self.tally.add(names.M_UNASSIGN_SPLIT_UNPAID)
            return []
        gone: list[str] = []
        for k in keys:
            if (job.stop_at is not None and self.clock.now() >= job.stop_at) or not self.offer_fresh(job, call.eni_id):
                break
            one = (
                UnassignAddresses(call.eni_id, prefixes=(k,)) if "/" in k else UnassignAddresses(call.eni_id, ips=(k,))
            )
            try:
                self.ec2.unassign(one)
            except NotAssigned:
                pass
            except Throttled:
                raise
            except AwsError:
                continue  # booked, not said: the next report's repeat unassigns it again
            gone.append(k)
        if not gone:
            return []
        return [
            Released(eni_id=call.eni_id, ips=[k for k in gone if "/" not in k], prefixes=[k for k in gone if "/" in k])
        ]

    def _released_again(self, call: UnassignAddresses) -> list[Action]:
        self.tally.add(names.M_RELEASES_REPEATED)
        return [Released(eni_id=call.eni_id, ips=list(call.ips), prefixes=list(call.prefixes))]

    def _run_delete(self, call: DeleteEni, job: NodeJob, facts: NodeFacts) -> list[Action]:
        # A booked ENI the report names nowhere: the agent was told ``deleted`` and dropped it
        # (never to take it again), yet EC2 still shows it attached (a detach answered and not
        # done): detached again, no offer needed (``ReleaseBook.repeats``).
        dropped = (
            job.book is not None
            and call.eni_id in job.book.deleted
            and all(e.eni_id != call.eni_id for e in job.report.enis)
            and all(o.eni_id != call.eni_id for o in job.report.release)
        )
        if not dropped and not self.offer_fresh(job, call.eni_id):
            return self._too_old(job, call)
        self._check_book(job)
        return self._delete(call, facts, job)

    def _run_tag_primary(self, call: TagPrimaryEni, job: NodeJob, facts: NodeFacts) -> list[Action]:
        self.ec2.create_tags([call.eni_id], primary_eni_tag(self.cluster))
        self.tally.add(names.M_PRIMARY_ENIS_TAGGED)
        return []

    def _run_reclaim(self, call: Reclaim, job: NodeJob, facts: NodeFacts) -> list[Action]:
        self._check_book(job)
        said = self._reclaim(call, job)
        job.handed.update(k for a in said if isinstance(a, Assigned) for k in (*a.ips, *a.prefixes))
        return said

    def _run_repeat(self, call: RepeatRelease, job: NodeJob, facts: NodeFacts) -> list[Action]:
        self._check_book(job)
        self.tally.add(names.M_RELEASES_REPEATED)
        if call.deleted:
            return [Deleted(eni_id=call.eni_id)]
        return [Released(eni_id=call.eni_id, ips=list(call.ips), prefixes=list(call.prefixes))]

    def _run_repeat_grant(self, call: RepeatGrant, job: NodeJob, facts: NodeFacts) -> list[Action]:
        """Say a grant again, only for what the book still holds as given (a call of this run,
        a delete of the ENI, may have taken it), and only after writing the book back
        unchanged, conditional on the version read (its version bumped), as a hand-back does
        (:meth:`_reclaim`): a second invocation acting for the instance at once either wrote
        first, and this write fails, or writes after, and its write-ahead fails (its Unassign
        is not made). Either way no grant is said while another invocation unassigns it."""
        self._check_book(job)
        book = job.book or ReleaseBook()
        given = {g.key for g in book.given if g.eni_id == call.eni_id}
        ips = [k for k in call.ips if k in given]
        pfx = [k for k in call.prefixes if k in given]
        if not (ips or pfx):
            return []
        if self.books is not None and not self._save_book(job, book):
            raise self._book_error(job, "changed before a repeated grant")
        self.tally.add(names.M_GRANTS_REPEATED)
        return [Assigned(eni_id=call.eni_id, ips=ips, prefixes=pfx)]

    # --- the release book ------------------------------------------------------

    def _book_error(self, job: NodeJob, what: str, err: Exception | None = None) -> _Defer:
        self.tally.add(names.M_RELEASE_BOOK_UNREAD)
        log.warning(
            "release book %s: the node waits",
            what,
            extra={"node": job.report.node, "seq": job.report.seq, "error": str(err)[:200] if err else ""},
        )
        return _Defer(float(self.settings.lease_retry_s), f"release book {what}")

    def _check_book(self, job: NodeJob) -> None:
        """Once per run, before the first call that releases, hands back or repeats: the
        stored book, read now that the lease is held, must be the one the plan was made
        with (else another invocation changed it since, or it was not read then: the node
        waits and is planned again)."""
        if self.books is None or job.book_checked:
            return
        iid = job.facts.instance_id
        try:
            stored = self.books.load(self.cluster, [iid]).get(iid, ReleaseBook())
        except BOOK_ERRORS as err:
            raise self._book_error(job, "not read", err) from None
        if job.book is None and stored.taken:
            raise self._book_error(job, "not read when the plan was made")
        if job.book is not None and stored.version != job.book.version:
            raise self._book_error(job, "changed since the plan")
        if stored.fences(job.report, self.clock.now()):
            # a restore check answered since the plan: this report's process is fenced
            raise self._book_error(job, "fences this report (a restore check since)")
        job.book, job.book_checked = stored, True

    def _save_book(self, job: NodeJob, book: ReleaseBook) -> bool:
        """Store the book (conditional on the version read); False, logged, if not stored."""
        assert self.books is not None
        try:
            stored = self.books.save(
                self.cluster, job.facts.instance_id, book, self.clock.now() + self.settings.ledger_ttl_s
            )
        except BOOK_ERRORS as err:
            log.warning("release book not written", extra={"node": job.report.node, "error": str(err)[:200]})
            stored = None
        if stored is None:
            return False
        job.book = stored
        return True

    def _write_ahead(self, job: NodeJob, call: UnassignAddresses | DeleteEni, keys: tuple[str, ...]) -> bool:
        """Book what the call takes before making it (a crash after the call leaves it
        booked). False: not booked, so the call is not made (a full book holds it)."""
        if self.books is None:
            return True
        book = job.book if job.book is not None else ReleaseBook()
        if book.full_after(max(1, len(keys))):
            self.tally.add(names.M_RELEASES_HELD)
            log.warning("release book full: release held", extra={"node": job.report.node, "eni_id": call.eni_id})
            return False
        if not self._save_book(job, book.take(call.eni_id, keys, job.report.seq)):
            raise self._book_error(job, "not written")
        job.booked = tuple(t for t in job.book.taken if t not in book.taken) if job.book is not None else ()
        return True

    def _refused(self, job: NodeJob, err: AwsError) -> None:
        """The booked call failed. EC2 refused it (throttled, a client error): it took
        nothing, so what it booked is unbooked (best effort). A server error or no answer
        leaves it booked: the agent then drops what EC2 may still have, never the reverse."""
        added, job.booked = job.booked, ()
        if self.books is None or job.book is None or not added or not rejected(err):
            return
        kept = tuple(t for t in job.book.taken if t not in added)
        if not self._save_book(job, replace(job.book, taken=kept)):
            self.tally.add(names.M_RELEASE_BOOK_UNREAD)

    def _regranted(self, job: NodeJob, actions: list[Action]) -> list[Action]:
        """EC2 assigned these to the instance in answer to this call: booked ones are its again,
        and each is said again until a report names it (``ReleaseBook.regranted``)."""
        got = [(a.eni_id, k) for a in actions if isinstance(a, Assigned | Attached) for k in (*a.ips, *a.prefixes)]
        if self.books is None or not got:
            return actions
        if job.book is None:  # not read when planned: read it now
            iid = job.facts.instance_id
            try:
                job.book = self.books.load(self.cluster, [iid]).get(iid, ReleaseBook())
            except BOOK_ERRORS as err:
                self.tally.add(names.M_RELEASE_BOOK_UNREAD)
                log.warning("release book not read after an assign", extra={"error": str(err)[:200]})
                return actions
        after = job.book.regranted(got, job.report.seq)
        if after is not job.book and not self._save_book(job, after):
            self.tally.add(names.M_RELEASE_BOOK_UNREAD)
            log.warning("grants not written to the release book", extra={"node": job.report.node})
        return actions

    def _reclaim(self, call: Reclaim, job: NodeJob) -> list[Action]:
        """The offer is declined: the addresses never left the ENI (no EC2 call). Never one
        the book says EC2 took, whatever Describe showed.

        Before the hand-back, the book is written back unchanged (its version bumped, on the
        condition that it is still the version read): a second invocation acting for the
        instance at once (clocks apart by more than the lease margin, or a lease outlived)
        either wrote first, and this write fails (the node waits and is planned again), or
        writes after, and its write-ahead fails (its Unassign is not made). Either way no
        address is handed back while another invocation unassigns it."""
        ips, pfx = list(call.ips), list(call.prefixes)
        # Nor one of an offer of unknown origin (``ReleaseOffer.unknown``): the planner never
        # plans it (``warmpool/planner.py::_split_unknown``); refused here too, whatever did.
        refuse = {
            k
            for o in job.report.release
            if not o.may_hand_back and o.eni_id == call.eni_id
            for k in (*o.ips, *o.prefixes)
        }
        if job.book is not None:
            if call.eni_id in job.book.deleted:
                ips, pfx = [], []
            refuse |= job.book.keys
        ips = [k for k in ips if k not in refuse]
        pfx = [k for k in pfx if k not in refuse]
        refused = len(call.ips) + len(call.prefixes) - len(ips) - len(pfx)
        if refused:
            self.tally.add(names.M_HANDBACKS_REFUSED, refused)
        if not (ips or pfx):
            return []
        if self.books is not None and not self._save_book(job, job.book or ReleaseBook()):
            raise self._book_error(job, "changed before a hand-back")
        return [Assigned(eni_id=call.eni_id, ips=ips, prefixes=pfx)]

    # --- named placement (``Settings.named_placement``, warmpool/placement.py) -------------

    def _usage(self, subnet_id: str) -> Usage | None:
        if not (self.settings.named_placement and subnet_id and self.records is not None):
            return None
        return self.ec2.subnet_usage(subnet_id, lambda: self._held(subnet_id))

    def _held(self, subnet_id: str) -> frozenset[str] | None:
        """What any container released in the subnet within the hold (None: not known now, so
        nothing is named)."""
        assert self.records is not None
        since = self.clock.now() - self.settings.placement_release_hold_s
        try:
            return self.records.held(self.cluster, subnet_id, since)
        except BOOK_ERRORS as err:
            self.tally.add(names.M_RELEASE_BOOK_UNREAD)
            log.warning(
                "released addresses not read: no names", extra={"subnet_id": subnet_id, "error": str(err)[:200]}
            )
            return None

    def _hold(self, job: NodeJob, subnet_id: str, keys: tuple[str, ...]) -> None:
        """Before a call that releases ``keys`` (an Unassign, or a Detach and Delete of their
        ENI): record them released now in the subnet, so that no container names them within
        the hold (their owner's agent may not have applied the ``released`` yet). Not written,
        the call is not made: the node waits."""
        if not (self.settings.named_placement and self.records is not None and subnet_id and keys):
            return
        now = self.clock.now()
        hold = self.settings.placement_release_hold_s
        try:
            self.records.hold(self.cluster, subnet_id, [k for k in keys if k], now, now + 2 * hold)
        except BOOK_ERRORS as err:
            raise self._book_error(job, "released addresses not written", err) from None

    def _named(self, call: AssignAddresses, subnet_id: str) -> AssignAddresses:
        """``call`` with the addresses or prefixes to name, from what the ENI's subnet holds;
        ``call`` itself when there is no view (off, unpaid). A prefix call in a subnet with no
        whole /28 left is not made: the node re-plans without that subnet."""
        usage = self._usage(subnet_id)
        if usage is None:
            return call
        p = place(usage, 0 if call.prefixes else call.ips, call.prefixes)
        if call.prefixes and p.prefixes_short:
            self._no_block(subnet_id)
        if not p.complete:
            return call  # singles short: by count, EC2 answers as it would
        self.tally.add(names.M_PLACEMENT_NAMED)
        if call.prefixes:
            return replace(call, at_prefixes=p.prefixes)
        return replace(call, at_ips=p.ips)

    def _no_block(self, subnet_id: str) -> None:
        """The subnet has no whole /28 for the prefixes asked: re-plan without it (another
        candidate subnet may have one), else in single addresses; no call known to fail is made."""
        self.tally.add(names.M_PLACEMENT_NO_BLOCK)
        raise _Replan(f"no whole /28 left in {subnet_id}", exclude=subnet_id, refresh=False, fallback="secondary-ip")

    def _named_create(self, call: CreateEni) -> CreateEni:
        """``call`` with its primary, secondaries and prefixes named (as :meth:`_named`), or as
        asked (by count) when there is no view. Whichever it is, it is recorded by ClientToken
        (shared by every container) before it is sent, and a Create of that token sent again
        (a re-sent report, in any container) is sent as recorded: EC2 answers a ClientToken
        with the ENI it made only for the same parameters (else ``IdempotentParameterMismatch``),
        and names chosen again from a newer view (one showing the first ENI's addresses in use)
        would differ. Not read or not written: :class:`_Unrecorded` (the node waits, no Create
        is made)."""
        if not self.settings.named_placement or self.records is None:
            return call
        try:
            known = self.records.get_create(self.cluster, call.client_token)
        except BOOK_ERRORS as err:
            known = self._created_names.get(call.client_token)
            if known is None:
                raise _Unrecorded("create not read", err) from None
        if known is not None and replace(known, at_ips=(), at_prefixes=()) == call:
            if known.at_ips or known.at_prefixes:
                self.tally.add(names.M_PLACEMENT_NAMED)
            return known
        named = call
        usage = self._usage(call.subnet_id)
        if usage is not None:
            p = place(usage, 1 + call.ips, call.prefixes)
            if call.prefixes and p.prefixes_short:
                self._no_block(call.subnet_id)
            if p.complete:
                self.tally.add(names.M_PLACEMENT_NAMED)
                named = replace(call, at_ips=p.ips, at_prefixes=p.prefixes)
        self._record_create(named)
        return named

    def _record_create(self, call: CreateEni) -> None:
        if self.records is None or not self.settings.named_placement:
            return
        try:
            self.records.put_create(self.cluster, call, self.clock.now() + self.settings.ledger_ttl_s)
        except BOOK_ERRORS as err:
            raise _Unrecorded("create not written", err) from None
        if len(self._created_names) >= 10_000:
            self._created_names.pop(next(iter(self._created_names)))
        self._created_names[call.client_token] = call

    def _placed(self, subnet_id: str, ips: list[str], prefixes: list[str]) -> None:
        if self.settings.named_placement and subnet_id:
            self.ec2.note_placed(subnet_id, ips, prefixes)

    def _assign(self, call: AssignAddresses, facts: NodeFacts) -> list[Action]:
        subnet = _subnet_of(call.eni_id, facts)
        named = self._named(call, subnet)
        try:
            try:
                got = self.ec2.assign(named)
            except (AddressTaken, AwsError) as err:
                if named is call or not (isinstance(err, AddressTaken) or err.code == "InvalidParameterValue"):
                    raise
                # The view was behind (another caller took a named address or broke a named
                # block): read again next time, ask by count now.
                self.tally.add(names.M_PLACEMENT_TAKEN)
                self.ec2.forget_usage(subnet)
                got = self.ec2.assign(call)
        except NoCidrBlocks:
            # As named placement's check before the call (``_no_block``): another candidate subnet
            # may have a whole /28; single addresses when none does (seed 500105).
            if not subnet:  # the ENI's subnet not known: single addresses at once, as before
                raise _Replan("InsufficientCidrBlocks", force="secondary-ip", refresh=False) from None
            raise _Replan(
                "InsufficientCidrBlocks",
                exclude=subnet,
                refresh=False,
                fallback="secondary-ip",
                prefixes=call.prefixes or len(call.at_prefixes),
            ) from None
        except AddressLimit:
            raise _Replan("PrivateIpAddressLimitExceeded") from None
        except SubnetFull:
            # The ENI's subnet is full: leave its ENIs alone, grow elsewhere.
            subnet = _subnet_of(call.eni_id, facts)
            self.ec2.forget_subnets()
            raise _Replan("InsufficientFreeAddressesInSubnet", exclude=subnet, refresh=True) from None
        self._placed(subnet, got.ips, got.prefixes)
        self.tally.add(names.M_ADDRESSES_ALLOCATED, len(got.ips) + PREFIX_SIZE * len(got.prefixes))
        return [got]

    def _groups(self, facts: NodeFacts, report: PoolReport) -> list[str]:
        """A new ENI's security groups: a custom-networking node's zone's in the map, when it names
        any; else the stack's; else the node's primary ENI's (the VPC CNI's ``createENI`` in
        ``pkg/awsutils/awsutils.go`` likewise falls back to them)."""
        custom = self.settings.custom.groups(facts.availability_zone) if report.custom_networking else ()
        if custom:
            return list(custom)
        if self.settings.security_groups:
            return list(self.settings.security_groups)
        for e in facts.enis:
            if is_primary_slot(e.eni.network_card, e.eni.device_index):
                return list(e.groups)
        return []

    def _create(self, call: CreateEni, job: NodeJob, facts: NodeFacts) -> list[Action]:
        tags = {
            names.TAG_CLUSTER_NAME: self.cluster,
            names.TAG_INSTANCE_ID: facts.instance_id,
            names.TAG_CREATED_AT: _iso(job.report.sent_at),
            names.TAG_MANAGED: "true",
        }
        description = f"warmpool {self.cluster} {facts.instance_id}"
        groups = self._groups(facts, job.report)
        asked = call
        try:
            call = self._named_create(call)
        except _Unrecorded as u:
            raise self._book_error(job, u.what, u.err) from None
        try:
            try:
                try:
                    made = self.ec2.create_eni(call, description=description, groups=groups, tags=tags)
                except (AddressTaken, AwsError) as err:
                    if call is asked or not (isinstance(err, AddressTaken) or err.code == "InvalidParameterValue"):
                        raise
                    self.tally.add(names.M_PLACEMENT_TAKEN)
                    self.ec2.forget_usage(call.subnet_id)
                    call = asked
                    try:
                        self._record_create(call)  # by count now: a re-sent Create sends that
                    except _Unrecorded as u:
                        raise self._book_error(job, u.what, u.err) from None
                    made = self.ec2.create_eni(call, description=description, groups=groups, tags=tags)
            except TokenMismatch:
                # The token was spent on other parameters (a re-plan after a crash);
                # that ENI is left detached for GC, this one gets its own token.
                token = (call.client_token[:40] + f"-{call.subnet_id[-8:]}-{call.ips}-{call.prefixes}")[:64]
                made = self.ec2.create_eni(
                    replace(call, client_token=token), description=description, groups=groups, tags=tags
                )
        except NoCidrBlocks:
            raise _Replan(
                "InsufficientCidrBlocks",
                exclude=call.subnet_id,
                refresh=False,
                fallback="secondary-ip",
                prefixes=call.prefixes or len(call.at_prefixes),
            ) from None
        except SubnetFull:
            self.ec2.forget_subnets()
            raise _Replan("InsufficientFreeAddressesInSubnet", exclude=call.subnet_id, refresh=False) from None
        eni_id = made.eni.eni_id
        self.tally.add(names.M_ENIS_CREATED)
        self._placed(call.subnet_id, [made.eni.primary_ip, *made.eni.ips], list(made.eni.prefixes))
        self.ec2.spend_subnet(call.subnet_id, 1 + call.ips + PREFIX_SIZE * call.prefixes)
        attachment_id = made.attachment_id if made.instance_id == facts.instance_id else ""
        if not attachment_id:
            try:
                attachment_id = self.ec2.attach(
                    instance_id=facts.instance_id,
                    eni_id=eni_id,
                    device_index=call.device_index,
                    network_card=call.network_card,
                )
            except Throttled as err:
                # Leave it: the report, re-sent with the same seq, re-creates it
                # with the same ClientToken and so finds this ENI again.
                d = self._throttled(err)
                d.resend = True
                raise d from None
            except AwsError as err:
                self._delete_quietly(eni_id)
                return [Failed.clipped(err.code, f"attach {eni_id}: {err.message}")]
        try:
            self.ec2.set_delete_on_termination(eni_id, attachment_id)
        except Throttled:
            raise
        except AwsError as err:  # reconcile sets it later; the ENI is usable now
            log.warning("DeleteOnTermination not set", extra={"eni_id": eni_id, "error": str(err)})
        sub = self.ec2.subnets().get(call.subnet_id)
        self.tally.add(names.M_ADDRESSES_ALLOCATED, len(made.eni.ips) + PREFIX_SIZE * len(made.eni.prefixes))
        return [
            Attached(
                eni_id=eni_id,
                device_index=call.device_index,
                network_card=call.network_card,
                mac=made.mac.lower(),
                subnet_id=call.subnet_id,
                subnet_cidr=sub.cidr if sub else "0.0.0.0/0",
                primary_ip=made.eni.primary_ip,
                ips=list(made.eni.ips),
                prefixes=list(made.eni.prefixes),
            )
        ]

    def _delete_quietly(self, eni_id: str) -> None:
        try:
            self.ec2.delete_eni(eni_id)
            self.tally.add(names.M_ENIS_DELETED)
        except AwsError as err:
            log.warning(
                "could not delete ENI after a failed attach; GC will", extra={"eni_id": eni_id, "error": str(err)}
            )

    def _unassign(self, call: UnassignAddresses, job: NodeJob) -> list[Action]:
        try:
            self.ec2.unassign(call)
        except NotAssigned:
            raise  # stays booked: EC2 does not have it on the ENI (never unbooked to be handed back)
        except AwsError as err:
            self._refused(job, err)
            raise
        self.tally.add(names.M_ADDRESSES_RELEASED, len(call.ips) + PREFIX_SIZE * len(call.prefixes))
        return [Released(eni_id=call.eni_id, ips=list(call.ips), prefixes=list(call.prefixes))]

    def managed(self, eni: EniFacts) -> bool:
        """Tagged for this cluster: the only ENIs warmpool deletes."""
        return eni.tags.get(names.TAG_CLUSTER_NAME) == self.cluster

    def _delete(self, call: DeleteEni, facts: NodeFacts, job: NodeJob) -> list[Action]:
        eni = next((e for e in facts.enis if e.eni.eni_id == call.eni_id), None)
        if eni is None:
            return self._said_again(job, call.eni_id)
        if not self.managed(eni) or is_primary_slot(eni.eni.network_card, eni.eni.device_index):
            return [Failed(code="not-managed", message=f"{call.eni_id} is not warmpool's to delete")]
        self._hold(job, eni.eni.subnet_id, (eni.eni.primary_ip, *eni.eni.ips, *eni.eni.prefixes))
        if not self._write_ahead(job, call, ()):
            return []
        deletable = True
        if eni.attachment_id:
            try:
                self.ec2.detach(eni.attachment_id)
            except NotFound:
                pass  # detached already (or gone): taken either way
            except AwsError as err:
                self._refused(job, err)
                raise
            # EC2 detaches asynchronously (seconds): a Delete before that is over
            # fails with InvalidNetworkInterface.InUse. Ask (one Describe, no
            # mutating call) instead of issuing a Delete known to fail; a
            # detaching ENI is tagged for the cluster, so the GC deletes it.
            seen = self.ec2.describe_enis([call.eni_id]).get(call.eni_id)
            if seen is None:
                deletable = False  # already gone
            elif seen.status != "available" or seen.instance_id:
                deletable = False
                self.tally.add(names.M_ENI_DELETE_DEFERRED)
        if deletable:
            try:
                self.ec2.delete_eni(call.eni_id)
                self.tally.add(names.M_ENIS_DELETED)
            except (InUse, NotFound):
                # Attached again or gone meanwhile: the GC decides.
                self.tally.add(names.M_ENI_DELETE_DEFERRED)
        released = len(eni.eni.ips) + PREFIX_SIZE * len(eni.eni.prefixes)
        self.tally.add(names.M_ADDRESSES_RELEASED, released)
        return [Deleted(eni_id=call.eni_id)]


EXECUTORS: dict[type[Call], Callable[[PlanExecutor, Any, NodeJob, NodeFacts], list[Action]]] = {
    AssignAddresses: PlanExecutor._run_assign,
    CreateEni: PlanExecutor._run_create,
    UnassignAddresses: PlanExecutor._run_unassign,
    DeleteEni: PlanExecutor._run_delete,
    TagPrimaryEni: PlanExecutor._run_tag_primary,
    Reclaim: PlanExecutor._run_reclaim,
    RepeatRelease: PlanExecutor._run_repeat,
    RepeatGrant: PlanExecutor._run_repeat_grant,
}
"""How each call of :data:`warmpool.calls.CALLS` is carried out (a release, a hand-back or a
repeat first reads the release book once per run; an unassign or delete first checks its
offer is still young enough)."""


def _subnet_of(eni_id: str, *facts: NodeFacts) -> str:
    """The subnet of ``eni_id`` in the first of ``facts`` that has it ("" if none does)."""
    for f in facts:
        for e in f.enis:
            if e.eni.eni_id == eni_id:
                return e.eni.subnet_id
    return ""


def _extend_merged(actions: list[Action], new: list[Action]) -> None:
    """Append ``new``, a ``released`` right after one of the same ENI merged into it (the
    release book's repeats unassign again one key per call, ``ReleaseBook.repeats``; the
    agent reads them the same either way)."""
    for a in new:
        last = actions[-1] if actions else None
        if isinstance(a, Released) and isinstance(last, Released) and last.eni_id == a.eni_id:
            actions[-1] = Released(
                eni_id=a.eni_id,
                ips=[*last.ips, *(k for k in a.ips if k not in last.ips)],
                prefixes=[*last.prefixes, *(k for k in a.prefixes if k not in last.prefixes)],
            )
        else:
            actions.append(a)
