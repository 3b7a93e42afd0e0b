"""Issue 24's subnet worlds (``multi-subnet``, ``fragmented``, ``custom-networking``;
:mod:`simulation.subnets`): drawn from generators of their own, set up as the stack would be, and
their invariants catch what they are for (each class of bug injected into the product)."""

from __future__ import annotations

from typing import Any

import pytest

from simulation import runner
from simulation.runner import plan_for, run_seed
from simulation.schedule import EVENT_KINDS, SUBNET_KINDS, draw
from simulation.world import SimWorld
from warmpool import planner, subnets

pytestmark = pytest.mark.sim

SUBNETS_ONLY = frozenset(k for k in EVENT_KINDS if k not in ("pods-add", "pods-del", "churn", *SUBNET_KINDS))
"""Every fault but the subnet worlds left out: pods come and go in them."""


def _seeds(kind: str, n: int, **fields: object) -> list[int]:
    out = []
    for s in range(2000):
        ev = next((e for e in draw(s).events if e.kind == kind), None)
        if ev is not None and all(getattr(ev, f) == v for f, v in fields.items()):
            out.append(s)
            if len(out) == n:
                return out
    raise AssertionError(f"no {n} seeds draw {kind} {fields}")


def test_the_subnet_kinds_leave_every_other_event_as_drawn() -> None:
    seen = set()
    for s in range(300):
        p = draw(s)
        seen |= {e.kind for e in p.events if e.kind in SUBNET_KINDS}
        without = plan_for(s, without=frozenset(SUBNET_KINDS))
        assert [e for e in p.events if e.kind not in SUBNET_KINDS] == list(without.events)
    assert seen == set(SUBNET_KINDS)


def test_without_them_the_world_is_the_one_subnet_stack() -> None:
    s = _seeds("custom-networking", 1)[0]
    w = SimWorld(plan_for(s, without=frozenset(SUBNET_KINDS)))
    assert w.nets.variant is None and w.nets.pod == {w.subnet} and len(w.emu.subnets) == 1
    assert not w.settings.custom_network and not w.settings.named_placement
    w = SimWorld(plan_for(s))
    assert w.nets.variant == "discover-custom"
    assert set(w.settings.custom_network["us-east-1a"]["subnets"]) == set(w.nets.custom)
    assert w.settings.subnet_discovery and not w.settings.allowed_subnets
    assert all(w.agents[n].ctl.pool.custom_networking for n in w.nets.custom_nodes)
    assert not any(a.ctl.pool.custom_networking for n, a in w.agents.items() if n not in w.nets.custom_nodes)


def test_a_custom_networking_world_runs_its_stack_variants_roles() -> None:
    """The roles of the discovery-with-custom-networking stack (its snapshot), the mapped
    subnets named by their ids in the world, and no call refused."""
    s = _seeds("custom-networking", 1)[0]
    violations, (_, w) = runner.run_plan(plan_for(s, without=SUBNETS_ONLY))
    assert violations == [] and w.emu.denials == []
    text = str(w.roles["allocate"].statements)
    assert "CreateEniInDiscoveredSubnets" in text and "CreateEniInCustomNetworkSubnets" in text
    assert all(f"subnet/{sid}" in text for sid in w.nets.custom) and "${" not in text
    assert f"subnet/{w.subnet}" not in text  # discovery: the nodes' subnet is named by no statement


def test_the_subnet_worlds_keep_every_invariant() -> None:
    seeds = _seeds("multi-subnet", 2) + _seeds("fragmented", 2) + _seeds("custom-networking", 2)
    results = runner.run_many(seeds, jobs=1, shrink=False, without=SUBNETS_ONLY)
    assert not [v for r in results for v in r.violations]
    faults = {k for r in results for k in r.faults}
    assert {"subnet-world:eni-in-mapped", "subnet-world:eni-in-other"} <= faults, faults


def _caught(kind: str, want: str, **fields: object) -> None:
    """The first of six seeds drawing ``kind`` (with ``fields``) that breaks an invariant breaks ``want``."""
    for s in _seeds(kind, 6, **fields):
        r = run_seed(s, shrink=False, without=SUBNETS_ONLY)
        if r.violations:
            assert r.violations[0]["invariant"] == want, r.violations
            return
    raise AssertionError(f"no seed drawing {kind} caught it")


def test_a_custom_map_ignored_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Custom networking nodes planned as ordinary ones: their new ENIs go in the pod subnets."""
    real = subnets.node_subnets

    def ordinary(s: Any, zone: str, rule: Any, custom: Any, *, custom_node: bool) -> Any:
        return real(s, zone, rule, custom, custom_node=False)

    monkeypatch.setattr(planner, "node_subnets", ordinary)
    _caught("custom-networking", "eni-subnet")


def test_a_subnet_tagged_0_taken_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery reading ``kubernetes.io/role/cni=0`` as any other value: the nodes' own subnet,
    tagged 0, gets their new ENIs."""
    real = subnets.verdict

    def zero_ignored(s: Any, site: Any) -> subnets.Verdict:
        return subnets.Verdict.TAGGED if s.tags.get("kubernetes.io/role/cni") == "0" else real(s, site)

    monkeypatch.setattr(subnets, "verdict", zero_ignored)
    _caught("multi-subnet", "eni-subnet", excluded="own")


def test_a_custom_nodes_primary_used_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner giving a custom-networking node's primary ENI addresses."""
    monkeypatch.setattr(planner, "pods_inventory", lambda report, inventory: inventory)
    _caught("custom-networking", "custom-primary-used")
