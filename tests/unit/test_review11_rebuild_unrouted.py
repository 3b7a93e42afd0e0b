"""Review 11, W3: the rebuild after a lost (or damaged) checkpoint holds only addresses with a
``/32`` route (``node_agent/agent.py::_routed_pods``; review 10's A2 widened it from this prefix's
veths to any link). The seventh review's F1 established that a route alone can go while its pod
runs (its veth set down, a network manager's flush of main), and ``unwired_pods`` has since kept a
restored pod while *any* of its wiring is left: its ``/32`` route, its pod rule
(``to <ip>/32 lookup main`` at 512), or a host veth of its name. The rebuild reads the same wiring
and drops the other two: a pod whose route went keeps its rule (``HostWiring.stale``) and its veth
(``HostWiring.links``), the rebuild notes "pod rule but no route to a pod (its veth is gone): not
held" without looking for the veth, takes the "empty" start when no other route is left, and the
pod's address is offered as of unknown origin, which the allocator unassigns while the pod runs."""

from __future__ import annotations

from pathlib import Path

from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import WiredPods
from tests.helpers.first_start import Node, pod_on_fresh_address


class RouteFlushed(WiredPods):
    """The host's wiring as ``node_agent.hostnet.wired_pods`` reads it; once ``flushed``, the
    pods' ``/32`` routes are gone (their veths and rules are not)."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed = False

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}
        if not self.flushed:
            return HostWiring(pods=veths, stale=[], routed=frozenset(veths), links=frozenset(veths.values()))
        return HostWiring(pods={}, stale=sorted(veths), routed=frozenset(), links=frozenset(veths.values()))


def _offered(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {ip for o in report.release for ip in o.ips}


def test_a_rebuild_never_offers_the_address_of_a_pod_whose_route_alone_is_gone(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    wiring = RouteFlushed()
    n.pods = wiring
    try:
        got = pod_on_fresh_address(n)
        # the state directory is lost; the pod runs on, its route flushed (veth and rule left)
        n.lose_checkpoint()
        wiring.flushed = True
        n.start()
        offered: set[str] = set()
        for _ in range(5):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
        assert got not in offered, (
            f"{got}, whose pod's veth and pod rule are on the host (its route alone gone), offered back"
            " as of unknown origin after the rebuild (the allocator unassigns it while the pod runs)"
        )
    finally:
        n.stop()
