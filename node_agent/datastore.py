"""The node's address book: ENIs, their addresses and prefixes, which pod
holds what, cooldown, quarantine, and CNI ADDs left waiting.

Pure and clock-injected: every method that depends on time takes ``now``.
No sockets, files or threads are needed to build one; persistence goes
through a :class:`CheckpointStore` port (``None`` = no checkpoint, as in the
bench). Thread-safe: the CNI server and the controller share one instance.

Every change that matters (an address handed out or given back, ENIs and
addresses added or removed, quarantine) is checkpointed *before* the method
returns, so an address is recorded before anyone is told about it.

**Recovered holders.** When the checkpoint is lost or damaged the agent
rebuilds: IMDS says which addresses are attached, the host says which of them
pods still use (their wiring left a ``/32`` route via a host veth). Such an
address is held by a *recovered holder*, keyed by that veth's name (a hash of
the container id and interface, so a later DEL, CHECK or repeated ADD finds it
again). Where the host cannot tell (no kernel wiring), every attached address
is held by :data:`UNKNOWN_HOLDER` until released explicitly. Recovered holders
count as in use everywhere (never handed out, quarantined or offered back) and
are checkpointed, even for addresses not (yet) attached, since IMDS may lag.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

CHECKPOINT_VERSION = 1
RECOVERED_CHECKPOINT_VERSION = 2
"""Written only while recovered holders exist: an older agent would silently drop
them (and hand their addresses out again), so it must refuse such a checkpoint."""
READABLE_VERSIONS = (CHECKPOINT_VERSION, RECOVERED_CHECKPOINT_VERSION)
KEEP_CORRUPT = 3
"""Damaged checkpoints kept aside (``<path>.corrupt-<unix time>``); older ones are deleted."""
UNKNOWN_HOLDER = "?"
"""Holder of an address that may be in use by a pod nobody can name (rebuild with no host wiring to read)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read (wrong version, corrupt)."""


class CheckpointStore(Protocol):
    """Where the datastore keeps its checkpoint."""

    def load(self) -> dict[str, Any] | None: ...
    def save(self, data: dict[str, Any]) -> None: ...


class MemoryCheckpoint:
    """In memory (tests, bench): ``data`` is the last saved snapshot."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = data
        self.saves = 0

    def load(self) -> dict[str, Any] | None:
        return json.loads(json.dumps(self.data)) if self.data is not None else None

    def save(self, data: dict[str, Any]) -> None:
        self.data = data
        self.saves += 1


class FileCheckpoint:
    """A JSON file replaced atomically: temp file in the same directory, fsync, rename, fsync dir."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> dict[str, Any] | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{self.path}: {exc}") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{self.path}: not an object")
        return data

    def keep_aside(self, now: float, keep: int = KEEP_CORRUPT) -> str:
        """Keep the damaged file as ``<path>.corrupt-<unix time>`` for the operator and
        delete all but the newest ``keep`` such files; returns the new name.

        A hard link (a copy where links are not supported), so the damaged file
        stays in place until a rebuilt checkpoint replaces it atomically: a
        crash during the rebuild finds it again and rebuilds again, never an
        empty start. :class:`CheckpointError` if it cannot be kept.
        """
        base = f"{self.path}.corrupt-{int(now)}"
        aside, n = base, 0
        try:
            while True:
                try:
                    os.link(self.path, aside)
                    break
                except FileExistsError:
                    n += 1
                    aside = f"{base}-{n}"
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.EMLINK):
                        raise
                    with open(self.path, "rb") as src, open(aside, "xb") as dst:
                        shutil.copyfileobj(src, dst)
                        dst.flush()
                        os.fsync(dst.fileno())
                    break
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot keep the damaged file aside: {exc}") from None
        self._prune(keep)
        return aside

    def _prune(self, keep: int) -> None:
        directory = os.path.dirname(self.path) or "."
        stem = os.path.basename(self.path) + ".corrupt-"

        def age(name: str) -> tuple[int, int]:
            t, _, n = name.removeprefix(stem).partition("-")
            return (int(t) if t.isdigit() else 0, int(n) if n.isdigit() else 0)

        old = sorted((f for f in os.listdir(directory) if f.startswith(stem)), key=age)
        for name in old[: max(0, len(old) - keep)]:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass

    def save(self, data: dict[str, Any]) -> None:
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _check_types(d: dict[str, Any], kind: type, keys: Iterable[str]) -> None:
    """Checkpoint fields of the wrong type would break the agent later, far from the cause."""
    for k in keys:
        v: Any = d.get(k)
        if k not in d or (v is None and kind is float):
            continue
        ok = isinstance(v, (int, float) if kind is float else kind) and not isinstance(v, bool)
        if not ok or (kind is not str and v < 0):
            raise TypeError(f"{k}: {v!r} is not a valid {kind.__name__}")


@dataclass(frozen=True)
class EniInfo:
    """What is attached (IMDS or an ``attached`` result says so)."""

    eni_id: str
    device_index: int
    mac: str
    primary_ip: str
    subnet_id: str = ""
    subnet_cidr: str = ""
    network_card: int = 0

    @property
    def route_table(self) -> int:
        """VPC CNI convention: device ``d`` uses table ``d + 1``; the primary ENI uses main."""
        return 254 if self.device_index == 0 else self.device_index + 1

    @property
    def gateway(self) -> str:
        """The subnet's router: its base address + 1."""
        net = ipaddress.IPv4Network(self.subnet_cidr, strict=False)
        return str(net.network_address + 1)


