"""Seed 1121572 (stop 52's sweep of seeds 1120000-1129999 on 7fc66c6; failing on 4313d62 and
7841536 too): ``not-settled`` at the end, n2's pod waiting from about 870 s. n2 (a c5.xlarge, its
two ENIs full: ``PrivateIpAddressLimitExceeded``) held two offers, renewed at their own release
timeouts 62 s apart; the allocator counts what EC2 shows of an offer too old to act on as the
node's free pool, so with one offer always too old it saw free addresses and handed nothing back,
for good. Now, while pods wait, an offer too old for the allocator dates every offer anew, together
(``PoolController._date_for_waiting_pods``; tests/unit/test_offers_dated_for_waiting_pods.py).
Shrunk: ``warmpool sim --seed 1121572 --keep 3,4,5,11,16,17,20,24,25,26``."""

from __future__ import annotations

import pytest

from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("keep", [None, [3, 4, 5, 11, 16, 17, 20, 24, 25, 26]])
def test_seed_1121572_every_pod_gets_an_address(keep: list[int] | None) -> None:
    violations, (out, _w) = run_plan(plan_for(1121572, keep))
    assert out.faults.get("ddb-unprocessed:window") == 1, "setup"
    assert not violations, violations
