"""What EC2 said that IMDS may not show yet: the datastore's memory of recent results.

IMDS lags behind EC2. After a ``released`` result an IMDS read may still list
the addresses, after a ``deleted`` one the ENI; and a ``released`` result
delivered late must not take back what a newer ``assigned``/``attached`` result
gave. Each entry is kept with the ``in_reply_to`` of the result that made it
(older claims are stale for it). Checkpointed by the datastore (the ``recent``
part of the checkpoint), so a restart keeps it.

No entry expires by time. A granted one is needed as long as an older ``released`` can
still arrive, and SQS may redeliver one at any time (before, granted entries expired after
2 min, and a ``released`` redelivered later dropped an address granted again since, for
good: hostile review of the resync fix, L1); they are bounded at :data:`MAX_GRANTED`,
oldest grant first. Released and deleted ones never expire by time either:
IMDS promises no freshness, EC2 answers ``deleted`` while the ENI may still be
detaching, for minutes, and nothing promises that IMDS never answers from an older
state than one it served (docs/safety.md, rows 4 and 6). So a released address is
ignored by resync however IMDS lists it, until a result grants it to us again
(:meth:`RecentResults.unmark_released`, from the claim path); IMDS listing it, even
after it was seen *not* listing it, is no evidence that EC2 gave it back. Before,
an entry expired 2 min after IMDS was seen without the address, and a read answering
from before the release brought it back free while EC2 had given it to another node
(seed 5877). The allocator says each grant of its own again to every newer report
until the agent names the address (docs/allocator.md, the release book), so a lost
grant it recorded is not lost for good (one it did not record, its invocation dead
after the call, is: ``REGRANT_UNSEEN_LEAK`` in tests/sim/test_undocumented_rows.py).
Released entries are forgotten oldest first beyond
:data:`MAX_RELEASED`, and only those IMDS was seen without (one it may still list
is never forgotten): memory is bounded by what IMDS lists, and only an IMDS answering
from before that many releases could bring a forgotten one back. A deleted ENI id is
remembered until IMDS has been seen not listing it; EC2 never reuses an ENI id, so
only the same ENI attached again could bring it back, and that comes with an
``attached`` result newer than the deletion. Ids seen absent are forgotten oldest
first beyond :data:`MAX_DELETED_ABSENT`; ids IMDS still lists are never forgotten.

Which released keys and deleted ENIs have been seen absent is checkpointed too
(``released_absent``, ``deleted_absent``): a checkpoint without them (an older
agent's) restores them as not yet seen absent, which only waits for the next IMDS
read without them.

Plain state, no lock and no I/O: :class:`node_agent.datastore.Datastore`
holds one under its lock and checkpoints it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from node_agent.checkpoint import RecentEntry

Expiry = tuple[float, int]
"""(until when, the ``in_reply_to`` of the result)."""

MAX_DELETED_ABSENT = 256
"""Deleted ENI ids remembered after IMDS was seen without them (oldest forgotten first)."""

MAX_RELEASED = 1024
"""Released addresses and prefixes IMDS was seen without that are remembered beyond those it
may still list (oldest forgotten first): a node's pool is at most a few hundred addresses,
so this holds several turnovers of it."""


MAX_GRANTED = 1024
"""Granted addresses and prefixes remembered (the oldest grant forgotten first): a node's pool
is at most a few hundred addresses, so this holds several turnovers of it; a forgotten one only
lets a ``released`` older than its grant drop it (a leak, the safe direction)."""


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
        """Released keys IMDS has been seen *not* listing since the release: a claim (a result
        granting the key again) listed by IMDS after that is taken (the claim is EC2's word,
        IMDS's gap shows the old assignment passed); IMDS listing the key alone never is.
        Forgotten first beyond :data:`MAX_RELEASED`. Checkpointed."""
        self.deleted_absent: set[str] = set()
        """Deleted ENIs IMDS has been seen *not* listing since the deletion (checkpointed)."""

    def mark_gone(self, until: float, seq: int, released: Iterable[str], deleted: Iterable[str]) -> None:
        released, deleted = list(released), list(deleted)
        _keep_newest(self.released, released, until, seq)
        _keep_newest(self.deleted, deleted, until, seq)
        # Taken (again) now: an absence seen before this release proves nothing about IMDS after it.
        self.absent.difference_update(released)
        self.deleted_absent.difference_update(deleted)
        self._bound_released()

    def _bound_released(self) -> None:
        """Forget released keys beyond :data:`MAX_RELEASED`, oldest first, and only keys IMDS
        has been seen without: one IMDS may still list is never forgotten (resync would take
        it back free at once), as deleted ENI ids are not."""
        over = len(self.released) - MAX_RELEASED
        if over <= 0:
            return
        order = sorted(self.absent, key=lambda k: (self.released[k], k))
        for k in order[:over]:
            del self.released[k]
            self.absent.discard(k)

    def mark_granted(self, until: float, seq: int, keys: Iterable[str]) -> None:
        _keep_newest(self.granted, keys, until, seq)
        self._bound_granted()

    def _bound_granted(self) -> None:
        over = len(self.granted) - MAX_GRANTED
        if over > 0:
            for k in sorted(self.granted, key=lambda k: (self.granted[k][1], k))[:over]:
                del self.granted[k]

    def unmark_released(self, keys: Iterable[str]) -> bool:
        """No longer ignored (EC2 gave them back and IMDS shows them); True if any was."""
        hit = [k for k in keys if self.released.pop(k, None) is not None]
        self.absent.difference_update(hit)
        return bool(hit)

    def unmark_deleted(self, eni_id: str) -> bool:
        """The deleted ENI is ours again (attached anew, and IMDS shows it); True if it was marked."""
        self.deleted_absent.discard(eni_id)
        return self.deleted.pop(eni_id, None) is not None

    def note_absent(self, listed: set[str]) -> bool:
        """IMDS lists exactly ``listed``: every released key it does not list was seen gone;
        True if any was not seen gone before."""
        new = {k for k in self.released if k not in listed and k not in self.absent}
        self.absent |= new
        return bool(new)

    def note_enis_absent(self, listed: set[str]) -> bool:
        """IMDS lists exactly the ENIs ``listed``: every deleted ENI it does not list was seen
        gone. Forgets the oldest ids seen gone beyond :data:`MAX_DELETED_ABSENT`; True if
        anything changed."""
        new = {k for k in self.deleted if k not in listed and k not in self.deleted_absent}
        self.deleted_absent |= new
        over = len(self.deleted_absent) - MAX_DELETED_ABSENT
        if over <= 0:
            return bool(new)
        for k in sorted(self.deleted_absent, key=lambda k: (self.deleted[k], k))[:over]:
            del self.deleted[k]
            self.deleted_absent.discard(k)
        return True

    def expire(self, now: float) -> bool:
        """Nothing expires by time (the module docstring); kept for the datastore's calls.
        False: nothing changed."""
        return False

    @staticmethod
    def seqs(d: dict[str, Expiry]) -> dict[str, int]:
        return {k: n for k, (_, n) in d.items()}

    def clear(self) -> None:
        for d in (self.released, self.deleted, self.granted):
            d.clear()
        self.absent.clear()
        self.deleted_absent.clear()

    def load(self, recent: RecentEntry) -> None:
        self.clear()
        self.released.update(recent.released)
        self.deleted.update(recent.deleted)
        self.granted.update(recent.granted)
        self.absent.update(k for k in recent.released_absent if k in self.released)
        self.deleted_absent.update(k for k in recent.deleted_absent if k in self.deleted)
        self._bound_released()
        self._bound_granted()

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
        # Only when set (older agents ignore them: they wait for the next read without them).
        if self.absent:
            out["released_absent"] = sorted(self.absent)
        if self.deleted_absent:
            out["deleted_absent"] = sorted(self.deleted_absent)
        return out
