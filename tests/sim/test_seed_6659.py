"""Seed 6659 (``released-in-use``, found on stop 49's first sweep with the checks that read what pods'
namespaces carry): n1's runtime lost an ADD's answer and forgot the sandbox (``cni-interrupted``), its
namespace kept; the agent restarted with another veth prefix (``prefix-changed``); the runtime's CNI
GC then released the forgotten attachment's address, but its teardown removed only the new prefix's
veth name, and the namespace went on carrying the address the allocator unassigned. A teardown now
removes the attachment's veth under any prefix (``hostnet.teardown_pod``; the model as it)."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("keep", [[12, 14, 15, 16, 20, 23, 26, 28, 29], None], ids=["shrunk", "whole"])
def test_seed_6659_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(6659, keep, shrink=False)
    assert r.faults.get("cni-interrupted") == 1 and r.faults.get("host-wiring:prefix-changed") == 1
    assert not r.violations, r.violations
