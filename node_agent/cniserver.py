"""The agent's side of the CNI plugin: a unix socket (mode 0600, root only)
taking one JSON request per connection from ``warmpool-cni`` and doing the
work: the address is recorded in the datastore (and checkpointed) before the
pod is wired and before anyone is answered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from node_agent.datastore import Assignment, Datastore
from node_agent.hostnet import (
    GATEWAY,
    HostWiring,
    PodNet,
    check_pod,
    host_veth_name,
    setup_pod,
    teardown_pod,
    wired_pods,
)
from node_agent.netlink import MAIN_TABLE, Netlink, NetlinkFailure

log = logging.getLogger("warmpool.agent.cni")

E_INCOMPATIBLE_VERSION = 1
E_UNKNOWN_CONTAINER = 3
E_INVALID_ENV = 4
E_IO = 5
E_DECODE = 6
E_INVALID_CONFIG = 7
E_TRY_AGAIN_LATER = 11
E_CHECK_FAILED = 100


class PodNetwork(Protocol):
    """How pods are wired (netlink in production, a recorder in unit tests and the bench)."""

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

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        with Netlink.open(self.host_netns) as host:
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
    failures: Counter[str] = field(default_factory=Counter)
    wait_seconds: list[float] = field(default_factory=list)
    """Time ADDs waited for an address (bounded; the metrics layer folds it into a histogram)."""


class CniService:
    """ADD / DEL / CHECK against the datastore and the pod network. Thread-safe."""

    def __init__(
        self,
        datastore: Datastore,
        pods: PodNetwork,
        *,
        mtu: int = 9001,
        add_wait_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        on_unmet: Callable[[], None] | None = None,
        veth_prefix: str = "eni",
    ) -> None:
        self.ds = datastore
        self.veth_prefix = veth_prefix
        self.pods = pods
        self.mtu = mtu
        self.add_wait_s = add_wait_s
        self.clock = clock
        self.on_unmet = on_unmet
        self.stats = CniStats()
        self._cond = threading.Condition()

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
            raise Failure(E_INVALID_ENV, f"unsupported command {command!r}", reason="bad-command")
        except Failure as f:
            self.stats.failures[f"{command}:{f.reason}"] += 1
            return {"ok": False, "code": f.code, "msg": f.msg, "details": f.details}
        except NetlinkFailure as exc:
            self.stats.failures[f"{command}:netlink"] += 1
            log.warning("%s %s: %s", command, req.get("container_id"), exc)
            return {"ok": False, "code": E_IO, "msg": "host network set-up failed", "details": str(exc)}

    @staticmethod
    def _ids(req: dict[str, Any]) -> tuple[str, str, str]:
        cid, ifname, netns = (str(req.get(k) or "") for k in ("container_id", "ifname", "netns"))
        if not cid or not ifname:
            raise Failure(E_INVALID_ENV, "CNI_CONTAINERID and CNI_IFNAME are required", reason="bad-env")
        return cid, ifname, netns

    def add(self, req: dict[str, Any]) -> dict[str, Any]:
        cid, ifname, netns = self._ids(req)
        if not netns:
            raise Failure(E_INVALID_ENV, "CNI_NETNS is required for ADD", reason="bad-env")
        conf = req.get("config") or {}
        _check_config(conf)  # before anything is acted on: a bad config must not leave a pod half-made
        started = self.clock()
        holder = host_veth_name(cid, ifname, self.veth_prefix)  # a rebuild may have found this pod's address
        a = self.ds.assign(cid, ifname, netns, started, holder)
        if a is None:
            if self.on_unmet is not None:
                self.on_unmet()
            deadline = time.monotonic() + self.add_wait_s
            while a is None and time.monotonic() < deadline:
                with self._cond:
                    self._cond.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
                a = self.ds.assign(cid, ifname, netns, self.clock(), holder)
        waited = self.clock() - started
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
        except Exception:
            # Never leave an address recorded for a pod that has no network.
            try:
                self.pods.teardown(cid, ifname, a.ip)
            finally:
                self.ds.release(cid, ifname, self.clock())
            raise
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
        cid, ifname, _ = self._ids(req)
        held, holder = self._held(cid, ifname)
        self.pods.teardown(cid, ifname, held.ip if held else None)
        now = self.clock()
        self.ds.release(cid, ifname, now)  # also forgets a waiting ADD
        for freed in self.ds.release_recovered(holder, now):
            log.info("DEL %s %s: recovered address %s released", cid[:12], ifname, freed.ip)

    def check(self, req: dict[str, Any]) -> None:
        cid, ifname, netns = self._ids(req)
        held, _ = self._held(cid, ifname)
        if held is None:
            raise Failure(E_UNKNOWN_CONTAINER, f"container {cid} ({ifname}) holds no address here",
                          reason="unknown-container")
        eni = self.ds.eni(held.eni_id)
        problems = self.pods.check(netns, ifname, cid, held.ip, eni.route_table if eni else MAIN_TABLE)
        if problems:
            raise Failure(E_CHECK_FAILED, "pod network is not as set up", "; ".join(problems), reason="check")


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


class _Handler(socketserver.StreamRequestHandler):
    server: CniSocketServer

    def handle(self) -> None:
        line = self.rfile.readline(1 << 20)
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            reply: dict[str, Any] = {"ok": False, "code": E_DECODE, "msg": "bad request", "details": str(exc)[:500]}
        else:
            try:
                reply = self.server.service.handle(req)
            except Exception as exc:  # never leave the plugin without an answer
                log.exception("CNI request failed")
                reply = {"ok": False, "code": E_IO, "msg": "agent error", "details": str(exc)[:500]}
        self.wfile.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")


class CniSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 1024
    """listen() backlog. The plugin's connect is non-blocking (it has a timeout), and a unix
    socket refuses it at once (EAGAIN) when the backlog is full: socketserver's 5 made a burst of
    sandboxes fail with "agent is not reachable" (found by tests/runtime; the kernel caps it at
    net.core.somaxconn)."""

    def __init__(self, path: str, service: CniService) -> None:
        self.service = service
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
