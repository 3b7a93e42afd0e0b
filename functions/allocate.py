"""λ allocate: the reports queue's event-source mapping calls this.

Thin: parse the SQS event, hand the whole batch to :class:`Allocator` (the
batch is coalesced per node, so records are not processed one by one as
Powertools' BatchProcessor would), answer ``ReportBatchItemFailures``.
"""

from __future__ import annotations

import threading
from typing import Any

from aws_lambda_powertools.utilities.data_classes import SQSEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import aws
from functions.allocator import Allocator, Record, ThreadMapper
from functions.observability import account_of, flush, powertools, route_logic_logs
from functions.settings import Settings
from warmpool.clock import Clock

logger, tracer, metrics = powertools("allocate")

_allocator: Allocator | None = None
_lock = threading.Lock()


def build(settings: Settings) -> Allocator:
    """The production wiring, with threads for independent nodes."""
    p = aws.ports(settings)
    return Allocator(
        ec2=p.ec2,
        sqs=p.sqs,
        buckets=p.buckets,
        ledger=p.ledger,
        leases=p.leases,
        clock=p.clock,
        settings=p.settings,
        mapper=ThreadMapper(settings.max_workers),
        flips=p.flips,
        release_books=p.release_books,
    )


def allocator(context: Any) -> Allocator:
    """Built once per container, at the first invocation (cold start)."""
    global _allocator
    with _lock:
        if _allocator is None:
            _allocator = build(aws.settings_at_cold_start(account_of(context)))
        return _allocator


def cold_start() -> None:
    """A new execution environment: the next invocation builds the allocator from the
    environment again (the local stack calls this when it starts, so a stack never
    inherits clients bound to an earlier stack's endpoint in the same process)."""
    global _allocator
    with _lock:
        _allocator = None
    aws.reset()  # the boto3 clients too: they hold the endpoint they were made for


def deadline_of(context: Any, clock: Clock) -> float | None:
    """The invocation's deadline in the allocator's clock: now plus the
    Lambda's remaining time (None when the context does not say)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    return clock.now() + float(remaining()) / 1000.0


def records_of(event: dict[str, Any]) -> list[Record]:
    return [
        Record(
            message_id=r.message_id,
            body=r.body or "",
            sender_id=str((r.raw_event.get("attributes") or {}).get("SenderId", "")),
        )
        for r in SQSEvent(event).records
    ]


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    alloc = allocator(context)
    logger.append_keys(cluster=alloc.cluster)
    route_logic_logs(logger)
    outcome = alloc.handle_batch(
        records_of(event),
        invocation_id=getattr(context, "aws_request_id", None),
        deadline=deadline_of(context, alloc.clock),
    )
    flush(alloc.tally.drain(), metrics, alloc.cluster)
    return outcome.batch_item_failures()
