"""The allocator's release books in use (``warmpool/release_book.py``): read with each
batch's reports, settled by them, said again in the answers; and the in-memory store a
container uses when none is shared (tests, bench, simulation).

docs/allocator.md, "Offers, releases and stale Describe".
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from botocore.exceptions import ClientError

from functions.errors import AwsError
from functions.telemetry import Tally
from warmpool.calls import CreateEni, RepeatGrant
from warmpool.messages import PoolReport
from warmpool.names import M_RELEASE_BOOK_UNREAD
from warmpool.planner import Plan
from warmpool.ports import ReleaseBookStore
from warmpool.release_book import ReleaseBook

log = logging.getLogger(__name__)

BOOK_ERRORS = (AwsError, ClientError, ValueError)
"""What a store may raise: DynamoDB errors, rows left unprocessed, a book that does not parse."""


class LocalReleaseBooks:
    """Release books in memory, with the store's semantics (conditional on the version); and
    named placement's records (``warmpool.ports.PlacementRecords``), as ``DynamoReleaseBooks``
    keeps them beside the books."""

    def __init__(self) -> None:
        self._books: dict[tuple[str, str], ReleaseBook] = {}
        self._held: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
        self._creates: dict[tuple[str, str], CreateEni] = {}
        self._lock = threading.Lock()
        self.calls = 0

    def hold(self, cluster: str, subnet_id: str, keys: Sequence[str], at: float, expires_at: float) -> None:
        with self._lock:
            self.calls += 1
            mine = self._held.setdefault((cluster, subnet_id), {})
            for k in [k for k, (_, until) in mine.items() if until < at]:  # expired (the table's TTL)
                del mine[k]
            for k in keys:
                mine[k] = (at, expires_at)

    def held(self, cluster: str, subnet_id: str, since: float) -> frozenset[str]:
        with self._lock:
            self.calls += 1
            return frozenset(k for k, (at, _) in self._held.get((cluster, subnet_id), {}).items() if at >= since)

    def put_create(self, cluster: str, call: CreateEni, expires_at: float) -> None:
        with self._lock:
            self.calls += 1
            if len(self._creates) >= 10_000:  # the table's TTL, roughly: the oldest go
                self._creates.pop(next(iter(self._creates)))
            self._creates[(cluster, call.client_token)] = call

    def get_create(self, cluster: str, client_token: str) -> CreateEni | None:
        with self._lock:
            self.calls += 1
            return self._creates.get((cluster, client_token))

    def load(self, cluster: str, instance_ids: Sequence[str]) -> dict[str, ReleaseBook]:
        with self._lock:
            self.calls += 1
            return {i: self._books.get((cluster, i), ReleaseBook()) for i in instance_ids}

    def save(self, cluster: str, instance_id: str, book: ReleaseBook, expires_at: float) -> ReleaseBook | None:
        with self._lock:
            self.calls += 1
            if self._books.get((cluster, instance_id), ReleaseBook()).version != book.version:
                return None
            stored = replace(book, version=book.version + 1)
            self._books[(cluster, instance_id)] = stored
            return stored


def load_books(
    store: ReleaseBookStore, cluster: str, instance_ids: Sequence[str], tally: Tally
) -> dict[str, ReleaseBook]:
    """The instances' books; none at all when the store could not answer (unknown, never
    empty: the executor then reads the book again before any release or hand-back)."""
    if not instance_ids:
        return {}
    try:
        return store.load(cluster, instance_ids)
    except BOOK_ERRORS as err:
        tally.add(M_RELEASE_BOOK_UNREAD, len(instance_ids))
        log.warning("release books not read", extra={"instances": len(instance_ids), "error": str(err)[:200]})
        return {}


def offered_in(body: str) -> set[str]:
    """Every address and prefix the raw report offers (offers too old to act on included)."""
    try:
        raw = json.loads(body)
        return {str(k) for o in raw.get("release") or () for k in (*o.get("ips", ()), *o.get("prefixes", ()))}
    except (ValueError, TypeError, AttributeError):
        return set()


def settle(
    store: ReleaseBookStore,
    cluster: str,
    instance_id: str,
    book: ReleaseBook,
    report: PoolReport,
    body: str,
    shown: Iterable[str],
    expires_at: float,
    tally: Tally,
) -> ReleaseBook:
    """The book without what the report (``body``: as received, before offers too old to act
    on were dropped) shows the agent has dropped (``shown``: the ENIs EC2's facts list),
    stored. When the store refuses (another writer) or fails, the book as read: more
    entries only hold more back."""
    settled = book.settle(report, offered_in(body), shown)
    if settled is book:
        return book
    try:
        stored = store.save(cluster, instance_id, settled, expires_at)
    except BOOK_ERRORS as err:
        stored = None
        log.warning("release book not settled", extra={"instance_id": instance_id, "error": str(err)[:200]})
    if stored is None:
        tally.add(M_RELEASE_BOOK_UNREAD)
        return book
    return stored


def with_repeats(
    plan: Plan,
    book: ReleaseBook | None,
    report: PoolReport,
    body: str,
    attached: Iterable[str] = (),
    shown: Mapping[str, Iterable[str]] | None = None,
    hold: Collection[str] = (),
) -> Plan:
    """The plan with the book's entries the report (``body``: as received) still names said
    again, first (``attached``: the ENIs EC2's facts show on the instance; a deleted one the
    report offers whole again is deleted again; ``shown``: the addresses EC2's facts show per
    ENI, before the book's correction; a booked one the report offers again that EC2 still
    shows is unassigned again: :meth:`ReleaseBook.repeats`; ``hold``: the ENIs whose offers the
    release rules hold now, :func:`functions.releases.offers_held`); repeated grants after the
    plan's own calls."""
    if book is None or not (book.taken or book.given):
        return plan
    again = book.repeats(report, offered_in(body), attached, shown, hold)
    if not again:
        return plan
    # Repeated grants last: a call of the plan may take what they would say (a delete of the
    # ENI drops its given entries), and the executor then says nothing of it.
    grants = tuple(c for c in again if isinstance(c, RepeatGrant))
    first = tuple(c for c in again if not isinstance(c, RepeatGrant))
    return replace(plan, calls=first + plan.calls + grants)
