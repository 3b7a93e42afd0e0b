"""Review 15, N1: R1's restore hold asks whether a routeless pod veth is *named* by a restored
record, not whether that record's address is the one the pod carries now.

The runtime DELs an attachment and ADDs it again (the same container id and interface: the
simulation's ``cni-readd``; a sandbox whose network is set up again). The veth's name is the same
(``host_veth_name`` of the container id and interface), the address need not be: with X cooling
down after the DEL, the ADD gets Y. An older copy, from before the DEL, names the attachment as X's
holder and has Y free. Then the pod's ``/32`` route and its pod rule go (review 14, R1: a veth set
down, a network manager's flush); the veth stays, and with it Y in the pod's namespace.

Restored: no route to disagree with; ``release_unwired`` keeps the record (its veth is there);
``hold_wired`` sees no route and no rule for Y; ``unnamed_unrouted_veths`` finds the routeless veth
named by the record, so nothing is held as the rebuild holds it; ``doubtful_records`` trusts the
record (the only routeless veth is its own). Y is free in the copy and nothing holds it. The agent
sent no report after the copy, so the allocator's answer is "current" and Y goes to the next pod
while the pod carries it (two pods); answered "not current", Y is offered as of unknown origin and
unassigned from under it (two nodes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, contradicted_start, offers_and_adds

X, Y = "10.0.0.50", "10.0.0.51"
ENV = {"IP_COOLDOWN_PERIOD": "30"}  # the agent's default: a freed address waits 30 s


@pytest.mark.parametrize("current", [True, False], ids=["current", "not-current"])
def test_a_pod_added_again_after_the_copy_keeps_its_new_address_when_its_route_and_rule_went(
    tmp_path: Path, current: bool
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = n.start(**ENV)
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "p") == X
        n.step(30)
        shutil.copytree(n.state, backup)  # the older copy: p holds X, Y free
        sent = len(n.sqs.sent)
        assert cni(agent, "DEL", "p")["ok"]  # the runtime DELs and ADDs p again
        assert cni_add(agent, "p") == Y, "setup: X cools down, the ADD again gets Y"
        assert len(n.sqs.sent) == sent, "setup: no report after the copy (the allocator saw nothing since)"
        host.flush_routes()  # p runs on: its veth pair, Y in its namespace
        host.flush_rules()
        agent = contradicted_start(n, backup, **ENV)
        offered, others = offers_and_adds(n, agent, 10)
        assert ("p", "eth0") in host.holders(Y), "setup: p still carries Y"
        assert Y not in offered and Y not in others, (
            f"{Y}: p carries it (its veth is on the host, no route, no rule); the copy named p as {X}'s holder;"
            f" offered: {Y in offered}, new pods: {others} (namespaces carrying {Y}: {host.holders(Y)})"
        )
    finally:
        n.stop()
