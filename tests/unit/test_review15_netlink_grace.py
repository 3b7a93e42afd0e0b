"""Review 15, G1: ``WARMPOOL_RECOVERY_GRACE_S`` lets go R1's hold while the pod it is for runs.

The fourteenth review's R1 fix holds every attached address by ``?`` (``HELD_ALL_META``) when a
pod veth has no route (``Agent._rebuild``'s ``unknown``, ``hold_doubtful``'s ``unnamed``), in the
``netlink`` pod network too. The grace that ends such a hold (``Agent._release_unknown_holders``)
is read in every mode, though docs/agent.md's table says "`recorded` only", and it rests on the
operator's word that a pod the agent cannot see has ended by then. Here the agent can see it: the
pod's veth is on the host all along. At the grace's end nothing reads the host again, and the
pod's address is offered as of unknown origin: the allocator unassigns it from under the running
pod (EC2 may give it to another node at once, docs/safety.md row 2)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, offers_and_adds

GRACE = "240"  # the least the agent takes: the release timeout (WARMPOOL_RELEASE_TIMEOUT_S, 240 s)


def test_the_recovery_grace_does_not_offer_a_running_pods_address_while_its_veth_has_no_route(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        x = pod_on_fresh_address(n, WARMPOOL_RECOVERY_GRACE_S=GRACE)
        n.step(30)
        host.flush_routes()  # pod1 runs on: its veth pair, x in its namespace; no route, no rule
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start(WARMPOOL_RECOVERY_GRACE_S=GRACE)
        assert agent.ds.meta.get("held_all_at") is not None, "setup: the rebuild holds every address (R1)"
        offered, others = offers_and_adds(n, agent, 14)  # 420 s: past the grace
        assert host.holders(x) == [("pod1", "eth0")], "setup: pod1 still carries x"
        assert x not in offered and x not in others, (
            f"{x}: pod1 runs (its veth is on the host, no route); after the grace it was "
            f"{'offered back as of unknown origin' if x in offered else 'given to ' + str(others)}"
        )
    finally:
        n.stop()
