"""Recovered holders: addresses held for pods known only from the host, after the
checkpoint was lost or damaged.

The agent rebuilds: IMDS says which addresses are attached, the host says which
of them pods still use (their wiring left a ``/32`` route via a host veth). Such an
address is held by a *recovered holder*, keyed by that veth's name (a hash of
the container id and interface, so a later DEL, CHECK or repeated ADD finds it
again). Where the host cannot tell (no kernel wiring), every attached address
is held by :data:`UNKNOWN_HOLDER` until released explicitly. Recovered holders
count as in use everywhere (never handed out, quarantined or offered back) and
are checkpointed, even for addresses not (yet) attached, since IMDS may lag.

:class:`RecoveredHolders` is the part of :class:`node_agent.datastore.Datastore`
that keeps them (a mixin over the datastore's state, under its lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from node_agent.offers import quarantined
from node_agent.records import UNKNOWN_HOLDER, Addr, Assignment, EniRecord, RecoveredHolder

HELD_OFFERS = "held_offers"
"""Meta key: the addresses a start's hold of every address (:meth:`RecoveredHolders.hold_all`) took
while they were on offer: a restored copy's quarantined ones (``node_agent.agent.hold_doubtful``;
review 15, Q1), or after a rebuild every free one, offered as of unknown origin a moment before
(``PoolController._forget_offers``). The hold keeps them from pods and from new offers; the offer
the process before may have made stands, and the allocator may answer it by unassigning them
(the simulation's seed 1509). The simulation's check takes that as an answered offer; the agent,
which cannot tell it from an older copy's address handed back since and carried by a pod the hold
stands for, still raises its alarm and counts it apart (``PoolController._apply_release``, review
24). Cleared when the hold ends (``node_agent.agent.lift_unfounded_holds``)."""


class RecoveredHolders:
    """Recovered holders of :class:`node_agent.datastore.Datastore` (see the module docstring)."""

    _lock: threading.RLock
    _enis: dict[str, EniRecord]
    _ip_eni: dict[str, str]
    _owner: dict[tuple[str, str], str]
    _recovered: dict[str, tuple[str, float]]
    """Address -> (recovered holder, since); checkpointed, attached or not."""
    changed: threading.Event
    meta: dict[str, Any]

    def _save(self) -> None:
        raise NotImplementedError

    def _let_go(self, a: Addr, now: float) -> None:
        """The address has left its recovered holder: into cooldown, or offered back as of
        unknown origin (:meth:`node_agent.datastore.Datastore._let_go`)."""
        raise NotImplementedError

    def _unnote_held_offers(self, ips: Iterable[str]) -> None:
        """These addresses leave the ``?`` hold (or the node): no longer a held offer
        (:data:`HELD_OFFERS` names only addresses held so since the hold took them from the
        offers). The caller saves."""
        noted = self.meta.get(HELD_OFFERS)
        if not noted:
            return
        gone = set(ips)
        rest = [ip for ip in noted if ip not in gone]
        if len(rest) != len(noted):
            self.meta[HELD_OFFERS] = rest or None

    def recover(self, holders: dict[str, str], now: float) -> list[str]:
        """Mark each ``ip -> holder`` (host veth name) as in use by a recovered holder.

        Addresses not attached yet are remembered and held as soon as they are
        added (IMDS may lag). An address a known pod holds stays the pod's.
        Returns notes naming what was recovered.
        """
        notes: list[str] = []
        with self._lock:
            owned = set(self._owner.values())
            for ip, holder in sorted(holders.items()):
                if ip in owned or not holder or holder == UNKNOWN_HOLDER:
                    continue
                self._recovered[ip] = (holder, now)
                self._unnote_held_offers((ip,))
                eni_id = self._ip_eni.get(ip)
                if eni_id is not None:
                    a = self._enis[eni_id].addrs[ip]
                    a.recovered, a.assigned_at, a.freed_at, a.quarantined_at = holder, now, None, None
                notes.append(f"{ip} held by {holder}" + ("" if eni_id else " (not attached yet)"))
            if notes:
                self._save()
                self.changed.set()
        return notes

    def hold_all(self, now: float) -> int:
        """Every attached address no pod holds becomes held by :data:`UNKNOWN_HOLDER`; returns how many.

        The rebuild's answer when the host cannot say which addresses pods use. Those on offer
        are noted (:data:`HELD_OFFERS`, with any noted before): their offer stands.
        """
        with self._lock:
            # what is offered (a /28 only whole: review 24, H2), and what an earlier hold noted
            # that is still held so (H4: never a note of an address that left the hold)
            offered: set[str] = set()
            for eni_id, (ips, pfx) in quarantined(self._enis.values()).items():
                members = self._enis[eni_id].by_prefix() if pfx else {}
                offered |= {*ips, *(a.ip for p in pfx for a in members.get(p, ()))}
            before = self._still_held_offers()
            n = self._hold_unknown_where(lambda a: True, now)
            noted = sorted(offered | before)
            if noted != (self.meta.get(HELD_OFFERS) or []):
                self.meta[HELD_OFFERS] = noted or None
                self._save()
            return n

    def _still_held_offers(self) -> set[str]:
        """The noted held offers (:data:`HELD_OFFERS`) still attached and held by ``?`` alone."""
        out: set[str] = set()
        for ip in self.meta.get(HELD_OFFERS) or ():
            eni_id = self._ip_eni.get(ip)
            a = self._enis[eni_id].addrs.get(ip) if eni_id is not None else None
            if a is not None and a.recovered == UNKNOWN_HOLDER and not a.container_id:
                out.add(ip)
        return out

    def _prune_held_offers(self) -> None:
        """After a restore: the notes of addresses no longer held by ``?`` alone go (a checkpoint
        an agent from before the notes wrote back, the hold ended and the key kept: review 24,
        H4). The caller saves."""
        noted = self.meta.get(HELD_OFFERS)
        if noted:
            kept = self._still_held_offers()
            rest = [ip for ip in noted if ip in kept]
            if len(rest) != len(noted):
                self.meta[HELD_OFFERS] = rest or None

    def hold_unknown(self, keys: set[str], now: float) -> int:
        """:meth:`hold_all` for ``keys`` alone (addresses, or /28s: each member); returns how many."""
        return self._hold_unknown_where(lambda a: a.ip in keys or bool(a.prefix and a.prefix in keys), now)

    def _hold_unknown_where(self, pick: Callable[[Addr], bool], now: float) -> int:
        with self._lock:
            n = 0
            for eni in self._enis.values():
                for a in eni.addrs.values():
                    if not a.in_use and pick(a):
                        a.recovered, a.assigned_at, a.freed_at, a.quarantined_at = UNKNOWN_HOLDER, now, None, None
                        self._recovered[a.ip] = (UNKNOWN_HOLDER, now)
                        n += 1
            if n:
                self._save()
            return n

    def release_recovered(self, holder: str, now: float) -> list[Assignment]:
        """The recovered holder is gone (CNI DEL, or the unknown holders' grace passed):
        its addresses enter cooldown, or, one EC2 was said to have released with no grant
        since, are offered back as of unknown origin (:meth:`_let_go`). Idempotent; returns
        the attached addresses let go."""
        with self._lock:
            out: list[Assignment] = []
            ips = [ip for ip, (h, _) in self._recovered.items() if h == holder]
            self._unnote_held_offers(ips)
            for ip in sorted(ips):
                del self._recovered[ip]
                eni_id = self._ip_eni.get(ip)
                if eni_id is not None:
                    a = self._enis[eni_id].addrs[ip]
                    if a.recovered == holder:
                        a.recovered = ""
                        self._let_go(a, now)
                        out.append(Assignment(ip, eni_id))
            if ips:
                self._save()
                self.changed.set()
            return out

    def recovered_holder(self, ip: str) -> str | None:
        """Who holds ``ip`` as a recovered holder, if anyone."""
        with self._lock:
            got = self._recovered.get(ip)
            return got[0] if got is not None else None

    def lookup_recovered(self, holder: str) -> Assignment | None:
        """The attached address a recovered holder holds, if any."""
        with self._lock:
            for ip, (h, _) in sorted(self._recovered.items()):
                eni_id = self._ip_eni.get(ip)
                if h == holder and eni_id is not None:
                    return Assignment(ip, eni_id)
            return None

    def recovered_holders(self) -> list[RecoveredHolder]:
        with self._lock:
            return [
                RecoveredHolder(h, ip, self._ip_eni.get(ip, ""), since)
                for ip, (h, since) in sorted(self._recovered.items())
            ]

    def _take_recovered(self, holder: str) -> tuple[EniRecord, Addr] | None:
        """The attached address recovered for ``holder``, now no longer recovered (the caller assigns it)."""
        for ip, (h, _) in sorted(self._recovered.items()):
            eni_id = self._ip_eni.get(ip)
            if h == holder and eni_id is not None:
                del self._recovered[ip]
                self._unnote_held_offers((ip,))
                return self._enis[eni_id], self._enis[eni_id].addrs[ip]
        return None
