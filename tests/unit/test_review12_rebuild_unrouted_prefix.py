"""Review 12, U1: the eleventh review's W3 (``node_agent/agent.py::_routed_pods``) holds the
addresses of pod rules without a route only "while a veth *of this agent's prefix* has no route".
Review 10's F2/A2 case is a veth prefix changed across the restart (``WARMPOOL_VETH_PREFIX`` or
``AWS_VPC_K8S_CNI_VETHPREFIX``): the running pods' veths then have the *old* prefix. If their
``/32`` routes are flushed too (review 7, F1: a network manager's flush of main; veths and pod rules
stay), the rebuild after a lost checkpoint sees no route, no veth of its prefix, only pod rules
(``HostWiring.stale``): nothing is held, the start takes the "empty" way (``not routed``) and the
pod's address is offered as of unknown origin (the allocator unassigns it; EC2 gives it to another
node while the pod runs) or handed to the next pod here. ``unwired_pods`` (the restore path) keeps
such a pod on its rule alone; the rebuild does not."""

from __future__ import annotations

from pathlib import Path

from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import WiredPods, cni_add
from tests.helpers.first_start import Node, pod_on_fresh_address


class PrefixedFlushed(WiredPods):
    """``node_agent.hostnet.wired_pods``'s read: veths keep the prefix they were made with
    (``made``), only the reader's prefix counts as ``pods``, every pod has its rule; once
    ``flushed`` the pods' ``/32`` routes are gone (veths and rules are not)."""

    def __init__(self) -> None:
        super().__init__()
        self.made = "wp"
        self.reader = "wp"
        self.flushed = False

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i, self.made) for (c, i), ip in self.wired.items()}
        routed = {} if self.flushed else dict(veths)
        pods = {ip: v for ip, v in routed.items() if v.startswith(self.reader)}
        return HostWiring(
            pods=pods,
            stale=sorted(set(veths) - set(pods)),
            routed=frozenset(routed),
            links=frozenset(veths.values()),
            routed_via=routed,
            veths=frozenset(veths.values()),  # every link here is a veth (``wired_pods`` reads the kind)
        )


def _offered(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {ip for o in report.release for ip in o.ips}


def test_a_rebuild_holds_a_pod_of_another_prefix_whose_route_alone_is_gone(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    wiring = PrefixedFlushed()
    n.pods = wiring
    try:
        got = pod_on_fresh_address(n, WARMPOOL_VETH_PREFIX="wp")
        # the state directory is lost, the agent comes back with the default prefix ("eni"), and
        # the pod runs on with its route flushed (its "wp…" veth and its pod rule left)
        n.lose_checkpoint()
        wiring.flushed = True
        wiring.reader = "eni"
        agent = n.start()
        offered: set[str] = set()
        others: list[str | None] = []
        for k in range(5):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
            others.append(cni_add(agent, f"new{k}"))
        assert got not in offered and got not in others, (
            f"{got}, whose pod's veth (prefix wp) and pod rule are on the host (its route alone gone),"
            f" {'offered back as of unknown origin' if got in offered else 'given to another pod'}"
            " after the rebuild"
        )
    finally:
        n.stop()
