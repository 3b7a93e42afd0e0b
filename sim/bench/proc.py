"""Processes in virtual time: generators that ``yield`` how many seconds to
wait, driven by :class:`warmpool.clock.EventLoop` (SimPy-style, no threads, no
sleeping). Plus the SDK retry policies and Cilium's client-side rate limiter,
which the baselines use around every EC2 call.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from warmpool.clock import EventLoop

T = TypeVar("T")
Proc = Generator[float, None, T]
"""A process: yields delays in seconds, returns its result."""


def spawn(
    loop: EventLoop,
    proc: Proc[Any],
    on_done: Callable[[Any], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
) -> None:
    """Run ``proc`` from now on; its first step runs at once (synchronously)."""

    def step() -> None:
        try:
            delay = next(proc)
        except StopIteration as stop:
            if on_done is not None:
                on_done(stop.value)
            return
        except ClientError as exc:
            if on_error is None:
                raise
            on_error(exc)
            return
        loop.call_later(delay, step)

    step()


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


THROTTLE_CODES = frozenset(
    {"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequestsException"}
)
TRANSIENT_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})


@dataclass(frozen=True)
class RetryPolicy:
    """An SDK's retry on throttling and transient errors.

    ``delay(attempt)`` is the wait after failed attempt ``attempt`` (1-based):
    ``rand[0,1) × base × 2^(attempt−1)``, capped at ``cap_s`` — botocore's
    ``legacy`` mode (base 1 s, growth 2) and aws-sdk-go's exponential jitter.
    """

    name: str
    max_attempts: int
    base_s: float = 1.0
    cap_s: float = 20.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return min(self.cap_s, rng.random() * self.base_s * 2 ** (attempt - 1))


LEGACY = RetryPolicy("botocore-legacy", max_attempts=5)
"""botocore's default: 5 attempts in all, exponential backoff with jitter (cap 20 s per the brief)."""
STANDARD = RetryPolicy("sdk-standard", max_attempts=3)
"""The SDKs' ``standard`` mode: 3 attempts, exponential backoff with full jitter, cap 20 s."""


class Limiter:
    """A client-side token bucket (golang ``rate.Limiter`` with ``Wait``):
    ``rate`` per second, ``burst`` deep; waiters reserve in order."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at = 0.0

    def reserve(self, now: float) -> float:
        """Take one token; the seconds to wait before using it."""
        if now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.rate


def ec2_call(
    client: Any,
    method: str,
    kwargs: dict[str, Any],
    *,
    latency: Callable[[], float],
    retry: RetryPolicy,
    rng: random.Random,
    limiter: Limiter | None = None,
    now: Callable[[], float] | None = None,
) -> Proc[dict[str, Any]]:
    """One SDK call as a process: (limiter wait), the request, its latency, and
    the SDK's retries with backoff on throttling and transient errors. Raises
    the last ``ClientError`` when the attempts are spent or the error is final.
    """
    attempt = 0
    while True:
        attempt += 1
        if limiter is not None and now is not None:
            wait = limiter.reserve(now())
            if wait > 0:
                yield wait
        try:
            out: dict[str, Any] = getattr(client, method)(**kwargs)
        except ClientError as exc:
            yield latency()
            code = error_code(exc)
            if (code in THROTTLE_CODES or code in TRANSIENT_CODES) and attempt < retry.max_attempts:
                yield retry.delay(attempt, rng)
                continue
            raise
        yield latency()
        return out


def wait_until(cond: Callable[[], bool], poll_s: float, timeout_s: float = math.inf) -> Proc[bool]:
    """Poll ``cond`` every ``poll_s`` until true (True) or ``timeout_s`` passes (False)."""
    waited = 0.0
    while not cond():
        if waited >= timeout_s:
            return False
        yield poll_s
        waited += poll_s
    return True
