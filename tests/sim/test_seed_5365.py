"""Seed 5365 (docs/reliability.md): after a checkpoint rebuild in a fragmented subnet, an
address offered of unknown origin was unassigned and granted again (EC2 gave the same one),
and each resync came before that grant's 60 s wait ended, held it as offered again: never
used (``address-leaked``). The focused sequence is in tests/unit/test_agent_review_findings.py
(``test_a_resync_during_the_wait_of_a_grant_leaves_the_address_to_the_grant``)."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("keep", [[19, 24], None], ids=["shrunk", "whole"])
def test_seed_5365_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(5365, keep, shrink=False)
    assert not r.violations, r.violations
