"""``warmpool.planner.SurgeHint``: a surge sized to the pods a node is expected to reach, not filled
(the seam ``tests/perf/surge_sizing.py`` measures with; the allocator gives no hint). An m5.large:
9 address slots an ENI."""

from __future__ import annotations

from tests.helpers.planner import eni, plan, rep
from warmpool.calls import AssignAddresses, CreateEni
from warmpool.planner import SurgeHint


def test_without_a_hint_a_surge_fills_and_a_new_eni_gets_what_is_short():
    r, inv = rep([eni(0, 2)], assigned={0: 2}, pending=3, warm_ip=1)
    assert plan(r, inv).calls == (AssignAddresses("eni-00000000", ips=7),)
    assert plan(r, inv, surge_hint=None).calls == plan(r, inv).calls


def test_a_hint_caps_the_fill_at_the_expected_pods_plus_the_warm_target():
    # 2 held, 2 assigned, 3 waiting; expected 6 pods + 1 warm = 7: 5 more, not the 7 free slots
    r, inv = rep([eni(0, 2)], assigned={0: 2}, pending=3, warm_ip=1)
    assert plan(r, inv, surge_hint=SurgeHint(6)).calls == (AssignAddresses("eni-00000000", ips=5),)
    # never below what the pods waiting ask for, whatever the hint says
    assert plan(r, inv, surge_hint=SurgeHint(0)).calls == (AssignAddresses("eni-00000000", ips=4),)
    # a hint for new ENIs only leaves the fill as it was
    assert plan(r, inv, surge_hint=SurgeHint(6, fills=False)).calls == (AssignAddresses("eni-00000000", ips=7),)


def test_a_hint_sizes_a_new_eni_for_the_pods_still_expected():
    # the primary full (9 of 9 assigned), 3 waiting: 4 short; expected 15 pods + 1 warm = 16: 7 more
    r, inv = rep([eni(0, 9)], assigned={0: 9}, pending=3, warm_ip=1)
    (create,) = plan(r, inv, surge_hint=SurgeHint(15)).calls
    assert isinstance(create, CreateEni) and create.ips == 7
    # capped at the ENI's slots
    (create,) = plan(r, inv, surge_hint=SurgeHint(40)).calls
    assert isinstance(create, CreateEni) and create.ips == 9
    # fewer expected than wait: what is short
    (create,) = plan(r, inv, surge_hint=SurgeHint(1)).calls
    assert isinstance(create, CreateEni) and create.ips == 4


def test_no_hint_is_taken_without_a_surge():
    # nothing waits and no burst: a warm top-up asks for what is short, hint or not
    r, inv = rep([eni(0, 2)], assigned={0: 2}, warm_ip=3)
    top_up = (AssignAddresses("eni-00000000", ips=3),)
    assert plan(r, inv, surge_hint=SurgeHint(9)).calls == plan(r, inv).calls == top_up
