"""An ADD cut between its pod's veth and its route (the agent killed in it), then retried.

At the restart the host shows the pod's veth with no route, and the checkpoint either lacks the
pod (its record never written) or has its record with no trace of its address on the host, so the
start holds every free address for it: the pod's address is not known. The runtime retries the
ADD of the same attachment, and that ADD reads what the veth's peer, the pod's interface, carries
(``CniService._known_again``): one address the hold holds is the pod's, given back; none means
no address here is the pod's; either way the veth leaves the hold's reason and the hold ends
(``CniService._rewired``). Before, the retried ADD waited for a DEL the runtime never sent,
every free address held, and the node's pods waited for good
(``tests/integration/test_agent_crash.py`` failed about one run in two). The veth is never torn
down for it: the same read serves a second ADD of a running pod (the simulation's ``cni-overlap``
after ``host-wiring``, seed 732), whose address stays its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni_add
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start, offered_within


def _half_made(host: KernelPods, cid: str, ip: str | None, prefix: str = "eni") -> str:
    """What an ADD of ``cid`` cut after the veth pair (and the pod's address ``ip``, if given)
    leaves on the host: the pair, no route, no rule. Its veth's name."""
    veth = host_veth_name(cid, "eth0", prefix)
    host.veth_of[(cid, "eth0")] = veth
    if ip is not None:
        host.wired[(cid, "eth0")] = ip
    return veth


@contextmanager
def restarted_after_a_cut(
    tmp_path: Path, ip: str | None, prefix: str = "eni"
) -> Iterator[tuple[Node, KernelPods, Any, str, str]]:
    """pod1 on x; 10.0.0.51 and 10.0.0.52 granted; pod2's ADD cut (:func:`_half_made`, carrying
    ``ip``); the agent started again on its checkpoint, answered current. Yields the node, the
    host, the agent, x and pod2's veth."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        x = pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        veth = _half_made(host, "pod2", ip, prefix)
        agent = answered_start(n, True)
        assert veth in (agent.ds.meta.get(HOLD_REASON) or []), "setup: the start holds for pod2's veth"
        yield n, host, agent, x, veth
    finally:
        n.stop()


def test_the_retried_add_of_a_pod_cut_after_its_address_gets_that_address_back(tmp_path: Path) -> None:
    """Cut after the pod's interface got y (never written): the retried ADD reads y on the veth's
    peer, held by the start's hold: y is the pod's, given back; the hold ends (z let go)."""
    y, z = "10.0.0.51", "10.0.0.52"
    with restarted_after_a_cut(tmp_path, y) as (n, host, agent, x, veth):
        assert agent.ds.meta.get(HOLD_REASON) == [veth]
        assert cni_add(agent, "other") is None, "setup: every free address held while pod2's address is unknown"
        assert y not in offered_within(n, 2), "setup: y held, pod2's namespace carries it"
        assert cni_add(agent, "pod2") == y, "pod2's retried ADD: the address its interface carries"
        assert host.holders(y) == [("pod2", "eth0")] and host.routes.get(y) == veth
        assert agent.ds.meta.get(HOLD_REASON) in (None, []), "pod2's veth still in the hold's reason"
        offered = offered_within(n, 3)
        assert z in offered and y not in offered, f"after pod2's retried ADD: offered {offered}"
        assert host.holders(x) == [("pod1", "eth0")], "pod1 untouched"


def test_the_retried_add_of_a_pod_cut_before_its_address_ends_the_hold(tmp_path: Path) -> None:
    """Cut after the veth pair, before the pod's address: the pod carries none, so no address of
    the node is its; the retried ADD ends the hold (y and z let go) and then gets a fresh one."""
    with restarted_after_a_cut(tmp_path, None) as (n, host, agent, x, _veth):
        assert "10.0.0.51" not in offered_within(n, 2), "setup: held while pod2's address is unknown"
        assert cni_add(agent, "pod2") is None  # nothing free yet: the hold is let go by the loop
        assert agent.ds.meta.get(HOLD_REASON) in (None, []), "pod2's veth still in the hold's reason"
        offered = offered_within(n, 3)
        assert {"10.0.0.51", "10.0.0.52"} <= offered, f"the held addresses not let go: {offered}"
        grant_more(n, agent, ["10.0.0.60"])
        assert add_until(n, agent, "pod2") == "10.0.0.60"
        assert host.holders(x) == [("pod1", "eth0")], "pod1 untouched"


def test_an_add_of_another_pod_does_not_end_the_hold(tmp_path: Path) -> None:
    """The contrast: the hold stands for pod2's veth; ADDs of other pods (however often) leave it."""
    y = "10.0.0.51"
    with restarted_after_a_cut(tmp_path, y) as (n, host, agent, _x, veth):
        for k in range(3):
            assert cni_add(agent, f"other{k}") is None
            assert cni_add(agent, f"other{k}") is None  # retried: still not pod2's
        assert host.holders(y) == [("pod2", "eth0")]
        assert agent.ds.meta.get(HOLD_REASON) == [veth]
        assert y not in offered_within(n, 3), "y let go while pod2's namespace carries it"


def test_a_half_made_veth_of_another_prefix_is_left_to_the_del(tmp_path: Path) -> None:
    """pod2's veth made under an earlier prefix: this prefix's ADD reads no pair of its own name
    (and would make a second pair beside the pod's interface), so only pod2's DEL ends that part
    of the hold."""
    y = "10.0.0.51"
    with restarted_after_a_cut(tmp_path, y, prefix="wp") as (n, host, agent, _x, veth):
        assert cni_add(agent, "pod2") is None
        assert host.holders(y) == [("pod2", "eth0")], "the old-prefix veth was torn down by this prefix's ADD"
        assert veth in (agent.ds.meta.get(HOLD_REASON) or [])
        assert y not in offered_within(n, 3), "y let go while pod2's namespace carries it"


def test_the_retried_add_of_a_recorded_pod_with_no_route_ends_the_hold(tmp_path: Path) -> None:
    """The ADD cut after its record was written, before the route and the pod rule: the copy has
    pod2's record, the host its veth alone (no trace of the record's address, so the copy's
    record does not name the veth: review 15, N1), and every free address is held. The retried
    ADD wires pod2 again with its recorded address (the pod's interface carries exactly it): the
    veth leaves the hold's reason (``CniService._rewired``) and the hold ends."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        y = add_until(n, n.agent, "pod2")
        z = ({"10.0.0.51", "10.0.0.52"} - {y}).pop()
        n.step(30)
        host.routes.pop(y)
        host.rules.discard(y)  # as if pod2's ADD stopped after its veth and its record
        agent = answered_start(n, True)
        veth = host.veth_of[("pod2", "eth0")]
        assert agent.ds.meta.get(HOLD_REASON) == [veth], "setup: the start holds for pod2's veth"
        assert z not in offered_within(n, 2) and cni_add(agent, "other") is None, "setup: z held"
        assert cni_add(agent, "pod2") == y, "pod2's retried ADD: its recorded address"
        assert host.routes.get(y) == veth and y in host.rules
        assert agent.ds.meta.get(HOLD_REASON) in (None, []), "pod2's veth (routed now) still in the hold's reason"
        assert z in offered_within(n, 3), f"{z}: still held after pod2 was wired again"
        assert host.holders(y) == [("pod2", "eth0")]
    finally:
        n.stop()
