"""The allocator's outcomes and reasons it decides by, as enums (their values are what the
logs, the metrics' ``reason`` dimension, the dead-letter queue and the node's ``deferred``
and ``failed`` actions carry; unchanged from the strings they replace)."""

from __future__ import annotations

from enum import StrEnum


class NodeStatus(StrEnum):
    """How one node of a batch ended."""

    SERVED = "served"
    DEFERRED = "deferred"
    FAILED = "failed"


class Why(StrEnum):
    """The reasons of a :class:`functions.execute.NodeOutcome` the allocator acts on (the
    others are text for the node's log: which bucket, which re-plan)."""

    DEADLINE = "invocation deadline"
    """Not started, or stopped, at the invocation's deadline: the report comes again."""
    DESCRIBE_WAIT = "waiting for EC2 Describe tokens"
    UNLISTED = "instance not in DescribeInstances yet"
    """A young report of an instance Describe does not show: re-sent, not refused."""
    INTERNAL = "internal"
    """A bug or an outage: nothing recorded, the record is left to the event-source mapping."""


class Rejection(StrEnum):
    """Why the allocator rejects a report (dead-lettered; the ``reason`` of ``ReportsRejected``).
    Identity verification adds its own (``functions/identity.py``)."""

    FOREIGN_CLUSTER = "foreign-cluster"
    SENDER_MISMATCH = "sender-mismatch"
    SEQ_TOO_FAR = "seq-too-far-ahead"
    INSTANCE_NOT_FOUND = "instance-not-found"
    FOREIGN_INSTANCE = "foreign-instance"
    INSTANCE_NOT_RUNNING = "instance-not-running"
    INSTANCE_CLAIMED_TWICE = "instance-claimed-twice"
    FOREIGN_ENI = "foreign-eni"
    UNKNOWN_INSTANCE_TYPE = "unknown-instance-type"
