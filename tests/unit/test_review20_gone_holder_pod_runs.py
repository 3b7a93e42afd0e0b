"""Review 20, G1 (two holders by seed 732's rule, the same stance as review 19's S1, new in
bf3b826): ``agent.release_gone_holders`` releases at a restore a recovered holder named after a pod
veth of which the host shows nothing (no such link, no ``/32`` route, no pod rule), on the ground
that its pod was DELeted after the copy. But a veth gone is not a pod gone (seed 732): the veth
deleted while its pod runs (by hand, or by a failed ADD's teardown of its name) takes its routes
with it, and systemd-networkd's ``ManageForeignRoutingPolicyRules`` (the host-wiring draws' "rules
flushed") takes the pod rule. While the agent runs the holder stays until the pod's DEL (the
DEL-driven design; the first half of the test, which passes); a restart, even on the intact
checkpoint, releases it into cooldown, and a new pod gets the running pod's address (the pod's
Kubernetes address, the simulation's ``released-in-use``). Before bf3b826 such a holder was kept
until its pod's DEL, under any prefix.

The same restart with the copy's *records* does the same (``release_unwired``, long before these
commits), which is why this is filed as S1's stance reaching recovered holders rather than as a
slip: either a restart's reading of the host is the evidence (then say in docs/safety.md that a
holder, too, ends at a restart when its veth, routes and rule are all gone, and that seed 732's rule
holds only within one process), or seed 732's rule holds across restarts (then release such a
holder only when the copy is older than the pod's DEL can be known: e.g. only for a copy the
allocator's restore check says is not current, and keep it on a current copy).

Steps: pod1 gets X; the checkpoint is lost; the rebuild holds X by pod1's veth (routed). The pod
rules are flushed and pod1's veth is deleted while pod1 runs. Held while the agent runs; the agent
restarts on its own current checkpoint: X released at the restore, given to a new pod."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, offers_and_adds

X, Y = "10.0.0.50", "10.0.0.51"


@pytest.mark.xfail(
    strict=True,
    reason="open by design, review 20, G1: at a start the host is the evidence (release_unwired reads it so for "
    "records): release_gone_holders frees a holder whose pod runs on after its veth, route and rule all went "
    "(seed 732's way), which the running agent keeps; docs/safety.md, 'The host's wiring drawn'",
)
def test_a_holder_whose_veth_and_rule_went_while_its_pod_runs_stays_held_across_a_restart(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: X routed through pod1's veth
        n.step(30)
        veth1 = host.veth_of[("pod1", "eth0")]
        assert agent.ds.recovered_holder(X) == veth1, "setup: held by pod1's veth"
        host.flush_rules()  # networkd drops the pod rules
        host.teardown("pod1", "eth0", None)  # pod1's veth deleted (seed 732's way); the runtime runs pod1 on
        offered, others = offers_and_adds(n, agent, 4)
        assert X not in offered and X not in others and agent.ds.recovered_holder(X) == veth1, (
            "setup: the running agent keeps the holder until pod1's DEL"
        )
        for k in range(4):
            cni(agent, "DEL", f"new{k}")
        agent = answered_start(n, True)  # a restart on its own, current checkpoint
        offered, others = offers_and_adds(n, agent, 6)
        assert X not in offered and X not in others, (
            f"{X}: let go at the restart (held by {agent.ds.recovered_holder(X)!r}; new pods got {others}) while "
            f"pod1, never DELeted, runs on with it"
        )
        assert cni(agent, "DEL", "pod1")["ok"]
    finally:
        n.stop()
