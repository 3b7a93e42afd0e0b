"""The node's address book: ENIs, their addresses and prefixes, which pod
holds what, cooldown, quarantine, and CNI ADDs left waiting.

Pure and clock-injected: every method that depends on time takes ``now``.
No sockets, files or threads are needed to build one; persistence goes
through a :class:`CheckpointStore` port (``None`` = no checkpoint, as in the
bench). Thread-safe: the CNI server and the controller share one instance.

Every change that matters (an address handed out or given back, ENIs and
addresses added or removed, quarantine) is checkpointed *before* the method
returns, so an address is recorded before anyone is told about it. A write
that fails (``ENOSPC``, ``EIO``) raises :class:`CheckpointWriteError` with the
change made in memory: the datastore is then *dirty* until a later write
succeeds (the next change, or :meth:`Datastore.flush`, which the agent's loop
calls). While it is dirty nothing may leave the agent that depends on it: the
CNI service answers no ADD, the controller sends no report and acknowledges no
result (each calls :meth:`Datastore.flush` first). Memory and disk never differ
silently.

Kept in their own modules: the records it holds (:mod:`node_agent.records`),
the checkpoint's stores and format (:mod:`node_agent.checkpoint`), recovered
holders after a checkpoint rebuild (:mod:`node_agent.recovery`), what to release
and what is quarantined (:mod:`node_agent.offers`), and the memory of recent EC2
results IMDS may not show yet (:mod:`node_agent.recent_results`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from node_agent import offers
from node_agent.checkpoint import (
    CheckpointError,
    CheckpointFile,
    CheckpointStore,
    CheckpointWriteError,
    check_version,
    encode,
    parse,
)
from node_agent.recent_results import RecentResults
from node_agent.records import (
    UNKNOWN_HOLDER,
    UNROUTED_HOLDER,
    Addr,
    Assignment,
    Counts,
    EniInfo,
    EniRecord,
    PodRecord,
)
from node_agent.recovery import HELD_OFFERS as HELD_OFFERS
from node_agent.recovery import RecoveredHolders


def _held_unknown(a: Addr) -> bool:
    """Held by :data:`UNKNOWN_HOLDER` alone: no pod's record, no holder named after a link."""
    return a.recovered == UNKNOWN_HOLDER and not a.container_id


def _held_for_no_pod(a: Addr) -> bool:
    """Held by :data:`UNKNOWN_HOLDER` or :data:`UNROUTED_HOLDER` alone: a start's reading that some
    pod may carry the address, no pod's record, no holder named after a link."""
    return a.recovered in (UNKNOWN_HOLDER, UNROUTED_HOLDER) and not a.container_id


def _slot(e: EniRecord) -> tuple[int, int]:
    return (e.info.network_card, e.info.device_index)


ARRIVALS_KEPT = 1024
"""The most recent ADDs :meth:`Datastore.arrivals` remembers (more than any node's pods)."""
PENDING_LINGER_S = 30.0
"""How long a pod whose waiting ADD's sandbox was DELeted still counts as waiting. containerd
DELs a sandbox whose ADD failed at once (``RunPodSandbox`` in ``internal/cri/server/sandbox_run.go``
defers the network's teardown) and kubelet makes the pod's next sandbox after
``wait.Jitter(10 s, 0.5)``, 10 to 15 s (``completeWork`` in ``pkg/kubelet/pod_workers.go``); 30 s
covers that and the next sandbox's creation. A pod deleted meanwhile is over-counted this long."""
SUPERSEDED_KEEP_S = 900.0
"""How long a given-up sandbox's ADD is remembered as superseded when no DEL comes: longer than
the longest ADD the agent runs (``WARMPOOL_ADD_WAIT_S`` is at most 600 s)."""
UNKNOWN_ON_RELEASE = "unknown_on_release"
"""Meta key: addresses (or /28 prefixes) whose release quarantines them as of unknown origin
(``node_agent.controller.UNKNOWN_ON_RELEASE_META``)."""
RELEASED_UNKNOWN = "released_unknown"
"""Meta key: keys :meth:`Datastore.release` quarantined so, for the controller to mark."""
HOLD_ON_RELEASE = "hold_on_release"
"""Meta key: address -> recovered holder. The release of the pod record holding one of these
addresses hands it to that holder instead of freeing it: a restored pod's record the host does not
show as that pod's, for an address another running pod may carry
(``node_agent.agent.doubtful_records``; review 14, O1)."""
FAILED_ADD_HOLDS = "failed_add_holds"
"""Meta key: recovered holder -> ``[container id, ifname, network]`` of the ADD whose wiring and
teardown both failed, its address held for the attachment's veth (``CniService._hold_for_veth``):
what CNI GC needs to release it once the runtime no longer lists the attachment (review 23, G1)."""
HOLD_REASON = "hold_reason"
"""Meta key: the links a start's holds stand for (``netlink`` mode): the pod veths with no route
when the hold of every address or an ``unrouted`` holder began (``node_agent.agent.note_hold_reason``).
Their pods may carry any address; each DEL takes its attachment's veth out
(``CniService._end_holds_of``), and once none is left the holds end
(``node_agent.agent.lift_unfounded_holds``)."""


