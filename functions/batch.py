"""One invocation's batch: every piece of state that lives for one call of
:meth:`functions.allocator.Allocator.handle_batch`, in one object.

Everything per node is keyed by the (verified) instance id, never by the
report's ``node`` label: two instances reporting the same label in one batch
keep apart their ledger seqs, their outcomes and their re-sent reports, so
neither can be sent the other's outcome (``Batch.settle`` keys an outcome by
the instance it is for, and a re-sent report is paired with its own job).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from functions.delivery import Deferral
from functions.execute import NodeJob, NodeOutcome
from functions.reasons import NodeStatus
from warmpool.messages import AllocationResult


@dataclass
class BatchOutcome:
    """What a batch came to, for the handler (``ReportBatchItemFailures``), the
    log line and the tests."""

    failed_message_ids: list[str] = field(default_factory=list)
    """For ``ReportBatchItemFailures``: records the ESM should redeliver."""
    results: list[AllocationResult] = field(default_factory=list)
    nodes: dict[str, NodeOutcome] = field(default_factory=dict)
    """By instance id: each instance's outcome (the report's ``node`` is only a label)."""
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
            if res.status == NodeStatus.SERVED:
                self.served += 1
            elif res.status == NodeStatus.DEFERRED:
                self.deferred += 1
            else:
                self.failed += 1
        keys = ("invalid", "rejected", "stale", "superseded", "served", "deferred", "failed", "noop")
        return {k: getattr(self, k) for k in keys}


@dataclass
class Resend:
    """A planned node whose report goes back to the reports queue with a delay;
    once re-sent, its own outcome (``deferred``) is pushed to it."""

    job: NodeJob
    deferral: Deferral


@dataclass
class Batch:
    """The state of one invocation, from the records in to the results out."""

    owner: str
    """Lease owner: unique per invocation."""
    deadline: float | None
    """The invocation's deadline (clock time), when known."""
    stop_at: float | None
    """No new work starts at or after this (``deadline`` less the margin)."""
    out: BatchOutcome = field(default_factory=BatchOutcome)
    last: dict[str, int] = field(default_factory=dict)
    """The ledger's last seq by instance id, as read at the batch's start."""
    unread: frozenset[str] = frozenset()
    """Instances whose ledger row could not be read: their reports wait."""
    resend: dict[str, Resend] = field(default_factory=dict)
    """By instance id: planned nodes deferred in this batch, re-sent at its end."""

    def late(self, now: float) -> bool:
        """Too close to the invocation's deadline to start new work."""
        return self.stop_at is not None and now >= self.stop_at

    def last_seq(self, instance_id: str) -> int:
        return self.last.get(instance_id, -1)

    def settle(self, res: NodeOutcome) -> None:
        """The outcome of the instance ``res`` is for (a later one replaces an earlier)."""
        self.out.nodes[res.instance_id] = res

    def defer(self, job: NodeJob, res: NodeOutcome) -> None:
        """A planned node deferred: its outcome now, its report re-sent at the end."""
        self.settle(res)
        self.resend[res.instance_id] = Resend(job, Deferral(job.body, math.ceil(res.retry_after_s), res.instance_id))

    def redeliver(self, record_id: str) -> None:
        """Leave this record to the event-source mapping (it redelivers it)."""
        self.out.failed_message_ids.append(record_id)
