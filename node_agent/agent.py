"""warmpool-agent: the node daemon (a DaemonSet pod, host network, root).

Wires the pure parts (datastore, controller) to I/O: IMDS, SQS, netlink, the
CNI unix socket, the localhost HTTP endpoints. Threads: the main loop (the
only caller of the controller), the result long-poller, the CNI socket
server, the HTTP server. They meet through thread-safe objects (datastore,
a queue of results, one wake-up event); nothing sleeps, they wait.

``warmpool-agent install-cni`` is the init container's command: it copies the
self-contained plugin into ``/opt/cni/bin``.
"""

from __future__ import annotations

import argparse
import contextlib
import email.utils
import functools
import logging
import os
import queue
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from node_agent import http as web
from node_agent import kubelet_config
from node_agent.checkpoint import CheckpointError, CheckpointWriteError, FileCheckpoint
from node_agent.cniserver import CniService, CniSocketServer, NetlinkPods, PodNetwork, RecordedPods
from node_agent.config import AgentConfig, ConfigError, load
from node_agent.controller import HELD_ALL_META, AttachedEni, HostNetwork, PoolController
from node_agent.datastore import HELD_OFFERS, HOLD_ON_RELEASE, HOLD_REASON, Datastore
from node_agent.hostnet import (
    IFNAMSIZ,
    VETH_DIGEST_MIN,
    HostWiring,
    host_veth_name,
    veth_prefix_of,
    veth_shaped,
    veths_of,
)
from node_agent.identity import CachedIdentity
from node_agent.imds import Identity, ImdsClient
from node_agent.records import UNKNOWN_HOLDER, NodeIdentity, PodRecord
from node_agent.records import UNROUTED_HOLDER as UNROUTED_HOLDER  # re-exported: the rebuild names it
from warmpool.clock import Clock, RealClock, SteadyClock
from warmpool.limits import InstanceLimits, known, max_pods
from warmpool.messages import MessageError, parse_result
from warmpool.names import result_queue_name
from warmpool.ports import SqsApi

T = TypeVar("T")
log = logging.getLogger("warmpool.agent")

POLL_WAIT_S = 20
RESULT_VISIBILITY_S = 10
"""A received result stays invisible this long; it is deleted once applied and checkpointed.
Short, so a result a killed agent received but never applied comes back soon after the
restart (applying a result twice is harmless)."""
RESTART_HOLD_S = RESULT_VISIBILITY_S + 5.0
"""After a start, quarantined addresses are not taken back until such a result could come back."""


class AwsClockCheck:
    """How far this node's clock may be ahead of AWS's, from the ``Date`` header of SQS's
    answers (RFC 9110: the time the answer was generated, in whole seconds).

    ``local - Date``, read once the answer is in, is at least how far the node's clock is
    ahead, whichever way it is off: the date is rounded down and was stamped before the
    answer travelled. So when it is negative the node's clock is *at least* that far
    behind. The newest sample is used, moved by any step of the node's clock since it was
    taken (``monotonic``: a clock that never steps, ``time.monotonic`` in production; its
    difference from ``clock`` changes only when the node's clock is stepped). The
    controller dates offers by :meth:`offset` (:attr:`PoolController.clock_ahead`), so a
    node clock off either way never makes an offer look younger to the allocator than it
    is, and one behind does not make every offer look too old to act on. Until a first
    answer with a date (the result-queue look-up at start gives one), 0."""

    WARN_S = 30.0

    def __init__(self, clock: Clock | None = None, monotonic: Callable[[], float] | None = None) -> None:
        self._ahead: float | None = None
        self._base: float | None = None
        """``clock - monotonic`` when the sample was taken (None: no step correction)."""
        self._clock, self._monotonic = clock, monotonic
        self._lock = threading.Lock()
        self._warned = False

    def observe(self, response: Any, local_after: float) -> None:
        """An AWS answer (boto3's dict, with ``ResponseMetadata.HTTPHeaders.date``) read at ``local_after``."""
        try:
            raw = response["ResponseMetadata"]["HTTPHeaders"]["date"]
            server = email.utils.parsedate_to_datetime(str(raw)).timestamp()
        except (KeyError, TypeError, ValueError, IndexError):
            return
        ahead = local_after - server
        base = local_after - self._monotonic() if self._monotonic is not None and self._clock is not None else None
        with self._lock:
            self._ahead, self._base = ahead, base
            warn, self._warned = (ahead > self.WARN_S and not self._warned), self._warned or ahead > self.WARN_S
        if warn:
            log.warning("this node's clock is %.0fs ahead of AWS's: release offers are dated that much earlier", ahead)

    def offset(self) -> float:
        """At least how far this node's clock is ahead of AWS's now (negative: behind)."""
        with self._lock:
            ahead, base = self._ahead, self._base
        if ahead is None:
            return 0.0
        if base is not None and self._clock is not None and self._monotonic is not None:
            ahead += (self._clock.now() - self._monotonic()) - base  # stepped since the sample
        return ahead

    def ahead(self) -> float:
        return max(0.0, self.offset())


class Metadata(Protocol):
    def identity(self) -> Identity: ...
    def interfaces(self) -> list[AttachedEni]: ...
    def get(self, path: str, *, missing_ok: bool = False, tree: str = "meta-data") -> str | None: ...


class NodeNet(Protocol):
    """Node-level host networking (:class:`node_agent.nodenet.NodeNetworking`)."""

    def setup(self) -> int: ...
    def problems(self) -> list[str]: ...
    def public(self) -> dict[str, object]: ...


NodeNetFactory = Callable[[Identity], NodeNet]


BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def boot_id(path: str = BOOT_ID_FILE) -> str | None:
    """This boot's id (a new one at every boot; the same for every process of one), None when
    unreadable: then a window after a checkpoint loss is never resumed, only opened in full."""
    try:
        with open(path, encoding="ascii") as f:
            value = f.read(64).strip()
    except OSError:
        return None
    return value or None


class WiringSource(Protocol):
    """What the start asks the pod network (:class:`node_agent.cniserver.PodNetwork` has it)."""

    def host_wiring(self) -> HostWiring | None: ...


def wiring_disagreements(ds: Datastore, wiring: HostWiring, veth_prefix: str) -> list[str]:
    """The host's pod wiring the datastore does not account for: each address with a ``/32``
    route to a pod's host veth must be held by that veth's pod (``host_veth_name`` of its
    container and interface) or by a recovered holder of that name. A checkpoint that
    parses and validates and still disagrees (an old copy restored from a backup, a pod's
    entry lost without a checksum to say so) would hand a running pod's address out again."""
    held = {p.ip: host_veth_name(p.container_id, p.ifname, veth_prefix) for p in ds.pods()}
    recovered = {h.ip: h.holder for h in ds.recovered_holders()}
    out = []
    for ip, veth in sorted(wiring.pods.items()):
        if held.get(ip) == veth or recovered.get(ip) == veth:
            continue
        has = held.get(ip) or recovered.get(ip)
        out.append(f"{ip} is wired to {veth} but the checkpoint has it " + (f"held by {has}" if has else "free"))
    return out


def carried_disagreements(
    ds: Datastore, pods: object, wiring: HostWiring | None = None, veth_prefix: str | None = None
) -> list[str]:
    """The restored records whose pod's interface carries other addresses than the record's: a
    record says pod P holds X, and P's interface (the peer of the attachment's veth:
    ``PodNetwork.carried``) carries addresses other than X alone. An older copy restored after the
    pod was ADDed again with another address (a DEL and an ADD of the same attachment since the
    copy, its routes and rules flushed, so the host's routes cannot tell): X went back to the
    pool then and may be another node's now, and the record would give X to P's next ADD and keep
    it in a second datastore (the simulation's seed 1001262). A pod network that cannot tell
    (no ``carried``, no such pair, a namespace gone, an interface with no IPv4 address) says
    nothing here. A read that fails (an interrupted dump, ``ENOBUFS``: netlink(7)) is read
    again, as :func:`read_wiring` reads; still failing, it is a disagreement (the start
    rebuilds rather than take a copy it could not check: review 31, A3).

    With the host's ``wiring`` and this agent's ``veth_prefix`` given, the attachment's veth of
    an earlier prefix among the host's veths (``WARMPOOL_VETH_PREFIX`` changed across the restart:
    :func:`node_agent.hostnet.veths_of`, as its DEL finds it) is read too, through
    ``PodNetwork.carried_under`` (review 31, A1: before, only this prefix's name was read). The
    record's address beside others is a disagreement too (review 31, A4: before, ``X in has``
    passed a pod carrying X and the address its re-ADD gave it).

    With the host's ``wiring`` given, the restored *recovered holders* are read too
    (:func:`holder_disagreements`: review 31, A2)."""
    return _named_disagreements(ds, pods, wiring, veth_prefix) + holder_disagreements(ds, pods, wiring, veth_prefix)


