"""What every helper of a seed's world sees of it: :class:`WorldView`, its
emulated AWS, its plan, its time and its record of faults and violations.

Each helper module (:mod:`simulation.node`, :mod:`simulation.clients`,
:mod:`simulation.hostile`, :mod:`simulation.events`, :mod:`simulation.checks`)
extends it with the few other attributes it reaches, in a protocol of its own;
:class:`simulation.world.SimWorld` satisfies them all (mypy checks it where the
world hands itself over), and none of them imports :mod:`simulation.world`.
"""

from __future__ import annotations

import random
from typing import Protocol

from emulated.clock import EventLoop
from emulated.ec2 import Ec2Emulator
from emulated.sqs import FastSqs
from simulation.schedule import SeedPlan


class WorldView(Protocol):
    @property
    def plan(self) -> SeedPlan: ...

    @property
    def loop(self) -> EventLoop: ...

    @property
    def emu(self) -> Ec2Emulator: ...

    @property
    def sqs(self) -> FastSqs: ...

    def now(self) -> float: ...

    def rng(self, purpose: str) -> random.Random:
        """The seed's random stream for one purpose."""
        ...

    def fault(self, kind: str, n: int = 1) -> None:
        """Count an injected fault."""
        ...

    def violation(self, invariant: str, detail: str) -> None:
        """Record a broken invariant (and stop the run, on the loop's thread)."""
        ...
