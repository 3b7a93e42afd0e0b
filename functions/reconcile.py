"""λ reconcile: runs on a schedule (EventBridge rate); thin around :class:`Reconciler`."""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import aws
from functions.observability import account_of, flush, powertools, route_logic_logs
from functions.reconciler import Reconciler
from functions.settings import Settings

logger, tracer, metrics = powertools("reconcile")

_reconciler: Reconciler | None = None
_lock = threading.Lock()


def build(settings: Settings) -> Reconciler:
    return Reconciler(aws.ports(settings), settings)


def cold_start() -> None:
    """A new execution environment (see ``functions.allocate.cold_start``)."""
    global _reconciler
    with _lock:
        _reconciler = None
    aws.reset()


def reconciler(context: Any) -> Reconciler:
    global _reconciler
    with _lock:
        if _reconciler is None:
            _reconciler = build(aws.settings_at_cold_start(account_of(context)))
        return _reconciler


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rec = reconciler(context)
    logger.append_keys(cluster=rec.cluster)
    route_logic_logs(logger)
    out = rec.run()
    flush(rec.tally.drain(), metrics, rec.cluster)
    summary = asdict(out)
    return {k: (len(v) if isinstance(v, list) else v) for k, v in summary.items()}
