"""Review 15, L3: a DEL that finds a record ignores its ``prevResult``, so an ``unrouted`` holder of
the address the runtime names is never released (lost for good).

N1's setting with the pod rule kept: an older copy names ``p`` as X's holder; after it, ``p`` was
DELeted and ADDed again and got Y; then its ``/32`` route went (its veth and its rule for Y stay).
Restored, ``hold_wired`` holds Y by ``unrouted`` (a pod rule, a veth with no route), and ``p``'s
record keeps X. ``p``'s DEL carries its cached result (Y): ``CniService._delete`` finds the record,
tears down and releases X, and reads no ``prevResult`` (``_unrouted_of`` only when no record is
found). Y stays held by ``unrouted``, its pod rule on the host, and no other DEL will name it:
every later start holds it again (the rule is still there)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, assert_not_given, contradicted_start

X, Y = "10.0.0.50", "10.0.0.51"
ENV = {"IP_COOLDOWN_PERIOD": "30"}


def _added_again_after_the_copy(n: Node, backup: Path) -> Any:
    """p gets X, the copy is written (p holds X), p is DELeted and ADDed again (Y); the agent."""
    agent = n.start(**ENV)
    grant(n, agent, [X, Y])
    assert add_until(n, agent, "p") == X
    n.step(30)
    shutil.copytree(n.state, backup)  # the older copy: p holds X
    assert cni(agent, "DEL", "p")["ok"]
    assert cni_add(agent, "p") == Y, "setup: X cools down, the ADD again gets Y"
    return agent


# Closed since a start's hold ends with the DELs of its pods (docs/safety.md, "The host's wiring
# drawn"): p's DEL takes p's veth out of the hold's reason, and with none left Y is let go.
def test_the_del_of_a_pod_added_again_after_the_copy_releases_the_address_its_runtime_names(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = _added_again_after_the_copy(n, backup)
        host.flush_routes()  # p's veth and its rule for Y stay
        agent = contradicted_start(n, backup, **ENV)
        assert agent.ds.recovered_holder(Y) == "unrouted", "setup: the restore holds Y (a rule, no route)"
        assert cni(agent, "DEL", "p", prev_ip=Y)["ok"]  # p ends; libcni passes its cached result
        assert host.holders(Y) == [], "setup: no pod carries Y any more"
        agent = answered_start(n, True, None, **ENV)  # a later restart, on the node's own checkpoint
        assert agent.ds.recovered_holder(Y) is None, (
            f"{Y}: p, its only pod, is gone; still held by {agent.ds.recovered_holder(Y)!r}"
            f" (its pod rule on the host: {Y in host.rules})"
        )
    finally:
        n.stop()


def test_the_del_of_that_pod_sent_again_after_its_veth_went_leaves_the_address_another_pod_got(
    tmp_path: Path,
) -> None:
    """The bound of L3's release: the DEL finds the copy's record and its cached result names an
    ``unrouted`` address, but the attachment's veth is gone (its DEL was carried out, its answer
    lost; the runtime sends it again). The address it names went to another pod since, whose route
    went: the retry must not free it."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = _added_again_after_the_copy(n, backup)
        assert cni(agent, "DEL", "p", prev_ip=Y)["ok"]  # carried out; the runtime never got the answer
        assert add_until(n, agent, "w") == X
        assert add_until(n, agent, "z") == Y
        host.flush_routes()  # w and z run on: their veths and pod rules; no routes
        agent = answered_start(n, True, backup, **ENV)
        assert agent.ds.recovered_holder(Y) == "unrouted", "setup: the restore holds Y (a rule, no route)"
        assert cni(agent, "DEL", "p", prev_ip=Y)["ok"]  # the runtime's retry, its cached result naming Y
        assert_not_given(n, agent, Y, "z", "p's DEL sent again freed it")
    finally:
        n.stop()
