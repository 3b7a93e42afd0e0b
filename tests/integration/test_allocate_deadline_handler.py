"""Issue 11, defect 4: the allocate handler passes the Lambda's remaining time
to the allocator, which starts no work inside the margin before it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulated.clock import VirtualClock
from functions import allocate
from tests.helpers.lambda_env import CLUSTER, Ctx, _event, _report
from warmpool import names


@dataclass
class ShortCtx(Ctx):
    remaining_ms: int = 2_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_deadline_of_reads_the_remaining_time() -> None:
    clock = VirtualClock(1000.0)
    assert allocate.deadline_of(ShortCtx(remaining_ms=12_500), clock) == 1012.5
    assert allocate.deadline_of(Ctx(), clock) is None


def test_an_invocation_out_of_time_defers_its_batch_unread(env: dict[str, Any]) -> None:
    resp = allocate.handler(_event(_report(env, 1, warm_ip=3)), ShortCtx(remaining_ms=2_000))
    assert resp == {"batchItemFailures": []}
    enis = env["ec2"].describe_network_interfaces(Filters=[{"Name": "attachment.instance-id", "Values": [env["iid"]]}])[
        "NetworkInterfaces"
    ]
    assert [a for e in enis for a in e["PrivateIpAddresses"] if not a["Primary"]] == []
    reports = env["sqs"].get_queue_url(QueueName=names.reports_queue(CLUSTER))["QueueUrl"]
    attrs = env["sqs"].get_queue_attributes(QueueUrl=reports, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert attrs["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"  # re-sent with a delay
    assert env["sqs"].receive_message(QueueUrl=env["result_url"]).get("Messages", []) == []
    assert env["sqs"].receive_message(QueueUrl=env["dlq"]).get("Messages", []) == []
