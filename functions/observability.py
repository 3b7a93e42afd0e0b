"""Powertools for the handlers: Logger, Tracer, Metrics, and the tally → EMF flush."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import single_metric

from functions.telemetry import Tally
from warmpool import names


def powertools(service: str) -> tuple[Logger, Tracer, Metrics]:
    return (
        Logger(service=service),
        Tracer(service=service, disabled=None),
        Metrics(namespace=names.METRICS_NAMESPACE, service=service),
    )


def flush(tally: Tally, metrics: Metrics, cluster: str) -> None:
    """Undimensioned counters go into the invocation's EMF blob; dimensioned
    ones (per EC2 action, per reason) each get their own."""
    for name, dims, value, unit in tally.items():
        if value == 0 and not dims:
            continue
        if dims:
            with single_metric(
                name=name, unit=unit, value=value, namespace=names.METRICS_NAMESPACE,  # type: ignore[arg-type]
                default_dimensions={"cluster": cluster, **dict(dims)},
            ):
                pass
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
