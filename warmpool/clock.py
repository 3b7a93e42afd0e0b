"""Time, injected. Every loop in warmpool is a ``tick(now)`` driven by a
scheduler; logic never reads the wall clock or sleeps.

:class:`RealClock` is the production port; ``emulated/clock.py``'s
``VirtualClock`` and ``EventLoop`` drive the bench and the tests in virtual time.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds since the epoch (float). The only way logic learns the time."""

    def now(self) -> float: ...


class RealClock:
    """The wall clock (production)."""

    def now(self) -> float:
        return time.time()
