"""Review 18, N2 (liveness, never a second holder): the lift keeps the hold of every address while any
link named in ``HOLD_REASON_META`` is on the host, by *name* (``lift_unfounded_holds``). A host veth's
name is a hash of the attachment (``host_veth_name``: container id and interface), so the DEL of the
routeless pod the hold stands for, followed by an ADD of the same attachment (a runtime's retry, the
simulation's ``cni-readd``), makes a new veth pair of the same name, routed to the address the new ADD
got and recorded by this process. The pod that could carry an unknown address is gone (its veth
pair went with the DEL), yet the reason's name is "present" again and every address stays held for
as long as the new pod runs: on a node at its ENI limit, new pods wait. The simulation's
``held_for_routeless_pods`` exemption of the ``not-settled`` check counts exactly this node as safe
("pods the host shows with no route run on") although the link it finds has a route.

A link made again has a new ifindex (the kernel allocates them increasing per namespace,
``dev_index_reserve``): a reason kept as (name, ifindex), or a reason link dropped once it is this
prefix's veth of an attachment this process recorded, would end it.

Closed by the design that replaced bf0e084's before it landed: the reason is not read on the host;
each DEL takes its attachment's veth out of it (``CniService._end_holds_of``), so pod1's DEL ends
it whatever is made under that name after."""

from __future__ import annotations

from pathlib import Path

from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods

X, Y = "10.0.0.50", "10.0.0.51"


def test_the_hold_ends_when_the_reason_pod_is_deleted_and_its_attachment_added_again(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        assert add_until(n, agent, "pod2") == Y
        n.step(30)
        host.routes.pop(X)  # pod1's route and rule flushed: it runs on, X in its namespace
        host.rules.discard(X)
        n.lose_checkpoint()
        agent = n.start()
        veth1 = host_veth_name("pod1", "eth0")
        assert agent.ds.recovered_holder(X) == "?", "setup: the rebuild holds every address (review 14, R1)"
        assert veth1 in agent.ds.meta["hold_reason"], "setup: pod1's veth is the hold's reason"
        assert cni(agent, "DEL", "pod2")["ok"]  # Y, held by pod2's veth, freed
        assert cni(agent, "DEL", "pod1")["ok"]  # pod1's veth pair goes, and X with it
        assert host.holders(X) == []
        assert cni_add(agent, "pod1") == Y  # the same attachment again: a new pair, veth1 again, routed
        assert host.routes.get(Y) == veth1 and host.holders(Y) == [("pod1", "eth0")]
        for _ in range(8):  # four minutes: four resyncs
            n.step(30)
        assert agent.ds.recovered_holder(X) is None, (
            f"{X}: still held by {agent.ds.recovered_holder(X)!r} (every address, HELD_ALL_META "
            f"{agent.ds.meta.get('held_all_at')}) for the reason {agent.ds.meta.get('hold_reason')}: "
            f"{veth1} is a new pair, routed to {Y}, which pod1's record holds; no pod carries an unknown address"
        )
    finally:
        n.stop()
