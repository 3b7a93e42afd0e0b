"""Seed 7325 (docs/reliability.md): in a fragmented subnet world with named placement, two
subnets were left for want of a whole /28 in one invocation (n0's primary ENI's, then the one
its second ENI is in), and the fallback to single addresses brought back only the last; the
singles Assign there was refused (its free addresses a prefix reservation's), and n0's pods
waited to the end beside hundreds of free addresses on its primary ENI's subnet
(``not-settled``). The focused case is in tests/unit/test_prefix_fallback_subnets.py
(``test_the_singles_fallback_brings_back_every_subnet_left_for_want_of_a_28``)."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("keep", [[12, 18, 23], None], ids=["shrunk", "whole"])
def test_seed_7325_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(7325, keep, shrink=False)
    assert not r.violations, r.violations
