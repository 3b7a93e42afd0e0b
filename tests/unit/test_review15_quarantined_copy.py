"""Review 15, Q1: R1's restore hold (``hold_doubtful``) holds the copy's *free* addresses only; an
address the copy has quarantined (offered) is left offered while a pod the copy lacks carries it.

The copy is the node's state when its report offered Y; the allocator's answer to that report hands
Y back (the node needed it), a pod gets Y, and the writes after the copy are lost. The pod's ``/32``
route and its pod rule then go (a veth set down, a network manager's flush: review 14, R1); its veth
stays. Restored, the copy lists Y quarantined. The wiring check sees no route to disagree with,
``hold_wired`` no route or rule to hold, and ``hold_doubtful`` sees the pod's veth without a route
that no restored pod names, and holds every ``free`` address: ``not a.in_use and a.quarantined_at is
None``, so not Y. Answered "current" (the allocator recorded no report after the copy's: the one
the agent sent after the hand-back lost or not yet read), Y stays offered and is offered again,
dated anew, at the release timeout; the allocator may unassign it from under the running pod (EC2
gives it to another node, docs/safety.md row 2). Answered "not current", ``_restore_stale`` holds
it (``_hold_unknown`` takes quarantined addresses too): that case passes."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.first_start import Node
from tests.helpers.kernel_pods import KernelPods, answered_start, handed_back_after_the_copy, offers_and_adds

X, Y = "10.0.0.50", "10.0.0.51"


def test_a_copy_with_the_address_offered_does_not_offer_it_while_a_routeless_pod_carries_it(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = KernelPods()
    try:
        handed_back_after_the_copy(n, tmp_path / "backup", X, Y)
        agent = answered_start(n, True, tmp_path / "backup")
        offered, others = offers_and_adds(n, agent, 14)  # 420 s: past the release timeout
        assert n.pods.holders(Y) == [("pod1", "eth0")], "setup: pod1 still carries Y"
        assert Y not in offered and Y not in others, (
            f"{Y}: pod1 carries it (its veth is on the host, no route, no rule); the copy had it offered;"
            f" offered again: {Y in offered}, new pods: {others}"
        )
    finally:
        n.stop()
