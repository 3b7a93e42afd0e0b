"""docs/safety.md row 12: a damaged checkpoint that still parses and validates
(``checkpoint-damaged-parses``: a pod's entry dropped, its address moved to a free one, an
earlier save restored as from a backup) is not trusted. What seeds 0-999 found before the
fix, pinned: clean with it; each revert test shows the simulation finds the violation with
its half of the fix reverted (the checksum, the check against the host's pod wiring)."""

from __future__ import annotations

import pytest

from node_agent import agent, checkpoint
from simulation import runner
from simulation.runner import run_seed

pytestmark = pytest.mark.sim


DAMAGED_PARSES_SEEDS = (23, 41, 119, 130, 135, 141, 348, 442, 509, 524, 527, 585, 633, 650, 700, 905, 969)
"""Of seeds 0-999, those whose ``checkpoint-damaged-parses`` broke ``two-holders`` or
``released-in-use`` before the fix (29 seeds: also 291, 458, 462, 531, 638, 696, 697, 735,
788, 915, 991, 992), a sample. Shrunk on the unfixed code: ``warmpool sim --seed 23 --keep
7,8,10`` (n1's 12 pods, an IMDS lag, n1's checkpoint losing a pod's entry: the restarted
agent handed that pod's address to another pod)."""


def test_a_checkpoint_damaged_so_that_it_parses_is_refused_and_rebuilt() -> None:
    results = runner.run_many(DAMAGED_PARSES_SEEDS, jobs=1, shrink=False)
    assert not [v for r in results for v in r.violations]
    assert sum(r.faults.get("checkpoint-rebuilt:damaged", 0) for r in results) >= len(DAMAGED_PARSES_SEEDS) - 1


def _without_the_checksum(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code before the fix's first half: no file has a checksum to match."""
    monkeypatch.setattr(checkpoint, "check_checksum", lambda data: False)


def _without_the_wiring_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code before the fix's second half: a restored checkpoint is not checked against the host,
    nor are the addresses the host routes to pods held after it (``hold_wired``, the thirteenth
    review's: a second guard of the same thing, reverted with it)."""
    monkeypatch.setattr(agent, "wiring_disagreements", lambda ds, wiring, veth_prefix: [])
    monkeypatch.setattr(agent, "hold_wired", lambda ds, wiring, now, veth_prefix: [])


def test_holding_what_the_host_wires_alone_keeps_the_lost_pod_entry_and_the_old_copy_safe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the checksum and the wiring check reverted, ``hold_wired`` alone holds what the restored
    copy lacks: the seeds the two tests below find violations in run clean."""
    _without_the_checksum(monkeypatch)
    monkeypatch.setattr(agent, "wiring_disagreements", lambda ds, wiring, veth_prefix: [])
    assert run_seed(23, keep=[7, 8, 10], shrink=False).violations == []
    assert run_seed(141, keep=[19, 21], shrink=False).violations == []


def test_the_simulation_finds_the_lost_pod_entry_with_the_fix_reverted(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_the_checksum(monkeypatch)
    _without_the_wiring_check(monkeypatch)
    r = run_seed(23, keep=[7, 8, 10], shrink=False)
    assert [v["invariant"] for v in r.violations] == ["two-holders"]


@pytest.mark.parametrize("half", [_without_the_checksum, _without_the_wiring_check], ids=["checksum", "wiring"])
def test_either_half_alone_refuses_a_lost_pod_entry(monkeypatch: pytest.MonkeyPatch, half: object) -> None:
    assert callable(half)
    half(monkeypatch)
    r = run_seed(23, keep=[7, 8, 10], shrink=False)
    assert not r.violations and r.faults.get("checkpoint-rebuilt:damaged") == 1


def test_the_simulation_finds_the_old_copy_with_the_wiring_check_reverted(monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier save restored (as from a backup) has a valid checksum: only the host's wiring
    tells it lacks pods started since. Shrunk: ``warmpool sim --seed 141 --keep 19,21``.

    Since a restore waits for the allocator's word (``restored_from``), the copy is found not
    current, and its free addresses are offered back, the running pods' among them (the copy
    lacks those pods): without the wiring check the allocator unassigns addresses pods hold
    (before the restore check, a new pod got one: ``two-holders``)."""
    assert run_seed(141, keep=[19, 21], shrink=False).violations == []
    _without_the_wiring_check(monkeypatch)
    r = run_seed(141, keep=[19, 21], shrink=False)
    assert [v["invariant"] for v in r.violations] == ["released-in-use"]
