"""Seed 500105 (docs/reliability.md): in a fragmented subnet world asked by count, EC2 refused
n2's prefix on its primary ENI and then on a new ENI in the same subnet
(``InsufficientCidrBlocks``), and each time the allocator fell back to single addresses there
while the other candidate subnet had whole /28s; n2 (r8gb.medium, two ENIs) filled its last ENI
slot with singles, six addresses in all, and its other pods waited to the end (``not-settled``).
The focused case is in tests/unit/test_prefix_fallback_subnets.py
(``test_insufficient_cidr_blocks_by_count_moves_to_a_subnet_with_whole_28s_before_singles``)."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("keep", [[0, 19, 23], None], ids=["shrunk", "whole"])
def test_seed_500105_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(500105, keep, shrink=False)
    assert not r.violations, r.violations
