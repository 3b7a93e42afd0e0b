"""Review 15, C1: on a node whose first start the allocator confirmed (``WARMPOOL_ADOPT_LAUNCH_POOL``),
the fourteenth review's R1 hold after a restore does not hold what IMDS alone shows.

``hold_doubtful`` holds "every free address as the rebuild does (by ``?``), and what IMDS alone
shows later (``HELD_ALL_META``)" when a pod veth with no route is one the copy names no pod for.
Its ``free`` set is the copy's addresses; one the copy lacks (a copy from before its grant) comes
in at the start's resync or later, and ``PoolController._hold_unknown`` reads ``HELD_ALL_META``
only when the resync calls it: ``_holds_learnt`` (a checkpoint lost once in the node's history,
``rebuilt_seq``). A confirmed first start clears ``rebuilt_seq`` (``_adopt_first_start``), so on
such a node the address is added free, and ``current`` (the grant replied to the copy's last
report, and no report followed: what the allocator answers) gives it to the next pod while the pod
whose route and rule went carries it. The same copy and host on a node that took the lost way at
its first start pass (``test_review14_o1_variants.py``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.agent_world import give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, add_until, answer
from tests.helpers.kernel_pods import KernelPods, answered_start, offers_and_adds
from warmpool.messages import AllocationResult, Assigned

X = "10.0.0.50"


@pytest.fixture
def n(tmp_path: Path) -> Iterator[Node]:
    node = Node(tmp_path)  # WARMPOOL_ADOPT_LAUNCH_POOL=true: its first start is confirmed below
    node.pods = KernelPods()
    try:
        yield node
    finally:
        node.stop()


def _confirmed_then_granted_after_the_copy(n: Node, backup: Path) -> None:
    agent = n.start()
    first = n.step()
    assert first is not None and first.first_start is True
    give(agent, answer(first, confirmed=True))
    n.step()
    assert agent.controller.stats.first_starts_confirmed == 1, "setup: the first start is confirmed"
    for _ in range(3):
        n.step(30)
    shutil.copytree(n.state, backup)  # the copy: X not granted yet
    sent = len(n.sqs.sent)
    n.imds.add(PRIMARY, [X])
    to = {"cluster": first.cluster, "node": first.node, "instance_id": first.instance_id}
    give(
        agent,
        AllocationResult(
            **to, in_reply_to=agent.controller.last_seq, actions=[Assigned(eni_id=PRIMARY.eni_id, ips=[X])]
        ),
    )
    n.step()
    assert add_until(n, agent, "early") != X  # the launch pool's free address goes first
    assert add_until(n, agent, "pod1") == X
    assert len(n.sqs.sent) == sent, "setup: no report after the copy (the allocator says current)"
    assert isinstance(n.pods, KernelPods)
    n.pods.flush_routes()  # pod1 runs on: its veth pair, X in its namespace; no route, no rule
    n.pods.flush_rules()


def test_on_a_confirmed_node_a_copy_from_before_the_grant_holds_the_address_of_a_pod_whose_route_and_rule_went(
    n: Node, tmp_path: Path
) -> None:
    _confirmed_then_granted_after_the_copy(n, tmp_path / "backup")
    agent = answered_start(n, True, tmp_path / "backup")
    offered, others = offers_and_adds(n, agent, 8)
    assert X not in offered and X not in others, (
        f"{X}: pod1 carries it (its veth is on the host, no route, no rule) and the copy lacks it;"
        f" offered: {sorted(offered)}, new pods: {others}; namespaces: {n.pods.holders(X)}"  # type: ignore[attr-defined]
    )
