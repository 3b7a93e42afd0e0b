"""Scarce addresses shared fairly (issue 24, docs/allocator.md "Scarce addresses shared fairly")
through the local stack: the stack's ``scarce_free`` (``local up --scarce-free``), agents with the
stack's agent environment reporting ``lean``, the allocate function behind the event-source
mapping. In a nearly full zone an idle node is told ``scarce``, goes lean and hands back what it
holds above ``MINIMUM_IP_TARGET`` through the release path, and the node whose pods wait gets it;
with fair sharing off (``scarce_free`` 0) the idle node keeps its warm addresses."""

from __future__ import annotations

from pathlib import Path

from emulated.local import LocalStack
from tests.helpers.local_nodes import FAST_STACK, Node, agents_stopped_at_exit, launch, run_until

# a /27: 27 addresses for the two primaries and the pods; with 20, the zone is scarce once the idle
# node's warm addresses and the busy node's pods leave fewer free
ZONE = (("us-east-1a", "10.0.0.0/27"),)
FLOOR = 2
WARM = 9  # the idle node's warm target: its primary ENI's 9 secondaries
PODS = 18  # the busy node's pods: 9 on its primary, 9 on a new ENI; 19 addresses of the zone
NODE_ENV = {
    "WARM_IP_TARGET": str(WARM),
    "WARM_ENI_TARGET": "0",
    "MINIMUM_IP_TARGET": str(FLOOR),
    "WARMPOOL_REPORT_HEARTBEAT_S": "2",  # an idle node's quiet reports, answered while scarce
    "WARMPOOL_RELEASE_DELAY_S": "1",
}
# the subnets' free counts read again every 3 s (30 s by default), so what the idle node gives back is
# seen within seconds
ALLOCATOR_ENV = (("WARMPOOL_ALLOCATOR_RELEASE_DELAY_S", "1"), ("WARMPOOL_SUBNET_CACHE_TTL_S", "3"))


def _busy_pods(busy: Node) -> bool:
    for j in range(PODS):
        if f"pod-{j}" not in busy.pods:
            busy.add(f"pod-{j}")
    return len(busy.pods) == PODS


def test_an_idle_node_gives_back_above_its_floor_and_the_waiting_pods_get_it(tmp_path: Path) -> None:
    with (
        LocalStack(cluster="fair", subnets=ZONE, scarce_free=20, extra_env=ALLOCATOR_ENV, **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        idle = launch(s, "m5.large", tmp_path, **NODE_ENV)
        nodes.append(idle)
        assert run_until(nodes, lambda: idle.addresses() == WARM), idle.addresses()
        assert not idle.agent.controller.lean(idle.agent.clock.now())  # 25 free then: not scarce
        busy = launch(s, "m5.large", tmp_path, **NODE_ENV)
        nodes.append(busy)
        # The zone has 16 free, the pods need 19: served only once the idle node gave back
        served = run_until(nodes, lambda: _busy_pods(busy), timeout=60)
        assert served, (len(busy.pods), idle.addresses(), busy.addresses())
        now = idle.agent.clock.now()
        assert idle.agent.controller.lean(now) and busy.agent.controller.lean(now)  # both told scarce
        assert idle.addresses() == FLOOR  # its floor kept, the rest given back
        addresses = [ip for n in nodes for e in n.enis() for ip in e.secondary]
        assert len(addresses) == len(set(addresses))  # one holder per address
        assert len(set(busy.pods.values())) == PODS


def test_with_fair_sharing_off_the_idle_node_keeps_its_warm_addresses(tmp_path: Path) -> None:
    with (
        LocalStack(cluster="unfair", subnets=ZONE, scarce_free=0, extra_env=ALLOCATOR_ENV, **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        idle = launch(s, "m5.large", tmp_path, **NODE_ENV)
        nodes.append(idle)
        assert run_until(nodes, lambda: idle.addresses() == WARM)
        busy = launch(s, "m5.large", tmp_path, **NODE_ENV)
        nodes.append(busy)
        assert not run_until(nodes, lambda: _busy_pods(busy), timeout=12)
        assert idle.addresses() == WARM and not idle.agent.controller.lean(idle.agent.clock.now())
        assert len(busy.pods) < PODS
