"""Production code as it was before a fix, patched back in by the revert tests that show the fix
in the world it was found in (tests/sim/test_undocumented_rows.py, tests/sim/test_harsh_world.py)."""

from __future__ import annotations

from node_agent.controller import PoolController

_LISTED_AT_TIMEOUT = PoolController._listed_at_timeout
"""The fixed method, kept before a test patches :func:`take_back_as_before` in its place (called
through the class, the patched name would call itself)."""


def take_back_as_before(self: PoolController, eni_id: str, keep: list[str], whole: bool, now: float) -> int:
    """Step 6 before the fix: a single address IMDS lists at the timeout goes back to the pool."""
    if whole:
        return _LISTED_AT_TIMEOUT(self, eni_id, keep, whole, now)
    return self.ds.reclaim(eni_id, keep)
