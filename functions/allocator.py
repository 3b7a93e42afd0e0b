"""The allocator: one batch of reports in, EC2 calls and results out.

Plain logic behind ports (EC2, SQS, token buckets, ledger, leases, clock), so
the Lambda handler, the integration tests and the bench run this same code.

:meth:`Allocator.handle_batch` runs the batch's stages in order, one method each
(docs/allocator.md, "One batch"), over one :class:`functions.batch.Batch` that
holds every piece of the invocation's state, keyed by instance id:

1. ``_parse``: parse and verify identity;
2. ``_seqs``: read the ledger's seqs;
3. ``_coalesce``: the newest report per instance;
4. ``_describe_and_plan``: one paid Describe round for the batch, then plan
   each node (nodes with nothing to call are recorded and answered here);
5. ``_pay_and_lease``: pay every node's tokens within its fair share, claim
   its lease and re-check;
6. ``_execute``: run the nodes' plans concurrently, record, push;
7. ``_deliver``: re-send the deferred reports, push their results, sum up.

A node travels as an :class:`functions.intake.Incoming` until planned, then a
:class:`functions.execute.NodeJob`.
"""

from __future__ import annotations

import itertools
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from functions.batch import Batch, BatchOutcome
from functions.delivery import Deferral, Delivery
from functions.ec2 import Ec2, SubnetsUnpaid
from functions.errors import AwsError, Throttled
from functions.execute import NodeJob, NodeOutcome, PlanExecutor, unmet
from functions.fairness import FairShare
from functions.identity import IdentityRejected, verify_report_identity
from functions.intake import (
    SEQ_AHEAD_LIMIT,
    SEQ_TOO_FAR,
    Incoming,
    Record,
    sender_matches,
    trusted_keys,
)
from functions.inventory import (
    READ_SHARE,
    describe_tokens,
    foreign_check_tokens,
    instance_problem,
    note_pod_ceiling,
    read_batch,
    tag_primaries,
)
from functions.mapping import Mapper, ThreadMapper, serial_map
from functions.reasons import NodeStatus, Rejection, Why
from functions.release_book import BOOK_ERRORS, LocalReleaseBooks, load_books, settle, with_repeats
from functions.releases import count_flip, fresh_offers, hold_releases, load_flips, offers_held, save_flips
from functions.result_queues import ResultQueues
from functions.settings import LEASE_TTL_MARGIN_S, Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.buckets import refill, time_until
from warmpool.facts import NodeFacts
from warmpool.limits import KNOWN_TYPES, InstanceLimits
from warmpool.messages import (
    AllocationResult,
    Deferred,
    Failed,
    Fenced,
    MessageError,
    Mode,
    PoolReport,
    RestoreChecked,
    SeqFloor,
    parse_report,
)
from warmpool.names import (
    M_DESCRIBE_THROTTLED,
    M_FAIR_SHARE_DEFERRED,
    M_IDENTITY_UNVERIFIED,
    M_LEDGER_UNREAD,
    M_REPORTS_FENCED,
    M_REPORTS_QUIET,
    M_RESTORES_CHECKED,
    M_SCARCE_SAID,
    M_SEQ_FLOORS_SAID,
    M_SUBNET_FREE,
    M_TOKENS_FORFEITED,
)
from warmpool.planner import Inventory, Plan, node_max_pods, plan_node, pods_inventory, quiet
from warmpool.ports import Ec2Port, LedgerUnread, Ports, ReleaseBookStore
from warmpool.release_book import ReleaseBook
from warmpool.scarcity import node_scarce
from warmpool.scheduling import coalesce, first_start_confirmed, priority_key, restore_current
from warmpool.subnets import Subnet

FENCE_MARGIN_S = 300.0
"""How much longer than the oldest offer the allocator acts on a restore check's fence holds:
room for the containers' clocks to disagree (docs/safety.md, row 11)."""

__all__ = ["SEQ_AHEAD_LIMIT", "Allocator", "BatchOutcome", "Mapper", "Record", "ThreadMapper", "serial_map"]
"""The allocator's interface: a batch of :class:`Record` in, a :class:`BatchOutcome` out."""

log = logging.getLogger(__name__)


DEADLINE_REASON = Why.DEADLINE
DESCRIBE_WAIT_REASON = Why.DESCRIBE_WAIT
UNLISTED_REASON = Why.UNLISTED
UNLISTED_GRACE_S = 600.0
"""How long after it was sent a report of an instance DescribeInstances does not show waits
rather than being refused (``Allocator._may_be_unlisted``): a new instance's absence from an
eventually consistent Describe. A terminated instance's reports end in the DLQ after it."""
UNLISTED_RETRY_S = 20.0
"""The wait between two tries of such a report."""


