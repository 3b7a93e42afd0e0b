"""The production wiring: EC2 gets no SDK retry (the allocator decides every
EC2 retry); SQS and DynamoDB keep a small one. Clients are built lazily."""

from __future__ import annotations

from functions import aws
from functions.settings import Settings


def test_ec2_has_no_sdk_retry_other_services_a_small_one() -> None:
    s = Settings(
        cluster="demo",
        reports_queue_url="http://q",
        dlq_url="http://d",
        result_queue_prefix="warmpool-demo-result-",
        ledger_table="t",
        region="us-east-1",
    )
    aws.reset()
    try:
        assert aws.client("ec2", s).meta.config.retries["total_max_attempts"] == 1
        assert aws.client("sqs", s).meta.config.retries["total_max_attempts"] == 3
        assert aws.client("ec2", s) is aws.client("ec2", s)  # one per container
    finally:
        aws.reset()
