"""Review 20, H2 (liveness: every address held for good; a regression in ``recorded`` mode too):
review 18's H1 fix makes the lift (``lift_unfounded_holds``) and ``recorded`` mode's grace wait while
any address of ``?`` (or ``unrouted``) is on a held ENI (``PoolController.holders_on_held_enis``),
taking "held" as a passing state (tags unreadable for a while). It is not always passing: an ENI
the agent has that is tagged ``no_manage`` afterwards is kept, held, "for the pods on it" until no
address on it is in use (``_usable``), and a ``?`` holder is in use. So the ENI stays held because
``?`` holds its addresses, and ``?`` holds them because the ENI is held: the lift never runs, on
*any* ENI (one held ENI blocks the release of every ``?`` address), and while the hold of every
address (``HELD_ALL_META``) lasts, whatever IMDS shows first is held by ``?`` too: the node runs no
new pod for as long as the checkpoint lasts. Before eeb7ad3 (the H1 fix), ``recorded`` mode's grace let
such holds go after ``WARMPOOL_RECOVERY_GRACE_S``; now it waits too. The same holds for an ENI kept
out by ``WARMPOOL_MULTI_CARD`` turned off, or the primary under custom networking turned on.

Steps: pod1 gets X; its route and rule go; the checkpoint is lost; the rebuild holds every address
for pod1's routeless veth. The primary ENI is tagged ``no_manage``. pod1 is DELeted: the reason is
empty, but the hold never ends.

Suggested fix: wait only while an ENI's tags are unknown (``managed`` None); on an ENI tagged
``no_manage`` (or otherwise kept out of the pool) nothing is offered anyway, so release its ``?``
holders without an offer (the ENI is then let go as any such ENI with no pod), and release the
others as now; or let the lift go per ENI instead of all or nothing."""

from __future__ import annotations

from pathlib import Path

from node_agent.cniserver import RecordedPods
from node_agent.controller import HELD_ALL_META, AttachedEni
from tests.helpers.agent_world import cni
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods

X, Y = "10.0.0.50", "10.0.0.51"


# fixed: the release waits only for ENIs held for unread tags (PoolController._held_for_good)
def test_the_hold_of_every_address_ends_after_the_routeless_pods_del_though_an_eni_is_tagged_no_manage(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        host.flush_routes()  # pod1 runs on: its veth, X in its namespace; no route, no rule
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()
        assert agent.ds.recovered_holder(X) == "?", "setup: the rebuild holds every address"
        eni = n.imds.enis[PRIMARY.eni_id]
        n.imds.enis[PRIMARY.eni_id] = AttachedEni(eni.info, eni.ips, eni.prefixes, False)  # tagged no_manage
        n.step(60)
        assert any(e.held for e in agent.ds.enis()), "setup: the ENI is kept, held, for what is in use on it"
        assert cni(agent, "DEL", "pod1")["ok"]  # the only pod the hold stood for
        for _ in range(20):  # ten minutes
            n.step(30)
        holders = sorted({h.holder for h in agent.ds.recovered_holders()})
        assert agent.ds.meta.get(HELD_ALL_META) is None and "?" not in holders, (
            f"every address still held (holders {holders}, ENI held: {[e.held for e in agent.ds.enis()]}) after "
            f"the only pod the hold stood for was DELeted"
        )
    finally:
        n.stop()


# fixed: the release waits only for ENIs held for unread tags (PoolController._held_for_good)
def test_recorded_modes_grace_ends_the_hold_though_an_eni_is_tagged_no_manage(tmp_path: Path) -> None:
    env = {"WARMPOOL_POD_NETWORK": "recorded", "WARMPOOL_RECOVERY_GRACE_S": "300"}
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = RecordedPods("eni")  # type: ignore[assignment]
    try:
        agent = n.start(**env)
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        n.lose_checkpoint()
        agent = n.start(**env)
        n.step()
        assert agent.ds.recovered_holder(X) == "?", "setup: the rebuild holds every address"
        eni = n.imds.enis[PRIMARY.eni_id]
        n.imds.enis[PRIMARY.eni_id] = AttachedEni(eni.info, eni.ips, eni.prefixes, False)  # tagged no_manage
        n.step(60)
        assert any(e.held for e in agent.ds.enis()), "setup: the ENI is kept, held, for what is in use on it"
        for _ in range(20):  # ten minutes: twice the grace
            n.step(30)
        holders = sorted({h.holder for h in agent.ds.recovered_holders()})
        assert agent.ds.meta.get(HELD_ALL_META) is None and "?" not in holders, (
            f"every address still held (holders {holders}) twice the grace after the rebuild"
        )
    finally:
        n.stop()
