"""The allocator's release book: what it has taken from an instance, authoritative over Describe.

EC2's Describe is eventually consistent with no documented bound: after an
``UnassignPrivateIpAddresses`` (or a detach and delete) a Describe may still show
the addresses on the ENI for a while. Planning from it, the allocator would hand
addresses it has just unassigned back to the node (a ``Reclaim``), and EC2 may give
them to another node meanwhile. So the allocator keeps its own record per instance,
written *before* each such call, and reads it with every report of the instance:

* an address or ENI in the book is gone, whatever Describe shows: never handed back,
  never counted in the node's pool, never unassigned again
  (:meth:`ReleaseBook.correct`);
* every answer to a report that still lists it (held, offered, or the ENI itself)
  says ``released``/``deleted`` again (:meth:`ReleaseBook.repeats`), so a lost or
  late answer is not needed;
* an entry goes when a report newer than it shows the agent has dropped it
  (:meth:`ReleaseBook.settle`), or when EC2 assigns the address to the instance again
  in answer to one of the allocator's own calls (:meth:`ReleaseBook.regranted`).

docs/allocator.md, "Offers, releases and stale Describe", argues why this is enough.
Pure: data in, data out; the stores (``warmpool.ports.ReleaseBookStore``) keep it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from warmpool import names
from warmpool.facts import EniFacts, NodeFacts
from warmpool.messages import PoolReport
from warmpool.planner import RepeatRelease

MAX_ENTRIES = 1024
"""Entries one instance's book may hold; a release that would pass it is not made (held)."""


@dataclass(frozen=True)
class Taken:
    """One thing the allocator took from the instance while serving report ``seq``."""

    eni_id: str
    key: str
    """An address or a /28 prefix; ``""`` for the ENI itself (detached and deleted)."""
    seq: int


