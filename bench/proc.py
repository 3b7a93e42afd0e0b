"""Processes in virtual time: generators that ``yield`` how many seconds to
wait, driven by :class:`emulated.clock.EventLoop` (SimPy-style, no threads, no
sleeping). Plus the AWS SDK's standard retryer and Cilium's client-side rate limiter,
which the baselines use around every EC2 call.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from emulated.clock import EventLoop

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


class StandardRetryer:
    """aws-sdk-go-v2's standard retryer (``aws/retry``), one per SDK client.

    * Attempts: ``max_attempts`` in all (``StandardOptions.MaxAttempts``;
      default 3, vpc-cni sets 10 through ``config.WithRetryMaxAttempts``).
    * Backoff after failed attempt ``i`` (1-based):
      ``ExponentialJitterBackoff.BackoffDelay`` — ``U[0,1) × 2^i`` seconds
      while ``i <= floor(log2(max_backoff_s))``, else exactly ``max_backoff_s``
      (20 s).
    * Retry quota (``ratelimit.TokenRateLimit``, ``DefaultRetryRateTokens``
      500): a retry takes ``retry_cost`` (5) tokens (``GetRetryToken``); when
      the quota cannot pay, the error is returned at once (no retry). A
      success on the first attempt gives back ``no_retry_increment`` (1); a
      success on a retry gives back that retry's cost. The quota never
      exceeds its size.
    """

    def __init__(
        self,
        max_attempts: int = 3,
        *,
        max_backoff_s: float = 20.0,
        quota: int = 500,
        retry_cost: int = 5,
        no_retry_increment: int = 1,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.max_attempts = max_attempts
        self.max_backoff_s = max_backoff_s
        self.quota_size = quota
        self.quota = quota
        self.retry_cost = retry_cost
        self.no_retry_increment = no_retry_increment
        self._max_backoff_attempts = int(math.log2(max_backoff_s))
        self.quota_refusals = 0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        if attempt > self._max_backoff_attempts:
            return self.max_backoff_s
        return rng.random() * float(1 << attempt)

    def take_retry_token(self) -> bool:
        """Pay for one retry from the quota; False (and no retry) when it cannot."""
        if self.quota < self.retry_cost:
            self.quota_refusals += 1
            return False
        self.quota -= self.retry_cost
        return True

    def on_success(self, *, retried: bool) -> None:
        """An attempt succeeded: give back the retry's cost, or the no-retry increment."""
        self.quota = min(self.quota_size, self.quota + (self.retry_cost if retried else self.no_retry_increment))


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
    retry: StandardRetryer,
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
            if (
                (code in THROTTLE_CODES or code in TRANSIENT_CODES)
                and attempt < retry.max_attempts
                and retry.take_retry_token()
            ):
                yield retry.delay(attempt, rng)
                continue
            raise
        yield latency()
        retry.on_success(retried=attempt > 1)
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
