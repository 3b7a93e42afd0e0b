"""Seed 1007816 (``harness-error``: ``IndexError`` in ``SimDisk.damage_parsing``, the simulation's
own code): its ``checkpoint-damaged-parses`` event (n1, ``drop-pod``, 11 pods added before it) drew
``pick`` 1.0. The schedule draws ``pick`` as ``round(random(), 3)``, which gives 1.0 for any draw of
0.9995 or more, and the event documents it as 0 to 1; the model indexed ``pods[int(pick * len)]``,
one past the last pod. The same index served ``old-copy`` and ``move-pod`` (the save or the free
address chosen) and ``host-wiring``'s ``veth-down`` (``SimPods.disturb``). All four now choose
through ``simulation.node.picked``: 1.0 chooses the last, as 0.999 does. With it the seed keeps
every invariant: the last pod's entry is dropped and the agent's start refuses the file and
rebuilds (``checkpoint-rebuilt:damaged``, docs/safety.md row 12)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from simulation import kinds as k
from simulation import node
from simulation.runner import plan_for, run_plan, run_seed

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods

SHRUNK = [6, 7]
"""n1's 11 pods, then its checkpoint damaged (``drop-pod``, ``pick`` 1.0)."""


@pytest.mark.parametrize("keep", [SHRUNK, None], ids=["shrunk", "whole"])
def test_seed_1007816_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(1007816, keep, shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("checkpoint-damaged-parses:drop-pod") == 1
    assert r.faults.get("checkpoint-rebuilt:damaged") == 1


def test_pick_1_drops_the_last_pod_of_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    real = node.SimDisk.damage_parsing

    def damage(self: node.SimDisk, variant: str, pick: float) -> str:
        assert self.data is not None
        before = copy.deepcopy(self.data)
        done = real(self, variant, pick)
        assert self.data is not None
        seen.append((before, copy.deepcopy(self.data)))
        return done

    monkeypatch.setattr(node.SimDisk, "damage_parsing", damage)
    plan = plan_for(1007816, SHRUNK)
    ev = plan.events[1]
    assert isinstance(ev, k.CheckpointDamagedParses) and (ev.variant, ev.pick) == ("drop-pod", 1.0)
    violations, _ = run_plan(plan)
    assert not violations, violations
    [(before, after)] = seen

    def pods(data: dict[str, Any]) -> list[tuple[str, str]]:
        return [(a["container_id"], a["ip"]) for e in data["enis"] for a in e["addrs"] if a.get("container_id")]

    assert len(pods(before)) == 11
    assert pods(after) == pods(before)[:-1]


def _with(event: k.Event) -> Any:
    plan = plan_for(1007816, SHRUNK)
    return dataclasses.replace(plan, events=(plan.events[0], event))


@pytest.mark.parametrize("variant", ["move-pod", "old-copy"])
def test_the_other_variants_take_pick_1(variant: str) -> None:
    ev = plan_for(1007816, SHRUNK).events[1]
    assert isinstance(ev, k.CheckpointDamagedParses)
    violations, (out, _) = run_plan(_with(dataclasses.replace(ev, variant=variant)))
    assert not violations, violations
    assert out.faults.get(f"checkpoint-damaged-parses:{variant}") == 1


def test_host_wiring_veth_down_takes_pick_1() -> None:
    ev = k.HostWiring(at=147.2, node="n1", variant="veth-down", then="restart", delay=5.0, down=3.0, pick=1.0)
    violations, (out, _) = run_plan(_with(ev))
    assert not violations, violations
    assert out.faults.get("host-wiring:veth-down") == 1
