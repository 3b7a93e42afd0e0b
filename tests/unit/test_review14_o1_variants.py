"""Review 14, O1 and R1, the variants its tests leave out (``node_agent/agent.py::hold_doubtful``):

* the running pod routed through another prefix's veth (the setting changed across the restart),
  which the review names and does not test: its route is a foreign link's, so nothing on the
  host is left unnamed, and only the record's hold on release keeps the address;
* two restored pods that swapped addresses since the copy (both DELeted and ADDed again), their
  routes gone: each record names a pod that runs, on the other's address;
* a copy from before a pod's grant, the pod's route *and* rule gone (review 13's S1 with R1's
  flush): nothing on the host says the address, IMDS lists it, and "current" would free it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agent_world import cni, give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, contradicted_start, offers_and_adds
from warmpool.messages import AllocationResult, Assigned

X, Y = "10.0.0.50", "10.0.0.51"


@dataclass
class World:
    n: Node
    host: KernelPods
    backup: Path


@pytest.fixture
def w(tmp_path: Path) -> Iterator[World]:
    """A node whose host keeps its pods' wiring across restarts; ``backup`` the older copy's place."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        yield World(n, host, tmp_path / "backup")
    finally:
        n.stop()


def _gc(agent: Any, valid: list[str]) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": "1.1.0", "name": "warmpool", "type": "warmpool-cni"}
    conf["cni.dev/valid-attachments"] = [{"containerID": c, "ifname": "eth0"} for c in valid]
    return agent.cni.handle({"command": "GC", "config": conf})  # type: ignore[no-any-return]


@pytest.mark.parametrize("current", [True, False], ids=["current", "not-current"])
def test_gc_of_the_copys_pod_keeps_an_address_routed_through_another_prefixs_veth(w: World, current: bool) -> None:
    n, host = w.n, w.host
    agent = n.start()
    grant(n, agent, [X])
    assert add_until(n, agent, "old") == X
    n.step(30)
    shutil.copytree(n.state, w.backup)  # the older copy: "old" holds X
    assert cni(agent, "DEL", "old")["ok"]
    assert add_until(n, agent, "run") == X  # wired as eni…, its route through that veth
    n.step(30)
    host.reader = "wp"  # the agent back under another prefix: run's route is a foreign link's
    agent = answered_start(n, current, w.backup, WARMPOOL_VETH_PREFIX="wp")
    n.step(61)
    assert _gc(agent, ["run"])["ok"]
    offered, others = offers_and_adds(n, agent)
    assert X not in offered and X not in others, (
        f"{X}: 'run' carries it (routed through its veth of the old prefix); GC of the copy's 'old'"
        f" released it (offered: {sorted(offered)}, new pods: {others}; namespaces: {host.holders(X)})"
    )


def test_the_del_of_one_of_two_pods_that_swapped_addresses_since_the_copy_keeps_the_others(w: World) -> None:
    n = w.n
    agent = n.start()
    grant(n, agent, [X, Y])
    assert add_until(n, agent, "p") == X
    assert add_until(n, agent, "q") == Y
    n.step(30)
    shutil.copytree(n.state, w.backup)  # the older copy: p holds X, q holds Y
    assert cni(agent, "DEL", "p")["ok"] and cni(agent, "DEL", "q")["ok"]
    assert add_until(n, agent, "q") == X  # both ADDed again, each on the other's address
    assert add_until(n, agent, "p") == Y
    w.host.flush_routes()  # both veths and pod rules stay; the routes went
    # Since stop 50 the start reads what each listed pod's interface carries: p carries Y and q
    # X, not what the copy says, so the copy is not taken and the start rebuilds (the simulation's
    # seed 1001262); the DEL must keep q's address either way.
    agent = contradicted_start(n, w.backup)
    assert cni(agent, "DEL", "p")["ok"]  # p ends (it carried Y)
    offered, others = offers_and_adds(n, agent)
    assert X not in offered and X not in others, (
        f"{X}: q carries it; the copy named p as its holder and p's DEL freed it"
        f" (new pods: {others}; namespaces: {w.host.holders(X)})"
    )


def _granted_after_the_copy(w: World) -> None:
    """The copy taken before X's grant; then pod1 on X, and its route and pod rule gone (it runs on:
    its veth pair, X in its namespace)."""
    n = w.n
    agent = n.start()
    first = n.step()
    assert first is not None
    for _ in range(3):
        n.step(30)
    shutil.copytree(n.state, w.backup)
    n.imds.add(PRIMARY, [X])
    to = {"cluster": first.cluster, "node": first.node, "instance_id": first.instance_id}
    reply = Assigned(eni_id=PRIMARY.eni_id, ips=[X])
    give(agent, AllocationResult(**to, in_reply_to=agent.controller.last_seq, actions=[reply]))
    n.step()
    assert add_until(n, agent, "pod1") == X
    n.step(30)
    w.host.flush_routes()
    w.host.flush_rules()


@pytest.mark.parametrize("current", [True, False], ids=["current", "not-current"])
def test_a_copy_from_before_the_grant_of_a_pod_whose_route_and_rule_went_holds_its_address(
    w: World, current: bool
) -> None:
    _granted_after_the_copy(w)
    offered, others = offers_and_adds(w.n, answered_start(w.n, current, w.backup), 8)
    assert X not in offered and X not in others, (
        f"{X}: pod1 carries it (its veth is on the host, no route, no rule) and the copy lacks it;"
        f" offered: {sorted(offered)}, new pods: {others}"
    )


def test_an_address_imds_shows_only_after_such_a_restore_was_answered_current_stays_held(w: World) -> None:
    """The same copy and host, IMDS lagging (rows 4 and 6): it shows X only after the allocator
    answered "current". Learnt then, X would be free for the next pod."""
    _granted_after_the_copy(w)
    listed = w.n.imds.enis[PRIMARY.eni_id]
    w.n.imds.enis[PRIMARY.eni_id] = listed._replace(ips=[ip for ip in listed.ips if ip != X])  # a lagging read
    agent = answered_start(w.n, True, w.backup)
    w.n.step(30)
    w.n.imds.enis[PRIMARY.eni_id] = listed  # IMDS shows X again
    offered, others = offers_and_adds(w.n, agent, 8)
    assert X not in offered and X not in others, (
        f"{X}: pod1 carries it; learnt after 'current', it went {'back' if X in offered else 'to ' + str(others)}"
    )
