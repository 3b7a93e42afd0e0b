"""What the allocator sends to the cluster's queues: reports deferred back to
the reports queue with a delay, invalid reports to the DLQ. (Results go to each
instance's own queue: :mod:`functions.result_queues`.)"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from botocore.exceptions import ClientError

from functions.errors import classify
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.ports import SqsApi

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deferral:
    """A report to re-send to the reports queue after ``delay_s``."""

    body: str
    delay_s: int
    instance_id: str


class Delivery:
    def __init__(self, sqs: SqsApi, settings: Settings, tally: Tally) -> None:
        self.sqs = sqs
        self.settings = settings
        self.tally = tally

    def defer(self, items: Sequence[Deferral]) -> list[str]:
        """Re-send reports with a delay, ten per call. Returns the instances whose re-send failed."""
        failed: list[str] = []
        for i in range(0, len(items), 10):
            chunk = items[i : i + 10]
            entries = [
                {
                    "Id": str(j),
                    "MessageBody": d.body,
                    "DelaySeconds": max(0, min(900, math.ceil(d.delay_s))),
                }
                for j, d in enumerate(chunk)
            ]
            try:
                resp = self.sqs.send_message_batch(QueueUrl=self.settings.reports_queue_url, Entries=entries)
            except ClientError as exc:
                log.error("deferral failed", extra={"error": str(classify(exc, "SendMessageBatch"))})
                failed.extend(d.instance_id for d in chunk)
                continue
            failed.extend(chunk[int(f["Id"])].instance_id for f in resp.get("Failed", []))
        return failed

    def dead_letter(self, body: str, reason: str, detail: str = "") -> bool:
        """Send a report that must not be acted on straight to the DLQ."""
        attrs = {"reason": {"DataType": "String", "StringValue": reason[:256] or "invalid"}}
        if detail:
            attrs["detail"] = {"DataType": "String", "StringValue": detail[:1000]}
        try:
            self.sqs.send_message(
                QueueUrl=self.settings.dlq_url, MessageBody=body or "(empty)", MessageAttributes=attrs
            )
        except ClientError as exc:
            log.error("dead-letter failed", extra={"reason": reason, "error": str(classify(exc, "SendMessage"))})
            return False
        self.tally.add(names.M_DLQ_SENT, reason=reason)
        return True
