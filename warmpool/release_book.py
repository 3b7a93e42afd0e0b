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
  in answer to one of the allocator's own calls (:meth:`ReleaseBook.regranted`). A
  deleted ENI is kept even then (a Describe that does not show it may answer from
  before it was attached), the oldest forgotten beyond :data:`MAX_DELETED_UNSEEN`.

Every address EC2 assigns to the instance in answer to the allocator's own calls leaves a
``given`` entry: the agent may refuse the ``assigned`` that says so (it answers a report
older than one that offered the address, whose answer might have unassigned it), or never
get it (the answer lost, the invocation dead before it pushed it), and then nothing else
would ever tell it (resync takes nothing IMDS lists that was released without a grant
naming it again): EC2 keeps the address on the instance and the agent never uses it. Every
answer to a report newer than the grant that does not name the address says ``assigned``
again (:class:`warmpool.calls.RepeatGrant`), until a report names it in the agent's pool
(the agent has it), the allocator takes it again, or EC2 no longer
shows its ENI.

docs/allocator.md, "Offers, releases and stale Describe", argues why this is enough.
Pure: data in, data out; the stores (``warmpool.ports.ReleaseBookStore``) keep it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from warmpool import names
from warmpool.calls import DeleteEni, RepeatGrant, RepeatRelease, UnassignAddresses
from warmpool.facts import EniFacts, NodeFacts
from warmpool.messages import PoolReport

GIVEN_TTL_MS = 1_800_000
"""A ``given`` entry is said again to reports up to 30 min newer than the grant (in the
agent's own seqs, milliseconds), then dropped: the older the grant, the likelier someone
else changed the ENI since (docs/safety.md, row 24); dropping one can leave a leak, never a
second holder."""

MAX_ENTRIES = 1024
"""Entries one instance's book may hold; a release that would pass it is not made (held)."""

