"""What a batch is made of before any node is planned: the SQS records, one
explicit object per node report as it flows through the allocator's stages
(:class:`Incoming`), the batch's outcome, and the identity rules the first
stages apply (trusted keys, the SQS sender, how far ahead a seq may be),
and the result queue a newly verified instance gets.

No I/O here but the cold-start log of :func:`trusted_keys` and
:func:`create_result_queue`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from functions.execute import NodeOutcome
from functions.identity import IdentityConfigError, TrustedKeys
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool.messages import AllocationResult, PoolReport
from warmpool.names import M_RESULT_QUEUES_CREATED
from warmpool.ports import SqsApi

log = logging.getLogger(__name__)

SEQ_AHEAD_LIMIT = 2**20
"""A report's seq may be at most this far ahead of ``max(last seq seen, now in
ms)`` (the agent's seq is ``max(last + 1, now_ms)``): a node cannot poison
its own ledger row with a huge seq that makes every later report stale."""
SEQ_TOO_FAR = "seq-too-far-ahead"


@dataclass(frozen=True)
class Record:
    """One SQS record, transport-neutral."""

    message_id: str
    body: str
    sender_id: str = ""


@dataclass(frozen=True)
class Incoming:
    """One node's report on its way through the batch, before it is planned:
    the SQS record it came in (its body is what a deferral re-sends, its
    message id what the ESM redelivers) and the report as parsed, then as
    trimmed of offers too old to act on. Planned, it becomes a
    :class:`functions.execute.NodeJob` (facts, limits, plan, ceiling)."""

    record: Record
    report: PoolReport


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

    def sum_up(self) -> dict[str, int]:
        """Collect the nodes' results and count them by status; the batch's counts (for its log line)."""
        self.results = [n.result for n in self.nodes.values() if n.result is not None]
        for res in self.nodes.values():
            if res.status == "served":
                self.served += 1
            elif res.status == "deferred":
                self.deferred += 1
            else:
                self.failed += 1
        keys = ("invalid", "rejected", "stale", "superseded", "served", "deferred", "failed", "noop")
        return {k: getattr(self, k) for k in keys}


def trusted_keys(settings: Settings) -> TrustedKeys | None:
    """The keys report identities are verified with, parsed once at cold start.

    Fail-closed: with verification required (the default) an empty or
    unusable certificate setting stops the allocator here
    (:class:`IdentityConfigError`). ``off`` is for explicit local tests and is
    logged loudly at start (and each report taken unverified is counted,
    ``ReportsIdentityUnverified``)."""
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


def sender_matches(sender_id: str, instance_id: str) -> bool:
    """SQS ``SenderId`` of an assumed role is ``AROA...:<session name>``; the
    agent's instance-role session name is the instance id."""
    return sender_id.rsplit(":", 1)[-1] == instance_id if sender_id else False


def secure_transport_policy(settings: Settings, queue_name: str) -> str | None:
    """The queue policy the stack's own queues have (``enforce_ssl``): deny every SQS action
    over plain HTTP. For the result queues the allocator creates; their ARN is built from the
    reports queue's account and the region. None when the account is unknown (no reports URL)."""
    parts = settings.reports_queue_url.rstrip("/").split("/")
    account = parts[-2] if len(parts) >= 2 else ""
    if not (len(account) == 12 and account.isdigit()):
        return None
    region = settings.region
    partition = partition_of(region)
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Action": "sqs:*",
                    "Resource": f"arn:{partition}:sqs:{region}:{account}:{queue_name}",
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


PARTITIONS = (
    ("cn-", "aws-cn"),
    ("us-gov-", "aws-us-gov"),
    ("us-isob-", "aws-iso-b"),
    ("us-isof-", "aws-iso-f"),
    ("eu-isoe-", "aws-iso-e"),
    ("us-iso-", "aws-iso"),
)
"""Region prefix → partition, longest prefix first; every other region is in ``aws``."""


def partition_of(region: str) -> str:
    return next((p for prefix, p in PARTITIONS if region.startswith(prefix)), "aws")


def create_result_queue(sqs: SqsApi, settings: Settings, instance_id: str, tally: Tally) -> None:
    """First report of a verified instance EC2 shows in the cluster: create
    its result queue (agents may not create queues, so their number is
    bounded by the cluster's instances; CreateQueue is idempotent)."""
    name = settings.result_queue_name(instance_id)
    policy = secure_transport_policy(settings, name)
    if policy is None:
        log.warning(
            "result queue created without its TLS-only policy: no account in the reports queue URL",
            extra={"instance_id": instance_id},
        )
    try:
        sqs.create_queue(QueueName=name, Attributes={"Policy": policy} if policy else {})
    except ClientError as err:  # the push then counts the missing queue; the agent keeps looking
        if err.response.get("Error", {}).get("Code") in ("QueueAlreadyExists", "QueueNameExists"):
            return  # made earlier with other attributes (before the policy): it is there
        log.warning("result queue not created", extra={"instance_id": instance_id, "error": str(err)[:200]})
        return
    tally.add(M_RESULT_QUEUES_CREATED)
