"""How the allocator runs a batch's independent nodes: one after the other (the bench and the
simulation: deterministic) or on a small reused thread pool (the Lambda function)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

Mapper = Callable[[Callable[[T], R], Sequence[T]], list[R]]


def serial_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """Run one after the other (the bench: deterministic)."""
    return [fn(i) for i in items]


class ThreadMapper:
    """Run independent nodes concurrently on a small, reused thread pool."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="warmpool-node")

    def __call__(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1:
            return [fn(i) for i in items]
        return list(self._pool.map(fn, items))