def holder_disagreements(ds: Datastore, pods: object, wiring: HostWiring | None, veth_prefix: str | None) -> list[str]:
    """The restored recovered holders named after one of the agent's pod veths (this prefix's, or
    shaped as :func:`node_agent.hostnet.host_veth_name` names them under any prefix) that the
    host has, whose pod-side peer carries anything but the address the attachment's next ADD
    takes, alone: the record's of the attachment the veth is named after, or else the holder's
    only address, or the first of several if it is attached (the ADD takes the first attached:
    review 39, H1; review 40, C1). A rebuild
    (or a failed ADD) holds a pod's address by its veth's name, and the attachment's next ADD takes
    it (``CniService._held``); a copy written then and restored after the attachment was DELed and
    ADDed again with another address (its routes and rules flushed since, so the host's routes
    cannot tell) would give the attachment's next ADD the old address, which went back to the pool
    and may be another node's (seed 1001262's shape, with a holder in place of the record: review
    31, A2). A holder names no namespace, so the peer is found from the host's side
    (``PodNetwork.peers_carried``: the namespaces the runtimes pin, each link there paired with the
    host veth). A peer carrying no IPv4 address, one found in no namespace the agent can read, or a
    pod network that cannot tell says nothing, as for a record; a read that keeps failing is a
    disagreement (A3's rule). What it costs: a start that rebuilds when a pod gave itself another
    address (row 32: more held, never less)."""
    read = getattr(pods, "peers_carried", None)
    if wiring is None or veth_prefix is None or read is None:
        return []
    veths = _veths(wiring)
    holds: dict[str, set[str]] = {}
    for h in ds.recovered_holders():
        if h.holder in (UNKNOWN_HOLDER, UNROUTED_HOLDER, ROUTED_HOLDER) or h.holder not in veths:
            continue
        if veth_shaped(h.holder) or h.holder.startswith(veth_prefix):
            holds.setdefault(h.holder, set()).add(h.ip)
    if not holds:
        return []
    recorded: dict[str, str] = {}  # the attachment's own record: its next ADD takes that address
    for p in ds.pods():
        for name in veths_of(p.container_id, p.ifname, holds, veth_prefix):
            recorded[name] = p.ip
    got, failed = _read_tries(functools.partial(read, sorted(holds)))
    if failed is not None:
        return [f"the peers of the recovered holders' veths could not be read ({failed})"]
    out = []
    for name, ips in sorted(holds.items()):
        has = (got or {}).get(name)
        if not has:
            continue
        # What the attachment's next ADD takes must be what the peer carries alone: the record's
        # address, or the holder's only one. A veth held for several addresses with no record
        # disagrees whatever its peer carries: the ADD takes the lowest one attached then
        # (``Datastore.lookup_recovered``), which may not be the one the peer carries (review 39,
        # H1: the peer carried Z, the ADD took X, another node's).
        take = _next_add_takes(ds, name, ips, recorded.get(name))
        if has != [take]:
            out.append(
                f"the peer of veth {name} carries {', '.join(has)} but the checkpoint has it holding"
                f" {', '.join(sorted(ips | ({take} if take else set())))}"
                + ("" if take else " (several: its next ADD's is not known)")
            )
    return out


def _next_add_takes(ds: Datastore, veth: str, held: set[str], record: str | None) -> str | None:
    """The address the next ADD of the attachment ``veth`` is named after takes, as far as the
    start can tell: its record's, else its holder's only one; of several, the ADD takes the first
    attached in the holders' order (``Datastore.lookup_recovered``), and one that is the first of
    them all, attached now, stays the ADD's (review 40, C1: refusing every such holder rebuilt at
    every start, the rebuild writing the same holder again from the routes). None: not known."""
    if record is not None:
        return record
    if len(held) == 1:
        return next(iter(held))
    first = ds.lookup_recovered(veth)
    return first.ip if first is not None and first.ip == min(held) else None


def _named_disagreements(
    ds: Datastore, pods: object, wiring: HostWiring | None = None, veth_prefix: str | None = None
) -> list[str]:
    earlier = _earlier_veths(wiring, veth_prefix)
    reader = getattr(pods, "carried_reader", None)
    if reader is not None:
        with reader() as carried:
            return _carried_disagreements(ds, carried, earlier)
    carried = getattr(pods, "carried", None)
    if carried is None:
        return []
    under = getattr(pods, "carried_under", None)

    def read(netns: str, ifname: str, container_id: str, prefix: str | None = None) -> list[str] | None:
        if prefix is None:
            return carried(netns, ifname, container_id)  # type: ignore[no-any-return]
        return under(netns, ifname, container_id, prefix) if under is not None else None

    return _carried_disagreements(ds, read, earlier)


CarriedRead = Callable[..., "list[str] | None"]
"""``read(netns, ifname, container_id[, veth_prefix])``: what the pod's ``ifname`` carries as the
peer of the attachment's veth under ``veth_prefix`` (the agent's own when not given)."""


def _earlier_veths(wiring: HostWiring | None, veth_prefix: str | None) -> Callable[[str, str], list[tuple[str, str]]]:
    """``(container_id, ifname) -> [(veth, prefix)]``: the attachment's veths among the host's of
    a prefix other than ``veth_prefix`` (:func:`node_agent.hostnet.veths_of`), looked up in an
    index of the host's veth names made once (a scan of every name per record would make the
    start's check quadratic in the pods again: review 31, A5)."""
    if wiring is None or veth_prefix is None:
        return lambda _cid, _ifname: []
    index: dict[str, list[str]] = {}
    for name in sorted(_veths(wiring)):
        if len(name) == IFNAMSIZ - 1:
            for k in range(1, VETH_DIGEST_MIN):
                index.setdefault(name[k:], []).append(name)

    def of(container_id: str, ifname: str) -> list[tuple[str, str]]:
        digest = host_veth_name(container_id, ifname, "")
        mine = host_veth_name(container_id, ifname, veth_prefix)
        out = []
        for k in range(1, VETH_DIGEST_MIN):
            for name in index.get(digest[: IFNAMSIZ - 1 - k], []):
                prefix = veth_prefix_of(name, container_id, ifname)
                if name != mine and prefix is not None and (name, prefix) not in out:
                    out.append((name, prefix))
        return out

    return of


def _carried_disagreements(
    ds: Datastore, carried: CarriedRead, earlier: Callable[[str, str], list[tuple[str, str]]]
) -> list[str]:
    out = []
    for p in ds.pods():
        if not p.netns:
            continue
        veths: list[tuple[str, str | None]] = [("", None), *earlier(p.container_id, p.ifname)]
        for veth, prefix in veths:
            # a namespace gone is None, not an error (PodNetwork.carried)
            args = (p.netns, p.ifname, p.container_id) + (() if prefix is None else (prefix,))
            has, failed = _read_tries(functools.partial(carried, *args))
            via = f" (its veth {veth})" if veth else ""
            if failed is not None:
                out.append(f"{p.container_id[:12]}/{p.ifname}: its interface could not be read{via} ({failed})")
                break
            if has and has != [p.ip]:
                out.append(
                    f"{p.container_id[:12]}/{p.ifname} carries {', '.join(has)}{via}"
                    f" but the checkpoint has it holding {p.ip}"
                )
                break
    return out


def _veths(wiring: HostWiring) -> set[str]:
    """The host's veths: the links of that kind, and the agent's own (``pods``) whatever the
    reader said of their kind."""
    return set(wiring.veths) | set(wiring.pods.values())


WIRING_READ_TRIES = 3
"""How often the start reads the host's pod wiring before it gives up: a netlink dump can fail
for a moment (ENOBUFS when the socket's buffer overflows, EINTR, a dump interrupted by a change:
netlink(7)), and read again it answers."""


