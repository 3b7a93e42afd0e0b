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
