"""Review 17, N1': ``unnamed_unrouted_veths`` lets a restored record name its routeless veth while
"the host shows its pod rule with no route" (``p.ip in wiring.stale``), but ``HostWiring.stale`` is
every pod rule not routed through *this prefix's* veths (``hostnet.wired_pods``: ``ruled -
set(pods)``): a rule whose address is routed through another prefix's veth (the veth prefix changed
across a restart, which ``veths_of`` and ``unrouted_veths`` allow for) is counted as the record's
trace, though it is another running pod's.

The fifteenth review's N1 setting: an older copy names ``p`` as X's holder, Y free. ``p`` is DELeted
and ADDed again (Y: X cools down); X then goes to ``b``, wired under another prefix (the agent's
setting changed and changed back across restarts), routed, its rule there. ``p``'s route and rule go
(R1's flush of one veth). Restored: X's rule with no route through an ``eni`` veth is "stale", so
``p``'s record names ``p``'s routeless veth; nothing else is routeless, so nothing is held as the
rebuild holds it, and Y, free in the copy, goes to the next pod while ``p`` carries it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, contradicted_start, offers_and_adds

X, Y = "10.0.0.50", "10.0.0.51"
ENV = {"IP_COOLDOWN_PERIOD": "30"}


def test_a_rule_routed_through_another_prefixs_veth_does_not_name_the_records_routeless_veth(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = n.start(**ENV)
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "p") == X
        n.step(30)
        shutil.copytree(n.state, backup)  # the older copy: p holds X, Y free
        assert cni(agent, "DEL", "p")["ok"]  # the runtime DELs and ADDs p again
        assert cni_add(agent, "p") == Y, "setup: X cools down, the ADD again gets Y"
        host.made_with = "cal"  # b wired under another veth prefix
        assert add_until(n, agent, "b") == X
        host.made_with = "eni"
        host.routes.pop(Y)  # p runs on: its veth pair, Y in its namespace; its route and rule went
        host.rules.discard(Y)
        agent = contradicted_start(n, backup, **ENV)
        assert host.holders(Y) == [("p", "eth0")] and host.holders(X) == [("b", "eth0")], "setup"
        offered, others = offers_and_adds(n, agent, 10)
        assert Y not in offered and Y not in others, (
            f"{Y}: p carries it (its veth on the host, no route, no rule); X's rule is b's, routed through"
            f" {host.routes.get(X)}; offered: {Y in offered}, new pods: {others} (namespaces: {host.holders(Y)})"
        )
    finally:
        n.stop()
