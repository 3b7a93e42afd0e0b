"""What a batch is made of before any node is planned: the SQS records, one
explicit object per node report as it flows through the allocator's stages
(:class:`Incoming`), and the identity rules the first stages apply (trusted
keys, the SQS sender, how far ahead a seq may be).

No I/O here but the cold-start log of :func:`trusted_keys`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from functions.identity import IdentityConfigError, TrustedKeys
from functions.reasons import Rejection
from functions.settings import Settings
from warmpool.messages import PoolReport

log = logging.getLogger(__name__)

SEQ_AHEAD_LIMIT = 2**47
"""A report's seq may be at most this far ahead of ``max(last seq seen, now in
ms)``: above every wall clock a valid report can carry (its ``sent_at`` is at
most 1e11 s, 1e14 ms; the agent's seq is ``max(last + 1, now in ms)``, or after a
``seq-floor`` ``floor + 2^31 + now in ms``, under 2^47 above the floor), so an
honest node is served whatever its clock says (docs/safety.md, L1). A seq far
ahead of a node's later ones no longer leaves them stale: they are answered
``seq-floor`` and the agent numbers above it (``Allocator._say_floors``). The
bound keeps the room above a row for that: a node reaches the seq schema's top
(2^62) only by having some 2^15 reports of its own served, each as far ahead as
it allows (it harms itself only: rows are keyed by verified instance)."""
SEQ_TOO_FAR = Rejection.SEQ_TOO_FAR


@dataclass(frozen=True)
class Record:
    """One SQS record, transport-neutral."""

    message_id: str
    body: str
    sender_id: str = ""


@dataclass(frozen=True)
class Incoming:
    """One node's report on its way through the batch, before it is planned:
    the SQS record it came in (its body is what a deferral re-sends, its
    message id what the ESM redelivers) and the report as parsed, then as
    trimmed of offers too old to act on. Planned, it becomes a
    :class:`functions.execute.NodeJob` (facts, limits, plan, ceiling)."""

    record: Record
    report: PoolReport
    sent: PoolReport | None = None
    """The report as the node sent it, when offers too old to act on were dropped from
    ``report``: the flip count counts what the node asks for, whatever the allocator's rules
    then let happen (:func:`functions.releases.count_flip`). None: ``report`` is it."""


def trusted_keys(settings: Settings) -> TrustedKeys | None:
    """The keys report identities are verified with, parsed once at cold start.

    Fail-closed: with verification required (the default) an empty or
    unusable certificate setting stops the allocator here
    (:class:`IdentityConfigError`). ``off`` is for explicit local tests and is
    logged loudly at start (and each report taken unverified is counted,
    ``ReportsIdentityUnverified``)."""
    if settings.identity_verification == "off":
        log.warning(
            "report identity verification is OFF (WARMPOOL_IDENTITY_VERIFICATION=off): any sender may report for "
            "any instance of the cluster; for local testing only"
        )
        return None
    if not settings.identity_certificates.strip():
        raise IdentityConfigError(
            "no identity certificate configured (WARMPOOL_IDENTITY_CERTIFICATES) while report identities must be "
            "verified; set the region's AWS certificate, or WARMPOOL_IDENTITY_VERIFICATION=off for local tests only"
        )
    return TrustedKeys.from_pem(settings.identity_certificates)


def sender_matches(sender_id: str, instance_id: str) -> bool:
    """SQS ``SenderId`` of an assumed role is ``AROA...:<session name>``; the
    agent's instance-role session name is the instance id."""
    return sender_id.rsplit(":", 1)[-1] == instance_id if sender_id else False
