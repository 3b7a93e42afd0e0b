"""The allocator: one batch of reports in, EC2 calls and results out.

Plain logic behind ports (EC2, SQS, token buckets, ledger, leases, clock), so
the Lambda handler, the integration tests and the bench run this same code.

:meth:`Allocator.handle_batch` runs the batch's stages in order, one method each
(docs/allocator.md, "One batch"): parse and verify; read the ledger's seqs;
coalesce; one Describe round for the batch, then plan each node; pay every node's
tokens within its fair share, claim its lease and re-check; execute the nodes
concurrently; record, push results and deferrals. A node travels as an
:class:`functions.intake.Incoming` until planned, then a
:class:`functions.execute.NodeJob`.
"""

from __future__ import annotations

import itertools
import logging
import math
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from functions.delivery import Deferral, Delivery
from functions.ec2 import Ec2
from functions.errors import AwsError, Throttled
from functions.execute import NodeJob, NodeOutcome, PlanExecutor, unmet
from functions.fairness import FairShare
from functions.identity import IdentityRejected, verify_report_identity
from functions.intake import (
    SEQ_AHEAD_LIMIT,
    SEQ_TOO_FAR,
    BatchOutcome,
    Incoming,
    Record,
    create_result_queue,
    sender_matches,
    trusted_keys,
)
from functions.inventory import describe_tokens, instance_problem, note_pod_ceiling, read_batch, tag_primaries
from functions.mapping import Mapper, ThreadMapper, serial_map
from functions.release_book import LocalReleaseBooks, load_books, settle, with_repeats
from functions.releases import count_flip, fresh_offers, hold_releases, load_flips, save_flips
from functions.settings import LEASE_TTL_MARGIN_S, Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.buckets import refill, time_until
from warmpool.clock import Clock
from warmpool.facts import NodeFacts
from warmpool.messages import AllocationResult, Deferred, Failed, MessageError, PoolReport, parse_report
from warmpool.names import (
    M_DESCRIBE_THROTTLED,
    M_FAIR_SHARE_DEFERRED,
    M_IDENTITY_UNVERIFIED,
    M_LEDGER_UNREAD,
    M_TOKENS_FORFEITED,
)
from warmpool.planner import Plan, node_max_pods, plan_node
from warmpool.ports import (
    BucketStore,
    Ec2Api,
    Ec2Port,
    FlipStore,
    LeaseStore,
    Ledger,
    LedgerUnread,
    ReleaseBookStore,
    SqsApi,
)
from warmpool.release_book import ReleaseBook
from warmpool.scheduling import coalesce, priority_key

__all__ = ["SEQ_AHEAD_LIMIT", "Allocator", "BatchOutcome", "Mapper", "Record", "ThreadMapper", "serial_map"]
"""The allocator's interface: a batch of :class:`Record` in, a :class:`BatchOutcome` out."""

log = logging.getLogger(__name__)


DEADLINE_REASON = "invocation deadline"