def _read_tries(read: Callable[[], T]) -> tuple[T | None, OSError | None]:
    """``read()``, tried up to :data:`WIRING_READ_TRIES` times while it raises ``OSError``: its
    answer, or None and the last error (the start's checks of a restored copy)."""
    failed: OSError | None = None
    for _ in range(WIRING_READ_TRIES):
        try:
            return read(), None
        except OSError as exc:
            failed = exc
    return None, failed


def read_wiring(pods: WiringSource, tries: int = WIRING_READ_TRIES) -> HostWiring | None:
    """The host's pod wiring, read again after a failure, up to ``tries`` times (hostile review
    of the checkpoint checks, C2: one failed dump stopped the start). Still failing, it raises:
    a start never goes on without the read that tells it which addresses pods use (the agent
    exits and its restart reads again)."""
    for attempt in range(1, tries):
        try:
            return pods.host_wiring()
        except OSError as exc:
            log.warning("reading the host's pod wiring failed (%s); reading again (%d of %d)", exc, attempt, tries)
    try:
        return pods.host_wiring()
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read the host's pod wiring ({tries} tries, the last: {exc})") from exc


def unwired_pods(ds: Datastore, wiring: HostWiring, veth_prefix: str) -> list[PodRecord]:
    """The pods the datastore lists of which nothing is left on the host: no ``/32`` route to
    their address via any link, no pod rule for it, and no host veth of their name. Gone since
    the checkpoint was written (an earlier copy restored: deleted since, their DEL answered by
    the process whose later writes were lost). Any one of those left keeps the pod: a route alone
    can go while the pod runs (its veth set down, a network manager's flush: review of aa51bac,
    F1), and a veth prefix changed across the restart hides the pods' veths from
    ``wired_pods`` but not their routes (F2). A pod wired to another veth is a disagreement
    instead (:func:`wiring_disagreements`)."""
    return [
        p
        for p in ds.pods()
        if p.ip not in wiring.pods
        and p.ip not in wiring.routed
        and p.ip not in wiring.stale
        and not veths_of(p.container_id, p.ifname, wiring.links, veth_prefix)
    ]


def unrouted_veths(wiring: HostWiring, veth_prefix: str) -> set[str]:
    """The host's veths that may be a pod's of this agent and have no ``/32`` route: this
    prefix's links, and veths named as :func:`node_agent.hostnet.host_veth_name` names them under
    any prefix (:func:`node_agent.hostnet.veth_shaped`). Such a pod's address the host may not show
    at all: a veth set down loses its routes, and a network manager drops foreign rules (review
    14, R1)."""
    maybe = {link for link in wiring.links if link.startswith(veth_prefix)}
    maybe |= {v for v in wiring.veths if veth_shaped(v)}
    return maybe - set(wiring.routed_via.values()) - set(wiring.pods.values())


def _link_names(wiring: HostWiring) -> set[str]:
    """Every link name the read shows (:meth:`HostWiring.link_names`)."""
    return wiring.link_names()


def unnamed_unrouted_veths(ds: Datastore, wiring: HostWiring, veth_prefix: str) -> set[str]:
    """Each :func:`unrouted_veths` veth that neither a restored pod (its veth under any prefix) nor a
    recovered holder names: a pod the copy lacks, of an address the host does not say. A restored
    pod names its routeless veth only while the host shows its pod rule with no route (a trace of
    that record's address): with none, the pod may have been DELeted and ADDed again since the
    copy (the same container and interface, so the same veth name) and carry another address
    (review 15, N1)."""
    named = {h.holder for h in ds.recovered_holders()}
    links = _link_names(wiring)
    for p in ds.pods():
        # its rule with no /32 route through any link: a rule routed through another prefix's veth
        # is that pod's, not a trace of this record (review 17, N1')
        if p.ip in wiring.stale and p.ip not in wiring.routed:
            named |= veths_of(p.container_id, p.ifname, links, veth_prefix)
    return unrouted_veths(wiring, veth_prefix) - named


def doubtful_records(ds: Datastore, wiring: HostWiring, veth_prefix: str) -> dict[str, str]:
    """The restored pods' addresses another running pod may carry -> the holder that keeps each
    when its record is released (:data:`node_agent.datastore.HOLD_ON_RELEASE`). A record is the
    address's only possible holder when the host routes the address through the pod's own veth
    (under any prefix), or routes it through no link and every other veth with no route is a
    recovered holder's (each carries its own address): every running pod carries the address its
    veth is routed for or, routeless, an address the host does not say. Else an older copy may
    name a pod DELeted since whose address a running pod got (its route gone, or through another
    prefix's veth), and that record's GC or DEL would free it (review 14, O1). Held then by the
    link the host routes it through, or :data:`UNROUTED_HOLDER`."""
    others = unrouted_veths(wiring, veth_prefix) - {h.holder for h in ds.recovered_holders()}
    out: dict[str, str] = {}
    links = _link_names(wiring)
    for p in ds.pods():
        own = veths_of(p.container_id, p.ifname, links, veth_prefix)
        via = wiring.routed_via.get(p.ip) or wiring.pods.get(p.ip)
        if via in own:
            continue
        if via is not None or others - own:
            out[p.ip] = via or UNROUTED_HOLDER
    return out


def hold_doubtful(ds: Datastore, wiring: HostWiring, now: float, veth_prefix: str) -> None:
    """After a restore, what the host cannot rule out another running pod carries stays held
    (review 14, O1 and R1): each address of :func:`doubtful_records`, when its record is released
    (:data:`node_agent.datastore.HOLD_ON_RELEASE`); and, while a veth the copy names no pod for
    has no route (:func:`unnamed_unrouted_veths`: its pod's address may be any), every free
    address, offered ones too, as the rebuild holds them (by ``UNKNOWN_HOLDER``, and what IMDS alone shows later:
    :data:`HELD_ALL_META`). A write that fails leaves the datastore dirty (the next write)."""
    holds = doubtful_records(ds, wiring, veth_prefix) or None
    unnamed = sorted(unnamed_unrouted_veths(ds, wiring, veth_prefix))
    if holds == ds.meta.get(HOLD_ON_RELEASE) and not unnamed:
        return
    unnoted = unnoted_holds(ds)  # the copy's own holds, before this start's
    with contextlib.suppress(CheckpointWriteError), ds.batch():
        ds.set_meta(HOLD_ON_RELEASE, holds)
        if unnamed:
            # offered ones too: handed back after the copy, a pod the copy lacks may carry one (review 15, Q1)
            before = ds.meta.get(HOLD_REASON_META)
            n = ds.hold_all(now)  # the offered ones noted: their offer stands (HELD_OFFERS, seed 1509)
            ds.set_meta(HELD_ALL_META, now)
            # its reason in the same write (review 19, U1: a crash between), with what the copy
            # noted, or UNNOTED for a copy's hold that noted none (review 20, U2: overwritten, an
            # upgrade's unnoted hold ended at this hold's pods' DELs)
            prior = set(before) if isinstance(before, list) else set()
            ds.set_meta(
                HOLD_REASON_META,
                sorted(prior | ({UNNOTED} if unnoted else set()) | routeless_links(wiring, veth_prefix)),
            )
            log.warning("restore: %d free addresses held: pod veths with no route the checkpoint lacks: %s", n, unnamed)


ROUTED_HOLDER = "routed"
"""The holder a rebuild names for an address routed through a link it cannot name."""

HOLD_REASON_META = HOLD_REASON
"""The links a start's holds stand for (:data:`node_agent.datastore.HOLD_REASON`)."""


def routeless_links(wiring: HostWiring, veth_prefix: str) -> set[str]:
    """The links with no ``/32`` route that may be a pod's of this agent (:func:`unrouted_veths`:
    this prefix's links, and veths named as ``host_veth_name`` names them under any prefix of up
    to 7 characters): what a hold of every address and an :data:`UNROUTED_HOLDER` stand for, and
    what a DEL can name. Not another CNI's or Docker's bridge ports (``veth`` and 7 hex digits):
    no DEL of ours ever names them, and a hold standing for one would never end (review 19,
    D1)."""
    return unrouted_veths(wiring, veth_prefix)


UNNOTED = "(unnoted)"
"""A hold's reason that no DEL takes out: a hold of every address, or an ``unrouted`` holder,
restored from a checkpoint that noted no reason (an agent before reasons were noted): which pods
it stood for is not known, so it ends no more than it did then (review 19, U1)."""


