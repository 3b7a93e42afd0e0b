"""The shapes Lambda hands a Python handler: the context object, SQS events,
EventBridge scheduled events. Used by :mod:`emulated.esm` and by tests that call a
handler directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from warmpool.clock import Clock

DEFAULT_ACCOUNT = "123456789012"


class LambdaCrash(BaseException):
    """The invocation's process dies (a crash or a timeout injected by a stand-in): a
    ``BaseException``, so nothing in the handler may catch it."""


def function_arn(name: str, region: str, account_id: str = DEFAULT_ACCOUNT) -> str:
    return f"arn:aws:lambda:{region}:{account_id}:function:{name}"


@dataclass
class LambdaContext:
    """What ``context`` is inside a Python Lambda handler (the fields handlers use).

    The deadline is on the injected clock, so in virtual time a handler sees its
    full timeout (its work takes no virtual time) and in real time it counts down.
    """

    function_name: str
    clock: Clock
    deadline: float
    memory_limit_in_mb: int = 512
    region: str = "us-east-1"
    account_id: str = DEFAULT_ACCOUNT
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"

    @property
    def invoked_function_arn(self) -> str:
        return function_arn(self.function_name, self.region, self.account_id)

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        day = datetime.fromtimestamp(self.clock.now(), UTC)
        return f"{day:%Y/%m/%d}/[$LATEST]{self.aws_request_id[:32].replace('-', '')}"

    def get_remaining_time_in_millis(self) -> int:
        return max(int((self.deadline - self.clock.now()) * 1000), 0)


def make_context(
    function_name: str,
    clock: Clock,
    timeout_s: float,
    *,
    memory_mb: int = 512,
    region: str = "us-east-1",
    account_id: str = DEFAULT_ACCOUNT,
) -> LambdaContext:
    return LambdaContext(
        function_name=function_name,
        clock=clock,
        deadline=clock.now() + timeout_s,
        memory_limit_in_mb=memory_mb,
        region=region,
        account_id=account_id,
    )


def _lambda_message_attributes(attrs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """SQS's ``MessageAttributes`` as Lambda spells them (camelCase keys)."""
    out: dict[str, dict[str, Any]] = {}
    for name, a in attrs.items():
        out[name] = {
            "stringValue": a.get("StringValue"),
            "binaryValue": a.get("BinaryValue"),
            "stringListValues": list(a.get("StringListValues", [])),
            "binaryListValues": list(a.get("BinaryListValues", [])),
            "dataType": a.get("DataType"),
        }
    return out


def sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One record of an SQS event, from a ``ReceiveMessage`` message (asked for
    with ``MessageSystemAttributeNames=["All"]`` and ``MessageAttributeNames=["All"]``)."""
    attrs = message.get("Attributes", {})
    rec: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            k: attrs[k]
            for k in (
                "ApproximateReceiveCount",
                "SentTimestamp",
                "SenderId",
                "ApproximateFirstReceiveTimestamp",
                "AWSTraceHeader",
                "DeadLetterQueueSourceArn",
            )
            if k in attrs
        },
        "messageAttributes": _lambda_message_attributes(message.get("MessageAttributes", {})),
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        rec["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return rec


def sqs_event(messages: Iterable[Mapping[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    return {"Records": [sqs_record(m, queue_arn, region) for m in messages]}


def scheduled_event(rule_arn: str, now: float, region: str, account_id: str = DEFAULT_ACCOUNT) -> dict[str, Any]:
    """An EventBridge ``Scheduled Event`` as a rate rule delivers it."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account_id,
        "time": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }
