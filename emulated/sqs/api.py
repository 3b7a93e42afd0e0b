"""The SQS API: an account's queues (:class:`FastSqs`) and the boto3-shaped
client that serves every call on them (:class:`FastSqsClient`).

Each operation takes boto3's keyword arguments and answers boto3's dict; it
runs under the account's lock, is counted, and turns an
:class:`~emulated.sqs.errors.SqsError` into the ``ClientError`` subclass boto3
raises, named for the operation.
"""

from __future__ import annotations

import base64
import bisect
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warmpool.clock import Clock, RealClock

from . import validation
from .errors import ClientExceptions, SqsError, invalid, missing
from .model import Message, Queue

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_SENDER_ID = "AIDAIT2UOQQY3AUEKVGXU"

Operation = Callable[..., dict[str, Any]]


class FastSqs:
    """The shared state: every queue of one account and region.

    Thread-safe (one lock). ``client()`` returns a boto3-shaped client; clients
    may carry their own ``SenderId`` so a bench can give each node its own identity.
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
        self._queues: dict[str, Queue] = {}  # by url
        self._by_arn: dict[str, Queue] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._tickets = itertools.count()
        self._calls: dict[str, int] = {}
        self.exceptions = ClientExceptions()

    def client(self, sender_id: str = DEFAULT_SENDER_ID) -> FastSqsClient:
        return FastSqsClient(self, sender_id)

    def stats(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {a: {"calls": n} for a, n in sorted(self._calls.items())}

    def queue_arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{name}"

    def url_of(self, name: str) -> str:
        return f"{self.endpoint}/{self.account_id}/{name}"

    def _queue(self, url: Any) -> Queue:
        """The queue at ``url`` (call with the lock held)."""
        if not isinstance(url, str) or not url:
            raise missing("QueueUrl")
        q = self._queues.get(url.rstrip("/"))
        if q is None:
            # AWS also accepts the queue's URL with another host; match by account/name.
            parts = url.rstrip("/").split("/")
            if len(parts) >= 2 and parts[-2] == self.account_id:
                q = self._queues.get(self.url_of(parts[-1]))
        if q is None:
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
        return q

    # -- inspection (not SQS API; for tests and the bench) ------------------

    def depth(self, queue_url: str) -> int:
        """Messages stored in the queue, visible or not."""
        with self._lock:
            try:
                return len(self._queue(queue_url).messages)
            except SqsError as e:
                raise self.exceptions.of(e, "Depth") from None

    def visible(self, queue_url: str) -> int:
        """Messages a receive could get now (not in flight, not delayed)."""
        with self._lock:
            try:
                return self._queue(queue_url).counts(self.clock.now())[0]
            except SqsError as e:
                raise self.exceptions.of(e, "Visible") from None

    def next_visible_at(self, queue_url: str) -> float | None:
        """When the next delayed or in-flight message becomes visible (None if none);
        lets a virtual-time driver skip idle time."""
        with self._lock:
            try:
                q = self._queue(queue_url)
            except SqsError as e:
                raise self.exceptions.of(e, "NextVisibleAt") from None
            return q.next_visible_at(self.clock.now())


def _operation(name: str) -> Callable[[Operation], Operation]:
    """Serve an SQS operation: under the account's lock, counted, errors as boto3 raises them."""

    def deco(fn: Operation) -> Operation:
        @functools.wraps(fn)
        def serve(self: FastSqsClient, **kwargs: Any) -> dict[str, Any]:
            acct = self.backend
            with acct._lock:
                acct._calls[name] = acct._calls.get(name, 0) + 1
                try:
                    return fn(self, **kwargs)
                except SqsError as e:
                    raise acct.exceptions.of(e, name) from None

        return serve

    return deco


