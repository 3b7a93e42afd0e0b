"""The thirty-fourth review (of b1a9661), pinned as sound: the DEL's read of its pod's interface
(``node_agent.hostnet.pod_addresses``, through ``CniService._unrouted_carried``) takes an address
only from the peer of the attachment's own host veth. A DEL whose ``CNI_NETNS`` names another
pod's namespace (a runtime's wrong path, a path reused for a new sandbox) reads nothing there,
though pods' interfaces share one name and, each namespace numbering its own links, often one
index; nor does it read a namespace whose interface of that name is no veth, or a pod whose
interface was renamed. The host's index of a link is the node's alone, so the peer's index the
pod side names tells the pairs apart.

Not pinned (noted in the review): the pairing is by index alone (``IFLA_LINK``, without the
namespace id the kernel also reports), so a pod with ``CAP_NET_ADMIN`` could make a pair in its
own namespace whose indexes mimic another attachment's; that needs the other attachment's DEL to
carry this pod's namespace, which no runtime sends.
"""

from __future__ import annotations

from typing import Any

import pytest

from node_agent.hostnet import host_veth_name, pod_addresses
from node_agent.netlink import Link, Netlink

X, Y = "10.0.0.50", "10.0.0.51"


class FakeNs:
    """One namespace's links and their IPv4 addresses, as ``Netlink`` reads them."""

    def __init__(self, links: list[Link], addrs: dict[int, list[str]] | None = None) -> None:
        self._links = links
        self._addrs = addrs or {}

    def links(self) -> list[Link]:
        return list(self._links)

    def link_by_name(self, name: str) -> Link | None:
        return next((link for link in self._links if link.name == name), None)

    def addrs(self, index: int) -> list[str]:
        return list(self._addrs.get(index, []))

    def __enter__(self) -> FakeNs:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _veth(index: int, name: str, peer: int) -> Link:
    return Link(index=index, name=name, mac="02:00:00:00:00:01", mtu=9001, up=True, kind="veth", peer=peer)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The host with podA's and podB's veths (indexes 10 and 11), each pod's eth0 index 3 in its
    own namespace carrying its address (X, Y); ``Netlink.open`` of a namespace name gives it."""
    va, vb = host_veth_name("podA", "eth0"), host_veth_name("podB", "eth0")
    spaces: dict[str, Any] = {
        "host": FakeNs([_veth(10, va, 3), _veth(11, vb, 3)]),
        "nsA": FakeNs([_veth(3, "eth0", 10)], {3: [f"{X}/32"]}),
        "nsB": FakeNs([_veth(3, "eth0", 11)], {3: [f"{Y}/32"]}),
    }
    monkeypatch.setattr(Netlink, "open", lambda netns=None: spaces[netns])
    return spaces


def test_the_del_reads_its_own_pod_s_address(node: dict[str, Any]) -> None:
    assert pod_addresses(node["host"], "nsA", "eth0", "podA") == [X]
    assert pod_addresses(node["host"], "nsB", "eth0", "podB") == [Y]


def test_a_del_naming_another_pod_s_namespace_reads_nothing(node: dict[str, Any]) -> None:
    """podA's DEL carrying podB's namespace: podB's eth0 has podA's pod side's index (3) but names
    podB's host veth (11) as its peer: not podA's pair, no address (podB's rule stays)."""
    assert pod_addresses(node["host"], "nsB", "eth0", "podA") is None


def test_a_reused_namespace_path_or_a_renamed_interface_reads_nothing(node: dict[str, Any]) -> None:
    dummy = Link(index=3, name="eth0", mac="02:00:00:00:00:09", mtu=1500, up=True, kind="dummy", peer=None)
    node["nsNew"] = FakeNs([dummy], {3: [f"{Y}/32"]})  # podA's path now a new sandbox's namespace
    assert pod_addresses(node["host"], "nsNew", "eth0", "podA") is None
    node["nsA"] = FakeNs([_veth(3, "net9", 10)], {3: [f"{X}/32"]})  # podA renamed its eth0
    assert pod_addresses(node["host"], "nsA", "eth0", "podA") is None


def test_a_pod_whose_host_veth_went_is_read_as_nothing_in_any_namespace(node: dict[str, Any]) -> None:
    """The pair lives and dies together: podA's host veth gone, nothing is read, even from a
    namespace whose eth0 still names index 10 (a new link the host may number so later)."""
    node["host"] = FakeNs([_veth(11, host_veth_name("podB", "eth0"), 3)])
    assert pod_addresses(node["host"], "nsA", "eth0", "podA") is None