def unnoted_holds(ds: Datastore) -> bool:
    """Whether a restored copy holds every address, or holds (or is to hold) an address by
    :data:`UNROUTED_HOLDER`, without a reason noted: an agent's from before reasons were."""
    if isinstance(ds.meta.get(HOLD_REASON_META), list):
        return False
    unrouted = any(h.holder == UNROUTED_HOLDER for h in ds.recovered_holders())
    unrouted |= UNROUTED_HOLDER in (ds.meta.get(HOLD_ON_RELEASE) or {}).values()
    return unrouted or ds.meta.get(HELD_ALL_META) is not None


def note_hold_reason(ds: Datastore, wiring: HostWiring, veth_prefix: str, *, unnoted: bool = False) -> None:
    """At a start that read the host's wiring, after its holds: while every address is held, or
    an address is held (or to be held on its record's release) by :data:`UNROUTED_HOLDER`, the
    routeless links now (with those noted before) are the hold's reason (:data:`HOLD_REASON_META`).
    A write that fails leaves the datastore dirty (the next write)."""
    unrouted = any(h.holder == UNROUTED_HOLDER for h in ds.recovered_holders())
    unrouted |= UNROUTED_HOLDER in (ds.meta.get(HOLD_ON_RELEASE) or {}).values()
    if ds.meta.get(HELD_ALL_META) is None and not unrouted:
        return
    before = ds.meta.get(HOLD_REASON_META)
    # What the copy noted stays, whether or not the host still has those links: a link is not its
    # pod (seed 732: a veth went while its pod ran on), and only the pod's DEL ends its part. A
    # copy older than some of those DELs (a disk that lost its last writes) keeps the hold for
    # good, a leak (review 19, C1). A hold the copy noted no reason for stays as it was (UNNOTED).
    kept = (set(before) if isinstance(before, list) else set()) | ({UNNOTED} if unnoted else set())
    reason = sorted(kept | routeless_links(wiring, veth_prefix))
    if reason != before:
        with contextlib.suppress(CheckpointWriteError):
            ds.set_meta(HOLD_REASON_META, reason)


def lift_unfounded_holds(ds: Datastore, controller: PoolController, now: float) -> list[str]:
    """The hold a start made for pod veths with no route ends once the runtime has DELeted the
    pod of each (:data:`HOLD_REASON_META` empty: ``CniService._end_holds_of`` takes each DELeted
    attachment's veth out of it): every address held by :data:`UNKNOWN_HOLDER` or
    :data:`UNROUTED_HOLDER` is let go, and the hold of every address (:data:`HELD_ALL_META`) and
    the holds on release (:data:`HOLD_ON_RELEASE`) by ``unrouted`` end with it. A pod wired
    before the start had, at the start, a route (its holder is named after its veth, which its
    DEL releases) or none (its veth among the reason's links); a pod this process wired has a
    record of its own address; so once those pods are DELeted, no pod the runtime runs carries an
    address the agent does not know. Not when their veths merely go: a pod whose veth went (a
    failed ADD's teardown of its name, a link deleted by hand) is still the runtime's, its
    address still its own in Kubernetes (the simulation's seed 732). The addresses let go are
    offered as of unknown origin (:meth:`PoolController.release_unknown_holders`: the allocator
    unassigns and replaces them). Returns them. May raise CheckpointWriteError (memory holds the
    change; the datastore's flush writes it)."""
    reason = ds.meta.get(HOLD_REASON_META)
    if not isinstance(reason, list) or reason:
        return []
    if controller.holders_on_held_enis((UNKNOWN_HOLDER, UNROUTED_HOLDER)):
        return []  # wait: on a held ENI the release would skip the quarantine (review 18, H1)
    with ds.batch():  # every read under the datastore's lock: a DEL or GC may run beside (review 18, R2)
        if ds.meta.get(HOLD_REASON_META) != []:
            return []
        holds = ds.meta.get(HOLD_ON_RELEASE) or {}
        keep = {ip: h for ip, h in holds.items() if h != UNROUTED_HOLDER}
        if keep != holds:
            ds.set_meta(HOLD_ON_RELEASE, keep or None)
        if ds.meta.get(HELD_ALL_META) is not None:
            ds.set_meta(HELD_ALL_META, None)  # first: the release offers, no longer holds
        if ds.meta.get(HELD_OFFERS) is not None:
            ds.set_meta(HELD_OFFERS, None)  # let go, they are offered again (as of unknown origin)
        ds.set_meta(HOLD_REASON_META, None)
        freed = controller.release_unknown_holders(now, (UNKNOWN_HOLDER, UNROUTED_HOLDER))
    log.warning(
        "the pods a start's hold stood for are all DELeted; held addresses let go, offered back as of "
        "unknown origin: %s",
        ", ".join(a.ip for a in freed) or "none",
    )
    return [a.ip for a in freed]


def _routed_pods(wiring: HostWiring, veth_prefix: str) -> dict[str, str]:
    """Every address with a ``/32`` route through any link -> the holder a start names for it:
    this prefix's veth (a later DEL of the pod finds it), else the link the route goes through
    (a pod of another veth prefix, or whose host side is no veth: held until a start no longer
    sees its route; its DEL names this prefix's veth and finds nothing, a leak, never a second
    holder). The OS's routes to its gateway and resolver are held too, harmlessly: EC2 never
    assigns those addresses (review 13: narrowed to veths, a pod on a netkit or macvlan device was
    not held). A pod rule with no route is a pod too while a veth has no route: a route alone can
    go while its pod runs (review 7, F1; review 11, W3), and which rule is that veth's the host
    does not say, so each such rule's address is held (by :data:`UNROUTED_HOLDER`; if its veth was
    in fact gone, its pod's retried DEL names the address in its ``prevResult`` and releases it with
    its rules: ``CniService._delete``, review 13's U1-leak)."""
    veths = _veths(wiring)
    out = {ip: wiring.routed_via.get(ip, ROUTED_HOLDER) for ip in wiring.routed}
    out.update(wiring.pods)
    routed_links = set(wiring.routed_via.values()) | set(wiring.pods.values())
    unrouted = {link for link in wiring.links if link.startswith(veth_prefix)} | veths
    if unrouted - routed_links:  # a veth of any prefix (review 12, U1) with no route
        out.update({ip: UNROUTED_HOLDER for ip in wiring.stale if ip not in out})
    return out


def hold_wired(ds: Datastore, wiring: HostWiring, now: float, veth_prefix: str) -> list[str]:
    """After a restore: every address the host routes to a pod (:func:`_routed_pods`) that no
    restored pod holds is held by a recovered holder, attached now or when IMDS shows it, rather
    than trusted free or offered. A valid copy older than a pod (restored from a backup, its
    later writes lost) lacks it; before, such a copy was refused for a route through this
    prefix's veth only, and the checks widened to other links since either missed pods (another
    prefix, a route flushed, a copy without the pod's subnet) or refused sound copies (the OS's
    gateway route, another CNI's pod): reviews 10 to 13."""
    known = {h.ip: h.holder for h in ds.recovered_holders()}
    return ds.recover({ip: h for ip, h in _routed_pods(wiring, veth_prefix).items() if known.get(ip) != h}, now)


def release_unwired(ds: Datastore, wiring: HostWiring, now: float, veth_prefix: str) -> list[PodRecord]:
    """Release what :func:`unwired_pods` hold, as a DEL would (the address enters its cooldown;
    one of an address marked for the offers of unknown origin goes there). No runtime sends the
    DEL of a pod it deleted already, and containerd calls no CNI GC, so kept, such a pod held its
    address for good, the node's pool one larger than EC2's for as long (simulation seed 3619:
    an old copy restored, its deleted pod's address unassigned since and given to another node;
    the agent offered its "surplus" and the allocator handed it back, to the end). The rebuild
    trusts the host's routes the same way (a pod whose veth is gone is not held). A restored
    checkpoint's free addresses wait for the allocator's restore check, these as well. A write
    that fails leaves the datastore dirty (written again by the next write or flush)."""
    gone = unwired_pods(ds, wiring, veth_prefix)
    if not gone:
        return []
    with contextlib.suppress(CheckpointWriteError), ds.batch():
        for p in gone:
            ds.release(p.container_id, p.ifname, now)
    for p in gone:
        log.warning(
            "checkpoint lists pod %s/%s holding %s, which the host wires to no veth: released",
            p.container_id,
            p.ifname,
            p.ip,
        )
    return gone