class Allocator:
    """Serves batches of pool reports for one cluster."""

    def __init__(
        self,
        ports: Ports,
        settings: Settings,
        *,
        mapper: Mapper[Any, Any] | None = None,
        tally: Tally | None = None,
    ) -> None:
        """``ports``: the one wiring (``functions.aws.ports`` in production,
        ``emulated.harness`` elsewhere); ``mapper`` runs a batch's nodes (threads in
        production); ``tally`` collects the metrics."""
        self.settings = settings
        self.clock = clock = ports.clock
        self.buckets = buckets = ports.buckets
        self.ledger = ports.ledger
        self.leases = ports.leases
        self.tally = tally if tally is not None else Tally()
        self.ec2: Ec2Port = Ec2(ports.ec2, settings, clock, self.tally, pay=self._pay_read)
        self.delivery = Delivery(ports.sqs, settings, self.tally)
        self.queues = ResultQueues(ports.sqs, settings, self.tally)
        self.books: ReleaseBookStore = ports.release_books if ports.release_books is not None else LocalReleaseBooks()
        """What the allocator took from each instance (``DynamoReleaseBooks`` in production; this
        container's own otherwise), authoritative over Describe (docs/allocator.md)."""
        self.executor = PlanExecutor(self.ec2, buckets, settings, self.tally, clock, books=self.books)
        self.map: Mapper[Any, Any] = mapper or serial_map
        self._invocations = itertools.count(1)
        self._instance = uuid.uuid4().hex[:12]  # lease owners must differ across containers
        self.trusted = trusted_keys(settings)
        self.fair = FairShare(
            settings.bucket_spec,
            window_s=settings.fair_window_s,
            flip_limit=settings.flip_limit,
            flip_window_s=settings.flip_window_s,
            damp_s=settings.damp_s,
        )
        self.read_fair = FairShare(settings.bucket_spec, window_s=settings.fair_window_s, flip_limit=0)
        """Per-instance fair shares of the Describe buckets (reads; ``fair`` is the mutating calls')."""
        self._read_waiters: dict[str, float] = {}
        """Instances deferred for Describe tokens, and when (this container's view)."""
        self.flips = ports.flips
        """Shared flip histories (``DynamoFlips`` in production); None: this container's only."""

    def _key(self, report: PoolReport) -> str:
        """Ledger rows, leases, seqs, coalescing and result queues are keyed by
        the (verified) instance id; ``node`` is only a label."""
        return report.instance_id

    @property
    def cluster(self) -> str:
        return self.settings.cluster

    # --- the batch -------------------------------------------------------------

    def handle_batch(
        self, records: Sequence[Record], invocation_id: str | None = None, deadline: float | None = None
    ) -> BatchOutcome:
        """Serve one batch, its stages in order, all per-invocation state in one
        :class:`Batch`. ``deadline`` (clock time; the Lambda's remaining time)
        stops new work ``deadline_margin_s`` before it; what did not start is
        deferred."""
        b = Batch(
            owner=invocation_id or f"{self._instance}-{next(self._invocations)}",
            deadline=deadline,
            stop_at=None if deadline is None else deadline - self.settings.deadline_margin_s,
        )
        self.tally.add(names.M_REPORTS_RECEIVED, len(records))
        incoming = self._parse(records, b)  # 1
        if not incoming:
            return b.out
        incoming = self._seqs(incoming, b)  # 2
        kept = self._coalesce(incoming, b)  # 3
        active = self._describe_and_plan(kept, b)  # 4
        granted = self._pay_and_lease(active, b)  # 5
        self._execute(granted, b)  # 6
        self._deliver(len(records), b)  # 7
        return b.out

    # --- 1. parse, verify identity ---------------------------------------------

    def _parse(self, records: Sequence[Record], b: Batch) -> list[Incoming]:
        """The records whose report parses, is for this cluster, and whose
        identity (and, in ``sender-id`` mode, SQS sender) checks out."""
        valid: list[Incoming] = []
        for rec in records:
            try:
                report = parse_report(rec.body)
            except MessageError as err:
                b.out.invalid += 1
                self.tally.add(names.M_REPORTS_INVALID, reason=err.reason)
                log.warning(
                    "invalid report", extra={"reason": err.reason, "detail": err.detail, "message_id": rec.message_id}
                )
                self._dead_letter(rec, err.reason, err.detail, b)
                continue
            node = Incoming(rec, report)
            if report.cluster != self.cluster:
                self._reject(node, Rejection.FOREIGN_CLUSTER, b)
                continue
            if self.trusted is not None:
                verified = verify_report_identity(
                    report, self.trusted, account=self.settings.account, region=self.settings.region
                )
                if isinstance(verified, IdentityRejected):
                    self._reject(node, verified.reason, b, detail=verified.detail)
                    continue
            else:
                self.tally.add(M_IDENTITY_UNVERIFIED)
            if self.settings.identity_mode == "sender-id" and not sender_matches(rec.sender_id, report.instance_id):
                self._reject(node, Rejection.SENDER_MISMATCH, b)
                continue
            valid.append(node)
        return valid

    def _dead_letter(self, rec: Record, reason: str, detail: str, b: Batch) -> None:
        if not self.delivery.dead_letter(rec.body, reason, detail):
            b.redeliver(rec.message_id)  # let SQS redrive it instead

    def _reject(self, node: Incoming, reason: str, b: Batch, detail: str = "") -> None:
        report = node.report
        b.out.rejected += 1
        self.tally.add(names.M_REPORTS_REJECTED, reason=reason)
        log.warning(
            "report rejected",
            extra={
                "reason": reason,
                "detail": detail,
                "cluster": report.cluster,
                "node": report.node,
                "seq": report.seq,
                "instance_id": report.instance_id,
            },
        )
        self._dead_letter(node.record, reason, detail, b)

    # --- 2. seqs ---------------------------------------------------------------

    def _seqs(self, incoming: list[Incoming], b: Batch) -> list[Incoming]:
        """Read the ledger's last seq of each instance of the batch into ``b``;
        refuse a seq too far ahead."""
        try:
            b.last = self.ledger.last_seqs(self.cluster, sorted({self._key(n.report) for n in incoming}))
        except LedgerUnread as err:
            # A row not read is unknown, never "no row" (seq -1 would make a
            # stale report look fresh): those nodes' reports wait.
            b.last, b.unread = err.seqs, err.unread
        return self._refuse_far_seqs(incoming, b)

    def _refuse_far_seqs(self, valid: list[Incoming], b: Batch) -> list[Incoming]:
        """Refuse a seq more than :data:`SEQ_AHEAD_LIMIT` ahead of both the
        instance's last seq and now (ms): beyond any honest node's clock, it would
        use up the room its later reports number into after a ``seq-floor``."""
        now_ms = int(self.clock.now() * 1000)
        keep: list[Incoming] = []
        for n in valid:
            bound = max(b.last_seq(self._key(n.report)), now_ms) + SEQ_AHEAD_LIMIT
            if n.report.seq > bound:
                self._reject(n, SEQ_TOO_FAR, b, detail=f"seq {n.report.seq} > {bound}")
                continue
            keep.append(n)
        return keep

    # --- 3. coalesce -----------------------------------------------------------

    def _coalesce(self, incoming: list[Incoming], b: Batch) -> list[Incoming]:
        """The newest report per instance (the core's :func:`coalesce`); the
        stale and the superseded are counted and dropped, the instances whose
        ledger row was not read wait, and offers too old to act on are dropped."""
        co = coalesce([n.report for n in incoming], b.last)
        b.out.stale, b.out.superseded = len(co.stale), len(co.superseded)
        self.tally.add(names.M_REPORTS_STALE, b.out.stale)
        self.tally.add(names.M_REPORTS_COALESCED, b.out.superseded)
        self._say_floors(co.stale, b)
        # coalesce keeps, per instance, the first report with its newest seq.
        first: dict[tuple[str, int], Incoming] = {}
        for n in incoming:
            first.setdefault((n.report.instance_id, n.report.seq), n)
        kept = self._wait_for_unread_rows([first[(r.instance_id, r.seq)] for r in co.keep], b)
        return [replace(n, report=self._drop_old_offers(n.report), sent=n.report) for n in kept]

    def _say_floors(self, stale: Sequence[PoolReport], b: Batch) -> None:
        """Answer each report below its instance's ledger seq ``seq-floor`` with that seq
        (docs/design.md, "Seq"): its agent numbers its reports from below the ledger (its wall
        clock behind the seqs a process before it sent, a checkpoint lost or older) and would
        be stale until its clock passed them (docs/safety.md, L1). Nothing is acted on: the
        answer says only the instance's own seq, which no other report can move (rows are keyed
        by verified instance). A report at the ledger's seq is the served one delivered again:
        not answered. One answer per instance and batch, to its newest such report."""
        newest: dict[str, PoolReport] = {}
        for r in stale:
            key = self._key(r)
            if r.seq < b.last_seq(key) and (key not in newest or r.seq > newest[key].seq):
                newest[key] = r
        for key, r in newest.items():
            result = AllocationResult(
                cluster=self.cluster,
                node=r.node,
                instance_id=r.instance_id,
                in_reply_to=r.seq,
                actions=[SeqFloor(floor=b.last_seq(key))],
            )
            try:
                if self.queues.push(result):
                    self.tally.add(M_SEQ_FLOORS_SAID)
            except AwsError as err:
                log.error("result push failed", extra={"node": r.node, "seq": r.seq, "error": str(err)})

    def _wait_for_unread_rows(self, kept: list[Incoming], b: Batch) -> list[Incoming]:
        """Defer the nodes whose ledger row was not read; the others go on."""
        if not b.unread:
            return kept
        self.tally.add(M_LEDGER_UNREAD, len(b.unread))
        log.warning("ledger rows not read; their reports wait", extra={"nodes": sorted(b.unread)})
        self._defer_unread(
            [n for n in kept if self._key(n.report) in b.unread],
            float(self.settings.lease_retry_s),
            b,
            "ledger row not read",
        )
        return [n for n in kept if self._key(n.report) not in b.unread]

    def _drop_old_offers(self, report: PoolReport) -> PoolReport:
        """Only the release offers the agent cannot have taken back yet
        (:func:`functions.releases.fresh_offers`)."""
        return fresh_offers(report, self.clock, self.settings.release_offer_max_age_s, self.tally)

    # --- 4. describe, verify, plan ---------------------------------------------

    def _describe_and_plan(self, kept: list[Incoming], b: Batch) -> list[NodeJob]:
        """The batch's Describe round paid and made, its nodes verified and
        planned in priority order; the nodes with nothing to call are recorded
        and answered here. Returns the nodes with calls to make."""
        kept = self._pay_to_read(kept, b)
        try:
            jobs = self._verify_and_plan(kept, b)
        except Throttled as err:
            # The batch's reads were throttled: defer it unread (nothing was
            # decided yet), with the AIMD cut for that action.
            self._defer_unread(kept, self._throttle_wait(err), b, f"{err.action} throttled")
            return []
        except SubnetsUnpaid as err:
            # No subnets read yet in this container and no DescribeSubnets token now.
            self._defer_unread(kept, err.wait, b)
            return []
        return self._settle_noops(jobs, b)

    def _pay_to_read(self, kept: list[Incoming], b: Batch) -> list[Incoming]:
        """The nodes to read, once the batch's Describe round is paid for
        (shared buckets): not the quiet ones (recorded without a read), not
        those over their fair share of the Describe buckets; all deferred
        unread when too late or the buckets cannot pay now."""
        if not kept:
            return kept
        if b.late(self.clock.now()):
            self._defer_unread(kept, 1.0, b, DEADLINE_REASON)
            return []
        kept = self._record_quiet(kept, b)
        kept = self._read_fair_shares(kept, b)
        if not kept:
            return kept
        request = describe_tokens([n.report for n in kept])
        now = self.clock.now()
        wait = self.buckets.take_batch([request], now)[0]
        if wait > 0:
            # Describe* share the account's buckets too (Karpenter, the cluster
            # autoscaler and the console call them): no tokens, no reading.
            self._defer_unread(kept, wait, b)
            return []
        self.tally.add(names.M_TOKENS_TAKEN, sum(request.values()))
        for n in kept:
            self.read_fair.spend(self._key(n.report), READ_SHARE, now)
        return kept

    def _record_quiet(self, kept: list[Incoming], b: Batch) -> list[Incoming]:
        """Reports that cannot lead to an EC2 call (:func:`warmpool.planner.quiet`)
        of instances the ledger knows (a row is written only once EC2 showed the
        instance running in the cluster) are recorded without a Describe round:
        their seq moves the ledger forward as any served report's, no reply is
        owed. The others go on to be read."""
        candidates: list[Incoming] = []
        rest: list[Incoming] = []
        for n in kept:
            r = n.report
            lim = KNOWN_TYPES.get(r.instance_type)
            if (
                b.last_seq(self._key(r)) >= 0
                and r.restored_from is None  # owed an answer, given under the lease
                and lim is not None
                and quiet(
                    r,
                    lim,
                    node_max_pods(r, lim, self.settings.max_pods, multi_card=self.settings.multi_card),
                    multi_card=self.settings.multi_card,
                )
            ):
                candidates.append(n)
            else:
                rest.append(n)
        # A report of an instance whose release book holds entries settles them (or repeats
        # them): never quiet. A book that could not be read is unknown: not quiet either.
        books = load_books(self.books, self.cluster, [n.report.instance_id for n in candidates], self.tally)
        quiet_ones: list[Incoming] = []
        for n in candidates:
            book = books.get(n.report.instance_id)
            if book is not None and book.fences(n.report, self.clock.now()):
                self._fenced(n, book, b)
                continue
            (quiet_ones if book is not None and not book.taken and not book.given else rest).append(n)
        if quiet_ones:
            b.out.noop += len(quiet_ones)
            self.tally.add(M_REPORTS_QUIET, len(quiet_ones))
            for res in self.map(self._finish_quiet, quiet_ones):
                b.settle(res)
        return rest

    def _finish_quiet(self, n: Incoming) -> NodeOutcome:
        r = n.report
        res = NodeOutcome(r.node, r.instance_id, r.seq, NodeStatus.SERVED)
        self._record(r, r.instance_id, res)
        # No reply is owed, unless the zone is scarce: an idle node learns it only so (one
        # message per idle node's heartbeat, only while scarce). From the subnets read last,
        # however old: never a DescribeSubnets for it (none read yet: not said).
        if self._scarce(r, list(self.ec2.known_subnets().values())):
            result = AllocationResult(
                cluster=self.cluster, node=r.node, instance_id=r.instance_id, in_reply_to=r.seq, scarce=True
            )
            try:
                if self.queues.push(result):
                    self.tally.add(M_SCARCE_SAID)
            except AwsError as err:
                log.error("result push failed", extra={"node": r.node, "seq": r.seq, "error": str(err)})
            res.result = result
        return res

    def _planned(
        self,
        r: PoolReport,
        f: NodeFacts,
        inv: Inventory,
        lim: InstanceLimits,
        subnets: Sequence[Subnet],
        ceiling: int,
        scarce: bool,
    ) -> tuple[Plan, int]:
        """The node's plan, avoiding subnets the container remembers refused /28s
        (``PlanExecutor.avoid_blockless``), and the memory's generation it was made with (the
        job's ``memory_gen``)."""
        gen = self.executor.memory_gen
        plan = self.executor.avoid_blockless(partial(self._plan_node, r, inv, lim, subnets, ceiling, scarce), f)
        return plan, gen

    def _plan_node(
        self,
        r: PoolReport,
        inv: Inventory,
        lim: InstanceLimits,
        subnets: Sequence[Subnet],
        ceiling: int,
        scarce: bool,
        exclude: frozenset[str],
        force: Mode | None,
    ) -> Plan:
        """One plan of the node with ``exclude`` and ``force`` (``_planned`` makes them)."""
        return plan_node(
            r,
            inv,
            lim,
            subnets,
            cluster=self.cluster,
            exclude_subnets=exclude,
            force_mode=force,
            max_pods=ceiling,
            subnet_rule=self.settings.subnet_rule,
            custom=self.settings.custom,
            multi_card=self.settings.multi_card,
            lean=scarce,
        )

    def _scarce(self, r: PoolReport, subnets: Sequence[Subnet], vpc_id: str = "", own_subnet: str = "") -> bool:
        """Whether results to ``r`` say ``scarce`` (:func:`warmpool.scarcity.node_scarce`)."""
        return node_scarce(
            r,
            subnets,
            cluster=self.cluster,
            threshold=self.settings.scarce_free,
            rule=self.settings.subnet_rule,
            custom=self.settings.custom,
            vpc_id=vpc_id,
            own_subnet=own_subnet,
        )

    def _count_subnets(self, subnets: Sequence[Subnet]) -> None:
        """Free addresses per subnet read, for the dashboard (a gauge: once per invocation)."""
        for s in subnets:
            self.tally.add(M_SUBNET_FREE, s.free, subnet=s.subnet_id)

    def _read_fair_shares(self, kept: list[Incoming], b: Batch) -> list[Incoming]:
        """Defer, unread, the reports of instances that spent their fair share of
        the Describe buckets in the window (``READ_SHARE`` per round they were
        read in, one more per foreign-ENI check), while the buckets cannot pay
        this batch or other instances wait for Describe tokens: one node's stream
        of reports cannot keep the buckets empty for every other node."""
        if not self.read_fair.enabled:
            return kept
        now = self.clock.now()
        window = self.settings.fair_window_s
        self._read_waiters = {i: t for i, t in self._read_waiters.items() if now - t < window}
        if not any(self.read_fair.spent_within(self._key(n.report), now) for n in kept):
            return kept  # every instance's first reading in the window is allowed
        batch = {self._key(n.report) for n in kept}
        others = set(self._read_waiters) - batch
        request = describe_tokens([n.report for n in kept])
        contended = (
            set(request)
            if others
            else {
                a
                for a, k in request.items()
                if refill(self.buckets.load(a, now), self.settings.bucket_spec(a), now).tokens < k
            }
        )
        if not contended:
            return kept
        keep: list[Incoming] = []
        over: dict[float, list[Incoming]] = {}
        for n in kept:
            wait = self.read_fair.wait(self._key(n.report), READ_SHARE, now, contended, batch | others)
            if wait > 0:
                over.setdefault(wait, []).append(n)
            else:
                keep.append(n)
        for wait, nodes in over.items():
            self.tally.add(M_FAIR_SHARE_DEFERRED, len(nodes))
            self._defer_unread(nodes, wait, b, "fair share of the EC2 Describe budget spent")
        return keep

    def _throttle_wait(self, err: Throttled) -> float:
        """Record the AIMD cut for the throttled action; the wait until its bucket has a token."""
        now = self.clock.now()
        self.buckets.throttled(err.action, now)
        self.tally.add(M_DESCRIBE_THROTTLED, Action=err.action)
        return time_until(self.buckets.load(err.action, now), self.settings.bucket_spec(err.action), 1, now)

    def _may_be_unlisted(self, r: PoolReport) -> bool:
        """A report of an instance DescribeInstances does not show, sent less than
        :data:`UNLISTED_GRACE_S` ago (by its ``sent_at``): DescribeInstances is eventually
        consistent with no documented bound, and a new instance may be missing from it for a
        while. Its report waits (re-sent) instead of going to the DLQ; after the grace it is
        refused as ``instance-not-found``."""
        return abs(self.clock.now() - r.sent_at) < UNLISTED_GRACE_S

    def _defer_unread(self, nodes: list[Incoming], wait: float, b: Batch, reason: str = DESCRIBE_WAIT_REASON) -> None:
        """Re-send these reports now, unread and unplanned (no result is pushed)."""
        if not nodes:
            return
        delay = min(float(self.settings.max_defer_s), max(1.0, wait if math.isfinite(wait) else 60.0))
        if reason == DESCRIBE_WAIT_REASON:
            self.tally.add(names.M_TOKENS_WAITED_S, delay)
            now = self.clock.now()
            for n in nodes:
                self._read_waiters[self._key(n.report)] = now
        items = [Deferral(n.record.body, math.ceil(delay), self._key(n.report)) for n in nodes]
        failed = set(self.delivery.defer(items))
        for n in nodes:
            r = n.report
            if self._key(r) in failed:
                b.redeliver(n.record.message_id)
                continue
            b.settle(NodeOutcome(r.node, r.instance_id, r.seq, NodeStatus.DEFERRED, retry_after_s=delay, reason=reason))

    def _verify_and_plan(self, nodes: list[Incoming], b: Batch) -> list[NodeJob]:
        """Every read first (Describe round, foreign-ENI check, subnets,
        instance types), then the decisions: a throttled read raises
        :class:`Throttled` before any report was rejected or planned, so the
        caller can defer the whole batch unread."""
        if not nodes:
            return []
        keep = [n.report for n in nodes]
        check_wait: list[float] = []
        view = read_batch(self.ec2, self.cluster, keep, lambda missing: self._pay_check(missing, check_wait))
        servable = [f.instance_id for f in view.servable(self.cluster, keep)]
        load_flips(self.fair, self.flips, self.cluster, servable, self.tally)
        books = load_books(self.books, self.cluster, servable, self.tally)
        # --- decisions ---
        owners: dict[str, str] = {}
        jobs: list[NodeJob] = []
        unread_books: list[Incoming] = []
        unchecked: list[Incoming] = []
        unlisted: list[Incoming] = []
        for n in nodes:
            r, rec = n.report, n.record
            f = view.facts.get(r.instance_id)
            reason = instance_problem(self.cluster, f)
            if reason is None and r.instance_id in owners:
                reason = Rejection.INSTANCE_CLAIMED_TWICE
            if reason == Rejection.INSTANCE_NOT_FOUND and self._may_be_unlisted(r):
                unlisted.append(n)
                continue
            if reason:
                self._reject(n, reason, b)
                continue
            assert f is not None
            read = books.get(r.instance_id)
            if read is not None and read.fences(r, self.clock.now()):
                self._fenced(n, read, b)
                continue
            if read is None:
                # Unread: whether the report is fenced is unknown, and a grant or a recorded seq
                # of a fenced one would still act (review 5, V2, V3): the node waits.
                unread_books.append(n)
                continue
            owners[r.instance_id] = r.node
            if self.trusted is not None and b.last_seq(self._key(r)) < 0:
                self.queues.create(r.instance_id)
            if r.instance_id in view.unchecked:
                unchecked.append(n)
                continue
            foreign = view.foreign_enis.get(r.instance_id, [])
            if foreign:
                self._reject(n, Rejection.FOREIGN_ENI, b, ",".join(foreign))
                continue
            lim = view.limits[f.instance_type]
            if isinstance(lim, AwsError):
                self._reject(n, Rejection.UNKNOWN_INSTANCE_TYPE, b, str(lim))
                continue
            ceiling = node_max_pods(r, lim, self.settings.max_pods, multi_card=self.settings.multi_card)
            # A report of a restored checkpoint settles nothing before its answer: the entries a
            # settle would drop are what may make the checkpoint not current (hostile review of
            # the restore check, R6).
            book = (
                books.get(r.instance_id)
                if r.restored_from is not None
                else self._settled_book(n, f, books.get(r.instance_id))
            )
            shown = f.keys_by_eni()  # before the book's correction
            f = book.correct(f) if book is not None else f
            inv = f.inventory(self.cluster)
            scarce = self._scarce(r, view.subnets, inv.vpc_id, inv.own_subnet)
            plan, gen = self._planned(r, f, inv, lim, view.subnets, ceiling, scarce)
            note_pod_ceiling(r, pods_inventory(r, inv), ceiling, self.tally)
            if r.first_start:
                # A first start's ask is answered alone, its plan never made (``_serve``): it
                # takes no tokens and spends no fair share, so empty buckets do not defer an
                # answer that makes no EC2 call (a hostile review's F2: deferred past the agent's
                # wait, the node paid the Unassign and Assign the answer saves).
                plan = replace(plan, calls=())
            else:
                count_flip(
                    self.fair,
                    r if n.sent is None else n.sent,  # as sent: an offer too old for this container is still asked
                    plan,
                    instance_id=self._key(r),
                    clock=self.clock,
                    damp_s=self.settings.damp_s,
                    tally=self.tally,
                )
                plan = self._release_rules(r, f, plan, book, rec.body, shown)
            jobs.append(
                NodeJob(
                    r,
                    f,
                    lim,
                    plan,
                    rec.message_id,
                    rec.body,
                    max_pods=ceiling,
                    book=book,
                    scarce=scarce,
                    memory_gen=gen,
                )
            )
            if plan.delta.low:
                self.tally.add(names.M_NODES_IN_DEFICIT)
        save_flips(self.fair, self.flips, self.cluster, self.tally, self.clock.now())
        self._count_subnets(view.subnets)
        self._defer_unread(unchecked, max(check_wait, default=1.0), b)
        self._defer_unread(unlisted, UNLISTED_RETRY_S, b, UNLISTED_REASON)
        self._defer_unread(unread_books, float(self.settings.lease_retry_s), b, "release book not read")
        jobs.sort(key=lambda j: priority_key(j.report, j.plan.delta))
        return jobs

    def _pay_read(self, cost: Mapping[str, int]) -> float:
        """Pay a read the EC2 adapter makes on its own (DescribeSubnets) from the account's
        buckets; the wait until the tokens exist when it cannot be paid now (0: paid)."""
        wait = self.buckets.take_batch([cost], self.clock.now())[0]
        if wait <= 0:
            self.tally.add(names.M_TOKENS_TAKEN, sum(cost.values()))
        return wait

    def _pay_check(self, missing: Mapping[str, set[str]], waits: list[float]) -> bool:
        """Pay the foreign-ENI check (a Describe like any other) from the Describe
        bucket, counted against the fair share of each instance that asked for it
        by naming ENIs EC2 does not show on it; False (the wait in ``waits``) when
        the bucket cannot pay now."""
        cost = foreign_check_tokens(missing)
        now = self.clock.now()
        wait = self.buckets.take_batch([cost], now)[0]
        if wait > 0:
            waits.append(wait)
            return False
        self.tally.add(names.M_TOKENS_TAKEN, sum(cost.values()))
        for iid in missing:
            self.read_fair.spend(iid, {"DescribeNetworkInterfaces": 1}, now)
        return True

    def _release_rules(
        self,
        r: PoolReport,
        f: NodeFacts,
        plan: Plan,
        book: ReleaseBook | None,
        body: str,
        shown: Mapping[str, tuple[str, ...]],
    ) -> Plan:
        held = hold_releases(
            r,
            f,
            plan,
            instance_id=self._key(r),
            fair=self.fair,
            clock=self.clock,
            settings=self.settings,
            tally=self.tally,
        )
        # attached and not already detaching: a deleted one may be detached again
        attached = [e.eni.eni_id for e in f.enis if e.status == "in-use" and e.attachment_status != "detaching"]
        # the release rules hold the repeats' new Unassigns of an offer as they hold its own
        hold = offers_held(r, instance_id=self._key(r), fair=self.fair, clock=self.clock, settings=self.settings)
        return with_repeats(held, book, r, body, attached, shown, hold)

    def _settled_book(self, n: Incoming, f: NodeFacts, book: ReleaseBook | None) -> ReleaseBook | None:
        """The instance's release book without what this report shows the agent dropped (None: not read)."""
        if book is None or not (book.taken or book.given):
            return book
        shown = [e.eni.eni_id for e in f.enis]
        expires = self.clock.now() + self.settings.ledger_ttl_s
        r = n.report
        return settle(self.books, self.cluster, r.instance_id, book, r, n.record.body, shown, expires, self.tally)

    def _settle_noops(self, jobs: list[NodeJob], b: Batch) -> list[NodeJob]:
        """Record and answer the nodes with nothing to call; the others go on (and so does a
        report owed a :class:`RestoreChecked`: it is answered under the node's lease)."""
        active = [j for j in jobs if j.plan.calls or j.report.restored_from is not None]
        noops = [j for j in jobs if not (j.plan.calls or j.report.restored_from is not None)]
        b.out.noop += len(noops)
        for res in self.map(self._finish_noop, noops):
            b.settle(res)
        return active

    # --- 5. tokens, fair share, lease ------------------------------------------

    def _pay_and_lease(self, active: list[NodeJob], b: Batch) -> list[NodeJob]:
        """Pay first (one store round for the batch), then lease only the paid
        nodes: a deferred node costs no lease. Tokens of a node lost to a
        concurrent invocation are forfeited (rare; counted). Then the batch's
        new primary ENIs are tagged in one call."""
        if not active:
            return []
        if b.late(self.clock.now()):
            for job in active:
                self._defer(job, 1.0, DEADLINE_REASON, b)
            return []
        paid = self._pay(self._fair_shares(active, b), b)
        granted = self._recheck(self._lease(paid, b), b)
        return tag_primaries(self.ec2, self.buckets, self.clock, self.tally, self.cluster, granted)

    def _fair_shares(self, active: list[NodeJob], b: Batch) -> list[NodeJob]:
        """Defer the jobs of instances that spent their fair share of a bucket in the window."""
        if not self.fair.enabled:
            return active
        keep: list[NodeJob] = []
        now = self.clock.now()
        wanted: dict[str, int] = {}
        for j in active:
            for a, n in j.plan.tokens().items():
                wanted[a] = wanted.get(a, 0) + n
        # Others wait only where the bucket cannot pay this whole batch now.
        contended = {
            a
            for a, n in wanted.items()
            if refill(self.buckets.load(a, now), self.settings.bucket_spec(a), now).tokens < n
        }
        waiting = {self._key(j.report) for j in active}
        for job in active:
            wait = self.fair.wait(self._key(job.report), job.plan.tokens(), now, contended, waiting)
            if wait > 0:
                self.tally.add(M_FAIR_SHARE_DEFERRED)
                self._defer(job, wait, "fair share of the EC2 budget spent", b)
            else:
                keep.append(job)
        return keep

    def _pay(self, active: list[NodeJob], b: Batch) -> list[NodeJob]:
        """Every node's tokens in one store round, in priority order: the paid
        nodes; the others deferred (or failed: a plan larger than a bucket)."""
        if not active:
            return []
        waits = self.buckets.take_batch([j.plan.tokens() for j in active], self.clock.now())
        paid: list[NodeJob] = []
        for job, wait in zip(active, waits, strict=True):
            if wait == 0:
                self.tally.add(names.M_TOKENS_TAKEN, job.plan.mutating_calls)
                self.fair.spend(self._key(job.report), job.plan.tokens(), self.clock.now())
                paid.append(job)
            elif math.isinf(wait):
                res = NodeOutcome(
                    job.report.node,
                    job.facts.instance_id,
                    job.report.seq,
                    NodeStatus.FAILED,
                    [Failed(code="plan-exceeds-budget", message="plan needs more tokens than a bucket holds")],
                )
                b.settle(res)
                self._finish(job, res)
            else:
                self.tally.add(names.M_TOKENS_WAITED_S, wait)
                self._defer(job, wait, "waiting for EC2 tokens", b)
        return paid

    def _lease(self, paid: list[NodeJob], b: Batch) -> list[NodeJob]:
        """Claim each paid node's lease; a node busy in another invocation is deferred."""
        if not paid:
            return []
        now = self.clock.now()
        # The lease outlives the function (the TTL is derived from its timeout)
        # and, when known, this invocation's own deadline.
        ttl = self.settings.lease_ttl_s
        if b.deadline is not None:
            ttl = max(ttl, b.deadline - now + LEASE_TTL_MARGIN_S)
        claims = self.map(lambda j: self.leases.claim(self.cluster, self._key(j.report), b.owner, now, ttl), paid)
        claimed: list[NodeJob] = []
        for job, got in zip(paid, claims, strict=True):
            if got:
                claimed.append(job)
            else:
                self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
                self._defer(job, float(self.settings.lease_retry_s), "node busy in another invocation", b)
        return claimed

    def _recheck(self, claimed: list[NodeJob], b: Batch) -> list[NodeJob]:
        """The claimed nodes to execute. Served by another invocation between
        our read and our claim? Then our view of EC2 may predate its calls: a
        node whose ledger row moved since the batch read it is read again and
        re-planned (or dropped as stale)."""
        if not claimed:
            return []
        claimed, now_seqs = self._reread_seqs(claimed, b)
        moved = [now_seqs.get(self._key(j.report), -1) != b.last_seq(self._key(j.report)) for j in claimed]
        if not any(moved):
            return claimed
        reread = describe_tokens([j.report for j, m in zip(claimed, moved, strict=True) if m])
        wait = self.buckets.take_batch([reread], self.clock.now())[0]
        if wait > 0:
            for j, m in zip(claimed, moved, strict=True):
                if m:
                    self._give_up(j, wait, DESCRIBE_WAIT_REASON, b)
            return [j for j, m in zip(claimed, moved, strict=True) if not m]
        self.tally.add(names.M_TOKENS_TAKEN, sum(reread.values()))
        try:
            fresh_facts = self.ec2.describe_nodes(j.facts.instance_id for j, m in zip(claimed, moved, strict=True) if m)
            subnets = list(self.ec2.subnets().values())
        except Throttled as err:
            wait = self._throttle_wait(err)
            for j, m in zip(claimed, moved, strict=True):
                if m:
                    self._give_up(j, wait, f"{err.action} throttled", b)
            return [j for j, m in zip(claimed, moved, strict=True) if not m]
        keep: list[NodeJob] = []
        for j, m in zip(claimed, moved, strict=True):
            if not m:
                keep.append(j)
                continue
            f = fresh_facts.get(j.facts.instance_id)
            shown = f.keys_by_eni() if f is not None else {}
            if f is not None and j.book is not None:
                f = j.book.correct(f)
            if j.report.seq <= now_seqs.get(self._key(j.report), -1) or f is None:
                b.out.stale += 1
                self.tally.add(names.M_REPORTS_STALE)
                self.leases.release(self.cluster, self._key(j.report), b.owner)
                continue
            plan, gen = self._planned(j.report, f, f.inventory(self.cluster), j.limits, subnets, j.max_pods, j.scarce)
            plan = self._release_rules(j.report, f, plan, j.book, j.body, shown)
            nj = NodeJob(
                j.report,
                f,
                j.limits,
                plan,
                j.record_id,
                j.body,
                max_pods=j.max_pods,
                book=j.book,
                scarce=j.scarce,
                memory_gen=gen,
            )
            paid = j.plan.tokens()
            extra = {a: n - paid.get(a, 0) for a, n in plan.tokens().items() if n > paid.get(a, 0)}
            wait = self.buckets.take_batch([extra], self.clock.now())[0] if extra else 0.0
            if plan.calls and wait > 0:
                self.leases.release(self.cluster, self._key(j.report), b.owner)
                self._defer(nj, wait, "waiting for EC2 tokens", b)
            elif plan.calls or nj.report.restored_from is not None:
                keep.append(nj)
            else:
                self.leases.release(self.cluster, self._key(j.report), b.owner)
                b.settle(self._finish_noop(nj))
        return keep

    def _reread_seqs(self, claimed: list[NodeJob], b: Batch) -> tuple[list[NodeJob], dict[str, int]]:
        """The ledger's seqs of the claimed nodes now; a node whose row cannot be read gives up."""
        try:
            return claimed, self.ledger.last_seqs(self.cluster, [self._key(j.report) for j in claimed])
        except LedgerUnread as err:
            self.tally.add(M_LEDGER_UNREAD, len(err.unread))
            for j in [j for j in claimed if self._key(j.report) in err.unread]:
                self._give_up(j, float(self.settings.lease_retry_s), "ledger row not read", b)
            return [j for j in claimed if self._key(j.report) not in err.unread], err.seqs

    def _give_up(self, job: NodeJob, wait: float, reason: str, b: Batch) -> None:
        """A paid, leased node that will not be served now: release its lease,
        forfeit its tokens (counted), defer its report."""
        self.leases.release(self.cluster, self._key(job.report), b.owner)
        self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
        self._defer(job, wait, reason, b)

    def _defer(self, job: NodeJob, wait: float, reason: str, b: Batch) -> None:
        delay = min(float(self.settings.max_defer_s), max(1.0, wait))
        b.defer(
            job,
            NodeOutcome(
                job.report.node,
                job.facts.instance_id,
                job.report.seq,
                NodeStatus.DEFERRED,
                retry_after_s=delay,
                reason=reason,
            ),
        )

    # --- 6. execute ------------------------------------------------------------

    def _execute(self, granted: list[NodeJob], b: Batch) -> None:
        """Run the granted nodes' plans; a node deferred before any action
        is re-sent, one that failed internally is left to the ESM."""
        outcomes = self.map(lambda j: self._serve(j, b), granted)
        for job, res in zip(granted, outcomes, strict=True):
            if res.status == NodeStatus.DEFERRED and (not res.actions or res.resend):
                b.defer(job, res)
            else:
                b.settle(res)
                if res.reason == Why.INTERNAL:
                    # Nothing recorded, nothing pushed: let the ESM redeliver the record.
                    b.redeliver(job.record_id)

    def _serve(self, job: NodeJob, b: Batch) -> NodeOutcome:
        try:
            if b.late(self.clock.now()):
                # Not started: the report is re-sent (no action, so not recorded).
                self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
                return NodeOutcome(
                    job.report.node,
                    job.facts.instance_id,
                    job.report.seq,
                    NodeStatus.DEFERRED,
                    retry_after_s=1.0,
                    reason=DEADLINE_REASON,
                )
            verdict: RestoreChecked | None = None
            if job.report.restored_from is not None:
                checked = self._restore_verdict(job)
                if isinstance(checked, NodeOutcome):
                    return checked
                verdict = checked
                if not verdict.current or job.report.first_start:
                    # Planned from a state the node no longer has: nothing of it is done. Nor for
                    # a first start's ask, either way: its plan would unassign what the node booted
                    # with (offered, of unknown origin, until the answer), which "confirmed" makes
                    # the agent's own; it reports again, as the node it now knows it is.
                    self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
                    res = NodeOutcome(job.report.node, job.facts.instance_id, job.report.seq, NodeStatus.SERVED)
                    res.actions.append(verdict)
                    self._finish(job, res)
                    return res
            res = self.executor.run(job, b.stop_at)
            recorded = res.status != NodeStatus.DEFERRED or (res.actions and not res.resend)
            if verdict is not None and recorded:
                # Said only with a recorded seq: once the agent hands out what it has free, no
                # report older than this one is acted on (the ledger refuses them).
                res.actions.insert(0, verdict)
            if recorded:
                # A plan stopped part-way (throttled after some calls) is recorded
                # too: another invocation that read EC2 before these calls then
                # sees the ledger move and re-reads instead of acting on a stale
                # view. The report is not re-sent (it would be stale); the agent
                # gets what was done plus ``deferred`` and reports again. Unless
                # an ENI was created but not attached: then the same seq must come
                # back so its ClientToken finds that ENI (``resend``).
                self._finish(job, res)
            return res
        except Exception as exc:  # a bug or an outage: the ESM redelivers this record
            log.exception("node failed", extra={"node": job.report.node, "seq": job.report.seq})
            return NodeOutcome(
                job.report.node,
                job.facts.instance_id,
                job.report.seq,
                NodeStatus.FAILED,
                [Failed.clipped("internal", str(exc))],
                reason=Why.INTERNAL,
            )
        finally:
            self.leases.release(self.cluster, self._key(job.report), b.owner)

    def _fenced(self, n: Incoming, book: ReleaseBook, b: Batch) -> None:
        """A report of a process from before the instance's last restore check: stale, whatever
        its seq (``ReleaseBook.fences``); dropped unrecorded, as any stale report, and answered
        ``fenced`` with the epoch: an agent that missed the answer raising it (lost, or late
        after its wait ended) carries it from then on; a process from before the check is gone."""
        r = n.report
        b.out.stale += 1
        self.tally.add(names.M_REPORTS_STALE)
        self.tally.add(M_REPORTS_FENCED)
        log.info("report fenced by a restore check", extra={"node": r.node, "seq": r.seq, "epoch": book.epoch})
        result = AllocationResult(
            cluster=self.cluster,
            node=r.node,
            instance_id=r.instance_id,
            in_reply_to=r.seq,
            actions=[Fenced(epoch=book.epoch)],
        )
        try:
            self.queues.push(result)
        except AwsError as err:
            log.error("result push failed", extra={"node": r.node, "seq": r.seq, "error": str(err)})

    def _restore_verdict(self, job: NodeJob) -> RestoreChecked | NodeOutcome:
        """Under the node's lease: is the checkpoint the report says it restored the node's newest
        state (:func:`warmpool.scheduling.restore_current`)? The ledger and the release book are
        read again here, so an invocation that acted on a later report and died before recording
        it is seen by its write-ahead. Either unread: the report waits (a ``DEFERRED`` outcome
        with no action; the agent keeps waiting, and goes the lost-checkpoint way if no answer
        comes in time)."""
        r = job.report
        assert r.restored_from is not None
        key = self._key(r)

        def wait(why: str) -> NodeOutcome:
            log.warning("restore not checked: %s", why[:200], extra={"node": r.node, "seq": r.seq})
            return NodeOutcome(
                r.node,
                job.facts.instance_id,
                r.seq,
                NodeStatus.DEFERRED,
                retry_after_s=float(self.settings.lease_retry_s),
                reason=f"restore not checked: {why}"[:120],
            )

        try:
            ledger_seq = self.ledger.last_seqs(self.cluster, [key])[key]
            book = self.books.load(self.cluster, [r.instance_id]).get(r.instance_id, ReleaseBook())
        except (LedgerUnread, *BOOK_ERRORS) as err:
            return wait(f"ledger or release book not read: {err}")
        if (job.book is None and book.taken) or (job.book is not None and book.version != job.book.version):
            return wait("the release book changed since the plan")
        # The book written back (its version one higher) before the answer: an invocation that
        # read the older version (its lease lost, row 11) can no longer write its Unassign's
        # write-ahead, so it never makes the call (hostile review of the restore check, R2).
        # The answer raises the instance's fence: reports of any process before it (a lower epoch,
        # or none) are never acted on again, whatever their seq (R1: a clock set back gives the
        # restored agent lower seqs than the previous process's queued ones).
        assert r.restore_wait is not None
        before = book.epoch_before(r)
        epoch = max(before, r.epoch or 0) + 1
        now = self.clock.now()
        seqs = [t.seq for t in (*book.taken, *book.given)]
        # The same wait asking again while its raise's fence holds (a retry queued behind the
        # first ask, whose answer is late or lost) is said the verdict it was given: since the
        # raise, only this wait's own reports have moved the ledger and the book (review 4, R5).
        given = book.verdict_for(r, now)
        # a copy from before an earlier answer (its epoch below the book's) is not current either
        if r.first_start:
            # A first start (docs/safety.md, row 30): no row, no book ever written, launched lately.
            judged = first_start_confirmed(
                ledger_seq, book.version > 0, job.facts.launched_at, now, self.settings.ledger_ttl_s, epoch=r.epoch
            )
        else:
            judged = restore_current(r.restored_from, ledger_seq, seqs)
        current = (r.epoch or 0) >= before and (given if given is not None else judged)
        until = max(book.fenced_until, now + self.settings.release_offer_max_age_s + FENCE_MARGIN_S)
        fenced = replace(
            book, epoch=max(book.epoch, epoch), fenced_until=until, raised_for=r.restore_wait, raised_current=current
        )
        try:
            stored = self.books.save(self.cluster, r.instance_id, fenced, now + self.settings.ledger_ttl_s)
        except BOOK_ERRORS as err:
            return wait(f"release book not written: {err}")
        if stored is None:
            return wait("another invocation wrote the release book")
        job.book, job.book_checked = stored, True
        self.tally.add(M_RESTORES_CHECKED, current="true" if current else "false")
        if r.first_start:
            log.info(
                "first start %s",
                "confirmed" if current else "not confirmed",
                extra={"node": r.node, "ledger_seq": ledger_seq, "book_version": book.version},
            )
        elif not current:
            log.warning(
                "restored checkpoint is not the node's newest state",
                extra={
                    "node": r.node,
                    "restored_from": r.restored_from,
                    "ledger_seq": ledger_seq,
                    "book_seqs": max(seqs, default=-1),
                },
            )
        return RestoreChecked(
            restored_from=r.restored_from, wait=r.restore_wait, current=current, epoch=max(book.epoch, epoch)
        )

    def _finish_noop(self, job: NodeJob) -> NodeOutcome:
        res = NodeOutcome(job.report.node, job.facts.instance_id, job.report.seq, NodeStatus.SERVED)
        if job.plan.unmet:
            res.actions.append(unmet(job.plan))
        self._finish(job, res)
        return res

    def _finish(self, job: NodeJob, res: NodeOutcome) -> None:
        """Record the node's outcome in the ledger; push its result when one is owed."""
        r = job.report
        self._record(r, job.facts.instance_id, res)
        # A reply is owed when something changed, the agent offered addresses
        # back (it waits for the answer), pods are waiting, or the zone is scarce.
        if res.actions or r.release or r.pending_demand or job.scarce:
            self._push(job, res)

    def _record(self, r: PoolReport, instance_id: str, res: NodeOutcome) -> None:
        outcome = {
            "instance_id": instance_id,
            "status": res.status,
            "actions": [a.model_dump(exclude_none=True) for a in res.actions],
        }
        outcome["node"] = r.node  # a label, for operators
        if not self.ledger.record(self.cluster, self._key(r), r.seq, outcome, self.clock.now()):
            log.info("ledger already past this seq", extra={"node": r.node, "seq": r.seq})

    # --- 7. deliver ------------------------------------------------------------

    def _deliver(self, records: int, b: Batch) -> None:
        """Re-send the deferred nodes' reports, push each its ``deferred``
        result (a failed re-send leaves the record to the ESM instead); the
        batch's counts, tallied and logged."""
        if b.resend:
            failed = set(self.delivery.defer([s.deferral for s in b.resend.values()]))
            for iid, s in b.resend.items():
                if iid in failed:
                    # Could not re-send: let the ESM redeliver the original record instead.
                    b.redeliver(s.job.record_id)
            pushes = [(s.job, b.out.nodes[iid]) for iid, s in b.resend.items() if iid not in failed]
            self.map(lambda p: self._push(p[0], p[1]), pushes)
        counts = b.out.sum_up()
        self.tally.add(names.M_NODES_SERVED, b.out.served)
        self.tally.add(names.M_NODES_DEFERRED, b.out.deferred)
        log.info("batch done", extra={"records": records, **counts})

    def _push(self, job: NodeJob, res: NodeOutcome) -> None:
        r = job.report
        actions = list(res.actions)
        if res.status == NodeStatus.DEFERRED:
            actions.append(Deferred.clipped(res.retry_after_s, res.reason))
        result = AllocationResult(
            cluster=self.cluster,
            node=r.node,
            instance_id=job.facts.instance_id,
            in_reply_to=r.seq,
            actions=self.queues.fit(actions, r.node, r.seq),
            scarce=True if job.scarce else None,
        )
        try:
            if self.queues.push(result):
                if job.scarce:
                    self.tally.add(M_SCARCE_SAID)
                self.tally.observe(names.M_ALLOCATION_LATENCY_MS, max(0.0, (self.clock.now() - r.sent_at) * 1000))
        except AwsError as err:
            log.error("result push failed", extra={"node": r.node, "seq": r.seq, "error": str(err)})
        res.result = result
