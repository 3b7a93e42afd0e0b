"""Network namespaces in memory, for unit tests of ``node_agent.hostnet``'s pod set-up: the
node's namespace and pods' ones, each with its links, IPv4 addresses, main-table routes, rules
and neighbour entries, as the netlink adapter (``node_agent.netlink.Netlink``) reads and changes
them. What it keeps of the kernel: a veth pair is made with its peer in another namespace and
deleted with it, the routes, addresses and neighbours of a deleted link going with it
(``drivers/net/veth.c``); interface indexes are never reused. ``install`` makes
``node_agent.hostnet`` open these namespaces instead of the kernel's. Not the kernel: the
integration tier (``tests/integration/test_netlink_hostnet.py``) runs the same rules in real
namespaces."""

from __future__ import annotations

import errno
import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from node_agent import hostnet
from node_agent.netlink import Link, Netlink, NetlinkNotFound, Route, Rule


@dataclass
class Namespace:
    links: dict[int, Link] = field(default_factory=dict)
    addrs: dict[int, set[str]] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    neigh: dict[int, dict[str, tuple[str, int]]] = field(default_factory=dict)


class FakeKernel:
    """The namespaces by name (``""`` the node's); ``open`` as ``Netlink.open``."""

    def __init__(self) -> None:
        self.ns: dict[str, Namespace] = {"": Namespace()}
        self._index = itertools.count(2)
        self._mac = itertools.count(1)

    def namespace(self, name: str) -> Namespace:
        return self.ns.setdefault(name, Namespace())

    def open(self, netns: str | None = None) -> FakeNetlink:
        name = netns or ""
        if name not in self.ns:
            raise NetlinkNotFound(errno.ENOENT, f"netns {name}: no such file")
        return FakeNetlink(self, name)

    def add_link(self, ns: str, name: str, kind: str = "", peer: int | None = None) -> Link:
        link = Link(next(self._index), name, f"02:00:00:00:00:{next(self._mac):02x}", 1500, False, kind, peer)
        self.namespace(ns).links[link.index] = link
        return link

    def where(self, index: int) -> tuple[str, Link] | None:
        for name, ns in self.ns.items():
            if index in ns.links:
                return name, ns.links[index]
        return None

    def drop_link(self, index: int) -> None:
        found = self.where(index)
        if found is None:
            raise NetlinkNotFound(errno.ENODEV, f"link {index}: no such device")
        name, link = found
        ns = self.ns[name]
        del ns.links[index]
        ns.addrs.pop(index, None)
        ns.neigh.pop(index, None)
        ns.routes = [r for r in ns.routes if r.oif != index]
        if link.kind == "veth" and link.peer is not None and self.where(link.peer) is not None:
            self.drop_link(link.peer)  # the pair lives and dies together

    def set_master(self, ns: str, index: int, master: int) -> None:
        space = self.ns[ns]
        space.links[index] = replace(space.links[index], master=master)


class FakeNetlink(Netlink):
    """One namespace of a :class:`FakeKernel`, through the netlink adapter's methods."""

    def __init__(self, kernel: FakeKernel, name: str) -> None:
        self.kernel, self.netns = kernel, name
        self.ipr: Any = None

    @property
    def space(self) -> Namespace:
        return self.kernel.ns[self.netns]

    def close(self) -> None:
        pass

    def links(self) -> list[Link]:
        return list(self.space.links.values())

    def link_set(self, index: int, *, mtu: int | None = None, up: bool | None = None) -> None:
        link = self.space.links[index]
        self.space.links[index] = replace(link, mtu=link.mtu if mtu is None else mtu, up=link.up if up is None else up)

    def veth_add(self, name: str, peer: str, peer_netns: str, mtu: int) -> None:
        pod = self.kernel.namespace(peer_netns)
        if any(lk.name == peer for lk in pod.links.values()) or self.link_by_name(name) is not None:
            raise OSError(errno.EEXIST, f"veth add {name}: exists")
        host = self.kernel.add_link(self.netns, name, "veth")
        other = self.kernel.add_link(peer_netns, peer, "veth", host.index)
        self.space.links[host.index] = replace(host, peer=other.index, mtu=mtu)
        pod.links[other.index] = replace(other, mtu=mtu)

    def link_del(self, index: int) -> None:
        if index not in self.space.links:
            raise NetlinkNotFound(errno.ENODEV, f"link del {index}: no such device")
        self.kernel.drop_link(index)

    def addrs(self, index: int) -> list[str]:
        return sorted(self.space.addrs.get(index, set()))

    def addr_add(self, index: int, cidr: str) -> None:
        self.space.addrs.setdefault(index, set()).add(cidr)

    def addr_del(self, index: int, cidr: str) -> None:
        self.space.addrs.get(index, set()).discard(cidr)

    def routes(self, table: int) -> list[Route]:
        return [r for r in self.space.routes if r.table == table]

    def route_replace(self, r: Route) -> None:
        self.space.routes = [x for x in self.space.routes if (x.table, x.dst) != (r.table, r.dst)] + [r]

    def route_del(self, r: Route) -> None:
        if r not in self.space.routes:
            raise NetlinkNotFound(errno.ESRCH, f"route del {r.dst}: no such route")
        self.space.routes.remove(r)

    def rules(self) -> list[Rule]:
        return list(self.space.rules)

    def rule_add(self, r: Rule) -> None:
        self.space.rules.append(r)

    def rule_del(self, r: Rule) -> None:
        self.space.rules.remove(r)

    def neighbours(self, index: int) -> dict[str, tuple[str, int]]:
        return dict(self.space.neigh.get(index, {}))

    def neigh_replace(self, index: int, ip: str, lladdr: str) -> None:
        self.space.neigh.setdefault(index, {})[ip] = (lladdr, 0x80)


def install(monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    """A :class:`FakeKernel` that ``node_agent.hostnet`` opens namespaces in (its ``Netlink``)."""
    kernel = FakeKernel()
    monkeypatch.setattr(hostnet, "Netlink", kernel)
    return kernel
