"""Claims waiting for IMDS: ``attached``/``assigned`` actions of results whose
addresses (or ENI) IMDS does not list yet.

A result is acknowledged once applied, so what it claims must survive a restart:
the waiting claims are written to the checkpoint (the datastore's ``parked``
part, in the form :meth:`ParkedClaims.encode` gives) and read back at start.
The controller re-checks them against IMDS on every tick until they show up
or time out.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from warmpool.messages import Assigned, Attached

Claim = Attached | Assigned
Key = tuple[object, ...]


class ParkedClaims:
    """Claims by what they claim (several may name one ENI: an ``attached`` and a later
    ``assigned`` for the same still-attaching ENI both wait), each with its first
    arrival and the ``in_reply_to`` of its result."""

    def __init__(self) -> None:
        self.waiting: dict[Key, tuple[Claim, float, int]] = {}

    def __bool__(self) -> bool:
        return bool(self.waiting)

    @staticmethod
    def key(action: Claim) -> Key:
        return (action.eni_id, action.kind, tuple(action.ips), tuple(action.prefixes))

    def park(self, action: Claim, now: float, seq: int) -> None:
        """Wait (again) for IMDS; a claim parked before keeps its first arrival."""
        key = self.key(action)
        first = self.waiting.get(key, (action, now, seq))[1]
        self.waiting[key] = (action, first, seq)

    def take(self) -> dict[Key, tuple[Claim, float, int]]:
        """Every waiting claim, no longer waiting (the caller parks again what is still missing)."""
        out, self.waiting = self.waiting, {}
        return out

    def keep_first(self, key: Key, first: float, seq: int) -> None:
        """A claim parked again after :meth:`take` keeps its first arrival and ``in_reply_to``."""
        if key in self.waiting:
            self.waiting[key] = (self.waiting[key][0], first, seq)

    def encode(self) -> list[dict[str, Any]]:
        return [
            {"action": a.model_dump(mode="json"), "first": first, "seq": seq} for a, first, seq in self.waiting.values()
        ]

    def load(self, parked: list[dict[str, Any]]) -> list[str]:
        """Read back what :meth:`encode` wrote; returns why each unreadable claim was dropped
        (only a shortcut: the periodic resync finds what IMDS shows anyway)."""
        dropped = []
        for raw in parked:
            try:
                data = raw["action"]
                action: Claim = (
                    Attached.model_validate(data) if data.get("kind") == "attached" else Assigned.model_validate(data)
                )
                first = float(raw["first"])
                seq = int(raw.get("seq", -1))  # unknown: the oldest (any newer release wins)
                if not math.isfinite(first):
                    raise ValueError(f"first seen at {first}")
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError, ValidationError) as exc:
                dropped.append(str(exc))
                continue
            self.waiting[self.key(action)] = (action, first, seq)
        return dropped
