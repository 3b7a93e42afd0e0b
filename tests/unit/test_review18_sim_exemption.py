"""Review 18, E1 (the simulation's check, not the agent): ``simulation.checks.held_for_routeless_pods``
exempts a node from every end-of-run settle check (``not-settled`` for waiting pods, a pool short
of its targets, idle addresses not offered) as soon as one link named in ``HOLD_REASON_META`` is on
the host. Its comment says why: "pods the host shows with no route run on ... it holds every address
while they run". It checks neither half:

* that the link still has no route: the DEL and ADD of one attachment (the simulation's own
  ``cni-readd``) make a new veth pair of the same name, routed, and the node is exempt for as long
  as the new pod runs (review 18, N2: the agent's hold does not end either, so the exemption hides
  that liveness defect instead of reporting it);
* that every address is held: ``HOLD_REASON_META`` is noted as well for an ``unrouted`` holder or a
  doubtful record's hand-on alone (``note_hold_reason``), a hold of one or two addresses with the rest
  of the pool free; a node that does not settle then is a defect the exemption hides.

Neither hides a second holder (those checks run at every step), only liveness defects. Fixed: the
exemption needs the hold of every address, and a reason veth of a pod the node's runtime still runs
(not one the host shows: a DEL ends the reason, whatever is made under the name after)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from node_agent.agent import HOLD_REASON_META
from node_agent.controller import HELD_ALL_META
from node_agent.hostnet import host_veth_name
from simulation.checks import held_for_routeless_pods

VETH = host_veth_name("pod1", "eth0")


def _agent(
    meta: dict[str, Any], running: list[str], *, adding: tuple[str, ...] = (), routes: dict[str, str] | None = None
) -> Any:
    """A node whose runtime runs ``running`` and ADDs ``adding`` (container ids, interface ``eth0``),
    whose host routes ``routes`` (address -> link; none by default)."""
    return SimpleNamespace(
        ds=SimpleNamespace(meta=meta),
        rt=SimpleNamespace(up=dict.fromkeys(running, "10.0.0.9"), adding=dict.fromkeys(adding), deleting={}),
        pods=SimpleNamespace(routes=routes or {}, moved=set()),
        veth_prefix="eni",
    )


def test_a_reason_veth_whose_pod_runs_under_a_hold_of_every_address_is_exempt() -> None:
    """The case the exemption is for (passes)."""
    assert held_for_routeless_pods(_agent({HOLD_REASON_META: [VETH], HELD_ALL_META: 1.0}, ["pod1"]))


def test_a_reason_veth_whose_pod_was_deleted_is_not_exempt() -> None:
    """Since the exemption asks the runtime, not the host: pod1 DELeted (and its attachment maybe
    made again under the same veth name, E1's first half), the reason no longer stands."""
    assert not held_for_routeless_pods(_agent({HOLD_REASON_META: [VETH], HELD_ALL_META: 1.0}, ["pod2"]))


def test_a_reason_without_the_hold_of_every_address_is_not_exempt() -> None:
    assert not held_for_routeless_pods(_agent({HOLD_REASON_META: [VETH], HELD_ALL_META: None}, ["pod1"])), (
        "no hold of every address (an unrouted holder of one address at most): the rest of the pool is free, "
        "and a node that does not settle is not explained by the routeless pod"
    )


def test_a_reason_veth_routed_since_is_not_exempt() -> None:
    """E1's first half, for a pod that runs on: its veth routed since its start's hold (the ADD the
    runtime retried after the agent was killed in it, ``add-cut``), its namespace carries the address
    that ADD recorded alone; the hold stands for no unknown address."""
    routed = {"10.0.0.9": VETH}
    assert not held_for_routeless_pods(_agent({HOLD_REASON_META: [VETH], HELD_ALL_META: 1.0}, ["pod1"], routes=routed))


def test_a_reason_veth_whose_add_the_runtime_retries_is_not_exempt() -> None:
    """No pod runs there before an ADD is answered, whose set-up gives it its recorded address alone:
    the node's other pods waiting meanwhile are not explained by it (``add-cut``)."""
    assert not held_for_routeless_pods(_agent({HOLD_REASON_META: [VETH], HELD_ALL_META: 1.0}, [], adding=("pod1",)))
