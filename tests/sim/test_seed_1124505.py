"""Seed 1124505 (stop 52's sweep of seeds 1120000-1129999 on 7fc66c6 and again on 15939c4; failing
on 4313d62, stop 51's code, too): ``not-settled`` at 1101 s, n0 (a t3.medium, a replacement after
``terminate``) short of its targets by two after the quiet period. Open, traced in part only: from
119.6 s a pod of n0 holds 10.0.0.5, which IMDS no longer lists on the primary ENI ("kept for it
(alarm)"), and 59 addresses offered as of unknown origin on that ENI, which IMDS no longer lists
either, stay quarantined to the end (their offer 736 s old at the last report): every take-back
read lacks an address a pod of the ENI holds, so it is taken as a read from before the pods
(``PoolController._read_predates_pods``) and the drop is postponed, read after read (n0's
``take_back_postponed`` 271 at the end, ``offers_renewed`` 0). Postponed, the offer is not renewed
either: it stays too old for the allocator to act on ("release offers too old to act on" from 382 s
to the end), which counts what EC2 shows of such an offer as the node's free pool. The likely fix,
not made in stop 52 (no time left for its hostile review): an offer whose drop is postponed is
renewed, dated anew, as one IMDS lists is (the safe direction). Pinned as a strict xfail;
docs/reliability.md, "Stop 52"."""

from __future__ import annotations

import pytest

from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim


@pytest.mark.xfail(strict=True, reason="open: n0 short of its targets for good (traced in part)")
def test_seed_1124505_every_node_settles() -> None:
    violations, (out, _w) = run_plan(plan_for(1124505, None))
    assert out.faults.get("quota-below") == 1, "setup"
    assert not violations, violations
