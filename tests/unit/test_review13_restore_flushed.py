"""Review 13, S1: the restore path and the rebuild read the same wiring differently. The rebuild
(``node_agent/agent.py::_routed_pods``, reviews 11 W3 and 12 U1) holds every pod rule without a
route while a veth has no route, because a route alone can go while its pod runs (review 7, F1: a
network manager's flush of main; the veth and the pod rule stay). The restore check
(``wiring_disagreements``) reads routes only: a pod whose ``/32`` route went is in neither
``wiring.pods`` nor ``wiring.routed``, only in ``wiring.stale`` (with its veth, of this very prefix,
in ``wiring.links`` with no route). An older valid copy (a backup restored: reviews 10-12's copy)
from before the pod's grant passes the check; IMDS lists the address, the start learns it, and
with no "current" from the allocator it is offered as of unknown origin (EC2 gives it to another
node while the pod runs), or, answered "current", given to the next pod here. Two events (an older
copy, a flushed route), no change of prefix; the same host read by a rebuild holds the address."""

from __future__ import annotations

import shutil
from pathlib import Path

from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import WiredPods, cni_add, give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node
from warmpool.messages import AllocationResult, Assigned


class Flushable(WiredPods):
    """``node_agent.hostnet.wired_pods``'s read: the pods' veths (kind veth, this prefix), their
    pod rules, and, until ``flushed``, their ``/32`` routes in main."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed = False

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}
        routed = {} if self.flushed else dict(veths)
        return HostWiring(
            pods=dict(routed),
            stale=sorted(set(veths) - set(routed)),
            routed=frozenset(routed),
            links=frozenset({"ens5", *veths.values()}),
            routed_via=routed,
            veths=frozenset(veths.values()),
        )


def _offered(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {ip for o in report.release for ip in o.ips}


def test_an_older_copy_lacking_a_running_pod_whose_route_alone_is_gone_is_not_restored(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    wiring = n.pods = Flushable()
    backup = tmp_path / "backup"
    try:
        agent = n.start()
        first = n.step()
        assert first is not None
        for _ in range(3):
            n.step(30)
        shutil.copytree(n.state, backup)  # the older copy: before the grant of 10.0.0.50
        x = "10.0.0.50"
        n.imds.add(PRIMARY, [x])
        give(
            agent,
            AllocationResult(
                cluster=first.cluster,
                node=first.node,
                instance_id=first.instance_id,
                in_reply_to=agent.controller.last_seq,
                actions=[Assigned(eni_id=PRIMARY.eni_id, ips=[x])],
            ),
        )
        n.step()
        got = None
        for _ in range(40):
            got = cni_add(agent, "pod1")
            if got is not None:
                break
            n.step(5)
        assert got == x, f"setup: the pod got {got}"
        n.stop()
        shutil.rmtree(n.state)
        shutil.copytree(backup, n.state)
        wiring.flushed = True  # the pod runs on; its route went (its veth and pod rule stay)
        agent = n.start()
        offered: set[str] = set()
        others: list[str | None] = []
        for k in range(8):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
            others.append(cni_add(agent, f"new{k}"))
        rebuilt = agent.counters["checkpoint_rebuilds_damaged"]
        assert x not in offered and x not in others, (
            f"{x}: its pod's veth (this prefix, no route) and pod rule are on the host; an older copy"
            f" lacking it passed the wiring check (rebuilds: {rebuilt}) and it was "
            f"{'offered back as of unknown origin' if x in offered else 'given to another pod'}"
        )
    finally:
        n.stop()


def test_the_rebuild_on_the_same_host_holds_it(tmp_path: Path) -> None:
    """The contrast (passes): the checkpoint lost instead, the same read holds the address (W3)."""
    from tests.helpers.first_start import pod_on_fresh_address

    n = Node(tmp_path, adopt_launch_pool=False)
    wiring = n.pods = Flushable()
    try:
        x = pod_on_fresh_address(n)
        n.lose_checkpoint()
        wiring.flushed = True
        agent = n.start()
        offered: set[str] = set()
        others: list[str | None] = []
        for k in range(8):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
            others.append(cni_add(agent, f"new{k}"))
        assert x not in offered and x not in others
    finally:
        n.stop()
