"""A moto world (EC2, SQS, DynamoDB) set up as the deployed Lambda handlers see
it: the ``env`` fixture (settings in the environment, queues, tables, one
instance), a Lambda context, and reports and SQS events to hand the handlers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from emulated.iid import IdentitySigner, document_for
from functions import allocate, aws, reconcile
from functions.stores import create_tables
from warmpool import names

CLUSTER = "demo"
SIGNER = IdentitySigner()
ACCOUNT = "123456789012"  # the account of Ctx's ARN


@dataclass
class Ctx:
    function_name: str = "allocate"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:allocate"
    aws_request_id: str = "req-1"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(db, names.ledger_table(CLUSTER), names.BUCKETS_TABLE)
        reports = sqs.create_queue(QueueName=names.reports_queue(CLUSTER))["QueueUrl"]
        dlq = sqs.create_queue(QueueName=names.reports_dlq(CLUSTER))["QueueUrl"]
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/18", AvailabilityZone="us-east-1a")["Subnet"]
        ec2.create_tags(
            Resources=[subnet["SubnetId"]], Tags=[{"Key": names.cluster_tag_key(CLUSTER), "Value": "shared"}]
        )
        inst = ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=1,
            MaxCount=1,
            InstanceType="m5.large",
            SubnetId=subnet["SubnetId"],
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": names.cluster_tag_key(CLUSTER), "Value": "owned"}]}
            ],
        )["Instances"][0]
        iid = inst["InstanceId"]
        result_url = sqs.create_queue(QueueName=names.result_queue(CLUSTER, iid))["QueueUrl"]
        for k, v in {
            names.ENV_CLUSTER: CLUSTER,
            names.ENV_REPORTS_QUEUE_URL: reports,
            names.ENV_DLQ_URL: dlq,
            names.ENV_RESULT_QUEUE_PREFIX: names.result_queue_prefix(CLUSTER),
            names.ENV_LEDGER_TABLE: names.ledger_table(CLUSTER),
            names.ENV_BUCKETS_TABLE: names.BUCKETS_TABLE,
            names.ENV_IDENTITY_CERTIFICATES: SIGNER.certificate_pem,
        }.items():
            monkeypatch.setenv(k, v)
        aws.reset()
        allocate._allocator = None
        reconcile._reconciler = None
        primary = ec2.describe_network_interfaces(Filters=[{"Name": "attachment.instance-id", "Values": [iid]}])[
            "NetworkInterfaces"
        ][0]
        yield {
            "ec2": ec2,
            "sqs": sqs,
            "iid": iid,
            "result_url": result_url,
            "dlq": dlq,
            "primary": primary,
            "az": inst["Placement"]["AvailabilityZone"],
            "subnet": subnet["SubnetId"],
        }
        aws.reset()
        allocate._allocator = None
        reconcile._reconciler = None


def _report(env: dict[str, Any], seq: int, **targets: int) -> str:
    p = env["primary"]
    return json.dumps(
        {
            "schema": "warmpool.report/v1",
            "cluster": CLUSTER,
            "node": "node-1",
            "instance_id": env["iid"],
            "instance_type": "m5.large",
            "availability_zone": env["az"],
            "seq": seq,
            "sent_at": 1.0,
            "targets": {"warm_eni": 1, **targets},
            "enis": [
                {
                    "eni_id": p["NetworkInterfaceId"],
                    "device_index": 0,
                    "subnet_id": p["SubnetId"],
                    "primary_ip": p["PrivateIpAddress"],
                }
            ],
            "identity": SIGNER.identity(
                document_for(
                    {
                        "instanceId": env["iid"],
                        "accountId": ACCOUNT,
                        "region": "us-east-1",
                        "availabilityZone": env["az"],
                        "instanceType": "m5.large",
                    }
                )
            ).model_dump(),
        }
    )


def _event(*bodies: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"m{i}",
                "receiptHandle": "rh",
                "body": b,
                "attributes": {"SenderId": "AROAX:whoever"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
                "awsRegion": "us-east-1",
            }
            for i, b in enumerate(bodies)
        ]
    }
