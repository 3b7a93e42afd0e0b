"""Review 18, K2: the lift (``node_agent.agent.lift_unfounded_holds``, bf0e084) lets go of a recovered
holder named after *any* link the host no longer shows, on the ground that "a veth pair's host side
and pod side live and die together" (``drivers/net/veth.c::veth_dellink``). The holders it lets go
are not all veths: ``_routed_pods`` names the holder of every ``/32`` route after the link the route
goes through, whatever its kind, on purpose since review 13's K1 (a pod whose host side is a netkit,
macvlan/ipvlan or tap device, "a pod of another CNI"). For a macvlan or ipvlan link the host's side
is not the pod's device: the pod's own macvlan (or ipvlan) device is a child of the ENI's device in
the pod's namespace, and the host's shim that the ``/32`` route goes through is a separate device,
which can be deleted (or deleted and made again under another name, as a network manager or the
other CNI's daemon does when it reconfigures) while the pod runs on with its address. The lift then
offers the running pod's address back as of unknown origin: the allocator unassigns it from the
node's ENI while the pod carries it, and EC2 may give it to another node (two holders). Before
bf0e084 such a holder held its address for as long as the checkpoint lasted (a leak, never a
second holder).

Closed by the design that replaced bf0e084's before it landed: nothing is let go because a link
went; a recovered holder ends only with the DEL of the attachment whose veth (under any prefix) it
is named after (``CniService._end_holds_of``), and a link gone is not a pod gone (the simulation's
seed 732; ``tests/unit/test_hold_lifted.py``). A macvlan shim's holder matches no DEL: held as
before (a leak, never a second holder)."""

from __future__ import annotations

from pathlib import Path

from node_agent.hostnet import HostWiring
from tests.helpers.agent_world import WiredPods
from tests.helpers.first_start import IPS, Node
from tests.helpers.kernel_pods import offered_within

POD = IPS[0]  # on the primary ENI, carried by another CNI's pod on its own macvlan device
SHIM = "mvl-shim0"
"""The host's macvlan device (kind ``macvlan``, not a veth) the pod's ``/32`` route goes through."""


class MacvlanPod(WiredPods):
    """``wired_pods``' read of a host where another CNI's pod carries :data:`POD` on a macvlan
    device of its own (in its namespace: the host does not list it) and the host routes the
    address through its macvlan shim while the shim exists. ``carried``: the pod's namespace still
    has the address (the shim's deletion does not touch it)."""

    def __init__(self) -> None:
        super().__init__()
        self.shim = True
        self.carried = True

    def host_wiring(self) -> HostWiring:
        routed = {POD: SHIM} if self.shim else {}
        return HostWiring(
            pods={},
            stale=[],
            routed=frozenset(routed),
            links=frozenset({"ens5", *([SHIM] if self.shim else [])}),
            routed_via=routed,
            veths=frozenset(),
        )


def test_a_holder_named_after_a_macvlan_shim_is_kept_while_its_pod_runs(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = MacvlanPod()
    try:
        agent = n.start()  # no checkpoint: the rebuild holds POD by the shim's name (review 13, K1)
        offered = offered_within(n, 4)
        assert agent.ds.recovered_holder(POD) == SHIM, "setup: held by the link its route goes through"
        assert POD not in offered, "setup: held while the shim is there"
        host.shim = False  # the shim deleted (a network manager reconfiguring): the pod runs on
        assert host.carried
        offered = offered_within(n, 6)
        assert POD not in offered, (
            f"{POD}: offered back as of unknown origin (the allocator unassigns it) while the pod on its "
            f"own macvlan device still carries it; only the host's shim {SHIM} went "
            f"(now held by {agent.ds.recovered_holder(POD)})"
        )
    finally:
        n.stop()
