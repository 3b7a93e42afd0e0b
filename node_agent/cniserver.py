"""The agent's side of the CNI plugin: a unix socket (mode 0600, root only)
taking one JSON request per connection from ``warmpool-cni`` and doing the
work: the address is recorded in the datastore (and checkpointed) before the
pod is wired and before anyone is answered.

One attachment (container id + interface name, as the CNI spec keys them) has
one operation at a time: overlapping ADD/DEL/CHECK for it wait for each other
(bounded; then "try again"). An ADD that fails gives back only an address it
took itself, never one an earlier ADD of the same attachment returned. GC
(spec 1.1) releases every attachment the runtime no longer lists.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from node_agent.checkpoint import CheckpointWriteError
from node_agent.cni import (  # the CNI error codes: one list, the plugin's (stdlib only)
    E_CHECK_FAILED,
    E_DECODE,
    E_INCOMPATIBLE_VERSION,
    E_INVALID_CONFIG,
    E_INVALID_ENV,
    E_IO,
    E_NOT_AVAILABLE,
    E_TRY_AGAIN_LATER,
    E_UNKNOWN_CONTAINER,
    MAX_REQUEST_BYTES,
    VALID_ATTACHMENTS,
    version_at_least,
)
from node_agent.datastore import FAILED_ADD_HOLDS, HOLD_ON_RELEASE, HOLD_REASON, Datastore
from node_agent.hostnet import (
    GATEWAY,
    HostWiring,
    PodNet,
    PodRefused,
    check_pod,
    host_veth_name,
    ifname_problem,
    netns_problem,
    note_setup_left,
    pod_addresses,
    setup_left,
    setup_pod,
    teardown_pod,
    veth_peers_carried,
    veth_prefix_of,
    veths_of,
    wired_pods,
)
from node_agent.netlink import MAIN_TABLE, NETNS_DIR, Link, Netlink, NetlinkFailure
from node_agent.records import UNKNOWN_HOLDER, UNROUTED_HOLDER, Assignment, PodRecord
from warmpool.clock import Clock, SteadyClock

log = logging.getLogger("warmpool.agent.cni")


READ_TIMEOUT_S = 10.0
"""The agent's limit for receiving a whole request once a client has connected (the plugin
sends it at once); past it the client is answered with an error and the connection closed."""


class PodNetwork(Protocol):
    """How pods are wired (netlink in production, a recorder in unit tests and the bench).

    May also have ``check_netns(netns) -> str | None``: why a pod must not be wired into
    that namespace (None = fine), asked before an ADD or CHECK takes or reads anything; and
    ``carried(netns, ifname, container_id) -> list[str] | None``: the IPv4 addresses the pod's
    ``ifname`` carries when it is the peer of the attachment's host veth (this prefix's name),
    None when there is no such pair or it cannot tell (without it: cannot tell); and
    ``carried_under(netns, ifname, container_id, veth_prefix)``: the same for the attachment's
    veth under ``veth_prefix`` (an earlier prefix's; without it: cannot tell); and
    ``peers_carried(veths) -> {veth: [address]}``: what the pod-side peer of each of those host
    veths carries, found without the pod's namespace being named (a recovered holder names only
    its veth), a veth left out when it cannot tell (without it: cannot tell of any).

    An exception ``setup`` raises may say what the set-up left
    (:func:`node_agent.hostnet.setup_left`): a failed ADD tears down only a veth pair its set-up
    made. Without it, the teardown removes the attachment's veth, as before.
    """

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet: ...
    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None: ...
    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]: ...
    def host_wiring(self) -> HostWiring | None:
        """The pods wired on the host now (rebuild after a lost checkpoint); None = cannot tell."""
        ...


class NetlinkPods:
    """:class:`PodNetwork` over the netlink adapter, in the node namespace ``host_netns`` ('' = ours)."""

    def __init__(self, host_netns: str = "", veth_prefix: str = "eni") -> None:
        self.host_netns = host_netns
        self.veth_prefix = veth_prefix

    def check_netns(self, netns: str) -> str | None:
        return netns_problem(netns, self.host_netns)

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        # What fails before setup_pod starts made and addressed nothing; what it raises says what it
        # left; anything raised after it (closing the handle) says nothing, and the failed ADD tears
        # the attachment down as before (review 27, W1: said to have made nothing, the pair stayed
        # wired with the address another pod then got).
        try:
            problem = netns_problem(netns, self.host_netns)  # again here: set-up must never touch the host's
            if problem:
                raise PodRefused(problem)
            host = Netlink.open(self.host_netns)
        except BaseException as exc:
            note_setup_left(exc, made_pair=False, addressed=False)
            raise
        with host:
            return setup_pod(host, netns, ifname, container_id, ip, table, mtu, self.veth_prefix)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        with Netlink.open(self.host_netns) as host:
            teardown_pod(host, container_id, ifname, ip, self.veth_prefix)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        with Netlink.open(self.host_netns) as host:
            return check_pod(host, netns, ifname, container_id, ip, table, self.veth_prefix)

    def host_wiring(self) -> HostWiring:
        with Netlink.open(self.host_netns) as host:
            return wired_pods(host, self.veth_prefix)

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        return self.carried_under(netns, ifname, container_id, self.veth_prefix)

    def carried_under(self, netns: str, ifname: str, container_id: str, veth_prefix: str) -> list[str] | None:
        if netns_problem(netns, self.host_netns):
            return None
        with Netlink.open(self.host_netns) as host:
            return pod_addresses(host, netns, ifname, container_id, veth_prefix)

    def peers_carried(self, veths: Collection[str]) -> dict[str, list[str]]:
        """What the pod-side peer of each host veth in ``veths`` carries, looked for in the
        network namespaces pinned under :data:`PINNED_NETNS_DIRS` (where the runtimes pin pod
        namespaces: ``ip netns``, containerd's and CRI-O's ``cni-…``); a veth whose peer is in
        none of them is left out (cannot tell). The start's check of a restored copy's recovered
        holders (``node_agent.agent.carried_disagreements``; review 31, A2)."""
        with Netlink.open(self.host_netns) as host:
            return veth_peers_carried(host, veths, pinned_namespaces(self.host_netns))

    @contextlib.contextmanager
    def carried_reader(self) -> Iterator[Callable[..., list[str] | None]]:
        """:meth:`carried` for many pods at once (the start's check of a restored copy): the
        node's netlink opened once and its links dumped once, again after a read that failed;
        one dump a pod made the start's check quadratic in the pods (review 31, A5). Its reads
        take an optional ``veth_prefix``: :meth:`carried_under` (review 31, A1)."""
        with Netlink.open(self.host_netns) as host:
            links: dict[str, Link] | None = None

            def read(netns: str, ifname: str, container_id: str, veth_prefix: str | None = None) -> list[str] | None:
                nonlocal links
                if netns_problem(netns, self.host_netns):
                    return None
                if links is None:
                    links = {link.name: link for link in host.links()}
                prefix = self.veth_prefix if veth_prefix is None else veth_prefix
                try:
                    return pod_addresses(host, netns, ifname, container_id, prefix, links)
                except OSError:
                    links = None  # read again: the host may have changed meanwhile
                    raise

            yield read


PINNED_NETNS_DIRS = (NETNS_DIR, "/var/run/netns")
"""Where pod network namespaces are pinned (bind-mounted): ``ip netns``'s directory, which
containerd and CRI-O use for pods' (``cni-<uuid>``); the DaemonSet mounts the host's
``/run/netns`` at ``/var/run/netns``, the same directory when ``/var/run`` links to ``/run``."""


def pinned_namespaces(node_netns: str = "", dirs: Collection[str] = PINNED_NETNS_DIRS) -> list[str]:
    """The pod network namespaces pinned in ``dirs``: each entry that is a network namespace and
    not the agent's, the host's or the node's (:func:`~node_agent.hostnet.netns_problem`), once
    each (by device and inode). A directory that cannot be listed gives none."""
    out: list[str] = []
    seen: set[tuple[int, int]] = set()
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen or netns_problem(path, node_netns):
                continue
            seen.add((st.st_dev, st.st_ino))
            out.append(path)
    return out


class RecordedPods:
    """:class:`PodNetwork` that records what it would do and touches no kernel.

    Chosen with ``WARMPOOL_POD_NETWORK=recorded``: where no network namespace
    can be made (the demo's plain mode) the agent still hands out and takes
    back addresses through its CNI socket, so the allocator path is exercised.
    """

    def __init__(self, veth_prefix: str = "eni") -> None:
        self.veth_prefix = veth_prefix
        self._lock = threading.Lock()
        self.pods: dict[tuple[str, str], tuple[str, str, int]] = {}
        """``(container, ifname) -> (netns, ip, table)``"""

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        with self._lock:
            self.pods[(container_id, ifname)] = (netns, ip, table)
        digest = hashlib.sha1(container_id.encode()).hexdigest()
        mac = "02:" + ":".join(digest[i : i + 2] for i in range(0, 10, 2))
        log.info("recorded pod set-up: %s %s -> %s (table %d), not applied", container_id[:12], ifname, ip, table)
        return PodNet(host_veth_name(container_id, ifname, self.veth_prefix), "ee:ee:ee:ee:ee:ee", mac, 0)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        with self._lock:
            self.pods.pop((container_id, ifname), None)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        with self._lock:
            held = self.pods.get((container_id, ifname))
        return [] if held is not None and held[1] == ip else [f"no recorded set-up of {ip} for {container_id[:12]}"]

    def host_wiring(self) -> None:
        """Nothing in the kernel to read: the rebuild must assume every address may be in use."""
        return None


class Failure(Exception):
    def __init__(self, code: int, msg: str, details: str = "", reason: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details
        self.reason = reason or msg


@dataclass
class CniStats:
    requests: Counter[str] = field(default_factory=Counter)
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Failed requests by (command, reason)."""
    wait_seconds: list[float] = field(default_factory=list)
    """Time ADDs waited for an address (bounded; the metrics layer folds it into a histogram)."""
    gc_released: int = 0
    """Attachments CNI GC found unlisted by the runtime and released."""


class _Slot:
    """One attachment's lock and how many operations use or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class CniService:
    """ADD / DEL / CHECK / GC / STATUS against the datastore and the pod network. Thread-safe."""

    def __init__(
        self,
        datastore: Datastore,
        pods: PodNetwork,
        *,
        mtu: int = 9001,
        add_wait_s: float = 0.0,
        clock: Clock,
        on_unmet: Callable[[], None] | None = None,
        veth_prefix: str = "eni",
        busy_wait_s: float = 30.0,
        gc_min_age_s: float = 60.0,
        status: Callable[[], str | None] | None = None,
    ) -> None:
        self.ds = datastore
        self.veth_prefix = veth_prefix
        self.pods = pods
        self.mtu = mtu
        self._holds_unwritten = False
        """A DEL ended a start's hold in memory and its write failed: the next DEL writes first."""
        self.add_wait_s = add_wait_s
        self.clock = clock
        self.on_unmet = on_unmet
        self.stats = CniStats()
        self._cond = threading.Condition()
        self.busy_wait_s = busy_wait_s
        """How long an operation waits for another one on the same attachment (then: try again)."""
        self.gc_min_age_s = gc_min_age_s
        self._absent: dict[str, float] = {}
        """Failed-ADD holders whose veth the host did not show -> since when (steady clock)."""
        """GC leaves alone attachments younger than this: the runtime may not list an ADD it has
        not seen answered yet. Timed on the monotonic clock (a wall clock stepped back made every
        recent attachment look younger than this for as long as the step, and GC left stale ones
        held: simulation seeds 1354, 2621, 3229, 6911)."""
        self._steady: Callable[[], float] = clock.monotonic if isinstance(clock, SteadyClock) else clock.now
        self._started = self._steady()
        self._made: dict[tuple[str, str], float] = {}
        """When (``_steady``) this process last answered an ADD of each attachment. One made by an
        earlier process is at least as old as this one, and no older for certain: the wall-clock
        ``assigned_at`` on disk may have been stepped either way since."""
        self._made_lock = threading.Lock()
        self.status = status
        self._slots_lock = threading.Lock()
        self._attachments: dict[tuple[str, str], _Slot] = {}

    @contextlib.contextmanager
    def _attachment(self, cid: str, ifname: str, wait_s: float) -> Iterator[bool]:
        """Hold the attachment's lock (waiting at most ``wait_s``); yields whether it was got."""
        key = (cid, ifname)
        with self._slots_lock:
            slot = self._attachments.setdefault(key, _Slot())
            slot.users += 1
        got = False
        try:
            got = slot.lock.acquire(timeout=wait_s) if wait_s > 0 else slot.lock.acquire(blocking=False)
            yield got
        finally:
            if got:
                slot.lock.release()
            with self._slots_lock:
                slot.users -= 1
                if slot.users == 0:
                    del self._attachments[key]

    @contextlib.contextmanager
    def _serialised(self, cid: str, ifname: str) -> Iterator[None]:
        with self._attachment(cid, ifname, self.busy_wait_s) as got:
            if not got:
                raise Failure(
                    E_TRY_AGAIN_LATER,
                    f"another CNI operation for {cid[:12]} ({ifname}) is in progress",
                    f"waited {self.busy_wait_s:g}s",
                    reason="busy",
                )
            yield

    def addresses_changed(self) -> None:
        """Wake ADDs waiting for an address (the agent calls this after applying results)."""
        with self._cond:
            self._cond.notify_all()

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        command = str(req.get("command", ""))
        self.stats.requests[command] += 1
        try:
            if command == "ADD":
                return {"ok": True, "result": self.add(req)}
            if command == "DEL":
                self.delete(req)
                return {"ok": True}
            if command == "CHECK":
                self.check(req)
                return {"ok": True}
            if command == "GC":
                self.gc(req)
                return {"ok": True}
            if command == "STATUS":
                self.check_status(req)
                return {"ok": True}
            raise Failure(E_INVALID_ENV, f"unsupported command {command!r}", reason="bad-command")
        except Failure as f:
            self.stats.failures[command, f.reason] += 1
            return {"ok": False, "code": f.code, "msg": f.msg, "details": f.details}
        except PodRefused as exc:
            self.stats.failures[command, "refused"] += 1
            log.warning("%s %s refused: %s", command, req.get("container_id"), exc)
            return {"ok": False, "code": E_INVALID_ENV, "msg": "pod network set-up refused", "details": str(exc)}
        except NetlinkFailure as exc:
            self.stats.failures[command, "netlink"] += 1
            log.warning("%s %s: %s", command, req.get("container_id"), exc)
            return {"ok": False, "code": E_IO, "msg": "host network set-up failed", "details": str(exc)}
        except CheckpointWriteError as exc:
            # The address is not on disk: a restart would not know the pod holds it. The
            # runtime retries; the answer is success only once the checkpoint is written.
            self.stats.failures[command, "checkpoint"] += 1
            log.error("%s %s: %s", command, req.get("container_id"), exc)
            what = "the releases" if command == "GC" else "the address"
            return {"ok": False, "code": E_IO, "msg": f"the agent could not record {what}", "details": str(exc)}

    @staticmethod
    def _ids(req: dict[str, Any]) -> tuple[str, str, str]:
        cid, ifname, netns = (str(req.get(k) or "") for k in ("container_id", "ifname", "netns"))
        if not cid or not ifname:
            raise Failure(E_INVALID_ENV, "CNI_CONTAINERID and CNI_IFNAME are required", reason="bad-env")
        return cid, ifname, netns

    def _check_target(self, ifname: str, netns: str) -> None:
        """ADD and CHECK: the interface name must be a valid Linux one and the namespace a pod's."""
        problem = ifname_problem(ifname)
        if problem:
            raise Failure(E_INVALID_ENV, f"CNI_IFNAME: {problem}", reason="bad-ifname")
        check_netns = getattr(self.pods, "check_netns", None)
        problem = check_netns(netns) if check_netns is not None else None
        if problem:
            raise Failure(E_INVALID_ENV, f"CNI_NETNS: {problem}", reason="bad-netns")

    def add(self, req: dict[str, Any]) -> dict[str, Any]:
        cid, ifname, netns = self._ids(req)
        if not netns:
            raise Failure(E_INVALID_ENV, "CNI_NETNS is required for ADD", reason="bad-env")
        conf = req.get("config") or {}
        _check_config(conf)  # before anything is acted on: a bad config must not leave a pod half-made
        self._check_target(ifname, netns)
        with self._serialised(cid, ifname):
            return self._add(cid, ifname, netns, conf, pod_of(req.get("args")))

    def _add(self, cid: str, ifname: str, netns: str, conf: dict[str, Any], pod: str = "") -> dict[str, Any]:
        earlier, _ = self._held(cid, ifname)  # returned by an earlier ADD (or found by a rebuild)
        started = self.clock.now()
        holder = host_veth_name(cid, ifname, self.veth_prefix)  # a rebuild may have found this pod's address
        # a start's hold stands for this attachment's veth: what its pod's interface carries
        carried = self._carried(netns, ifname, cid) if self._in_reason(holder) else None
        if earlier is None and carried is not None:
            earlier = self._known_again(cid, ifname, holder, carried, started)
        elif carried is None:  # a record or not: its address, if any, is held by it
            self._known_empty_elsewhere(cid, ifname, netns, holder)
        network = _network_name(conf)
        a = self.ds.assign(cid, ifname, netns, started, holder, network, pod)
        if a is None:
            if self.on_unmet is not None:
                self.on_unmet()
            deadline = time.monotonic() + self.add_wait_s
            while a is None and time.monotonic() < deadline:
                with self._cond:
                    self._cond.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
                a = self.ds.assign(cid, ifname, netns, self.clock.now(), holder, network, pod)
        waited = self.clock.now() - started
        if a is not None:
            # Dated from this ADD, whatever an earlier ADD of the same attachment was given: the
            # runtime may not list an attachment whose ADD it has not seen answered, and a DEL
            # then a new ADD between two GCs (or an ADD retried after its wiring failed) is as
            # young as this ADD (dated from the first, a GC freed a fresh pod's address: review
            # of 42ff263, F1).
            with self._made_lock:
                self._made[(cid, ifname)] = self._steady()
        if len(self.stats.wait_seconds) < 100_000:
            self.stats.wait_seconds.append(waited)
        if a is None:
            raise Failure(
                E_TRY_AGAIN_LATER,
                "no free pod IP address on this node yet",
                "the demand has been reported to the allocator; the runtime will retry",
                reason="no-address",
            )
        eni = self.ds.eni(a.eni_id)
        table = eni.route_table if eni is not None else MAIN_TABLE
        try:
            net = self.pods.setup(netns, ifname, cid, a.ip, table, self.mtu)
        except Exception as exc:
            if earlier is not None:
                # An earlier ADD returned this address (and wired it): it stays, wiring and all;
                # the runtime's DEL for this failed ADD (or GC) gives it back.
                log.warning("ADD %s %s failed again; %s kept for the earlier ADD", cid[:12], ifname, a.ip)
                raise
            left = setup_left(exc)
            if left is not None and not left.made_pair:
                # The attachment's veth pair was there before this ADD (or the set-up failed before
                # it looked): not this ADD's to remove. A running pod's, when the agent lost its
                # record and the runtime ADDs it again with no DEL between (the CNI spec forbids
                # it): removed, the pod ran on with no veth, and a start after a lost checkpoint
                # found no trace of its address but a rule and let it go (the simulation's seed
                # 14955). Its pod's interface may carry the new address once the set-up reached
                # it: held for its veth until the attachment's DEL (or GC); else it is free.
                if left.addressed:
                    self._hold_for_veth(cid, ifname, a.ip, holder, network, "its veth pair was there before")
                else:
                    self.ds.release(cid, ifname, self.clock.now())
                raise
            # Never leave an address this ADD took recorded for a pod that has no network.
            try:
                self.pods.teardown(cid, ifname, a.ip)
            except Exception:
                # The pod's interface may still carry the address: held for its veth (as a rebuild
                # holds a routed pod's) until the runtime's DEL tears it down, never free for
                # another pod meanwhile (review 22, R5: a retried ADD that reads it there must
                # find it no other pod's).
                self._hold_for_veth(cid, ifname, a.ip, holder, network, "wiring and teardown failed")
                raise
            self.ds.release(cid, ifname, self.clock.now())
            raise
        if carried is not None and carried in ([], [a.ip]):
            # the pod's interface carried nothing, or the address it now has: no other is its
            # (review 22, R1: a running pod moved off another address keeps that one held)
            self._rewired(holder)
        # Answered only once the address is on disk (a write that failed earlier, for this
        # ADD or another change, is retried here): CheckpointWriteError fails the ADD, the
        # address stays the pod's in memory, and the runtime's retry or DEL decides.
        self.ds.flush()
        return self._result(conf, ifname, netns, a.ip, net)

    def _result(self, conf: dict[str, Any], ifname: str, netns: str, ip: str, net: PodNet) -> dict[str, Any]:
        version = str(conf.get("cniVersion") or "1.0.0")
        prev = conf.get("prevResult") if isinstance(conf.get("prevResult"), dict) else None
        interfaces = list(prev.get("interfaces", [])) if prev else []
        base = len(interfaces)
        interfaces += [
            {"name": net.host_veth, "mac": net.host_mac},
            {"name": ifname, "mac": net.pod_mac, "sandbox": netns},
        ]
        ips = list(prev.get("ips", [])) if prev else []
        entry: dict[str, Any] = {"address": f"{ip}/32", "interface": base + 1, "gateway": GATEWAY}
        if version in ("0.3.0", "0.3.1"):
            entry["version"] = "4"
        ips.append(entry)
        routes = list(prev.get("routes", [])) if prev else []
        if not any(r.get("dst") == "0.0.0.0/0" for r in routes):
            routes.append({"dst": "0.0.0.0/0", "gw": GATEWAY})
        out: dict[str, Any] = {"cniVersion": version, "interfaces": interfaces, "ips": ips, "routes": routes}
        dns = (prev or {}).get("dns") or conf.get("dns")
        if dns:
            out["dns"] = dns
        return out

    def _held(self, cid: str, ifname: str) -> tuple[Assignment | None, str]:
        """The pod's address: its own, else one a checkpoint rebuild recovered for its host veth."""
        held = self.ds.lookup(cid, ifname)
        holder = host_veth_name(cid, ifname, self.veth_prefix)
        return (held or self.ds.lookup_recovered(holder)), holder

    def delete(self, req: dict[str, Any]) -> None:
        cid, ifname, netns = self._ids(req)
        with self._serialised(cid, ifname):
            self._delete(cid, ifname, req.get("config"), netns)

    def _delete(self, cid: str, ifname: str, conf: Any = None, netns: str = "") -> None:
        """Tear down and release what this attachment holds: its record, or the recovered holder
        named after its veth. A DEL that finds neither releases nothing and removes no rule but those
        of an ``unrouted`` address its pod's interface carries (:meth:`_unrouted_carried`). The
        runtime's cached result of the attachment's ADD (``prevResult``) is not trusted to name an
        address: libcni caches a result only when the whole chain's ADD succeeded and drops it only
        when its DEL did, so the result a DEL carries may be of an earlier ADD whose address another
        pod got since (review 17: each way a DEL's ``prevResult`` released or unprotected an address
        gave it two holders). What that costs is a leak, never a second holder: an ``unrouted``
        holder (a pod rule with no route, after a lost checkpoint) and a doubtful record's hand-on
        stay until the checkpoint goes (docs/safety.md, the thirteenth to seventeenth reviews)."""
        del conf  # not read: see above
        held, holder = self._held(cid, ifname)
        carried = self._unrouted_carried(cid, ifname, netns, holder) if held is None else set()
        # The recovered holder's other addresses (one on an ENI IMDS does not show yet: a rebuild
        # during an IMDS lag) have rules too: removed with the pod, or a copy restored later finds
        # the rule, takes it for the pod's, and its holder stays for good (seed 14483); with a
        # record too (its ADD retried after the rebuild took another address: review 28, P2).
        # Before the pair goes (``teardown_pod`` removes an address's rules before the veth): a
        # failure here leaves the pair, so the runtime's retried DEL reads the carried address
        # again (review 34, N1: the pair gone first, the retry read nothing and the rule stayed).
        for ip in sorted((self._holder_ips(holder) | carried) - {held.ip if held else None}):
            self.pods.teardown(cid, ifname, ip)
        self.pods.teardown(cid, ifname, held.ip if held else None)
        now = self.clock.now()
        try:
            self.ds.release(cid, ifname, now)  # also forgets a waiting ADD
            for freed in self.ds.release_recovered(holder, now):
                log.info("DEL %s %s: recovered address %s released", cid[:12], ifname, freed.ip)
            # the attachment's note under any veth prefix (one made before a prefix change: review 25, N1)
            noted = self.ds.meta.get(FAILED_ADD_HOLDS) or {}
            rest = {k: v for k, v in noted.items() if (v[0], v[1]) != (cid, ifname)}
            if len(rest) != len(noted):
                self.ds.set_meta(FAILED_ADD_HOLDS, rest or None)
        except CheckpointWriteError as exc:
            # Released in memory, not yet on disk (retried by the agent's loop). Safe to answer
            # DEL: until the write works the disk only says the address is still held, and no
            # ADD is answered meanwhile (the next one to take the address must write first).
            log.warning("DEL %s %s: released; the checkpoint write will be retried: %s", cid[:12], ifname, exc)
        # Whatever the release's write did (review 19, W1a); answered only once on disk: a crash
        # before the write would bring the hold back, and no runtime sends an answered DEL again
        # (W1b). Failed, the runtime's retry writes again (a retried DEL changes nothing more).
        try:
            ended = self._end_holds_of(cid, ifname, holder, now)
            if ended or self._holds_unwritten:
                self._holds_unwritten = True
                self.ds.flush()
                self._holds_unwritten = False
        except CheckpointWriteError as exc:
            # _end_holds_of's own write may be the one that failed: the runtime's retry, finding
            # nothing left to end in memory, must still write before it is answered (review 20, W1c)
            self._holds_unwritten = True
            raise Failure(
                E_TRY_AGAIN_LATER,
                f"DEL {cid[:12]} {ifname}: the end of a start's hold is not on disk yet: {exc}",
                "the runtime retries the DEL",
                reason="checkpoint-write",
            ) from exc

    def _unrouted_carried(self, cid: str, ifname: str, netns: str, holder: str) -> set[str]:
        """The address of a DEL that finds no record and no holder of its veth's name, read from the
        pod's interface (the peer of this prefix's veth of the attachment: ``PodNetwork.carried``)
        before the teardown takes the pair away: the one address it carries, when a start held that
        address by :data:`~node_agent.records.UNROUTED_HOLDER` (its pod rule with no route) and that
        start's hold reason names this veth (it had no route then). Its pod rules are then removed
        with the pod; the hold stays until the reason's pods are all DELeted
        (``agent.lift_unfounded_holds``). Before, the DEL knew no address, the rule stayed, and a
        copy of the checkpoint from before the start, restored later, kept the record of this pod
        by that rule (``agent.unwired_pods``) for an address given to another node since (the
        simulation's seed 1016434, ``agent-double``). Nothing is released here, and only a rule of
        the address the pod itself carries goes (the pod's interface is the only place its address
        can be, as an ADD reads it: :meth:`_known_again`). A read that fails, several addresses or
        none, or no such pair (another prefix's veth, the namespace gone) leaves the rule, as
        before (a leak, never a second holder)."""
        reason = self.ds.meta.get(HOLD_REASON)
        if not netns or not isinstance(reason, list):
            return set()
        # this prefix's veth, or one of the attachment's under an earlier prefix (the setting
        # changed across the restart: review 34, N2), that the start's hold reason names
        named = [v for v in sorted(veths_of(cid, ifname, set(reason), self.veth_prefix) | {holder}) if v in reason]
        under = getattr(self.pods, "carried_under", None)
        for veth in named:
            prefix = self.veth_prefix if veth == holder else veth_prefix_of(veth, cid, ifname)
            try:
                if veth == holder:
                    carried = self._carried(netns, ifname, cid)
                elif prefix is not None and under is not None:
                    carried = under(netns, ifname, cid, prefix)
                else:
                    continue
            except OSError as exc:
                log.warning("DEL %s %s: its interface could not be read (%s): any pod rule left", cid[:12], ifname, exc)
                return set()
            if carried is None:
                continue  # not that veth's peer: another of the attachment's names may be
            if len(carried) != 1 or self.ds.recovered_holder(carried[0]) != UNROUTED_HOLDER:
                return set()
            log.info(
                "DEL %s %s: its interface (peer of %s) carries %s, held unrouted: its rules removed",
                cid[:12],
                ifname,
                veth,
                carried[0],
            )
            return {carried[0]}
        return set()

    def _holder_ips(self, holder: str) -> set[str]:
        """Every address a recovered holder holds, on an ENI IMDS shows or not yet."""
        return {h.ip for h in self.ds.recovered_holders() if h.holder == holder}

    def _in_reason(self, holder: str) -> bool:
        """Whether a start's hold reason (:data:`HOLD_REASON`) names the veth ``holder``."""
        reason = self.ds.meta.get(HOLD_REASON)
        return isinstance(reason, list) and holder in reason

    def _carried(self, netns: str, ifname: str, cid: str) -> list[str] | None:
        """The IPv4 addresses the pod's interface carries when it is the peer of this prefix's veth
        of the attachment (:meth:`PodNetwork.carried`); None when there is no such pair or the
        pod network cannot tell (the recorder)."""
        carried = getattr(self.pods, "carried", None)
        return carried(netns, ifname, cid) if carried is not None else None

    def _known_again(self, cid: str, ifname: str, holder: str, carried: list[str], now: float) -> Assignment | None:
        """An ADD of an attachment with no address here whose veth (this prefix's name) a start's
        hold of every address stands for (:data:`HOLD_REASON`: a pod veth with no route the
        checkpoint lacked, its pod's address unknown) reads what the pod's interface, that veth's
        peer, carries (``drivers/net/veth.c``: the pair lives and dies together):

        * nothing: no address of this node is the pod's; the veth leaves the reason (an ADD cut
          after the veth pair, before the address: an agent killed in it, its runtime retrying);
        * one address the start's hold holds (:data:`~node_agent.records.UNKNOWN_HOLDER`): the pod's,
          held for it by its veth as a rebuild holds a routed pod's (``Datastore.recover``), and
          this ADD gives it back (the retried ADD of a pod cut after its address, or a second ADD
          of a running pod: the address Kubernetes gives it stays its own); the veth leaves the
          reason once this ADD has wired it (:meth:`_rewired`). Returned.
        * anything else (no such pair, several addresses, one not held so): the hold stays until
          the pod's DEL, as before.

        Before, the retried ADD of a pod whose first ADD was cut half-way waited for a DEL its
        runtime never sent, every free address held (``tests/integration/test_agent_crash.py``).
        The veth is never torn down here: a veth gone is not a pod gone (the simulation's seed
        732), and the pod may be running."""
        if carried == []:
            log.warning(
                "ADD %s %s: its veth %s carries no address; the start's hold for it ends", cid[:12], ifname, holder
            )
            self._rewired(holder)
            return None
        if len(carried) != 1 or self.ds.recovered_holder(carried[0]) != UNKNOWN_HOLDER:
            return None
        self.ds.recover({carried[0]: holder}, now)
        log.warning("ADD %s %s: its veth %s carries %s, held for it", cid[:12], ifname, holder, carried[0])
        return self.ds.lookup_recovered(holder)

    def _known_empty_elsewhere(self, cid: str, ifname: str, netns: str, holder: str) -> None:
        """An ADD of an attachment (with a record here or none) whose veth under an earlier prefix
        (``WARMPOOL_VETH_PREFIX`` changed across a restart: :func:`~node_agent.hostnet.veths_of`,
        as its DEL finds it) a start's hold stands for, its pod's interface (that veth's peer)
        carrying no address: no address of this node is the pod's (but its record's, held by the
        record), and that veth leaves the reason, as :meth:`_known_again` does for this prefix's
        veth; the ADD's set-up then makes that pair again under this prefix when it is as a cut ADD
        leaves it (:func:`~node_agent.hostnet.cut_pair_of_another_prefix`). Any other reading (no
        such pair, an address) leaves the hold to the pod's DEL (the ADD's set-up is refused: the
        pod's interface is another prefix's veth's peer). Before, the retried ADD of a pod cut after
        its veth pair under the earlier prefix never read it, no DEL came, and every free address
        stayed held for good (the simulation's seed 1014045); with a record, the same until the
        pod's DEL, once its set-up replaced the pair."""
        reason = self.ds.meta.get(HOLD_REASON)
        if not isinstance(reason, list):
            return
        for veth in sorted(veths_of(cid, ifname, reason, self.veth_prefix) - {holder}):
            prefix = veth_prefix_of(veth, cid, ifname)
            carried = getattr(self.pods, "carried_under", None)
            if prefix is None or carried is None or carried(netns, ifname, cid, prefix) != []:
                continue
            log.warning(
                "ADD %s %s: its veth %s (an earlier prefix's) carries no address; the start's hold for it ends",
                cid[:12],
                ifname,
                veth,
            )
            self._rewired(veth)

    def _rewired(self, holder: str) -> None:
        """After this ADD wired its attachment: the pod behind this prefix's veth ``holder`` carries
        exactly the address the ADD recorded (``setup_pod`` makes the pod interface's addresses
        exactly it), so a start's hold that stood for that veth (its address unknown) is founded
        no more and the veth leaves the reason. The retried ADD of a pod whose record the copy
        had, its veth left with no route (an agent killed between the veth and the route), ended
        the hold only at the pod's DEL, every free address held meanwhile."""
        if not self._in_reason(holder):
            return
        try:
            with self.ds.batch():  # read again under the datastore's lock
                if self._in_reason(holder):
                    reason = self.ds.meta[HOLD_REASON]
                    self.ds.set_meta(HOLD_REASON, [link for link in reason if link != holder])
        except CheckpointWriteError:
            # Memory holds it; written by this ADD's flush or the next write, and until then a DEL
            # that follows is answered only once it is on disk (review 22, R6: a DEL answered
            # before, then a crash, brought the hold back for good: no runtime DELs twice).
            self._holds_unwritten = True

    def _hold_for_veth(self, cid: str, ifname: str, ip: str, holder: str, network: str, why: str) -> None:
        """A failed ADD whose teardown failed too, or whose set-up reached the interface of a veth
        pair it did not make (``why``): its address leaves the attachment's record and
        is held by a recovered holder named after the attachment's veth (``Datastore.recover``),
        which the attachment's DEL (its teardown with that address first) releases, or the
        runtime's CNI GC once it no longer lists the attachment: the holder is noted with the
        attachment and its network (:data:`FAILED_ADD_HOLDS`, review 23, G1)."""
        now = self.clock.now()
        with contextlib.suppress(CheckpointWriteError), self.ds.batch():  # memory holds it (the next write)
            self.ds.release(cid, ifname, now)
            self.ds.recover({ip: holder}, now)
            noted = dict(self.ds.meta.get(FAILED_ADD_HOLDS) or {})
            noted[holder] = [cid, ifname, network]
            self.ds.set_meta(FAILED_ADD_HOLDS, noted)
        with self._made_lock:
            self._made[(cid, ifname)] = self._steady()  # its GC age: from this ADD
        log.warning("ADD %s %s failed (%s); %s held for %s until its DEL", cid[:12], ifname, why, ip, holder)

    def _holds_named_for(self, cid: str, ifname: str, holder: str) -> bool:
        """Whether a start's holds name this attachment's veth (under any prefix)."""
        reason = self.ds.meta.get(HOLD_REASON)
        holds = self.ds.meta.get(HOLD_ON_RELEASE) or {}
        names = {h.holder for h in self.ds.recovered_holders()} | set(holds.values())
        names |= set(reason) if isinstance(reason, list) else set()
        return bool(veths_of(cid, ifname, names - {holder}, self.veth_prefix) or holder in names)

    def _end_holds_of(self, cid: str, ifname: str, holder: str, now: float) -> bool:
        """What a start held for this attachment under another veth prefix's name, or for its
        veth with no route, ends with its DEL: the veth names are the attachment's under any
        prefix of up to 7 characters (:func:`node_agent.hostnet.veths_of`). A recovered holder so
        named is released as this prefix's is (its route went through that veth: the pod's own
        address; its rules removed); a hold on release so named ends (the pod it stood for is
        gone); and the veth leaves the start's hold reason (:data:`HOLD_REASON`: once empty, the
        agent's loop ends the hold, ``node_agent.agent.lift_unfounded_holds``). Before, a pod of
        an earlier prefix kept its address held after its DEL for as long as the checkpoint
        lasted (the simulation's seed 66)."""
        if not self._holds_named_for(cid, ifname, holder):
            return False  # the common case: no write
        # The rules and routes of an address held under another prefix's name go first, while it is
        # still held: removed after its release, they could be a new pod's (its ADD rewrites them).
        others = {h.holder for h in self.ds.recovered_holders() if h.holder != holder}
        for name in sorted(veths_of(cid, ifname, others, self.veth_prefix)):
            for ip in sorted(self._holder_ips(name)):  # attached or not (review 28, P1)
                self.pods.teardown(cid, ifname, ip)
        with self.ds.batch():  # read again under the datastore's lock: another DEL or the loop's lift may run beside
            reason = self.ds.meta.get(HOLD_REASON)
            holds = self.ds.meta.get(HOLD_ON_RELEASE) or {}
            named = {h.holder for h in self.ds.recovered_holders()} | set(holds.values())
            names = named | (set(reason) if isinstance(reason, list) else set())
            mine = veths_of(cid, ifname, names - {holder}, self.veth_prefix) | ({holder} & names)
            for name in sorted(mine & named - {holder}):
                for freed in self.ds.release_recovered(name, now):
                    log.info("DEL %s %s: recovered address %s (veth %s) released", cid[:12], ifname, freed.ip, name)
            keep = {ip: h for ip, h in holds.items() if h not in mine}
            if keep != holds:
                self.ds.set_meta(HOLD_ON_RELEASE, keep or None)
            if isinstance(reason, list) and set(reason) & mine:
                self.ds.set_meta(HOLD_REASON, [link for link in reason if link not in mine])
        return True

    def check(self, req: dict[str, Any]) -> None:
        cid, ifname, netns = self._ids(req)
        self._check_target(ifname, netns)
        with self._serialised(cid, ifname):
            self._check(cid, ifname, netns)

    def _check(self, cid: str, ifname: str, netns: str) -> None:
        held, _ = self._held(cid, ifname)
        if held is None:
            raise Failure(
                E_UNKNOWN_CONTAINER, f"container {cid} ({ifname}) holds no address here", reason="unknown-container"
            )
        eni = self.ds.eni(held.eni_id)
        problems = self.pods.check(netns, ifname, cid, held.ip, eni.route_table if eni else MAIN_TABLE)
        if problems:
            raise Failure(E_CHECK_FAILED, "pod network is not as set up", "; ".join(problems), reason="check")

    def _age(self, rec: PodRecord) -> float:
        """How long the attachment is known to have held its address, on the monotonic clock:
        since this process gave it, else (an earlier process did) since this process started."""
        return self._age_of(rec.container_id, rec.ifname)

    def _age_of(self, cid: str, ifname: str) -> float:
        with self._made_lock:
            made = self._made.get((cid, ifname), self._started)
        return self._steady() - made

    def gc(self, req: dict[str, Any]) -> None:
        """CNI GC (spec 1.1): every attachment of this network held here that
        ``cni.dev/valid-attachments`` does not list is torn down and its address released into
        cooldown; a listed one never is. The list names the attachments of the GC's own network
        (its configuration's ``name``): an attachment another network's ADD made (two warmpool
        networks under Multus), or one whose network is not known (recorded before agents kept
        it), is left alone. Left alone as well: attachments with an operation in flight, and
        ones younger than ``gc_min_age_s`` on the monotonic clock (one an earlier process of the
        agent made counts from this process's start: :meth:`_age`). Recovered holders (known by
        host veth only) wait for their DEL.

        Answered success only once its releases are on disk, as ADD: a release whose write
        fails stays made in memory (torn down, in cooldown) and the GC goes on with the others
        (the spec has GC remove as much as it can), then fails with code 5; the runtime's next
        GC writes again first (:meth:`Datastore.flush`) and fails too until the write works.
        Until then the disk only says the addresses are held (never a second holder)."""
        conf = req.get("config")
        valid = _valid_attachments(conf)
        network = _network_name(conf)
        if not network:
            raise Failure(E_INVALID_CONFIG, "GC needs the network's name", reason="bad-config")
        errors: list[str] = []
        released = 0
        since = self._steady()
        records = self.ds.pods()
        with self._made_lock:  # forget attachments released since (by DEL, GC or a failed ADD)
            live = {(r.container_id, r.ifname) for r in records}
            live |= {(c, i) for c, i, _ in (self.ds.meta.get(FAILED_ADD_HOLDS) or {}).values()}
            # not one an ADD answered on another thread after the snapshot (dated ``since`` or
            # later): pruned, it would date from the process's start and look old to the next GC
            # (review of the one-holder argument, G1)
            for gone in [k for k, made in self._made.items() if k not in live and made < since]:
                del self._made[gone]
        for rec in records:
            if rec.network != network:
                continue  # another network's attachment: its own GC decides
            if (rec.container_id, rec.ifname) in valid or self._age(rec) < self.gc_min_age_s:
                continue
            with self._attachment(rec.container_id, rec.ifname, 0.0) as got:
                if not got:
                    continue  # an ADD/DEL/CHECK for it is running: not stale
                held = self.ds.lookup(rec.container_id, rec.ifname)
                if held is None or held.ip != rec.ip:
                    continue
                # again under the lock: an ADD of it answered since the check above made it young
                if self._age(rec) < self.gc_min_age_s:
                    continue
                try:
                    self.pods.teardown(rec.container_id, rec.ifname, rec.ip)
                except (NetlinkFailure, PodRefused) as exc:
                    errors.append(f"{rec.container_id[:12]}/{rec.ifname}: {exc}")
                    continue
                try:
                    self.ds.release(rec.container_id, rec.ifname, self.clock.now())
                except CheckpointWriteError:
                    pass  # released in memory, not on disk: the flush below fails the GC
                # As its DEL would: what a start held for the attachment's veth ends (review 23,
                # G2: a cut ADD's record GCed, its veth left in the hold's reason for good)
                holder = host_veth_name(rec.container_id, rec.ifname, self.veth_prefix)
                try:
                    self._end_holds_of(rec.container_id, rec.ifname, holder, self.clock.now())
                except CheckpointWriteError:
                    self._holds_unwritten = True  # in memory; the flush below fails the GC
                released += 1
                log.info("GC: %s %s not listed by the runtime; %s released", rec.container_id[:12], rec.ifname, rec.ip)
        released += self._gc_failed_add_holds(network, valid, errors)
        self.stats.gc_released += released
        torn = len(errors)
        try:
            self.ds.flush()  # this GC's releases, or an earlier one's, not yet on disk
        except CheckpointWriteError as exc:
            if not errors:
                raise
            errors.append(f"checkpoint: {exc}")
        if errors:
            raise Failure(
                E_IO,
                f"GC could not tear down {torn} attachments (the others were released)",
                "; ".join(errors)[:2000],
                reason="gc-teardown",
            )

    def _gc_failed_add_holds(self, network: str, valid: set[tuple[str, str]], errors: list[str]) -> int:
        """CNI GC of the holders :meth:`_hold_for_veth` made: one whose attachment (of this
        network, old enough) the runtime no longer lists is torn down with its address and
        released, as a record is. A note whose holder holds nothing any more (its DEL came, or
        a retried ADD took the address back into a record) is dropped. Returns how many were
        released; a teardown that fails is added to ``errors``."""
        released = 0
        for holder, (cid, ifname, net) in sorted((self.ds.meta.get(FAILED_ADD_HOLDS) or {}).items()):
            if net != network or (cid, ifname) in valid:
                continue
            with self._attachment(cid, ifname, 0.0) as got:
                if not got:
                    continue  # an ADD/DEL/CHECK for it is running: not stale
                held = self.ds.lookup_recovered(holder)
                if held is not None and self._age_of(cid, ifname) < self.gc_min_age_s:
                    continue
                if held is not None:
                    try:
                        self.pods.teardown(cid, ifname, held.ip)
                    except (NetlinkFailure, PodRefused) as exc:
                        errors.append(f"{cid[:12]}/{ifname}: {exc}")
                        continue
                with contextlib.suppress(CheckpointWriteError), self.ds.batch():  # the flush after fails the GC
                    if held is not None:
                        self.ds.release_recovered(holder, self.clock.now())
                    rest = {k: v for k, v in (self.ds.meta.get(FAILED_ADD_HOLDS) or {}).items() if k != holder}
                    self.ds.set_meta(FAILED_ADD_HOLDS, rest or None)
                # As its DEL would: what a start held for the attachment's veth ends (review 27, G1:
                # a failed second ADD's hold GCed, its veth left in the hold's reason for good)
                try:
                    self._end_holds_of(cid, ifname, holder, self.clock.now())
                except CheckpointWriteError:
                    self._holds_unwritten = True  # in memory; the GC's flush fails the GC
                if held is not None:
                    released += 1
                    log.info(
                        "GC: %s %s not listed by the runtime; %s (its failed ADD's) released", cid[:12], ifname, held.ip
                    )
        return released

    def reap_gone_failed_holds(self) -> list[str]:
        """A failed ADD's hold (:meth:`_hold_for_veth`, noted in :data:`FAILED_ADD_HOLDS`) whose
        veth the host has not shown for ``gc_min_age_s`` is let go: the pair lives and dies
        together (``drivers/net/veth.c``), so with its host side gone no pod interface carries the
        address. containerd DELs a failed ADD once and, when that DEL fails too, removes the
        sandbox's namespace and never sends it again (its ``RunPodSandbox`` resets the cleanup
        error of a sandbox with no CNI result), and sends no CNI GC: held so, the address waited
        for the agent's next start (review 28, C1). A start's hold for the veth stays: a veth gone
        is not a pod gone (the simulation's seed 732). Called by the agent's loop; reads the host
        only while such a hold exists. Returns the addresses let go."""
        noted = dict(self.ds.meta.get(FAILED_ADD_HOLDS) or {})
        if not noted:
            self._absent.clear()
            return []
        host_wiring = getattr(self.pods, "host_wiring", None)
        if host_wiring is None:
            return []  # cannot tell: kept
        wiring = host_wiring()
        if wiring is None:
            return []
        links = wiring.link_names()
        now = self._steady()
        freed: list[str] = []
        for holder, (cid, ifname, _net) in sorted(noted.items()):
            if holder in links:
                self._absent.pop(holder, None)
                continue
            since = self._absent.setdefault(holder, now)
            if now - since < self.gc_min_age_s:
                continue
            with self._attachment(cid, ifname, 0.0) as got:
                if not got:
                    continue  # an ADD/DEL for it is running: next pass
                again = host_wiring()  # under the attachment's lock: an ADD since may have made the pair
                if again is None or holder in again.link_names():
                    self._absent.pop(holder, None)
                    continue
                ips = sorted(self._holder_ips(holder))
                for ip in ips:
                    self.pods.teardown(cid, ifname, ip)  # its rules and routes
                with contextlib.suppress(CheckpointWriteError), self.ds.batch():  # the loop's flush writes it
                    self.ds.release_recovered(holder, self.clock.now())
                    rest = {k: v for k, v in (self.ds.meta.get(FAILED_ADD_HOLDS) or {}).items() if k != holder}
                    self.ds.set_meta(FAILED_ADD_HOLDS, rest or None)
                self._absent.pop(holder, None)
                freed += ips
                log.warning(
                    "ADD %s %s failed and its veth %s has been gone %.0f s (no DEL or GC came): %s released",
                    cid[:12],
                    ifname,
                    holder,
                    now - since,
                    ", ".join(ips) or "nothing",
                )
        return freed

    def check_status(self, req: dict[str, Any]) -> None:
        """CNI STATUS (spec 1.1): ready for ADDs, or code 50 saying why not."""
        problem = self.status() if self.status is not None else self._default_status()
        if problem:
            raise Failure(E_NOT_AVAILABLE, "warmpool agent cannot serve ADD yet", problem, reason="not-ready")

    def _default_status(self) -> str | None:
        if not any(e.ready for e in self.ds.enis()):
            return "no ENI is ready on this node yet"
        return None


POD_KEY_MAX = 317
"""The longest pod key :func:`pod_of` keeps: a namespace (63) and a pod name (253), a slash."""


def pod_of(args: Any) -> str:
    """``namespace/name`` of the pod an ADD is for, from the runtime's ``CNI_ARGS``
    (``K8S_POD_NAMESPACE=...;K8S_POD_NAME=...``, as kubelet's runtimes pass them); '' when it
    does not say, or says something no pod is called."""
    if not isinstance(args, str) or len(args) > 4096:
        return ""
    pairs = dict(part.split("=", 1) for part in args.split(";") if "=" in part)
    ns, name = pairs.get("K8S_POD_NAMESPACE", ""), pairs.get("K8S_POD_NAME", "")
    key = f"{ns}/{name}"
    if not ns or not name or "/" in ns or "/" in name or len(key) > POD_KEY_MAX or not key.isprintable():
        return ""
    return key


def _network_name(conf: Any) -> str:
    """The network configuration's ``name`` (required by the CNI spec), '' if it has none."""
    name = conf.get("name") if isinstance(conf, dict) else None
    return name if isinstance(name, str) else ""


def _valid_attachments(conf: Any) -> set[tuple[str, str]]:
    """The runtime's still-valid attachments from a GC config; refuses a config that does not say
    (a missing list must never read as "none is valid")."""
    if not isinstance(conf, dict):
        raise Failure(E_DECODE, "network configuration is not a JSON object", reason="bad-config")
    version = conf.get("cniVersion")
    if not isinstance(version, str) or not version_at_least(version, "1.1.0"):
        raise Failure(
            E_INCOMPATIBLE_VERSION, "config version does not allow GC", f"cniVersion {version!r}", reason="bad-version"
        )
    raw = conf.get(VALID_ATTACHMENTS)
    if not isinstance(raw, list):
        raise Failure(E_INVALID_CONFIG, f"GC needs {VALID_ATTACHMENTS} (a list)", reason="bad-config")
    out: set[tuple[str, str]] = set()
    for item in raw:
        cid = item.get("containerID") if isinstance(item, dict) else None
        ifname = item.get("ifname") if isinstance(item, dict) else None
        if not isinstance(cid, str) or not isinstance(ifname, str) or not cid or not ifname:
            raise Failure(
                E_INVALID_CONFIG,
                f"{VALID_ATTACHMENTS}: each entry needs containerID and ifname strings",
                json.dumps(item)[:200],
                reason="bad-config",
            )
        out.add((cid, ifname))
    return out


def _check_config(conf: Any) -> None:
    if not isinstance(conf, dict):
        raise Failure(E_DECODE, "network configuration is not a JSON object", reason="bad-config")
    prev = conf.get("prevResult")
    if prev is None:
        return
    ok = isinstance(prev, dict) and all(
        isinstance(prev.get(k, []), list) and all(isinstance(x, dict) for x in prev.get(k, []))
        for k in ("interfaces", "ips", "routes")
    )
    if not ok:
        raise Failure(E_DECODE, "prevResult is not a CNI result", reason="bad-config")


def read_request(sock: socket.socket, limit: int, timeout_s: float) -> bytes:
    """One request line (without its newline) from ``sock``: at most ``limit`` bytes, all of
    it within ``timeout_s``. ``ValueError`` if longer, ``TimeoutError`` if slower,
    ``EOFError`` if the client closed before sending anything."""
    deadline = time.monotonic() + timeout_s
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            if buf:  # the client shut its side after a request without a newline
                return bytes(buf)
            raise EOFError
        end = chunk.find(b"\n")
        buf += chunk if end < 0 else chunk[:end]
        if len(buf) > limit:
            raise ValueError(f"request larger than {limit} bytes")
        if end >= 0:
            return bytes(buf)


class _Handler(socketserver.BaseRequestHandler):
    server: CniSocketServer
    request: socket.socket

    def handle(self) -> None:
        reply: dict[str, Any]
        try:
            line = read_request(self.request, MAX_REQUEST_BYTES, self.server.read_timeout_s)
        except ValueError as exc:
            reply = {"ok": False, "code": E_INVALID_CONFIG, "msg": "request too large", "details": str(exc)}
        except TimeoutError:
            reply = {
                "ok": False,
                "code": E_IO,
                "msg": "request not received in time",
                "details": f"no complete request within {self.server.read_timeout_s:g}s",
            }
        except (EOFError, OSError):
            return  # the client is gone: nobody to answer
        else:
            reply = self._answer(line)
        try:
            self.request.settimeout(self.server.read_timeout_s)
            self.request.sendall(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        except OSError as exc:  # the client went away or stopped reading
            log.info("CNI reply not delivered: %s", exc)

    def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            return {"ok": False, "code": E_DECODE, "msg": "bad request", "details": str(exc)[:500]}
        try:
            return self.server.service.handle(req)
        except Exception as exc:  # never leave the plugin without an answer
            log.exception("CNI request failed")
            return {"ok": False, "code": E_IO, "msg": "agent error", "details": str(exc)[:500]}


class CniSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 1024
    """listen() backlog. The plugin's connect is non-blocking (it has a timeout), and a unix
    socket refuses it at once (EAGAIN) when the backlog is full: socketserver's 5 made a burst of
    sandboxes fail with "agent is not reachable" (found by tests/runtime; the kernel caps it at
    net.core.somaxconn)."""

    def __init__(self, path: str, service: CniService, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        self.service = service
        self.read_timeout_s = read_timeout_s
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            super().__init__(path, _Handler)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="cni-socket", daemon=True)
        t.start()
        return t
