"""Review 21, R1: a re-plan inside one invocation (``PlanExecutor.run`` -> ``_replan``) plans the
node again from the same report on a refreshed Describe, and nothing keeps it consistent with
the calls the first plan already made. When the first plan handed an offered address back
(``Reclaim``: pods need it) and a later call of that plan is refused and re-planned, the re-plan
may find the node no longer short (the refreshed Describe shows more than the one the plan was
made on: eventually consistent, docs/safety.md row 7) and plan an Unassign of the same offered
address. The answer then says, in this order, ``assigned`` x (a hand-back: the agent puts x back
in its pool at once, ``PoolController._apply_addresses`` -> ``Datastore.reclaim``) and
``released`` x (EC2 already took it, before the answer was even sent). A CNI ADD on the server's
thread between the two actions of ``apply_result`` gets x; the ``released`` then keeps it for
the pod (never yanked): a pod holds an address EC2 unassigned, which EC2 may already have given
to another node.

The re-plan also skips the allocator's release rules (``functions/releases.py::hold_releases``,
``offers_held``, the repeats): see the second test.
"""

from __future__ import annotations

from typing import Any

from emulated.ec2 import Ec2Config
from tests.helpers.allocate_world import AllocatorWorld
from warmpool.messages import Action, Assigned, Released

LAG_S = 60.0


def _world() -> tuple[AllocatorWorld, str, list[str]]:
    w = AllocatorWorld(ec2_config=Ec2Config(describe_lag_min_s=LAG_S, describe_lag_max_s=LAG_S))
    w.add_node("n1", "m5.large")  # 9 secondaries an ENI
    w.tag_primary("n1")
    eni = w.enis("n1")[0].id
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=6)
    w.clock.advance(LAG_S + 1)
    return w, eni, list(w.enis("n1")[0].secondary)


def _actions(w: AllocatorWorld) -> list[Action]:
    return [a for r in w.results("n1") for a in r.actions]


def _fresh_after_the_refusal(w: AllocatorWorld) -> None:
    """The Describe the executor makes after a refused call is fresher than the plan's (eventual
    consistency promises no order between two reads): the lag ends with the Assign's refusal."""
    port = w.alloc.executor.ec2
    real = port.assign

    def assign(call: Any) -> Any:
        try:
            return real(call)
        finally:
            w.emu.set_describe_lag(0.0, 0.0)

    port.assign = assign  # type: ignore[method-assign]


def test_a_replan_never_unassigns_an_address_the_same_answer_hands_back() -> None:
    w, eni, ips = _world()
    x = ips[-2:]  # 3 pods, WARM_IP_TARGET=5, two free addresses offered 20 s ago
    report = w.report(
        "n1", warm_ip=5, assigned=3, release=[{"eni_id": eni, "ips": x, "quarantined_at": w.clock.now() - 20}]
    )
    # An earlier grant the plan's Describe (60 s behind) does not show yet fills the ENI.
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=3)
    _fresh_after_the_refusal(w)
    w.deliver([report])
    actions = _actions(w)
    handed = {k for a in actions if isinstance(a, Assigned) for k in a.ips}
    released = {k for a in actions if isinstance(a, Released) for k in a.ips}
    on_node = set(w.enis("n1")[0].secondary)
    assert not (handed & released), (
        f"one answer hands back {sorted(handed & released)} (into the pool, before the released is applied) "
        f"and says EC2 unassigned it; on the node now: {sorted(set(x) & on_node)}; actions: {actions}"
    )


def test_a_replan_obeys_the_release_delay_as_the_first_plan_does() -> None:
    """An offer younger than WARMPOOL_ALLOCATOR_RELEASE_DELAY_S (10 s) is not acted on
    (``hold_releases``); the first plan holds it, the re-plan after a refused call unassigns it."""
    w, eni, ips = _world()
    x = ips[-2:]
    young = w.clock.now() - 1.0  # offered 1 s ago: held by the release rules
    report = w.report("n1", warm_ip=5, assigned=3, release=[{"eni_id": eni, "ips": x, "quarantined_at": young}])
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=3)
    _fresh_after_the_refusal(w)
    w.deliver([report])
    actions = _actions(w)
    unassigned = w.ec2_stats().get("UnassignPrivateIpAddresses", {}).get("calls", 0)
    assert unassigned == 0, f"an offer 1 s old unassigned by the re-plan (release delay 10 s): {actions}"
