"""Review 13: ``node_agent/hostnet.py::wired_pods``'s ``HostWiring.veths`` (46c21c9) read from a real
kernel. Nothing else exercises it: the real-namespace tests (``test_agent_rebuild.py``) wire only
pods of the agent's prefix, which ``_veths`` counts whatever their kind, and their fake ENIs
(``tests.helpers.fakenode.add_fake_eni``) are veths themselves. A veth whose peer was moved into
another namespace (every pod's) reports kind ``veth``; a bridge, a macvlan and a tap do not, and
their ``/32`` routes are read in ``routed_via`` only (review 13, K1: the rebuild no longer holds them)."""

from __future__ import annotations

import pytest

from node_agent.netlink import Netlink
from tests.helpers.fakenode import netns, netns_available, sh

pytestmark = pytest.mark.netns

_why = netns_available()
if _why:
    pytest.skip(f"network namespaces unavailable: {_why}", allow_module_level=True)


def test_wired_pods_reads_the_kind_of_each_link_a_pod_route_goes_through() -> None:
    from node_agent.hostnet import wired_pods

    with netns("wpk") as node, netns("wpkp") as pod:
        sh("ip", "-n", node, "link", "add", "wpa1b2c3", "type", "veth", "peer", "name", "eth0x")
        sh("ip", "-n", node, "link", "set", "eth0x", "netns", pod)  # the pod's end moves away
        sh("ip", "-n", node, "link", "add", "br13", "type", "bridge")
        sh("ip", "-n", node, "link", "add", "mv13", "link", "wpa1b2c3", "type", "macvlan", "mode", "bridge")
        sh("ip", "-n", node, "tuntap", "add", "tap13", "mode", "tap")
        routes = {"10.9.0.5": "wpa1b2c3", "10.9.0.6": "br13", "10.9.0.7": "mv13", "10.9.0.8": "tap13"}
        for dev in routes.values():
            sh("ip", "-n", node, "link", "set", dev, "up")
        for ip, dev in routes.items():
            sh("ip", "-n", node, "route", "add", f"{ip}/32", "dev", dev)
        with Netlink.open(node) as nl:
            w = wired_pods(nl, "eni")
        assert w.routed_via == routes
        assert w.veths == frozenset({"wpa1b2c3"}), w.veths
        assert w.pods == {}