@dataclass(frozen=True)
class ReleaseBook:
    """One instance's book. ``version`` is the store's (0: never written); a write is
    conditional on it, so two invocations never both act on one version."""

    version: int = 0
    taken: tuple[Taken, ...] = ()

    @property
    def keys(self) -> frozenset[str]:
        """Addresses and prefixes unassigned."""
        return frozenset(t.key for t in self.taken if t.key)

    @property
    def deleted(self) -> frozenset[str]:
        """ENIs detached and deleted."""
        return frozenset(t.eni_id for t in self.taken if not t.key)

    # --- what the planner sees ------------------------------------------------------

    def correct(self, facts: NodeFacts) -> NodeFacts:
        """EC2's facts as the allocator must plan on them: the book's addresses off their
        ENIs, and each deleted ENI seen as one warmpool may not touch (it may still hold
        its device slot while it detaches; its addresses count for nothing)."""
        if not self.taken:
            return facts
        keys, deleted = self.keys, self.deleted
        enis: list[EniFacts] = []
        for e in facts.enis:
            if e.eni.eni_id in deleted:
                eni = replace(e.eni, ips=(), prefixes=())
                enis.append(replace(e, eni=eni, tags={**e.tags, names.TAG_NO_MANAGE: "true"}))
            elif keys.intersection(e.eni.ips) or keys.intersection(e.eni.prefixes):
                eni = replace(
                    e.eni,
                    ips=tuple(ip for ip in e.eni.ips if ip not in keys),
                    prefixes=tuple(p for p in e.eni.prefixes if p not in keys),
                )
                enis.append(replace(e, eni=eni))
            else:
                enis.append(e)
        return facts.with_enis(tuple(enis))

    def repeats(self, report: PoolReport, offered: Iterable[str] = ()) -> tuple[RepeatRelease, ...]:
        """What the answer to ``report`` must say again: each entry the report still lists
        (``offered``: as in :meth:`settle`)."""
        if not self.taken:
            return ()
        listed = _listed(report) | set(offered)
        enis = {e.eni_id for e in report.enis} | {o.eni_id for o in report.release}
        out: list[RepeatRelease] = []
        for eni_id in sorted({t.eni_id for t in self.taken}):
            if eni_id in self.deleted:
                if eni_id in enis:
                    out.append(RepeatRelease(eni_id, deleted=True))
                continue
            mine = sorted(t.key for t in self.taken if t.eni_id == eni_id and t.key in listed)
            ips = tuple(k for k in mine if "/" not in k)
            pfx = tuple(k for k in mine if "/" in k)
            if ips or pfx:
                out.append(RepeatRelease(eni_id, ips, pfx))
        return tuple(out)

    # --- changes --------------------------------------------------------------------

    def settle(self, report: PoolReport, offered: Iterable[str] = (), shown: Iterable[str] = ()) -> ReleaseBook:
        """Without the entries a report newer than them shows the agent has dropped: an
        ENI it names nowhere; an address it names nowhere while it reports the address's
        ENI, or while EC2 no longer shows that ENI (``shown``: the ENI ids EC2's facts
        list). (An ENI the agent leaves out of a report, e.g. one in a device slot another
        took, says nothing about the addresses the agent holds on it.) ``offered``:
        addresses and prefixes of offers the allocator dropped from the report before
        planning (too old to act on), still the agent's."""
        if not self.taken:
            return self
        listed = _listed(report) | set(offered)
        named = {e.eni_id for e in report.enis} | {o.eni_id for o in report.release}
        seen = set(shown)

        def dropped(t: Taken) -> bool:
            if t.seq >= report.seq:
                return False
            if not t.key:
                return t.eni_id not in named
            return t.key not in listed and (t.eni_id in named or t.eni_id not in seen)

        keep = tuple(t for t in self.taken if not dropped(t))
        return self if len(keep) == len(self.taken) else replace(self, taken=keep)

    def take(self, eni_id: str, keys: Iterable[str], seq: int) -> ReleaseBook:
        """With these addresses/prefixes of ``eni_id`` (none: the ENI itself) taken for report ``seq``."""
        have = {(t.eni_id, t.key) for t in self.taken}
        new = [Taken(eni_id, k, seq) for k in (list(keys) or [""]) if (eni_id, k) not in have]
        return replace(self, taken=self.taken + tuple(new)) if new else self

    def regranted(self, keys: Iterable[str]) -> ReleaseBook:
        """Without these addresses/prefixes: EC2 has just assigned them to the instance again."""
        drop = set(keys)
        keep = tuple(t for t in self.taken if t.key not in drop)
        return self if len(keep) == len(self.taken) else replace(self, taken=keep)

    def full_after(self, more: int) -> bool:
        """``more`` entries would take the book past :data:`MAX_ENTRIES`."""
        return len(self.taken) + more > MAX_ENTRIES

    # --- the stored form ------------------------------------------------------------

    def dumps(self) -> str:
        return json.dumps([[t.eni_id, t.key, t.seq] for t in self.taken], separators=(",", ":"))

    @classmethod
    def loads(cls, raw: str, version: int) -> ReleaseBook:
        """The stored form back; raises ``ValueError`` on anything else (the caller must not
        then treat the book as empty)."""
        rows = json.loads(raw)
        if not isinstance(rows, list):
            raise ValueError("release book is not a list")
        taken = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3):
                raise ValueError(f"bad release book entry {row!r}")
            eni_id, key, seq = row
            if not (isinstance(eni_id, str) and isinstance(key, str) and isinstance(seq, int)):
                raise ValueError(f"bad release book entry {row!r}")
            taken.append(Taken(eni_id, key, seq))
        return cls(version=version, taken=tuple(taken))


def _listed(report: PoolReport) -> set[str]:
    """Every address and prefix the report names: the pool's and the offered."""
    out: set[str] = set()
    for e in report.enis:
        out.update(e.ips)
        out.update(e.prefixes)
    for o in report.release:
        out.update(o.ips)
        out.update(o.prefixes)
    return out
