"""Seed 6439 (stop 48's sweep of seeds 0-9999, failing on stop 47's code too; ``warmpool sim --seed
6439 --keep 5,6,11,18,19,20``): ``released-in-use``, from the simulation's model, not the agent.

n1's pod n1-p9 ran on 10.0.0.10 through veth ``eni72134c5a7b46``; the agent restarted with another
veth prefix (``host-wiring``'s ``prefix-changed``: ``wpod``) on an older copy. A second ADD for the
running pod (``cni-overlap``) took 10.0.0.32, its set-up failed, and the agent tore it down:
``hostnet.teardown_pod`` removes the attachment's veth under the agent's prefix (``wpod…``, which
does not exist) and the rules and routes of 10.0.0.32. The model (``SimPods.teardown``) removed the
pod's ``eni…`` veth too, as if the runtime had deleted its namespace, and with it 10.0.0.10's
route: a running pod with a rule and no veth or route, which the agent cannot tell from a rule a
deleted pod left (docs/safety.md, reviews 19 and 20: open by design). A later start held 10.0.0.10
by ``unrouted`` while another veth had no route, let it go when that veth's question was settled,
and the allocator unassigned it under the running pod. Now the model removes another prefix's
veth only when the runtime deletes the namespace (``SimPods.namespace_gone``, after a DEL), as
the kernel does."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim

SHRUNK = [5, 6, 11, 18, 19, 20]


@pytest.mark.parametrize("keep", [SHRUNK, None], ids=["shrunk", "whole"])
def test_seed_6439_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(6439, keep, shrink=False)
    assert not r.violations, r.violations
    assert sum(n for k, n in r.faults.items() if k.startswith("cni-overlap")) >= 1


def test_a_failed_second_add_after_a_prefix_change_leaves_the_running_pod_s_veth() -> None:
    """The running pod keeps its ``eni…`` pair through a second ADD under ``wpod``: the set-up
    refuses another prefix's pair before it changes anything, as ``hostnet.setup_pod`` does (review
    27, M1), and says it made nothing, so the failed ADD tears nothing down (seed 14955's rule). A
    teardown itself (a DEL's, a GC's) now removes the attachment's veth under any prefix, as
    ``hostnet.teardown_pod`` does since stop 49 (seed 6659); before, this test held the model to a
    teardown that left another prefix's veth, the protection 6439 had then."""
    from node_agent.hostnet import PodRefused, SetupLeft, setup_left
    from simulation.node import SimPods

    class W:
        def now(self) -> float:
            return 0.0

        def note_carried(self, node: str, key: tuple[str, str], ip: str) -> None:
            pass

    pods = SimPods(W(), "n1")  # type: ignore[arg-type]
    pods.setup("/var/run/netns/p9", "eth0", "p9", "10.0.0.10", 254, 9001)
    old = pods.veth_of[("p9", "eth0")]
    pods.prefix = "wpod"
    with pytest.raises(PodRefused) as got:
        pods.setup("/var/run/netns/p9", "eth0", "p9", "10.0.0.32", 254, 9001)
    assert setup_left(got.value) == SetupLeft(made_pair=False, addressed=False)
    assert pods.veth_of[("p9", "eth0")] == old and pods.routes["10.0.0.10"] == old
    pods.teardown("p9", "eth0", "10.0.0.10")  # the pod's DEL, under the new prefix
    assert ("p9", "eth0") not in pods.veth_of and "10.0.0.10" not in pods.routes