class Datastore(RecoveredHolders):
    """Addresses per ENI and who holds them. See the module docstring."""

    def __init__(
        self,
        cooldown_s: float = 30.0,
        pending_ttl_s: float = 120.0,
        checkpoint: CheckpointStore | None = None,
    ) -> None:
        self.cooldown_s = cooldown_s
        self.pending_ttl_s = pending_ttl_s
        self._store = checkpoint
        self._loading = False
        self._lock = threading.RLock()
        self._enis: dict[str, EniRecord] = {}
        self._owner: dict[tuple[str, str], str] = {}  # (container, ifname) -> ip
        self._ip_eni: dict[str, str] = {}
        self._pending: dict[tuple[str, str], float] = {}
        self._pending_pod: dict[tuple[str, str], tuple[str, str]] = {}
        """The pod and interface a waiting ADD is for (``namespace/name`` from its ``CNI_ARGS``,
        ``CNI_IFNAME``), when it named the pod: one address each, whatever the sandbox."""
        self._superseded: dict[tuple[str, str], float] = {}
        """Attachments (container, ifname) whose waiting ADD a later sandbox of the same pod's
        interface was served over (when): that sandbox is given up (kubelet makes a pod's
        sandboxes one after another), so its ADD, still looping, neither counts nor takes an
        address (review 30, F1). Kept until its DEL, or :data:`SUPERSEDED_KEEP_S`."""
        self._lingering: dict[tuple[str, str], float] = {}
        """Pods' interfaces whose waiting ADD's sandbox was DELeted (when): counted as waiting for
        :data:`PENDING_LINGER_S`, through the runtime's back-off to the pod's next sandbox."""
        self._arrivals: deque[float] = deque(maxlen=ARRIVALS_KEPT)
        """When this process gave a pod a free address (:meth:`arrivals`), newest last."""
        self._recovered: dict[str, tuple[str, float]] = {}  # ip -> (holder, since)
        self._recent = RecentResults()
        """What EC2 results said that IMDS may not show yet (checkpointed)."""
        self._unlisted: set[str] = set()
        """Addresses a pod holds that IMDS stopped listing (the last resync): kept for the pod,
        never handed out again, dropped by the first resync after the pod is gone."""
        self._listed_elsewhere: set[str] = set()
        """Of :attr:`_unlisted`: those the last resync's IMDS read lists on another of the node's
        ENIs (EC2 moved the address; the record names the ENI it had): on the node still."""
        self._unseen: set[str] = set()
        """ENIs the last resync's IMDS read did not list, kept (held) for the pods on them."""
        self._parked: list[dict[str, Any]] = []
        """Claims (``assigned``/``attached`` results) waiting for IMDS to show them, as the controller wrote them."""
        self.meta: dict[str, Any] = {}
        self._dirty = False
        """Memory is ahead of the checkpoint: a write failed (or a batch is open)."""
        self.save_errors = 0
        """Checkpoint writes that failed."""
        self.restored_unchecksummed = False
        """The last :meth:`restore` read a checkpoint without a checksum (an older agent's)."""
        self.changed = threading.Event()
        """Set on every change; the agent's loop may wait on it."""
        self._withheld = False
        """No free address goes to a pod (:meth:`withhold`); an ADD waits as when none is free."""

    # --- ENIs and addresses --------------------------------------------------

    def withhold(self, on: bool) -> None:
        """Hand no free address to a pod while ``on`` (a pod keeps what it holds, a repeated ADD
        gets its address back, a DEL frees as ever): the controller's wait for the allocator to
        say a restored checkpoint is current (``PoolController.start``). Not checkpointed here:
        the controller keeps the reason in ``meta`` and sets it again at a restart."""
        with self._lock:
            self._withheld = on
            self.changed.set()

    @property
    def withheld(self) -> bool:
        return self._withheld

    def add_eni(self, info: EniInfo, now: float, *, ready: bool = True) -> bool:
        """Record an attached ENI (idempotent); True if it was new."""
        with self._lock:
            eni = self._enis.get(info.eni_id)
            if eni is not None:
                if eni.info != info:
                    eni.info = info
                    self._save()
                return False
            self._enis[info.eni_id] = EniRecord(info=info, added_at=now, ready=ready)
            self._save()
            return True

    def set_ready(self, eni_id: str, *, ready: bool) -> None:
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is not None and eni.ready != ready:
                eni.ready = ready
                self._save()

    def remove_eni(self, eni_id: str, *, force: bool = False, unknown_holds: bool = False) -> bool:
        """Forget an ENI; refused (False) while pods hold its addresses unless ``force``.
        ``unknown_holds`` (EC2 deleted the ENI: ``PoolController.apply_result``): holds of
        :data:`UNKNOWN_HOLDER` or :data:`UNROUTED_HOLDER` (a start's reading, no pod named) do not
        refuse it, and stay recovered holders not attached (a routeless veth, or a pod rule, may
        stand for a pod carrying the address): if EC2 grants the address to the node again, it
        comes in held (:meth:`_new_addr`). Before review 21's D1 a ``?`` hold went with the ENI,
        and a pod on an address of an ENI said deleted (an allocator at fault), its record turned
        into a ``?`` hold by a checkpoint loss, shared the address EC2 granted the node again."""
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is None:
                return True
            named = [a for a in eni.addrs.values() if a.in_use and not (unknown_holds and _held_for_no_pod(a))]
            if not force and named:
                return False
            self._unnote_held_offers(eni.addrs)
            for a in eni.addrs.values():
                self._ip_eni.pop(a.ip, None)
                if a.in_use:
                    self._owner.pop((a.container_id, a.ifname), None)
            del self._enis[eni_id]
            self._save()
            return True

    def add_addresses(self, eni_id: str, ips: Iterable[str] = (), prefixes: Iterable[str] = ()) -> int:
        """Add secondary addresses and /28 prefixes to an ENI (idempotent); returns addresses added."""
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is None:
                raise KeyError(f"unknown ENI {eni_id}")
            added = 0
            for ip in ips:
                if ip in eni.addrs or ip == eni.info.primary_ip or ip in self._ip_eni:
                    continue
                eni.addrs[ip] = self._new_addr(ip)
                eni.ips.append(ip)
                self._ip_eni[ip] = eni_id
                added += 1
            have = set(eni.prefixes)
            for p in prefixes:
                hosts = [str(h) for h in ipaddress.IPv4Network(p)]
                if p in have:
                    # Every member no record holds (one skipped while another ENI's stale copy, or a
                    # single, held it) joins the listed /28 once that copy is gone (review final, F2;
                    # since seed 6069's fix below, only a /28 listed so by an older agent's checkpoint).
                    hosts = [ip for ip in hosts if ip not in self._ip_eni]
                elif any(ip in self._ip_eni for ip in hosts):
                    # Some of its addresses are recorded already (another ENI's, offered or a
                    # pod's: EC2 moved the /28 and the result saying so is late, or a read from
                    # another state): not recorded here until that record lets them go. Listed
                    # without them, the /28 was offered for addresses the agent had not set
                    # aside, and a restart loaded them here, free (seed 6069).
                    continue
                else:
                    have.add(p)
                    eni.prefixes.append(p)
                for ip in hosts:
                    eni.addrs[ip] = self._new_addr(ip, p)
                    self._ip_eni[ip] = eni_id
                    added += 1
            if added:
                self._save()
                self.changed.set()
            return added

    def _new_addr(self, ip: str, prefix: str | None = None) -> Addr:
        a = Addr(ip=ip, prefix=prefix)
        held = self._recovered.get(ip)
        if held is not None:
            a.recovered, a.assigned_at = held
        return a

    def remove_addresses(
        self, eni_id: str, ips: Iterable[str] = (), prefixes: Iterable[str] = (), *, force: bool = False
    ) -> list[str]:
        """Remove addresses/prefixes no pod holds (all of them if ``force``); returns addresses removed."""
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is None:
                return []
            removed: list[str] = []
            for ip in ips:
                a = eni.addrs.get(ip)
                if a is None or a.prefix is not None or (a.in_use and not force):
                    continue
                self._drop(eni, a)
                removed.append(ip)
            if removed:
                gone = set(removed)
                eni.ips[:] = [ip for ip in eni.ips if ip not in gone]
            prefixes = list(prefixes)
            have, gone_pfx = set(eni.prefixes), set()
            members = eni.by_prefix() if prefixes else {}
            for p in prefixes:
                if p not in have or p in gone_pfx:
                    continue
                addrs = members.get(p, [])
                if not force and any(a.in_use for a in addrs):
                    continue
                for a in addrs:
                    self._drop(eni, a)
                    removed.append(a.ip)
                gone_pfx.add(p)
            if gone_pfx:
                eni.prefixes[:] = [p for p in eni.prefixes if p not in gone_pfx]
            if removed:
                self._save()
            return removed

    def _drop(self, eni: EniRecord, a: Addr) -> None:
        del eni.addrs[a.ip]
        self._unnote_held_offers((a.ip,))
        self._ip_eni.pop(a.ip, None)
        if a.in_use:
            self._owner.pop((a.container_id, a.ifname), None)

    # --- pods ------------------------------------------------------------------

    def assign(
        self,
        container_id: str,
        ifname: str,
        netns: str,
        now: float,
        holder: str = "",
        network: str = "",
        pod: str = "",
    ) -> Assignment | None:
        """Give the pod an address, or return the one it already holds (ADD is retried).

        ``holder`` is the pod's recovered-holder key (its host veth name): an
        address a rebuild found wired to it is the pod's own, given back to it.
        ``network`` is the CNI network name the ADD named (CNI GC is per network).
        None when nothing is free now; the ADD is then counted as waiting demand
        (:meth:`pending`) until it succeeds, is deleted or goes stale. ``pod`` (the
        ``namespace/name`` the runtime's ``CNI_ARGS`` named, or empty) counts the pod once
        and interface across its sandboxes: its demand outlives a DEL of this one for
        :data:`PENDING_LINGER_S`, and ends once any sandbox of the pod gets that interface's address.
        :class:`CheckpointWriteError` when the assignment (new, or an earlier one
        never written) cannot be checkpointed: the ADD must fail.
        """
        key = (container_id, ifname)
        with self._lock:
            held = self._owner.get(key)
            if held is not None:
                if self._dirty:  # a retried ADD whose first try could not be written: not yet
                    self._save()
                return Assignment(held, self._ip_eni[held])
            if key in self._superseded:
                return None  # a given-up sandbox of a pod whose interface a later one has
            chosen = self._take_recovered(holder) if holder and holder != UNKNOWN_HOLDER else None
            if chosen is None:
                chosen = self._pick(now)
                if chosen is not None:
                    self._arrivals.append(now)
            if chosen is None:
                self._pending[key] = now
                if pod:
                    self._pending_pod[key] = (pod, ifname)
                self.changed.set()
                return None
            eni, a = chosen
            a.container_id, a.ifname, a.netns, a.network = container_id, ifname, netns, network
            a.assigned_at, a.freed_at, a.recovered = now, None, ""
            self._owner[key] = a.ip
            self._pending.pop(key, None)
            self._pending_pod.pop(key, None)
            if pod:
                # The pod's interface has its address: it waits no more, whatever an earlier
                # sandbox's ADD still says (that sandbox's DEL, however late, then starts no linger).
                served = (pod, ifname)
                self._lingering.pop(served, None)
                for k in [k for k, v in self._pending_pod.items() if v == served]:
                    del self._pending_pod[k]
                    self._pending.pop(k, None)
                    self._superseded[k] = now
            self._save()
            self.changed.set()
            return Assignment(a.ip, eni.info.eni_id)

    def _pick(self, now: float) -> tuple[EniRecord, Addr] | None:
        if self._withheld:
            return None
        fallback: tuple[EniRecord, Addr] | None = None
        unusable = self._unusable()
        for eni in sorted(self._enis.values(), key=_slot):
            if not eni.ready or eni.held:
                continue
            used_prefixes = {a.prefix for a in eni.addrs.values() if a.in_use and a.prefix}
            for a in eni.addrs.values():
                if a.in_use or a.quarantined_at is not None or a.ip in unusable:
                    continue
                if a.freed_at is not None and now < a.freed_at + self.cooldown_s:
                    continue
                # Fill prefixes already in use first, so whole prefixes stay free to release.
                if a.prefix is None or a.prefix in used_prefixes:
                    return eni, a
                if fallback is None:
                    fallback = (eni, a)
        return fallback

    def release(self, container_id: str, ifname: str, now: float) -> Assignment | None:
        """The pod is gone: its address enters cooldown. Idempotent (None if it held nothing)."""
        key = (container_id, ifname)
        with self._lock:
            self._superseded.pop(key, None)
            if self._pending.pop(key, None) is not None:
                wanted = self._pending_pod.pop(key, None)
                if wanted is not None:
                    # A failed sandbox's DEL (containerd DELs it at once; kubelet makes the pod's
                    # next one 10-15 s later): the pod still waits through the back-off.
                    self._lingering[wanted] = now
            ip = self._owner.pop(key, None)
            if ip is None:
                return None
            eni_id = self._ip_eni[ip]
            a = self._enis[eni_id].addrs[ip]
            a.container_id = a.ifname = a.netns = a.network = ""
            holds = self.meta.get(HOLD_ON_RELEASE)
            if isinstance(holds, dict) and holds.get(ip):
                # another pod may carry it: held by who the host shows, never freed (review 14, O1)
                a.recovered, a.assigned_at, a.freed_at, a.quarantined_at = str(holds[ip]), now, None, None
                self._recovered[ip] = (a.recovered, now)
                self.meta[HOLD_ON_RELEASE] = {k: v for k, v in holds.items() if k != ip} or None
                self._save()
                self.changed.set()
                return Assignment(ip, eni_id)
            a.freed_at = now
            unit = a.prefix or a.ip
            marked = self.meta.get(UNKNOWN_ON_RELEASE)
            if isinstance(marked, list) and unit in marked:
                # offered back as of unknown origin, never free (PoolController._restore_stale)
                a.quarantined_at = now
                rest = [k for k in marked if k != unit or any(b.in_use for b in self._members(eni_id, unit))]
                self.meta[UNKNOWN_ON_RELEASE] = rest or None
                self.meta[RELEASED_UNKNOWN] = sorted({*(self.meta.get(RELEASED_UNKNOWN) or []), unit})
            self._save()
            self.changed.set()
            return Assignment(ip, eni_id)

    def _let_go(self, a: Addr, now: float) -> None:
        """A recovered holder's address it no longer holds (:meth:`release_recovered`): into
        cooldown, as a pod's. Unless the released filter names it (EC2's ``released`` and no
        grant since: an older copy's filter, the grant that lifted it lost with the later
        writes, the simulation's seed 1780): resync never takes such an address back free, so
        it is offered back as of unknown origin (:data:`RELEASED_UNKNOWN`, as :meth:`release`
        does for :data:`UNKNOWN_ON_RELEASE`), and the allocator's answer decides."""
        a.freed_at = now
        unit = a.prefix or a.ip
        if unit in self._recent.released:
            a.quarantined_at = now
            self.meta[RELEASED_UNKNOWN] = sorted({*(self.meta.get(RELEASED_UNKNOWN) or []), unit})

    def held_on_release(self, ip: str) -> bool:
        """Whether the release of the record holding ``ip`` hands it to a holder (:data:`HOLD_ON_RELEASE`)."""
        with self._lock:
            holds = self.meta.get(HOLD_ON_RELEASE)
            return isinstance(holds, dict) and bool(holds.get(ip))

    def _members(self, eni_id: str, key: str) -> list[Addr]:
        eni = self._enis[eni_id]
        return [b for b in eni.addrs.values() if (b.prefix or b.ip) == key]

    def released_unknown(self) -> set[str]:
        """The keys :meth:`release` quarantined as of unknown origin, for the controller to mark
        (it then :meth:`clear_released_unknown`s them, in the same write)."""
        with self._lock:
            return {str(k) for k in self.meta.get(RELEASED_UNKNOWN) or ()}

    def clear_released_unknown(self, keys: set[str]) -> None:
        with self._lock:
            rest = [k for k in self.meta.get(RELEASED_UNKNOWN) or () if k not in keys]
            self.meta[RELEASED_UNKNOWN] = rest or None
            self._save()

    def lookup(self, container_id: str, ifname: str) -> Assignment | None:
        with self._lock:
            ip = self._owner.get((container_id, ifname))
            return Assignment(ip, self._ip_eni[ip]) if ip else None

    def pending(self, now: float) -> int:
        """Addresses pods wait for: CNI ADDs that found none and have not gone stale, one per pod
        and interface the runtime named (two sandboxes of one pod count once; two interfaces of
        one sandbox, each an address, twice), and pods' interfaces whose waiting ADD's sandbox was
        DELeted less than :data:`PENDING_LINGER_S` ago (they wait for the pod's next sandbox)."""
        with self._lock:
            stale = [k for k, t in self._pending.items() if now - t >= self.pending_ttl_s]
            for k in stale:
                del self._pending[k]
                self._pending_pod.pop(k, None)
            for wanted in [w for w, t in self._lingering.items() if now - t >= PENDING_LINGER_S]:
                del self._lingering[wanted]
            for k in [k for k, t in self._superseded.items() if now - t >= SUPERSEDED_KEEP_S]:
                del self._superseded[k]
            named = {self._pending_pod[k] for k in self._pending if k in self._pending_pod} | set(self._lingering)
            return len(named) + sum(1 for k in self._pending if k not in self._pending_pod)

    def pending_expires_at(self) -> float | None:
        """When :meth:`pending` next falls with no other change: the oldest waiting ADD going
        stale, or a DELeted sandbox's pod no longer counted; None when nothing waits."""
        with self._lock:
            ends = [t + self.pending_ttl_s for t in self._pending.values()]
            ends += [t + PENDING_LINGER_S for t in self._lingering.values()]
            return min(ends) if ends else None

    def next_assignable(self, now: float) -> float | None:
        """The earliest time from ``now`` at which :meth:`assign` could hand out an address,
        given no other change (``now`` if one is free now; the end of a cooldown otherwise);
        None if none ever would. The filters are :meth:`_pick`'s."""
        with self._lock:
            if self._withheld:
                return None
            best: float | None = None
            unusable = self._unusable()
            for eni in self._enis.values():
                if not eni.ready or eni.held:
                    continue
                for a in eni.addrs.values():
                    if a.in_use or a.quarantined_at is not None or a.ip in unusable:
                        continue
                    if a.freed_at is None or now >= a.freed_at + self.cooldown_s:
                        return now
                    at = a.freed_at + self.cooldown_s
                    if best is None or at < best:
                        best = at
            return best

    def pods(self) -> list[PodRecord]:
        with self._lock:
            out = []
            for eni in self._enis.values():
                for a in eni.addrs.values():
                    if a.container_id:
                        out.append(
                            PodRecord(
                                a.container_id, a.ifname, a.netns, a.ip, eni.info.eni_id, a.assigned_at, a.network
                            )
                        )
            return out

    # --- release and quarantine (node_agent/offers.py) ------------------------------

    def _free(self, now: float) -> offers.Free:
        """May the address be given back now: free, not quarantined, past cooldown, still in IMDS,
        not another ENI's primary address."""
        unusable = self._unusable()
        return lambda a: (
            not a.in_use
            and a.quarantined_at is None
            and a.ip not in unusable
            and (a.freed_at is None or now >= a.freed_at + self.cooldown_s)
        )

    def _unusable(self) -> set[str]:
        """Addresses never handed out, offered, nor counted as the pool's, held or not: those IMDS
        no longer lists (:attr:`_unlisted`), and another ENI's primary address, whatever an earlier
        read recorded (docs/safety.md row 1: EC2 made it that ENI's; the next resync drops it here:
        seed 1100805's shape). Counted, offered or handed out alike (review 41, Q1: counted free
        but never handed out, it made the last usable address a surplus to offer)."""
        return self._unlisted | {e.info.primary_ip for e in self._enis.values()}

    def _offerable(self) -> list[EniRecord]:
        """ENIs whose free addresses may be offered back (a held ENI's are not the agent's to give)."""
        return [e for e in self._enis.values() if not e.held]

    def releasable_ips(self, now: float) -> list[tuple[str, str]]:
        """See :func:`node_agent.offers.releasable_ips`."""
        with self._lock:
            return offers.releasable_ips(self._offerable(), self._free(now))

    def releasable_prefixes(self, now: float) -> list[tuple[str, str]]:
        """See :func:`node_agent.offers.releasable_prefixes`."""
        with self._lock:
            return offers.releasable_prefixes(self._offerable(), self._free(now))

    def releasable_enis(self, now: float, min_age_s: float) -> list[str]:
        """See :func:`node_agent.offers.releasable_enis`."""
        with self._lock:
            return offers.releasable_enis(self._offerable(), now, min_age_s, self._free(now))

    def quarantine(self, eni_id: str, ips: Iterable[str], prefixes: Iterable[str], now: float) -> int:
        """Take free addresses out of the pool to offer them back; returns addresses quarantined."""
        with self._lock:
            eni = self._enis.get(eni_id)
            n = 0 if eni is None else offers.quarantine(eni, ips, prefixes, now)
            if n:
                self._save()
            return n

    def unquarantine(self, before: float) -> int:
        """Return to the pool every address quarantined before ``before``; returns how many."""
        with self._lock:
            n = offers.unquarantine(self._enis.values(), before)
            if n:
                self._save()
                self.changed.set()
            return n

    def requarantine(self, eni_id: str, now: float, only: Collection[str] | None = None) -> int:
        """Every quarantined address of the ENI (of ``only``, if given) offered again, dated
        ``now``; returns how many."""
        with self._lock:
            eni = self._enis.get(eni_id)
            n = 0 if eni is None else offers.requarantine(eni, now, only)
            if n:
                self._save()
            return n

    def reclaim(self, eni_id: str, ips: Iterable[str] = (), prefixes: Iterable[str] = ()) -> int:
        """The allocator declined our release offer for these addresses (pods
        need them again): back into the pool at once. Returns how many."""
        with self._lock:
            eni = self._enis.get(eni_id)
            back = 0 if eni is None else offers.reclaim(eni, ips, prefixes)
            if back:
                self._save()
                self.changed.set()
            return back

    def quarantined_before(self, before: float) -> dict[str, list[tuple[str, str | None]]]:
        """See :func:`node_agent.offers.quarantined_before`."""
        with self._lock:
            return offers.quarantined_before(self._enis.values(), before)

    def quarantined_at(self) -> dict[str, dict[str, float]]:
        """See :func:`node_agent.offers.quarantined_at`."""
        with self._lock:
            return offers.quarantined_at(self._enis.values())

    def quarantined(self, capped: bool = True) -> dict[str, tuple[list[str], list[str]]]:
        """See :func:`node_agent.offers.quarantined`."""
        with self._lock:
            return offers.quarantined(self._enis.values(), capped=capped)

    def quarantined_since(self, offered: dict[str, tuple[list[str], list[str]]] | None = None) -> dict[str, float]:
        """See :func:`node_agent.offers.quarantined_since`."""
        with self._lock:
            return offers.quarantined_since(self._enis.values(), offered)

    # --- what EC2 said and IMDS does not show yet ---------------------------------

    def mark_gone(
        self, now: float, until: float, seq: int, released: Iterable[str] = (), deleted: Iterable[str] = ()
    ) -> None:
        """EC2 unassigned these addresses/prefixes or deleted these ENIs (a result replying
        to report ``seq`` says so): a lagging IMDS that still lists them, and claims from
        results replying to reports up to ``seq``, are ignored (released keys until a grant
        names them again, deleted ENIs until IMDS was seen without them:
        ``node_agent/recent_results.py``; ``until`` is the expiry an older agent reads).
        Checkpointed at once, before the caller removes them (a restart in between must
        not re-add them from IMDS)."""
        released, deleted = list(released), list(deleted)
        if not released and not deleted:
            return
        with self._lock:
            self._recent.expire(now)
            self._recent.mark_gone(until, seq, released, deleted)
            self._save()

    def unmark_released(self, keys: Iterable[str]) -> None:
        """EC2 assigned these to us again (and IMDS shows them): no longer ignored."""
        with self._lock:
            if self._recent.unmark_released(keys):
                self._save()

    def note_absent(self, listed: set[str]) -> None:
        """IMDS was read and lists exactly ``listed`` (addresses and prefixes): every
        released key it does not list has been seen gone since its release."""
        with self._lock:
            if self._recent.note_absent(listed):
                self._save_quietly()

    def seen_absent(self, key: str) -> bool:
        """A released key IMDS has been seen not listing since the release."""
        with self._lock:
            return key in self._recent.absent

    def note_enis_absent(self, listed: set[str]) -> None:
        """IMDS was read and lists exactly the ENIs ``listed``: every deleted ENI it does not
        list has been seen gone (:mod:`node_agent.ledger`)."""
        with self._lock:
            if self._recent.note_enis_absent(listed):
                self._save_quietly()

    def _save_quietly(self) -> None:
        """Checkpoint a change that is safe to lose (an absence seen: a restart without it
        only waits for the next read): a failed write leaves the datastore dirty, retried
        by the next write or :meth:`flush`, and is not raised to the IMDS reader."""
        with contextlib.suppress(CheckpointWriteError):
            self._save()

    def eni_seen_absent(self, eni_id: str) -> bool:
        """A deleted ENI IMDS has been seen not listing since the deletion."""
        with self._lock:
            return eni_id in self._recent.deleted_absent

    def unmark_deleted(self, eni_id: str) -> None:
        """The deleted ENI was attached to us again (a newer result says so, IMDS shows it)."""
        with self._lock:
            if self._recent.unmark_deleted(eni_id):
                self._save()

    def mark_granted(self, now: float, until: float, seq: int, keys: Iterable[str]) -> None:
        """An ``assigned``/``attached`` result replying to report ``seq`` gave us these
        (and they were accepted): a ``released`` result replying to an older report is stale
        for them until ``until``. Checkpointed."""
        keys = list(keys)
        if not keys:
            return
        with self._lock:
            self._recent.expire(now)
            self._recent.mark_granted(until, seq, keys)
            self._save()

    def recently_granted(self, now: float) -> dict[str, int]:
        """Addresses/prefixes recently granted, each with the ``in_reply_to`` of the granting result."""
        with self._lock:
            if self._recent.expire(now):
                self._save()
            return self._recent.seqs(self._recent.granted)

    def recently_gone(self, now: float) -> tuple[dict[str, int], dict[str, int]]:
        """Addresses and prefixes, and ENI ids, a lagging IMDS may still list (ignore them),
        each with the ``in_reply_to`` of the result that took it (older claims are stale)."""
        with self._lock:
            if self._recent.expire(now):
                self._save()
            return self._recent.seqs(self._recent.released), self._recent.seqs(self._recent.deleted)

    def unseen(self) -> list[str]:
        """ENIs kept for their pods though the last resync's IMDS read did not list them."""
        with self._lock:
            return sorted(self._unseen)

    def unlisted(self) -> list[str]:
        """Addresses pods hold that IMDS no longer lists (see :meth:`reconcile`)."""
        with self._lock:
            return sorted(self._unlisted)

    def slot_conflicts(self) -> list[list[str]]:
        """Groups of ENI ids the datastore places in one (network card, device index)
        slot; empty when consistent (EC2 never has two)."""
        with self._lock:
            by: dict[tuple[int, int], list[str]] = {}
            for e in self._enis.values():
                by.setdefault((e.info.network_card, e.info.device_index), []).append(e.info.eni_id)
            return [sorted(ids) for ids in by.values() if len(ids) > 1]

    def set_parked(self, claims: list[dict[str, Any]]) -> None:
        """The controller's claims waiting for IMDS (JSON objects it reads back with :meth:`parked`)."""
        with self._lock:
            if claims != self._parked:
                self._parked = json.loads(json.dumps(claims))
                self._save()

    def parked(self) -> list[dict[str, Any]]:
        with self._lock:
            out: list[dict[str, Any]] = json.loads(json.dumps(self._parked))
            return out

    # --- views ----------------------------------------------------------------

    def counts(self, now: float) -> Counts:
        with self._lock:
            return Counts.of(
                self._enis.values(), now, self.cooldown_s, self.pending(now), self._unusable(), self._listed_elsewhere
            )

    def arrivals(self, now: float, window_s: float) -> int:
        """Pods this process gave a free address (not a recovered one) within the last
        ``window_s`` seconds: in ``(now - window_s, now]``, so a wall clock stepped back counts
        none of the ADDs that now look to come later (not kept over a restart)."""
        with self._lock:
            return sum(1 for t in self._arrivals if now - window_s < t <= now)

    def arrivals_change_at(self, now: float, window_s: float) -> float | None:
        """When :meth:`arrivals` next changes with no new ADD: the oldest counted one leaves the
        window (None: none counted)."""
        with self._lock:
            counted = [t for t in self._arrivals if now - window_s < t <= now]
        return min(counted) + window_s if counted else None

    def enis(self) -> list[EniRecord]:
        """Copies of the ENIs, by network card and device index."""
        with self._lock:
            return [e.copy() for e in sorted(self._enis.values(), key=_slot)]

    def not_ready(self) -> list[EniInfo]:
        """ENIs whose host set-up is not done, by network card and device index (no copies made)."""
        with self._lock:
            return [e.info for e in sorted(self._enis.values(), key=_slot) if not e.ready]

    def eni(self, eni_id: str) -> EniInfo | None:
        with self._lock:
            e = self._enis.get(eni_id)
            return e.info if e else None

    def eni_of(self, ip: str) -> EniInfo | None:
        with self._lock:
            eni_id = self._ip_eni.get(ip)
            return self._enis[eni_id].info if eni_id else None

    def set_meta(self, key: str, value: Any) -> None:
        with self._lock:
            self.meta[key] = value
            self._save()

    # --- checkpoint -------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint's content now (:func:`node_agent.checkpoint.encode`)."""
        with self._lock:
            return encode(self.meta, self._enis.values(), self._recovered, self._recent.encode(), self._parked)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Changes inside are checkpointed once, at the end (not at all if it raises):
        a rebuild never leaves a half-made state on disk."""
        with self._lock:
            was = self._loading
            self._loading = True
            try:
                yield
            finally:
                self._loading = was
            self._save()

    def _save(self) -> None:
        if self._store is None:
            return
        self._dirty = True
        if self._loading:
            return
        try:
            self._store.save(self.snapshot())
        except Exception as exc:  # memory stays ahead (dirty); the next write or flush() retries
            self.save_errors += 1
            raise CheckpointWriteError(f"checkpoint not written: {exc}") from exc
        self._dirty = False

    @property
    def dirty(self) -> bool:
        """Memory holds changes the checkpoint does not (a write failed)."""
        with self._lock:
            return self._dirty

    def flush(self) -> None:
        """Write the checkpoint if a write failed since the last one that worked;
        :class:`CheckpointWriteError` if it still cannot be written."""
        with self._lock:
            if self._dirty and not self._loading:
                self._save()

    def restore(self) -> bool:
        """Load the checkpoint, if any; True if one was loaded. :class:`CheckpointError` if it
        is of a version this agent cannot read or malformed (then nothing of it is kept)."""
        if self._store is None:
            return False
        data = self._store.load()
        if data is None:
            return False
        check_version(data)
        with self._lock:
            self._clear()
            self._loading = True
            try:
                self._load(parse(data))
            except CheckpointError:
                raise
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                self._clear()  # nothing half-restored is left behind
                raise CheckpointError(f"corrupt checkpoint: {exc}") from None
            finally:
                self._loading = False
            self._dirty = False  # memory is what the disk says
            return True

    def forget(self) -> None:
        """Drop everything a :meth:`restore` loaded (the start found the checkpoint inconsistent
        with the host and rebuilds instead); the disk keeps its file until the rebuild's write."""
        with self._lock:
            self._clear()
            self._pending.clear()
            self._pending_pod.clear()
            self._lingering.clear()
            self._superseded.clear()
            self._dirty = False

    def _clear(self) -> None:
        self._enis.clear()
        self._owner.clear()
        self._ip_eni.clear()
        self._recovered.clear()
        self._recent.clear()
        self._unlisted.clear()
        self._listed_elsewhere.clear()
        self._unseen.clear()
        self._parked = []
        self.meta = {}

    def _load(self, cp: CheckpointFile) -> None:
        self.restored_unchecksummed = cp.checksum is None
        self.meta = dict(cp.meta)
        self._recovered.update(cp.recovered)
        self._recent.load(cp.recent)
        self._parked = cp.parked
        loaded = []
        for entry in cp.enis:
            info = EniInfo(**entry.info.model_dump())
            eni = self._enis[info.eni_id] = EniRecord(info=info, added_at=entry.added_at, ready=False)
            loaded.append((entry, eni))
        # A /28 first goes to the ENI whose entry says something of its addresses (a pod's, a
        # quarantine): a checkpoint written before seed 6069's fix may list one /28 on two ENIs,
        # only one of which held its addresses; loaded in order, the other took them, free.
        for entry, eni in loaded:
            stated = [ipaddress.IPv4Address(st.ip) for st in entry.addrs]
            said = [p for p in entry.prefixes if any(ip in ipaddress.IPv4Network(p) for ip in stated)]
            self.add_addresses(eni.info.eni_id, entry.ips, said)
        for entry, eni in loaded:
            self.add_addresses(eni.info.eni_id, (), entry.prefixes)
            eni.prefixes.sort(key=entry.prefixes.index)
            eni.ready = entry.ready
            for st in entry.addrs:
                a = eni.addrs.get(st.ip)
                if a is None:
                    continue
                a.container_id, a.ifname, a.netns = st.container_id, st.ifname, st.netns
                a.assigned_at, a.freed_at, a.quarantined_at = st.assigned_at, st.freed_at, st.quarantined_at
                a.network = st.network if a.container_id else ""
                if a.container_id:
                    a.recovered = ""  # a named pod wins over a recovered holder
                    self._recovered.pop(a.ip, None)
                    self._owner[(a.container_id, a.ifname)] = a.ip
        self._prune_held_offers()

    @staticmethod
    def _keep_offered(eni: EniRecord, gone_ips: list[str], gone_pfx: list[str]) -> tuple[list[str], list[str], int]:
        """Of the addresses and prefixes a read no longer lists, those to remove, without the
        offered (quarantined) ones, and how many of those are kept (:meth:`reconcile`)."""
        offered = {a.ip for a in eni.addrs.values() if a.quarantined_at is not None}
        offered_pfx = {a.prefix for a in eni.addrs.values() if a.quarantined_at is not None and a.prefix}
        kept = sum(ip in offered for ip in gone_ips) + sum(p in offered_pfx for p in gone_pfx)
        return [ip for ip in gone_ips if ip not in offered], [p for p in gone_pfx if p not in offered_pfx], kept

    @staticmethod
    def _offered_kept(eni: EniRecord) -> int:
        """The offered addresses that keep an ENI a read does not list (:meth:`reconcile`): forgotten,
        the next read listing the ENI would bring them back free, while EC2 may have unassigned them."""
        return sum(1 for a in eni.addrs.values() if a.quarantined_at is not None)

    def pinned_slots(self, listed: Iterable[str]) -> dict[tuple[int, int], str]:
        """The device slots of ENIs not in ``listed`` that pods hold addresses on, or with offered
        addresses kept (:meth:`_offered_kept`) -> that ENI: another ENI a read shows there is no
        proof the slot was reused (a read may answer from an older state, docs/safety.md row 6:
        an ENI deleted earlier, shown in the slot of the one pods use now; review 10, D1). Such
        an ENI is kept, held, and the other is not taken, until its pods are gone or a read lists it."""
        with self._lock:
            names = set(listed)
            return {
                _slot(e): e.info.eni_id
                for e in self._enis.values()
                if e.info.eni_id not in names and (any(a.in_use for a in e.addrs.values()) or self._offered_kept(e))
            }

    def reconcile(
        self,
        attached: Iterable[tuple[EniInfo, list[str], list[str]]],
        now: float,
        ready_new: Callable[[EniInfo], bool] | None = None,
        held: Iterable[str] = (),
    ) -> list[str]:
        """Make the ENIs and addresses match what is attached (IMDS wins for that);
        pod assignments on addresses still attached are kept (the checkpoint wins for that).
        An ENI seen for the first time is ready (its addresses handed out) only
        if ``ready_new(info)`` says so: a secondary ENI waits for its host set-up.
        The ENIs named in ``held`` are kept for their pods with nothing new handed out
        from them (:attr:`node_agent.records.Eni.held`); every other ENI is not held.

        Returns human-readable notes on what changed (pods dropped because their
        address is no longer attached are named).
        """
        notes: list[str] = []
        attached = list(attached)
        with self._lock:
            seen: set[str] = set()
            unlisted: set[str] = set()
            pinned = self.pinned_slots(info.eni_id for info, _, _ in attached)
            for info, ips, prefixes in attached:
                other = pinned.get((info.network_card, info.device_index))
                if other is not None and info.eni_id not in self._enis:
                    notes.append(f"ENI {info.eni_id} in the slot of {other}, which pods hold: not taken yet")
                    continue
                seen.add(info.eni_id)
                if self.add_eni(info, now, ready=True if ready_new is None else ready_new(info)):
                    notes.append(f"ENI {info.eni_id} added")
                eni = self._enis[info.eni_id]
                listed_ips, listed_pfx = set(ips), set(prefixes)
                gone_ips = [ip for ip in eni.ips if ip not in listed_ips]
                gone_pfx = [p for p in eni.prefixes if p not in listed_pfx]
                if gone_ips or gone_pfx:
                    gone, gone_p = set(gone_ips), set(gone_pfx)
                    # A pod's address is never taken from it here: IMDS may lag behind an
                    # assignment, and if EC2 truly took it, handing it to the next pod would
                    # make two holders. It stays the pod's, is never handed out again, and
                    # goes with the first resync after the pod (an alarm meanwhile).
                    for a in list(eni.addrs.values()):
                        if a.in_use and (a.ip in gone or a.prefix in gone_p):
                            who = f"pod {a.container_id}/{a.ifname}" if a.container_id else f"holder {a.recovered}"
                            notes.append(f"{who} holds {a.ip}, which IMDS no longer lists: kept for it (alarm)")
                    # Nor does a read take an offered address out of quarantine. If EC2
                    # unassigned it (the ``released`` lost), a later read that lists it again
                    # (IMDS may answer from an older state than one it served: a regressed
                    # read) would otherwise add it back free, and a pod would get an address
                    # EC2 gave to another node. It stays quarantined, unlisted, until the
                    # answer to the offer or the release timeout's read decides (docs/safety.md,
                    # row 6; before, it was dropped here and came back free on the next read).
                    gone_ips, gone_pfx, kept_offered = self._keep_offered(eni, gone_ips, gone_pfx)
                    if kept_offered:
                        notes.append(
                            f"ENI {info.eni_id}: {kept_offered} offered addresses IMDS no longer lists: "
                            "kept quarantined (the offer's answer decides)"
                        )
                    removed = self.remove_addresses(info.eni_id, gone_ips, gone_pfx)
                    # What stays (held, or free in a held prefix) is not handed out again.
                    unlisted.update(a.ip for a in eni.addrs.values() if a.ip in gone or a.prefix in gone_p)
                    if removed:
                        notes.append(f"ENI {info.eni_id}: {len(removed)} addresses gone")
                n = self.add_addresses(info.eni_id, ips, prefixes)
                if n:
                    notes.append(f"ENI {info.eni_id}: {n} addresses added")
            # An ENI missing from one read is not proof it is gone (IMDS documents no
            # consistency; a torn or lagging read omits it, and the next one lists it again
            # with every address looking free). One pods hold addresses on is kept, held
            # (nothing new handed out from it, nothing offered), until IMDS lists it again,
            # or its pods are gone; another ENI seen in its device slot is not taken meanwhile
            # (:meth:`pinned_slots`).
            unseen_held: set[str] = set()
            for eni_id in [e for e in self._enis if e not in seen]:
                eni = self._enis[eni_id]
                in_use = [a for a in eni.addrs.values() if a.in_use]
                offered_n = self._offered_kept(eni)
                if in_use or offered_n:
                    unseen_held.add(eni_id)
                    notes.append(
                        f"ENI {eni_id} not in IMDS but pods hold {len(in_use)} of its addresses "
                        f"and {offered_n} are offered: kept, held"
                    )
                    unlisted.update(a.ip for a in eni.addrs.values() if a.quarantined_at is not None)
                    continue
                for a in in_use:
                    notes.append(f"pod {a.container_id}/{a.ifname} lost {a.ip}: ENI detached")
                self.remove_eni(eni_id, force=True)
                notes.append(f"ENI {eni_id} removed: not attached")
            self._unlisted = unlisted
            # An address IMDS lists on another ENI of this read is on the node still (EC2 moved it
            # while the record kept its first ENI: an older copy restored, the simulation's seed
            # 1023538): counted in the pool too (``Counts.of``), still never handed out or offered.
            # Only on an ENI the pool counts (not one kept held for its pods: ``no_manage``, a card
            # the agent does not wire, custom networking's primary), as the allocator counts the
            # pool (review 35, L1: counted here, not there, the two disagreed for good).
            held = set(held)
            pooled = [(info, ips, pfx) for info, ips, pfx in attached if info.eni_id not in held]
            listed = {ip for _, ips, _ in pooled for ip in ips}
            listed |= {str(h) for _, _, pfx in pooled for p in pfx for h in ipaddress.IPv4Network(p)}
            self._listed_elsewhere = unlisted & listed
            self._unseen = unseen_held
            keep = held | unseen_held
            for eni in self._enis.values():
                eni.held = eni.info.eni_id in keep
            self._save()
            self.changed.set()
        return notes