MAX_DELETED_UNSEEN = 256
"""Entries a book keeps of ENIs a report names nowhere and EC2's facts do not show (deleted
ENIs and addresses taken from them; oldest forgotten first): a Describe that lags may answer
from before the ENI was attached, so its not showing one proves no detach done (simulation
seed 6952). EC2 never reuses an ENI id
(docs/safety.md, row 3): the entry of one truly gone never matches anything."""


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
    given: tuple[Taken, ...] = ()
    """Addresses EC2 assigned to the instance in answer to the allocator's own call while
    serving report ``seq``, until a report names them (the module docstring)."""
    epoch: int = 0
    """Raised by each answer to a report of a restored checkpoint (``RestoreChecked.epoch``):
    a report that carries a lower one (or none) was sent by a process from before that answer,
    and is never acted on (:meth:`fences`). A fence that does not rest on seq order: a wall clock
    set back across a restart gives the new process lower seqs than the old one sent."""

    raised_for: str = ""
    """The ``restore_wait`` of the ask whose answer last raised :attr:`epoch`: that same wait,
    asking again (its answer unsaid: deferred, throttled), is judged as before the raise."""
    raised_current: bool = False
    """The verdict of that ask (``RestoreChecked.current``), said again to the same wait asking
    again while the fence holds (:meth:`verdict_for`): from the raise on, the ledger and the book
    move only with reports of this wait (every report of a process before it is fenced), which
    say nothing against the copy; judged afresh, the wait's own recorded report made a current
    copy "not current" (review 4, R5)."""
    fenced_until: float = 0.0
    """Until when (the allocator's clock) the fence holds: the answer's time plus the oldest an
    offer may be to be acted on, and a margin for the containers' clocks. Every offer of a
    process before the answer was made before it, so none can be acted on after this; an agent
    rolled back to a version without ``epoch`` is served again from then on."""

    def epoch_before(self, report: PoolReport) -> int:
        """The epoch ``report``'s ask is judged against: the book's, or the one before it when
        this very wait's earlier ask raised it (its answer was never said)."""
        if self.raised_for and report.restore_wait == self.raised_for:
            return self.epoch - 1
        return self.epoch

    def verdict_for(self, report: PoolReport, now: float) -> bool | None:
        """The verdict already given to ``report``'s wait (:attr:`raised_current`), when this
        very wait raised the epoch and the fence still holds; None: judge it afresh."""
        if self.raised_for and report.restore_wait == self.raised_for and now < self.fenced_until:
            return self.raised_current
        return None

    def fences(self, report: PoolReport, now: float) -> bool:
        """Whether ``report`` was sent by a process from before the last restore check, while
        such a report could still carry an offer young enough to act on."""
        return report.restored_from is None and (report.epoch or 0) < self.epoch and now < self.fenced_until

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
                ips = tuple(ip for ip in e.eni.ips if ip not in keys)
                prefixes = tuple(p for p in e.eni.prefixes if p not in keys)
                # Kept out of the pool, not out of the ENI's slots: while Describe shows them EC2
                # may still hold them there (a booked address EC2 assigned again, to this or
                # another ENI of the instance, in a call whose answer was lost), and an Assign
                # planned into their slots is refused PrivateIpAddressLimitExceeded on every
                # re-plan (simulation seed 1099: the node's pods waited for good).
                held = len(e.eni.ips) - len(ips) + len(e.eni.prefixes) - len(prefixes)
                eni = replace(e.eni, ips=ips, prefixes=prefixes, held_slots=e.eni.held_slots + held)
                enis.append(replace(e, eni=eni))
            else:
                enis.append(e)
        return facts.with_enis(tuple(enis))

    def repeats(
        self,
        report: PoolReport,
        offered: Iterable[str] = (),
        attached: Iterable[str] = (),
        shown: Mapping[str, Iterable[str]] | None = None,
        hold: Collection[str] = (),
    ) -> tuple[RepeatRelease | DeleteEni | UnassignAddresses | RepeatGrant, ...]:
        """What the answer to ``report`` must say again: each entry the report still lists
        (``offered``: as in :meth:`settle`).

        A deleted ENI EC2 still shows attached (``attached``: the ENI ids its facts list on
        the instance) whose detach may never have been made (the invocation died between
        booking it and calling EC2) is deleted again rather than only said deleted, when
        the report offers it whole again (nothing of it in the pool, no address in use):
        the same ground as the first :class:`DeleteEni` (the executor checks the offer is
        still young enough right before the call). Said deleted alone, the agent would drop
        the ENI, never take it again, and EC2 would keep its addresses on the instance for
        good (a leak no one resolves). So is one the report names nowhere while EC2 still
        shows it attached and not detaching: the agent dropped it on the ``deleted``, and EC2
        answered a detach it did not do (the executor then needs no offer: the agent never
        takes the ENI again).

        Booked addresses likewise (``shown``: the addresses and prefixes EC2's facts, before
        :meth:`correct`, list per ENI): one the report offers again while EC2 still shows
        it on its ENI may never have been unassigned (the same death between the booking
        and the call), so it is unassigned again (:class:`UnassignAddresses`, on the same
        ground as the first: the agent offers it, quarantined), not only said released.
        One call per key, each naming the ENI, so it can take nothing from anywhere else;
        when Describe merely lags behind the first unassign, EC2 refuses it, and whatever
        refuses or stops it the executor says ``released`` (``functions/execute.py``).

        ``hold``: the ENIs whose offers the allocator's release rules hold now (an offer younger
        than its release delay, every offer of a damped instance: ``functions/releases.py``).
        A booked key offered on another of them is not unassigned from it in this answer (said
        released for its own ENI, as when EC2 does not show it there): the ordinary Unassign of
        that offer waits, and so does this one, for a later report (review of settle7, F3)."""
        if not self.taken and not self.given:
            return ()
        listed = _listed(report) | set(offered)
        enis = {e.eni_id for e in report.enis} | {o.eni_id for o in report.release}
        on_node = set(attached)
        fresh = {k for o in report.release for k in (*o.ips, *o.prefixes)}
        offered_on = {k: o.eni_id for o in report.release for k in (*o.ips, *o.prefixes)}
        out: list[RepeatRelease | DeleteEni | UnassignAddresses | RepeatGrant] = []
        for eni_id in sorted({g.eni_id for g in self.given}):
            # Said assigned again to a report newer than the grant that has the ENI and not
            # the address (never to an older one: the agent would rightly drop it).
            if eni_id not in enis:
                continue
            mine_given = [g for g in self.given if g.eni_id == eni_id and g.seq < report.seq]
            keys = sorted(g.key for g in mine_given if g.key not in listed)
            if keys:
                out.append(
                    RepeatGrant(eni_id, tuple(k for k in keys if "/" not in k), tuple(k for k in keys if "/" in k))
                )
        for eni_id in sorted({t.eni_id for t in self.taken}):
            if eni_id in self.deleted:
                if eni_id in on_node and (_offered_whole(report, eni_id) or eni_id not in enis):
                    out.append(DeleteEni(eni_id))
                elif eni_id in enis:
                    out.append(RepeatRelease(eni_id, deleted=True))
                continue
            mine = sorted(t.key for t in self.taken if t.eni_id == eni_id and t.key in listed)
            still = set(shown.get(eni_id, ())) if shown is not None else set()
            again = [k for k in mine if k in fresh and k in still]
            said = [k for k in mine if k not in again]
            # One call per key: EC2 refuses a whole Unassign when one of its keys is not on the
            # ENI, and the executor must know which of them EC2 still had.
            for k in again:
                out.append(
                    UnassignAddresses(eni_id, prefixes=(k,)) if "/" in k else UnassignAddresses(eni_id, ips=(k,))
                )
            # A booked key the report offers now on another ENI of the instance, where EC2's
            # facts show it: EC2 assigned it to the instance again in a call whose answer was
            # lost (a Create or Assign that took effect and erred), so no ``regranted`` unbooked
            # it. :meth:`correct` keeps it out of every ENI's pool, so no plan would ever take it
            # and EC2 would keep it on the node for good (simulation seed 1099). Unassigned from
            # that ENI, on the same ground as ``again`` (the agent offers it, quarantined; the
            # call names the ENI, so it takes nothing from anywhere else).
            for k in said:
                other = offered_on.get(k)
                if other is None or other == eni_id or shown is None or k not in set(shown.get(other, ())):
                    continue
                if other in hold:
                    continue
                out.append(UnassignAddresses(other, prefixes=(k,)) if "/" in k else UnassignAddresses(other, ips=(k,)))
            ips = tuple(k for k in said if "/" not in k)
            pfx = tuple(k for k in said if "/" in k)
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
        planning (too old to act on), still the agent's.

        A deleted ENI the report names nowhere and EC2 does not show is kept all the same
        (a lagging Describe may not show it yet; it may still be detaching), the oldest
        forgotten beyond :data:`MAX_DELETED_UNSEEN`.

        And without the ``given`` entries a report newer than them shows the agent has
        taken (it names the address in its pool), or whose ENI EC2 no longer shows, or that
        are older than :data:`GIVEN_TTL_MS`."""
        if not self.taken and not self.given:
            return self
        listed = _listed(report) | set(offered)
        named = {e.eni_id for e in report.enis} | {o.eni_id for o in report.release}
        seen = set(shown)

        # Entries of ENIs the report names nowhere and EC2's facts do not show (deleted ENIs,
        # and addresses taken from them): kept, for a lagging Describe may not show an ENI
        # still detaching, or one it answers for from before its attach (seed 6952; for the
        # addresses, a hostile review of that fix); the oldest go past the bound.
        unseen = [t for t in self.taken if t.eni_id not in named and t.eni_id not in seen]
        unseen = sorted((t for t in unseen if t.seq < report.seq), key=lambda t: t.seq)
        forget = set(unseen[: max(0, len(unseen) - MAX_DELETED_UNSEEN)])

        def dropped(t: Taken) -> bool:
            if t.seq >= report.seq:
                return False
            if t.eni_id not in named and t.eni_id not in seen:
                return t in forget
            if not t.key:  # kept while EC2 still shows it on the instance (a detach not done)
                return False
            return t.key not in listed and t.eni_id in named

        pooled = {k for e in report.enis for k in (*e.ips, *e.prefixes)}

        def had(g: Taken) -> bool:
            # In the pool, not only offered: a late ``released`` of an older unassign can
            # still drop an offered address the agent took again from IMDS (seed 149).
            too_old = report.seq - g.seq > GIVEN_TTL_MS
            return g.eni_id not in seen or too_old or (g.seq < report.seq and g.key in pooled)

        keep = tuple(t for t in self.taken if not dropped(t))
        given = tuple(g for g in self.given if not had(g))
        if len(keep) == len(self.taken) and len(given) == len(self.given):
            return self
        return replace(self, taken=keep, given=given)

    def take(self, eni_id: str, keys: Iterable[str], seq: int) -> ReleaseBook:
        """With these addresses/prefixes of ``eni_id`` (none: the ENI itself) taken for report
        ``seq``; a ``given`` entry of what is taken goes (the allocator takes it again)."""
        keys = list(keys)
        have = {(t.eni_id, t.key) for t in self.taken}
        new = [Taken(eni_id, k, seq) for k in (keys or [""]) if (eni_id, k) not in have]
        drop = set(keys)
        given = tuple(g for g in self.given if not (g.eni_id == eni_id and (not keys or g.key in drop)))
        if not new and len(given) == len(self.given):
            return self
        return replace(self, taken=self.taken + tuple(new), given=given)

    def regranted(self, grants: Iterable[tuple[str, str]], seq: int) -> ReleaseBook:
        """EC2 has just assigned these (``grants``: (ENI id, key)) to the instance, serving
        report ``seq``: booked ones are no longer taken, and each is a ``given`` entry, said
        again until the agent shows it has it (the module docstring). Beyond
        :data:`MAX_ENTRIES` given entries the oldest go (only a repeat is lost)."""
        grants = list(grants)
        if not grants:
            return self
        drop = {k for _, k in grants}
        keep = tuple(t for t in self.taken if t.key not in drop)
        given = tuple(g for g in self.given if g.key not in drop) + tuple(Taken(e, k, seq) for e, k in grants)
        return replace(self, taken=keep, given=given[-MAX_ENTRIES:])

    def full_after(self, more: int) -> bool:
        """``more`` entries would take the book past :data:`MAX_ENTRIES`."""
        return len(self.taken) + more > MAX_ENTRIES

    # --- the stored form ------------------------------------------------------------

    def dumps(self) -> str:
        """A list of ``[eni_id, key, seq]`` rows; with ``given`` entries, an object of both
        lists (an older reader then fails to parse it, and its nodes wait: never unsafe)."""
        taken = [[t.eni_id, t.key, t.seq] for t in self.taken]
        if not self.given and not self.epoch:
            return json.dumps(taken, separators=(",", ":"))
        given = [[g.eni_id, g.key, g.seq] for g in self.given]
        doc: dict[str, object] = {"taken": taken, "given": given}
        if self.epoch:
            doc["epoch"] = self.epoch
            doc["fenced_until"] = self.fenced_until
            doc["raised_for"] = self.raised_for
            if self.raised_current:
                doc["raised_current"] = True
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def loads(cls, raw: str, version: int) -> ReleaseBook:
        """The stored form back; raises ``ValueError`` on anything else (the caller must not
        then treat the book as empty)."""
        doc = json.loads(raw)
        if isinstance(doc, dict):
            fence = {"taken", "given", "epoch", "fenced_until", "raised_for"}
            if set(doc) not in ({"taken", "given"}, fence, fence | {"raised_current"}):
                raise ValueError(f"bad release book keys {sorted(doc)!r}")
            epoch, until = doc.get("epoch", 0), doc.get("fenced_until", 0.0)
            if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
                raise ValueError(f"bad release book epoch {epoch!r}")
            if not isinstance(until, int | float) or isinstance(until, bool) or not 0 <= until < 1e11:
                raise ValueError(f"bad release book fence {until!r}")
            raised_for = doc.get("raised_for", "")
            if not isinstance(raised_for, str) or len(raised_for) > 64:
                raise ValueError(f"bad release book raise {raised_for!r}")
            raised_current = doc.get("raised_current", False)
            if raised_current is not True and raised_current is not False:
                raise ValueError(f"bad release book verdict {raised_current!r}")
            return cls(
                version=version,
                taken=_rows(doc["taken"]),
                given=_rows(doc["given"]),
                epoch=epoch,
                fenced_until=float(until),
                raised_for=raised_for,
                raised_current=raised_current,
            )
        return cls(version=version, taken=_rows(doc))


def _rows(rows: object) -> tuple[Taken, ...]:
    if not isinstance(rows, list):
        raise ValueError("release book is not a list")
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3):
            raise ValueError(f"bad release book entry {row!r}")
        eni_id, key, seq = row
        if not (isinstance(eni_id, str) and isinstance(key, str) and isinstance(seq, int)):
            raise ValueError(f"bad release book entry {row!r}")
        out.append(Taken(eni_id, key, seq))
    return tuple(out)


def _offered_whole(report: PoolReport, eni_id: str) -> bool:
    """The report offers ``eni_id`` and keeps nothing of it: no address or prefix in the pool,
    none in use."""
    offer = [o for o in report.release if o.eni_id == eni_id and (o.ips or o.prefixes)]
    mine = [e for e in report.enis if e.eni_id == eni_id]
    return bool(offer) and all(not e.ips and not e.prefixes and e.assigned == 0 for e in mine)


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
