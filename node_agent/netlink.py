"""A one-to-one adapter over pyroute2's ``IPRoute``, bound to one network
namespace.

Each method does one netlink request and its docstring gives the ``ip``
command it stands for. "Already exists" and "not found" are classified here,
once (:class:`Exists`, :class:`NetlinkNotFound`); the ``ensure_*``/``*_absent``
methods swallow the one that means "already as wanted", so callers that
reconcile desired state can run twice and change nothing the second time.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

NLM_F_DUMP_INTR = 0x10
"""A dump's message flag: the table changed while it was dumped (``include/uapi/linux/netlink.h``)."""
DUMP_TRIES = 10
"""How often :meth:`Netlink._dump` reads a dump the kernel keeps flagging as interrupted."""


def _interrupted(msg: Any) -> bool:
    try:
        return bool(int(msg["header"]["flags"]) & NLM_F_DUMP_INTR)
    except (KeyError, TypeError, ValueError):
        return False


CLONE_NEWNET = 0x40000000
MAIN_TABLE = 254
AF_INET = socket.AF_INET
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
NUD_PERMANENT = 0x80
NETNS_DIR = "/run/netns"
T = TypeVar("T")


class NetlinkFailure(OSError):
    """A netlink request failed for a reason other than exists/not-found."""


class Exists(NetlinkFailure):
    """The object is already there (EEXIST)."""


class NetlinkNotFound(NetlinkFailure, LookupError):
    """The object or the device it names is not there (ENOENT, ESRCH, ENODEV, EADDRNOTAVAIL)."""


_NOT_FOUND = {errno.ENOENT, errno.ESRCH, errno.ENODEV, errno.EADDRNOTAVAIL, errno.ENXIO}


def classify(exc: NetlinkError, what: str) -> NetlinkFailure:
    """The one place netlink error codes become exceptions."""
    code = int(getattr(exc, "code", 0) or 0)
    cls: type[NetlinkFailure]
    if code == errno.EEXIST:
        cls = Exists
    elif code in _NOT_FOUND:
        cls = NetlinkNotFound
    else:
        cls = NetlinkFailure
    return cls(code, f"{what}: {os.strerror(code) if code else exc}")


_libc = ctypes.CDLL(None, use_errno=True)


def netns_path(netns: str) -> str:
    """A bare name means ``/run/netns/<name>`` (``ip netns``); a path is used as is."""
    return netns if "/" in netns else f"{NETNS_DIR}/{netns}"


