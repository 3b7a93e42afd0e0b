"""Eventually consistent Describe: an opt-in view of the past for the emulator.

AWS documents that the EC2 API is eventually consistent (a Describe may not yet show
the effect of a call that succeeded, and may not yet show a resource just created)
and gives no bound. With ``Ec2Config.describe_lag_max_s > 0``, each
``DescribeNetworkInterfaces`` and ``DescribeInstances`` answers from the ENIs and
instances as they were ``lag`` seconds before, ``lag`` drawn per call (seeded)
between ``describe_lag_min_s`` and ``describe_lag_max_s``; min = max gives a fixed
lag. Each call draws again, so two Describes in a row may even go back in time.
Mutations, IMDS and every other action see the present. Off (0) by default;
``Ec2Emulator.set_describe_lag`` turns it on or off mid-run (a fault window), and
Describe never goes back past the moment it was turned on.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .state import EmulatedEni, Instance

if TYPE_CHECKING:
    from .registry import ResourceState

LAGGED = frozenset({"DescribeNetworkInterfaces", "DescribeInstances"})
"""The actions answered from the past."""


def _eni(e: EmulatedEni) -> EmulatedEni:
    """A copy no later change reaches (every mutable member copied)."""
    att = None if e.attachment is None else replace(e.attachment)
    return replace(
        e,
        secondary=list(e.secondary),
        prefixes=list(e.prefixes),
        tags=dict(e.tags),
        groups=list(e.groups),
        attachment=att,
    )


def _inst(i: Instance) -> Instance:
    return replace(i, tags=dict(i.tags), slots=dict(i.slots))


class _Past:
    """The emulator as Describe reads it, with the ENIs and instances of a past moment."""

    def __init__(self, emu: ResourceState, enis: dict[str, EmulatedEni], instances: dict[str, Instance]) -> None:
        self._emu = emu
        self.enis = enis
        self.instances = instances

    def __getattr__(self, name: str) -> Any:
        return getattr(self._emu, name)


class DescribeLag:
    """Snapshots of the ENIs and instances after each change, and the drawn view of the past."""

    def __init__(self, lo: float, hi: float, seed: int) -> None:
        if not 0.0 <= lo <= hi:
            raise ValueError(f"describe lag bounds must satisfy 0 <= min <= max, got {lo}, {hi}")
        self.lo, self.hi = lo, hi
        self._rng = random.Random(seed)
        self._times: list[float] = []
        self._states: list[tuple[dict[str, EmulatedEni], dict[str, Instance]]] = []
        self.lags: list[float] = []
        """Every lag drawn, in order (for tests and figures)."""

    def record(self, emu: ResourceState, now: float) -> None:
        """The state after a change at ``now``; snapshots no view can reach any more are dropped."""
        self._times.append(now)
        self._states.append(
            ({k: _eni(e) for k, e in emu.enis.items()}, {k: _inst(i) for k, i in emu.instances.items()})
        )
        keep = max(0, bisect.bisect_right(self._times, now - self.hi) - 1)
        if keep:
            del self._times[:keep]
            del self._states[:keep]

    def view(self, emu: ResourceState, now: float) -> Any:
        """The emulator as one lagged Describe sees it: the newest snapshot at or before ``now - lag``
        (at the oldest, the first: the state when the lag was turned on)."""
        lag = self._rng.uniform(self.lo, self.hi)
        self.lags.append(lag)
        i = max(0, bisect.bisect_right(self._times, now - lag) - 1)
        enis, instances = self._states[i]
        return _Past(emu, enis, instances)