class Assignment(NamedTuple):
    ip: str
    eni_id: str


@dataclass
class Addr:
    ip: str
    prefix: str | None = None
    container_id: str = ""
    ifname: str = ""
    netns: str = ""
    assigned_at: float = 0.0
    freed_at: float | None = None
    quarantined_at: float | None = None
    recovered: str = ""
    """Recovered holder (host veth name, or :data:`UNKNOWN_HOLDER`) after a checkpoint rebuild."""

    @property
    def in_use(self) -> bool:
        return bool(self.container_id or self.recovered)


@dataclass
class Eni:
    info: EniInfo
    added_at: float
    addrs: dict[str, Addr] = field(default_factory=dict)
    ips: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    ready: bool = True
    """Host networking set up; a not-ready ENI's addresses are not handed out."""


@dataclass(frozen=True)
class Counts:
    total: int
    """Addresses pods can use (quarantined ones excluded: they are on their way out)."""
    assigned: int
    available: int
    """total − assigned (cooldown counts as available, as in the VPC CNI)."""
    cooldown: int
    quarantined: int
    pending: int
    enis: int
    free_prefixes: int
    recovered: int = 0
    """Of ``assigned``: held by recovered holders (pods known only from the host after a rebuild)."""


@dataclass(frozen=True)
class RecoveredHolder:
    holder: str
    """Host veth name, or :data:`UNKNOWN_HOLDER`."""
    ip: str
    eni_id: str
    """'' while the address is not attached (IMDS may not show it yet)."""
    since: float


@dataclass(frozen=True)
class PodRecord:
    container_id: str
    ifname: str
    netns: str
    ip: str
    eni_id: str
    assigned_at: float


