"""The life of a result queue, in one place: each verified instance of the
cluster has one, ``{prefix}{instance_id}`` (the name is
:func:`warmpool.names.result_queue_name`, which the agent and the stack's IAM
patterns use too).

* **Created** by the allocator at the first report of a verified instance EC2
  shows in the cluster (agents may not create queues, so their number is
  bounded by the cluster's instances), with the TLS-only policy the stack's
  own queues have.
* **Pushed to** by the allocator: one ``warmpool.result/v1`` per answered report.
* **Deleted** by the reconciler once the instance is gone (or was never the
  cluster's).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from functions.errors import AwsError, QueueMissing, classify
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.messages import MAX_ACTIONS, Action, AllocationResult, Deferred
from warmpool.ports import SqsApi

log = logging.getLogger(__name__)

PARTITIONS = (
    ("cn-", "aws-cn"),
    ("us-gov-", "aws-us-gov"),
    ("us-isob-", "aws-iso-b"),
    ("us-isof-", "aws-iso-f"),
    ("eu-isoe-", "aws-iso-e"),
    ("us-iso-", "aws-iso"),
)
"""Region prefix → partition, longest prefix first; every other region is in ``aws``."""


def partition_of(region: str) -> str:
    return next((p for prefix, p in PARTITIONS if region.startswith(prefix)), "aws")


def secure_transport_policy(settings: Settings, queue_name: str) -> str | None:
    """The queue policy the stack's own queues have (``enforce_ssl``): deny every SQS action
    over plain HTTP. For the result queues the allocator creates; their ARN is built from the
    reports queue's account and the region. None when the account is unknown (no reports URL)."""
    parts = settings.reports_queue_url.rstrip("/").split("/")
    account = parts[-2] if len(parts) >= 2 else ""
    if not (len(account) == 12 and account.isdigit()):
        return None
    region = settings.region
    partition = partition_of(region)
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Action": "sqs:*",
                    "Resource": f"arn:{partition}:sqs:{region}:{account}:{queue_name}",
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


def _is_url(prefix: str) -> bool:
    return prefix.startswith(("http://", "https://"))


class ResultQueues:
    """The cluster's result queues over an SQS client: name, create, push, list, delete."""

    def __init__(self, sqs: SqsApi, settings: Settings, tally: Tally) -> None:
        self.sqs = sqs
        self.settings = settings
        self.tally = tally
        self._urls: dict[str, str] = {}
        self._lock = threading.Lock()

    # --- names -------------------------------------------------------------------

    @property
    def _prefix(self) -> str:
        """The configured prefix (a name or URL prefix), else the cluster's default."""
        return self.settings.result_queue_prefix or names.result_queue_prefix(self.settings.cluster)

    def name(self, instance_id: str) -> str:
        return names.result_queue_name(self._prefix, instance_id)

    def _url_of(self, instance_id: str) -> str:
        """The queue's URL: from the URL prefix when configured as one, else asked of SQS."""
        if _is_url(self._prefix):
            return f"{self._prefix}{instance_id}"
        return str(self.sqs.get_queue_url(QueueName=self.name(instance_id))["QueueUrl"])

    # --- create ------------------------------------------------------------------

    def create(self, instance_id: str) -> None:
        """First report of a verified instance EC2 shows in the cluster: create
        its result queue with the TLS-only policy (CreateQueue is idempotent).
        A failure is logged: the push then counts the missing queue and the
        agent keeps looking."""
        name = self.name(instance_id)
        policy = secure_transport_policy(self.settings, name)
        if policy is None:
            log.warning(
                "result queue created without its TLS-only policy: no account in the reports queue URL",
                extra={"instance_id": instance_id},
            )
        try:
            self.sqs.create_queue(QueueName=name, Attributes={"Policy": policy} if policy else {})
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("QueueAlreadyExists", "QueueNameExists"):
                return  # made earlier with other attributes (before the policy): it is there
            log.warning("result queue not created", extra={"instance_id": instance_id, "error": str(err)[:200]})
            return
        self.tally.add(names.M_RESULT_QUEUES_CREATED)

    # --- push --------------------------------------------------------------------

    def _result_url(self, instance_id: str) -> str:
        with self._lock:
            url = self._urls.get(instance_id)
        if url:
            return url
        try:
            url = self._url_of(instance_id)
        except ClientError as exc:
            raise classify(exc, "GetQueueUrl") from None
        with self._lock:
            self._urls[instance_id] = url
        return url

    def push(self, result: AllocationResult) -> bool:
        """Send a result to the instance's queue. False (logged, counted) if the
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

    # --- list, delete ------------------------------------------------------------

    def listed(self) -> dict[str, str]:
        """Every queue under the cluster's result prefix (``ListQueues`` by
        prefix), by instance id. Raises :class:`AwsError` when SQS cannot list."""
        prefix = self.name("")
        urls: list[str] = []
        token = ""
        while True:
            req: dict[str, Any] = {"QueueNamePrefix": prefix, "MaxResults": 1000}
            if token:
                req["NextToken"] = token
            try:
                resp = self.sqs.list_queues(**req)
            except ClientError as exc:
                raise classify(exc, "ListQueues") from None
            urls.extend(resp.get("QueueUrls", []) or [])
            token = resp.get("NextToken") or ""
            if not token:
                break
        return {u.rsplit("/", 1)[-1][len(prefix) :]: u for u in urls if u.rsplit("/", 1)[-1].startswith(prefix)}

    def delete(self, instance_id: str, url: str = "") -> bool:
        """Delete the instance's result queue (at ``url`` when known); False if
        there was none. Raises :class:`AwsError` on any other failure."""
        try:
            self.sqs.delete_queue(QueueUrl=url or self._url_of(instance_id))
        except ClientError as exc:
            err: AwsError = classify(exc)
            if isinstance(err, QueueMissing):
                return False
            raise err from None
        with self._lock:
            self._urls.pop(instance_id, None)
        return True
