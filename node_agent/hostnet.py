"""Host set-up for ENIs and pods, as desired state reconciled through the
netlink adapter: every function computes what should exist, removes what
should not, adds what is missing. Running one twice changes nothing.

Layout (the VPC CNI's, docs/agent.md "Host layout"):

* secondary ENI with device index ``d``: link found by MAC, MTU, up, its
  primary address with the subnet's length (the kernel's connected route in
  main is removed), table ``d+1`` = link route to the gateway + default via it,
  rule ``from <ENI primary>/32 lookup d+1`` (priority 1536);
* pod: veth pair (host end ``eni<hash>``), address /32 in the pod, route to
  169.254.1.1 on the link + default via it, a permanent neighbour entry for
  169.254.1.1 = host end's MAC; on the host a /32 route to the pod via the host
  end, rules ``to <pod> lookup main`` (512) and ``from <pod> lookup <ENI
  table>`` (1536; none for the primary ENI, whose pods use main).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import ipaddress
import logging
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from node_agent.netlink import (
    MAIN_TABLE,
    RT_SCOPE_LINK,
    Link,
    Netlink,
    NetlinkFailure,
    NetlinkNotFound,
    Route,
    Rule,
    netns_path,
)
from node_agent.records import EniInfo

log = logging.getLogger("warmpool.agent.hostnet")

GATEWAY = "169.254.1.1"
TO_POD_PRIORITY = 512
FROM_POD_PRIORITY = 1536
ENI_RULE_PRIORITY = 1536


NS_GET_NSTYPE = 0xB703
"""ioctl on a namespace file: its type (``linux/nsfs.h``, Linux ≥ 4.11)."""
CLONE_NEWNET = 0x40000000
IFNAMSIZ = 16


class PodRefused(ValueError):
    """A pod set-up refused before anything was changed: its namespace or interface
    name would make the agent touch something that is not the pod's."""


