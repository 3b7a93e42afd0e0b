"""Review 15, D1: O1's hand-off makes an ``unrouted`` holder of an address a running pod carries,
and the doubtful record's own DEL, sent again, frees it (U1-leak's release).

The CNI spec lets the runtime call DEL more than once, and libcni keeps the attachment's cached
ADD result, passed to every DEL as ``prevResult``, until a DEL succeeds as far as the runtime saw
(``CNIConfig.DelNetworkList``, libcni/api.go: ``cacheDel`` only after every plugin answered
success). A DEL the agent carried out but whose answer the runtime did not get (the plugin's
``WARMPOOL_CNI_TIMEOUT_S`` passed, the runtime's context ended, the agent restarted between its
write and its answer) is sent again, with the same cached result.

The fourteenth review's O1 setting: an older copy names ``old`` as X's holder; ``run`` carries X,
its route gone. ``old``'s cached result names X (its ADD got X; its DEL to the process whose
writes were lost was answered to the agent, not to the runtime). Restored, ``old``'s record is
doubtful; its DEL hands X to ``unrouted`` (``Datastore.release``, ``HOLD_ON_RELEASE``), as O1's fix
means it to. The DEL is sent again: no record, ``prevResult`` names X, X is held by ``unrouted``,
so ``CniService._delete`` tears down X's rules and releases X: the next pod gets it while ``run``
carries it. docs/safety.md argues U1-leak's release needs "a second checkpoint loss with its route
alone flushed"; O1's hold reaches the same state after one older copy.

With ``run``'s pod rule gone too (review 14, R1's flush), ``release_unwired`` makes the hand-off at
the restore itself (nothing on the host names X), and the runtime's first retry frees X: one lost
answer, not two (the second test)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until
from tests.helpers.kernel_pods import KernelPods, answered_start, copy_then_deleted, offers_and_adds

X = "10.0.0.50"


def test_the_doubtful_records_del_sent_again_does_not_free_the_running_pods_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = copy_then_deleted(n, backup, X)  # the older copy: "old" holds X; old's DEL answer lost
        assert add_until(n, agent, "run") == X
        n.step(30)
        host.flush_routes()  # run's veth and pod rule stay; its /32 route went
        agent = answered_start(n, True, backup)
        assert cni(agent, "DEL", "old", prev_ip=X)["ok"]  # the runtime's retry: X to 'unrouted' (O1)
        assert agent.ds.recovered_holder(X) == "unrouted", "setup: O1's hand-off"
        assert cni(agent, "DEL", "old", prev_ip=X)["ok"]  # and again (its answer lost too)
        offered, others = offers_and_adds(n, agent)
        assert X not in offered and X not in others, (
            f"{X}: 'run' carries it (namespaces: {host.holders(X)}); a DEL of 'old' sent again freed it"
            f" (new pods: {others})"
        )
    finally:
        n.stop()


def test_with_the_running_pods_rule_gone_too_the_first_retry_does_not_free_its_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = copy_then_deleted(n, backup, X)  # the older copy: "old" holds X; old's DEL answer lost
        assert add_until(n, agent, "run") == X
        n.step(30)
        host.flush_routes()  # run runs on: its veth pair, X in its namespace; no route, no rule
        host.flush_rules()
        agent = answered_start(n, True, backup)
        assert agent.ds.recovered_holder(X) == "unrouted", "setup: the restore handed X to 'unrouted'"
        assert cni(agent, "DEL", "old", prev_ip=X)["ok"]  # the runtime's retry
        offered, others = offers_and_adds(n, agent)
        assert X not in offered and X not in others, (
            f"{X}: 'run' carries it (namespaces: {host.holders(X)}); the retried DEL of 'old' freed it"
            f" (new pods: {others})"
        )
    finally:
        n.stop()
