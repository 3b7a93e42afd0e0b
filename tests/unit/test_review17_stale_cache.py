"""Review 17, L2': the guard of ``CniService._doubted_of`` ("this attachment's veth is on the host:
it is the running pod") holds only when the runtime's cached result is of the veth's ADD.

libcni caches an attachment's result only when its ADD succeeds, and drops it only when a DEL
succeeds as far as the runtime saw (``CNIConfig.AddNetworkList`` / ``DelNetworkList``, libcni/api.go:
``cacheAdd`` after every plugin answered, ``cacheDel`` likewise). The fifteenth review's own model
(N1, L3) has an attachment DELeted and ADDed again under the same container id and interface, so
the same veth name. Then: ``a`` ADDed with X (cached), DELeted by the agent but its answer lost (X
freed, the cache kept), ``run`` got X, and ``a`` ADDed again, got Y, its answer lost too (the cache
still names X; ``a``'s veth is on the host again). An older copy names ``old`` as X's holder;
``run``'s route went. Restored, ``old``'s record is doubtful (``HOLD_ON_RELEASE``). The runtime's DEL
of ``a`` (for its failed ADD) carries ``prevResult`` X; no record of ``a``; ``a``'s veth is on the
host, so ``_doubted_of`` takes ``a`` for the running pod: X's pod rule (``run``'s) is removed and
the hand-on dropped, and ``old``'s GC frees X while ``run`` carries it."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant_more
from tests.helpers.kernel_pods import KernelPods, answered_start, copy_then_deleted, offers_and_adds, runtime_gc

X = "10.0.0.50"
Y = "10.0.0.51"


def test_a_readded_attachments_stale_cached_result_does_not_unprotect_the_running_pods_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = copy_then_deleted(n, backup, X)  # the older copy: "old" holds X
        assert add_until(n, agent, "a") == X  # the runtime caches a's result: X
        assert cni(agent, "DEL", "a", prev_ip=X)["ok"]  # carried out; the runtime never got the answer
        assert add_until(n, agent, "run") == X
        grant_more(n, agent, [Y])
        assert add_until(n, agent, "a") == Y  # a ADDed again; its answer lost too: the cache names X
        assert host.holders(X) == [("run", "eth0")] and host.holders(Y) == [("a", "eth0")], "setup"
        n.step(30)
        host.flush_routes()  # the veths and pod rules stay; the /32 routes went
        agent = answered_start(n, True, backup)
        n.step(61)  # past the GC's minimum age
        assert agent.ds.held_on_release(X), "setup: old's record is doubtful (O1)"
        assert cni(agent, "DEL", "a", prev_ip=X)["ok"]  # the runtime's DEL for a's failed ADD
        assert runtime_gc(agent, ["run"])["ok"]  # old is no attachment of the runtime's
        offered, others = offers_and_adds(n, agent)
        assert X not in offered and X not in others, (
            f"{X}: 'run' carries it; a's DEL (its veth on the host, its cached result stale) let old's GC free it"
            f" (namespaces carrying it: {host.holders(X)}; new pods: {others})"
        )
    finally:
        n.stop()
