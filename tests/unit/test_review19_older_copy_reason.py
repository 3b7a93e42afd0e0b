"""Review 19, C1 (liveness): an older checkpoint copy (a backup put back, a disk that lost its last
writes: the restore check's case, docs/safety.md row 12) brings back the hold reason (``HOLD_REASON``)
as it was before DELs the process that wrote the copy's successors answered. The DELeted pods' veths
are gone, no DEL will name them again, and the restart unites the copy's reason with the host's
routeless links (``note_hold_reason``): the reason never empties, and the hold of every address
(``HELD_ALL_META``) with the copy's ``?`` holders never ends (the node at its ENI limit serves no new
pod for as long as the checkpoint lasts). The copy's ``release_unwired`` has a host check for pods'
records (a record whose pod the host no longer shows at all is released); the reason has none, on
purpose (a veth gone is not a pod gone: seed 732).

Suggested fix: none that reads the host can be safe (seed 732); the runtime can say it: a CNI GC
(``cni.dev/valid-attachments``) takes out of the reason every link no listed attachment's veth is
named (containerd sends none: there, an operator's command, or the documented cost)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from node_agent.controller import HELD_ALL_META
from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start

X, Y = "10.0.0.50", "10.0.0.51"


@pytest.mark.xfail(
    strict=True,
    reason="open (a leak, never a second holder), review 19, C1: an older copy brings back a reason naming a "
    "pod DELeted since; no DEL names it again and the hold of every address never ends (the host's absence of "
    "its veth is not taken for its pod's end: seed 732); docs/safety.md, 'The host's wiring drawn'",
)
def test_an_older_copy_s_hold_reason_of_a_pod_deleted_since_ends(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        host.flush_routes()  # pod1 runs on: its veth pair, X in its namespace; no route, no rule
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: every address held, for pod1's routeless veth
        n.step(30)
        assert agent.ds.meta.get(HOLD_REASON) == [host_veth_name("pod1", "eth0")], "setup"
        shutil.copytree(n.state, backup)  # the older copy: the hold and its reason
        assert cni(agent, "DEL", "pod1")["ok"]
        for _ in range(4):
            n.step(30)
        assert agent.ds.meta.get(HELD_ALL_META) is None, "setup: the hold ended with pod1's DEL"
        assert host.holders(X) == []
        agent = answered_start(n, False, backup)  # the older copy put back; the allocator: not current
        for _ in range(8):
            n.step(30)
        assert agent.ds.meta.get(HELD_ALL_META) is None, (
            f"every address held again, for the reason {agent.ds.meta.get(HOLD_REASON)}: pod1 was DELeted "
            f"since the copy, its veth is gone, and no DEL will name it again"
        )
    finally:
        n.stop()
