"""One standard queue: its messages, their visibility, receipts and redrive.

A message is *ready* (visible now, in ``Queue.ready``) or *waiting* (delayed or
in flight, in the ``Queue.waiting`` heap by the time it becomes visible);
entries of either are cleaned lazily, so every step is cheap and time may jump.
Receipt handles, redrive and the 12-hour visibility limit follow AWS (see the
package doc); nothing here reads a clock: ``now`` is always given.
"""

from __future__ import annotations

import base64
import heapq
import json
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import SqsError, invalid, missing
from .validation import MAX_VISIBILITY_S, md5_of_attributes, md5_of_body


@dataclass
class Message:
    message_id: str
    body: str
    md5_body: str
    attrs: dict[str, dict[str, Any]]
    md5_attrs: str | None
    sent_at: float
    sender_id: str
    visible_at: float
    receive_count: int = 0
    first_receive_at: float | None = None
    receipt: str | None = None  # the latest receipt handle
    old_receipts: set[str] = field(default_factory=set)
    dlq_source_arn: str | None = None
    queued: bool = False  # in its queue's ``ready`` deque

    @classmethod
    def new(cls, body: str, attrs: dict[str, dict[str, Any]], sender_id: str, now: float) -> Message:
        return cls(
            message_id=str(uuid.uuid4()),
            body=body,
            md5_body=md5_of_body(body),
            attrs=attrs,
            md5_attrs=md5_of_attributes(attrs) if attrs else None,
            sent_at=now,
            sender_id=sender_id,
            visible_at=now,
        )

    def render(self, receipt: str, want_sys: set[str], want_attrs: list[str]) -> dict[str, Any]:
        """The ``Messages[]`` entry of a ReceiveMessage answer."""
        r: dict[str, Any] = {
            "MessageId": self.message_id,
            "ReceiptHandle": receipt,
            "MD5OfBody": self.md5_body,
            "Body": self.body,
        }
        if want_sys:
            allsys = "All" in want_sys
            a: dict[str, str] = {}
            if allsys or "SenderId" in want_sys:
                a["SenderId"] = self.sender_id
            if allsys or "SentTimestamp" in want_sys:
                a["SentTimestamp"] = str(int(self.sent_at * 1000))
            if allsys or "ApproximateReceiveCount" in want_sys:
                a["ApproximateReceiveCount"] = str(self.receive_count)
            if allsys or "ApproximateFirstReceiveTimestamp" in want_sys:
                a["ApproximateFirstReceiveTimestamp"] = str(int((self.first_receive_at or self.sent_at) * 1000))
            if self.dlq_source_arn and (allsys or "DeadLetterQueueSourceArn" in want_sys):
                a["DeadLetterQueueSourceArn"] = self.dlq_source_arn
            if a:
                r["Attributes"] = a
        if want_attrs and self.attrs:
            if "All" in want_attrs or ".*" in want_attrs:
                sel = self.attrs
            else:
                sel = {}
                for k, v in self.attrs.items():
                    for w in want_attrs:
                        if k == w or (w.endswith(".*") and k.startswith(w[:-1])):
                            sel[k] = v
                            break
            if sel:
                r["MessageAttributes"] = {k: dict(v) for k, v in sel.items()}
                r["MD5OfMessageAttributes"] = md5_of_attributes(sel)
        return r


