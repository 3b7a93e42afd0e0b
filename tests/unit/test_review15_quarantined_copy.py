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

import shutil
from pathlib import Path

from tests.helpers.agent_world import give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, Node, add_until
from tests.helpers.kernel_pods import KernelPods, answered_start, offers_and_adds
from warmpool.messages import AllocationResult, Assigned, Released

X, Y = "10.0.0.50", "10.0.0.51"


def _handed_back_after_the_copy(n: Node, backup: Path) -> None:
    agent = n.start()
    first = n.step()
    assert first is not None
    to = {"cluster": first.cluster, "node": first.node, "instance_id": first.instance_id}
    eni = n.imds.enis[PRIMARY.eni_id]
    n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip not in IPS])
    n.imds.add(PRIMARY, [X, Y])
    launch = Released(eni_id=PRIMARY.eni_id, ips=IPS)  # the launch pool, of unknown origin: unassigned
    give(
        agent,
        AllocationResult(**to, in_reply_to=first.seq, actions=[launch, Assigned(eni_id=PRIMARY.eni_id, ips=[X, Y])]),
    )
    n.step()
    offer = None
    for _ in range(8):
        r = n.step(30)
        if r is not None and any(Y in o.ips and not o.unknown for o in r.release):
            offer = r
            break
    assert offer is not None, "setup: the surplus Y is offered"
    shutil.copytree(n.state, backup)  # the copy: Y quarantined, offered in report `offer`
    give(agent, AllocationResult(**to, in_reply_to=offer.seq, actions=[Assigned(eni_id=PRIMARY.eni_id, ips=[Y])]))
    n.step()  # Y handed back
    assert add_until(n, agent, "p0") == X
    assert add_until(n, agent, "pod1") == Y
    assert isinstance(n.pods, KernelPods)
    n.pods.flush_routes()  # pod1 and p0 run on: veths, their addresses in their namespaces
    n.pods.flush_rules()


def test_a_copy_with_the_address_offered_does_not_offer_it_while_a_routeless_pod_carries_it(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = KernelPods()
    try:
        _handed_back_after_the_copy(n, tmp_path / "backup")
        agent = answered_start(n, True, tmp_path / "backup")
        offered, others = offers_and_adds(n, agent, 14)  # 420 s: past the release timeout
        assert n.pods.holders(Y) == [("pod1", "eth0")], "setup: pod1 still carries Y"
        assert Y not in offered and Y not in others, (
            f"{Y}: pod1 carries it (its veth is on the host, no route, no rule); the copy had it offered;"
            f" offered again: {Y in offered}, new pods: {others}"
        )
    finally:
        n.stop()
