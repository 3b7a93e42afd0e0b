"""Seed 3706 (``warmpool sim --seed 3706 --keep 2,6,15,16,18,19,20,22,23,24,28``): a false
``released-not-offered``, the simulation's check, not the agent.

n0 offered 10.0.0.18 at 368.6 s; a throttle storm held the Unassign. At 416.2 s its agent started
again on an older copy of its checkpoint (``host-wiring``'s ``old-copy``), one from before the offer,
where the address is free. At 416.5 s the allocator unassigned it, and the check, which asked only
whether the running agent still had the address quarantined, called it taken back into the pool.
It was not: a start that restored its checkpoint withholds every free address until the
allocator's word (``Datastore.withhold``; docs/agent.md, "A restored checkpoint waits for the
allocator's word"), and the word after an Unassign booked for a report past the copy is "not
current" (docs/allocator.md, "Restored checkpoints"): at 418.6 s the agent offered the address as
of unknown origin. No pod could get it in between (``tests/unit/test_restore_check.py`` pins the
withhold and the verdict's offers). The check now notes such an address and asks again when the
wait ends: still free then, it is the precursor the check is for."""

from __future__ import annotations

from typing import Any

import pytest

from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from simulation.checks import withheld_releases
from tests.helpers.release_check import ENI, Violation, check_world, unassign

IP = "10.0.0.18"


_world = check_world


def _ds(*, withheld: bool) -> Datastore:
    ds = Datastore()
    ds.add_eni(EniInfo(ENI, 1, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_addresses(ENI, [IP])
    ds.withhold(withheld)
    return ds


def _unassign(w: Any) -> None:
    unassign(w, IP)


def test_an_address_unassigned_while_a_restore_withholds_the_pool_is_no_finding_yet() -> None:
    """Failed before: the check said ``released-not-offered`` at the Unassign."""
    w = _world(_ds(withheld=True))
    _unassign(w)
    assert w.agents["n0"].released_withheld == {IP}
    withheld_releases(w, list(w.agents.values()))  # still waiting: nothing to judge
    assert w.agents["n0"].released_withheld == {IP}


def test_the_wait_ending_with_it_offered_as_of_unknown_origin_passes() -> None:
    w = _world(ds := _ds(withheld=True))
    _unassign(w)
    ds.quarantine(ENI, [IP], [], 1.0)  # "not current": offered back (PoolController._restore_stale)
    ds.withhold(False)
    withheld_releases(w, list(w.agents.values()))
    assert w.agents["n0"].released_withheld == set()


def test_the_wait_ending_with_it_free_is_released_not_offered() -> None:
    """What the check is for: an agent that took "current" (or ignored the verdict) after EC2 took
    the address hands a pod an address the node no longer has."""
    w = _world(ds := _ds(withheld=True))
    _unassign(w)
    ds.withhold(False)
    with pytest.raises(Violation, match=r"released-not-offered: EC2 took 10\.0\.0\.18 from n0 while"):
        withheld_releases(w, list(w.agents.values()))


def test_without_a_withhold_a_free_address_unassigned_is_released_not_offered_at_once() -> None:
    w = _world(_ds(withheld=False))
    with pytest.raises(Violation, match=r"released-not-offered: the allocator unassigns 10\.0\.0\.18"):
        _unassign(w)


def test_a_held_address_unassigned_during_the_wait_is_released_not_offered_at_once() -> None:
    """The withhold covers the free pool only: an address a holder keeps was never on offer."""
    ds = _ds(withheld=True)
    ds.hold_unknown({IP}, 0.0)
    with pytest.raises(Violation, match=r"released-not-offered: the allocator unassigns 10\.0\.0\.18"):
        _unassign(_world(ds))