def release_gone_holders(ds: Datastore, wiring: HostWiring, now: float, veth_prefix: str) -> list[str]:
    """After a restore: a recovered holder named after a pod veth (this prefix's, or shaped as
    :func:`node_agent.hostnet.host_veth_name` names them under any prefix) of which nothing is
    left on the host (no such link, no ``/32`` route to its address, no pod rule for it) is
    released, as :func:`release_unwired` releases such a record: its pod was DELeted after the
    copy was written, by a process whose writes were lost, and no runtime sends that DEL again
    (the simulation's seed 2233: held for as long as the checkpoint lasted). Returns the addresses
    released. A write that fails leaves the datastore dirty (the next write)."""
    links = _link_names(wiring)
    gone = sorted(
        {
            h.holder
            for h in ds.recovered_holders()
            if h.holder not in (UNKNOWN_HOLDER, UNROUTED_HOLDER, ROUTED_HOLDER)
            and (veth_shaped(h.holder) or h.holder.startswith(veth_prefix))
            and h.holder not in links
            and h.ip not in wiring.routed
            and h.ip not in wiring.pods
            and h.ip not in wiring.stale
        }
    )
    freed: list[str] = []
    if not gone:
        return freed
    with contextlib.suppress(CheckpointWriteError), ds.batch():
        for holder in gone:
            freed += [a.ip for a in ds.release_recovered(holder, now)]
    log.warning("restore: recovered holders of pods gone from the host released: %s", ", ".join(gone))
    return freed


def restore_checked(
    ds: Datastore, pods: WiringSource | None, veth_prefix: str, *, now: float | None = None
) -> tuple[bool, CheckpointError | None]:
    """The start's read of the checkpoint: ``(restored, damaged)``. Damaged when it cannot be
    read, its checksum does not match (:func:`node_agent.checkpoint.check_checksum`), or it
    disagrees with the host's pod wiring (:func:`wiring_disagreements`) or with what a listed
    pod's interface carries (:func:`carried_disagreements`; read when the pod network can
    tell); then nothing of it is kept and the start rebuilds (:meth:`Agent._rebuild`).
    Restored, with ``now`` given and the host's wiring read, the pods it lists that the host
    no longer wires are released (:func:`release_unwired`)."""
    try:
        if not ds.restore():
            return False, None
    except CheckpointError as exc:
        return False, exc
    wiring = read_wiring(pods) if pods is not None else None
    wrong = wiring_disagreements(ds, wiring, veth_prefix) if wiring is not None else []
    if wiring is not None:
        wrong += carried_disagreements(ds, pods, wiring, veth_prefix)
    if not wrong:
        if wiring is not None and now is not None:
            unnoted = unnoted_holds(ds)  # the copy's own holds, before this start's
            hold_doubtful(ds, wiring, now, veth_prefix)
            release_unwired(ds, wiring, now, veth_prefix)
            release_gone_holders(ds, wiring, now, veth_prefix)
            for note in hold_wired(ds, wiring, now, veth_prefix):
                log.warning("restore: %s (the host routes it to a pod the checkpoint does not list)", note)
            note_hold_reason(ds, wiring, veth_prefix, unnoted=unnoted)
        if ds.restored_unchecksummed:
            log.warning(
                "checkpoint without a checksum (an older agent's): restored%s; the next write adds one",
                "" if wiring is None else " after its check against the host's pod wiring",
            )
        return True, None
    ds.forget()
    more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
    return False, CheckpointError("checkpoint disagrees with the host's pod wiring: " + "; ".join(wrong[:3]) + more)


