"""Review 19, S1 (two holders by seed 732's rule; a design tension more than a slip): 61aef6b's lift
ends ``unrouted`` holders once the routeless pods of the start's reason are DELeted. An ``unrouted``
holder is a pod rule with no route, held because a routeless veth's pod *might* be the rule's
(``_routed_pods``). Seed 732 set the rule the lift was redesigned for: "a veth gone is not a pod
gone: the runtime still runs pod1 (its veth deleted by a failed ADD's teardown of its name, or by
hand), and Kubernetes still gives pod1 its address" (``tests/unit/test_hold_lifted.py``). By that
rule a rule with no route and no veth may be a running pod's too, and the rebuild already lets such
an address go when no veth lacks a route (docs/agent.md: "logged and not held"), and has since
before these commits. What the commits change: with a routeless veth beside it the address was held
for good; now it is let go once that other pod is DELeted (offered as of unknown origin, the
allocator unassigns it while pod1, whose veth went before the restart, runs on with it in
Kubernetes' eyes).

Either seed 732's rule holds at a start too (hold a stale rule's address until its own pod's DEL,
matched by the veth name the DEL tears down: a leak on every half-done DEL), or it does not and
seed 732's pod was not "running" in a sense that matters (then say so, and the lift of the test
below is right). This test fails today, marking the question for the lead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods

X, Y = "10.0.0.50", "10.0.0.51"


@pytest.mark.xfail(
    strict=True,
    reason="open by design, review 19, S1: at a start the host is the evidence (as release_unwired and the "
    "rebuild read it): a stale rule's address whose pod's veth went before the restart, the pod run on as seed "
    "732's was, is held only while another routeless pod runs; docs/safety.md, 'The host's wiring drawn'",
)
def test_a_stale_rules_address_stays_held_while_its_pod_runs_after_another_routeless_pods_del(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        assert add_until(n, agent, "pod2") == Y
        n.step(30)
        host.teardown("pod1", "eth0", None)  # pod1's veth deleted (seed 732's way); its rule stays; it runs on
        host.routes.pop(Y)  # pod2's route and rule flushed; its veth stays
        host.rules.discard(Y)
        n.lose_checkpoint()
        agent = n.start()
        assert agent.ds.recovered_holder(X) == "unrouted", "setup: pod1's rule held beside pod2's routeless veth"
        offered: set[str] = set()
        assert cni(agent, "DEL", "pod2")["ok"]  # pod2 goes; pod1 still runs (seed 732's rule)
        for _ in range(8):
            r = n.step(30)
            if r is not None:
                offered |= {ip for o in r.release for ip in o.ips}
        assert X not in offered and agent.ds.recovered_holder(X) == "unrouted", (
            f"{X}: let go (held by {agent.ds.recovered_holder(X)!r}) while pod1 runs on with it: only "
            f"pod2, whose veth had no route, was DELeted"
        )
    finally:
        n.stop()
