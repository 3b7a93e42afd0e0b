"""boto3 clients for the handlers: built lazily, once per container.

Never at import time (tests and the bench import the handlers without AWS),
retries kept small (throttling is handled by the token buckets and deferral,
not by SDK sleeps), endpoint from ``AWS_ENDPOINT_URL`` (boto3 reads it) or
the local stack's ``WARMPOOL_AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

from functions.settings import Settings
from functions.stores import DynamoBuckets, DynamoFlips, DynamoLeases, DynamoLedger, DynamoReleaseBooks
from warmpool.clock import RealClock
from warmpool.ports import Ports

RETRIES = Config(retries={"max_attempts": 2, "mode": "standard"}, max_pool_connections=32)
EC2_NO_RETRIES = Config(retries={"total_max_attempts": 1, "mode": "standard"}, max_pool_connections=32)
"""EC2 gets no SDK retry at all: a throttle is answered by the buckets and
deferral (a botocore retry would sleep, and spend a token nobody paid for), and
a timed-out AssignPrivateIpAddresses retried by the SDK could assign twice.
Every EC2 retry is the allocator's decision (re-plan, defer, redelivery)."""

_clients: dict[str, Any] = {}
_lock = threading.Lock()


def client(service: str, settings: Settings) -> Any:
    with _lock:
        c = _clients.get(service)
        if c is None:
            kw: dict[str, Any] = {
                "region_name": settings.region,
                "config": EC2_NO_RETRIES if service == "ec2" else RETRIES,
            }
            if settings.endpoint_url:
                kw["endpoint_url"] = settings.endpoint_url
            c = boto3.session.Session().client(service, **kw)
            _clients[service] = c
        return c


def reset() -> None:
    """Forget the cached clients (tests)."""
    with _lock:
        _clients.clear()


def ports(settings: Settings) -> Ports:
    """The production wiring both functions share: boto3 clients, the DynamoDB stores, the wall clock."""
    db = client("dynamodb", settings)
    return Ports(
        ec2=client("ec2", settings),
        sqs=client("sqs", settings),
        buckets=DynamoBuckets(db, settings.buckets_table, settings.bucket_spec, settings.account, settings.region),
        ledger=DynamoLedger(db, settings.ledger_table, settings.ledger_ttl_s),
        leases=DynamoLeases(db, settings.ledger_table),
        flips=DynamoFlips(db, settings.ledger_table),
        release_books=DynamoReleaseBooks(db, settings.ledger_table),
        clock=RealClock(),
    )


def settings_at_cold_start(account_from_context: str | None) -> Settings:
    """Typed settings read once; the account from the invocation's ARN when
    the environment leaves it unset."""
    settings = Settings.from_env()
    if settings.account == "000000000000" and account_from_context:
        settings = settings.model_copy(update={"account": account_from_context})
    return settings
