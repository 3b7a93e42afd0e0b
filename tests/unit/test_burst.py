"""Bursts (issue 25, "closer to the bound"): an agent says how many pods got an address within
``WARMPOOL_BURST_WINDOW_S`` (``PoolReport.burst``), the planner sizes a top-up for the burst's
next pods, and the agent keeps the surplus until the burst has been over for the release delay.

Each case would fail on the code before bursts: the report had no ``burst``, the planner asked for
what the targets were short of, and surplus went after the delay whatever pods kept arriving."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from node_agent.config import ConfigError, load
from tests.helpers.controller import TIMING, make, one
from tests.unit.test_planner import SUBNETS, eni, plan, rep
from warmpool.calls import AssignAddresses, CreateEni
from warmpool.pool import PoolConfig
from warmpool.subnets import Subnet

AZ = "us-east-1a"


@pytest.mark.parametrize(
    ("case", "enis", "assigned", "burst", "targets", "subnets", "want"),
    [
        # Short by 1 with no burst: what the target asks, as the VPC CNI does.
        ("no burst", [eni(0, 2)], {0: 2}, None, {"warm_ip": 1}, SUBNETS, [("assign", 1)]),
        # The same report in a burst fills the ENI it touches (m5.large: 9 slots, 2 held).
        ("burst fills the primary", [eni(0, 2)], {0: 2}, 3, {"warm_ip": 1}, SUBNETS, [("assign", 7)]),
        # A burst on a full primary: the new ENI is created with what is short, not full (filled,
        # it was released again at the end of most bursts: burst-200 +143 Unassigns for 39 Assigns).
        ("burst, new ENI", [eni(0, 9)], {0: 9}, 4, {"warm_ip": 1}, SUBNETS, [("create", 1)]),
        # ... but never into a tight subnet: half of what it spares at most.
        (
            "tight subnet",
            [eni(0, 2)],
            {0: 2},
            5,
            {"warm_ip": 1},
            [Subnet("subnet-a", AZ, "10.0.0.0/24", 8)],
            [("assign", 4)],
        ),
        # Prefix mode: a /28 is sixteen pods' worth already; a burst changes nothing.
        ("prefix burst", [eni(0, 0)], {}, 20, {"warm_ip": 1}, SUBNETS, [("prefixes", 1)]),
        ("prefix no burst", [eni(0, 0)], {}, None, {"warm_ip": 1}, SUBNETS, [("prefixes", 1)]),
        # WARM_ENI mode already takes whole ENIs: a burst changes nothing.
        ("warm eni", [eni(0, 9)], {0: 9}, 6, {}, SUBNETS, [("create", 9)]),
    ],
)
def test_a_top_up_in_a_burst_is_sized_for_the_next_pods(case, enis, assigned, burst, targets, subnets, want):
    mode = "prefix" if case.startswith("prefix") else "secondary-ip"
    r, inv = rep(enis, assigned=assigned, mode=mode, **targets)
    if burst is not None:
        r = r.model_copy(update={"burst": burst})
    got = []
    for c in plan(r, inv, subnets=subnets).calls:
        if isinstance(c, AssignAddresses):
            got.append(("prefixes", c.prefixes) if c.prefixes else ("assign", c.ips))
        elif isinstance(c, CreateEni):
            got.append(("create", c.ips))
    assert got == want, case


def test_a_lean_node_is_not_sized_for_its_burst() -> None:
    """Fair sharing: a node planned lean gets what it is short of, burst or not (docs/allocator.md)."""
    r, inv = rep([eni(0, 2)], assigned={0: 2}, warm_ip=1, minimum_ip=4)
    r = r.model_copy(update={"burst": 6, "lean": True})
    assert plan(r, inv).calls == (AssignAddresses("eni-00000000", ips=2),)
    r, inv = rep([eni(0, 0)], mode="prefix", warm_ip=1, minimum_ip=4)
    r = r.model_copy(update={"burst": 40, "lean": True})
    assert plan(r, inv).calls == (AssignAddresses("eni-00000000", prefixes=1),)


@pytest.mark.parametrize("bad", [0, 1, -3, 100_001, "7", 2.5])
def test_a_burst_is_two_pods_or_more_as_an_int(bad) -> None:
    r, _ = rep([eni(0, 2)], warm_ip=1)
    with pytest.raises(ValidationError):
        type(r).model_validate({**r.model_dump(by_alias=True), "burst": bad})


def test_the_agent_reports_its_burst_and_keeps_its_surplus_until_it_is_over() -> None:
    ips = [f"10.0.0.{i}" for i in range(11, 20)]  # 9 addresses, WARM_IP_TARGET=2: 7 surplus
    ds, ctl = make(PoolConfig(warm_ip=2), ips)
    assert one(ctl.tick(0.0)).burst is None
    ds.assign("c1", "eth0", "ns", 1.0)
    assert ctl.burst(1.0) == 0  # one pod is not a burst
    t = 1.0
    for i in range(2, 6):  # four more pods, ten seconds apart: a burst that lasts 41 s
        t += 10.0
        ds.assign(f"c{i}", "eth0", "ns", t)
        ctl.tick(t)
        assert ctl.burst(t) >= 2
    assert ds.counts(t).quarantined == 0
    # Without the burst the surplus (free beyond 2) seen at t=0 would have gone at 60 s.
    ctl.tick(65.0)
    assert ds.counts(65.0).quarantined == 0
    # The burst is over once fewer than two pods are younger than the window: at 31 + 30 s,
    # when the next-to-last pod leaves it. The delay runs from there.
    end = 31.0 + TIMING.burst_window_s
    assert ctl.burst(end - 0.1) == 2 and ctl.burst(end + 0.1) == 0
    assert ctl.tick(end + TIMING.release_delay_s - 1.0) == []
    assert ds.counts(end + TIMING.release_delay_s - 1.0).quarantined == 0
    r = one(ctl.tick(end + TIMING.release_delay_s + 0.5))
    assert sum(len(o.ips) for o in r.release) == 2  # 9 - 5 pods - 2 warm
    assert r.burst is None


def test_a_burst_report_carries_the_count() -> None:
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    ctl.tick(0.0)
    for i, t in enumerate((1.0, 2.0, 3.0)):
        ds.assign(f"c{i}", "eth0", "ns", t)
    assert one(ctl.tick(3.5)).burst == 3


def test_the_window_is_a_setting_and_zero_turns_bursts_off() -> None:
    env = {"CLUSTER_NAME": "demo"}
    assert load(env).timing.burst_window_s == 30.0
    assert load({**env, "WARMPOOL_BURST_WINDOW_S": "0"}).timing.burst_window_s == 0.0
    for bad in ("-1", "601", "soon"):
        with pytest.raises(ConfigError, match="WARMPOOL_BURST_WINDOW_S"):
            load({**env, "WARMPOOL_BURST_WINDOW_S": bad})
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    ctl.timing = replace(ctl.timing, burst_window_s=0.0)
    ctl.tick(0.0)
    for i, t in enumerate((1.0, 2.0, 3.0)):
        ds.assign(f"c{i}", "eth0", "ns", t)
    assert ctl.burst(3.5) == 0 and one(ctl.tick(3.5)).burst is None
