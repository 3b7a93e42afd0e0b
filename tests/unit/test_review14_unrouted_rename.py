"""Review 14, L1 (a leak, never a second holder): ``hold_wired`` runs after every restore and holds
each pod rule without a route by :data:`node_agent.agent.UNROUTED_HOLDER` while a veth has no route,
*replacing* the holder the restored copy names (``known.get(ip) != h``). A pod a rebuild recovered
(held by a holder named after its veth, so that its DEL frees it: ``CniService._delete``,
``Datastore.release_recovered``) whose ``/32`` route then went (review 7's F1: its veth and pod rule
stay) is renamed ``unrouted`` at the next ordinary restart. Its DEL then finds nothing of its own:
``teardown`` is called without an address, so its pod rule stays on the host, and the address stays
held, at this and at every later start (``unrouted`` is no attachment's name), for good."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start, offers_and_adds


def _recovered(tmp_path: Path) -> tuple[Node, KernelPods, str]:
    """pod1 on a fresh address, then a lost checkpoint: the rebuild holds pod1's address by a
    holder named after its veth. The node, its host, the address."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    x = pod_on_fresh_address(n)
    n.lose_checkpoint()
    n.start()
    n.step(30)
    held = {h.ip: h.holder for h in n.agent.ds.recovered_holders()}
    assert held.get(x, "").startswith("eni"), f"setup: the rebuild held {held}"
    return n, host, x


@pytest.mark.xfail(
    strict=True, reason="review 14, L1: hold_wired renames a recovered pod's holder 'unrouted' after its route went"
)
def test_the_del_of_a_recovered_pod_whose_route_went_frees_its_address(tmp_path: Path) -> None:
    n, host, x = _recovered(tmp_path)
    try:
        host.flush_routes()  # pod1 runs on; its /32 route went
        agent = answered_start(n, True)  # an ordinary restart on the node's own checkpoint
        assert cni(agent, "DEL", "pod1")["ok"]
        still = {h.ip: h.holder for h in agent.ds.recovered_holders()}
        left = sorted(host.rules)
        _, others = offers_and_adds(n, agent)
        assert x not in still and x in others, (
            f"{x}: pod1's DEL did not free it (held by {still.get(x)!r}; pod rules left on the host:"
            f" {left}); the new pods got {others}"
        )
    finally:
        n.stop()


def test_with_its_route_the_del_frees_it(tmp_path: Path) -> None:
    """The contrast (passes): the route still there, the restart keeps the holder's name."""
    n, host, x = _recovered(tmp_path)
    try:
        agent = answered_start(n, True)
        assert cni(agent, "DEL", "pod1")["ok"]
        assert x not in {h.ip for h in agent.ds.recovered_holders()} and x not in host.rules
        _, others = offers_and_adds(n, agent)
        assert x in others  # freed, and used again
    finally:
        n.stop()


@pytest.mark.xfail(
    strict=True,
    reason="open (a leak, never a second holder): a DEL does not trust its prevResult, which may be of an "
    "earlier ADD whose address another pod got since (review 17); docs/safety.md, the seventeenth review",
)
def test_with_the_runtimes_cached_result_the_del_frees_it_though_its_route_went(tmp_path: Path) -> None:
    """L1 as libcni runs it: a DEL carries the attachment's cached ADD result (``prevResult``), which
    names the address. The U1-leak fix let the DEL that finds no record release the ``unrouted``
    holder it names; review 17 showed a cached result may be of an earlier ADD, and a DEL no longer
    reads it: open (a leak)."""
    n, host, x = _recovered(tmp_path)
    try:
        host.flush_routes()
        agent = answered_start(n, True)
        assert cni(agent, "DEL", "pod1", prev_ip=x)["ok"]
        still = {h.ip: h.holder for h in agent.ds.recovered_holders()}
        assert x not in host.rules, "pod1's rule left on the host"
        _, others = offers_and_adds(n, agent)
        assert x not in still and x in others, f"{x}: held by {still.get(x)!r}; the new pods got {others}"
    finally:
        n.stop()
