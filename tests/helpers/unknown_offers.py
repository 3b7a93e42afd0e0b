"""The agent and the allocator as they were before offers of unknown origin (docs/allocator.md,
"Offers of unknown origin"), for revert tests whose fix that change also masks: each shows its
own fix in the world it was found in."""

from __future__ import annotations

import pytest

from node_agent.controller import PoolController
from warmpool.messages import ReleaseOffer


def _reclaim_as_before(self: PoolController, key: str, seq: int, grants: frozenset[str] = frozenset()) -> bool:
    """A hand-back replying to the newest report offering the key was taken."""
    return seq >= self._offered_upto.get(key, self._seq_at_start)


def without_unknown_offers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Held only inside the window after a checkpoint loss (no grant exempted), released keys IMDS
    lists again left out, every offer handed back as any, every hand-back taken as any."""
    monkeypatch.setattr(PoolController, "_holds_learnt", lambda self, now: self._in_rebuild_window(now))
    monkeypatch.setattr(PoolController, "_granted_keys", lambda self, now: set())
    monkeypatch.setattr(PoolController, "_relisted", lambda self, usable, released, held: (set(), set()))
    monkeypatch.setattr(PoolController, "_may_reclaim", _reclaim_as_before)
    monkeypatch.setattr(ReleaseOffer, "may_hand_back", property(lambda self: True))