def run_in_netns(path: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a short-lived thread that has entered the namespace at ``path``.

    ``setns`` changes only the calling thread's namespace, so the rest of the
    process stays where it is; whatever ``fn`` creates there (a netlink socket,
    an open ``/proc/sys/net`` file) stays bound to that namespace. No fork.
    """
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            out["err"] = NetlinkNotFound(exc.errno or errno.ENOENT, f"netns {path}: {exc.strerror}")
            return
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                out["err"] = NetlinkFailure(e, f"setns {path}: {os.strerror(e)}")
                return
            out["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            out["err"] = exc
        finally:
            os.close(fd)

    t = threading.Thread(target=run, name="netns-enter")
    t.start()
    t.join()
    if "err" in out:
        raise out["err"]
    value: T = out["value"]
    return value


def _socket_in(path: str) -> socket.socket:
    """A netlink socket created inside the namespace at ``path`` (it stays bound to it)."""
    return run_in_netns(path, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0))


def sysctl_path(key: str) -> str:
    """``net.ipv4.conf.eth0.rp_filter`` -> ``/proc/sys/net/ipv4/conf/eth0/rp_filter``."""
    return "/proc/sys/" + key.replace(".", "/")


def sysctl_get(netns: str, key: str) -> str:
    """``sysctl -n KEY`` in the namespace (the agent's own when ``netns`` is empty)."""

    def read() -> str:
        with open(sysctl_path(key)) as f:
            return f.read().strip()

    try:
        return read() if not netns else run_in_netns(netns_path(netns), read)
    except FileNotFoundError:
        raise NetlinkNotFound(errno.ENOENT, f"sysctl {key}: no such key") from None


def sysctl_set(netns: str, key: str, value: str) -> bool:
    """``sysctl -w KEY=VALUE`` unless it already has that value; True if written."""
    if sysctl_get(netns, key) == value:
        return False

    def write() -> None:
        with open(sysctl_path(key), "w") as f:
            f.write(value)

    if netns:
        run_in_netns(netns_path(netns), write)
    else:
        write()
    return True


@dataclass(frozen=True)
class Route:
    dst: str
    """``a.b.c.d/len`` or ``default``."""
    table: int
    oif: int | None = None
    gateway: str | None = None
    scope: int = RT_SCOPE_UNIVERSE


@dataclass(frozen=True)
class Rule:
    priority: int
    table: int
    src: str | None = None
    """``a.b.c.d/len`` or None."""
    dst: str | None = None
    fwmark: int = 0
    """``fwmark M/MASK`` (0: no mark match)."""
    fwmask: int = 0


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    mac: str
    mtu: int
    up: bool
    kind: str = ""
    peer: int | None = None
    """``IFLA_LINK``: for a veth, its peer's index (in the peer's namespace)."""
    master: int | None = None
    """``IFLA_MASTER``: the index of the device it is enslaved to (a bridge, a bond), if any."""


def _split(cidr: str) -> tuple[str, int]:
    ip, _, plen = cidr.partition("/")
    return ip, int(plen or 32)


class Netlink:
    """``ip`` for one namespace. Use as a context manager or call :meth:`close`."""

    def __init__(self, ipr: IPRoute, netns: str = "") -> None:
        self.ipr = ipr
        self.netns = netns

    @classmethod
    def open(cls, netns: str | None = None) -> Netlink:
        """``ip [-n NETNS]``: the agent's own namespace, or a named one / a path."""
        if not netns:
            return cls(IPRoute(), "")
        sock = _socket_in(netns_path(netns))
        return cls(IPRoute(fileno=sock.detach()), netns)

    def close(self) -> None:
        self.ipr.close()

    def __enter__(self) -> Netlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _do(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NetlinkError as exc:
            raise classify(exc, what) from None

    def _dump(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> list[Any]:
        """A dump, whole or refused: the kernel flags a message ``NLM_F_DUMP_INTR`` when the
        table changed while it was dumped, so the dump may have skipped entries (netlink(7),
        ``include/uapi/linux/netlink.h``); pyroute2 does not check it. Refused with EINTR, read
        again by the caller (hostile review 3, F3: an interrupted route dump missing a pod's
        ``/32`` route was taken as whole, and a rebuild left that pod's address unheld). An
        interrupted dump is read again at once, up to :data:`DUMP_TRIES` times: on a node
        where pods come and go, links change all the time (CI's containerd tier met one in a
        pod's DEL); interrupted every time, it raises, EINTR."""
        for _ in range(DUMP_TRIES):
            msgs = list(self._do(what, fn, *args, **kwargs))
            if not any(_interrupted(m) for m in msgs):
                return msgs
        raise NetlinkFailure(errno.EINTR, f"{what} interrupted (NLM_F_DUMP_INTR) {DUMP_TRIES} times running")

    # --- links ------------------------------------------------------------------------

    def links(self) -> list[Link]:
        """``ip -d link show``"""
        out = []
        for m in self._dump("link dump", self.ipr.link, "dump"):
            info = m.get("IFLA_LINKINFO")
            out.append(
                Link(
                    index=m["index"],
                    name=m.get("IFLA_IFNAME"),
                    mac=(m.get("IFLA_ADDRESS") or "").lower(),
                    mtu=m.get("IFLA_MTU") or 0,
                    up=bool(m["flags"] & 1),
                    kind=(info.get("IFLA_INFO_KIND") if info else "") or "",
                    peer=m.get("IFLA_LINK"),
                    master=m.get("IFLA_MASTER") or None,
                )
            )
        return out

    def link_by_mac(self, mac: str) -> Link | None:
        """``ip -o link | grep -i MAC`` (the first non-virtual-slave match)."""
        mac = mac.lower()
        for link in self.links():
            if link.mac == mac:
                return link
        return None

    def link_by_name(self, name: str) -> Link | None:
        """``ip link show dev NAME``"""
        for link in self.links():
            if link.name == name:
                return link
        return None

    def link_set(self, index: int, *, mtu: int | None = None, up: bool | None = None) -> None:
        """``ip link set dev X [mtu M] [up|down]``"""
        kw: dict[str, Any] = {"index": index}
        if mtu is not None:
            kw["mtu"] = mtu
        if up is not None:
            kw["state"] = "up" if up else "down"
        self._do(f"link set {index}", self.ipr.link, "set", **kw)

    def veth_add(self, name: str, peer: str, peer_netns: str, mtu: int) -> None:
        """``ip link add NAME mtu M type veth peer name PEER netns PEER_NETNS``"""
        fd = os.open(netns_path(peer_netns), os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._do(
                f"veth add {name}",
                self.ipr.link,
                "add",
                ifname=name,
                kind="veth",
                mtu=mtu,
                peer={"ifname": peer, "net_ns_fd": fd, "mtu": mtu},
            )
        finally:
            os.close(fd)

    def link_del(self, index: int) -> None:
        """``ip link del dev X``"""
        self._do(f"link del {index}", self.ipr.link, "del", index=index)

    def link_absent(self, name: str) -> bool:
        """``ip link del dev NAME`` if it exists; True if something was deleted."""
        link = self.link_by_name(name)
        if link is None:
            return False
        try:
            self.link_del(link.index)
        except NetlinkNotFound:
            return False
        return True

    # --- addresses -----------------------------------------------------------------------

    def addrs(self, index: int) -> list[str]:
        """``ip -4 addr show dev X`` as ``a.b.c.d/len``"""
        out = []
        for m in self._dump("addr dump", self.ipr.addr, "dump", family=AF_INET, index=index):
            if m["index"] == index:
                out.append(f"{m.get('IFA_ADDRESS')}/{m['prefixlen']}")
        return out

    def addr_add(self, index: int, cidr: str) -> None:
        """``ip addr add CIDR dev X``"""
        ip, plen = _split(cidr)
        self._do(f"addr add {cidr}", self.ipr.addr, "add", index=index, address=ip, prefixlen=plen)

    def addr_del(self, index: int, cidr: str) -> None:
        """``ip addr del CIDR dev X``"""
        ip, plen = _split(cidr)
        self._do(f"addr del {cidr}", self.ipr.addr, "del", index=index, address=ip, prefixlen=plen)

    def ensure_addrs(self, index: int, wanted: list[str]) -> int:
        """Make the IPv4 addresses of X exactly ``wanted``; returns changes made."""
        have = set(self.addrs(index))
        changes = 0
        for cidr in sorted(have - set(wanted)):
            try:
                self.addr_del(index, cidr)
                changes += 1
            except NetlinkNotFound:
                pass
        for cidr in wanted:
            if cidr not in have:
                try:
                    self.addr_add(index, cidr)
                    changes += 1
                except Exists:
                    pass
        return changes

    # --- routes ----------------------------------------------------------------------------

    def routes(self, table: int) -> list[Route]:
        """``ip -4 route show table T``"""
        out = []
        for m in self._dump(f"route dump {table}", self.ipr.route, "dump", family=AF_INET, table=table):
            t = m.get("RTA_TABLE") or m["table"]
            if t != table:
                continue
            dst = m.get("RTA_DST")
            out.append(
                Route(
                    dst=f"{dst}/{m['dst_len']}" if dst else "default",
                    table=t,
                    oif=m.get("RTA_OIF"),
                    gateway=m.get("RTA_GATEWAY"),
                    scope=m["scope"],
                )
            )
        return out

    def route_replace(self, r: Route) -> None:
        """``ip route replace DST [via GW] dev OIF [scope link] table T``"""
        self._do(f"route replace {r.dst} table {r.table}", self.ipr.route, "replace", **_route_kw(r))

    def route_del(self, r: Route) -> None:
        """``ip route del DST [via GW] dev OIF table T``"""
        self._do(f"route del {r.dst} table {r.table}", self.ipr.route, "del", **_route_kw(r))

    def route_absent(self, r: Route) -> bool:
        try:
            self.route_del(r)
        except NetlinkNotFound:
            return False
        return True

    def ensure_routes(self, table: int, wanted: list[Route], only_oif: int | None = None) -> int:
        """Make table T hold exactly ``wanted`` (restricted to routes via ``only_oif`` if given):
        delete what is not wanted first, then add what is missing. Returns changes made."""
        have = [r for r in self.routes(table) if only_oif is None or r.oif == only_oif]
        changes = 0
        for r in have:
            if r not in wanted:
                changes += self.route_absent(r)
        for r in wanted:
            if r not in have:
                self.route_replace(r)
                changes += 1
        return changes

    # --- rules ----------------------------------------------------------------------------------

    def rules(self) -> list[Rule]:
        """``ip -4 rule show``"""
        out = []
        for m in self._dump("rule dump", self.ipr.rule, "dump", family=AF_INET):
            src = m.get("FRA_SRC")
            dst = m.get("FRA_DST")
            out.append(
                Rule(
                    priority=m.get("FRA_PRIORITY") or 0,
                    table=m.get("FRA_TABLE") or m["table"],
                    src=f"{src}/{m['src_len']}" if src else None,
                    dst=f"{dst}/{m['dst_len']}" if dst else None,
                    fwmark=m.get("FRA_FWMARK") or 0,
                    fwmask=(m.get("FRA_FWMASK") or 0) if m.get("FRA_FWMARK") else 0,
                )
            )
        return out

    def rule_add(self, r: Rule) -> None:
        """``ip rule add [from SRC] [to DST] [fwmark M/MASK] lookup T priority P``"""
        self._do(f"rule add {r}", self.ipr.rule, "add", **self._rule_kw(r))

    def rule_del(self, r: Rule) -> None:
        """``ip rule del [from SRC] [to DST] lookup T priority P``"""
        self._do(f"rule del {r}", self.ipr.rule, "del", **self._rule_kw(r))

    @staticmethod
    def _rule_kw(r: Rule) -> dict[str, Any]:
        kw: dict[str, Any] = {"table": r.table, "priority": r.priority, "family": AF_INET}
        if r.src:
            ip, plen = _split(r.src)
            kw.update(src=ip, src_len=plen)
        if r.dst:
            ip, plen = _split(r.dst)
            kw.update(dst=ip, dst_len=plen)
        if r.fwmark:
            kw.update(fwmark=r.fwmark, fwmask=r.fwmask or 0xFFFFFFFF)
        return kw

    def ensure_rule(self, r: Rule) -> bool:
        """Add the rule unless an identical one exists; True if added."""
        if r in self.rules():
            return False
        try:
            self.rule_add(r)
        except Exists:
            return False
        return True

    def rule_absent(self, r: Rule) -> int:
        """Delete every copy of the rule; returns how many."""
        n = 0
        for have in self.rules():
            if have == r:
                try:
                    self.rule_del(r)
                    n += 1
                except NetlinkNotFound:
                    pass
        return n

    # --- neighbours ------------------------------------------------------------------------------

    def neighbours(self, index: int) -> dict[str, tuple[str, int]]:
        """``ip neigh show dev X``: address -> (lladdr, state)"""
        out = {}
        for m in self._dump("neigh dump", self.ipr.neigh, "dump", family=AF_INET, ifindex=index):
            if m["ifindex"] == index and m.get("NDA_DST"):
                out[m.get("NDA_DST")] = ((m.get("NDA_LLADDR") or "").lower(), m["state"])
        return out

    def neigh_replace(self, index: int, ip: str, lladdr: str) -> None:
        """``ip neigh replace IP lladdr MAC dev X nud permanent``"""
        self._do(
            f"neigh replace {ip}",
            self.ipr.neigh,
            "replace",
            ifindex=index,
            dst=ip,
            lladdr=lladdr,
            state=NUD_PERMANENT,
            family=AF_INET,
        )


def _route_kw(r: Route) -> dict[str, Any]:
    """pyroute2 arguments naming one route (the same for replace and del)."""
    kw: dict[str, Any] = {"table": r.table, "scope": r.scope}
    if r.dst != "default":
        ip, plen = _split(r.dst)
        kw.update(dst=ip, dst_len=plen)
    else:
        kw.update(dst="0.0.0.0", dst_len=0)
    if r.oif is not None:
        kw["oif"] = r.oif
    if r.gateway is not None:
        kw["gateway"] = r.gateway
    return kw
