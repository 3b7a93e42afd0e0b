"""Review 22, R3 (two holders by seed 732's rule, under the assumption docs/safety.md names; new in
b7123a0): an ADD whose veth is in the start's hold reason and whose pod's interface carries no IPv4
address takes the veth out of the reason at once (``CniService._known_again``: "no address of this
node is the pod's"). The assumption behind it, "nothing but the host changes a pod interface's
addresses", is framed in docs/safety.md as an address removed *by hand*; but a workload may do it
by design: KubeVirt's bridge binding on the pod network is described as handing the pod's address
to the VM by its own DHCP server, the pod's ``eth0`` enslaved to an in-pod bridge (not checked
against KubeVirt's own pages in this review), so the interface the agent reads carries none while
the VM runs with the pod's Kubernetes address. Any pod with ``CAP_NET_ADMIN`` can do the same. A second ADD of such a
pod (``cni-overlap``) after a start that holds every address for its routeless veth ends the hold,
and the loop lets that address go (offered as of unknown origin, unassigned, another node's).
Before b7123a0 the veth stayed in the reason until the pod's DEL.

Steps: pod1 on 10.0.0.50; pod2 gets Y; pod2's route and rule flushed (networkd); the checkpoint is
lost; the rebuild holds every address for pod2's routeless veth. pod2's eth0 carries no IPv4 address
(its VM does). The runtime sends pod2's attachment a second ADD. Y must stay held while pod2 runs.

Either narrow what "none" proves (an ADD cut before the address: the pod is not running, which the
agent can tell only by the runtime's word, e.g. the attachment missing from a CNI GC's valid list),
or say in docs/safety.md that a pod moving its address off the interface is outside the design."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.datastore import HOLD_REASON
from node_agent.records import UNKNOWN_HOLDER
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, offers_and_adds


@pytest.mark.xfail(
    strict=True,
    reason="review 22, R3: a second ADD of a running pod whose interface carries no IPv4 address (KubeVirt's bridge "
    "binding moves it to the VM) ends the start's hold for its veth, and the pod's Kubernetes address is let go",
)
def test_a_second_add_of_a_pod_whose_address_moved_off_its_interface_keeps_the_address_held(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        y = add_until(n, n.agent, "pod2")
        n.step(30)
        host.routes.pop(y)
        host.rules.discard(y)
        n.lose_checkpoint()
        agent = n.start()
        n.step(30)
        assert host.veth_of[("pod2", "eth0")] in (agent.ds.meta.get(HOLD_REASON) or []), "setup"
        assert agent.ds.recovered_holder(y) == UNKNOWN_HOLDER, "setup: y held for pod2's routeless veth"
        del host.wired[("pod2", "eth0")]  # the VM has y now; pod2's eth0 (still paired) carries none
        got = cni_add(agent, "pod2")  # the runtime's second ADD of running pod2
        offered, others = offers_and_adds(n, agent, 6)
        assert y not in offered and y not in others, (
            f"{y}: let go (the second ADD got {got}; offered {sorted(offered)}, new pods got {others}) while "
            "pod2's VM runs with it"
        )
        assert cni(agent, "DEL", "pod2")["ok"]
    finally:
        n.stop()
