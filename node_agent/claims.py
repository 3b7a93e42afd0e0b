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
        self.grants: dict[Key, frozenset[str]] = {}
        """Per claim: the keys found to be EC2's own assignment when it first came (the
        controller's ``_granted_by_ec2``, whose memory a restart loses). Checkpointed as
        ``grants`` (optional: absent, none, and the claim waits for IMDS's evidence)."""

    def __bool__(self) -> bool:
        return bool(self.waiting)

    @staticmethod
    def key(action: Claim) -> Key:
        return (action.eni_id, action.kind, tuple(action.ips), tuple(action.prefixes))

    def park(self, action: Claim, now: float, seq: int, grants: frozenset[str] = frozenset()) -> None:
        """Wait (again) for IMDS; a claim parked before keeps its first arrival and its grants."""
        key = self.key(action)
        first = self.waiting.get(key, (action, now, seq))[1]
        self.waiting[key] = (action, first, seq)
        self.grants[key] = self.grants.get(key, frozenset()) | grants

    def take(self) -> dict[Key, tuple[Claim, float, int]]:
        """Every waiting claim, no longer waiting (the caller parks again what is still missing)."""
        out, self.waiting = self.waiting, {}
        return out

    def grants_of(self, key: Key) -> frozenset[str]:
        return self.grants.get(key, frozenset())

    def keep_first(self, key: Key, first: float, seq: int) -> None:
        """A claim parked again after :meth:`take` keeps its first arrival and ``in_reply_to``."""
        if key in self.waiting:
            self.waiting[key] = (self.waiting[key][0], first, seq)

    def discard(self, key: Key) -> bool:
        """No longer waiting; True if it was."""
        self.grants.pop(key, None)
        return self.waiting.pop(key, None) is not None

    def encode(self) -> list[dict[str, Any]]:
        self.grants = {k: v for k, v in self.grants.items() if k in self.waiting}
        out = []
        for key, (a, first, seq) in self.waiting.items():
            entry: dict[str, Any] = {"action": a.model_dump(mode="json"), "first": first, "seq": seq}
            if self.grants.get(key):
                entry["grants"] = sorted(self.grants[key])
            out.append(entry)
        return out

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
                grants = frozenset(str(k) for k in raw.get("grants", ()))
                if not math.isfinite(first):
                    raise ValueError(f"first seen at {first}")
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError, ValidationError) as exc:
                dropped.append(str(exc))
                continue
            self.waiting[self.key(action)] = (action, first, seq)
            if grants:
                self.grants[self.key(action)] = grants
        return dropped
