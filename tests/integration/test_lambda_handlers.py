"""The Lambda handlers end to end on moto (EC2, SQS, DynamoDB): the production
wiring (settings from the environment, boto3 clients, DynamoDB stores, EMF)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions import allocate, reconcile
from tests.helpers.lambda_env import Ctx, _event, _report


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
