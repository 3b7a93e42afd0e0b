"""Review 20, U2 (two holders by seed 732's rule; review 19's U1 undone, rare): review 19 made a
hold restored from a copy that noted no reason keep ``agent.UNNOTED``, "which no DEL ends (it lasts
as it did before)". ``hold_doubtful`` undoes it: when a restore holds every address for a routeless
veth the copy cannot name and the copy did not hold every address already (``held_before`` false:
the copy's hold was an ``unrouted`` holder alone, which a restore makes beside a routeless veth it
*can* name), it writes the reason afresh from the host (``set_meta(HOLD_REASON_META,
routeless_links(...))``), dropping what the copy noted: ``UNNOTED``, and any link noted earlier
whose veth has gone since (the link ``note_hold_reason`` deliberately keeps: "a link is not its
pod", seed 732). Once the new routeless pods are DELeted the lift lets the ``unrouted`` holder go.

Steps: pod1 (X) and pod2 (Y); the checkpoint is lost, the rebuild holds X and Y by their veths.
pod1's route goes (its rule stays; its veth, routeless, is named by its holder) and pod2's veth is
deleted while pod2 runs (its rule stays). A restart: X and Y held ``unrouted`` (a routeless veth is
beside their rules), no hold of every address; the copy is made as an agent before 61aef6b wrote it
(no reason). The upgrade's restart notes ``[UNNOTED, pod1's veth]``. pod3 is ADDed and its route
and rule go; a restart holds every address for pod3's veth, which the copy cannot name, and
rewrites the reason as ``[pod1's veth, pod3's veth]``. pod1 and pod3 are DELeted: Y, the address
pod2 runs with, is offered back as of unknown origin (the allocator unassigns it). Without pod3 the
reason keeps ``UNNOTED`` and Y stays held (the test's first half).

Suggested fix: in ``hold_doubtful``, unite with the reason the copy noted (and ``UNNOTED`` when
:func:`unnoted_holds` said so before it), as ``note_hold_reason`` does, instead of overwriting it."""

from __future__ import annotations

from pathlib import Path

from node_agent.agent import UNNOTED
from node_agent.controller import HELD_ALL_META
from node_agent.datastore import HOLD_REASON
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant, grant_more
from tests.helpers.kernel_pods import KernelPods, answered_start, offered_within

X, Y, Z = "10.0.0.50", "10.0.0.51", "10.0.0.60"


# fixed: hold_doubtful keeps the copy's reason, and UNNOTED for a copy's hold that noted none
def test_an_unnoted_unrouted_hold_is_not_ended_by_a_later_restart_s_hold_of_every_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        assert add_until(n, agent, "pod2") == Y
        n.step(30)
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: X and Y held by their veths
        n.step(30)
        host.routes.pop(X)  # pod1's route goes; its veth and rule stay
        host.teardown("pod2", "eth0", None)  # pod2's veth deleted (seed 732's way); its rule stays; it runs on
        agent = answered_start(n, True)
        assert agent.ds.recovered_holder(Y) == "unrouted", "setup: pod2's rule held beside pod1's routeless veth"
        assert agent.ds.meta.get(HELD_ALL_META) is None, "setup: no hold of every address"
        agent.ds.set_meta(HOLD_REASON, None)  # the copy as an agent before 61aef6b wrote it: no reason
        assert cni(agent, "DEL", "pod1")["ok"]  # under that agent: X and Y stay held by "unrouted"
        agent = answered_start(n, True)  # the upgrade's restart
        assert agent.ds.meta.get(HELD_ALL_META) is None, "setup: no routeless veth, no hold of every address"
        assert agent.ds.meta.get(HOLD_REASON) == [UNNOTED], "setup: review 19's U1 fix"
        grant_more(n, agent, [Z])  # a fresh grant, free
        assert add_until(n, agent, "pod3") == Z
        n.step(30)
        host.routes.pop(Z)  # pod3's route and rule go; its veth stays; it runs on
        host.rules.discard(Z)
        agent = answered_start(n, True)  # holds every address for pod3's veth
        assert agent.ds.meta.get(HELD_ALL_META) is not None, "setup: every address held for pod3's veth"
        assert cni(agent, "DEL", "pod3")["ok"]  # pod2 still runs
        offered = offered_within(n, 8)
        assert Y not in offered and agent.ds.recovered_holder(Y) == "unrouted", (
            f"{Y}: let go (held by {agent.ds.recovered_holder(Y)!r}, reason {agent.ds.meta.get(HOLD_REASON)}) "
            f"while pod2 runs: the copy's unnoted hold was to last as before"
        )
    finally:
        n.stop()
