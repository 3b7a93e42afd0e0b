"""The liveness seeds of the 10,000-seed sweep after the quiet-period fix (docs/reliability.md,
"10,000 seeds after the quiet-period fix"), each replayed as shrunk. Every one has a node clock
stepped back (``clock-skew:behind``):

* ``cni-gc-leak`` (1354, 2621, 3229, 6911): an ADD whose answer the runtime lost, then the
  clock stepped back; the agent's CNI GC aged the attachment on the wall clock and left it
  held for as long as the step. GC now ages attachments on the monotonic clock
  (``node_agent/cniserver.py``, ``CniService._age``).
* ``report-unserved`` (1791, 1992, 2231, 3252, 5742): the harness dated each report by the
  node's clock, so a node behind by 200 s had reports "sent" 200 s before they were; the
  check measured a wait that did not happen. Reports are now dated on the world's clock
  (``simulation/node.py``, ``SimAgent.periodic``)."""

from __future__ import annotations

import pytest

import simulation.node
from simulation.runner import run_seed

GC_LEAK = [(1354, [4, 5, 6]), (2621, [4, 7, 8]), (3229, [10, 14, 15]), (6911, [1, 3, 5])]
UNSERVED = [(1791, [8, 15, 18]), (1992, [2, 20]), (2231, [4, 8]), (3252, [4, 12, 14, 15, 17]), (5742, [5, 8, 14])]


@pytest.mark.parametrize(("seed", "keep"), GC_LEAK, ids=[str(s) for s, _ in GC_LEAK])
def test_a_clock_stepped_back_does_not_keep_a_stale_attachment_held(
    seed: int, keep: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(simulation.node, "FORCE_CONTAINERD", False)  # drawn before stop 49: GC-sending runtimes
    r = run_seed(seed, keep=keep, shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("clock-skew:behind") and r.faults.get("cni-gc:checked"), r.faults


@pytest.mark.parametrize(("seed", "keep"), UNSERVED, ids=[str(s) for s, _ in UNSERVED])
def test_a_node_behind_has_its_reports_served_in_the_bound(seed: int, keep: list[int]) -> None:
    r = run_seed(seed, keep=keep, shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("clock-skew:behind"), r.faults


def test_the_full_seeds_keep_every_invariant() -> None:
    for seed, _ in GC_LEAK + UNSERVED:
        r = run_seed(seed, shrink=False)
        assert not r.violations, (seed, r.violations)
