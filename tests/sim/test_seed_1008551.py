"""Seed 1008551 (prefix mode, two tagged pod subnets with few whole /28s; n2 a t3.medium, three
ENIs of six addresses, whose IMDS lags 110 s from 2.6 s): n2 ended with six pods waiting at its
ENI limit, every slot a single address. Its agent starts with no checkpoint (a first start takes
the lost-checkpoint way). The allocator creates n2's second ENI with a /28 at 2.5 s; the lagging
IMDS shows it only at 115.6 s, inside the window after the start, and the agent held the /28 as
offered, of unknown origin, but dated the offer at the start, not when it learnt it
(``PoolController._hold_unknown``). Sent 116 s old, the offer was too old for the allocator to act
on (``WARMPOOL_RELEASE_OFFER_MAX_AGE_S``, 60 s): dropped, and the /28 EC2 shows on n2 counted as
its free pool, so n2 was not short. Nothing was planned for n2 (12, then 21 pods waiting) until
the agent renewed the offer at its release timeout, 591.6 s (its steady-clock count started again
by a restart after checkpoint write errors). By then the subnets were short of whole /28s, and the
allocator filled n2's slots with single addresses, some while a /28 was whole (its memory of a
refusal, ``functions/execute.py``'s ``BLOCKLESS_MEMORY_S``): the check rightly did not excuse the
waiting pods. Now an offer is dated when its address is learnt: the allocator unassigns the /28 at
once and serves the pods."""

from __future__ import annotations

import pytest

from simulation.base import T0
from simulation.runner import plan_for, run_plan

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods

SHRUNK = [0, 1, 3, 4, 6, 9, 12, 14, 17]


@pytest.mark.parametrize("keep", [SHRUNK, None], ids=["shrunk", "whole"])
def test_seed_1008551_an_offer_learnt_late_in_the_window_is_acted_on(keep: list[int] | None) -> None:
    violations, (_out, w) = run_plan(plan_for(1008551, keep))
    assert not violations, violations
    a = w.agents["n2"]
    assert a.ctl.limits.instance_type == "t3.medium" and not a.rt.adding
    # the /28 IMDS showed late is unassigned as soon as the release delay allows (before: at
    # 604.5 s, the offer having been too old to act on from 115.6 s to its renewal at 591.6 s)
    unassigns = [t - T0 for t, name in w.calls_by_iid[a.iid] if name == "unassign_private_ip_addresses"]
    assert unassigns and unassigns[0] < 200, unassigns
