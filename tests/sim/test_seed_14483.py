"""Seed 14483 (``hold-unfounded``, found by stop 48's sweep of 13000-14999): a start rebuilt from the
host's wiring while IMDS showed an older state held the pods' addresses for their veths, "not
attached yet"; their DELs tore the veths down but left their addresses' pod rules (the teardown was
given no address: ``Datastore.lookup_recovered`` finds attached addresses only); an older copy
restored later kept the DELeted pods' holders, a rule being a trace of a pod, for good. The DEL now
removes the rules of every address its attachment's recovered holder holds
(``tests/unit/test_del_unattached_holder_rules.py``)."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("keep", [[12, 14, 16, 17, 26, 27], [7, 12, 14, 16, 17, 22, 23, 26, 27], None])
def test_seed_14483_keeps_every_invariant(keep: list[int] | None) -> None:
    r = run_seed(14483, keep, shrink=False)
    assert r.faults.get("imds-regress") == 1 and r.faults.get("host-wiring:rules-flushed") == 1
    assert not r.violations, r.violations