@dataclass
class Queue:
    name: str
    url: str
    arn: str
    attributes: dict[str, str]
    created_at: float
    modified_at: float
    tickets: Iterator[int]
    """The account's counter: orders entries of ``waiting`` that fall due together."""
    messages: dict[str, Message] = field(default_factory=dict)
    ready: deque[str] = field(default_factory=deque)  # ids visible now (lazily cleaned)
    waiting: list[tuple[float, int, str]] = field(default_factory=list)  # (visible_at, ticket, id)
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

    @property
    def wait_s(self) -> int:
        return int(self.attributes["ReceiveMessageWaitTimeSeconds"])

    def redrive(self) -> tuple[str, int] | None:
        """(dead-letter queue ARN, maxReceiveCount), or None without a RedrivePolicy."""
        raw = self.attributes.get("RedrivePolicy")
        if not raw:
            return None
        pol = json.loads(raw)
        return str(pol["deadLetterTargetArn"]), int(pol["maxReceiveCount"])

    # -- visibility -----------------------------------------------------------

    def promote(self, now: float) -> None:
        """Move messages whose delay or visibility timeout has passed to ``ready``."""
        w = self.waiting
        while w and w[0][0] <= now:
            at, _ticket, mid = heapq.heappop(w)
            m = self.messages.get(mid)
            if m is not None and m.visible_at == at and not m.queued:
                m.queued = True
                self.ready.append(mid)

    def schedule(self, m: Message, at: float) -> None:
        m.visible_at = at
        heapq.heappush(self.waiting, (at, next(self.tickets), m.message_id))

    def enqueue(self, m: Message, delay: float, now: float) -> None:
        self.messages[m.message_id] = m
        if delay > 0:
            self.schedule(m, now + delay)
        else:
            m.visible_at = now
            m.queued = True
            self.ready.append(m.message_id)

    def expire(self, m: Message, now: float) -> bool:
        """Drop ``m`` if its retention period has passed."""
        if now - m.sent_at >= self.retention_s:
            self.drop(m)
            return True
        return False

    def drop(self, m: Message) -> None:
        del self.messages[m.message_id]
        for r in m.old_receipts | ({m.receipt} if m.receipt else set()):
            self.receipt_owner.pop(r, None)
            self.deleted_receipts.add(r)

    def purge(self) -> None:
        for m in list(self.messages.values()):
            self.drop(m)
        self.ready.clear()
        self.waiting.clear()

    def counts(self, now: float) -> tuple[int, int, int]:
        """(visible, in flight, delayed) now, expired messages dropped first."""
        visible = delayed = inflight = 0
        for m in list(self.messages.values()):
            if self.expire(m, now):
                continue
            if m.visible_at <= now:
                visible += 1
            elif m.receive_count == 0:
                delayed += 1
            else:
                inflight += 1
        return visible, inflight, delayed

    def next_visible_at(self, now: float) -> float | None:
        """When the next message becomes visible: ``now`` if one is, None if none will."""
        self.promote(now)
        if any(mid in self.messages for mid in self.ready):
            return now
        while self.waiting:
            at, _ticket, mid = self.waiting[0]
            m = self.messages.get(mid)
            if m is not None and m.visible_at == at:
                return at
            heapq.heappop(self.waiting)
        return None

    # -- receive ------------------------------------------------------------------

    def take(
        self,
        n: int,
        vt: int,
        now: float,
        want_sys: set[str],
        want_attrs: list[str],
        by_arn: Mapping[str, Queue],
    ) -> list[dict[str, Any]]:
        """Receive up to ``n`` messages, hidden for ``vt`` seconds. A message that
        has reached maxReceiveCount moves to the dead-letter queue (found in
        ``by_arn``) instead of being returned."""
        self.promote(now)
        out: list[dict[str, Any]] = []
        redrive = self.redrive()
        dlq = by_arn.get(redrive[0]) if redrive else None
        again: list[str] = []  # received with visibility 0: visible again after this call
        while self.ready and len(out) < n:
            mid = self.ready.popleft()
            m = self.messages.get(mid)
            if m is None:
                continue  # deleted since it was queued
            m.queued = False
            if m.visible_at > now:
                continue  # made invisible again since it was queued
            if self.expire(m, now):
                continue
            if redrive is not None and dlq is not None and m.receive_count >= redrive[1]:
                self.drop(m)
                m.old_receipts.clear()
                m.receipt = None
                m.dlq_source_arn = self.arn
                # Keeps SentTimestamp: retention in the DLQ counts from the original send (AWS).
                dlq.enqueue(m, 0, now)
                continue
            m.receive_count += 1
            if m.first_receive_at is None:
                m.first_receive_at = now
            if m.receipt is not None:
                m.old_receipts.add(m.receipt)
            receipt = base64.b64encode(f"{self.arn}|{m.message_id}|{uuid.uuid4().hex}".encode()).decode()
            m.receipt = receipt
            self.receipt_owner[receipt] = m.message_id
            if vt > 0:
                self.schedule(m, now + vt)
            else:
                m.visible_at = now
                again.append(mid)
            out.append(m.render(receipt, want_sys, want_attrs))
        for mid in again:
            self.messages[mid].queued = True
            self.ready.append(mid)
        return out

    # -- receipts -----------------------------------------------------------------

    def resolve(self, receipt: Any) -> Message | None:
        """The message a receipt handle names: None when already deleted."""
        if not isinstance(receipt, str) or not receipt:
            raise missing("ReceiptHandle")
        mid = self.receipt_owner.get(receipt)
        if mid is None:
            if receipt in self.deleted_receipts:
                return None
            raise SqsError(
                "ReceiptHandleIsInvalid",
                f'The input receipt handle "{receipt}" is not a valid receipt handle.',
            )
        m = self.messages.get(mid)
        if m is None:
            return None
        if m.receipt != receipt:
            raise invalid(
                f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
            )
        return m

    def delete(self, receipt: Any) -> None:
        m = self.resolve(receipt)
        if m is not None:
            self.drop(m)

    def change_visibility(self, receipt: Any, vt: Any, now: float) -> None:
        v = int(vt)
        m = self.resolve(receipt)
        if m is None:
            raise invalid(
                f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: Message does not exist "
                "or is not available for visibility timeout change."
            )
        first = m.first_receive_at if m.first_receive_at is not None else now
        if not 0 <= v <= MAX_VISIBILITY_S or now + v - first > MAX_VISIBILITY_S:
            raise invalid(
                f"Value {v} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout "
                "for the message is beyond the limit [43200 seconds]"
            )
        if v > 0:
            self.schedule(m, now + v)
        else:
            m.visible_at = now
            if not m.queued:
                m.queued = True
                self.ready.appendleft(m.message_id)
