"""Review 28 of 2cb64be (review 27, H1: "the checks see what pods' namespaces carry").

They do at two moments only: a set-up (``SimWorld.note_carried``: two namespaces with one address)
and an Unassign (``SimWorld.check_release``). The periodic state check (``simulation.checks._state``:
``pod-address-not-on-node``, ``two-holders`` with another tool's ENI) still reads only what the
runtime believes is up (``Runtime.up``): an address a namespace carries that leaves the node
another way (its ENI detached or deleted by the allocator, a ``released`` taken from under a
failed ADD's interface, EC2 giving it to another tool) is seen only if a pod of a live node is set
up on it before the run ends.

Fixed so in stop 49 (``simulation.checks._carried_only`` in ``_state``; the strict xfail removed)."""

from __future__ import annotations

from typing import Any

import pytest

import simulation.world
from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim

GHOST = "10.0.250.250"  # an address of no ENI: unassigned in EC2


def test_a_namespace_carrying_an_address_not_on_its_node_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    pod_up = simulation.world.SimWorld.pod_up
    injected: list[str] = []

    def up(self: Any, agent: Any, cid: str, ip: str) -> None:
        pod_up(self, agent, cid, ip)
        if not injected:
            # a failed ADD's interface the runtime does not count as up, carrying an address
            # that left the node (as a detached ENI's would)
            agent.pods.wired[("ghost", "eth0")] = GHOST
            injected.append(agent.name)

    monkeypatch.setattr(simulation.world.SimWorld, "pod_up", up)
    violations, _ = run_plan(plan_for(4, None))
    assert injected, "setup: no pod came up"
    assert any(GHOST in detail for _, detail in violations), f"no check saw {GHOST} carried: {violations}"
