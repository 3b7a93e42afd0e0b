"""An ENI EC2 deleted while a start holds every address (the simulation's seed 2748).

A node offered a surplus ENI whole; the allocator detached it for deletion and answered
``deleted``, and EC2 took minutes to detach it (``slow-detach``: IMDS lists it meanwhile). The
agent's checkpoint was then lost with one pod's route gone (``veth-down``): the rebuild held every
address IMDS listed by ``?`` (a pod veth with no route may carry any), the detaching ENI's too.
The release book said ``deleted`` again to every later report, and the agent refused each time
("EC2 deleted ... while pods hold its addresses"): it kept the ENI, held, and once IMDS no longer
listed it, kept its device slot from the ENI the allocator attached there next, whose addresses
the agent never learnt (``address-leaked``), for as long as the routeless pod ran.

A ``?`` hold names no pod: it keeps the agent from handing the address out, and the agent never
hands out an address of an ENI EC2 said it deleted (resync leaves it out however long IMDS lists
it). So a ``deleted`` now takes the ENI; a pod's record or a holder named after a veth still keeps
it (``deleted_in_use``). An ``unrouted`` hold no longer does (seed 4712:
``test_deleted_under_an_unrouted_hold.py``). The ``?`` hold itself stays, not attached, as an
``unrouted`` one does (review 21, D1): an address EC2 grants the node again comes in held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.records import EniInfo
from tests.helpers.agent_world import cni_add, give
from tests.helpers.controller import SECOND
from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods
from warmpool.messages import AllocationResult, Deleted

NEXT = EniInfo("eni-00000002", 1, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")
"""The ENI the allocator attached in SECOND's slot once SECOND was gone."""
GONE = "10.0.0.21"
NEW = ["10.0.0.31", "10.0.0.32"]


def _deleted(n: Node, agent: Any, eni_id: str) -> None:
    """A pass, then ``deleted`` for ``eni_id`` in reply to its report (the release book says it
    again to every newer report), then another pass."""
    r = n.step(30)
    assert r is not None
    give(
        agent,
        AllocationResult(
            cluster=r.cluster,
            node=r.node,
            instance_id=r.instance_id,
            in_reply_to=r.seq,
            actions=[Deleted(eni_id=eni_id)],
        ),
    )
    n.step()


def _rebuilt_with_a_routeless_pod(tmp_path: Path, pod_on_gone: bool = False) -> tuple[Node, KernelPods, Any, str]:
    """pod1 holds x; SECOND (GONE on it) is listed, detaching; pod1's route goes (its pod rule
    stays, pod1 runs on: ``veth-down``); the checkpoint is lost and the agent rebuilds. With
    ``pod_on_gone``, the host also wires pod2 to GONE (a route through its veth)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    x = pod_on_fresh_address(n)
    n.step(30)
    n.imds.add(SECOND, [GONE])  # detaching, still listed
    if pod_on_gone:
        host.setup("/var/run/netns/pod2", "eth0", "pod2", GONE, 2, 9001)
    host.routes.pop(x)
    n.lose_checkpoint()
    agent = n.start()
    return n, host, agent, x


def test_a_deleted_eni_held_only_by_a_start_s_hold_goes_and_its_slot_is_taken_again(tmp_path: Path) -> None:
    n, host, agent, x = _rebuilt_with_a_routeless_pod(tmp_path)
    ds = agent.ds
    try:
        assert ds.recovered_holder(GONE) == "?", "setup: the rebuild holds every address, the detaching ENI's too"
        _deleted(n, agent, SECOND.eni_id)
        assert ds.eni(SECOND.eni_id) is None, "EC2 deleted it and no pod is named on it: still kept"
        # the hold stays, not attached: a pod on GONE (an allocator at fault) keeps it across a
        # checkpoint loss only so (review 21, D1: test_review21_deleted_under_a_hold.py)
        assert ds.recovered_holder(GONE) == "?", "the hold went with the ENI"
        # the detach completes; the allocator attaches another ENI in the slot
        del n.imds.enis[SECOND.eni_id]
        n.imds.add(NEXT, NEW)
        for k in range(4):  # two minutes: past two resyncs
            n.step(30)
            assert cni_add(agent, f"new{k}") not in {x, GONE}
        for ip in NEW:
            eni = ds.eni_of(ip)
            assert eni is not None and eni.eni_id == NEXT.eni_id, f"{ip}: EC2 has it on the node, the agent not"
        # the hold of every address stands while pod1 (no route) runs
        assert ds.recovered_holder(x) == "unrouted", "pod1's address: its pod rule names it"
        assert host.holders(x) == [("pod1", "eth0")]
        assert all(ds.recovered_holder(ip) == "?" for ip in NEW), "learnt while pod1 runs: held"
        assert agent.controller.stats.deleted_in_use == 0
    finally:
        n.stop()


def test_a_deleted_eni_a_pod_s_veth_holds_an_address_on_is_still_kept_for_it(tmp_path: Path) -> None:
    """The contrast: a holder named after a pod's veth stands for a pod that carries the address
    (an alarm: EC2 may give it to another node); its ENI stays, counted, as a pod's record keeps it."""
    n, host, agent, _ = _rebuilt_with_a_routeless_pod(tmp_path, pod_on_gone=True)
    ds = agent.ds
    try:
        veth = host.veth_of[("pod2", "eth0")]
        assert ds.recovered_holder(GONE) == veth, "setup: held by pod2's veth"
        _deleted(n, agent, SECOND.eni_id)
        assert ds.eni(SECOND.eni_id) is not None and ds.recovered_holder(GONE) == veth
        assert agent.controller.stats.deleted_in_use >= 1
    finally:
        n.stop()
