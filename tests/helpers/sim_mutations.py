"""What the simulation's mutation tests share: applying a change to every agent of a world."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def on_every_agent(w: Any, change: Callable[[Any], None]) -> None:
    """Apply ``change`` to every agent, after each of its (re)starts, and to nodes that join later."""

    def wrap(a: Any) -> None:
        boot = a.boot

        def booted() -> None:
            boot()
            change(a)

        a.boot = booted
        change(a)

    for a in w.agents.values():
        wrap(a)
    join = w.join

    def joined(name: str, itype: str, *launch: Any) -> Any:  # launch: the EFA-only slots
        a = join(name, itype, *launch)
        wrap(a)
        return a

    w.join = joined