class Agent:
    """One node's agent. ``start()`` then ``run(stop_event)`` (or ``run_once()`` in tests)."""

    def __init__(
        self,
        cfg: AgentConfig,
        sqs: SqsApi,
        metadata: Metadata,
        *,
        host: HostNetwork | None = None,
        pods: PodNetwork | None = None,
        clock: Clock,
        limits: InstanceLimits | None = None,
        poll_wait_s: int = POLL_WAIT_S,
        serve_http: bool = True,
        node_net: NodeNetFactory | None = None,
        monotonic: Callable[[], float] | None = None,
        boot_id: str | None = None,
    ) -> None:
        self.cfg = cfg
        self._boot_id = boot_id
        self.sqs = sqs
        self.metadata = metadata
        self.host = host
        self.pods = pods
        self.clock = clock
        self._limits = limits
        self.poll_wait_s = poll_wait_s
        self.serve_http = serve_http
        self._node_net_factory = node_net
        self.node_net: NodeNet | None = None
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.results: queue.Queue[dict[str, Any]] = queue.Queue()
        self.ready = False
        self.loop_at = 0.0
        self.counters: dict[str, int] = {
            "reports_send_errors": 0,
            "results_invalid": 0,
            "results_poll_errors": 0,
            "checkpoint_rebuilds_damaged": 0,
            "checkpoint_rebuilds_missing": 0,
            "recovered_holders": 0,
            "checkpoint_write_errors": 0,
        }
        self._threads: list[threading.Thread] = []
        self.ds: Datastore
        self.controller: PoolController
        self.kubelet = kubelet_config.Found(None, "not read yet")
        self.cni: CniService
        self.socket_server: CniSocketServer | None = None
        self.http: web.HttpServer | None = None
        self.result_queue_url = ""
        self.result_queue_name = ""
        self.aws_clock = AwsClockCheck(clock, monotonic)
        self._grace_from = 0.0
        self._grace_for: object = None
        """The ``HELD_ALL_META`` whose grace ``_grace_from`` times: a hold begun later (a restored
        checkpoint found not current in ``recorded`` mode) starts the grace again."""

    # --- start-up ---------------------------------------------------------------------------

    def _pod_network(self) -> PodNetwork:
        if self.cfg.pod_network == "recorded":
            return RecordedPods(self.cfg.veth_prefix)
        return NetlinkPods(self.cfg.host_netns, self.cfg.veth_prefix)

    def start(self) -> None:
        cfg = self.cfg
        ident = self.metadata.identity()
        limits = self._limits or known(ident.instance_type)
        self.limits = limits
        if self._node_net_factory is not None:
            # Forwarding, rp_filter, primary MTU, SNAT and the NodePort return path, before any pod.
            self.node_net = self._node_net_factory(ident)
            log.info("node network set up (%d changes)", self.node_net.setup())
        self.identity = NodeIdentity(
            cluster=cfg.cluster,
            node=cfg.node_name or ident.instance_id,
            instance_id=ident.instance_id,
            instance_type=ident.instance_type,
            availability_zone=ident.availability_zone,
        )
        checkpoint = FileCheckpoint(cfg.checkpoint_path)
        self.ds = Datastore(
            cooldown_s=cfg.timing.cooldown_s,
            pending_ttl_s=cfg.timing.pending_ttl_s,
            checkpoint=checkpoint,
        )
        self.pods = self.pods or self._pod_network()
        restored, damaged = restore_checked(self.ds, self.pods, cfg.veth_prefix, now=self.clock.now())
        self.kubelet = kubelet_config.read(cfg.kubelet_config, cfg.kubelet_flags)
        if self.kubelet.max_pods is not None:
            log.info("the kubelet's max pods: %d (%s); reported, and the pool stays under it", *self._kubelet_note())
        else:
            log.info("the kubelet's max pods: %s", self.kubelet.source)
        self.controller = PoolController(
            self.identity,
            limits,
            replace(cfg.pool, kubelet_max_pods=self.kubelet.max_pods or 0),
            self.ds,
            cfg.timing,
            host=self.host,
            metadata=self.metadata,
            mtu=cfg.mtu,
            restart_hold_s=RESTART_HOLD_S,
            signed_identity=CachedIdentity(self.metadata).get,
            clock_ahead=self.aws_clock.offset,
            monotonic=self._monotonic,
            boot_id=self._boot_id,
            pods_unseen=cfg.pod_network == "recorded",
        )
        self.result_queue_name = result_queue_name(cfg.result_queue_prefix, ident.instance_id)
        self.result_queue_url = self._find_result_queue()  # before the first report: AWS's clock
        now = self.clock.now()
        self._grace_from = self._steady()
        if restored:
            notes, how = self.controller.start(now, restored=True), "restored"
        else:
            notes, how = self._rebuild(checkpoint, damaged, now)
        self._grace_for = self.ds.meta.get(HELD_ALL_META)
        log.info(
            "started %s (%s in %s): checkpoint %s; %d reconcile notes",
            ident.instance_id,
            ident.instance_type,
            ident.availability_zone,
            how,
            len(notes),
        )
        self._last_resync = now
        self.cni = CniService(
            self.ds,
            self.pods,
            mtu=cfg.hostnet.pod_mtu,
            add_wait_s=cfg.add_wait_s,
            clock=self.clock,
            on_unmet=self.wake.set,
            veth_prefix=cfg.veth_prefix,
        )
        self.socket_server = CniSocketServer(cfg.socket_path, self.cni)
        self._threads.append(self.socket_server.serve_in_thread())
        if self.serve_http:
            host, port = cfg.metrics_host_port
            self.http = self._http(host, port)
            self._threads.append(self.http.serve_in_thread())
        t = threading.Thread(target=self._poll_results, name="results", daemon=True)
        t.start()
        self._threads.append(t)
        self.loop_at = time.monotonic()
        self.ready = True

    def _rebuild(
        self, checkpoint: FileCheckpoint, damaged: CheckpointError | None, now: float
    ) -> tuple[list[str], str]:
        """No usable checkpoint: IMDS says what is attached (the normal start), the host says
        which of those addresses pods use. Never a silent double assignment:

        * ``netlink`` pod network: every ``/32`` route to a host veth is a pod this agent
          wired; its address is held by a recovered holder named after the veth, which a
          later DEL/CHECK/ADD of that (container, interface) finds again;
        * ``recorded`` (nothing in the kernel to read): every attached address is held
          (``WARMPOOL_RECOVERY_GRACE_S`` may let them go later) and the allocator is asked
          for fresh ones.

        A missing checkpoint with pods wired on the host (state directory lost) is
        recovered the same way; a first start finds nothing and is a plain start.
        The damaged file stays in place until the rebuilt checkpoint replaces it, in one
        write: a crash half-way rebuilds again.
        """
        pods = self.pods
        assert pods is not None
        wiring = read_wiring(pods)
        # A /32 route through any link is a pod too: a veth of another prefix (the setting
        # changed across the restart) is one (review 10, A2: before, only this prefix's veths
        # were held, and such a pod's address was offered as of unknown origin while it ran).
        routed = _routed_pods(wiring, self.cfg.veth_prefix) if wiring is not None else {}
        veths = _veths(wiring) if wiring is not None else set()
        # a pod's veth with no route: its address may be any (its rule gone too: review 14, R1)
        unknown = sorted(unrouted_veths(wiring, self.cfg.veth_prefix)) if wiring is not None else []
        pods_seen = bool(unknown) or any(h in veths or h == UNROUTED_HOLDER for h in routed.values())
        if damaged is None and wiring is not None and not pods_seen:
            # A first start, or a lost state directory with no pod wired: either way nothing
            # says what an earlier process offered back (free addresses are held as offered).
            # With WARMPOOL_ADOPT_LAUNCH_POOL and the host's wiring read showing nothing routed
            # to a pod (no veth of this agent's prefix, no stale pod rule, no /32 route through
            # any link: a pod of another prefix or another CNI is one, a hostile review's F3),
            # the allocator is asked whether this is the instance's first start: confirmed, what
            # the node booted with is its pool (docs/safety.md, row 30). Not with ``recorded``
            # (no wiring to read: a pod of an earlier process may hold any address).
            first = (
                self.cfg.adopt_launch_pool
                and wiring is not None
                and not wiring.pods
                and not wiring.stale
                and not wiring.routed
            )
            # No veth pod: a first start, counted as none of the rebuilds. What other links
            # route (the OS's gateway and resolver; a pod whose host side is no veth: review 13,
            # K1) is held all the same, as the rebuild below holds it.
            with self.ds.batch():
                notes = self.ds.recover(routed, now)
                notes += self.controller.start(now, checkpoint_lost=True, first_start=first)
            return notes, "empty"
        # ``recorded`` with no checkpoint (the state directory lost) holds every address as a
        # damaged file does: nothing can say which a running pod uses (review 10, A1: before, it
        # took the empty start and offered a running pod's address as of unknown origin).
        how = "damaged: rebuilt" if damaged is not None else "missing: rebuilt"
        source = (
            "the host's pod wiring"
            if wiring is not None
            else "no pod wiring to read (WARMPOOL_POD_NETWORK=recorded): every address held"
        )
        if damaged is not None:
            aside = checkpoint.keep_aside(now)
            log.error(
                "checkpoint %s is damaged (%s); kept as %s; rebuilding from IMDS and %s",
                checkpoint.path,
                damaged,
                aside,
                source,
            )
            self.counters["checkpoint_rebuilds_damaged"] += 1
        else:
            log.warning(
                "no checkpoint at %s but %s; rebuilding from IMDS and %s",
                checkpoint.path,
                f"{len(routed)} pods are wired on the host" if wiring is not None else "pods may run",
                source,
            )
            self.counters["checkpoint_rebuilds_missing"] += 1
        with self.ds.batch():
            notes = self.ds.recover(routed, now) if wiring is not None else []
            notes += self.controller.start(now, checkpoint_lost=True)
            if wiring is None or unknown:
                n = self.ds.hold_all(now)
                notes.append(
                    f"{n} addresses held until the runtime's pods are known "
                    f"(grace {self.cfg.recovery_grace_s or 'none'})"
                    + (f": pod veths with no route, of addresses the host does not show: {unknown}" if unknown else "")
                )
                self.ds.set_meta(HELD_ALL_META, now)
            if wiring is not None:
                note_hold_reason(self.ds, wiring, self.cfg.veth_prefix)
        for ip in [ip for ip in wiring.stale if ip not in routed] if wiring is not None else []:
            notes.append(f"{ip}: pod rule but no route to a pod (its veth is gone): not held")
        held = self.ds.recovered_holders()
        self.counters["recovered_holders"] += len(held)
        for note in notes:
            log.info("rebuild: %s", note)
        log.warning("checkpoint rebuilt: %d addresses held by recovered holders", len(held))
        return notes, how

    @property
    def _monotonic(self) -> Callable[[], float] | None:
        return self.clock.monotonic if isinstance(self.clock, SteadyClock) else None

    def _steady(self) -> float:
        mono = self._monotonic
        return mono() if mono is not None else self.clock.now()

    def _lift_holds(self, now: float) -> None:
        """Each pass: a start's hold whose pods are all DELeted ends (:func:`lift_unfounded_holds`)."""
        try:
            lift_unfounded_holds(self.ds, self.controller, now)
        except CheckpointWriteError as exc:
            self.counters["checkpoint_write_errors"] += 1
            log.error("a start's hold let go, not yet on disk: %s; written at a later pass", exc)
        except Exception:  # never the loop's end: the hold stays, tried again next pass
            log.exception("letting a start's hold go failed; tried again next pass")

    def _release_unknown_holders(self, now: float) -> None:
        """``WARMPOOL_RECOVERY_GRACE_S`` after a rebuild that held every address, let them go
        (loudly), in ``recorded`` mode only. Measured on the steady clock from this process's start (a restart in the
        grace starts it again; a wall clock stepped forward never shortens it), or from when this
        process began a hold (a restored checkpoint found not current in ``recorded`` mode:
        ``PoolController._restore_stale``, review 11, W2)."""
        # ``recorded`` only (docs/agent.md): in ``netlink`` mode the hold is for a pod veth the
        # host shows with no route, whose pod may run on past any grace (review 15, G1).
        grace = self.cfg.recovery_grace_s if self.cfg.pod_network == "recorded" else 0.0
        since = self.ds.meta.get(HELD_ALL_META)
        if since != self._grace_for:
            self._grace_for, self._grace_from = since, self._steady()
        if grace <= 0 or not isinstance(since, (int, float)) or self._steady() < self._grace_from + grace:
            return
        if self.controller.holders_on_held_enis((UNKNOWN_HOLDER,)):
            return  # wait: on a held ENI the release would skip the quarantine (review 18, H1)
        try:
            with self.ds.batch():
                self.ds.set_meta(HELD_ALL_META, None)  # first: the release offers, no longer holds
                self.ds.set_meta(HELD_OFFERS, None)
                freed = self.controller.release_unknown_holders(now)
        except CheckpointWriteError as exc:
            # Memory holds the change (offered as unknown, never free), the disk still the `?`
            # holds: the pass's flush writes it, and a restart meanwhile holds them again
            # (hostile review 3, F2: before, this ended the agent's loop).
            self.counters["checkpoint_write_errors"] += 1
            log.error("the recovery grace's end not yet on disk: %s; written at a later pass", exc)
            return
        log.warning(
            "%d addresses held since the checkpoint rebuild let go (WARMPOOL_RECOVERY_GRACE_S=%g passed), "
            "offered back as of unknown origin (the allocator replaces them): %s",
            len(freed),
            grace,
            ", ".join(a.ip for a in freed),
        )

    # --- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or self.stopping
        while not stop.is_set() and not self.stopping.is_set():
            self.run_once()
            self.wake.wait(timeout=1.0)
            self.wake.clear()

    def run_once(self) -> None:
        """One pass of the main loop: results in, tick, reports out, periodic resync."""
        self.loop_at = time.monotonic()
        try:
            self.ds.flush()  # a checkpoint write that failed earlier: memory must reach the disk
        except CheckpointWriteError as exc:
            self.counters["checkpoint_write_errors"] += 1
            log.error("%s; retried every pass (no ADD answered, report sent or result acknowledged meanwhile)", exc)
        applied = False
        while True:
            try:
                msg = self.results.get_nowait()
            except queue.Empty:
                break
            self._apply(msg)
            applied = True
        now = self.clock.now()
        self._release_unknown_holders(now)
        self._lift_holds(now)
        try:
            self.cni.reap_gone_failed_holds()
        except Exception:  # never the loop's end: tried again next pass
            log.exception("letting go of failed ADDs' holds whose veth is gone failed; tried again next pass")
        if now - self._last_resync >= self.cfg.resync_s:
            self._last_resync = now
            try:
                self.controller.resync(now)
            except Exception as exc:
                log.warning("resync with IMDS failed: %s", exc)
            if self.node_net is not None:
                try:
                    changed = self.node_net.setup()
                    if changed:
                        log.warning("node network drifted: %d changes made to restore it", changed)
                except Exception as exc:
                    log.warning("node network reconcile failed: %s", exc)
        for report in self.controller.tick(now):
            try:
                resp = self.sqs.send_message(QueueUrl=self.cfg.reports_queue_url, MessageBody=report.to_json())
                self.aws_clock.observe(resp, self.clock.now())
            except Exception as exc:
                self.counters["reports_send_errors"] += 1
                self.controller.retry_soon()
                log.warning("report %d not sent: %s", report.seq, exc)
        if applied:
            self.cni.addresses_changed()

    def _apply(self, msg: dict[str, Any]) -> None:
        receipt = msg["ReceiptHandle"]
        try:
            result = parse_result(msg.get("Body", ""))
        except MessageError as exc:
            self.counters["results_invalid"] += 1
            log.warning("invalid result dropped (%s)", exc)
        else:
            try:
                notes = self.controller.apply_result(result, self.clock.now())
            except CheckpointWriteError as exc:
                # Not on disk: not acknowledged. SQS delivers it again after its visibility timeout.
                self.counters["checkpoint_write_errors"] += 1
                log.error("result %d not acknowledged: %s", result.in_reply_to, exc)
                return
            for note in notes:
                log.info("result %d: %s", result.in_reply_to, note)
        # Acknowledged only once applied and checkpointed (or judged unusable).
        try:
            self.sqs.delete_message(QueueUrl=self.result_queue_url, ReceiptHandle=receipt)
        except Exception as exc:
            log.warning("could not delete result message: %s", exc)

    def _find_result_queue(self) -> str:
        """This node's result queue URL, or "" while it does not exist yet.

        The allocator creates it once it has verified the node (issue 12: agents have
        no ``sqs:CreateQueue``), so the agent looks it up; creating it itself is only
        a fallback for stacks and local runs that still allow it."""
        name = self.result_queue_name
        try:
            resp = self.sqs.get_queue_url(QueueName=name)
            self.aws_clock.observe(resp, self.clock.now())
            return str(resp["QueueUrl"])
        except Exception as exc:
            log.info("result queue %s not found (%s); trying to create it", name, exc)
        try:
            return str(self.sqs.create_queue(QueueName=name)["QueueUrl"])
        except Exception as exc:  # AccessDenied under the issue-12 IAM: the allocator will create it
            log.info("result queue %s not created here (%s); waiting for the allocator", name, exc)
        return ""

    def _poll_results(self) -> None:
        while not self.stopping.is_set():
            if not self.result_queue_url:
                self.result_queue_url = self._find_result_queue()
                if not self.result_queue_url:
                    self.stopping.wait(2.0)
                    continue
            try:
                resp = self.sqs.receive_message(
                    QueueUrl=self.result_queue_url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=self.poll_wait_s,
                    VisibilityTimeout=RESULT_VISIBILITY_S,
                )
            except Exception as exc:
                self.counters["results_poll_errors"] += 1
                log.warning("result queue poll failed: %s", exc)
                self.stopping.wait(2.0)
                continue
            self.aws_clock.observe(resp, self.clock.now())
            msgs = resp.get("Messages", [])
            for m in msgs:
                self.results.put(m)
            if msgs:
                self.wake.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        if self.socket_server is not None:
            self.socket_server.shutdown()
            self.socket_server.server_close()
        if self.http is not None:
            self.http.close()

    # --- HTTP -----------------------------------------------------------------------------------

    def _http(self, host: str, port: int) -> web.HttpServer:
        metrics = web.Metrics()
        metrics.sources.append(self._metric_lines)
        return web.HttpServer(
            host,
            port,
            metrics=metrics,
            views={
                "/v1/enis": self.view_enis,
                "/v1/pods": self.view_pods,
                "/v1/config": self.view_config,
                "/v1/max-pods": self.view_max_pods,
            },
            healthy=self._healthy,
            ready=self._ready,
        )

    def _healthy(self) -> tuple[bool, str]:
        age = time.monotonic() - self.loop_at
        return (age < 60.0, f"main loop ran {age:.1f}s ago")

    def _ready(self) -> tuple[bool, str]:
        if not self.ready:
            return (False, "starting")
        if self.node_net is not None:
            problems = self.node_net.problems()
            if problems:
                return (False, "node network: " + "; ".join(problems))
        return (True, "ready")

    def view_config(self) -> dict[str, Any]:
        """The settings, and the kernel state they lead to (``kernel``: null when the agent
        does not manage the node's network)."""
        return {**self.cfg.public(), "kernel": self.node_net.public() if self.node_net is not None else None}

    def _kubelet_note(self) -> tuple[int, str]:
        return (self.kubelet.max_pods or 0, self.kubelet.source)

    def view_max_pods(self) -> dict[str, Any]:
        """What the kubelet's ``--max-pods`` should be on this node (``warmpool max-pods``)."""
        pool = self.cfg.pool
        value = max_pods(self.limits, prefix=pool.prefix_mode, max_eni=pool.max_eni or None, multi_card=pool.multi_card)
        return {
            "max_pods": value,
            "instance_type": self.limits.instance_type,
            "prefix": pool.prefix_mode,
            "max_eni": pool.max_eni or None,
            # the kubelet's own maxPods as read from the node (None: not known, not reported) and where from
            "kubelet_max_pods": self.kubelet.max_pods,
            "kubelet_source": self.kubelet.source,
            # the pool's own ceiling: WARMPOOL_MAX_PODS when set, else the formula, lowered to the
            # kubelet's (the allocator's too)
            "pool_ceiling": self.controller.pool.max_pods,
        }

    def view_enis(self) -> list[dict[str, Any]]:
        out = []
        for e in self.ds.enis():
            out.append(
                {
                    **asdict(e.info),
                    "route_table": e.info.route_table,
                    "ready": e.ready,
                    "ips": e.ips,
                    "prefixes": e.prefixes,
                    "assigned": sorted(a.ip for a in e.addrs.values() if a.in_use),
                    "quarantined": sorted(a.ip for a in e.addrs.values() if a.quarantined_at is not None),
                }
            )
        return out

    def view_pods(self) -> list[dict[str, Any]]:
        """Pods, then recovered holders (``recovered: true``: known only from the host after a
        checkpoint rebuild; ``holder`` is the host veth name, or ``?`` when unknown)."""
        pods = [{**asdict(p), "recovered": False} for p in self.ds.pods()]
        return pods + [{**asdict(h), "recovered": True} for h in self.ds.recovered_holders()]

    def _metric_lines(self) -> list[str]:
        now = self.clock.now()
        c = self.ds.counts(now)
        lines: list[str] = []
        for name, help_, v in (
            ("warmpool_addresses_total", "Addresses pods can use", c.total),
            ("warmpool_addresses_assigned", "Addresses held by pods", c.assigned),
            ("warmpool_addresses_available", "Addresses not held by pods", c.available),
            ("warmpool_addresses_cooldown", "Freed addresses waiting IP_COOLDOWN_PERIOD", c.cooldown),
            ("warmpool_addresses_quarantined", "Surplus addresses offered back", c.quarantined),
            ("warmpool_pending_demand", "addresses waiting CNI ADDs want (one per pod and interface named)", c.pending),
            ("warmpool_enis", "ENIs attached", c.enis),
            ("warmpool_addresses_recovered", "Addresses held by recovered holders (checkpoint rebuild)", c.recovered),
            ("warmpool_clock_ahead_seconds", "How far this node's clock may be ahead of AWS's", self.aws_clock.ahead()),
            (
                "warmpool_checkpoint_dirty",
                "1 while memory holds changes the checkpoint could not take",
                int(self.ds.dirty),
            ),
            (
                "warmpool_lean",
                "1 while the zone is short of free addresses: warm targets suspended, surplus offered back",
                int(self.controller.lean(self.clock.now())),
            ),
            (
                "warmpool_restore_unconfirmed",
                "1 while a restored checkpoint waits for the allocator's word (no free address goes to a pod)",
                int(self.ds.withheld),
            ),
        ):
            lines += web.gauge(name, help_, v)
        st = self.controller.stats
        lines += web.counter("warmpool_reports_sent_total", "Reports sent", {(): st.reports_sent})
        lines += web.counter(
            "warmpool_report_send_errors_total",
            "Reports that could not be sent",
            {(): self.counters["reports_send_errors"]},
        )
        lines += web.counter(
            "warmpool_checkpoint_rebuilds_total",
            "Rebuilds from IMDS and the host, by reason",
            {(("reason", r),): self.counters[f"checkpoint_rebuilds_{r}"] for r in ("damaged", "missing")},
        )
        lines += web.counter(
            "warmpool_recovered_holders_total",
            "Holders found by checkpoint rebuilds",
            {(): self.counters["recovered_holders"]},
        )
        lines += web.counter(
            "warmpool_checkpoint_write_errors_total",
            "Checkpoint writes that failed (retried; nothing depending on them leaves the agent meanwhile)",
            {(): self.ds.save_errors},
        )
        lines += web.counter(
            "warmpool_restores_checked_total",
            "Restored checkpoints the allocator called current or not (no answer in time counts as not)",
            {(("current", "true"),): st.restores_current, (("current", "false"),): st.restores_stale},
        )
        lines += web.counter(
            "warmpool_first_starts_total",
            "Starts without a checkpoint that asked the allocator to confirm a first start, confirmed or not",
            {
                (("confirmed", "true"),): st.first_starts_confirmed,
                (("confirmed", "false"),): st.first_starts_unconfirmed,
            },
        )
        lines += web.counter("warmpool_results_applied_total", "Results applied", {(): st.results_applied})
        lines += web.counter(
            "warmpool_results_invalid_total",
            "Results rejected as invalid",
            {(): self.counters["results_invalid"] + st.results_rejected},
        )
        lines += web.counter(
            "warmpool_result_actions_total",
            "Result actions by kind",
            {(("kind", k),): v for k, v in st.actions.items()},
        )
        lines += web.counter(
            "warmpool_cni_requests_total",
            "CNI requests by command",
            {(("command", k),): v for k, v in self.cni.stats.requests.items()},
        )
        lines += web.counter(
            "warmpool_cni_failures_total",
            "CNI failures by command and reason",
            {(("command", cmd), ("reason", why)): v for (cmd, why), v in self.cni.stats.failures.items()},
        )
        lines += web.counter(
            "warmpool_cni_gc_released_total",
            "Attachments released by CNI GC (not listed by the runtime)",
            {(): self.cni.stats.gc_released},
        )
        lines += web.histogram(
            "warmpool_cni_address_wait_seconds", "Time a CNI ADD waited for an address", self.cni.stats.wait_seconds
        )
        return lines


