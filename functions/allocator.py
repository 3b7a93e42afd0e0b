"""The allocator: one batch of reports in, EC2 calls and results out.

Plain logic behind ports (EC2, SQS, token buckets, ledger, leases, clock), so
the Lambda handler, the integration tests and the bench run this same code.

Per batch (DESIGN.md, issue 4):

1. validate every record (invalid → DLQ at once with the reason, counted, not retried);
2. coalesce: newest report per node; at or below the ledger's seq → dropped;
3. verify with one round of filtered Describe calls for the whole batch
   (instance exists, running, tagged for the cluster; reported ENIs its own);
4. plan each node (core planner) and order (core priority);
5. take every node's tokens before its first call, in one conditional store
   write for the batch; a node that cannot be paid for now is deferred —
   its report re-sent with a delay, its result says ``deferred``;
6. claim a lease per paid node, then re-check the ledger (a node served
   meanwhile by another invocation is re-read before acting);
7. execute the nodes concurrently (an injectable mapper), record the ledger,
   push results, release the leases.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from functions.delivery import Deferral, Delivery
from functions.ec2 import FILTER_CHUNK, Ec2
from functions.errors import AwsError, Throttled
from functions.execute import NodeJob, NodeOutcome, PlanExecutor, offer_expired, unmet
from functions.fairness import FairShare
from functions.identity import IdentityConfigError, IdentityRejected, TrustedKeys, verify_report_identity
from functions.settings import LEASE_TTL_MARGIN_S, Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.buckets import refill, time_until
from warmpool.clock import Clock
from warmpool.eni_scope import primary_eni_tag
from warmpool.facts import NodeFacts
from warmpool.limits import InstanceLimits
from warmpool.messages import (
    AllocationResult,
    Deferred,
    Failed,
    MessageError,
    PoolReport,
    ReleaseOffer,
    parse_report,
)
from warmpool.names import (
    M_DESCRIBE_THROTTLED,
    M_FAIR_SHARE_DEFERRED,
    M_FLIPS_UNSHARED,
    M_IDENTITY_UNVERIFIED,
    M_LEDGER_UNREAD,
    M_NODES_DAMPED,
    M_OFFERS_EXPIRED,
    M_OFFERS_UNDATED,
    M_PRIMARY_ENIS_TAGGED,
    M_RELEASES_HELD,
    M_RESULT_QUEUES_CREATED,
    M_TOKENS_FORFEITED,
)
from warmpool.planner import (
    DeleteEni,
    Plan,
    Reclaim,
    TagPrimaryEni,
    UnassignAddresses,
    node_max_pods,
    plan_node,
)
from warmpool.ports import BucketStore, Ec2Api, Ec2Port, FlipStore, LeaseStore, Ledger, LedgerUnread, SqsApi
from warmpool.scheduling import coalesce, priority_key

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


def secure_transport_policy(settings: Settings, queue_name: str) -> str | None:
    """The queue policy the stack's own queues have (``enforce_ssl``): deny every SQS action
    over plain HTTP. For the result queues the allocator creates; their ARN is built from the
    reports queue's account and the region. None when the account is unknown (no reports URL)."""
    parts = settings.reports_queue_url.rstrip("/").split("/")
    account = parts[-2] if len(parts) >= 2 else ""
    if not (len(account) == 12 and account.isdigit()):
        return None
    region = settings.region
    partition = "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": "sqs:*",
            "Resource": f"arn:{partition}:sqs:{region}:{account}:{queue_name}",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }],
    })


DEADLINE_REASON = "invocation deadline"
SEQ_AHEAD_LIMIT = 2**20
"""A report's seq may be at most this far ahead of ``max(last seq seen, now in
ms)`` (the agent's seq is ``max(last + 1, now_ms)``): a node cannot poison
its own ledger row with a huge seq that makes every later report stale."""
TAG_BATCH = 1000
"""CreateTags takes up to 1,000 resources a call: one call tags a batch's new primary ENIs."""
SEQ_TOO_FAR = "seq-too-far-ahead"
Mapper = Callable[[Callable[[T], R], Sequence[T]], list[R]]


