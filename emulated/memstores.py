"""In-memory implementations of the store ports, for the bench and unit tests.

Same semantics as the DynamoDB stores in ``functions/stores.py`` (one shared
test suite pins both): atomic under threads, conditional like DynamoDB.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from warmpool.buckets import BucketSpec, BucketState, allot, full, on_throttled, time_until
from warmpool.buckets import try_take as take_tokens
from warmpool.ports import FlipState, LedgerUnread


class MemBuckets:
    """Token buckets in a dict, keyed like the DynamoDB table (account, region, action).

    Several allocators (clusters) share buckets by sharing one ``shared`` dict.
    """

    def __init__(
        self,
        spec_of: Callable[[str], BucketSpec],
        account: str = "000000000000",
        region: str = "us-east-1",
        shared: dict[str, BucketState] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self._spec_of = spec_of
        self._scope = f"bucket#{account}#{region}#"
        self._items: dict[str, BucketState] = shared if shared is not None else {}
        self._lock = lock or threading.Lock()
        self.calls = 0

    def _key(self, action: str) -> str:
        return self._scope + action

    def load(self, action: str, now: float) -> BucketState:
        with self._lock:
            self.calls += 1
            return self._items.get(self._key(action)) or full(self._spec_of(action), now)

    def try_take(self, action: str, n: float, now: float) -> tuple[bool, float]:
        with self._lock:
            self.calls += 1
            spec = self._spec_of(action)
            st = self._items.get(self._key(action)) or full(spec, now)
            ok, new = take_tokens(st, spec, n, now)
            if ok:
                self._items[self._key(action)] = new
                return True, 0.0
            return False, time_until(st, spec, n, now)

    def take_batch(self, requests: Sequence[Mapping[str, float]], now: float) -> list[float]:
        with self._lock:
            self.calls += 2  # one read, one conditional write, as in DynamoDB
            actions = {a for r in requests for a in r}
            states = {a: self._items.get(self._key(a)) for a in actions}
            changed, waits = allot(states, self._spec_of, requests, now)
            for a, st in changed.items():
                self._items[self._key(a)] = st
            return waits

    def throttled(self, action: str, now: float) -> None:
        with self._lock:
            self.calls += 1
            spec = self._spec_of(action)
            st = self._items.get(self._key(action)) or full(spec, now)
            self._items[self._key(action)] = on_throttled(st, spec, now)


class MemLedger:
    """Per-node ledger entries: last seq served, outcome, instance id."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.unread: set[str] = set()
        """Fault injection: nodes whose rows ``last_seqs`` cannot read (as
        DynamoDB's UnprocessedKeys after the store's bounded retries)."""

    def last_seq(self, cluster: str, node: str) -> int:
        with self._lock:
            self.calls += 1
            item = self._items.get((cluster, node))
            return int(item["last_seq"]) if item else -1

    def last_seqs(self, cluster: str, nodes: list[str]) -> dict[str, int]:
        with self._lock:
            self.calls += max(1, math.ceil(len(set(nodes)) / 100))
            out = {}
            for n in nodes:
                item = self._items.get((cluster, n))
                out[n] = int(item["last_seq"]) if item else -1
            unread = frozenset(n for n in nodes if n in self.unread)
            if unread:
                raise LedgerUnread(unread, {n: v for n, v in out.items() if n not in unread})
            return out

    def record(self, cluster: str, node: str, seq: int, outcome: dict[str, Any], now: float) -> bool:
        with self._lock:
            self.calls += 1
            item = self._items.get((cluster, node))
            if item is not None and int(item["last_seq"]) >= seq:
                return False
            self._items[(cluster, node)] = {
                "last_seq": seq,
                "outcome": dict(outcome),
                "updated_at": now,
                "instance_id": outcome.get("instance_id", ""),
            }
            return True

    def forget(self, cluster: str, node: str, *, instance_id: str, last_seq: int) -> bool:
        """Conditional, as DynamoDB's ``instance_id = :i AND last_seq = :s``."""
        with self._lock:
            self.calls += 1
            item = self._items.get((cluster, node))
            if item is None or item.get("instance_id", "") != instance_id or int(item["last_seq"]) != last_seq:
                return False
            del self._items[(cluster, node)]
            return True

    def nodes(self, cluster: str) -> dict[str, int]:
        return {n: int(e["last_seq"]) for n, e in self.entries(cluster).items()}

    def entries(self, cluster: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            self.calls += 1
            return {n: dict(e) for (c, n), e in self._items.items() if c == cluster}


class MemLeases:
    """Leases with expiry; a claim succeeds if free, expired, or already ours."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.calls = 0

    def claim(self, cluster: str, node: str, owner: str, now: float, ttl_s: float) -> bool:
        with self._lock:
            self.calls += 1
            held = self._items.get((cluster, node))
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._items[(cluster, node)] = (owner, now + ttl_s)
            return True

    def release(self, cluster: str, node: str, owner: str) -> None:
        with self._lock:
            self.calls += 1
            held = self._items.get((cluster, node))
            if held is not None and held[0] == owner:
                del self._items[(cluster, node)]

    def sweep(self, cluster: str, now: float) -> int:
        with self._lock:
            self.calls += 1
            gone = [k for k, (_, until) in self._items.items() if k[0] == cluster and until <= now]
            for k in gone:
                del self._items[k]
            return len(gone)


class MemFlips:
    """Flip histories shared by the allocator containers of one process (the FlipStore port)."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], FlipState] = {}
        self._lock = threading.Lock()

    def load(self, cluster: str, instance_ids: Sequence[str]) -> dict[str, FlipState]:
        with self._lock:
            return {i: self._items[(cluster, i)] for i in instance_ids if (cluster, i) in self._items}

    def save(self, cluster: str, instance_id: str, state: FlipState, expires_at: float) -> None:
        with self._lock:
            self._items[(cluster, instance_id)] = state
