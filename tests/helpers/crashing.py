"""Ports that crash the allocator at a chosen step (a ``BaseException``, as a
Lambda timeout or kill would), for the fault tests."""

from __future__ import annotations

from typing import Any


class Crash(BaseException):
    """The Lambda dies here (not an Exception: nothing in the allocator catches it)."""


class CrashingEc2:
    """Passes calls through; dies right after the n-th successful ``action`` (``before``: right
    before the n-th, which then never reaches EC2)."""

    def __init__(self, inner: Any, action: str, after: int = 1, *, before: bool = False) -> None:
        self.inner, self.action, self.left, self.before = inner, action, after, before

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def count() -> None:
            self.left -= 1
            if self.left == 0:
                raise Crash(name)

        def call(**kw: Any) -> Any:
            if name == self.action and self.before:
                count()
            out = fn(**kw)
            if name == self.action and not self.before:
                count()
            return out

        return call


class CrashingLedger:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def record(self, *a: Any, **kw: Any) -> bool:
        self.inner.record(*a, **kw)
        raise Crash("record")


class CrashingSqs:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def send_message(self, **kw: Any) -> Any:
        self.inner.send_message(**kw)
        raise Crash("push")


class DeadLeases:
    """A crashed invocation never releases its leases."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def release(self, *a: Any) -> None:
        return None
