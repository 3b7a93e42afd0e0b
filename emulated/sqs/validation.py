"""What SQS accepts, and the digests it answers with.

Limits (API reference): a message is at most 1 MiB, body plus message
attributes, and a batch's sum is bound by the same limit; batches take 1..10
entries with distinct ids matching ``[A-Za-z0-9_-]{1,80}``; queue names match
the same pattern (standard queues only: FIFO is not modelled). Each check
raises :class:`~emulated.sqs.errors.SqsError` with AWS's code and message.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .errors import SqsError, invalid, missing

MAX_MESSAGE_BYTES = 1_048_576
MAX_BATCH_ENTRIES = 10
MAX_DELAY_S = 900
MAX_VISIBILITY_S = 43_200
MAX_WAIT_S = 20

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
BATCH_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,80}$")

DEFAULT_ATTRS: dict[str, str] = {
    "VisibilityTimeout": "30",
    "DelaySeconds": "0",
    "MessageRetentionPeriod": "345600",
    "MaximumMessageSize": str(MAX_MESSAGE_BYTES),
    "ReceiveMessageWaitTimeSeconds": "0",
    "SqsManagedSseEnabled": "true",
}
"""A new queue's attributes, before the ones it is created with."""
SETTABLE = {*DEFAULT_ATTRS, "RedrivePolicy", "RedriveAllowPolicy", "Policy"}
COMPUTED = {
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
}
RANGES: dict[str, tuple[int, int]] = {
    "VisibilityTimeout": (0, MAX_VISIBILITY_S),
    "DelaySeconds": (0, MAX_DELAY_S),
    "MessageRetentionPeriod": (60, 1_209_600),
    "MaximumMessageSize": (1024, MAX_MESSAGE_BYTES),
    "ReceiveMessageWaitTimeSeconds": (0, MAX_WAIT_S),
}


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


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode()).hexdigest()


def attrs_size(attrs: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes the message attributes count towards the size limit."""
    n = 0
    for name, a in attrs.items():
        n += len(name.encode()) + len(str(a.get("DataType", "")).encode())
        v = a.get("BinaryValue")
        if v is not None:
            n += len(v) if isinstance(v, bytes) else len(str(v).encode())
        else:
            n += len(str(a.get("StringValue", "")).encode())
    return n


def check_queue_name(name: str) -> None:
    if name.endswith(".fifo"):
        raise SqsError("UnsupportedOperation", "FIFO queues are not modelled by FastSqs.")
    if not NAME_RE.match(name):
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")


def queue_attribute(name: str, value: Any, queue_arns: Collection[str]) -> str:
    """A settable queue attribute's value as stored; a RedrivePolicy must name
    one of ``queue_arns`` as its dead-letter target."""
    if name not in SETTABLE:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    sval = str(value)
    if name in RANGES:
        lo, hi = RANGES[name]
        try:
            iv = int(sval)
        except ValueError:
            iv = lo - 1
        if not lo <= iv <= hi:
            raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    if name == "RedrivePolicy" and sval:
        try:
            pol = json.loads(sval)
            arn = str(pol["deadLetterTargetArn"])
            mrc = int(pol["maxReceiveCount"])
        except (ValueError, KeyError, TypeError):
            raise invalid("Invalid value for the parameter RedrivePolicy.") from None
        if not 1 <= mrc <= 1000 or arn not in queue_arns:
            raise invalid(
                "Value " + sval + " for parameter RedrivePolicy is invalid. Reason: Dead-letter target does not exist"
                " or maxReceiveCount is not between 1 and 1000."
            )
    return sval


def attribute_names(names: Iterable[str]) -> list[str]:
    """The names GetQueueAttributes asks for (``All`` or known ones)."""
    out = list(names)
    for n in out:
        if n != "All" and n not in SETTABLE and n not in COMPUTED:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {n}.")
    return out


def batch_entries(entries: Any, kind: str) -> list[dict[str, Any]]:
    """A batch's entries: 1..10 of them, each with a distinct, well-formed ``Id``."""
    if not entries:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {kind}BatchRequestEntry in the request.")
    out = [dict(e) for e in entries]
    if len(out) > MAX_BATCH_ENTRIES:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are 10. You have sent {len(out)}.",
        )
    seen: set[str] = set()
    for e in out:
        eid = str(e.get("Id", ""))
        if not BATCH_ID_RE.match(eid):
            raise SqsError(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
                "It can be at most 80 letters long.",
            )
        if eid in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {eid} repeated.")
        seen.add(eid)
    return out


def batch_size(entries: Iterable[Mapping[str, Any]], max_size: int) -> None:
    """The sum of a send batch's bodies and attributes is bound by the queue's size limit."""
    total = sum(
        len(str(e.get("MessageBody", "")).encode()) + attrs_size(e.get("MessageAttributes") or {}) for e in entries
    )
    if total > max_size:
        raise SqsError(
            "BatchRequestTooLong",
            f"Batch requests cannot be longer than {max_size} bytes. You have sent {total} bytes.",
        )


def message(
    body: Any, attrs: Mapping[str, Any] | None, delay: Any, default_delay: int, max_size: int
) -> tuple[str, dict[str, dict[str, Any]], int]:
    """Check a message to send: its body, its attributes (copied) and its delay
    (``default_delay``, the queue's, when ``delay`` is None)."""
    if not isinstance(body, str) or body == "":
        raise missing("MessageBody")
    d = default_delay if delay is None else int(delay)
    if not 0 <= d <= MAX_DELAY_S:
        raise invalid(f"Value {d} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.")
    a = {k: dict(v) for k, v in (attrs or {}).items()}
    for k, v in a.items():
        if "DataType" not in v:
            raise invalid(f"The message attribute '{k}' must contain non-empty message attribute type.")
    size = len(body.encode()) + attrs_size(a)
    if size > max_size:
        raise invalid(f"One or more parameters are invalid. Reason: Message must be shorter than {max_size} bytes.")
    return body, a, d


def max_messages(n: int) -> int:
    if not 1 <= n <= 10:
        raise invalid(
            f"Value {n} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."
        )
    return n


def visibility_timeout(vt: int) -> int:
    if not 0 <= vt <= MAX_VISIBILITY_S:
        raise invalid(f"Value {vt} for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200.")
    return vt


def wait_time(wait: int) -> int:
    if not 0 <= wait <= MAX_WAIT_S:
        raise invalid(
            f"Value {wait} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
        )
    return wait
