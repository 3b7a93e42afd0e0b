"""Per-instance fair shares of the shared EC2 buckets, and flip damping (issue 12).

The buckets are the account's (by design): without a per-node bound, one node
that alternates "fill everything" and "release everything" spends most of
every mutating bucket and the other nodes wait. Two rules, per allocator
container (state in memory; with the event-source mapping's maximum
concurrency of N containers a node gets at most N shares, still a bound):

* **Fair share per window, while others wait.** When an action's bucket cannot
  pay the whole batch's plans now, an instance may spend of it, over the last
  ``window_s`` seconds, at most ``(capacity + refill × window) / active``
  tokens, ``active`` being the instances that spent in that window or want
  tokens now (itself included). An instance at or over its share waits until enough of its own
  spending leaves the window; below it, one plan may take it past (every node
  can always make progress). A bucket with room for the whole batch limits no
  one; alone, a node may use the whole bucket.
* **Flip damping.** An instance whose reports flip between asking for
  addresses (a deficit, waiting pods) and offering them back ``flip_limit``
  times within ``flip_window_s`` (whatever the rules then let happen) is damped for ``damp_s``:
  its release offers are taken back (no Unassign/Detach/Delete), so the cycle
  stops; counted (``NodesDamped``) and logged. An honest agent flips at most
  about once per release delay (a minute by default). The flip histories are
  shared by every container through a :class:`warmpool.ports.FlipStore` (the
  allocator loads the batch's instances before planning and saves what
  changed; a read merges, keeping the later damping, and a row that could not
  be read is not written): reports of one node spread over containers, or a
  cold start, neither hide its flips nor end a damping. Last writer wins, so
  batches of one node running at the same moment may count its flips once per
  pair (bounded by the mapping's concurrency).

Pure bookkeeping over an injected clock's times: no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping, Set
from dataclasses import dataclass, field, replace

from warmpool.buckets import BucketSpec
from warmpool.ports import FlipState


@dataclass
class FairShare:
    spec_of: Callable[[str], BucketSpec]
    window_s: float = 5.0
    flip_limit: int = 6
    flip_window_s: float = 120.0
    damp_s: float = 600.0
    _spent: dict[str, deque[tuple[float, dict[str, int]]]] = field(default_factory=dict)
    _flips: dict[str, FlipState] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)
    _unshared: set[str] = field(default_factory=set)

    @property
    def enabled(self) -> bool:
        return self.window_s > 0

    def _trim(self, now: float) -> None:
        for iid in list(self._spent):
            q = self._spent[iid]
            while q and q[0][0] <= now - self.window_s:
                q.popleft()
            if not q:
                del self._spent[iid]

    def share(self, action: str, active: int) -> float:
        spec = self.spec_of(action)
        return (spec.capacity + spec.refill_per_s * self.window_s) / max(1, active)

    def wait(
        self,
        instance_id: str,
        tokens: Mapping[str, int],
        now: float,
        contended: Container[str] | None = None,
        waiting: Set[str] = frozenset(),
    ) -> float:
        """0 if the instance may spend ``tokens`` now, else seconds until it may.
        Only actions in ``contended`` are limited (all when None); ``waiting``
        are the instances that want tokens now (they count as active)."""
        if not self.enabled or not tokens:
            return 0.0
        mine = self._spent.get(instance_id)
        while mine and mine[0][0] <= now - self.window_s:
            mine.popleft()
        if not mine:
            return 0.0  # first spending in the window: always allowed
        if contended is not None and not any(a in contended for a in tokens):
            return 0.0
        self._trim(now)
        active = len(self._spent) + sum(1 for i in waiting if i not in self._spent)
        wait = 0.0
        for action, n in tokens.items():
            if n <= 0 or (contended is not None and action not in contended):
                continue
            cap = self.share(action, active)
            used = sum(t.get(action, 0) for _, t in mine)
            if used < cap:
                continue  # within its share (one plan may take it past; the next one waits)
            # Until enough of this instance's own spending on the action leaves the window.
            excess = used - cap + min(n, 1)
            freed = 0
            for at, t in mine:
                freed += t.get(action, 0)
                if freed >= excess:
                    wait = max(wait, at + self.window_s - now)
                    break
            else:
                wait = max(wait, self.window_s)
        return 0.0 if wait <= 0 else max(1.0, float(math.ceil(wait)))

    def spent_within(self, instance_id: str, now: float) -> bool:
        """The instance spent within the window (else its next spending is allowed whatever it asks)."""
        mine = self._spent.get(instance_id)
        return mine is not None and len(mine) > 0 and mine[-1][0] > now - self.window_s

    def spend(self, instance_id: str, tokens: Mapping[str, int], now: float) -> None:
        if self.enabled and tokens:
            self._spent.setdefault(instance_id, deque()).append((now, dict(tokens)))

    # --- flips -------------------------------------------------------------------

    def damped(self, instance_id: str, now: float) -> bool:
        st = self._flips.get(instance_id)
        return st is not None and st.damped_until > now

    def hydrate(self, states: Mapping[str, FlipState]) -> None:
        """Merge the shared histories of a batch's instances into this container's: the later
        damping and every flip either side saw are kept, so neither a stale row nor a stale
        container lowers a damping. The row's last kind wins (another container counted later)."""
        for iid, st in states.items():
            self._unshared.discard(iid)
            mine = self._flips.get(iid)
            if mine is None:
                self._flips[iid] = st
                continue
            flips = tuple(sorted({*mine.flips, *st.flips}))
            self._flips[iid] = FlipState(st.last_kind or mine.last_kind, flips, max(mine.damped_until, st.damped_until))

    def unshared(self, instance_ids: Iterable[str]) -> None:
        """Their shared rows could not be read: this container's view of them is not written back
        (it could lower a damping another container recorded) until a read succeeds."""
        self._unshared.update(instance_ids)

    def take_dirty(self) -> dict[str, FlipState]:
        """The histories changed since the last call that may be saved (read this batch); the
        others stay marked for a later batch."""
        out = {i: self._flips[i] for i in self._dirty if i in self._flips and i not in self._unshared}
        self._dirty -= set(out)
        return out

    def unsaved(self, instance_id: str) -> None:
        """A save failed: keep it marked, for the next batch."""
        self._dirty.add(instance_id)

    def expires_at(self, state: FlipState, now: float) -> float:
        """When a history no longer matters: damping over, and its flips (or, before the first
        flip, the kind just recorded) out of the window."""
        return max(state.damped_until, max(state.flips, default=now) + self.flip_window_s)

    def asked(self, instance_id: str, kind: str, now: float) -> bool:
        """Record a planned kind (``allocate``/``release``); True when this
        flip makes the instance damped (newly)."""
        if self.flip_limit <= 0 or kind not in ("allocate", "release"):
            return False
        st = self._flips.get(instance_id, FlipState())
        last = st.last_kind
        if last == kind:
            return False
        self._dirty.add(instance_id)
        if not last:
            self._flips[instance_id] = replace(st, last_kind=kind)
            return False
        flips = tuple(t for t in (*st.flips, now) if t > now - self.flip_window_s)
        if len(flips) >= self.flip_limit and not self.damped(instance_id, now):
            self._flips[instance_id] = FlipState(kind, (), now + self.damp_s)
            return True
        self._flips[instance_id] = FlipState(kind, flips, st.damped_until)
        return False
