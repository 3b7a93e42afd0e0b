"""Review 13, K1: since 46c21c9 the rebuild (``node_agent/agent.py::_routed_pods``) and the restore
check (``wiring_disagreements``) read a ``/32`` route as a pod only through a link netlink calls
``veth`` (``HostWiring.veths``). The first-start check still reads any link (``not wiring.routed``),
``unwired_pods`` keeps a restored pod routed through any link, and docs/agent.md ("A first start
asks the allocator") and the twelfth review's own note say "a pod of another prefix or another CNI
is a pod too" and "an ipvlan or bridge CNI's pod" must not pass. Such a pod's host side need not be
a veth: Cilium's netkit datapath (kind ``netkit``, routes ``<pod>/32 dev lxc…`` in main in ENI
mode), a ``tun``/``tap`` (VM runtimes), a macvlan/ipvlan link. After a lost checkpoint its address
is not held, the start takes the "empty" way (``not routed``) and offers it as of unknown origin:
the allocator unassigns it while the pod runs (review 10's A2 held it: "every ``/32`` route through
any link"). The first-start check's strictness then protects nothing: the address leaves the node
either way."""

from __future__ import annotations

from pathlib import Path

from node_agent.hostnet import HostWiring
from tests.helpers.agent_world import WiredPods
from tests.helpers.first_start import IPS, Node

POD = IPS[0]  # on the primary ENI, used by another CNI's pod through a netkit device
NETKIT = "lxc8c1e2f0a9b3d"


class NetkitPod(WiredPods):
    """``wired_pods``'s read: a pod of another CNI, its host side a netkit device (not a veth)."""

    def host_wiring(self) -> HostWiring:
        routed = {POD: NETKIT}
        return HostWiring(
            pods={},
            stale=[],
            routed=frozenset(routed),
            links=frozenset({"ens5", NETKIT}),
            routed_via=routed,
            veths=frozenset(),
        )


def _offered(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {ip for o in report.release for ip in o.ips}


def test_a_rebuild_holds_the_address_of_a_pod_routed_through_a_netkit_device(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = NetkitPod()
    try:
        n.start()  # no checkpoint: a lost state directory (or a move in place)
        offered: set[str] = set()
        for _ in range(4):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
        assert POD not in offered, (
            f"{POD}, routed (/32, main) to a running pod's netkit device {NETKIT}, offered back as of"
            " unknown origin after the rebuild (the allocator unassigns it while the pod runs)"
        )
    finally:
        n.stop()
