"""Review 25 of review 23's G1 fix (00f7812): the note ``FAILED_ADD_HOLDS`` of a holder
``CniService._hold_for_veth`` made.

N1 (a leak, small): the note is keyed by the holder's name under the veth prefix of the agent
that made it, and the attachment's DEL drops it only under *this* agent's prefix
(``_delete``: ``if holder in noted``). After ``WARMPOOL_VETH_PREFIX`` changed across a restart,
the DEL releases the address all the same (``_end_holds_of`` finds the holder under the other
prefix, ``veths_of``), but the note stays: in the checkpoint for as long as it lasts on a runtime
that never sends CNI GC (GC is CNI 1.1; before it, nothing else drops a note), and with it the
attachment's ``_made`` entry (``gc`` keeps every noted attachment's). A later GC that lists the
attachment no more drops it (its holder holds nothing). Nothing is given twice; the note merely
outlives what it stood for.

Suggested fix: drop, in ``_end_holds_of`` (which already walks the attachment's holders under
every prefix), the notes of the holders it releases; or key the note's drop in ``_delete`` on
``veths_of(cid, ifname, noted, prefix)``.

Fixed in stop 48: the DEL drops the attachment's note under any prefix (its container id and
interface); the test was a strict xfail.
"""

from __future__ import annotations

from pathlib import Path

from node_agent.datastore import FAILED_ADD_HOLDS
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, grant
from tests.helpers.kernel_pods import FailingPods, answered_start

Y = "10.0.0.51"
OLD = host_veth_name("pod2", "eth0", "eni")


def test_the_del_after_a_veth_prefix_change_drops_the_failed_add_s_note(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    try:
        host = n.pods = FailingPods()
        grant(n, n.start(), [Y])
        host.half.add("pod2")
        host.stuck.add("pod2")
        assert cni_add(n.agent, "pod2") is None, "setup: pod2's ADD failed (wiring, then teardown)"
        assert n.agent.ds.meta.get(FAILED_ADD_HOLDS) == {OLD: ["pod2", "eth0", "warmpool"]}
        host.half.clear()
        host.stuck.clear()
        agent = answered_start(n, True, WARMPOOL_VETH_PREFIX="wp")  # the setting changed
        assert agent.ds.recovered_holder(Y) == OLD, "setup: Y still held for pod2's veth"
        assert cni(agent, "DEL", "pod2")["ok"]
        assert agent.ds.recovered_holder(Y) is None, "evidence: the DEL released Y"
        assert agent.ds.meta.get(FAILED_ADD_HOLDS) is None, (
            f"pod2 DELeted, Y released; its note stays: {agent.ds.meta.get(FAILED_ADD_HOLDS)}"
        )
    finally:
        n.stop()
