"""A fast, in-memory SQS (standard queues) shaped like the boto3 ``sqs`` client.

Why: moto's SQS costs ~30 ms per message here, and the bench pushes hundreds of
thousands of reports through the queue in virtual time. This one is a few
microseconds per call, takes its time from an injected :class:`~warmpool.clock.Clock`,
and keeps AWS's semantics; ``tests/integration/test_sqs_semantics.py`` runs the
same suite against it and against moto to show they agree.

Semantics (AWS, checked against the API reference, noted where moto differs):

* Message size: at most 1 MiB (1,048,576 bytes, body plus message attributes);
  the same limit bounds the sum of a batch (``BatchRequestTooLong``).
* Batches take 1..10 entries with distinct ids matching ``[A-Za-z0-9_-]{1,80}``.
* A receipt handle belongs to one receive. ``DeleteMessage`` with the latest
  handle deletes; with a handle of an earlier receive of a message that has been
  received again it answers ``InvalidParameterValue`` ("The receipt handle has
  expired"), which AWS documents as a possible outcome for standard queues
  (moto deletes). Deleting an already-deleted message succeeds (AWS and moto).
  A handle that was never issued is ``ReceiptHandleIsInvalid``.
* ``ChangeMessageVisibility`` on a deleted message or with an expired handle is
  ``InvalidParameterValue`` (moto: ``ReceiptHandleIsInvalid``); the total
  visibility of a message may not pass 12 hours after its first receive.
* Redrive: a message whose ``ApproximateReceiveCount`` has reached the
  source queue's ``maxReceiveCount`` moves to the dead-letter queue on the next
  receive that would have returned it; it keeps its id, body, attributes,
  ``SentTimestamp`` and receive count, and gains ``DeadLetterQueueSourceArn``.
* Long polling (``WaitTimeSeconds``): with a virtual clock the call returns at
  once (time only moves when the driver moves it); with a real clock it blocks
  on a condition variable until a message is available or the wait ends.
* Error codes are those boto3 shows for real SQS (JSON protocol, query
  compatible): ``Error.Code`` is the legacy code (e.g.
  ``AWS.SimpleQueueService.NonExistentQueue``), ``Error.QueryErrorCode`` the
  modeled name, and the raised class is ``client.exceptions.<modeled name>``.

Not modelled: FIFO queues, KMS, tags, permissions, message system attributes
on send (AWSTraceHeader), queue deletion's 60-second name reservation.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import itertools
import json
import re
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from warmpool.clock import Clock, RealClock

MAX_MESSAGE_BYTES = 1_048_576
MAX_BATCH_ENTRIES = 10
MAX_DELAY_S = 900
MAX_VISIBILITY_S = 43_200
MAX_WAIT_S = 20
DEFAULT_ACCOUNT = "123456789012"
DEFAULT_SENDER_ID = "AIDAIT2UOQQY3AUEKVGXU"

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_BATCH_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,80}$")

# modeled exception name -> legacy (query) error code boto3 puts in Error.Code
_LEGACY_CODES: dict[str, str] = {
    "QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue",
    "QueueNameExists": "QueueAlreadyExists",
    "TooManyEntriesInBatchRequest": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "EmptyBatchRequest": "AWS.SimpleQueueService.EmptyBatchRequest",
    "BatchEntryIdsNotDistinct": "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "InvalidBatchEntryId": "AWS.SimpleQueueService.InvalidBatchEntryId",
    "BatchRequestTooLong": "AWS.SimpleQueueService.BatchRequestTooLong",
    "MessageNotInflight": "AWS.SimpleQueueService.MessageNotInflight",
    "PurgeQueueInProgress": "AWS.SimpleQueueService.PurgeQueueInProgress",
    "ReceiptHandleIsInvalid": "ReceiptHandleIsInvalid",
    "InvalidAttributeName": "InvalidAttributeName",
    "InvalidAttributeValue": "InvalidAttributeValue",
    "InvalidParameterValue": "InvalidParameterValue",
    "MissingParameter": "MissingParameter",
    "UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
}


class _Exceptions:
    """``client.exceptions`` for the fast client: one ClientError subclass per
    modeled error, so ``except sqs.exceptions.QueueDoesNotExist`` works."""

    def __init__(self) -> None:
        self._classes: dict[str, type[ClientError]] = {
            name: type(name, (ClientError,), {}) for name in _LEGACY_CODES
        }
        self.ClientError = ClientError

    def __getattr__(self, name: str) -> type[ClientError]:
        try:
            return self._classes[name]
        except KeyError:
            raise AttributeError(name) from None

    def make(self, name: str, message: str, operation: str) -> ClientError:
        cls = self._classes.get(name, ClientError)
        return cls(
            {
                "Error": {
                    "Code": _LEGACY_CODES.get(name, name),
                    "QueryErrorCode": name,
                    "Message": message,
                    "Type": "Sender",
                },
                "ResponseMetadata": {"HTTPStatusCode": 400, "RetryAttempts": 0},
            },
            operation,
        )


def md5_of_attributes(attrs: Mapping[str, Mapping[str, Any]]) -> str:
    """MD5OfMessageAttributes as SQS computes it (names sorted; each name, data
    type and value length-prefixed, with a transport byte 1=string 2=binary)."""
    h = hashlib.md5()
    for name in sorted(attrs):
        a = attrs[name]
        dtype = str(a["DataType"])
        h.update(struct.pack("!I", len(name.encode())) + name.encode())
        h.update(struct.pack("!I", len(dtype.encode())) + dtype.encode())
        if "BinaryValue" in a and a["BinaryValue"] is not None:
            val = a["BinaryValue"]
            raw = val if isinstance(val, bytes) else str(val).encode()
            h.update(b"\x02" + struct.pack("!I", len(raw)) + raw)
        else:
            raw = str(a.get("StringValue", "")).encode()
            h.update(b"\x01" + struct.pack("!I", len(raw)) + raw)
    return h.hexdigest()


def _attrs_size(attrs: Mapping[str, Mapping[str, Any]]) -> int:
    n = 0
    for name, a in attrs.items():
        n += len(name.encode()) + len(str(a.get("DataType", "")).encode())
        v = a.get("BinaryValue")
        if v is not None:
            n += len(v) if isinstance(v, bytes) else len(str(v).encode())
        else:
            n += len(str(a.get("StringValue", "")).encode())
    return n


@dataclass
class _Message:
    message_id: str
    body: str
    md5_body: str
    attrs: dict[str, dict[str, Any]]
    md5_attrs: str | None
    sent_at: float
    sender_id: str
    visible_at: float
    seq: int
    receive_count: int = 0
    first_receive_at: float | None = None
    receipt: str | None = None  # the latest receipt handle
    old_receipts: set[str] = field(default_factory=set)
    dlq_source_arn: str | None = None
    queued: bool = False  # in its queue's ``ready`` deque


@dataclass
class _Queue:
    name: str
    url: str
    arn: str
    attributes: dict[str, str]
    created_at: float
    modified_at: float
    messages: dict[str, _Message] = field(default_factory=dict)
    ready: deque[str] = field(default_factory=deque)  # ids visible now (lazily cleaned)
    waiting: list[tuple[float, int, str]] = field(default_factory=list)  # (visible_at, seq, id)
    deleted_receipts: set[str] = field(default_factory=set)
    receipt_owner: dict[str, str] = field(default_factory=dict)  # receipt -> message id
    last_purge: float | None = None

    @property
    def visibility_timeout(self) -> int:
        return int(self.attributes["VisibilityTimeout"])

    @property
    def delay_seconds(self) -> int:
        return int(self.attributes["DelaySeconds"])

    @property
    def retention_s(self) -> int:
        return int(self.attributes["MessageRetentionPeriod"])

    @property
    def max_size(self) -> int:
        return int(self.attributes["MaximumMessageSize"])

    def redrive(self) -> tuple[str, int] | None:
        raw = self.attributes.get("RedrivePolicy")
        if not raw:
            return None
        pol = json.loads(raw)
        return str(pol["deadLetterTargetArn"]), int(pol["maxReceiveCount"])


_DEFAULT_ATTRS: dict[str, str] = {
    "VisibilityTimeout": "30",
    "DelaySeconds": "0",
    "MessageRetentionPeriod": "345600",
    "MaximumMessageSize": str(MAX_MESSAGE_BYTES),
    "ReceiveMessageWaitTimeSeconds": "0",
    "SqsManagedSseEnabled": "true",
}
_SETTABLE = {*_DEFAULT_ATTRS, "RedrivePolicy", "RedriveAllowPolicy", "Policy"}
_COMPUTED = {
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
}
_RANGES: dict[str, tuple[int, int]] = {
    "VisibilityTimeout": (0, MAX_VISIBILITY_S),
    "DelaySeconds": (0, MAX_DELAY_S),
    "MessageRetentionPeriod": (60, 1_209_600),
    "MaximumMessageSize": (1024, MAX_MESSAGE_BYTES),
    "ReceiveMessageWaitTimeSeconds": (0, MAX_WAIT_S),
}
_SYSTEM_ATTRS = (
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SentTimestamp",
    "SenderId",
)


class FastSqs:
    """The shared state: every queue of one account and region.

    Thread-safe (one lock). ``client()`` returns a boto3-shaped view; views may
    carry their own ``SenderId`` so a bench can give each node its own identity.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        region: str = "us-east-1",
        account_id: str = DEFAULT_ACCOUNT,
        endpoint: str | None = None,
        blocking_long_poll: bool | None = None,
    ) -> None:
        self.clock: Clock = clock or RealClock()
        self.region = region
        self.account_id = account_id
        self.endpoint = (endpoint or f"https://sqs.{region}.amazonaws.com").rstrip("/")
        self.blocking_long_poll = (
            isinstance(self.clock, RealClock) if blocking_long_poll is None else blocking_long_poll
        )
        self._queues: dict[str, _Queue] = {}  # by url
        self._by_arn: dict[str, _Queue] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._seq = itertools.count()
        self._calls: dict[str, int] = {}
        self.exceptions = _Exceptions()

    def client(self, sender_id: str = DEFAULT_SENDER_ID) -> FastSqsClient:
        return FastSqsClient(self, sender_id)

    def stats(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {a: {"calls": n} for a, n in sorted(self._calls.items())}

    def queue_arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{name}"

    # -- helpers (call with the lock held) ---------------------------------

    def _err(self, name: str, message: str, op: str) -> ClientError:
        return self.exceptions.make(name, message, op)

    def _queue(self, url: Any, op: str) -> _Queue:
        if not isinstance(url, str) or not url:
            raise self._err("MissingParameter", "The request must contain the parameter QueueUrl.", op)
        q = self._queues.get(url.rstrip("/"))
        if q is None:
            # AWS also accepts the queue's URL with another host; match by account/name.
            parts = url.rstrip("/").split("/")
            if len(parts) >= 2 and parts[-2] == self.account_id:
                q = self._queues.get(f"{self.endpoint}/{self.account_id}/{parts[-1]}")
        if q is None:
            raise self._err("QueueDoesNotExist", "The specified queue does not exist.", op)
        return q

    def _promote(self, q: _Queue, now: float) -> None:
        """Move messages whose delay or visibility timeout has passed to ``ready``."""
        w = q.waiting
        while w and w[0][0] <= now:
            at, _seq, mid = heapq.heappop(w)
            m = q.messages.get(mid)
            if m is not None and m.visible_at == at and not m.queued:
                m.queued = True
                q.ready.append(mid)

    def _expire(self, q: _Queue, m: _Message, now: float) -> bool:
        if now - m.sent_at >= q.retention_s:
            self._drop(q, m)
            return True
        return False

    def _drop(self, q: _Queue, m: _Message) -> None:
        del q.messages[m.message_id]
        for r in (m.old_receipts | ({m.receipt} if m.receipt else set())):
            q.receipt_owner.pop(r, None)
            q.deleted_receipts.add(r)

    def _schedule(self, q: _Queue, m: _Message, at: float) -> None:
        m.visible_at = at
        heapq.heappush(q.waiting, (at, next(self._seq), m.message_id))

    def _validate_attrs(self, name: str, value: Any, op: str) -> str:
        if name not in _SETTABLE:
            raise self._err("InvalidAttributeName", f"Unknown Attribute {name}.", op)
        sval = str(value)
        if name in _RANGES:
            lo, hi = _RANGES[name]
            try:
                iv = int(sval)
            except ValueError:
                iv = lo - 1
            if not lo <= iv <= hi:
                raise self._err("InvalidAttributeValue", f"Invalid value for the parameter {name}.", op)
        if name == "RedrivePolicy" and sval:
            try:
                pol = json.loads(sval)
                arn = str(pol["deadLetterTargetArn"])
                mrc = int(pol["maxReceiveCount"])
            except (ValueError, KeyError, TypeError):
                raise self._err("InvalidParameterValue", "Invalid value for the parameter RedrivePolicy.", op) from None
            if not 1 <= mrc <= 1000 or arn not in self._by_arn:
                raise self._err(
                    "InvalidParameterValue",
                    "Value "
                    + sval
                    + " for parameter RedrivePolicy is invalid. Reason: Dead-letter target does not exist"
                    " or maxReceiveCount is not between 1 and 1000.",
                    op,
                )
        return sval

    def _check_entries(self, entries: Any, op: str, kind: str) -> list[dict[str, Any]]:
        if not entries:
            raise self._err(
                "EmptyBatchRequest", f"There should be at least one {kind}BatchRequestEntry in the request.", op
            )
        entries = [dict(e) for e in entries]
        if len(entries) > MAX_BATCH_ENTRIES:
            raise self._err(
                "TooManyEntriesInBatchRequest",
                f"Maximum number of entries per request are 10. You have sent {len(entries)}.",
                op,
            )
        seen: set[str] = set()
        for e in entries:
            eid = str(e.get("Id", ""))
            if not _BATCH_ID_RE.match(eid):
                raise self._err(
                    "InvalidBatchEntryId",
                    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
                    "It can be at most 80 letters long.",
                    op,
                )
            if eid in seen:
                raise self._err("BatchEntryIdsNotDistinct", f"Id {eid} repeated.", op)
            seen.add(eid)
        result: list[dict[str, Any]] = entries
        return result

    def _count(self, op: str) -> None:
        self._calls[op] = self._calls.get(op, 0) + 1

    # -- operations ----------------------------------------------------------

    def create_queue(self, QueueName: str, Attributes: Mapping[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        op = "CreateQueue"
        with self._lock:
            self._count(op)
            if QueueName.endswith(".fifo"):
                raise self._err("UnsupportedOperation", "FIFO queues are not modelled by FastSqs.", op)
            if not _NAME_RE.match(QueueName):
                raise self._err(
                    "InvalidParameterValue",
                    "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
                    op,
                )
            attrs = {k: self._validate_attrs(k, v, op) for k, v in (Attributes or {}).items()}
            url = f"{self.endpoint}/{self.account_id}/{QueueName}"
            existing = self._queues.get(url)
            if existing is not None:
                for k, v in attrs.items():
                    if existing.attributes.get(k, _DEFAULT_ATTRS.get(k)) != v:
                        raise self._err(
                            "QueueNameExists",
                            f"A queue already exists with the same name and a different value for attribute {k}",
                            op,
                        )
                return {"QueueUrl": url}
            now = self.clock.now()
            q = _Queue(
                name=QueueName,
                url=url,
                arn=self.queue_arn(QueueName),
                attributes={**_DEFAULT_ATTRS, **attrs},
                created_at=now,
                modified_at=now,
            )
            self._queues[url] = q
            self._by_arn[q.arn] = q
            return {"QueueUrl": url}

    def get_queue_url(self, QueueName: str, **_: Any) -> dict[str, Any]:
        with self._lock:
            self._count("GetQueueUrl")
            url = f"{self.endpoint}/{self.account_id}/{QueueName}"
            if url not in self._queues:
                raise self._err("QueueDoesNotExist", "The specified queue does not exist.", "GetQueueUrl")
            return {"QueueUrl": url}

    def delete_queue(self, QueueUrl: str, **_: Any) -> dict[str, Any]:
        with self._lock:
            self._count("DeleteQueue")
            q = self._queue(QueueUrl, "DeleteQueue")
            del self._queues[q.url]
            del self._by_arn[q.arn]
            self._cond.notify_all()
            return {}

    def list_queues(self, QueueNamePrefix: str = "", MaxResults: int | None = None, **_: Any) -> dict[str, Any]:
        with self._lock:
            self._count("ListQueues")
            urls = sorted(u for u, q in self._queues.items() if q.name.startswith(QueueNamePrefix))
            if MaxResults is not None:
                urls = urls[: int(MaxResults)]
            return {"QueueUrls": urls} if urls else {}

    def set_queue_attributes(self, QueueUrl: str, Attributes: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        op = "SetQueueAttributes"
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            for k, v in Attributes.items():
                q.attributes[k] = self._validate_attrs(k, v, op)
            q.modified_at = self.clock.now()
            return {}

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: Iterable[str] = (), **_: Any) -> dict[str, Any]:
        op = "GetQueueAttributes"
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            names = list(AttributeNames)
            for n in names:
                if n != "All" and n not in _SETTABLE and n not in _COMPUTED:
                    raise self._err("InvalidAttributeName", f"Unknown Attribute {n}.", op)
            if not names:
                return {}
            now = self.clock.now()
            visible = delayed = inflight = 0
            for m in list(q.messages.values()):
                if self._expire(q, m, now):
                    continue
                if m.visible_at <= now:
                    visible += 1
                elif m.receive_count == 0:
                    delayed += 1
                else:
                    inflight += 1
            full = {
                **q.attributes,
                "ApproximateNumberOfMessages": str(visible),
                "ApproximateNumberOfMessagesNotVisible": str(inflight),
                "ApproximateNumberOfMessagesDelayed": str(delayed),
                "CreatedTimestamp": str(int(q.created_at)),
                "LastModifiedTimestamp": str(int(q.modified_at)),
                "QueueArn": q.arn,
            }
            if "Policy" not in names:
                full.pop("Policy", None)
            if "All" in names:
                return {"Attributes": full}
            return {"Attributes": {n: full[n] for n in names if n in full}}

    def purge_queue(self, QueueUrl: str, **_: Any) -> dict[str, Any]:
        op = "PurgeQueue"
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            now = self.clock.now()
            if q.last_purge is not None and now - q.last_purge < 60:
                raise self._err(
                    "PurgeQueueInProgress", f"Only one PurgeQueue operation on {q.name} is allowed every 60 seconds.", op
                )
            q.last_purge = now
            for m in list(q.messages.values()):
                self._drop(q, m)
            q.ready.clear()
            q.waiting.clear()
            return {}

    def _new_message(
        self,
        q: _Queue,
        body: Any,
        attrs: Mapping[str, Any] | None,
        delay: Any,
        sender_id: str,
        op: str,
        now: float,
    ) -> _Message:
        if not isinstance(body, str) or body == "":
            raise self._err("MissingParameter", "The request must contain the parameter MessageBody.", op)
        d = q.delay_seconds if delay is None else int(delay)
        if not 0 <= d <= MAX_DELAY_S:
            raise self._err(
                "InvalidParameterValue",
                f"Value {d} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.",
                op,
            )
        a = {k: dict(v) for k, v in (attrs or {}).items()}
        for k, v in a.items():
            if "DataType" not in v:
                raise self._err(
                    "InvalidParameterValue", f"The message attribute '{k}' must contain non-empty message attribute type.", op
                )
        size = len(body.encode()) + _attrs_size(a)
        if size > q.max_size:
            raise self._err(
                "InvalidParameterValue",
                f"One or more parameters are invalid. Reason: Message must be shorter than {q.max_size} bytes.",
                op,
            )
        m = _Message(
            message_id=str(uuid.uuid4()),
            body=body,
            md5_body=hashlib.md5(body.encode()).hexdigest(),
            attrs=a,
            md5_attrs=md5_of_attributes(a) if a else None,
            sent_at=now,
            sender_id=sender_id,
            visible_at=now,
            seq=next(self._seq),
        )
        return m

    def _enqueue(self, q: _Queue, m: _Message, delay: float, now: float) -> None:
        q.messages[m.message_id] = m
        if delay > 0:
            self._schedule(q, m, now + delay)
        else:
            m.visible_at = now
            m.queued = True
            q.ready.append(m.message_id)

    def send_message(
        self,
        QueueUrl: str,
        MessageBody: str,
        DelaySeconds: int | None = None,
        MessageAttributes: Mapping[str, Any] | None = None,
        _sender_id: str = DEFAULT_SENDER_ID,
        **_: Any,
    ) -> dict[str, Any]:
        op = "SendMessage"
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            now = self.clock.now()
            m = self._new_message(q, MessageBody, MessageAttributes, DelaySeconds, _sender_id, op, now)
            delay = q.delay_seconds if DelaySeconds is None else int(DelaySeconds)
            self._enqueue(q, m, delay, now)
            if delay <= 0:
                self._cond.notify_all()
            out: dict[str, Any] = {"MessageId": m.message_id, "MD5OfMessageBody": m.md5_body}
            if m.md5_attrs:
                out["MD5OfMessageAttributes"] = m.md5_attrs
            return out

    def send_message_batch(
        self, QueueUrl: str, Entries: list[dict[str, Any]], _sender_id: str = DEFAULT_SENDER_ID, **_: Any
    ) -> dict[str, Any]:
        op = "SendMessageBatch"
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            entries = self._check_entries(Entries, op, "SendMessage")
            total = sum(
                len(str(e.get("MessageBody", "")).encode()) + _attrs_size(e.get("MessageAttributes") or {})
                for e in entries
            )
            if total > q.max_size:
                raise self._err(
                    "BatchRequestTooLong",
                    f"Batch requests cannot be longer than {q.max_size} bytes. You have sent {total} bytes.",
                    op,
                )
            now = self.clock.now()

            def one(e: dict[str, Any]) -> dict[str, Any]:
                m = self._new_message(
                    q, e.get("MessageBody"), e.get("MessageAttributes"), e.get("DelaySeconds"), _sender_id, op, now
                )
                delay = q.delay_seconds if e.get("DelaySeconds") is None else int(e["DelaySeconds"])
                self._enqueue(q, m, delay, now)
                r = {"Id": e["Id"], "MessageId": m.message_id, "MD5OfMessageBody": m.md5_body}
                if m.md5_attrs:
                    r["MD5OfMessageAttributes"] = m.md5_attrs
                return r

            out = _per_entry(entries, one)
            self._cond.notify_all()
            return out

    def _take(
        self, q: _Queue, n: int, vt: int, now: float, want_sys: set[str], want_attrs: list[str]
    ) -> list[dict[str, Any]]:
        self._promote(q, now)
        out: list[dict[str, Any]] = []
        redrive = q.redrive()
        dlq = self._by_arn.get(redrive[0]) if redrive else None
        again: list[str] = []  # received with visibility 0: visible again after this call
        while q.ready and len(out) < n:
            mid = q.ready.popleft()
            m = q.messages.get(mid)
            if m is None:
                continue  # deleted since it was queued
            m.queued = False
            if m.visible_at > now:
                continue  # made invisible again since it was queued
            if self._expire(q, m, now):
                continue
            if redrive is not None and dlq is not None and m.receive_count >= redrive[1]:
                self._drop(q, m)
                m.old_receipts.clear()
                m.receipt = None
                m.dlq_source_arn = q.arn
                # Keeps SentTimestamp: retention in the DLQ counts from the original send (AWS).
                self._enqueue(dlq, m, 0, now)
                continue
            m.receive_count += 1
            if m.first_receive_at is None:
                m.first_receive_at = now
            if m.receipt is not None:
                m.old_receipts.add(m.receipt)
            receipt = base64.b64encode(
                f"{q.arn}|{m.message_id}|{uuid.uuid4().hex}".encode()
            ).decode()
            m.receipt = receipt
            q.receipt_owner[receipt] = m.message_id
            if vt > 0:
                self._schedule(q, m, now + vt)
            else:
                m.visible_at = now
                again.append(mid)
            out.append(self._render(m, receipt, want_sys, want_attrs))
        for mid in again:
            q.messages[mid].queued = True
            q.ready.append(mid)
        return out

    @staticmethod
    def _render(m: _Message, receipt: str, want_sys: set[str], want_attrs: list[str]) -> dict[str, Any]:
        r: dict[str, Any] = {
            "MessageId": m.message_id,
            "ReceiptHandle": receipt,
            "MD5OfBody": m.md5_body,
            "Body": m.body,
        }
        if want_sys:
            allsys = "All" in want_sys
            a: dict[str, str] = {}
            if allsys or "SenderId" in want_sys:
                a["SenderId"] = m.sender_id
            if allsys or "SentTimestamp" in want_sys:
                a["SentTimestamp"] = str(int(m.sent_at * 1000))
            if allsys or "ApproximateReceiveCount" in want_sys:
                a["ApproximateReceiveCount"] = str(m.receive_count)
            if allsys or "ApproximateFirstReceiveTimestamp" in want_sys:
                a["ApproximateFirstReceiveTimestamp"] = str(int((m.first_receive_at or m.sent_at) * 1000))
            if m.dlq_source_arn and (allsys or "DeadLetterQueueSourceArn" in want_sys):
                a["DeadLetterQueueSourceArn"] = m.dlq_source_arn
            if a:
                r["Attributes"] = a
        if want_attrs and m.attrs:
            if "All" in want_attrs or ".*" in want_attrs:
                sel = m.attrs
            else:
                sel = {}
                for k, v in m.attrs.items():
                    for w in want_attrs:
                        if k == w or (w.endswith(".*") and k.startswith(w[:-1])):
                            sel[k] = v
                            break
            if sel:
                r["MessageAttributes"] = {k: dict(v) for k, v in sel.items()}
                r["MD5OfMessageAttributes"] = md5_of_attributes(sel)
        return r

    def receive_message(
        self,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        VisibilityTimeout: int | None = None,
        WaitTimeSeconds: int | None = None,
        AttributeNames: Iterable[str] = (),
        MessageSystemAttributeNames: Iterable[str] = (),
        MessageAttributeNames: Iterable[str] = (),
        **_: Any,
    ) -> dict[str, Any]:
        op = "ReceiveMessage"
        n = int(MaxNumberOfMessages)
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            if not 1 <= n <= 10:
                raise self._err(
                    "InvalidParameterValue",
                    f"Value {n} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.",
                    op,
                )
            vt = q.visibility_timeout if VisibilityTimeout is None else int(VisibilityTimeout)
            if not 0 <= vt <= MAX_VISIBILITY_S:
                raise self._err(
                    "InvalidParameterValue",
                    f"Value {vt} for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200.",
                    op,
                )
            wait = int(q.attributes["ReceiveMessageWaitTimeSeconds"]) if WaitTimeSeconds is None else int(WaitTimeSeconds)
            if not 0 <= wait <= MAX_WAIT_S:
                raise self._err(
                    "InvalidParameterValue",
                    f"Value {wait} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.",
                    op,
                )
            want_sys = set(AttributeNames) | set(MessageSystemAttributeNames)
            want_attrs = list(MessageAttributeNames)
            out = self._take(q, n, vt, self.clock.now(), want_sys, want_attrs)
            if not out and wait > 0 and self.blocking_long_poll:
                deadline = time.monotonic() + wait
                while not out:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    now = self.clock.now()
                    nxt = q.waiting[0][0] - now if q.waiting else left
                    self._cond.wait(timeout=max(min(left, nxt), 0.001))
                    if self._queues.get(q.url) is not q:
                        break  # deleted while we waited
                    out = self._take(q, n, vt, self.clock.now(), want_sys, want_attrs)
            return {"Messages": out} if out else {}

    def _resolve(self, q: _Queue, receipt: Any, op: str) -> _Message | None:
        """The message a receipt handle names: None when already deleted."""
        if not isinstance(receipt, str) or not receipt:
            raise self._err("MissingParameter", "The request must contain the parameter ReceiptHandle.", op)
        mid = q.receipt_owner.get(receipt)
        if mid is None:
            if receipt in q.deleted_receipts:
                return None
            raise self._err("ReceiptHandleIsInvalid", f'The input receipt handle "{receipt}" is not a valid receipt handle.', op)
        m = q.messages.get(mid)
        if m is None:
            return None
        if m.receipt != receipt:
            raise self._err(
                "InvalidParameterValue",
                f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
                op,
            )
        return m

    def _delete(self, q: _Queue, receipt: Any, op: str) -> None:
        m = self._resolve(q, receipt, op)
        if m is not None:
            self._drop(q, m)

    def delete_message(self, QueueUrl: str, ReceiptHandle: str, **_: Any) -> dict[str, Any]:
        op = "DeleteMessage"
        with self._lock:
            self._count(op)
            self._delete(self._queue(QueueUrl, op), ReceiptHandle, op)
            return {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        op = "DeleteMessageBatch"
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            entries = self._check_entries(Entries, op, "DeleteMessage")

            def one(e: dict[str, Any]) -> dict[str, Any]:
                self._delete(q, e.get("ReceiptHandle"), op)
                return {"Id": e["Id"]}

            return _per_entry(entries, one)

    def _change_visibility(self, q: _Queue, receipt: Any, vt: Any, op: str) -> None:
        v = int(vt)
        m = self._resolve(q, receipt, op)
        if m is None:
            raise self._err(
                "InvalidParameterValue",
                f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: Message does not exist "
                "or is not available for visibility timeout change.",
                op,
            )
        now = self.clock.now()
        first = m.first_receive_at if m.first_receive_at is not None else now
        if not 0 <= v <= MAX_VISIBILITY_S or now + v - first > MAX_VISIBILITY_S:
            raise self._err(
                "InvalidParameterValue",
                f"Value {v} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout "
                "for the message is beyond the limit [43200 seconds]",
                op,
            )
        if v > 0:
            self._schedule(q, m, now + v)
        else:
            m.visible_at = now
            if not m.queued:
                m.queued = True
                q.ready.appendleft(m.message_id)
            self._cond.notify_all()

    def change_message_visibility(
        self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any
    ) -> dict[str, Any]:
        op = "ChangeMessageVisibility"
        with self._lock:
            self._count(op)
            self._change_visibility(self._queue(QueueUrl, op), ReceiptHandle, VisibilityTimeout, op)
            return {}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        op = "ChangeMessageVisibilityBatch"
        with self._lock:
            self._count(op)
            q = self._queue(QueueUrl, op)
            entries = self._check_entries(Entries, op, "ChangeMessageVisibility")

            def one(e: dict[str, Any]) -> dict[str, Any]:
                self._change_visibility(q, e.get("ReceiptHandle"), e.get("VisibilityTimeout", 0), op)
                return {"Id": e["Id"]}

            return _per_entry(entries, one)

    # -- inspection (not SQS API; for tests and the bench) ------------------

    def depth(self, queue_url: str) -> int:
        """Messages stored in the queue, visible or not."""
        with self._lock:
            return len(self._queue(queue_url, "Depth").messages)

    def next_visible_at(self, queue_url: str) -> float | None:
        """When the next delayed or in-flight message becomes visible (None if none);
        lets a virtual-time driver skip idle time."""
        with self._lock:
            q = self._queue(queue_url, "NextVisibleAt")
            now = self.clock.now()
            self._promote(q, now)
            if any(mid in q.messages for mid in q.ready):
                return now
            while q.waiting:
                at, _s, mid = q.waiting[0]
                m = q.messages.get(mid)
                if m is not None and m.visible_at == at:
                    return at
                heapq.heappop(q.waiting)
            return None


class FastSqsClient:
    """A boto3-shaped view of a :class:`FastSqs` (satisfies ``warmpool.ports.SqsApi``).

    Messages it sends carry its ``sender_id`` as ``SenderId``."""

    def __init__(self, backend: FastSqs, sender_id: str = DEFAULT_SENDER_ID) -> None:
        self.backend = backend
        self.sender_id = sender_id
        self.exceptions = backend.exceptions
        self.meta = _Meta(backend.region, backend.endpoint)

    def create_queue(self, **kw: Any) -> dict[str, Any]:
        return self.backend.create_queue(**kw)

    def get_queue_url(self, **kw: Any) -> dict[str, Any]:
        return self.backend.get_queue_url(**kw)

    def delete_queue(self, **kw: Any) -> dict[str, Any]:
        return self.backend.delete_queue(**kw)

    def list_queues(self, **kw: Any) -> dict[str, Any]:
        return self.backend.list_queues(**kw)

    def purge_queue(self, **kw: Any) -> dict[str, Any]:
        return self.backend.purge_queue(**kw)

    def set_queue_attributes(self, **kw: Any) -> dict[str, Any]:
        return self.backend.set_queue_attributes(**kw)

    def get_queue_attributes(self, **kw: Any) -> dict[str, Any]:
        return self.backend.get_queue_attributes(**kw)

    def send_message(self, **kw: Any) -> dict[str, Any]:
        return self.backend.send_message(_sender_id=self.sender_id, **kw)

    def send_message_batch(self, **kw: Any) -> dict[str, Any]:
        return self.backend.send_message_batch(_sender_id=self.sender_id, **kw)

    def receive_message(self, **kw: Any) -> dict[str, Any]:
        return self.backend.receive_message(**kw)

    def delete_message(self, **kw: Any) -> dict[str, Any]:
        return self.backend.delete_message(**kw)

    def delete_message_batch(self, **kw: Any) -> dict[str, Any]:
        return self.backend.delete_message_batch(**kw)

    def change_message_visibility(self, **kw: Any) -> dict[str, Any]:
        return self.backend.change_message_visibility(**kw)

    def change_message_visibility_batch(self, **kw: Any) -> dict[str, Any]:
        return self.backend.change_message_visibility_batch(**kw)


@dataclass(frozen=True)
class _Meta:
    region_name: str
    endpoint_url: str


def _per_entry(entries: list[dict[str, Any]], one: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """A batch call's answer: each entry done on its own; one that fails is
    reported in ``Failed`` with its code, the others still go (as SQS does)."""
    ok: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for e in entries:
        try:
            ok.append(one(e))
        except ClientError as err:
            failed.append(
                {
                    "Id": e["Id"],
                    "SenderFault": True,
                    "Code": err.response["Error"]["QueryErrorCode"],
                    "Message": err.response["Error"]["Message"],
                }
            )
    return {"Successful": ok, "Failed": failed}
