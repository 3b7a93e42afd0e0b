"""Powertools for the handlers: Logger, Tracer, Metrics, the logic's logs
routed through the handler's Logger, and the tally → EMF flush."""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import single_metric

from functions.telemetry import Tally
from warmpool import names


def powertools(service: str) -> tuple[Logger, Tracer, Metrics]:
    return (
        Logger(service=service),
        Tracer(service=service, disabled=None),
        Metrics(namespace=names.METRICS_NAMESPACE, service=service),
    )


LOGIC_LOGGERS = frozenset({"functions"})
"""The logic logs through the standard library (``logging.getLogger(__name__)``
in ``functions/*``), never through Powertools."""


def route_logic_logs(logger: Logger) -> None:
    """Send every record the logic writes through the handler's Logger, so the
    keys the handler sets (the invocation's request id from
    ``inject_lambda_context``, ``cluster`` from ``append_keys``) are on each of
    them. The logic's loggers then stop propagating to the root logger, as
    Powertools' own does, so nothing is printed twice. Called at every
    invocation: where one process runs both handlers (the local stack), the
    running one owns the records; a no-op once routed."""
    if logging.getLogger("functions").handlers == logger.handlers:
        return
    copy_config_to_registered_loggers(source_logger=logger, include=set(LOGIC_LOGGERS))


def flush(tally: Tally, metrics: Metrics, cluster: str) -> None:
    """Undimensioned counters go into the invocation's EMF blob, dimensions exactly
    ``cluster`` and ``service`` (the function); dimensioned ones (per EC2 action, per
    reason) each get their own, dimensions exactly ``cluster`` and theirs. A CloudWatch
    metric is its full dimension set, so the dashboard and alarms name these sets
    (``infra/observability.py``); ``POWERTOOLS_SERVICE_NAME`` must not add ``service``
    to the second kind (Powertools' ``SingleMetric`` reads it)."""
    metrics.add_dimension(name="cluster", value=cluster)
    for name, dims, value, unit in tally.items():
        if value == 0 and not dims:
            continue
        if dims:
            with single_metric(
                name=name,
                unit=unit,  # type: ignore[arg-type]
                value=value,
                namespace=names.METRICS_NAMESPACE,
                default_dimensions={"cluster": cluster, **dict(dims)},
            ) as one:
                one.service = ""  # serialised on leaving the block: no service dimension
        else:
            metrics.add_metric(name=name, unit=unit, value=value)
    for name, values, unit in tally.sample_items():
        for v in values[:100]:
            metrics.add_metric(name=name, unit=unit, value=v)


def account_of(context: Any) -> str:
    """The account id from the function's ARN (``arn:aws:lambda:region:account:function:name``)."""
    arn = str(getattr(context, "invoked_function_arn", "") or "")
    parts = arn.split(":")
    return parts[4] if len(parts) > 4 and parts[4] else ""
