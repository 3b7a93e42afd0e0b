"""Review 17, L3': the guard of ``CniService._readded_of`` ("the attachment's veth is on the host:
the pod runs, so its cached result is of its latest ADD") fails when that latest ADD's answer was
lost: libcni caches a result only when an ADD succeeds as far as the runtime saw, and drops it only
when a DEL does (``CNIConfig.AddNetworkList`` / ``DelNetworkList``, libcni/api.go), so the cache
still names the address of an earlier ADD, which another pod got since.

The fifteenth review's L3 model (the same attachment DELeted and ADDed again after the copy):
``a`` holds H in the older copy; ``a`` DELeted, ``b`` got H; ``a`` ADDed again, got X (cached),
DELeted by the agent with its answer lost (X freed, the cache kept); ``run`` got X; ``a`` ADDed a
third time, got Z, that answer lost too (the cache still names X; ``a``'s veth is on the host).
The routes went. Restored: ``a``'s record of H; X (``run``'s rule, no route) held by ``unrouted``.
The runtime's DEL of ``a`` carries ``prevResult`` X: a record of another address, X held by
``unrouted``, ``a``'s veth on the host: ``_readded_of`` gives X, whose rule (``run``'s) is removed
and which is released: the next pod gets X while ``run`` carries it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant, grant_more
from tests.helpers.kernel_pods import KernelPods, contradicted_start, offers_and_adds

H, X, Z = "10.0.0.40", "10.0.0.50", "10.0.0.60"


def test_a_stale_cached_result_with_the_veth_on_the_host_does_not_free_the_running_pods_address(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = n.start()
        grant(n, agent, [H])
        assert add_until(n, agent, "a") == H
        n.step(30)
        shutil.copytree(n.state, backup)  # the older copy: "a" holds H
        assert cni(agent, "DEL", "a", prev_ip=H)["ok"]
        assert add_until(n, agent, "b") == H
        grant_more(n, agent, [X])
        assert add_until(n, agent, "a") == X  # a ADDed again: the runtime caches X
        assert cni(agent, "DEL", "a", prev_ip=X)["ok"]  # carried out; the runtime never got the answer
        assert add_until(n, agent, "run") == X
        grant_more(n, agent, [Z])
        assert add_until(n, agent, "a") == Z  # a ADDed a third time; its answer lost: the cache names X
        n.step(30)
        host.flush_routes()  # veths and pod rules stay; the /32 routes went
        agent = contradicted_start(n, backup)
        n.step(61)
        assert agent.ds.recovered_holder(X) == "unrouted", "setup: run's rule, no route, the copy lacks X"
        assert cni(agent, "DEL", "a", prev_ip=X)["ok"]  # the runtime's DEL for a's failed ADD
        offered, others = offers_and_adds(n, agent)
        assert X not in offered and X not in others, (
            f"{X}: 'run' carries it; a's DEL (its veth on the host, its cached result stale) released it"
            f" (namespaces carrying it: {host.holders(X)}; new pods: {others})"
        )
    finally:
        n.stop()
