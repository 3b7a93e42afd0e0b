"""What EC2 said that IMDS may not show yet: the datastore's memory of recent results.

IMDS lags behind EC2. After a ``released`` result an IMDS read may still list
the addresses, after a ``deleted`` one the ENI; and a ``released`` result
delivered late must not take back what a newer ``assigned``/``attached`` result
gave. Each entry is kept until an expiry, with the ``in_reply_to`` of the
result that made it (older claims are stale for it). Checkpointed by the
datastore (the ``recent`` part of the checkpoint), so a restart keeps it.

Plain state, no lock and no I/O: :class:`node_agent.datastore.Datastore`
holds one under its lock and checkpoints it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from node_agent.checkpoint import RecentEntry

Expiry = tuple[float, int]
"""(until when, the ``in_reply_to`` of the result)."""


def _keep_newest(into: dict[str, Expiry], keys: Iterable[str], until: float, seq: int) -> None:
    for key in keys:
        t, n = into.get(key, (until, seq))
        into[key] = (max(t, until), max(n, seq))


class RecentResults:
    """See the module docstring."""

    def __init__(self) -> None:
        self.released: dict[str, Expiry] = {}
        """Addresses and prefixes EC2 took (a ``released`` result), ignored while IMDS still lists them."""
        self.deleted: dict[str, Expiry] = {}
        """ENIs EC2 deleted (a ``deleted`` result), likewise."""
        self.granted: dict[str, Expiry] = {}
        """Addresses and prefixes an ``assigned``/``attached`` result gave us: a ``released``
        result replying to an older report is stale for them."""
        self.absent: set[str] = set()
        """Released keys IMDS has been seen *not* listing since the release: only after that is
        IMDS listing them again evidence of a new assignment. Not checkpointed (a restart
        just waits longer for the evidence)."""

    def mark_gone(self, until: float, seq: int, released: Iterable[str], deleted: Iterable[str]) -> None:
        _keep_newest(self.released, released, until, seq)
        _keep_newest(self.deleted, deleted, until, seq)

    def mark_granted(self, until: float, seq: int, keys: Iterable[str]) -> None:
        _keep_newest(self.granted, keys, until, seq)

    def unmark_released(self, keys: Iterable[str]) -> bool:
        """No longer ignored (EC2 gave them back and IMDS shows them); True if any was."""
        hit = [k for k in keys if self.released.pop(k, None) is not None]
        self.absent.difference_update(hit)
        return bool(hit)

    def note_absent(self, listed: set[str]) -> None:
        """IMDS lists exactly ``listed``: every released key it does not list was seen gone."""
        self.absent.update(k for k in self.released if k not in listed)

    def expire(self, now: float) -> bool:
        """Forget entries whose time is up; True if any was."""
        changed = False
        for d in (self.released, self.deleted, self.granted):
            old = [k for k, (t, _) in d.items() if t <= now]
            for k in old:
                del d[k]
                if d is self.released:
                    self.absent.discard(k)
            changed = changed or bool(old)
        return changed

    @staticmethod
    def seqs(d: dict[str, Expiry]) -> dict[str, int]:
        return {k: n for k, (_, n) in d.items()}

    def clear(self) -> None:
        for d in (self.released, self.deleted, self.granted):
            d.clear()
        self.absent.clear()

    def load(self, recent: RecentEntry) -> None:
        self.clear()
        self.released.update(recent.released)
        self.deleted.update(recent.deleted)
        self.granted.update(recent.granted)

    def encode(self) -> dict[str, Any] | None:
        """The checkpoint's ``recent`` part; None when there is nothing to remember."""
        if not (self.released or self.deleted or self.granted):
            return None
        # ``released`` and ``deleted`` always (readers before ``granted`` expect both);
        # ``granted`` only when set (older agents ignore it: they lose only the stale-release check).
        out: dict[str, Any] = {
            "released": {k: [t, n] for k, (t, n) in sorted(self.released.items())},
            "deleted": {k: [t, n] for k, (t, n) in sorted(self.deleted.items())},
        }
        if self.granted:
            out["granted"] = {k: [t, n] for k, (t, n) in sorted(self.granted.items())}
        return out