# --- command line -----------------------------------------------------------------------------


def install_cni(dest: str, python: str = "/usr/bin/python3") -> Path:
    """Copy the self-contained plugin to ``dest/warmpool-cni`` (atomic, mode 0755)."""
    src = Path(__file__).with_name("cni.py").read_text()
    body = src.split("\n", 1)[1] if src.startswith("#!") else src
    os.makedirs(dest, exist_ok=True)
    target = Path(dest) / "warmpool-cni"
    fd, tmp = tempfile.mkstemp(dir=dest, prefix=".warmpool-cni-")
    with os.fdopen(fd, "w") as f:
        f.write(f"#!{python} -S\n{body}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return target


def _run_agent(env: dict[str, str]) -> int:
    try:
        cfg = load(env)
    except ConfigError as exc:
        print(f"warmpool-agent: invalid configuration: {exc}", file=sys.stderr)
        return 2
    import boto3  # only the daemon needs it

    sqs = boto3.client("sqs", region_name=cfg.region, endpoint_url=cfg.endpoint_url or None)
    if not cfg.reports_queue_url:
        print("warmpool-agent: invalid configuration: WARMPOOL_REPORTS_QUEUE_URL must be set", file=sys.stderr)
        return 2
    host: HostNetwork | None = None
    node_net: NodeNetFactory | None = None
    imds = ImdsClient.from_env(env)
    metadata: Metadata = imds
    if cfg.manage_host_network:
        from node_agent.hostnet import EniNetworking
        from node_agent.nodenet import NodeNetworking, NodeSpec, spec_from_imds

        host = EniNetworking(cfg.host_netns)

        def node_net(ident: Identity) -> NodeNet:
            def spec() -> NodeSpec:
                return spec_from_imds(imds, ident.mac, cfg)

            return NodeNetworking(spec(), cfg.host_netns, refresh=spec)

    if cfg.hostnet.skip_unmanaged_enis:
        from node_agent.unmanaged import SkipUnmanaged

        ec2 = boto3.client("ec2", region_name=cfg.region, endpoint_url=cfg.endpoint_url or None)
        metadata = SkipUnmanaged(imds, ec2, clock=RealClock())
    agent = Agent(
        cfg, sqs, metadata, host=host, node_net=node_net, clock=RealClock(), monotonic=time.monotonic, boot_id=boot_id()
    )
    try:
        agent.start()
    except (CheckpointError, KeyError, OSError, RuntimeError) as exc:
        print(f"warmpool-agent: cannot start: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        agent.wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.run(stop)
    agent.stop()
    return 0


def _uninstall(env: dict[str, str]) -> int:
    from node_agent.config import load_hostnet
    from node_agent.nodenet import uninstall

    try:
        settings = load_hostnet(env)
    except ConfigError as exc:
        print(f"warmpool-agent: invalid configuration: {exc}", file=sys.stderr)
        return 2
    netns = env.get("WARMPOOL_HOST_NETNS", "").strip()
    try:
        n = uninstall(settings, netns)
    except (OSError, RuntimeError) as exc:
        print(f"warmpool-agent uninstall: {exc}", file=sys.stderr)
        return 1
    print(f"warmpool-agent uninstall: {n} objects removed")
    return 0


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    p = argparse.ArgumentParser(prog="warmpool-agent")
    sub = p.add_subparsers(dest="cmd")
    ic = sub.add_parser("install-cni", help="copy the CNI plugin into the node's CNI bin directory")
    ic.add_argument("--dest", default="/opt/cni/bin")
    ic.add_argument("--python", default="/usr/bin/python3", help="interpreter on the node")
    sub.add_parser("run", help="run the agent (the default)")
    sub.add_parser(
        "uninstall",
        help="remove the node-level rules the agent installed (nftables table "
        "ip warmpool, the fwmark rule); run after the DaemonSet is gone",
    )
    args = p.parse_args(argv)
    if args.cmd == "install-cni":
        print(install_cni(args.dest, args.python))
        return
    if args.cmd == "uninstall":
        sys.exit(_uninstall(dict(env if env is not None else os.environ)))
    sys.exit(_run_agent(dict(env if env is not None else os.environ)))
