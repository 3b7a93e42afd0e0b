"""Review 12, W1-FP: the eleventh review's W1 made ``node_agent/agent.py::wiring_disagreements`` flag
*any* address inside the node's ENIs' subnet CIDRs that has a ``/32`` route in main through any
link and is held by nobody. A normal node has such routes that are no pod's: systemd-networkd's
DHCP client (Amazon Linux 2023 through amazon-ec2-net-utils, Ubuntu's netplan; ``RoutesToDNS`` and
the on-link gateway route are on by default) installs, in main, a ``/32`` to the subnet's router
(``<subnet>.1 dev ens5 proto dhcp scope link``) and to the VPC resolver (``<vpc>.2``, inside the
node's subnet when that subnet starts the VPC's CIDR). Neither is ever an ENI address (EC2 reserves
them) nor held. A restart of the agent on such a node whose checkpoint does not already hold them
(by a rebuild's recovered holder named after the interface) finds its intact, valid checkpoint
"disagreeing with the host's pod wiring": it is refused (kept aside as damaged, counted and logged
as an error) and the start rebuilds. The rebuild then holds them for good, so this happens once
per such route."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import WiredPods
from tests.helpers.first_start import Node, pod_on_fresh_address

GATEWAY = "10.0.0.1"  # the router of PRIMARY's subnet (10.0.0.0/24)
RESOLVER = "10.0.0.2"  # the VPC resolver, inside the subnet that starts the VPC's CIDR


class DhcpHost(WiredPods):
    """The host's wiring as ``node_agent.hostnet.wired_pods`` reads it on an AL2023/Ubuntu node:
    the pods' veths, plus the DHCP client's ``/32`` routes through the primary interface."""

    def __init__(self) -> None:
        super().__init__()
        self.dhcp = True

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}
        routed = {**veths, **({GATEWAY: "ens5", RESOLVER: "ens5"} if self.dhcp else {})}
        return HostWiring(
            pods=veths,
            stale=[],
            routed=frozenset(routed),
            links=frozenset({"ens5", *veths.values()}),
            routed_via=routed,
        )


def test_an_intact_checkpoint_is_restored_on_a_node_whose_dhcp_client_routes_its_gateway(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = DhcpHost()
    # The checkpoint's first start did not see these routes (an agent from before review 10's A2,
    # whose first start took the "empty" way, upgraded now; or a route that came later: a new
    # ENI's DHCP gateway route, an operator's static route). Seen at its first start, the rebuild
    # holds them (recovered holder "ens5", kept for good) and later restores pass.
    host.dhcp = False
    try:
        pod_on_fresh_address(n)
        n.step(30)
        # an ordinary restart (an upgrade, a crash): the checkpoint is intact and agrees with the pods
        n.stop()
        host.dhcp = True
        agent = n.start()
        rebuilt = agent.counters["checkpoint_rebuilds_damaged"]
        asides = sorted(p.name for p in n.state.iterdir() if ".corrupt-" in p.name)
        assert rebuilt == 0 and not asides, (
            "an intact checkpoint was refused as disagreeing with the host's pod wiring because the"
            f" DHCP client routes {GATEWAY} and {RESOLVER} (/32, main, ens5): the start rebuilds"
            f" (kept aside: {asides})"
        )
    finally:
        n.stop()


@pytest.mark.xfail(
    strict=True,
    reason="left (cost, opt-in): the first-start ask needs no /32 route through any link (row 30, F3), and "
    "the OS's route to its gateway through the ENI's device is one; docs/safety.md, the twelfth review",
)
def test_a_first_start_on_a_node_whose_dhcp_client_routes_its_gateway_asks_to_adopt_its_launch_pool(
    tmp_path: Path,
) -> None:
    """Older than review 11 (the first-start check's ``not wiring.routed``, a hostile review's F3),
    the same routes: with ``WARMPOOL_ADOPT_LAUNCH_POOL=true`` an AL2023/Ubuntu node never asks."""
    n = Node(tmp_path)
    n.pods = DhcpHost()
    try:
        n.start()
        report = n.step()
        assert report is not None
        assert report.first_start is True, (
            f"no first-start ask: the DHCP client's /32 routes to {GATEWAY} and {RESOLVER} count as pods"
        )
    finally:
        n.stop()


def test_a_first_start_on_a_node_whose_dhcp_client_routes_its_gateway_is_no_rebuild(tmp_path: Path) -> None:
    """No checkpoint and no veth pod: the start is a first start ("empty"), not counted as a rebuild,
    though the OS routes its gateway and resolver (held, never attached: EC2 never assigns them)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = DhcpHost()
    try:
        agent = n.start()
        assert agent.counters["checkpoint_rebuilds_missing"] == 0
        assert agent.counters["checkpoint_rebuilds_damaged"] == 0
        assert {h.ip: h.holder for h in agent.ds.recovered_holders()} == {GATEWAY: "ens5", RESOLVER: "ens5"}
        assert n.step() is not None  # it reports as any first start
    finally:
        n.stop()
