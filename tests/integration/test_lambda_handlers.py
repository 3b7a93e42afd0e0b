"""The Lambda handlers end to end on moto (EC2, SQS, DynamoDB): the production
wiring (settings from the environment, boto3 clients, DynamoDB stores, EMF)."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from functions import allocate, reconcile
from tests.helpers.lambda_env import CLUSTER, Ctx, _event, _report


def test_allocate_handler_serves_a_batch_and_reports_no_item_failures(
    env: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    resp = allocate.handler(_event(_report(env, 1, warm_ip=3), "garbage"), Ctx())
    assert resp == {"batchItemFailures": []}
    enis = env["ec2"].describe_network_interfaces(Filters=[{"Name": "attachment.instance-id", "Values": [env["iid"]]}])[
        "NetworkInterfaces"
    ]
    secondaries = [a for e in enis for a in e["PrivateIpAddresses"] if not a["Primary"]]
    assert len(secondaries) == 3
    msgs = env["sqs"].receive_message(QueueUrl=env["result_url"]).get("Messages", [])
    assert json.loads(msgs[0]["Body"])["actions"][0]["kind"] == "assigned"
    dlq = env["sqs"].receive_message(QueueUrl=env["dlq"], MessageAttributeNames=["All"]).get("Messages", [])
    assert dlq[0]["MessageAttributes"]["reason"]["StringValue"] == "not-json"
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert any("ReportsReceived" in blob for blob in emf)
    assert allocate._allocator is not None and allocate._allocator.settings.account == "123456789012"
    # Redelivery: stale, no EC2 mutation.
    assert allocate.handler(_event(_report(env, 1, warm_ip=3)), Ctx()) == {"batchItemFailures": []}
    assert allocate._allocator.tally.get("ReportsStale") == 0  # drained into EMF


def test_reconcile_handler_runs(env: dict[str, Any]) -> None:
    out = reconcile.handler({}, Ctx(function_name="reconcile"))
    assert out["leases_swept"] == 0 and out["deleted"] == 0


def test_the_logic_s_records_carry_the_handler_s_correlation_keys(env: dict[str, Any]) -> None:
    """A record the allocator logic writes (``functions.allocator``'s own
    logger) during a handler call carries the invocation's request id and the
    cluster, as the handler's own records do."""
    handler = allocate.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    out = io.StringIO()
    old = handler.setStream(out)
    try:
        allocate.handler(_event("garbage"), Ctx(aws_request_id="req-corr-7"))
    finally:
        handler.setStream(old)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    invalid = [r for r in lines if r.get("message") == "invalid report"]
    assert invalid, lines
    assert invalid[0]["function_request_id"] == "req-corr-7"
    assert invalid[0]["cluster"] == CLUSTER
    assert invalid[0]["name"] == "functions.allocator"
