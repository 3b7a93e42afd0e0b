"""Seed 14955 (``released-in-use``, found by stop 48's sweep of 13000-14999): a failed second ADD of a
running pod, whose record the agent had lost, tore down the pod's veth pair; a later start after a
lost checkpoint found only a rule for the pod's address and let it go, and the allocator unassigned
it from under the pod. A failed ADD now tears down only a pair its set-up made
(``node_agent.hostnet.setup_left``; ``tests/unit/test_failed_add_keeps_pair.py``). The set-up of a
``cni-overlap`` ADD fails early or once the pod's interface has the new address
(``simulation.events.overlap_stage``): both are run."""

from __future__ import annotations

import pytest

import simulation.events
from simulation.runner import run_seed

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("stage", ["early", "addressed"])
def test_seed_14955_keeps_every_invariant(monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    monkeypatch.setattr(simulation.events, "overlap_stage", lambda w, a: stage)
    r = run_seed(14955, [0, 7, 21, 22], shrink=False)
    assert r.faults.get(f"cni-overlap:{stage}") == 1
    assert r.faults.get("host-wiring:routes-flushed") == 1
    assert not r.violations, r.violations
