"""Time, injected. Every loop in warmpool is a ``tick(now)`` driven by a
scheduler; logic never reads the wall clock or sleeps.

:class:`RealClock` is the production port; ``emulated/clock.py``'s
``VirtualClock`` and ``EventLoop`` drive the bench and the tests in virtual time.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


class Clock(Protocol):
    """Seconds since the epoch (float). The only way logic learns the time."""

    def now(self) -> float: ...


@runtime_checkable
class SteadyClock(Protocol):
    """A clock with a monotonic reading too: durations measured on it survive the wall
    clock being stepped (NTP, an operator). Its zero is arbitrary and does not survive a
    reboot, so a reading is compared across processes only within one boot (the agent's
    window after a checkpoint loss, with the boot's id), never across boots."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...


class RealClock:
    """The wall clock (production), with ``CLOCK_MONOTONIC`` for durations."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()