def _per_entry(entries: list[dict[str, Any]], one: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """A batch call's answer: each entry done on its own; one that fails is
    reported in ``Failed`` with its code, the others still go (as SQS does)."""
    ok: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for e in entries:
        try:
            ok.append(one(e))
        except SqsError as err:
            failed.append({"Id": e["Id"], "SenderFault": True, "Code": err.name, "Message": err.message})
    return {"Successful": ok, "Failed": failed}


@dataclass(frozen=True)
class _Meta:
    region_name: str
    endpoint_url: str


class FastSqsClient:
    """A boto3-shaped SQS client on a :class:`FastSqs` (satisfies ``warmpool.ports.SqsApi``).

    Messages it sends carry its ``sender_id`` as ``SenderId``."""

    def __init__(self, backend: FastSqs, sender_id: str = DEFAULT_SENDER_ID) -> None:
        self.backend = backend
        self.sender_id = sender_id
        self.exceptions = backend.exceptions
        self.meta = _Meta(backend.region, backend.endpoint)

    # -- queues -------------------------------------------------------------

    @_operation("CreateQueue")
    def create_queue(self, *, QueueName: str, Attributes: Mapping[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        acct = self.backend
        validation.check_queue_name(QueueName)
        attrs = {k: validation.queue_attribute(k, v, acct._by_arn) for k, v in (Attributes or {}).items()}
        url = acct.url_of(QueueName)
        existing = acct._queues.get(url)
        if existing is not None:
            for k, v in attrs.items():
                if existing.attributes.get(k, validation.DEFAULT_ATTRS.get(k)) != v:
                    raise SqsError(
                        "QueueNameExists",
                        f"A queue already exists with the same name and a different value for attribute {k}",
                    )
            return {"QueueUrl": url}
        now = acct.clock.now()
        q = Queue(
            name=QueueName,
            url=url,
            arn=acct.queue_arn(QueueName),
            attributes={**validation.DEFAULT_ATTRS, **attrs},
            created_at=now,
            modified_at=now,
            tickets=acct._tickets,
        )
        acct._queues[url] = q
        acct._by_arn[q.arn] = q
        return {"QueueUrl": url}

    @_operation("GetQueueUrl")
    def get_queue_url(self, *, QueueName: str, **_: Any) -> dict[str, Any]:
        url = self.backend.url_of(QueueName)
        if url not in self.backend._queues:
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
        return {"QueueUrl": url}

    @_operation("DeleteQueue")
    def delete_queue(self, *, QueueUrl: str, **_: Any) -> dict[str, Any]:
        acct = self.backend
        q = acct._queue(QueueUrl)
        del acct._queues[q.url]
        del acct._by_arn[q.arn]
        acct._cond.notify_all()
        return {}

    @_operation("ListQueues")
    def list_queues(
        self, *, QueueNamePrefix: str = "", MaxResults: int | None = None, NextToken: str = "", **_: Any
    ) -> dict[str, Any]:
        """Pages of up to ``MaxResults`` (1 to 1,000) with a ``NextToken`` while more remain, as
        SQS pages them (without ``MaxResults``: at most 1,000, no token)."""
        urls = sorted(u for u, q in self.backend._queues.items() if q.name.startswith(QueueNamePrefix))
        if NextToken:
            try:
                after = base64.urlsafe_b64decode(NextToken.encode()).decode()
            except (ValueError, UnicodeDecodeError):
                raise invalid(f"Invalid NextToken value {NextToken}") from None
            urls = urls[bisect.bisect_right(urls, after) :]
        if MaxResults is None:
            urls = urls[:1000]
            return {"QueueUrls": urls} if urls else {}
        n = int(MaxResults)
        if not 1 <= n <= 1000:
            raise invalid(f"Value {n} for parameter MaxResults is invalid. Must be between 1 and 1000.")
        out: dict[str, Any] = {"QueueUrls": urls[:n]} if urls else {}
        if len(urls) > n:
            out["NextToken"] = base64.urlsafe_b64encode(urls[n - 1].encode()).decode()
        return out

    @_operation("SetQueueAttributes")
    def set_queue_attributes(self, *, QueueUrl: str, Attributes: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        acct = self.backend
        q = acct._queue(QueueUrl)
        for k, v in Attributes.items():
            q.attributes[k] = validation.queue_attribute(k, v, acct._by_arn)
        q.modified_at = acct.clock.now()
        return {}

    @_operation("GetQueueAttributes")
    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: Iterable[str] = (), **_: Any) -> dict[str, Any]:
        acct = self.backend
        q = acct._queue(QueueUrl)
        names = validation.attribute_names(AttributeNames)
        if not names:
            return {}
        visible, inflight, delayed = q.counts(acct.clock.now())
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

    @_operation("PurgeQueue")
    def purge_queue(self, *, QueueUrl: str, **_: Any) -> dict[str, Any]:
        q = self.backend._queue(QueueUrl)
        now = self.backend.clock.now()
        if q.last_purge is not None and now - q.last_purge < 60:
            raise SqsError(
                "PurgeQueueInProgress",
                f"Only one PurgeQueue operation on {q.name} is allowed every 60 seconds.",
            )
        q.last_purge = now
        q.purge()
        return {}

    # -- messages -----------------------------------------------------------

    def _send(
        self, q: Queue, body: Any, attrs: Mapping[str, Any] | None, delay: Any, now: float
    ) -> tuple[Message, int]:
        """Check and enqueue one message from this client; it and its delay."""
        text, a, d = validation.message(body, attrs, delay, q.delay_seconds, q.max_size)
        m = Message.new(text, a, self.sender_id, now)
        q.enqueue(m, d, now)
        return m, d

    @_operation("SendMessage")
    def send_message(
        self,
        *,
        QueueUrl: str,
        MessageBody: str,
        DelaySeconds: int | None = None,
        MessageAttributes: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        acct = self.backend
        q = acct._queue(QueueUrl)
        m, delay = self._send(q, MessageBody, MessageAttributes, DelaySeconds, acct.clock.now())
        if delay <= 0:
            acct._cond.notify_all()
        out: dict[str, Any] = {"MessageId": m.message_id, "MD5OfMessageBody": m.md5_body}
        if m.md5_attrs:
            out["MD5OfMessageAttributes"] = m.md5_attrs
        return out

    @_operation("SendMessageBatch")
    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        acct = self.backend
        q = acct._queue(QueueUrl)
        entries = validation.batch_entries(Entries, "SendMessage")
        validation.batch_size(entries, q.max_size)
        now = acct.clock.now()

        def one(e: dict[str, Any]) -> dict[str, Any]:
            m, _delay = self._send(q, e.get("MessageBody"), e.get("MessageAttributes"), e.get("DelaySeconds"), now)
            r = {"Id": e["Id"], "MessageId": m.message_id, "MD5OfMessageBody": m.md5_body}
            if m.md5_attrs:
                r["MD5OfMessageAttributes"] = m.md5_attrs
            return r

        out = _per_entry(entries, one)
        acct._cond.notify_all()
        return out

    @_operation("ReceiveMessage")
    def receive_message(
        self,
        *,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        VisibilityTimeout: int | None = None,
        WaitTimeSeconds: int | None = None,
        AttributeNames: Iterable[str] = (),
        MessageSystemAttributeNames: Iterable[str] = (),
        MessageAttributeNames: Iterable[str] = (),
        **_: Any,
    ) -> dict[str, Any]:
        acct = self.backend
        n = int(MaxNumberOfMessages)
        q = acct._queue(QueueUrl)
        validation.max_messages(n)
        vt = validation.visibility_timeout(
            q.visibility_timeout if VisibilityTimeout is None else int(VisibilityTimeout)
        )
        wait = validation.wait_time(q.wait_s if WaitTimeSeconds is None else int(WaitTimeSeconds))
        want_sys = set(AttributeNames) | set(MessageSystemAttributeNames)
        want_attrs = list(MessageAttributeNames)
        out = q.take(n, vt, acct.clock.now(), want_sys, want_attrs, acct._by_arn)
        if not out and wait > 0 and acct.blocking_long_poll:
            deadline = time.monotonic() + wait
            while not out:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                now = acct.clock.now()
                nxt = q.waiting[0][0] - now if q.waiting else left
                acct._cond.wait(timeout=max(min(left, nxt), 0.001))
                if acct._queues.get(q.url) is not q:
                    break  # deleted while we waited
                out = q.take(n, vt, acct.clock.now(), want_sys, want_attrs, acct._by_arn)
        return {"Messages": out} if out else {}

    @_operation("DeleteMessage")
    def delete_message(self, *, QueueUrl: str, ReceiptHandle: str, **_: Any) -> dict[str, Any]:
        self.backend._queue(QueueUrl).delete(ReceiptHandle)
        return {}

    @_operation("DeleteMessageBatch")
    def delete_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        q = self.backend._queue(QueueUrl)
        entries = validation.batch_entries(Entries, "DeleteMessage")

        def one(e: dict[str, Any]) -> dict[str, Any]:
            q.delete(e.get("ReceiptHandle"))
            return {"Id": e["Id"]}

        return _per_entry(entries, one)

    def _change_visibility(self, q: Queue, receipt: Any, vt: Any) -> None:
        q.change_visibility(receipt, vt, self.backend.clock.now())
        if int(vt) <= 0:
            self.backend._cond.notify_all()

    @_operation("ChangeMessageVisibility")
    def change_message_visibility(
        self, *, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any
    ) -> dict[str, Any]:
        self._change_visibility(self.backend._queue(QueueUrl), ReceiptHandle, VisibilityTimeout)
        return {}

    @_operation("ChangeMessageVisibilityBatch")
    def change_message_visibility_batch(
        self, *, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any
    ) -> dict[str, Any]:
        q = self.backend._queue(QueueUrl)
        entries = validation.batch_entries(Entries, "ChangeMessageVisibility")

        def one(e: dict[str, Any]) -> dict[str, Any]:
            self._change_visibility(q, e.get("ReceiptHandle"), e.get("VisibilityTimeout", 0))
            return {"Id": e["Id"]}

        return _per_entry(entries, one)