def ifname_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Linux interface name (the kernel's ``dev_valid_name``), or None."""
    if not name:
        return "the interface name is empty"
    if len(name.encode("utf-8", "surrogatepass")) >= IFNAMSIZ:
        return f"interface name {name!r} is longer than {IFNAMSIZ - 1} bytes"
    if name in (".", ".."):
        return f"interface name {name!r} is not allowed"
    if any(c in "/:\x00" or c.isspace() for c in name):
        return f"interface name {name!r} contains '/', ':', NUL or whitespace"
    return None


def _ns_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def netns_problem(netns: str, node_netns: str = "") -> str | None:
    """Why a pod must not be wired into ``netns``, or None: it does not exist, is not a
    network namespace, or is the agent's own, the host's (PID 1's) or the node's
    namespace (``node_netns``). Namespaces are compared by device and inode."""
    path = netns_path(netns)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"network namespace {netns}: {exc.strerror}"
    try:
        st = os.fstat(fd)
        try:
            kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
        except OSError as exc:
            if exc.errno in (errno.ENOTTY, errno.EINVAL):
                return f"{netns} is not a namespace"
            return f"network namespace {netns}: {exc.strerror}"
    finally:
        os.close(fd)
    return netns_refusal(netns, kind, (st.st_dev, st.st_ino), node_netns, _ns_id)


def netns_refusal(
    netns: str, kind: int, target: tuple[int, int], node_netns: str, ns_id: Callable[[str], tuple[int, int] | None]
) -> str | None:
    """The rule of :func:`netns_problem` once the namespace file is open: ``kind`` its
    namespace type, ``target`` its (device, inode); ``ns_id`` gives a path's
    (device, inode), None if it cannot be read. Pure (the simulation reuses it
    with its own model of the namespaces)."""
    if kind != CLONE_NEWNET:
        return f"{netns} is not a network namespace"
    own = [("/proc/self/ns/net", "the agent's own"), ("/proc/1/ns/net", "the host's (PID 1)")]
    if node_netns:
        own.append((netns_path(node_netns), "the node's"))
    for p, what in own:
        if ns_id(p) == target:
            return f"{netns} is {what} network namespace, not a pod's"
    return None


def host_veth_name(container_id: str, ifname: str, prefix: str = "eni") -> str:
    """Stable per (container, interface), at most 15 characters (IFNAMSIZ − 1)."""
    digest = hashlib.sha1(f"{container_id}.{ifname}".encode()).hexdigest()
    return f"{prefix}{digest}"[:15]


VETH_DIGEST_MIN = 8
"""The fewest hex digits a host veth name read under *any* prefix must end with
(:func:`veths_of`, :func:`veth_shaped`): a prefix of up to 7 characters. Fewer would match
names by chance (one digit: one name in 16)."""
_HEX = frozenset("0123456789abcdef")


def veth_shaped(name: str) -> bool:
    """``name`` is as :func:`host_veth_name` makes them under some prefix of up to 7 characters:
    15 characters, the last :data:`VETH_DIGEST_MIN` hex digits (Docker's ``veth`` + 7 digits,
    Cilium's ``cilium_host`` are not; another CNI's ``cali``/``lxc`` + digest names are)."""
    return len(name) == IFNAMSIZ - 1 and set(name[-VETH_DIGEST_MIN:]) <= _HEX


def veths_of(container_id: str, ifname: str, names: Collection[str], prefix: str) -> set[str]:
    """The names among ``names`` that are the attachment's host veth: under ``prefix``, or under
    any other prefix of up to 7 characters (the setting changed across a restart)."""
    digest = host_veth_name(container_id, ifname, "")
    mine = host_veth_name(container_id, ifname, prefix)
    return {
        n
        for n in names
        if n == mine
        or (len(n) == IFNAMSIZ - 1 and any(n[k:] == digest[: IFNAMSIZ - 1 - k] for k in range(1, VETH_DIGEST_MIN)))
    }


def veth_prefix_of(name: str, container_id: str, ifname: str) -> str | None:
    """The prefix (up to 7 characters) under which ``name`` is the attachment's host veth
    (``host_veth_name(container_id, ifname, prefix) == name``); None when it is not the
    attachment's under any such prefix (:func:`veths_of`)."""
    digest = host_veth_name(container_id, ifname, "")
    if len(name) != IFNAMSIZ - 1:
        return None
    for k in range(1, VETH_DIGEST_MIN):
        if name[k:] == digest[: IFNAMSIZ - 1 - k]:
            return name[:k]
    return None


class EniNetworking:
    """The controller's :class:`~node_agent.controller.HostNetwork` port, over netlink."""

    def __init__(self, netns: str = "") -> None:
        self.netns = netns

    def setup_eni(self, eni: EniInfo, mtu: int, pods: Collection[str] = ()) -> None:
        with Netlink.open(self.netns) as nl:
            setup_eni(nl, eni, mtu, pods)

    def teardown_eni(self, eni: EniInfo) -> None:
        with Netlink.open(self.netns) as nl:
            teardown_eni(nl, eni)


def eni_routes(eni: EniInfo, oif: int) -> list[Route]:
    gw = eni.gateway
    return [
        Route(dst=f"{gw}/32", table=eni.route_table, oif=oif, scope=RT_SCOPE_LINK),
        Route(dst="default", table=eni.route_table, oif=oif, gateway=gw),
    ]


def eni_rule(eni: EniInfo) -> Rule:
    return Rule(priority=ENI_RULE_PRIORITY, table=eni.route_table, src=f"{eni.primary_ip}/32")


def setup_eni(nl: Netlink, eni: EniInfo, mtu: int, pods: Collection[str] = ()) -> int:
    """Set up a secondary ENI; ``LookupError`` if its link is not visible yet. Returns changes made.

    ``pods``: the addresses of this ENI that pods hold (the datastore's word). A pod's
    ``from <ip> lookup <table>`` rule (:func:`pod_rules`) naming another table is moved to this
    ENI's (:func:`move_pod_rules`): an agent that numbered tables otherwise wired it so (before
    4d7be29, device ``d`` of every card used table ``d + 1``, so a pod of card 1 device 1 left by
    card 0 device 1's link; review of the multi-card change, F3)."""
    link = nl.link_by_mac(eni.mac)
    if link is None:
        raise NetlinkNotFound(2, f"no link with MAC {eni.mac} for {eni.eni_id}")
    changes = 0
    if link.mtu != mtu or not link.up:
        nl.link_set(link.index, mtu=mtu, up=True)
        changes += 1
    net = ipaddress.IPv4Network(eni.subnet_cidr, strict=False)
    changes += nl.ensure_addrs(link.index, [f"{eni.primary_ip}/{net.prefixlen}"])
    # The kernel's connected route would send the subnet out of this ENI from main.
    for r in nl.routes(MAIN_TABLE):
        if r.oif == link.index and r.dst == str(net):
            changes += nl.route_absent(r)
    changes += nl.ensure_routes(eni.route_table, eni_routes(eni, link.index))
    rule = eni_rule(eni)
    for have in nl.rules():
        if have.src == rule.src and have != rule:
            changes += nl.rule_absent(have)
    changes += nl.ensure_rule(rule)
    changes += move_pod_rules(nl, eni, pods)
    return changes


def move_pod_rules(nl: Netlink, eni: EniInfo, pods: Collection[str]) -> int:
    """Point the ``from <ip>`` rule (priority :data:`FROM_POD_PRIORITY`) of each pod address in
    ``pods`` at ``eni``'s table, where one names another table. Only existing rules move: a pod
    with none is not rewired here (its ADD or CHECK does that), and nothing else is touched (the
    ``to <ip>`` rule names main whatever the ENI). Returns changes made."""
    if eni.primary or not pods:
        return 0
    table = eni.route_table
    wanted = {f"{ip}/32" for ip in pods}
    changes = 0
    for have in nl.rules():
        if have.priority != FROM_POD_PRIORITY or have.src not in wanted or have.dst or have.fwmark:
            continue
        if have.table == table:
            continue
        # the new rule before the old one goes: the pod's packets always meet one of them
        changes += nl.ensure_rule(Rule(priority=FROM_POD_PRIORITY, table=table, src=have.src))
        changes += nl.rule_absent(have)
    return changes


def teardown_eni(nl: Netlink, eni: EniInfo) -> int:
    """Undo :func:`setup_eni` (the link itself is EC2's to remove). Returns changes made."""
    changes = nl.rule_absent(eni_rule(eni))
    changes += nl.ensure_routes(eni.route_table, [])
    link = nl.link_by_mac(eni.mac)
    if link is not None:
        changes += nl.ensure_addrs(link.index, [])
        if link.up:
            nl.link_set(link.index, up=False)
            changes += 1
    return changes


@dataclass(frozen=True)
class PodNet:
    host_veth: str
    host_mac: str
    pod_mac: str
    pod_ifindex: int


def pod_rules(ip: str, table: int) -> list[Rule]:
    rules = [Rule(priority=TO_POD_PRIORITY, table=MAIN_TABLE, dst=f"{ip}/32")]
    if table != MAIN_TABLE:
        rules.append(Rule(priority=FROM_POD_PRIORITY, table=table, src=f"{ip}/32"))
    return rules


@dataclass(frozen=True)
class SetupLeft:
    """What a pod set-up that raised leaves of its attachment, set on the exception it raised
    (:func:`setup_left`), so that the failed ADD undoes only what it made."""

    made_pair: bool
    """This set-up made the attachment's veth pair (none was there, or only a host end with no
    peer in the pod). False: the pair was there before (an earlier ADD's, whose pod may run on it)
    or the set-up failed before it looked."""
    addressed: bool
    """The set-up reached the pod's interface's addresses: it may carry the new address (and
    no longer the one it had), and the host may route the new address to it."""


SETUP_LEFT = "pod_setup_left"
"""The attribute of an exception raised by a pod set-up that says what it left (:class:`SetupLeft`)."""


def setup_left(exc: BaseException) -> SetupLeft | None:
    """What the pod set-up that raised ``exc`` left; None when it does not say."""
    left = getattr(exc, SETUP_LEFT, None)
    return left if isinstance(left, SetupLeft) else None


def note_setup_left(exc: BaseException, made_pair: bool, addressed: bool) -> None:
    """Say on ``exc`` what the set-up that raised it left (kept when a deeper set-up said it)."""
    if setup_left(exc) is None:
        setattr(exc, SETUP_LEFT, SetupLeft(made_pair, addressed))


def setup_pod(
    host: Netlink,
    pod_netns: str,
    ifname: str,
    container_id: str,
    ip: str,
    table: int,
    mtu: int,
    veth_prefix: str = "eni",
) -> PodNet:
    """Wire a pod to the host (see the module docstring). Safe to repeat. An exception it
    raises says what it left (:func:`setup_left`). An interface ``ifname`` in the pod that is not
    the peer of this prefix's veth of the attachment is refused, untouched (a running pod's, after
    the veth prefix changed: review 27, M1), unless it is the peer of the attachment's veth under
    another prefix as an ADD cut before the pod's address left it
    (:func:`cut_pair_of_another_prefix`): that pair is removed and made again under this prefix."""
    reached: list[str] = []
    try:
        return _setup_pod(host, pod_netns, ifname, container_id, ip, table, mtu, veth_prefix, reached)
    except BaseException as exc:
        note_setup_left(exc, made_pair="made" in reached, addressed="addressed" in reached)
        raise


def _setup_pod(
    host: Netlink,
    pod_netns: str,
    ifname: str,
    container_id: str,
    ip: str,
    table: int,
    mtu: int,
    veth_prefix: str,
    reached: list[str],
) -> PodNet:
    name = host_veth_name(container_id, ifname, veth_prefix)
    with Netlink.open(pod_netns) as pod:
        hl = host.link_by_name(name)
        pl = pod.link_by_name(ifname)
        # Only this attachment's own veth may ever be deleted: anything else of that name is refused,
        # untouched, and a pair of another prefix only as a cut ADD left it (cut_pair_of_another_prefix).
        if hl is not None and hl.kind != "veth":
            raise PodRefused(f"host interface {name} exists and is not a veth: not this pod's, left alone")
        if pl is not None and not _paired(hl, pl):
            cut = cut_pair_of_another_prefix(host, pod, pl, container_id, ifname)
            if cut is None:
                raise PodRefused(
                    f"interface {ifname} already exists in {pod_netns} and is not this pod's veth "
                    f"({pl.kind or 'no kind'}): left alone"
                )
            # The pair an ADD of this attachment cut before the pod's address left under an earlier
            # prefix (no pod ever ran on it): removed, its peer with it, and made again below.
            log.warning(
                "pod %s %s: veth %s (another prefix's) carries nothing of a wired pod: removed, made again as %s",
                container_id[:12],
                ifname,
                cut.name,
                name,
            )
            try:
                host.link_del(cut.index)
            except NetlinkNotFound:
                pass
            pl = pod.link_by_name(ifname)
            if pl is not None:
                raise NetlinkFailure(errno.EEXIST, f"{ifname} in {pod_netns}: there again once {cut.name} went")
        if hl is None or pl is None:
            # Half-made (or not made): our host end (if any) goes, then both are made again.
            if hl is not None:
                host.link_absent(name)
            reached.append("made")  # before the call: one that fails half-way may have made it
            host.veth_add(name, ifname, pod_netns, mtu)
            hl = host.link_by_name(name)
            pl = pod.link_by_name(ifname)
            if hl is None or pl is None:
                raise NetlinkNotFound(2, f"veth {name}/{ifname} vanished after creation")
        if hl.mtu != mtu or not hl.up:
            host.link_set(hl.index, mtu=mtu, up=True)
        lo = pod.link_by_name("lo")
        if lo is not None and not lo.up:
            pod.link_set(lo.index, up=True)
        if pl.mtu != mtu or not pl.up:
            pod.link_set(pl.index, mtu=mtu, up=True)
        reached.append("addressed")
        pod.ensure_addrs(pl.index, [f"{ip}/32"])
        pod.ensure_routes(
            MAIN_TABLE,
            [
                Route(dst=f"{GATEWAY}/32", table=MAIN_TABLE, oif=pl.index, scope=RT_SCOPE_LINK),
                Route(dst="default", table=MAIN_TABLE, oif=pl.index, gateway=GATEWAY),
            ],
            only_oif=pl.index,
        )
        neigh = pod.neighbours(pl.index).get(GATEWAY)
        if neigh is None or neigh[0] != hl.mac or neigh[1] != 0x80:
            pod.neigh_replace(pl.index, GATEWAY, hl.mac)
        host.ensure_routes(
            MAIN_TABLE,
            [Route(dst=f"{ip}/32", table=MAIN_TABLE, oif=hl.index, scope=RT_SCOPE_LINK)],
            only_oif=hl.index,
        )
        _ensure_pod_rules(host, ip, table)
        return PodNet(host_veth=name, host_mac=hl.mac, pod_mac=pl.mac, pod_ifindex=pl.index)


def pod_addresses(
    host: Netlink,
    pod_netns: str,
    ifname: str,
    container_id: str,
    veth_prefix: str = "eni",
    host_links: Mapping[str, Link] | None = None,
) -> list[str] | None:
    """The IPv4 addresses (without their length) the pod's ``ifname`` carries when it is the peer
    of the attachment's host veth (``host_veth_name`` under ``veth_prefix``); None when there is
    no such pair. Reads only. ``host_links``: the host's links by name, dumped once by a caller
    reading many pods (else each call dumps them)."""
    name = host_veth_name(container_id, ifname, veth_prefix)
    hl = host_links.get(name) if host_links is not None else host.link_by_name(name)
    if hl is None or hl.kind != "veth":
        return None
    with Netlink.open(pod_netns) as pod:
        pl = pod.link_by_name(ifname)
        if pl is None or not _paired(hl, pl):
            return None
        return sorted(cidr.split("/")[0] for cidr in pod.addrs(pl.index))


def veth_peers_carried(host: Netlink, veths: Collection[str], namespaces: Collection[str]) -> dict[str, list[str]]:
    """What the peer of each host veth named in ``veths`` carries (its IPv4 addresses, without
    their length), the peer looked for in each namespace of ``namespaces`` (paths): a link there
    that is a veth paired with the host veth (:func:`_paired`, the indices both ways, as
    :func:`pod_addresses` knows a pod's pair). A veth whose peer none of them holds is left out
    (cannot tell); a namespace gone before it is opened is skipped. Every pairing found is read
    (more readings, never one in place of another). Reads only: one link dump of the host, one
    link dump of each namespace, one address dump of each peer found (review 31, A2: a recovered
    holder names a veth, not its pod's namespace)."""
    wanted = {link.index: link for link in host.links() if link.name in veths and link.kind == "veth"}
    found: dict[str, set[str]] = {}
    if not wanted:
        return {}
    for path in namespaces:
        try:
            pod = Netlink.open(path)
        except NetlinkNotFound:
            continue  # gone meanwhile
        with pod:
            for pl in pod.links():
                hl = wanted.get(pl.peer) if pl.peer is not None else None
                if hl is not None and _paired(hl, pl):
                    found.setdefault(hl.name, set()).update(cidr.split("/")[0] for cidr in pod.addrs(pl.index))
    return {name: sorted(ips) for name, ips in found.items()}


def cut_pair_of_another_prefix(host: Netlink, pod: Netlink, pl: Link, container_id: str, ifname: str) -> Link | None:
    """The host end of the veth pair whose peer is the pod's interface ``pl`` (``ifname`` in the
    pod's namespace) when that pair is as an ADD of this attachment cut before the pod's address
    left it under any veth prefix (the agent killed in the set-up; ``WARMPOOL_VETH_PREFIX``
    changed across the restart); None otherwise. Reads only.

    All of it must hold: the host end is named after this attachment (:func:`veth_prefix_of`) and
    is ``pl``'s peer and ``pl`` its (:func:`_paired`), neither enslaved to another device; ``pl``
    carries no IPv4 address, has no IPv4 neighbour entry and no route in the pod's main table; the
    host has no route in main through the host end. A set-up that got past the pair's making puts,
    in this order, the address, the pod's routes and gateway neighbour, the host's ``/32`` route
    (:func:`setup_pod`); an ADD answered did all of them, and a pod runs only on an answered ADD.
    What it assumes: nothing but the agent removes them all from a running pod's pair (docs/safety.md,
    "A cut ADD's pair of an earlier prefix")."""
    if pl.kind != "veth" or pl.peer is None or pl.master is not None:
        return None
    hl = next((link for link in host.links() if link.index == pl.peer), None)
    if hl is None or hl.master is not None or not _paired(hl, pl):
        return None
    if veth_prefix_of(hl.name, container_id, ifname) is None:
        return None
    if pod.addrs(pl.index) or pod.neighbours(pl.index) or any(r.oif == pl.index for r in pod.routes(MAIN_TABLE)):
        return None
    if any(r.oif == hl.index for r in host.routes(MAIN_TABLE)):
        return None
    return hl


def _paired(hl: Link | None, pl: Link) -> bool:
    """``pl`` (in the pod) is the peer of our host end ``hl``."""
    return hl is not None and hl.kind == "veth" and pl.kind == "veth" and pl.peer == hl.index and hl.peer == pl.index


def _ensure_pod_rules(host: Netlink, ip: str, table: int) -> None:
    wanted = pod_rules(ip, table)
    cidr = f"{ip}/32"
    for have in host.rules():
        ours = (have.src == cidr or have.dst == cidr) and have.priority in (TO_POD_PRIORITY, FROM_POD_PRIORITY)
        if ours and have not in wanted:
            host.rule_absent(have)
    for r in wanted:
        host.ensure_rule(r)


def teardown_pod(host: Netlink, container_id: str, ifname: str, ip: str | None, veth_prefix: str = "eni") -> None:
    """Remove the host side of a pod (the veth goes with its peer). Safe to repeat.
    A host interface of that name that is not a veth is not ours and is left alone. The
    attachment's veth under another prefix (of up to 7 characters: the setting changed across a
    restart, :func:`veths_of`) goes too: left, a sandbox its runtime forgot kept a namespace that
    carried the address the agent released (the simulation's seed 6659)."""
    # The address's rules and route first, the pair last: a failure (or the agent killed) between
    # them leaves the pair, which the runtime's retried DEL reads again to name the address (review
    # 34, N1); the other way, a rule outlived its pair, a trace of a pod gone.
    if ip:
        cidr = f"{ip}/32"
        for have in host.rules():
            if (have.src == cidr or have.dst == cidr) and have.priority in (TO_POD_PRIORITY, FROM_POD_PRIORITY):
                host.rule_absent(have)
        for r in host.routes(MAIN_TABLE):
            if r.dst == cidr:
                host.route_absent(r)
    name = host_veth_name(container_id, ifname, veth_prefix)
    hl = host.link_by_name(name)
    if hl is not None and hl.kind == "veth":
        host.link_absent(name)
    others = veths_of(container_id, ifname, {link.name for link in host.links() if link.kind == "veth"}, veth_prefix)
    for other in sorted(others - {name}):
        host.link_absent(other)


@dataclass(frozen=True)
class HostWiring:
    """Pods the agent wired, as the node namespace shows them (read after a lost checkpoint)."""

    pods: dict[str, str]
    """Pod address -> host veth name: a ``/32`` route in main via a link named ``<veth prefix>…``."""
    stale: list[str]
    """Addresses with a pod rule (``to <ip> lookup main``, priority 512) but no such route: the veth is gone
    (its pod namespace was deleted, or an ADD/DEL stopped half-way), so no pod can use them."""
    routed: frozenset[str] = frozenset()
    """Every address with a ``/32`` route in main via any link, whatever its name (a veth of
    another prefix: the setting changed across a restart)."""
    links: frozenset[str] = frozenset()
    """The names of every link in the node's namespace."""
    routed_via: dict[str, str] = field(default_factory=dict)
    """Each address of ``routed`` -> the link its ``/32`` route goes through."""
    veths: frozenset[str] = frozenset()
    """The names of the links of kind ``veth`` (a pod's host side, whatever its prefix or CNI;
    not the ENIs' devices, through which the OS routes its gateway's and resolver's ``/32``)."""

    def link_names(self) -> set[str]:
        """Every link name the read shows: its links, and those its routes go through."""
        return {*self.links, *self.pods.values(), *self.routed_via.values()}


def wired_pods(host: Netlink, veth_prefix: str = "eni") -> HostWiring:
    """Read the pods' host wiring: ``ip -4 route show table main`` joined with ``ip link`` by
    device, plus ``ip -4 rule`` for the pod rules. Reads only, changes nothing."""
    links = host.links()
    names = {link.index: link.name for link in links}
    pods: dict[str, str] = {}
    routed: dict[str, str] = {}
    for r in host.routes(MAIN_TABLE):
        name = names.get(r.oif) if r.oif is not None else None
        if name and r.dst.endswith("/32"):
            routed[r.dst.removesuffix("/32")] = name
        if name and name.startswith(veth_prefix) and r.dst.endswith("/32"):
            pods[r.dst.removesuffix("/32")] = name
    # Every wired pod has `to <ip>/32 lookup main` at 512 (the 1536 `from` rules are shared with ENIs).
    ruled = {
        rule.dst.removesuffix("/32")
        for rule in host.rules()
        if rule.priority == TO_POD_PRIORITY and rule.dst and rule.dst.endswith("/32")
    }
    return HostWiring(
        pods=pods,
        stale=sorted(ruled - set(pods)),
        routed=frozenset(routed),
        links=frozenset(names.values()),
        routed_via=routed,
        veths=frozenset(link.name for link in links if link.kind == "veth" and link.name),
    )


def check_pod(
    host: Netlink, pod_netns: str, ifname: str, container_id: str, ip: str, table: int, veth_prefix: str = "eni"
) -> list[str]:
    """What is missing for the pod (empty = all there): CNI CHECK."""
    problems = []
    name = host_veth_name(container_id, ifname, veth_prefix)
    hl = host.link_by_name(name)
    if hl is None:
        problems.append(f"host veth {name} missing")
    try:
        with Netlink.open(pod_netns) as pod:
            pl = pod.link_by_name(ifname)
            if pl is None:
                problems.append(f"{ifname} missing in {pod_netns}")
            else:
                if f"{ip}/32" not in pod.addrs(pl.index):
                    problems.append(f"{ip}/32 not on {ifname}")
                if not any(r.dst == "default" and r.gateway == GATEWAY for r in pod.routes(MAIN_TABLE)):
                    problems.append("default route via 169.254.1.1 missing")
    except NetlinkNotFound:
        problems.append(f"netns {pod_netns} missing")
    rules = host.rules()
    for r in pod_rules(ip, table):
        if r not in rules:
            problems.append(f"rule {r} missing")
    return problems
