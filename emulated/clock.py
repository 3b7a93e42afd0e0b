"""Virtual time for the bench, the deterministic simulation and the tests.

:class:`VirtualClock` implements :class:`warmpool.clock.Clock` and moves only
when told; :class:`EventLoop` is a discrete-event scheduler over it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


class VirtualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._stepped = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        """The time less every :meth:`step`: what ``CLOCK_MONOTONIC`` would measure."""
        return self._now - self._stepped

    def step(self, seconds: float) -> None:
        """The wall clock jumps by ``seconds`` (either way); the monotonic reading does not."""
        self._now += seconds
        self._stepped += seconds

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._now += seconds

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"time does not go backwards ({t} < {self._now})")
        self._now = t


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    fn: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class EventLoop:
    """A discrete-event scheduler over a :class:`VirtualClock`.

    ``call_at``/``call_later`` queue callbacks; ``run_until`` pops them in time
    order (ties in insertion order, so runs are deterministic) and moves the
    clock to each one.
    """

    def __init__(self, clock: VirtualClock | None = None) -> None:
        self.clock = clock or VirtualClock()
        # (at, seq, event): tuples compare in C, and seq is unique, so the
        # event itself is never compared (the heap is the bench's hot path).
        self._queue: list[tuple[float, int, _Event]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.clock.now()

    def call_at(self, at: float, fn: Callable[[], None]) -> _Event:
        ev = _Event(max(at, self.clock.now()), next(self._seq), fn)
        heapq.heappush(self._queue, (ev.at, ev.seq, ev))
        return ev

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Event:
        return self.call_at(self.clock.now() + max(delay, 0.0), fn)

    def every(self, period: float, fn: Callable[[], None], start: float | None = None) -> None:
        """Call ``fn`` every ``period`` seconds from ``start`` (default: now)."""
        if period <= 0:
            raise ValueError("period must be > 0")

        def fire() -> None:
            fn()
            self.call_later(period, fire)

        self.call_at(self.clock.now() if start is None else start, fire)

    @staticmethod
    def cancel(ev: _Event) -> None:
        ev.cancelled = True

    def pending(self) -> int:
        return sum(1 for _, _, e in self._queue if not e.cancelled)

    def next_at(self) -> float | None:
        while self._queue and self._queue[0][2].cancelled:
            heapq.heappop(self._queue)
        return self._queue[0][0] if self._queue else None

    def run_until(self, t: float, stop: Callable[[], bool] | None = None) -> None:
        """Run every event due at or before ``t``; the clock ends at ``t``
        (or at the event after which ``stop()`` turned true)."""
        while self._queue:
            ev = self._queue[0][2]
            if ev.at > t:
                break
            heapq.heappop(self._queue)
            if ev.cancelled:
                continue
            self.clock.set(ev.at)
            ev.fn()
            if stop is not None and stop():
                return
        self.clock.set(max(t, self.clock.now()))
