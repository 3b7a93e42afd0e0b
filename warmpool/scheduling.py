"""Scheduling a batch: coalesce reports, then order nodes.

Newest report per instance wins (the instance id is the key; the report's
``node`` is only a label, so one instance reporting under many names is still
one node); a report at or below the ledger's last seq for its instance is
stale and causes no EC2 call. Order: nodes with pods waiting and
no free address first, then by size of deficit, releases last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from warmpool.messages import PoolReport
from warmpool.pool import PoolDelta


@dataclass(frozen=True)
class Coalesced:
    keep: tuple[PoolReport, ...]
    """The newest fresh report of each instance, in first-seen order."""
    stale: tuple[PoolReport, ...]
    """At or below the ledger's last seq: already served."""
    superseded: tuple[PoolReport, ...]
    """Older than (or a duplicate of) another report in the batch."""


def coalesce(reports: Iterable[PoolReport], last_seq: Mapping[str, int]) -> Coalesced:
    """``last_seq`` is keyed by instance id."""
    newest: dict[str, PoolReport] = {}
    stale: list[PoolReport] = []
    superseded: list[PoolReport] = []
    for r in reports:
        if r.seq <= last_seq.get(r.instance_id, -1):
            stale.append(r)
            continue
        cur = newest.get(r.instance_id)
        if cur is None:
            newest[r.instance_id] = r
        elif r.seq > cur.seq:
            superseded.append(cur)
            newest[r.instance_id] = r
        else:
            superseded.append(r)
    return Coalesced(tuple(newest.values()), tuple(stale), tuple(superseded))


def priority_key(report: PoolReport, delta: PoolDelta) -> tuple[int, int, str]:
    """Sort key: starved nodes, then other deficits (largest first), then
    releases, then nodes with nothing to do."""
    if delta.low:
        starved = report.pending_demand > 0
        return (0 if starved else 1, -delta.short, report.node)
    if delta.high and report.release:
        return (2, 0, report.node)
    return (3, 0, report.node)


FIRST_START_MAX_AGE_S = 3600.0
"""How long after its launch (DescribeInstances' ``LaunchTime``) an instance's first start may be
confirmed. Far below the release book's time to live (``WARMPOOL_LEDGER_TTL_S``, 7 days): any book
ever written for an instance this young is still stored, so "no book" means "none ever written"."""


def first_start_confirmed(
    ledger_seq: int, book_written: bool, launched_at: float | None, now: float, ttl_s: float, *, epoch: int | None
) -> bool:
    """Whether a report asking about a first start (``PoolReport.first_start``) is the instance's
    first start as the allocator knows it (docs/safety.md, row 30): no ledger row (no report of it
    recorded, as far as the ledger remembers: the reconciler may have forgotten one, row 8), no
    release book ever written for it (``book_written``: a stored version; the book is written
    before every Unassign, detach and hand-back, at every restore check or first-start answer,
    and after a grant when it can be (the argument does not rest on that: a grant only adds),
    and the reconciler never deletes it), and launched (EC2's word; a lagging Describe shows an
    earlier launch, never a later one) less than :data:`FIRST_START_MAX_AGE_S` and less than the
    book's time to live ``ttl_s`` ago, so that no book of it can have expired.
    Unknown launch time: not confirmed (the cost is only addresses replaced). A report carrying an
    ``epoch`` came from a process some answer reached: not a first start."""
    if ledger_seq >= 0 or book_written or launched_at is None or epoch:
        return False
    age = now - launched_at
    return age < min(FIRST_START_MAX_AGE_S, ttl_s)


def restore_current(restored_from: int, ledger_seq: int, book_seqs: Iterable[int]) -> bool:
    """Whether a checkpoint that knew reports up to ``restored_from`` is the node's newest
    state as the allocator knows it: the ledger (the last seq recorded for the instance, -1
    for no row) is not past it, and no entry of the instance's release book (written before
    each Unassign or delete, and after each grant) answers a report past it. An instance the
    ledger does not know is not current: a row the reconciler forgot may have been past it,
    and the cost of "not current" is only addresses replaced."""
    if ledger_seq < 0 or ledger_seq > restored_from:
        return False
    return all(s <= restored_from for s in book_seqs)
