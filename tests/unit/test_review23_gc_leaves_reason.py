"""Review 23, G2 (liveness: every free address held for good): CNI GC releases the record of an
attachment the runtime no longer lists, but leaves that attachment's veth in a start's hold reason
(``HOLD_REASON``). Only ``CniService._end_holds_of`` takes a veth out, and only a DEL calls it; the
GC is the runtime's word that no DEL will come.

The add-cut case stop 47 fixed for a retried ADD, with the runtime giving up instead of retrying:
an ADD cut after its record was written, before the pod's route and rule (the agent killed). The
restart restores the record, sees the attachment's veth with no route and no rule (so the record
does not name it: review 15, N1) and holds every free address for it, the veth the hold's reason.
The runtime's cleanup DEL of the failed sandbox found the agent down (CRI-O logs it and removes the
sandbox, its namespace and the veth pair with it); its next GC does not list the attachment, and
the GC tears down and releases the record's address. The veth stays in the reason: the hold of
every free address never ends (``lift_unfounded_holds`` waits for an empty reason): what it holds
(every free address but the GCed record's) is neither handed out nor offered back, the node's new
pods wait beside it once that one is used, and a restart keeps the reason (``note_hold_reason`` keeps what the
copy noted). The docs say GC leaves reasons alone because "a holder's network is not known"; a
record's is (``PodRecord.network``, the GC's own filter), and so is its veth's name.

The GC of a record should end what a start held for its veth (as its DEL does)."""

from __future__ import annotations

from pathlib import Path

from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni_add
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start, offered_within, runtime_gc

Y, Z = "10.0.0.51", "10.0.0.52"


def test_the_gc_of_a_cut_add_s_record_ends_the_hold_made_for_its_veth(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, [Y, Z])
        got = cni_add(n.agent, "pod2")
        assert got is not None, "setup: pod2's ADD recorded"
        # the ADD cut after its record was on disk, before the route and the rule
        host.routes.pop(got, None)
        host.rules.discard(got)
        veth = host_veth_name("pod2", "eth0", "eni")
        agent = answered_start(n, True)
        assert veth in (agent.ds.meta.get(HOLD_REASON) or []), "setup: the start holds every address for pod2's veth"
        assert cni_add(agent, "pod3") is None, "setup: every free address held"
        # The runtime removed the failed sandbox (its namespace, the veth pair with it); its DEL
        # found the agent down. Its GC lists pod1 alone.
        del host.veth_of[("pod2", "eth0")]
        host.wired.pop(("pod2", "eth0"), None)
        n.step(61)
        assert runtime_gc(agent, ["pod1"])["ok"]
        assert agent.ds.lookup("pod2", "eth0") is None, "setup: the GC released pod2's record"
        offered = offered_within(n, 3)
        assert Z in offered and agent.ds.recovered_holder(Z) is None, (
            f"{Z} still held by {agent.ds.recovered_holder(Z)!r} (offered {offered}): pod2 is gone (its record GCed, "
            f"its veth gone), and the hold reason still names {agent.ds.meta.get(HOLD_REASON)}"
        )
    finally:
        n.stop()