class Datastore:
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
        self._enis: dict[str, Eni] = {}
        self._owner: dict[tuple[str, str], str] = {}  # (container, ifname) -> ip
        self._ip_eni: dict[str, str] = {}
        self._pending: dict[tuple[str, str], float] = {}
        self._recovered: dict[str, tuple[str, float]] = {}  # ip -> (holder, since)
        self._gone_ips: dict[str, tuple[float, int]] = {}
        """Addresses and prefixes EC2 took (a ``released`` result) -> (until when a lagging
        IMDS is ignored, the result's ``in_reply_to``)."""
        self._gone_enis: dict[str, tuple[float, int]] = {}
        """ENIs EC2 deleted (a ``deleted`` result) -> (until, ``in_reply_to``), likewise."""
        self._granted: dict[str, tuple[float, int]] = {}
        """Addresses and prefixes an ``assigned``/``attached`` result gave us -> (until when, the
        result's ``in_reply_to``): a ``released`` result replying to an older report is stale for them."""
        self._absent: set[str] = set()
        """Released addresses/prefixes (in ``_gone_ips``) that IMDS has been seen *not* listing since
        the release: only after that is IMDS listing them again evidence of a new assignment.
        In memory only (a restart just waits longer for the evidence)."""
        self._unlisted: set[str] = set()
        """Addresses a pod holds that IMDS stopped listing (the last resync): kept for the pod,
        never handed out again, dropped by the first resync after the pod is gone."""
        self._parked: list[dict[str, Any]] = []
        """Claims (``assigned``/``attached`` results) waiting for IMDS to show them, as the controller wrote them."""
        self.meta: dict[str, Any] = {}
        self.changed = threading.Event()
        """Set on every change; the agent's loop may wait on it."""

    # --- ENIs and addresses --------------------------------------------------

    def add_eni(self, info: EniInfo, now: float, ready: bool = True) -> bool:
        """Record an attached ENI (idempotent); True if it was new."""
        with self._lock:
            eni = self._enis.get(info.eni_id)
            if eni is not None:
                if eni.info != info:
                    eni.info = info
                    self._save()
                return False
            self._enis[info.eni_id] = Eni(info=info, added_at=now, ready=ready)
            self._save()
            return True

    def set_ready(self, eni_id: str, ready: bool) -> None:
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is not None and eni.ready != ready:
                eni.ready = ready
                self._save()

    def remove_eni(self, eni_id: str, force: bool = False) -> bool:
        """Forget an ENI; refused (False) while pods hold its addresses unless ``force``."""
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is None:
                return True
            if not force and any(a.in_use for a in eni.addrs.values()):
                return False
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
            for p in prefixes:
                if p in eni.prefixes:
                    continue
                eni.prefixes.append(p)
                for host in ipaddress.IPv4Network(p):
                    ip = str(host)
                    if ip in self._ip_eni:
                        continue
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
        self, eni_id: str, ips: Iterable[str] = (), prefixes: Iterable[str] = (), force: bool = False
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
                eni.ips.remove(ip)
                removed.append(ip)
            for p in prefixes:
                if p not in eni.prefixes:
                    continue
                members = [a for a in eni.addrs.values() if a.prefix == p]
                if not force and any(a.in_use for a in members):
                    continue
                for a in members:
                    self._drop(eni, a)
                    removed.append(a.ip)
                eni.prefixes.remove(p)
            if removed:
                self._save()
            return removed

    def _drop(self, eni: Eni, a: Addr) -> None:
        del eni.addrs[a.ip]
        self._ip_eni.pop(a.ip, None)
        if a.in_use:
            self._owner.pop((a.container_id, a.ifname), None)

    # --- pods ------------------------------------------------------------------

    def assign(
        self, container_id: str, ifname: str, netns: str, now: float, holder: str = ""
    ) -> Assignment | None:
        """Give the pod an address, or return the one it already holds (ADD is retried).

        ``holder`` is the pod's recovered-holder key (its host veth name): an
        address a rebuild found wired to it is the pod's own, given back to it.
        None when nothing is free now; the ADD is then counted as waiting demand
        (:meth:`pending`) until it succeeds, is deleted or goes stale.
        """
        key = (container_id, ifname)
        with self._lock:
            held = self._owner.get(key)
            if held is not None:
                return Assignment(held, self._ip_eni[held])
            chosen = self._take_recovered(holder) if holder and holder != UNKNOWN_HOLDER else None
            if chosen is None:
                chosen = self._pick(now)
            if chosen is None:
                self._pending[key] = now
                self.changed.set()
                return None
            eni, a = chosen
            a.container_id, a.ifname, a.netns = container_id, ifname, netns
            a.assigned_at, a.freed_at, a.recovered = now, None, ""
            self._owner[key] = a.ip
            self._pending.pop(key, None)
            self._save()
            self.changed.set()
            return Assignment(a.ip, eni.info.eni_id)

    def _take_recovered(self, holder: str) -> tuple[Eni, Addr] | None:
        """The attached address recovered for ``holder``, now no longer recovered (the caller assigns it)."""
        for ip, (h, _) in sorted(self._recovered.items()):
            eni_id = self._ip_eni.get(ip)
            if h == holder and eni_id is not None:
                del self._recovered[ip]
                return self._enis[eni_id], self._enis[eni_id].addrs[ip]
        return None

    def _pick(self, now: float) -> tuple[Eni, Addr] | None:
        fallback: tuple[Eni, Addr] | None = None
        for eni in sorted(self._enis.values(), key=lambda e: (e.info.network_card, e.info.device_index)):
            if not eni.ready:
                continue
            used_prefixes = {a.prefix for a in eni.addrs.values() if a.in_use and a.prefix}
            for a in eni.addrs.values():
                if a.in_use or a.quarantined_at is not None or a.ip in self._unlisted:
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
            self._pending.pop(key, None)
            ip = self._owner.pop(key, None)
            if ip is None:
                return None
            eni_id = self._ip_eni[ip]
            a = self._enis[eni_id].addrs[ip]
            a.container_id = a.ifname = a.netns = ""
            a.freed_at = now
            self._save()
            self.changed.set()
            return Assignment(ip, eni_id)

    # --- recovered holders (checkpoint rebuild) -----------------------------------------

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

        The rebuild's answer when the host cannot say which addresses pods use.
        """
        with self._lock:
            n = 0
            for eni in self._enis.values():
                for a in eni.addrs.values():
                    if not a.in_use:
                        a.recovered, a.assigned_at, a.freed_at, a.quarantined_at = UNKNOWN_HOLDER, now, None, None
                        self._recovered[a.ip] = (UNKNOWN_HOLDER, now)
                        n += 1
            if n:
                self._save()
            return n

    def release_recovered(self, holder: str, now: float) -> list[Assignment]:
        """The recovered holder is gone (CNI DEL, or the unknown holders' grace passed):
        its addresses enter cooldown. Idempotent; returns the attached addresses freed."""
        with self._lock:
            out: list[Assignment] = []
            ips = [ip for ip, (h, _) in self._recovered.items() if h == holder]
            for ip in sorted(ips):
                del self._recovered[ip]
                eni_id = self._ip_eni.get(ip)
                if eni_id is not None:
                    a = self._enis[eni_id].addrs[ip]
                    if a.recovered == holder:
                        a.recovered, a.freed_at = "", now
                        out.append(Assignment(ip, eni_id))
            if ips:
                self._save()
                self.changed.set()
            return out

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

    def lookup(self, container_id: str, ifname: str) -> Assignment | None:
        with self._lock:
            ip = self._owner.get((container_id, ifname))
            return Assignment(ip, self._ip_eni[ip]) if ip else None

    def pending(self, now: float) -> int:
        """CNI ADDs that found no address and have not gone stale."""
        with self._lock:
            stale = [k for k, t in self._pending.items() if now - t >= self.pending_ttl_s]
            for k in stale:
                del self._pending[k]
            return len(self._pending)

    def pods(self) -> list[PodRecord]:
        with self._lock:
            out = []
            for eni in self._enis.values():
                for a in eni.addrs.values():
                    if a.container_id:
                        out.append(
                            PodRecord(a.container_id, a.ifname, a.netns, a.ip, eni.info.eni_id, a.assigned_at)
                        )
            return out

    # --- quarantine --------------------------------------------------------------

    def releasable_ips(self, now: float) -> list[tuple[str, str]]:
        """Free single addresses past cooldown, as ``(eni_id, ip)``, best to release first:
        ENIs with fewest pods, highest device index, newest address first."""
        with self._lock:
            out: list[tuple[tuple[int, int, int], str, str]] = []
            for eni in self._enis.values():
                used = sum(1 for a in eni.addrs.values() if a.in_use)
                for i, ip in enumerate(eni.ips):
                    a = eni.addrs[ip]
                    if self._free_past_cooldown(a, now):
                        out.append(((used, -eni.info.device_index, -i), eni.info.eni_id, ip))
            out.sort()
            return [(e, ip) for _, e, ip in out]

    def releasable_prefixes(self, now: float) -> list[tuple[str, str]]:
        """Whole /28s with no address in use, quarantined or in cooldown, as ``(eni_id, prefix)``."""
        with self._lock:
            out: list[tuple[tuple[int, int], str, str]] = []
            for eni in self._enis.values():
                used = sum(1 for a in eni.addrs.values() if a.in_use)
                for p in eni.prefixes:
                    members = [a for a in eni.addrs.values() if a.prefix == p]
                    if members and all(self._free_past_cooldown(a, now) for a in members):
                        out.append(((used, -eni.info.device_index), eni.info.eni_id, p))
            out.sort()
            return [(e, p) for _, e, p in out]

    def releasable_enis(self, now: float, min_age_s: float) -> list[str]:
        """Whole ENIs that may go: not primary, no pods, no cooldown, old enough; highest index first."""
        with self._lock:
            out = []
            for eni in self._enis.values():
                if eni.info.device_index == 0 and eni.info.network_card == 0:
                    continue
                if now - eni.added_at < min_age_s:
                    continue
                if all(self._free_past_cooldown(a, now) for a in eni.addrs.values()):
                    out.append((-eni.info.device_index, eni.info.eni_id))
            out.sort()
            return [e for _, e in out]

    def _free_past_cooldown(self, a: Addr, now: float) -> bool:
        return (
            not a.in_use
            and a.quarantined_at is None
            and a.ip not in self._unlisted
            and (a.freed_at is None or now >= a.freed_at + self.cooldown_s)
        )

    def quarantine(self, eni_id: str, ips: Iterable[str], prefixes: Iterable[str], now: float) -> int:
        """Take free addresses out of the pool to offer them back; returns addresses quarantined."""
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is None:
                return 0
            n = 0
            targets = [eni.addrs[ip] for ip in ips if ip in eni.addrs]
            for p in prefixes:
                targets.extend(a for a in eni.addrs.values() if a.prefix == p)
            for a in targets:
                if not a.in_use and a.quarantined_at is None:
                    a.quarantined_at = now
                    n += 1
            if n:
                self._save()
            return n

    def unquarantine(self, before: float) -> int:
        """Return to the pool every address quarantined before ``before``; returns how many."""
        with self._lock:
            n = 0
            for eni in self._enis.values():
                for a in eni.addrs.values():
                    if a.quarantined_at is not None and a.quarantined_at < before:
                        a.quarantined_at = None
                        n += 1
            if n:
                self._save()
                self.changed.set()
            return n

    def quarantined_before(self, before: float) -> dict[str, list[tuple[str, str | None]]]:
        """Per ENI: the addresses quarantined before ``before``, as ``(ip, prefix or None)``."""
        with self._lock:
            out: dict[str, list[tuple[str, str | None]]] = {}
            for eni in self._enis.values():
                due = [(a.ip, a.prefix) for a in eni.addrs.values()
                       if a.quarantined_at is not None and a.quarantined_at < before]
                if due:
                    out[eni.info.eni_id] = due
            return out

    def reclaim(self, eni_id: str, ips: Iterable[str] = (), prefixes: Iterable[str] = ()) -> int:
        """The allocator declined our release offer for these addresses (pods
        need them again): back into the pool at once. Returns how many."""
        with self._lock:
            eni = self._enis.get(eni_id)
            if eni is None:
                return 0
            want = set(ips)
            pfx = set(prefixes)
            back = 0
            for a in eni.addrs.values():
                if a.quarantined_at is not None and (a.ip in want or (a.prefix is not None and a.prefix in pfx)):
                    a.quarantined_at = None
                    back += 1
            if back:
                self._save()
                self.changed.set()
            return back

    def quarantined(self) -> dict[str, tuple[list[str], list[str]]]:
        """Per ENI: quarantined single addresses and whole quarantined prefixes."""
        with self._lock:
            out: dict[str, tuple[list[str], list[str]]] = {}
            for eni in self._enis.values():
                ips = [ip for ip in eni.ips if eni.addrs[ip].quarantined_at is not None]
                pfx = [
                    p
                    for p in eni.prefixes
                    if all(a.quarantined_at is not None for a in eni.addrs.values() if a.prefix == p)
                ]
                if ips or pfx:
                    out[eni.info.eni_id] = (ips, pfx)
            return out

    def quarantined_since(self) -> dict[str, float]:
        """Per ENI with quarantined addresses: the oldest of their quarantine times.

        An offer's age is measured from it (the allocator must not act on an
        offer the agent is about to take back), so one ENI's offer mixing
        addresses quarantined at different times is dated by the oldest."""
        with self._lock:
            out: dict[str, float] = {}
            for eni_id, (ips, prefixes) in self.quarantined().items():
                addrs = self._enis[eni_id].addrs
                times = [addrs[ip].quarantined_at for ip in ips]
                times += [a.quarantined_at for a in addrs.values() if a.prefix is not None and a.prefix in prefixes]
                out[eni_id] = min(t for t in times if t is not None)
            return out

    # --- what EC2 said and IMDS does not show yet ---------------------------------

    def mark_gone(
        self, now: float, until: float, seq: int, released: Iterable[str] = (), deleted: Iterable[str] = ()
    ) -> None:
        """EC2 unassigned these addresses/prefixes or deleted these ENIs (a result replying
        to report ``seq`` says so): a lagging IMDS that still lists them, and claims from
        results replying to reports up to ``seq``, are ignored until ``until``.
        Checkpointed at once, before the caller removes them (a restart in between must
        not re-add them from IMDS)."""
        released, deleted = list(released), list(deleted)
        if not released and not deleted:
            return
        with self._lock:
            self._expire_gone(now)
            for d, keys in ((self._gone_ips, released), (self._gone_enis, deleted)):
                for key in keys:
                    t, n = d.get(key, (until, seq))
                    d[key] = (max(t, until), max(n, seq))
            self._save()

    def unmark_released(self, keys: Iterable[str]) -> None:
        """EC2 assigned these to us again (and IMDS shows them): no longer ignored."""
        with self._lock:
            hit = [k for k in keys if self._gone_ips.pop(k, None) is not None]
            self._absent.difference_update(hit)
            if hit:
                self._save()

    def note_absent(self, listed: set[str]) -> None:
        """IMDS was read and lists exactly ``listed`` (addresses and prefixes): every
        released key it does not list has been seen gone since its release."""
        with self._lock:
            self._absent.update(k for k in self._gone_ips if k not in listed)

    def seen_absent(self, key: str) -> bool:
        """A released key IMDS has been seen not listing since the release."""
        with self._lock:
            return key in self._absent

    def mark_granted(self, now: float, until: float, seq: int, keys: Iterable[str]) -> None:
        """An ``assigned``/``attached`` result replying to report ``seq`` gave us these
        (and they were accepted): a ``released`` result replying to an older report is stale
        for them until ``until``. Checkpointed."""
        keys = list(keys)
        if not keys:
            return
        with self._lock:
            self._expire_gone(now)
            for k in keys:
                t, n = self._granted.get(k, (until, seq))
                self._granted[k] = (max(t, until), max(n, seq))
            self._save()

    def recently_granted(self, now: float) -> dict[str, int]:
        """Addresses/prefixes recently granted, each with the ``in_reply_to`` of the granting result."""
        with self._lock:
            if self._expire_gone(now):
                self._save()
            return {k: n for k, (_, n) in self._granted.items()}

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

    def recently_gone(self, now: float) -> tuple[dict[str, int], dict[str, int]]:
        """Addresses and prefixes, and ENI ids, a lagging IMDS may still list (ignore them),
        each with the ``in_reply_to`` of the result that took it (older claims are stale)."""
        with self._lock:
            if self._expire_gone(now):
                self._save()
            return (
                {k: n for k, (_, n) in self._gone_ips.items()},
                {k: n for k, (_, n) in self._gone_enis.items()},
            )

    def _expire_gone(self, now: float) -> bool:
        old = [k for k, (t, _) in self._gone_ips.items() if t <= now]
        old_enis = [k for k, (t, _) in self._gone_enis.items() if t <= now]
        old_granted = [k for k, (t, _) in self._granted.items() if t <= now]
        for k in old:
            del self._gone_ips[k]
            self._absent.discard(k)
        for k in old_enis:
            del self._gone_enis[k]
        for k in old_granted:
            del self._granted[k]
        return bool(old or old_enis or old_granted)

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
            total = assigned = cooldown = quarantined = free_prefixes = recovered = 0
            for eni in self._enis.values():
                by_prefix: dict[str, bool] = {p: False for p in eni.prefixes}
                for a in eni.addrs.values():
                    if a.quarantined_at is not None:
                        quarantined += 1
                        if a.prefix is not None:
                            by_prefix[a.prefix] = True
                        continue
                    total += 1
                    if a.in_use:
                        assigned += 1
                        recovered += bool(a.recovered)
                        if a.prefix is not None:
                            by_prefix[a.prefix] = True
                    elif a.freed_at is not None and now < a.freed_at + self.cooldown_s:
                        cooldown += 1
                free_prefixes += sum(1 for busy in by_prefix.values() if not busy)
            return Counts(
                total=total,
                assigned=assigned,
                available=total - assigned,
                cooldown=cooldown,
                quarantined=quarantined,
                pending=self.pending(now),
                enis=len(self._enis),
                free_prefixes=free_prefixes,
                recovered=recovered,
            )

    def enis(self) -> list[Eni]:
        """Copies of the ENIs, by network card and device index."""
        with self._lock:
            out = []
            for e in sorted(self._enis.values(), key=lambda e: (e.info.network_card, e.info.device_index)):
                out.append(
                    Eni(
                        info=e.info,
                        added_at=e.added_at,
                        addrs={k: Addr(**v.__dict__) for k, v in e.addrs.items()},
                        ips=list(e.ips),
                        prefixes=list(e.prefixes),
                        ready=e.ready,
                    )
                )
            return out

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
        with self._lock:
            out: dict[str, Any] = {
                "version": RECOVERED_CHECKPOINT_VERSION if self._recovered else CHECKPOINT_VERSION,
                "meta": dict(self.meta),
                "enis": [
                    {
                        "info": e.info.__dict__,
                        "added_at": e.added_at,
                        "ready": e.ready,
                        "ips": list(e.ips),
                        "prefixes": list(e.prefixes),
                        "addrs": [
                            # Unset fields left out; 0.0 is a time like any other (virtual
                            # clocks start there), except the default ``assigned_at`` of a free address.
                            {
                                k: v
                                for k, v in a.__dict__.items()
                                if v is not None and v != "" and k != "recovered"
                                and not (k == "assigned_at" and v == 0.0 and not a.container_id)
                            }
                            for a in e.addrs.values()
                            if a.container_id or a.freed_at is not None or a.quarantined_at is not None
                        ],
                    }
                    for e in self._enis.values()
                ],
            }
            if self._recovered:
                out["recovered"] = {ip: [h, since] for ip, (h, since) in sorted(self._recovered.items())}
            # Both optional (absent in checkpoints of agents before them): readers that
            # do not know them lose only the protection against a lagging IMDS.
            if self._gone_ips or self._gone_enis or self._granted:
                out["recent"] = {
                    "released": {k: [t, n] for k, (t, n) in sorted(self._gone_ips.items())},
                    "deleted": {k: [t, n] for k, (t, n) in sorted(self._gone_enis.items())},
                }
                if self._granted:  # optional: older agents ignore it (they lose only the stale-release check)
                    out["recent"]["granted"] = {k: [t, n] for k, (t, n) in sorted(self._granted.items())}
            if self._parked:
                out["parked"] = json.loads(json.dumps(self._parked))
            return out

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
        if self._store is not None and not self._loading:
            self._store.save(self.snapshot())

    def restore(self) -> bool:
        """Load the checkpoint, if any; True if one was loaded."""
        if self._store is None:
            return False
        data = self._store.load()
        if data is None:
            return False
        if data.get("version") not in READABLE_VERSIONS:
            raise CheckpointError(f"checkpoint version {data.get('version')!r}, expected {CHECKPOINT_VERSION}")
        with self._lock:
            self._enis.clear()
            self._owner.clear()
            self._ip_eni.clear()
            self._recovered.clear()
            self._gone_ips.clear()
            self._gone_enis.clear()
            self._granted.clear()
            self._absent.clear()
            self._unlisted.clear()
            self._parked = []
            self._loading = True
            try:
                meta = data.get("meta", {})
                if not isinstance(meta, dict):
                    raise TypeError("meta is not an object")
                _check_types(meta, int, ("last_seq",))  # the controller's report sequence
                self.meta = dict(meta)
                recovered = data.get("recovered", {})
                if not isinstance(recovered, dict):
                    raise TypeError("recovered is not an object")
                for ip, (holder, since) in recovered.items():
                    ipaddress.IPv4Address(ip)
                    _check_types({"holder": holder}, str, ("holder",))
                    _check_types({"since": since}, float, ("since",))
                    if not holder or since is None:
                        raise ValueError(f"recovered {ip}: empty holder or time")
                    self._recovered[ip] = (holder, float(since))
                self._restore_recent(data.get("recent", {}))
                parked = data.get("parked", [])
                if not isinstance(parked, list) or not all(isinstance(c, dict) for c in parked):
                    raise TypeError("parked is not a list of objects")
                self._parked = parked
                for raw in data["enis"]:
                    info = EniInfo(**raw["info"])
                    _check_types(info.__dict__, str, ("eni_id", "mac", "primary_ip", "subnet_id", "subnet_cidr"))
                    _check_types(info.__dict__, int, ("device_index", "network_card"))
                    ipaddress.IPv4Network(info.subnet_cidr, strict=False)
                    ips, prefixes = raw.get("ips", []), raw.get("prefixes", [])
                    if not isinstance(ips, list) or not isinstance(prefixes, list):
                        raise TypeError(f"{info.eni_id}: ips/prefixes are not lists")
                    for ip in ips:
                        ipaddress.IPv4Address(ip)  # ValueError: not an address
                    for p in prefixes:
                        ipaddress.IPv4Network(p)
                    self._enis[info.eni_id] = Eni(info=info, added_at=float(raw["added_at"]), ready=False)
                    self.add_addresses(info.eni_id, ips, prefixes)
                    self._enis[info.eni_id].ready = bool(raw.get("ready", True))
                    eni = self._enis[info.eni_id]
                    for st in raw.get("addrs", []):
                        a = eni.addrs.get(st["ip"])
                        if a is None:
                            continue
                        _check_types(st, str, ("container_id", "ifname", "netns"))
                        _check_types(st, float, ("assigned_at", "freed_at", "quarantined_at"))
                        a.container_id = st.get("container_id", "")
                        a.ifname = st.get("ifname", "")
                        a.netns = st.get("netns", "")
                        a.assigned_at = float(st.get("assigned_at", 0.0))
                        a.freed_at = st.get("freed_at")
                        a.quarantined_at = st.get("quarantined_at")
                        if a.container_id:
                            a.recovered = ""  # a named pod wins over a recovered holder
                            self._recovered.pop(a.ip, None)
                            self._owner[(a.container_id, a.ifname)] = a.ip
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # Nothing half-restored is left behind.
                self._enis.clear()
                self._owner.clear()
                self._ip_eni.clear()
                self._recovered.clear()
                self._gone_ips.clear()
                self._gone_enis.clear()
                self._granted.clear()
                self._absent.clear()
                self._unlisted.clear()
                self._parked = []
                self.meta = {}
                raise CheckpointError(f"corrupt checkpoint: {exc}") from None
            finally:
                self._loading = False
            return True

    def _restore_recent(self, recent: Any) -> None:
        if not isinstance(recent, dict):
            raise TypeError("recent is not an object")
        for kind, target in (("released", self._gone_ips), ("deleted", self._gone_enis), ("granted", self._granted)):
            entries = recent.get(kind, {})
            if not isinstance(entries, dict):
                raise TypeError(f"recent.{kind} is not an object")
            for key, entry in entries.items():
                until, seq = entry  # [until, in_reply_to]
                _check_types({"until": until}, float, ("until",))
                _check_types({"seq": seq}, int, ("seq",))
                if until is None or not math.isfinite(until):
                    raise ValueError(f"recent.{kind}.{key}: expiry {until!r}")  # never expiring: lost forever
                if kind in ("released", "granted"):
                    ipaddress.IPv4Network(key)  # an address or a prefix
                elif not isinstance(key, str) or not key.startswith("eni-"):
                    raise ValueError(f"recent.deleted: {key!r} is not an ENI id")
                target[key] = (float(until), int(seq))

    def reconcile(
        self,
        attached: Iterable[tuple[EniInfo, list[str], list[str]]],
        now: float,
        ready_new: Callable[[EniInfo], bool] | None = None,
    ) -> list[str]:
        """Make the ENIs and addresses match what is attached (IMDS wins for that);
        pod assignments on addresses still attached are kept (the checkpoint wins for that).
        An ENI seen for the first time is ready (its addresses handed out) only
        if ``ready_new(info)`` says so: a secondary ENI waits for its host set-up.

        Returns human-readable notes on what changed (pods dropped because their
        address is no longer attached are named).
        """
        notes: list[str] = []
        with self._lock:
            seen: set[str] = set()
            unlisted: set[str] = set()
            for info, ips, prefixes in attached:
                seen.add(info.eni_id)
                if self.add_eni(info, now, ready=True if ready_new is None else ready_new(info)):
                    notes.append(f"ENI {info.eni_id} added")
                eni = self._enis[info.eni_id]
                gone_ips = [ip for ip in eni.ips if ip not in set(ips)]
                gone_pfx = [p for p in eni.prefixes if p not in set(prefixes)]
                if gone_ips or gone_pfx:
                    # A pod's address is never taken from it here: IMDS may lag behind an
                    # assignment, and if EC2 truly took it, handing it to the next pod would
                    # make two holders. It stays the pod's, is never handed out again, and
                    # goes with the first resync after the pod (an alarm meanwhile).
                    for a in list(eni.addrs.values()):
                        if a.in_use and (a.ip in gone_ips or a.prefix in gone_pfx):
                            who = f"pod {a.container_id}/{a.ifname}" if a.container_id else f"holder {a.recovered}"
                            notes.append(f"{who} holds {a.ip}, which IMDS no longer lists: kept for it (alarm)")
                    removed = self.remove_addresses(info.eni_id, gone_ips, gone_pfx)
                    # What stays (held, or free in a held prefix) is not handed out again.
                    unlisted.update(a.ip for a in eni.addrs.values() if a.ip in gone_ips or a.prefix in gone_pfx)
                    if removed:
                        notes.append(f"ENI {info.eni_id}: {len(removed)} addresses gone")
                n = self.add_addresses(info.eni_id, ips, prefixes)
                if n:
                    notes.append(f"ENI {info.eni_id}: {n} addresses added")
            for eni_id in [e for e in self._enis if e not in seen]:
                for a in self._enis[eni_id].addrs.values():
                    if a.in_use:
                        notes.append(f"pod {a.container_id}/{a.ifname} lost {a.ip}: ENI detached")
                self.remove_eni(eni_id, force=True)
                notes.append(f"ENI {eni_id} removed: not attached")
            self._unlisted = unlisted
            self._save()
            self.changed.set()
        return notes
