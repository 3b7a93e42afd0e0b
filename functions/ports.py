"""Refinements of the core's store ports that the allocator needs.

Proposed for ``warmpool/ports.py`` (owned by the core); until then they live
here. Each extends the core protocol with one method:

* ``BatchBucketStore.take_batch`` — pay for a whole batch's nodes with one
  read and one conditional write (instead of one round per node and action);
* ``LedgerStore.entries`` — every node's entry with its instance id (reconcile
  needs the instance to find terminated nodes);
* ``LeaseSweeper.sweep`` — drop expired leases (reconcile).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from warmpool.ports import BucketStore, LeaseStore, Ledger


class BatchBucketStore(BucketStore, Protocol):
    def take_batch(self, requests: Sequence[Mapping[str, float]], now: float) -> list[float]:
        """Grant, in order and all-or-nothing each, the requests the buckets can
        pay for now. One wait per request: 0.0 = granted, else seconds until
        its tokens will exist (queued behind earlier refused ones), ``inf`` if never."""
        ...


class LedgerStore(Ledger, Protocol):
    def entries(self, cluster: str) -> dict[str, dict[str, Any]]:
        """``{node: {last_seq, outcome, instance_id, updated_at}}``."""
        ...


class LeaseSweeper(LeaseStore, Protocol):
    def sweep(self, cluster: str, now: float) -> int:
        """Delete expired leases; how many."""
        ...
