"""Review 20, W1c (liveness: the hold of every address for as long as the checkpoint lasts): review
19's fix answers a DEL that ended a start's hold only once that is on disk, and keeps a flag
(``CniService._holds_unwritten``) so that the runtime's retry of a DEL refused so writes again even
when it finds nothing left to change. The flag is set only *after* ``_end_holds_of`` returns; but
``_end_holds_of`` changes memory inside ``ds.batch()``, whose own write is the one that fails, so
it raises out before the flag is set. The retry then finds the hold already ended in memory
(``_holds_named_for`` is false), the flag false, writes nothing and is answered success while the
disk still names the pod's veth in ``HOLD_REASON``.

Steps: a rebuild holds every address for pod1's routeless veth; the disk fails (ENOSPC); pod1's
DEL is refused (code 11, right); the runtime retries while the disk still fails: answered. The
agent stops before a pass writes (a crash, an OOM kill, a node drain). The restart restores the
reason naming pod1's veth (united with the host's, ``note_hold_reason``) and no runtime sends that
DEL again: every address held for good, new pods wait on a node at its ENI limit. The contrast
(the retry after the writes work) is review 19's first test.

Suggested fix: set the flag in ``_delete``'s ``except CheckpointWriteError`` too (or set it before
calling ``_end_holds_of``, or flush whenever ``ds.dirty``), so that a retry is answered only once
the checkpoint is written."""

from __future__ import annotations

from pathlib import Path

from node_agent.controller import HELD_ALL_META
from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, writes_fail

X, Y = "10.0.0.50", "10.0.0.51"
VETH1 = host_veth_name("pod1", "eth0")


# fixed: a failed write of the end of a hold sets _holds_unwritten, so the retry writes before it is answered
def test_a_retried_del_is_not_answered_while_the_end_of_the_hold_is_still_not_on_disk(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        host.flush_routes()  # pod1 runs on: its veth pair, X in its namespace; no route, no rule
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: every address held, for pod1's routeless veth
        assert agent.ds.recovered_holder(X) == "?", "setup: the rebuild holds every address"
        assert agent.ds.meta.get(HOLD_REASON) == [VETH1]
        with writes_fail(agent):
            assert not cni(agent, "DEL", "pod1")["ok"], "setup: refused while the end of the hold is not on disk"
            retried = cni(agent, "DEL", "pod1")["ok"]  # the runtime's retry, the disk still full
        assert n.meta().get(HOLD_REASON) == [VETH1], "setup: the disk still names pod1's veth"
        assert host.holders(X) == []
        if retried:
            # answered: the runtime never sends this DEL again; the agent stops before a pass writes
            agent = answered_start(n, True)
            for _ in range(8):
                n.step(30)
            assert agent.ds.meta.get(HELD_ALL_META) is None, (
                f"every address still held for the reason {agent.ds.meta.get(HOLD_REASON)}: pod1's DEL "
                f"was answered (its retry) before the end of the hold was on disk, and no DEL names "
                f"{VETH1} again"
            )
    finally:
        n.stop()
