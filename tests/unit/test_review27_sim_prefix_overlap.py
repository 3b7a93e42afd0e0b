"""Review 27, M1 (model divergence): the simulation's ``cni-overlap`` set-up failing ``addressed``
(9dbe1f6) reaches ``SimPods._setup``'s pair-making for a running pod, and after a veth prefix change
(``host-wiring``'s ``prefix-changed``: the running pod's pair is ``eni…``, the agent's prefix now
``wpod``) the model takes the pod's pair for the new prefix's: it says the set-up *made* the pair
(``made_pair=True``), moves the pod's interface to the new address under a ``wpod…`` host end, and
forgets the ``eni…`` pair; the failed ADD then tears the ``wpod…`` pair down and the running pod is
left with no pair at all in the model (what seed 6439's fix stopped the model from doing).

``node_agent.hostnet.setup_pod`` does otherwise: the host end of this prefix's name does not
exist, the pod's ``eth0`` does and is not its peer (``_paired`` is false), so it raises
``PodRefused`` before it changes anything ("interface eth0 already exists ... and is not this pod's
veth"), and the exception says ``SetupLeft(made_pair=False, addressed=False)``: the agent releases
the new address and the pod keeps its ``eni…`` pair and address. ``SimPods.links`` shows a pod's
namespace with ``lo`` alone ("the model keeps pod veths apart"), so the model never refuses there.

Seed 6439 with the stage forced to ``addressed`` prints ``route to 10.0.0.38 via wpod72134c5a7b4``
for n1-p9: a set-up no node would reach. The fix to weigh: ``SimPods._setup`` refuses, as
``setup_pod`` does, an attachment whose pod-side interface is the peer of another prefix's veth
(``veth_of`` under another prefix), whatever the ``fail`` stage.

Fixed so in stop 49 (the strict xfails removed)."""

from __future__ import annotations

import pytest

from node_agent.hostnet import PodRefused, SetupLeft, setup_left
from simulation.node import SimPods

NETNS = "/var/run/netns/p9"


class _World:
    def now(self) -> float:
        return 0.0

    def note_carried(self, node: str, key: tuple[str, str], ip: str) -> None:
        pass


def _after_a_prefix_change() -> tuple[SimPods, str]:
    pods = SimPods(_World(), "n1")  # type: ignore[arg-type]
    pods.setup(NETNS, "eth0", "p9", "10.0.0.10", 254, 9001)
    old = pods.veth_of[("p9", "eth0")]
    pods.prefix = "wpod"  # the agent restarted with another veth prefix; p9 runs on its eni… pair
    return pods, old


def test_a_failed_second_add_after_a_prefix_change_is_refused_as_setup_pod_refuses_it() -> None:
    pods, old = _after_a_prefix_change()
    pods.fail["p9"] = "addressed"
    with pytest.raises(Exception) as got:
        pods.setup(NETNS, "eth0", "p9", "10.0.0.32", 254, 9001)
    assert setup_left(got.value) == SetupLeft(made_pair=False, addressed=False), (
        f"the model says {setup_left(got.value)}; setup_pod refuses before anything (eth0 is not its veth's peer)"
    )
    assert isinstance(got.value, PodRefused)
    assert pods.veth_of[("p9", "eth0")] == old and pods.wired[("p9", "eth0")] == "10.0.0.10", (
        "the running pod's eni… pair and address are as they were"
    )


def test_a_second_add_after_a_prefix_change_leaves_the_running_pod_s_pair() -> None:
    pods, old = _after_a_prefix_change()
    with pytest.raises(PodRefused):
        pods.setup(NETNS, "eth0", "p9", "10.0.0.32", 254, 9001)
    assert pods.veth_of[("p9", "eth0")] == old and pods.wired[("p9", "eth0")] == "10.0.0.10"
