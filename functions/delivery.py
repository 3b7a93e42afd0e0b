"""What the allocator sends over SQS: results to each node's queue, reports
deferred back to the reports queue with a delay, invalid reports to the DLQ."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from botocore.exceptions import ClientError

from functions.errors import QueueMissing, classify
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.messages import MAX_ACTIONS, Action, AllocationResult, Deferred
from warmpool.ports import SqsApi

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deferral:
    body: str
    delay_s: int
    node: str


class Delivery:
    def __init__(self, sqs: SqsApi, settings: Settings, tally: Tally) -> None:
        self.sqs = sqs
        self.settings = settings
        self.tally = tally
        self._urls: dict[str, str] = {}
        self._lock = threading.Lock()

    def _result_url(self, instance_id: str) -> str:
        with self._lock:
            url = self._urls.get(instance_id)
        if url:
            return url
        prefix = self.settings.result_queue_url_prefix()
        if prefix:
            url = f"{prefix}{instance_id}"
        else:
            try:
                url = self.sqs.get_queue_url(QueueName=self.settings.result_queue_name(instance_id))["QueueUrl"]
            except ClientError as exc:
                raise classify(exc, "GetQueueUrl") from None
        with self._lock:
            self._urls[instance_id] = url
        return url

    def push(self, result: AllocationResult) -> bool:
        """Send a result to the node's queue. False (logged, counted) if the
        queue is missing: the agent still sees EC2's truth through IMDS."""
        try:
            url = self._result_url(result.instance_id)
            self.sqs.send_message(QueueUrl=url, MessageBody=result.to_json())
        except ClientError as exc:
            err = classify(exc, "SendMessage")
            if not isinstance(err, QueueMissing):
                raise err from None
            self._missing(result)
            return False
        except QueueMissing:
            self._missing(result)
            return False
        self.tally.add(names.M_RESULTS_SENT)
        return True

    def _missing(self, result: AllocationResult) -> None:
        with self._lock:
            self._urls.pop(result.instance_id, None)
        self.tally.add(names.M_RESULT_QUEUE_MISSING)
        log.warning(
            "result queue missing",
            extra={"node": result.node, "instance_id": result.instance_id, "seq": result.in_reply_to},
        )

    def fit(self, actions: Sequence[Action], node: str, seq: int) -> list[Action]:
        """The actions a result can carry (``MAX_ACTIONS``). Never silently
        short: what does not fit is counted and logged (the agent still sees
        EC2's truth through IMDS), and a closing ``deferred`` is always kept, as it
        tells the agent to report again."""
        if len(actions) <= MAX_ACTIONS:
            return list(actions)
        tail = [actions[-1]] if isinstance(actions[-1], Deferred) else []
        kept = list(actions[: MAX_ACTIONS - len(tail)]) + tail
        dropped = len(actions) - len(kept)
        self.tally.add(names.M_RESULT_ACTIONS_DROPPED, dropped)
        log.warning(
            "result has more actions than a message carries; some left out",
            extra={"node": node, "seq": seq, "actions": len(actions), "dropped": dropped},
        )
        return kept

    def defer(self, items: Sequence[Deferral]) -> list[str]:
        """Re-send reports with a delay, ten per call. Returns the nodes whose re-send failed."""
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
                failed.extend(d.node for d in chunk)
                continue
            failed.extend(chunk[int(f["Id"])].node for f in resp.get("Failed", []))
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
