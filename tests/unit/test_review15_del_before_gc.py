"""Review 15, L2: O1's address is lost for good when the running pod's DEL comes before the copy's
record goes, the order containerd gives (it calls no CNI GC).

The fourteenth review's O1 setting: an older copy names ``old`` as X's holder; ``old`` was DELeted
since and ``run`` got X; ``run``'s ``/32`` route went. Restored, ``old``'s record keeps X (``run``'s
pod rule names X) and is doubtful (``HOLD_ON_RELEASE``). docs/safety.md says what that costs: "that
record's address stays held when the pod goes, by `unrouted` ... (a leak until the DEL of the pod
that uses it names it in its `prevResult`". That holds when the record goes first (GC, then
``run``'s DEL). In the other order:

* ``run``'s DEL (its cached result naming X, as libcni sends it) finds no record of ``run``, and X
  held by ``old``'s record, not by ``unrouted``: ``CniService._unrouted_of`` gives None, nothing is
  released, and ``teardown`` without an address leaves X's pod rule;
* with GC (CRI-O), ``old``'s record is released after that: X to ``unrouted``, and no DEL will ever
  name X again (``run``'s was answered; libcni dropped its cache);
* with no GC (containerd), ``old``'s record stays: X's rule is still on the host, so every later
  restore keeps ``old`` (``unwired_pods``), now as a trusted record (no routeless veth is left).

Either way X never returns to the pool: held for as long as the checkpoint lasts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until
from tests.helpers.kernel_pods import KernelPods, answered_start, assert_not_given, copy_then_deleted, runtime_gc

X = "10.0.0.50"


def _holder(agent: Any) -> str | None:
    """Who holds X: a pod's record, or a recovered holder; None when it is free."""
    rec = [p.container_id for p in agent.ds.pods() if p.ip == X]
    return rec[0] if rec else agent.ds.recovered_holder(X)


@pytest.mark.parametrize(
    "runtime",
    [
        # closed since the holds let go (node_agent.agent.lift_unfounded_holds): the record's release
        # made X an ``unrouted`` holder, whose reason (run's routeless veth) is gone
        "gc-after-the-del",
        pytest.param(
            "no-gc",
            marks=pytest.mark.xfail(
                strict=True,
                reason="open (a leak, never a second holder): old's record stays, trusted once no routeless veth "
                "is left (X's pod rule is still on the host), and a DEL does not trust its prevResult, which may "
                "be of an earlier ADD whose address another pod got since (review 17); docs/safety.md, the "
                "seventeenth review",
            ),
        ),
    ],
)
def test_x_returns_once_both_the_running_pod_and_the_copys_record_are_gone(tmp_path: Path, runtime: str) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = copy_then_deleted(n, backup, X)  # the older copy: "old" holds X
        assert add_until(n, agent, "run") == X
        n.step(30)
        host.flush_routes()  # run's veth and pod rule stay; its /32 route went
        agent = answered_start(n, True, backup)
        n.step(61)
        assert cni(agent, "DEL", "run", prev_ip=X)["ok"]  # run ends; libcni passes its cached result
        assert host.holders(X) == [], "setup: no pod carries X any more"
        if runtime == "gc-after-the-del":
            assert runtime_gc(agent, [])["ok"]  # the runtime lists neither
        else:
            agent = answered_start(n, True)  # a later restart, on the node's own checkpoint
        for _ in range(4):
            n.step(30)
        assert _holder(agent) is None, (
            f"{X}: no pod carries it (run DELeted, old long gone); still held by {_holder(agent)!r}"
            f" (pod rules for it on the host: {X in host.rules})"
        )
    finally:
        n.stop()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = KernelPods()
    try:
        yield n
    finally:
        n.stop()


def test_an_older_attachments_del_sent_again_leaves_the_doubtful_records_hold(node: Node, tmp_path: Path) -> None:
    """The bound of L2's release: a DEL whose cached result names X, of an attachment whose veth is
    gone (``q``: its DEL carried out, its answer lost, sent again), is not the running pod; X's
    doubtful record must still hand X on when the runtime's GC ends it, as ``run`` carries X."""
    agent = copy_then_deleted(node, tmp_path / "backup", X)  # the older copy: "old" holds X
    assert add_until(node, agent, "q") == X
    assert cni(agent, "DEL", "q", prev_ip=X)["ok"]  # carried out; the runtime never got the answer
    assert add_until(node, agent, "run") == X
    node.step(30)
    node.pods.flush_routes()  # type: ignore[attr-defined]  # run's veth and pod rule stay; no route
    agent = answered_start(node, True, tmp_path / "backup")
    node.step(61)
    assert cni(agent, "DEL", "q", prev_ip=X)["ok"]  # the runtime's retry
    assert runtime_gc(agent, ["run"])["ok"]  # old is no attachment of the runtime's
    assert_not_given(node, agent, X, "run", "q's DEL sent again let the GC of old free it")