def serial_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """Run one after the other (the bench: deterministic)."""
    return [fn(i) for i in items]


class ThreadMapper:
    """Run independent nodes concurrently on a small, reused thread pool."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="warmpool-node")

    def __call__(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1:
            return [fn(i) for i in items]
        return list(self._pool.map(fn, items))


@dataclass(frozen=True)
class Record:
    """One SQS record, transport-neutral."""

    message_id: str
    body: str
    sender_id: str = ""


@dataclass
class BatchOutcome:
    failed_message_ids: list[str] = field(default_factory=list)
    """For ``ReportBatchItemFailures``: records the ESM should redeliver."""
    results: list[AllocationResult] = field(default_factory=list)
    nodes: dict[str, NodeOutcome] = field(default_factory=dict)
    invalid: int = 0
    rejected: int = 0
    stale: int = 0
    superseded: int = 0
    served: int = 0
    deferred: int = 0
    failed: int = 0
    noop: int = 0

    def batch_item_failures(self) -> dict[str, list[dict[str, str]]]:
        return {"batchItemFailures": [{"itemIdentifier": m} for m in self.failed_message_ids]}


def trusted_keys(settings: Settings) -> TrustedKeys | None:
    """The keys report identities are verified with, parsed once at cold start.

    Fail-closed: with verification required (the default) an empty or
    unusable certificate setting stops the allocator here
    (:class:`IdentityConfigError`). ``off`` is for explicit local tests and is
    logged loudly at start (and counted per batch)."""
    if settings.identity_verification == "off":
        log.warning(
            "report identity verification is OFF (WARMPOOL_IDENTITY_VERIFICATION=off): any sender may report for "
            "any instance of the cluster; for local testing only"
        )
        return None
    if not settings.identity_certificates.strip():
        raise IdentityConfigError(
            "no identity certificate configured (WARMPOOL_IDENTITY_CERTIFICATES) while report identities must be "
            "verified; set the region's AWS certificate, or WARMPOOL_IDENTITY_VERIFICATION=off for local tests only"
        )
    return TrustedKeys.from_pem(settings.identity_certificates)


def _created_at(tags: dict[str, str]) -> float | None:
    """The ENI's ``createdAt`` tag (``%Y-%m-%dT%H:%M:%SZ``) as epoch seconds, or None."""
    raw = tags.get(names.TAG_CREATED_AT, "")
    try:
        return datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def sender_matches(sender_id: str, instance_id: str) -> bool:
    """SQS ``SenderId`` of an assumed role is ``AROA...:<session name>``; the
    agent's instance-role session name is the instance id."""
    return sender_id.rsplit(":", 1)[-1] == instance_id if sender_id else False


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
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.buckets = buckets
        self.ledger = ledger
        self.leases = leases
        self.tally = tally if tally is not None else Tally()
        self.ec2: Ec2Port = Ec2(ec2, settings, clock, self.tally)
        self.delivery = Delivery(sqs, settings, self.tally)
        self.executor = PlanExecutor(self.ec2, buckets, settings, self.tally, clock)
        self.map: Mapper[Any, Any] = mapper or serial_map
        self._invocations = itertools.count(1)
        self._instance = uuid.uuid4().hex[:12]  # lease owners must differ across containers
        self.trusted = trusted_keys(settings)
        self.fair = FairShare(
            settings.bucket_spec, window_s=settings.fair_window_s, flip_limit=settings.flip_limit,
            flip_window_s=settings.flip_window_s, damp_s=settings.damp_s,
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
        """Serve one batch. ``deadline`` (clock time; the Lambda's remaining
        time) stops new work ``deadline_margin_s`` before it; what did not
        start is deferred."""
        owner = invocation_id or f"{self._instance}-{next(self._invocations)}"
        stop_at = None if deadline is None else deadline - self.settings.deadline_margin_s
        out = BatchOutcome()
        self.tally.add(names.M_REPORTS_RECEIVED, len(records))
        valid = self._validate(records, out)
        if not valid:
            return out
        by_report = {id(r): rec for rec, r in valid}
        unread: frozenset[str] = frozenset()
        try:
            last = self.ledger.last_seqs(self.cluster, sorted({self._key(r) for _, r in valid}))
        except LedgerUnread as err:
            # A row not read is unknown, never "no row" (seq -1 would make a
            # stale report look fresh): those nodes' reports wait.
            last, unread = err.seqs, err.unread
        valid = self._refuse_far_seqs(valid, last, out)
        co = coalesce([r for _, r in valid], last)
        out.stale, out.superseded = len(co.stale), len(co.superseded)
        self.tally.add(names.M_REPORTS_STALE, out.stale)
        self.tally.add(names.M_REPORTS_COALESCED, out.superseded)
        if unread:
            self.tally.add(M_LEDGER_UNREAD, len(unread))
            log.warning("ledger rows not read; their reports wait", extra={"nodes": sorted(unread)})
            self._defer_unread([r for r in co.keep if self._key(r) in unread], by_report,
                               float(self.settings.lease_retry_s), out, "ledger row not read")
        keep = [self._drop_old_offers(r, by_report) for r in co.keep if self._key(r) not in unread]
        if keep and self._late(stop_at):
            self._defer_unread(keep, by_report, 1.0, out, DEADLINE_REASON)
            keep = []
        wait = self._pay_for_describes(keep)
        if wait > 0:
            # Describe* share the account's buckets too (Karpenter, the cluster
            # autoscaler and the console call them): no tokens, no reading.
            self._defer_unread(keep, by_report, wait, out)
            keep = []
        try:
            jobs = self._verify_and_plan(keep, by_report, out, last)
        except Throttled as err:
            # The batch's reads were throttled: defer it unread (nothing was
            # decided yet), with the AIMD cut for that action.
            self._defer_unread(keep, by_report, self._throttle_wait(err), out, f"{err.action} throttled")
            jobs = []
        active = [j for j in jobs if j.plan.calls]
        for job in jobs:
            if not job.plan.calls:
                out.noop += 1
        noops = [j for j in jobs if not j.plan.calls]
        for job, res in zip(noops, self.map(self._finish_noop, noops), strict=True):
            out.nodes[job.report.node] = res
        deferrals: list[Deferral] = []
        granted = self._claim_and_pay(active, owner, last, out, deferrals, deadline, stop_at)
        granted = self._tag_primaries(granted)
        outcomes = self.map(lambda j: self._serve(j, owner, stop_at), granted)
        for job, res in zip(granted, outcomes, strict=True):
            out.nodes[job.report.node] = res
            if res.status == "deferred" and (not res.actions or res.resend):
                deferrals.append(Deferral(job.body, math.ceil(res.retry_after_s), self._key(job.report)))
            elif res.reason == "internal":
                # Nothing recorded, nothing pushed: let the ESM redeliver the record.
                out.failed_message_ids.append(job.record_id)
        self._send_deferrals(deferrals, jobs, out)
        out.results = [n.result for n in out.nodes.values() if n.result is not None]
        for res in out.nodes.values():
            if res.status == "served":
                out.served += 1
            elif res.status == "deferred":
                out.deferred += 1
            else:
                out.failed += 1
        self.tally.add(names.M_NODES_SERVED, out.served)
        self.tally.add(names.M_NODES_DEFERRED, out.deferred)
        log.info(
            "batch done",
            extra={
                "records": len(records), "invalid": out.invalid, "rejected": out.rejected, "stale": out.stale,
                "superseded": out.superseded, "served": out.served, "deferred": out.deferred,
                "failed": out.failed, "noop": out.noop,
            },
        )
        return out

    # --- 1. validate -----------------------------------------------------------

    def _validate(self, records: Sequence[Record], out: BatchOutcome) -> list[tuple[Record, PoolReport]]:
        valid: list[tuple[Record, PoolReport]] = []
        for rec in records:
            try:
                report = parse_report(rec.body)
            except MessageError as err:
                out.invalid += 1
                self.tally.add(names.M_REPORTS_INVALID, reason=err.reason)
                log.warning("invalid report", extra={"reason": err.reason, "detail": err.detail, "message_id": rec.message_id})
                self._dead_letter(rec, err.reason, err.detail, out)
                continue
            if report.cluster != self.cluster:
                self._reject(rec, report, "foreign-cluster", out)
                continue
            if self.trusted is not None:
                verified = verify_report_identity(
                    report, self.trusted, account=self.settings.account, region=self.settings.region
                )
                if isinstance(verified, IdentityRejected):
                    self._reject(rec, report, verified.reason, out, detail=verified.detail)
                    continue
            else:
                self.tally.add(M_IDENTITY_UNVERIFIED)
            if self.settings.identity_mode == "sender-id" and not sender_matches(rec.sender_id, report.instance_id):
                self._reject(rec, report, "sender-mismatch", out)
                continue
            valid.append((rec, report))
        return valid

    def _refuse_far_seqs(
        self, valid: list[tuple[Record, PoolReport]], last: dict[str, int], out: BatchOutcome
    ) -> list[tuple[Record, PoolReport]]:
        """Refuse a seq more than :data:`SEQ_AHEAD_LIMIT` ahead of both the
        instance's last seq and now (ms): it would make the instance's later
        reports stale."""
        now_ms = int(self.clock.now() * 1000)
        keep: list[tuple[Record, PoolReport]] = []
        for rec, r in valid:
            bound = max(last.get(self._key(r), -1), now_ms) + SEQ_AHEAD_LIMIT
            if r.seq > bound:
                self._reject(rec, r, SEQ_TOO_FAR, out, detail=f"seq {r.seq} > {bound}")
                continue
            keep.append((rec, r))
        return keep

    def _dead_letter(self, rec: Record, reason: str, detail: str, out: BatchOutcome) -> None:
        if not self.delivery.dead_letter(rec.body, reason, detail):
            out.failed_message_ids.append(rec.message_id)  # let SQS redrive it instead

    def _reject(self, rec: Record, report: PoolReport, reason: str, out: BatchOutcome, detail: str = "") -> None:
        out.rejected += 1
        self.tally.add(names.M_REPORTS_REJECTED, reason=reason)
        log.warning(
            "report rejected",
            extra={"reason": reason, "detail": detail, "cluster": report.cluster, "node": report.node,
                   "seq": report.seq, "instance_id": report.instance_id},
        )
        self._dead_letter(rec, reason, detail, out)

    # --- 3-4. verify, plan -----------------------------------------------------

    def _drop_old_offers(self, report: PoolReport, by_report: dict[int, Record]) -> PoolReport:
        """Keep only the release offers the agent cannot have taken back yet.

        Each offer is aged from its own ``quarantined_at`` (the agent repeats a
        still-quarantined offer in every later report, so the report's
        ``sent_at`` says nothing about it). An offer older than
        ``release_offer_max_age_s``, or without ``quarantined_at`` (an agent
        from before the field: how close it is to taking the addresses back is
        unknown), is dropped; the report keeps its demand. Never unassign what
        a pod may hold again. The age is checked again right before each
        Unassign call (:meth:`PlanExecutor.offer_fresh`)."""
        if not report.release:
            return report
        now = self.clock.now()
        keep: list[ReleaseOffer] = []
        expired = undated = 0
        for offer in report.release:
            n = len(offer.ips) + len(offer.prefixes)
            if offer.quarantined_at is None:
                undated += n
            elif offer_expired(offer.quarantined_at, now, self.settings.release_offer_max_age_s):
                expired += n
            else:
                keep.append(offer)
        if len(keep) == len(report.release):
            return report
        if expired:
            self.tally.add(M_OFFERS_EXPIRED, expired)
        if undated:
            self.tally.add(M_OFFERS_UNDATED, undated)
            log.warning(
                "release offers without quarantined_at ignored (agent predates the field)",
                extra={"node": report.node, "seq": report.seq, "addresses": undated},
            )
        if expired:
            log.info("release offers too old to act on", extra={"node": report.node, "seq": report.seq,
                                                                 "addresses": expired})
        fresh = report.model_copy(update={"release": keep})
        by_report[id(fresh)] = by_report[id(report)]
        return fresh

    def _pay_for_describes(self, reports: list[PoolReport]) -> float:
        """Tokens for the batch's one inventory round (a filtered, paginated
        DescribeInstances and DescribeNetworkInterfaces per 100 instances);
        the wait if the shared buckets cannot pay now."""
        if not reports:
            return 0.0
        rounds = math.ceil(len({r.instance_id for r in reports}) / FILTER_CHUNK)
        request = {"DescribeInstances": rounds, "DescribeNetworkInterfaces": rounds}
        wait = self.buckets.take_batch([request], self.clock.now())[0]
        if wait == 0:
            self.tally.add(names.M_TOKENS_TAKEN, 2 * rounds)
        return wait

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
        self, reports: list[PoolReport], by_report: dict[int, Record], wait: float, out: BatchOutcome,
        reason: str = "waiting for EC2 Describe tokens",
    ) -> None:
        if not reports:
            return
        delay = min(float(self.settings.max_defer_s), max(1.0, wait if math.isfinite(wait) else 60.0))
        if reason == "waiting for EC2 Describe tokens":
            self.tally.add(names.M_TOKENS_WAITED_S, delay)
        items = [Deferral(by_report[id(r)].body, math.ceil(delay), self._key(r)) for r in reports]
        failed = set(self.delivery.defer(items))
        for r in reports:
            if self._key(r) in failed:
                out.failed_message_ids.append(by_report[id(r)].message_id)
                continue
            out.nodes[r.node] = NodeOutcome(r.node, r.instance_id, r.seq, "deferred", retry_after_s=delay,
                                            reason=reason)

    def _verify_and_plan(
        self, keep: list[PoolReport], by_report: dict[int, Record], out: BatchOutcome,
        last: dict[str, int] | None = None,
    ) -> list[NodeJob]:
        """Every read first (Describe round, foreign-ENI check, subnets,
        instance types), then the decisions: a throttled read raises
        :class:`Throttled` before any report was rejected or planned, so the
        caller can defer the whole batch unread."""
        if not keep:
            return []
        facts = self.ec2.describe_nodes(r.instance_id for r in keep)
        missing_enis: dict[str, set[str]] = {}
        for r in keep:
            f = facts.get(r.instance_id)
            if f is not None and not self._instance_problem(r, f):
                gone = {e.eni_id for e in r.enis} - {e.eni.eni_id for e in f.enis}
                if gone:
                    missing_enis[self._key(r)] = gone
        # Reported ENIs EC2 does not show on the instance: gone (released,
        # GC'd) is fine; attached to another instance is someone else's.
        seen = self.ec2.describe_enis(set().union(*missing_enis.values())) if missing_enis else {}
        found = [f for r in keep if (f := facts.get(r.instance_id)) is not None and not self._instance_problem(r, f)]
        subnets = list(self.ec2.subnets(f.vpc_id for f in found).values()) if found else []
        limits: dict[str, InstanceLimits | AwsError] = {}
        for f in found:
            if f.instance_type not in limits:
                try:
                    limits[f.instance_type] = self.ec2.limits(f.instance_type)
                except Throttled:
                    raise
                except AwsError as err:
                    limits[f.instance_type] = err
        self._load_flips([f.instance_id for f in found])
        # --- decisions ---
        owners: dict[str, str] = {}
        jobs: list[NodeJob] = []
        for r in keep:
            rec = by_report[id(r)]
            f = facts.get(r.instance_id)
            reason = self._instance_problem(r, f)
            if reason == "" and r.instance_id in owners:
                reason = "instance-claimed-twice"
            if reason:
                self._reject(rec, r, reason, out)
                continue
            assert f is not None
            owners[r.instance_id] = r.node
            if self.trusted is not None and last is not None and last.get(self._key(r), -1) < 0:
                self._create_result_queue(r.instance_id)
            foreign = [
                e for e in sorted(missing_enis.get(self._key(r), ()))
                if e in seen and seen[e].instance_id and seen[e].instance_id != r.instance_id
            ]
            if foreign:
                self._reject(rec, r, "foreign-eni", out, ",".join(foreign))
                continue
            lim = limits[f.instance_type]
            if isinstance(lim, AwsError):
                self._reject(rec, r, "unknown-instance-type", out, str(lim))
                continue
            ceiling = node_max_pods(r, lim, self.settings.max_pods)
            plan = plan_node(r, f.inventory(self.cluster), lim, subnets, cluster=self.cluster, max_pods=ceiling)
            self._flip(r, plan)
            plan = self._release_rules(r, f, plan)
            jobs.append(NodeJob(r, f, lim, plan, rec.message_id, rec.body, max_pods=ceiling))
            if plan.delta.low:
                self.tally.add(names.M_NODES_IN_DEFICIT)
        self._save_flips()
        jobs.sort(key=lambda j: priority_key(j.report, j.plan.delta))
        return jobs

    def _load_flips(self, instance_ids: list[str]) -> None:
        """The batch's instances' shared flip histories, before any flip of this batch is counted."""
        if self.flips is None or not instance_ids:
            return
        try:
            self.fair.hydrate(self.flips.load(self.cluster, instance_ids))
        except (AwsError, ClientError) as err:  # this container's view still damps what it saw
            self.tally.add(M_FLIPS_UNSHARED)
            log.warning("flip histories not read", extra={"error": str(err)[:200]})

    def _save_flips(self) -> None:
        changed = self.fair.take_dirty()
        if self.flips is None:
            return
        for iid, st in sorted(changed.items()):
            try:
                self.flips.save(self.cluster, iid, st, self.fair.expires_at(st))
            except (AwsError, ClientError) as err:
                self.tally.add(M_FLIPS_UNSHARED)
                log.warning("flip history not saved", extra={"instance_id": iid, "error": str(err)[:200]})

    def _flip(self, r: PoolReport, plan: Plan) -> None:
        """Count what the node asks for, whatever the rules then let happen:
        addresses back (release offers) or more (a deficit or waiting pods)."""
        if r.release:
            kind = "release"
        elif plan.delta.low or r.pending_demand:
            kind = "allocate"
        else:
            return
        iid = self._key(r)
        if self.fair.asked(iid, kind, self.clock.now()):
            self.tally.add(M_NODES_DAMPED)
            log.warning(
                "node flips between filling and releasing: damped (its releases are taken back)",
                extra={"node": r.node, "instance_id": iid, "damp_s": self.settings.damp_s},
            )

    def _create_result_queue(self, instance_id: str) -> None:
        """First report of a verified instance EC2 shows in the cluster: create
        its result queue (agents may not create queues, so their number is
        bounded by the cluster's instances; CreateQueue is idempotent)."""
        name = self.settings.result_queue_name(instance_id)
        policy = secure_transport_policy(self.settings, name)
        try:
            self.delivery.sqs.create_queue(QueueName=name, Attributes={"Policy": policy} if policy else {})
        except ClientError as err:  # the push then counts the missing queue; the agent keeps looking
            if err.response.get("Error", {}).get("Code") in ("QueueAlreadyExists", "QueueNameExists"):
                return  # made earlier with other attributes (before the policy): it is there
            log.warning("result queue not created", extra={"instance_id": instance_id, "error": str(err)[:200]})
            return
        self.tally.add(M_RESULT_QUEUES_CREATED)

    def _release_rules(self, r: PoolReport, f: NodeFacts, plan: Plan) -> Plan:
        """The allocator's own release rules, whatever the agent does: an offer is
        acted on only once quarantined for ``release_delay_s``; an ENI is
        deleted only once ``min_eni_age_s`` old (its ``createdAt`` tag); a damped
        instance's offers are taken back (``Reclaim``) instead."""
        if not any(isinstance(c, UnassignAddresses | DeleteEni) for c in plan.calls):
            return plan
        now = self.clock.now()
        iid = self._key(r)
        offered_at = {o.eni_id: o.quarantined_at for o in r.release}
        created = {e.eni.eni_id: _created_at(e.tags) for e in f.enis}
        shows = {e.eni.eni_id: e.eni for e in f.enis}
        damped = self.fair.damped(iid, now)
        calls: list[Any] = []
        held = 0
        for c in plan.calls:
            if not isinstance(c, UnassignAddresses | DeleteEni):
                calls.append(c)
                continue
            young_offer = now - (offered_at.get(c.eni_id) or now) < self.settings.release_delay_s
            born = created.get(c.eni_id)
            young_eni = isinstance(c, DeleteEni) and born is not None and now - born < self.settings.min_eni_age_s
            if damped:
                o = next((o for o in r.release if o.eni_id == c.eni_id), None)
                seen = shows.get(c.eni_id)
                if o is not None and seen is not None:
                    # Hand back only what EC2 still shows on the ENI: an address an
                    # earlier invocation unassigned (its result late or lost) is not
                    # the node's to take back (hostile review, finding 2).
                    ips = tuple(ip for ip in o.ips if ip in seen.ips)
                    pfx = tuple(p for p in o.prefixes if p in seen.prefixes)
                    if ips or pfx:
                        calls.append(Reclaim(c.eni_id, ips, pfx))
                held += 1
            elif young_offer or young_eni:
                held += 1
            else:
                calls.append(c)
        if not held:
            return plan
        self.tally.add(M_RELEASES_HELD, held)
        log.info("release calls held", extra={"node": r.node, "instance_id": iid, "calls": held, "damped": damped})
        mutating = [c for c in calls if not isinstance(c, Reclaim)]
        kind = plan.kind if mutating else ("allocate" if calls else "none")
        return replace(plan, calls=tuple(calls), kind=kind)

    def _instance_problem(self, r: PoolReport, f: NodeFacts | None) -> str:
        if f is None:
            return "instance-not-found"
        if f.tags.get(names.cluster_tag_key(self.cluster)) not in ("owned", "shared"):
            return "foreign-instance"
        if f.state != "running":
            return "instance-not-running"
        return ""

    # --- 5-6. lease, tokens ----------------------------------------------------

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
                res = NodeOutcome(job.report.node, job.facts.instance_id, job.report.seq, "failed",
                                  [Failed(code="plan-exceeds-budget", message="plan needs more tokens than a bucket holds")])
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
        moved = [j for j in claimed if now_seqs.get(self._key(j.report), -1) != last.get(self._key(j.report), -1)]
        if moved:
            claimed = self._recheck(claimed, moved, now_seqs, owner, out, deferrals)
        return claimed

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
            a for a, n in wanted.items()
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
        moved: list[NodeJob],
        now_seqs: dict[str, int],
        owner: str,
        out: BatchOutcome,
        deferrals: list[Deferral],
    ) -> list[NodeJob]:
        moved_ids = {id(j) for j in moved}
        try:
            fresh_facts = self.ec2.describe_nodes(j.facts.instance_id for j in moved)
            subnets = list(self.ec2.subnets().values())
        except Throttled as err:
            wait = self._throttle_wait(err)
            for j in moved:
                self._give_up(j, owner, wait, f"{err.action} throttled", out, deferrals)
            return [j for j in claimed if id(j) not in moved_ids]
        keep: list[NodeJob] = []
        for j in claimed:
            if id(j) not in moved_ids:
                keep.append(j)
                continue
            f = fresh_facts.get(j.facts.instance_id)
            if j.report.seq <= now_seqs.get(self._key(j.report), -1) or f is None:
                out.stale += 1
                self.tally.add(names.M_REPORTS_STALE)
                self.leases.release(self.cluster, self._key(j.report), owner)
                continue
            plan = self._release_rules(
                j.report, f, plan_node(j.report, f.inventory(self.cluster), j.limits, subnets, cluster=self.cluster,
                                       max_pods=j.max_pods)
            )
            nj = NodeJob(j.report, f, j.limits, plan, j.record_id, j.body, max_pods=j.max_pods)
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
        res = NodeOutcome(job.report.node, job.facts.instance_id, job.report.seq, "deferred",
                          retry_after_s=delay, reason=reason)
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

    # --- 7. execute, record, push ---------------------------------------------

    def _tag_primaries(self, granted: list[NodeJob]) -> list[NodeJob]:
        """First-contact tags of every untagged primary ENI in the batch, in one
        CreateTags per ``TAG_BATCH`` ENIs instead of one per node (a burst of new
        nodes would otherwise spend a call each). Each node paid for its own tag;
        the batch spends fewer. If the batched call fails, every node keeps its
        own ``TagPrimaryEni`` and tags as before."""
        wanted = [c.eni_id for j in granted for c in j.plan.calls if isinstance(c, TagPrimaryEni)]
        if len(wanted) < 2:
            return granted
        tagged: set[str] = set()
        for i in range(0, len(wanted), TAG_BATCH):
            chunk = wanted[i : i + TAG_BATCH]
            try:
                self.ec2.create_tags(chunk, primary_eni_tag(self.cluster))
            except Throttled as err:
                self.buckets.throttled(err.action, self.clock.now())  # the AIMD cut, as for any call
                log.warning("batched first-contact tag throttled; nodes tag their own", extra={"error": str(err)})
                continue
            except AwsError as err:
                log.warning("batched first-contact tag failed; nodes tag their own", extra={"error": str(err)})
                continue
            tagged.update(chunk)
            self.tally.add(M_PRIMARY_ENIS_TAGGED, len(chunk))
        if not tagged:
            return granted
        return [
            replace(j, plan=replace(j.plan, calls=tuple(
                c for c in j.plan.calls if not (isinstance(c, TagPrimaryEni) and c.eni_id in tagged))))
            for j in granted
        ]

    def _serve(self, job: NodeJob, owner: str, stop_at: float | None = None) -> NodeOutcome:
        try:
            if self._late(stop_at):
                # Not started: the report is re-sent (no action, so not recorded).
                self.tally.add(M_TOKENS_FORFEITED, job.plan.mutating_calls)
                return NodeOutcome(job.report.node, job.facts.instance_id, job.report.seq, "deferred",
                                   retry_after_s=1.0, reason=DEADLINE_REASON)
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
            return NodeOutcome(job.report.node, job.facts.instance_id, job.report.seq, "failed",
                               [Failed.clipped("internal", str(exc))], reason="internal")
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
            cluster=self.cluster, node=r.node, instance_id=job.facts.instance_id, in_reply_to=r.seq,
            actions=self.delivery.fit(actions, r.node, r.seq),
        )
        try:
            if self.delivery.push(result):
                self.tally.observe(names.M_ALLOCATION_LATENCY_MS, max(0.0, (self.clock.now() - r.sent_at) * 1000))
        except AwsError as err:
            log.error("result push failed", extra={"node": r.node, "seq": r.seq, "error": str(err)})
        res.result = result