class Allocator:
    """Serves batches of pool reports for one cluster."""

    def __init__(
        self,
        *,
        ec2: Ec2Api,
        sqs: SqsApi,
        buckets: BucketStore,
        ledger: Ledger,
        leases: LeaseStore,
        clock: Clock,
        settings: Settings,
        mapper: Mapper[Any, Any] | None = None,
        tally: Tally | None = None,
        flips: FlipStore | None = None,
        release_books: ReleaseBookStore | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.buckets = buckets
        self.ledger = ledger
        self.leases = leases
        self.tally = tally if tally is not None else Tally()
        self.ec2: Ec2Port = Ec2(ec2, settings, clock, self.tally)
        self.delivery = Delivery(sqs, settings, self.tally)
        self.books: ReleaseBookStore = release_books if release_books is not None else LocalReleaseBooks()
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
        self.flips = flips
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
        """Serve one batch, its stages in order. ``deadline`` (clock time; the
        Lambda's remaining time) stops new work ``deadline_margin_s`` before
        it; what did not start is deferred."""
        owner = invocation_id or f"{self._instance}-{next(self._invocations)}"
        stop_at = None if deadline is None else deadline - self.settings.deadline_margin_s
        out = BatchOutcome()
        self.tally.add(names.M_REPORTS_RECEIVED, len(records))
        incoming = self._parse(records, out)  # 1
        if not incoming:
            return out
        last, unread = self._read_seqs(incoming)  # 2
        incoming = self._refuse_far_seqs(incoming, last, out)
        kept = self._coalesce(incoming, last, out)  # 3
        kept = self._wait_for_unread_rows(kept, unread, out)
        kept = [replace(n, report=self._drop_old_offers(n.report)) for n in kept]
        kept = self._pay_to_read(kept, stop_at, out)  # 4
        jobs = self._describe_and_plan(kept, last, out)
        active = self._settle_noops(jobs, out)
        deferrals: list[Deferral] = []
        granted = self._claim_and_pay(active, owner, last, out, deferrals, deadline, stop_at)  # 5-6
        granted = tag_primaries(self.ec2, self.buckets, self.clock, self.tally, self.cluster, granted)
        self._execute(granted, owner, stop_at, out, deferrals)  # 7
        self._send_deferrals(deferrals, jobs, out)  # 8
        self._sum_up(len(records), out)
        return out

    # --- 1. parse, verify identity ---------------------------------------------

    def _parse(self, records: Sequence[Record], out: BatchOutcome) -> list[Incoming]:
        """The records whose report parses, is for this cluster, and whose
        identity (and, in ``sender-id`` mode, SQS sender) checks out."""
        valid: list[Incoming] = []
        for rec in records:
            try:
                report = parse_report(rec.body)
            except MessageError as err:
                out.invalid += 1
                self.tally.add(names.M_REPORTS_INVALID, reason=err.reason)
                log.warning(
                    "invalid report", extra={"reason": err.reason, "detail": err.detail, "message_id": rec.message_id}
                )
                self._dead_letter(rec, err.reason, err.detail, out)
                continue
            node = Incoming(rec, report)
            if report.cluster != self.cluster:
                self._reject(node, "foreign-cluster", out)
                continue
            if self.trusted is not None:
                verified = verify_report_identity(
                    report, self.trusted, account=self.settings.account, region=self.settings.region
                )
                if isinstance(verified, IdentityRejected):
                    self._reject(node, verified.reason, out, detail=verified.detail)
                    continue
            else:
                self.tally.add(M_IDENTITY_UNVERIFIED)
            if self.settings.identity_mode == "sender-id" and not sender_matches(rec.sender_id, report.instance_id):
                self._reject(node, "sender-mismatch", out)
                continue
            valid.append(node)
        return valid

    def _dead_letter(self, rec: Record, reason: str, detail: str, out: BatchOutcome) -> None:
        if not self.delivery.dead_letter(rec.body, reason, detail):
            out.failed_message_ids.append(rec.message_id)  # let SQS redrive it instead

    def _reject(self, node: Incoming, reason: str, out: BatchOutcome, detail: str = "") -> None:
        report = node.report
        out.rejected += 1
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
        self._dead_letter(node.record, reason, detail, out)

    # --- 2. seqs ---------------------------------------------------------------

    def _read_seqs(self, incoming: list[Incoming]) -> tuple[dict[str, int], frozenset[str]]:
        """The ledger's last seq per node of the batch, and the nodes whose row
        could not be read."""
        try:
            return self.ledger.last_seqs(self.cluster, sorted({self._key(n.report) for n in incoming})), frozenset()
        except LedgerUnread as err:
            # A row not read is unknown, never "no row" (seq -1 would make a
            # stale report look fresh): those nodes' reports wait.
            return err.seqs, err.unread

    def _refuse_far_seqs(self, valid: list[Incoming], last: dict[str, int], out: BatchOutcome) -> list[Incoming]:
        """Refuse a seq more than :data:`SEQ_AHEAD_LIMIT` ahead of both the
        instance's last seq and now (ms): it would make the instance's later
        reports stale."""
        now_ms = int(self.clock.now() * 1000)
        keep: list[Incoming] = []
        for n in valid:
            bound = max(last.get(self._key(n.report), -1), now_ms) + SEQ_AHEAD_LIMIT
            if n.report.seq > bound:
                self._reject(n, SEQ_TOO_FAR, out, detail=f"seq {n.report.seq} > {bound}")
                continue
            keep.append(n)
        return keep

    # --- 3. coalesce -----------------------------------------------------------

    def _coalesce(self, incoming: list[Incoming], last: dict[str, int], out: BatchOutcome) -> list[Incoming]:
        """The newest report per node (the core's :func:`coalesce`); the stale
        and the superseded are counted and dropped."""
        co = coalesce([n.report for n in incoming], last)
        out.stale, out.superseded = len(co.stale), len(co.superseded)
        self.tally.add(names.M_REPORTS_STALE, out.stale)
        self.tally.add(names.M_REPORTS_COALESCED, out.superseded)
        # coalesce keeps, per instance, the first report with its newest seq.
        first: dict[tuple[str, int], Incoming] = {}
        for n in incoming:
            first.setdefault((n.report.instance_id, n.report.seq), n)
        return [first[(r.instance_id, r.seq)] for r in co.keep]

    def _wait_for_unread_rows(self, kept: list[Incoming], unread: frozenset[str], out: BatchOutcome) -> list[Incoming]:
        """Defer the nodes whose ledger row was not read; the others go on."""
        if not unread:
            return kept
        self.tally.add(M_LEDGER_UNREAD, len(unread))
        log.warning("ledger rows not read; their reports wait", extra={"nodes": sorted(unread)})
        self._defer_unread(
            [n for n in kept if self._key(n.report) in unread],
            float(self.settings.lease_retry_s),
            out,
            "ledger row not read",
        )
        return [n for n in kept if self._key(n.report) not in unread]

    def _drop_old_offers(self, report: PoolReport) -> PoolReport:
        """Only the release offers the agent cannot have taken back yet
        (:func:`functions.releases.fresh_offers`)."""
        return fresh_offers(report, self.clock, self.settings.release_offer_max_age_s, self.tally)

    # --- 4. describe, verify, plan ---------------------------------------------

    def _pay_to_read(self, kept: list[Incoming], stop_at: float | None, out: BatchOutcome) -> list[Incoming]:
        """The nodes to read, once the batch's Describe round is paid for
        (shared buckets); all deferred unread when too late or the buckets
        cannot pay now."""
        if not kept:
            return kept
        if self._late(stop_at):
            self._defer_unread(kept, 1.0, out, DEADLINE_REASON)
            return []
        request = describe_tokens([n.report for n in kept])
        wait = self.buckets.take_batch([request], self.clock.now())[0]
        if wait == 0:
            self.tally.add(names.M_TOKENS_TAKEN, sum(request.values()))
        if wait > 0:
            # Describe* share the account's buckets too (Karpenter, the cluster
            # autoscaler and the console call them): no tokens, no reading.
            self._defer_unread(kept, wait, out)
            return []
        return kept

    def _describe_and_plan(self, kept: list[Incoming], last: dict[str, int], out: BatchOutcome) -> list[NodeJob]:
        """The batch's nodes verified and planned, in priority order."""
        try:
            return self._verify_and_plan(kept, out, last)
        except Throttled as err:
            # The batch's reads were throttled: defer it unread (nothing was
            # decided yet), with the AIMD cut for that action.
            self._defer_unread(kept, self._throttle_wait(err), out, f"{err.action} throttled")
            return []

    def _late(self, stop_at: float | None) -> bool:
        """Too close to the invocation's deadline to start new work."""
        return stop_at is not None and self.clock.now() >= stop_at

    def _throttle_wait(self, err: Throttled) -> float:
        """Record the AIMD cut for the throttled action; the wait until its bucket has a token."""
        now = self.clock.now()
        self.buckets.throttled(err.action, now)
        self.tally.add(M_DESCRIBE_THROTTLED, Action=err.action)
        return time_until(self.buckets.load(err.action, now), self.settings.bucket_spec(err.action), 1, now)

    def _defer_unread(
        self, nodes: list[Incoming], wait: float, out: BatchOutcome, reason: str = "waiting for EC2 Describe tokens"
    ) -> None:
        if not nodes:
            return
        delay = min(float(self.settings.max_defer_s), max(1.0, wait if math.isfinite(wait) else 60.0))
        if reason == "waiting for EC2 Describe tokens":
            self.tally.add(names.M_TOKENS_WAITED_S, delay)
        items = [Deferral(n.record.body, math.ceil(delay), self._key(n.report)) for n in nodes]
        failed = set(self.delivery.defer(items))
        for n in nodes:
            r = n.report
            if self._key(r) in failed:
                out.failed_message_ids.append(n.record.message_id)
                continue
            out.nodes[r.node] = NodeOutcome(
                r.node, r.instance_id, r.seq, "deferred", retry_after_s=delay, reason=reason
            )

    def _verify_and_plan(self, nodes: list[Incoming], out: BatchOutcome, last: dict[str, int]) -> list[NodeJob]:
        """Every read first (Describe round, foreign-ENI check, subnets,
        instance types), then the decisions: a throttled read raises
        :class:`Throttled` before any report was rejected or planned, so the
        caller can defer the whole batch unread."""
        if not nodes:
            return []
        keep = [n.report for n in nodes]
        view = read_batch(self.ec2, self.cluster, keep)
        servable = [f.instance_id for f in view.servable(self.cluster, keep)]
        load_flips(self.fair, self.flips, self.cluster, servable, self.tally)
        books = load_books(self.books, self.cluster, servable, self.tally)
        # --- decisions ---
        owners: dict[str, str] = {}
        jobs: list[NodeJob] = []
        for n in nodes:
            r, rec = n.report, n.record
            f = view.facts.get(r.instance_id)
            reason = instance_problem(self.cluster, f)
            if reason == "" and r.instance_id in owners:
                reason = "instance-claimed-twice"
            if reason:
                self._reject(n, reason, out)
                continue
            assert f is not None
            owners[r.instance_id] = r.node
            if self.trusted is not None and last.get(self._key(r), -1) < 0:
                create_result_queue(self.delivery.sqs, self.settings, r.instance_id, self.tally)
            foreign = view.foreign_enis.get(r.instance_id, [])
            if foreign:
                self._reject(n, "foreign-eni", out, ",".join(foreign))
                continue
            lim = view.limits[f.instance_type]
            if isinstance(lim, AwsError):
                self._reject(n, "unknown-instance-type", out, str(lim))
                continue
            ceiling = node_max_pods(r, lim, self.settings.max_pods)
            book = self._settled_book(n, f, books.get(r.instance_id))
            f = book.correct(f) if book is not None else f
            inv = f.inventory(self.cluster)
            plan = plan_node(r, inv, lim, view.subnets, cluster=self.cluster, max_pods=ceiling)
            note_pod_ceiling(r, inv, ceiling, self.tally)
            count_flip(
                self.fair,
                r,
                plan,
                instance_id=self._key(r),
                clock=self.clock,
                damp_s=self.settings.damp_s,
                tally=self.tally,
            )
            plan = self._release_rules(r, f, plan, book, rec.body)
            jobs.append(NodeJob(r, f, lim, plan, rec.message_id, rec.body, max_pods=ceiling, book=book))
            if plan.delta.low:
                self.tally.add(names.M_NODES_IN_DEFICIT)
        save_flips(self.fair, self.flips, self.cluster, self.tally, self.clock.now())
        jobs.sort(key=lambda j: priority_key(j.report, j.plan.delta))
        return jobs

    def _release_rules(self, r: PoolReport, f: NodeFacts, plan: Plan, book: ReleaseBook | None, body: str) -> Plan:
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
        return with_repeats(held, book, r, body)

    def _settled_book(self, n: Incoming, f: NodeFacts, book: ReleaseBook | None) -> ReleaseBook | None:
        """The instance's release book without what this report shows the agent dropped (None: not read)."""
        if book is None or not book.taken:
            return book
        shown = [e.eni.eni_id for e in f.enis]
        expires = self.clock.now() + self.settings.ledger_ttl_s
        r = n.report
        return settle(self.books, self.cluster, r.instance_id, book, r, n.record.body, shown, expires, self.tally)

    def _settle_noops(self, jobs: list[NodeJob], out: BatchOutcome) -> list[NodeJob]:
        """Record and answer the nodes with nothing to call; the others go on."""
        active = [j for j in jobs if j.plan.calls]
        for job in jobs:
            if not job.plan.calls:
                out.noop += 1
        noops = [j for j in jobs if not j.plan.calls]
        for job, res in zip(noops, self.map(self._finish_noop, noops), strict=True):
            out.nodes[job.report.node] = res
        return active

    # --- 5-6. tokens, fair share, lease ----------------------------------------

    def _claim_and_pay(
        self,
        active: list[NodeJob],
        owner: str,
        last: dict[str, int],
        out: BatchOutcome,
        deferrals: list[Deferral],
        deadline: float | None = None,
        stop_at: float | None = None,
    ) -> list[NodeJob]:
        """Pay first (one store round for the batch), then lease only the paid
        nodes: a deferred node costs no lease. Tokens of a node lost to a
        concurrent invocation are forfeited (rare; counted)."""
        if not active:
            return []
        if self._late(stop_at):
            for job in active:
                self._defer(job, 1.0, DEADLINE_REASON, out, deferrals)
            return []
        active = self._fair_shares(active, out, deferrals)
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
                    "failed",
                    [Failed(code="plan-exceeds-budget", message="plan needs more tokens than a bucket holds")],
                )
                out.nodes[job.report.node] = res
                self._finish(job, res)
            else:
                self.tally.add(names.M_TOKENS_WAITED_S, wait)
                self._defer(job, wait, "waiting for EC2 tokens", out, deferrals)
        if not paid:
            return []
        now = self.clock.now()
        # The lease outlives the function (the TTL is derived from its timeout)
        # and, when known, this invocation's own deadline.
        ttl = self.settings.lease_ttl_s
        if deadline is not None:
            ttl = max(ttl, deadline - now + LEASE_TTL_MARGIN_S)
        claims = self.map(lambda j: self.leases.claim(self.cluster, self._key(j.report), owner, now, ttl), paid)
        claimed: list[NodeJob] = []
        for job, got in zip(paid, claims, strict=True):
            if got:
                claimed.append(job)
            else:
                self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
                self._defer(job, float(self.settings.lease_retry_s), "node busy in another invocation", out, deferrals)
        if not claimed:
            return []
        # Served by another invocation between our read and our claim? Then our
        # view of EC2 may predate its calls: drop if stale, else read again.
        try:
            now_seqs = self.ledger.last_seqs(self.cluster, [self._key(j.report) for j in claimed])
        except LedgerUnread as err:
            now_seqs = err.seqs
            self.tally.add(M_LEDGER_UNREAD, len(err.unread))
            for j in [j for j in claimed if self._key(j.report) in err.unread]:
                self._give_up(j, owner, float(self.settings.lease_retry_s), "ledger row not read", out, deferrals)
            claimed = [j for j in claimed if self._key(j.report) not in err.unread]
        return self._recheck(claimed, last, now_seqs, owner, out, deferrals)

    def _fair_shares(self, active: list[NodeJob], out: BatchOutcome, deferrals: list[Deferral]) -> list[NodeJob]:
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
                self._defer(job, wait, "fair share of the EC2 budget spent", out, deferrals)
            else:
                keep.append(job)
        return keep

    def _recheck(
        self,
        claimed: list[NodeJob],
        last: dict[str, int],
        now_seqs: dict[str, int],
        owner: str,
        out: BatchOutcome,
        deferrals: list[Deferral],
    ) -> list[NodeJob]:
        """The claimed nodes to execute: a node whose ledger row moved since
        the batch read it is read again and re-planned (or dropped as stale)."""
        moved = [now_seqs.get(self._key(j.report), -1) != last.get(self._key(j.report), -1) for j in claimed]
        if not any(moved):
            return claimed
        try:
            fresh_facts = self.ec2.describe_nodes(j.facts.instance_id for j, m in zip(claimed, moved, strict=True) if m)
            subnets = list(self.ec2.subnets().values())
        except Throttled as err:
            wait = self._throttle_wait(err)
            for j, m in zip(claimed, moved, strict=True):
                if m:
                    self._give_up(j, owner, wait, f"{err.action} throttled", out, deferrals)
            return [j for j, m in zip(claimed, moved, strict=True) if not m]
        keep: list[NodeJob] = []
        for j, m in zip(claimed, moved, strict=True):
            if not m:
                keep.append(j)
                continue
            f = fresh_facts.get(j.facts.instance_id)
            if f is not None and j.book is not None:
                f = j.book.correct(f)
            if j.report.seq <= now_seqs.get(self._key(j.report), -1) or f is None:
                out.stale += 1
                self.tally.add(names.M_REPORTS_STALE)
                self.leases.release(self.cluster, self._key(j.report), owner)
                continue
            plan = self._release_rules(
                j.report,
                f,
                plan_node(
                    j.report, f.inventory(self.cluster), j.limits, subnets, cluster=self.cluster, max_pods=j.max_pods
                ),
                j.book,
                j.body,
            )
            nj = NodeJob(j.report, f, j.limits, plan, j.record_id, j.body, max_pods=j.max_pods, book=j.book)
            paid = j.plan.tokens()
            extra = {a: n - paid.get(a, 0) for a, n in plan.tokens().items() if n > paid.get(a, 0)}
            wait = self.buckets.take_batch([extra], self.clock.now())[0] if extra else 0.0
            if plan.calls and wait > 0:
                self.leases.release(self.cluster, self._key(j.report), owner)
                self._defer(nj, wait, "waiting for EC2 tokens", out, deferrals)
            elif plan.calls:
                keep.append(nj)
            else:
                self.leases.release(self.cluster, self._key(j.report), owner)
                out.nodes[j.report.node] = self._finish_noop(nj)
        return keep

    def _give_up(
        self, job: NodeJob, owner: str, wait: float, reason: str, out: BatchOutcome, deferrals: list[Deferral]
    ) -> None:
        """A paid, leased node that will not be served now: release its lease,
        forfeit its tokens (counted), defer its report."""
        self.leases.release(self.cluster, self._key(job.report), owner)
        self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
        self._defer(job, wait, reason, out, deferrals)

    def _defer(self, job: NodeJob, wait: float, reason: str, out: BatchOutcome, deferrals: list[Deferral]) -> None:
        delay = min(float(self.settings.max_defer_s), max(1.0, wait))
        res = NodeOutcome(
            job.report.node, job.facts.instance_id, job.report.seq, "deferred", retry_after_s=delay, reason=reason
        )
        out.nodes[job.report.node] = res
        deferrals.append(Deferral(job.body, math.ceil(delay), self._key(job.report)))

    def _send_deferrals(self, deferrals: list[Deferral], jobs: list[NodeJob], out: BatchOutcome) -> None:
        if not deferrals:
            return
        failed = set(self.delivery.defer(deferrals))
        by_key = {self._key(j.report): j for j in jobs}
        for key in failed:
            # Could not re-send: let the ESM redeliver the original record instead.
            out.failed_message_ids.append(by_key[key].record_id)
        pushes = [
            (by_key[d.node], out.nodes[by_key[d.node].report.node])
            for d in deferrals
            if d.node not in failed and by_key[d.node].report.node in out.nodes
        ]
        self.map(lambda p: self._push(p[0], p[1]), pushes)

    # --- 7-8. execute, record, push --------------------------------------------

    def _execute(
        self, granted: list[NodeJob], owner: str, stop_at: float | None, out: BatchOutcome, deferrals: list[Deferral]
    ) -> None:
        """Run the granted nodes' plans; a node deferred before any action
        is re-sent, one that failed internally is left to the ESM."""
        outcomes = self.map(lambda j: self._serve(j, owner, stop_at), granted)
        for job, res in zip(granted, outcomes, strict=True):
            out.nodes[job.report.node] = res
            if res.status == "deferred" and (not res.actions or res.resend):
                deferrals.append(Deferral(job.body, math.ceil(res.retry_after_s), self._key(job.report)))
            elif res.reason == "internal":
                # Nothing recorded, nothing pushed: let the ESM redeliver the record.
                out.failed_message_ids.append(job.record_id)

    def _serve(self, job: NodeJob, owner: str, stop_at: float | None = None) -> NodeOutcome:
        try:
            if self._late(stop_at):
                # Not started: the report is re-sent (no action, so not recorded).
                self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
                return NodeOutcome(
                    job.report.node,
                    job.facts.instance_id,
                    job.report.seq,
                    "deferred",
                    retry_after_s=1.0,
                    reason=DEADLINE_REASON,
                )
            res = self.executor.run(job, stop_at)
            if res.status != "deferred" or (res.actions and not res.resend):
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
                "failed",
                [Failed.clipped("internal", str(exc))],
                reason="internal",
            )
        finally:
            self.leases.release(self.cluster, self._key(job.report), owner)

    def _finish_noop(self, job: NodeJob) -> NodeOutcome:
        res = NodeOutcome(job.report.node, job.facts.instance_id, job.report.seq, "served")
        if job.plan.unmet:
            res.actions.append(unmet(job.plan))
        self._finish(job, res)
        return res

    def _finish(self, job: NodeJob, res: NodeOutcome) -> None:
        r = job.report
        outcome = {
            "instance_id": job.facts.instance_id,
            "status": res.status,
            "actions": [a.model_dump(exclude_none=True) for a in res.actions],
        }
        outcome["node"] = r.node  # a label, for operators
        if not self.ledger.record(self.cluster, self._key(r), r.seq, outcome, self.clock.now()):
            log.info("ledger already past this seq", extra={"node": r.node, "seq": r.seq})
        # A reply is owed when something changed, the agent offered addresses
        # back (it waits for the answer), or pods are waiting.
        if res.actions or r.release or r.pending_demand:
            self._push(job, res)

    def _push(self, job: NodeJob, res: NodeOutcome) -> None:
        r = job.report
        actions = list(res.actions)
        if res.status == "deferred":
            actions.append(Deferred.clipped(res.retry_after_s, res.reason))
        result = AllocationResult(
            cluster=self.cluster,
            node=r.node,
            instance_id=job.facts.instance_id,
            in_reply_to=r.seq,
            actions=self.delivery.fit(actions, r.node, r.seq),
        )
        try:
            if self.delivery.push(result):
                self.tally.observe(names.M_ALLOCATION_LATENCY_MS, max(0.0, (self.clock.now() - r.sent_at) * 1000))
        except AwsError as err:
            log.error("result push failed", extra={"node": r.node, "seq": r.seq, "error": str(err)})
        res.result = result

    def _sum_up(self, records: int, out: BatchOutcome) -> None:
        """The batch's results and counts, tallied and logged."""
        counts = out.sum_up()
        self.tally.add(names.M_NODES_SERVED, out.served)
        self.tally.add(names.M_NODES_DEFERRED, out.deferred)
        log.info("batch done", extra={"records": records, **counts})
