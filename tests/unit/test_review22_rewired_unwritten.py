"""Review 22, R6 (liveness: the hold of every address for as long as the checkpoint lasts; review 19's
W1b and review 20's W1c again, new in b7123a0): ``CniService._rewired`` ends a veth's part of a
start's hold in memory and swallows the write's failure ("this ADD's flush writes it"). But the ADD
may never flush: in ``_known_again``'s "carries nothing" case ``_rewired`` runs before the ADD takes
an address, and an ADD that finds none free is answered code 11 without a flush (an ADD that got one
fails its flush and is answered code 5). The runtime may then give up and send the DEL; that DEL
finds nothing of the hold left in memory (``_holds_named_for`` false), ``_holds_unwritten`` is not
set (only DEL paths set it), so it writes nothing and is answered success while the disk still
names the veth in ``HOLD_REASON``. A stop before a pass writes (a crash, an OOM kill, a drain) and
the restart restores that reason; no runtime sends that DEL again: every address held for good.

Steps: pod1 on 10.0.0.50; 10.0.0.51 and .52 granted; pod2's ADD cut after its veth pair, before
its address; the agent restarted on its checkpoint (answered current): every free address held for
pod2's veth. The disk fails (ENOSPC); pod2's retried ADD (refused: nothing free) and then its DEL.
If the DEL is answered, the end of the hold must be on disk.

Fix: set ``_holds_unwritten`` when ``_rewired``'s write fails (or have ``_rewired`` not swallow it
in the "carries nothing" case), as ``_delete`` does for ``_end_holds_of``. Fixed so (failed on b7123a0)."""

from __future__ import annotations

from pathlib import Path

from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start, writes_fail


def test_a_del_after_a_rewired_write_failed_is_answered_only_once_the_end_of_the_hold_is_on_disk(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, ["10.0.0.51", "10.0.0.52"])
        veth2 = host_veth_name("pod2", "eth0")
        host.veth_of[("pod2", "eth0")] = veth2  # pod2's ADD cut after the veth pair, before its address
        agent = answered_start(n, True)
        assert agent.ds.meta.get(HOLD_REASON) == [veth2], "setup: the start holds every address for pod2's veth"
        with writes_fail(agent):
            assert cni_add(agent, "pod2") is None, "setup: nothing free while the hold stands"
            answered = cni(agent, "DEL", "pod2")["ok"]  # the runtime gives up on pod2
        if answered:
            assert veth2 not in (n.meta().get(HOLD_REASON) or []), (
                "pod2's DEL was answered while the disk still names its veth in the hold's reason; a restart "
                "now holds every address for good (no runtime sends that DEL again)"
            )
    finally:
        n.stop()
