"""Metrics as plain counters the logic adds to; the handler flushes them as EMF.

Logic never talks to Powertools: it adds to a :class:`Tally` (thread-safe),
the handler turns the tally into CloudWatch EMF, the bench and tests read it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator

Dims = tuple[tuple[str, str], ...]


class Tally:
    """Counters keyed by metric name and dimensions, with a unit each."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, Dims], float] = defaultdict(float)
        self._units: dict[str, str] = {}
        self._samples: dict[str, list[float]] = defaultdict(list)
        self._lock = threading.Lock()

    def add(self, name: str, value: float = 1, unit: str = "Count", **dims: str) -> None:
        key = (name, tuple(sorted(dims.items())))
        with self._lock:
            self._values[key] += value
            self._units[name] = unit

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None:
        """One sample of a distribution (latency): kept individually, not summed."""
        with self._lock:
            self._samples[name].append(value)
            self._units[name] = unit

    def samples(self, name: str) -> list[float]:
        with self._lock:
            return list(self._samples.get(name, ()))

    def sample_items(self) -> Iterator[tuple[str, list[float], str]]:
        with self._lock:
            snapshot = {k: list(v) for k, v in self._samples.items()}
        for name, vals in snapshot.items():
            yield name, vals, self._units.get(name, "Milliseconds")

    def get(self, name: str, **dims: str) -> float:
        """The value for exactly these dimensions (no dimensions: the sum over all)."""
        with self._lock:
            if dims:
                return self._values.get((name, tuple(sorted(dims.items()))), 0.0)
            return sum(v for (n, _), v in self._values.items() if n == name)

    def items(self) -> Iterator[tuple[str, Dims, float, str]]:
        with self._lock:
            snapshot = list(self._values.items())
        for (name, dims), v in snapshot:
            yield name, dims, v, self._units.get(name, "Count")

    def drain(self) -> Tally:
        """Move everything into a new tally and start again (one flush per invocation)."""
        out = Tally()
        with self._lock:
            out._values, self._values = self._values, defaultdict(float)
            out._samples, self._samples = self._samples, defaultdict(list)
            out._units = dict(self._units)
        return out

    def as_dict(self) -> dict[str, float]:
        """``{"Name" or "Name[k=v,...]": value}`` (for logs, tests, the bench)."""
        out: dict[str, float] = {}
        for name, dims, v, _ in self.items():
            key = name + ("[" + ",".join(f"{k}={x}" for k, x in dims) + "]" if dims else "")
            out[key] = v
        return out
