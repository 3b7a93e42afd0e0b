"""Review 22, R5 (two holders, new in b7123a0): ``CniService._known_again``'s argument is that "a pod
carrying one address held for nobody else is that address's only holder". One path the agent
itself opens breaks it: an ADD whose wiring fails releases the address it took *whatever its
teardown did* (``CniService._add``: ``try: teardown`` / ``finally: release``). When the teardown
fails too (a netlink error deleting the veth), the half-made pod interface still carries the
address the datastore now calls free, and the next pod gets it: two interfaces carry it, one of a
sandbox whose ADD was never answered (harmless while it stays so: no route leads to it, and its DEL
deletes its veth). After a restart that holds every address for routeless veths (the routes and
rules flushed, the checkpoint lost), the runtime's retried ADD of that first attachment reads the
address on its interface, held by ``?`` ("for nobody else"), and is answered with it while the
other pod runs with it. Before b7123a0 that retried ADD got nothing (every address held) and the
address stayed held until both pods' DELs.

Either keep an ADD's address held when its teardown failed (a recovered holder named after the
attachment's veth: its DEL or retried ADD ends it), or have ``_known_again`` refuse an address that
another routeless veth's peer also carries.

Fixed the first way (``CniService._hold_for_veth``): the tests below failed on b7123a0."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import FailingPods

Y = "10.0.0.51"


@contextmanager
def failed_add_of_pod2(tmp_path: Path) -> Iterator[tuple[Node, FailingPods]]:
    """pod1 on a fresh address; Y granted; pod2's ADD failed in its wiring, then in its teardown
    (its interface carries Y); the failures then cleared."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = FailingPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, [Y])
        host.half.add("pod2")
        host.stuck.add("pod2")
        assert cni_add(n.agent, "pod2") is None, "setup: pod2's ADD failed (wiring, then teardown)"
        assert host.holders(Y) == [("pod2", "eth0")], "setup: pod2's half-made interface carries Y"
        host.half.clear()
        host.stuck.clear()
        yield n, host
    finally:
        n.stop()


def test_an_address_a_failed_teardown_left_on_a_pod_interface_stays_held_until_its_del(tmp_path: Path) -> None:
    """Fixed: the address stays held for pod2's veth (``CniService._hold_for_veth``), never given to
    pod3; pod2's retried ADD gets it back."""
    with failed_add_of_pod2(tmp_path) as (n, host):
        veth = host_veth_name("pod2", "eth0", "eni")
        assert n.agent.ds.recovered_holder(Y) == veth, f"{Y} not held for pod2's veth after its teardown failed"
        n.step(31)  # past any cooldown
        assert cni_add(n.agent, "pod3") != Y, f"{Y} given to pod3 while pod2's interface carries it"
        assert cni_add(n.agent, "pod2") == Y, "pod2's retried ADD: the address its interface carries"
        assert host.routes.get(Y) == veth
        assert n.agent.ds.recovered_holder(Y) is None and n.agent.ds.lookup("pod2", "eth0") is not None


def test_the_del_of_an_add_whose_teardown_failed_releases_its_address(tmp_path: Path) -> None:
    with failed_add_of_pod2(tmp_path) as (n, host):
        assert cni(n.agent, "DEL", "pod2")["ok"]
        assert host.holders(Y) == [], "pod2's DEL left its veth"
        assert n.agent.ds.recovered_holder(Y) is None, f"{Y} still held after pod2's DEL"
        n.step(31)
        assert add_until(n, n.agent, "pod3") == Y, f"{Y} not free for pod3 after pod2's DEL"
