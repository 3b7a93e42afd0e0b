"""What every strategy provides to the runner."""

from __future__ import annotations

from typing import Protocol

from bench.world import BenchWorld


class Strategy(Protocol):
    name: str

    def __init__(self, world: BenchWorld) -> None: ...

    def start(self) -> None:
        """Schedule the scenario's events on the world with this strategy's handlers."""
        ...

    def busy(self) -> bool:
        """True while work is still in flight (keeps the run from settling)."""
        ...

    def notes(self) -> list[str]: ...
