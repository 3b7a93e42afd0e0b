"""Review 13, W1-FP2: since 46c21c9 ``node_agent/agent.py::wiring_disagreements`` flags *any* ``/32``
route through a veth, in any subnet, whose address the restored copy does not hold. Other CNIs'
veths route ``/32`` in main too: a Multus secondary network of the ``ptp`` plugin (its host-local
IPAM range, e.g. 192.168.50.0/24: ``192.168.50.7 dev veth… scope link``), Calico's ``cali…`` on a
node that runs both, the VPC CNI's pods on a node moved in place. The copy never holds those (only a
rebuild adds a recovered holder, named after that veth, for an address no ENI has), so every
restart of the agent after such a pod came finds its intact, valid checkpoint "disagreeing with the
host's pod wiring": refused (kept aside as damaged, logged as an error, counted) and rebuilt, every
free address offered as of unknown origin and replaced. Before 46c21c9 (review 11's W1) only
addresses inside the node's subnets counted. The twelfth review's W1-FP, for another CNI's veth."""

from __future__ import annotations

from pathlib import Path

from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import WiredPods
from tests.helpers.first_start import Node, pod_on_fresh_address

PTP_VETH = "veth5c0d1e2f"  # the ptp plugin's host side (kind veth)
PTP_ADDR = "192.168.50.7"  # its host-local range: no ENI's, no VPC's


class MultusPtp(WiredPods):
    """``wired_pods``'s read: this agent's pods, plus (once ``secondary``) pod1's Multus ``net1``
    from the ptp plugin: a veth with a /32 route in main."""

    def __init__(self) -> None:
        super().__init__()
        self.secondary = False

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}
        routed = {**veths, **({PTP_ADDR: PTP_VETH} if self.secondary else {})}
        return HostWiring(
            pods=veths,
            stale=[],
            routed=frozenset(routed),
            links=frozenset({"ens5", *routed.values()}),
            routed_via=routed,
            veths=frozenset(routed.values()),
        )


def test_an_intact_checkpoint_is_restored_on_a_node_with_a_multus_ptp_pod(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = MultusPtp()
    try:
        pod_on_fresh_address(n)
        host.secondary = True  # pod1's second network (ptp) wired by Multus after warmpool's ADD
        n.step(30)
        n.stop()  # an ordinary restart: the checkpoint is intact and holds every warmpool pod
        agent = n.start()
        rebuilt = agent.counters["checkpoint_rebuilds_damaged"]
        asides = sorted(p.name for p in n.state.iterdir() if ".corrupt-" in p.name)
        assert rebuilt == 0 and not asides, (
            f"an intact checkpoint was refused because another CNI's veth {PTP_VETH} routes {PTP_ADDR}/32"
            f" (no ENI's address): the start rebuilds (kept aside: {asides})"
        )
    finally:
        n.stop()
