"""λ reconcile: runs on a schedule (EventBridge rate); thin around :class:`Reconciler`."""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import aws
from functions.observability import account_of, flush, powertools
from functions.reconciler import Reconciler
from functions.settings import Settings
from functions.stores import DynamoBuckets, DynamoLeases, DynamoLedger
from warmpool.clock import RealClock

logger, tracer, metrics = powertools("reconcile")

_reconciler: Reconciler | None = None
_lock = threading.Lock()


def build(settings: Settings) -> Reconciler:
    db = aws.client("dynamodb", settings)
    return Reconciler(
        ec2=aws.client("ec2", settings),
        sqs=aws.client("sqs", settings),
        buckets=DynamoBuckets(db, settings.buckets_table, settings.bucket_spec, settings.account, settings.region),
        ledger=DynamoLedger(db, settings.ledger_table, settings.ledger_ttl_s),
        leases=DynamoLeases(db, settings.ledger_table),
        clock=RealClock(),
        settings=settings,
    )


def reconciler(context: Any) -> Reconciler:
    global _reconciler
    with _lock:
        if _reconciler is None:
            settings = Settings.from_env()
            if settings.account == "000000000000" and account_of(context):
                settings = settings.model_copy(update={"account": account_of(context)})
            _reconciler = build(settings)
        return _reconciler


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rec = reconciler(context)
    logger.append_keys(cluster=rec.cluster)
    out = rec.run()
    flush(rec.tally.drain(), metrics, rec.cluster)
    summary = asdict(out)
    return {k: (len(v) if isinstance(v, list) else v) for k, v in summary.items()}
