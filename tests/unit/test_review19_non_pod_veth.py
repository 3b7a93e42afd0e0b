"""Review 19, D1 (liveness): the start's hold reason (``note_hold_reason`` over ``routeless_links``)
names *every* veth with no ``/32`` route, any name, any CNI: a Docker bridge's ports (``veth`` + 7 hex
digits, enslaved to ``docker0``, never routed), a Multus ``bridge`` network's host sides, a kind
node's. docs/agent.md says such a veth "is on most nodes". No DEL ever names one
(``hostnet.veths_of`` matches 15-character names ending in the attachment's digest), and a restart
unites the old reason with the host's routeless links, so a name noted once stays after its veth went.
The reason never empties, and:

* **D1a**: the hold of every address a routeless pod of this agent began (``HELD_ALL_META``) never
  ends after that pod's DEL, which is what 61aef6b was made to end (docs/safety.md, "The host's
  wiring drawn": "once the runtime has DELeted the pods of the reason, no pod it runs carries an
  address the agent does not know"); on a node at its ENI limit new pods wait for as long as the
  checkpoint lasts. The simulation never draws it (its ``foreign-veth`` is a Multus ``ptp`` veth
  *with* a route), and its own ``hold-unfounded`` check would count it (a ``?`` holder whose
  reason names no attachment the runtime runs);
* **D1b**: an ``unrouted`` holder (a pod rule left with no route and no veth: an ADD or DEL stopped
  half-way) is held when *any* veth has no route (``_routed_pods``), so a Docker port alone makes
  one, and the same port keeps it for good; on a node with no such port the rule is not held at all.

Suggested fix: the reason names only the links that may be this agent's pods, as ``unrouted_veths``
does (this prefix's links and ``veth_shaped`` veths; another prefix longer than 7 characters is
matched by no DEL anyway), and ``_routed_pods`` holds stale rules for those only; and a CNI GC, whose
``cni.dev/valid-attachments`` lists every attachment of the network, takes out of the reason every
link no listed attachment's veth (under any prefix) is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.controller import HELD_ALL_META
from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, offered_within

X, Y = "10.0.0.50", "10.0.0.51"
DOCKER = ("docker-c1", "eth0")
DOCKER_PORT = "veth3a9c1f2"
"""A Docker bridge port: ``veth`` + 7 hex digits, a veth, enslaved to ``docker0``, no ``/32`` route."""


def _docker_container_runs(host: KernelPods) -> None:
    host.veth_of[DOCKER] = DOCKER_PORT  # a veth pair of no pod; no route, no rule


def _docker_container_stops(host: KernelPods) -> None:
    host.veth_of.pop(DOCKER)


@pytest.mark.parametrize(
    "docker",
    [
        "none",  # the contrast: passes (tests/unit/test_hold_lifted.py's first test, with two addresses)
        "a port",  # fixed: the reason names only links a DEL of ours can name (routeless_links)
    ],
)
def test_the_hold_of_every_address_ends_with_the_routeless_pods_del_beside_a_docker_port(
    tmp_path: Path, docker: str
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        if docker == "a port":
            _docker_container_runs(host)
        host.flush_routes()  # pod1 runs on: its veth pair, X in its namespace; no route, no rule
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: every address held, for pod1's routeless veth
        assert agent.ds.recovered_holder(X) == "?", "setup: the rebuild holds every address"
        assert host_veth_name("pod1", "eth0") in agent.ds.meta[HOLD_REASON]
        assert cni(agent, "DEL", "pod1")["ok"]  # the only pod that could carry an unknown address goes
        assert host.holders(X) == []
        if docker == "a port":
            _docker_container_stops(host)  # its port goes too
            agent = answered_start(n, True)  # and a restart on the current checkpoint
        offered = offered_within(n, 8)
        assert agent.ds.meta.get(HELD_ALL_META) is None and X in offered, (
            f"every address still held (X by {agent.ds.recovered_holder(X)!r}) for the reason "
            f"{agent.ds.meta.get(HOLD_REASON)}: pod1 was DELeted, and no DEL names a Docker port"
        )
    finally:
        n.stop()


# fixed: the port is in no reason, and the unrouted hold ends at the first pass
def test_a_stale_rules_unrouted_hold_beside_a_docker_port_ends(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        _docker_container_runs(host)
        # pod1's DEL stopped half-way (its veth and route gone, its rule left); the agent restarts on
        # no checkpoint before the runtime retries it
        host.teardown("pod1", "eth0", None)
        assert X in host.rules and X not in host.routes
        n.lose_checkpoint()
        agent = n.start()
        assert agent.ds.recovered_holder(X) == "unrouted", "setup: held as a stale rule beside a routeless veth"
        assert agent.ds.meta.get(HELD_ALL_META) is None, "setup: no pod veth of this agent lacks a route"
        assert cni(agent, "DEL", "pod1")["ok"]  # the runtime's retried DEL
        _docker_container_stops(host)
        agent = answered_start(n, True)
        offered = offered_within(n, 8)
        assert agent.ds.recovered_holder(X) is None and X in offered, (
            f"{X} still held by {agent.ds.recovered_holder(X)!r} for the reason {agent.ds.meta.get(HOLD_REASON)}: "
            f"no pod of this agent can carry it (pod1 was DELeted), and no DEL names {DOCKER_PORT}"
        )
    finally:
        n.stop()
