"""Seed 6341 (``not-settled``, seeds 2000-9999 on f40fa44, containerd runtimes only): an ADD whose
answer the runtime lost (``cni-interrupted``) left, in the model, a sandbox its containerd runtime
forgot with its namespace kept and no DEL; containerd sends no CNI GC, so after a start that held
every address for that routeless veth (``host-wiring``, an older copy) the hold never ended and
idle addresses were never offered. containerd takes a lost answer for a failed ADD and DELs the
sandbox at once, removing its namespace (``RunPodSandbox``): the model does so now."""

from __future__ import annotations

import pytest

import simulation.node
from simulation.runner import run_seed

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("keep", [[1, 2, 9, 12, 26], None], ids=["shrunk", "whole"])
def test_seed_6341_keeps_every_invariant(keep: list[int] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulation.node, "FORCE_CONTAINERD", True)
    r = run_seed(6341, keep, shrink=False)
    assert r.faults.get("cni-interrupted:containerd-del") == 1
    assert not r.violations, r.violations
