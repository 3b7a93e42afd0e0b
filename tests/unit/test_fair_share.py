"""Scarce addresses shared fairly (issue 24, docs/allocator.md "Scarce addresses shared fairly"):
lean pool math, the wire fields' compatibility, the allocator's scarcity rule, and the agent
entering and leaving lean mode and offering only what is above its floor."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from node_agent.config import Timing, load
from tests.helpers.controller import ID, TIMING, make
from warmpool.limits import known
from warmpool.messages import AllocationResult, MessageError, PoolReport, parse_report, parse_result
from warmpool.pool import PoolConfig, PoolState, compute
from warmpool.scarcity import node_scarce, scarce, zone_free
from warmpool.subnets import CustomNetwork, Site, Subnet, SubnetRule, ZoneNetwork

M5L = known("m5.large")  # 3 ENIs x 10 slots

# --- pool math ---------------------------------------------------------------------------------

IP = PoolConfig(warm_ip=10, minimum_ip=3)
ENI = PoolConfig(warm_eni=1)
PFX = PoolConfig(prefix_mode=True, warm_prefix=1)
PFX_MIN = PoolConfig(prefix_mode=True, warm_prefix=1, minimum_ip=20)


@pytest.mark.parametrize(
    ("cfg", "state", "short", "over", "over_units", "over_singles"),
    [
        # warm addresses above MINIMUM_IP_TARGET (in all) are surplus
        (IP, PoolState(total=10, assigned=0), 0, 7, 7, 0),
        (IP, PoolState(total=10, assigned=5), 0, 5, 5, 0),
        # the floor is kept: pods' addresses count in it
        (IP, PoolState(total=3, assigned=1), 0, 0, 0, 0),
        (PoolConfig(warm_ip=2, minimum_ip=6), PoolState(total=8, assigned=1), 0, 2, 2, 0),
        # below the floor: short up to it, as without lean
        (IP, PoolState(total=1, assigned=0), 2, 0, 0, 0),
        # pending pods still make it short (never the warm target), and nothing goes meanwhile
        (IP, PoolState(total=10, assigned=10, pending=4), 4, 0, 0, 0),
        (IP, PoolState(total=10, assigned=8, pending=4), 2, 0, 0, 0),
        # WARM_ENI_TARGET mode, no MINIMUM_IP_TARGET: every free address is surplus, one by one
        (ENI, PoolState(total=19, assigned=2, enis=2), 0, 17, 17, 0),
        (ENI, PoolState(total=19, assigned=2, pending=1, enis=2), 0, 0, 0, 0),
        (ENI, PoolState(total=9, assigned=9, pending=3), 3, 0, 0, 0),
        # prefix mode: free /28s above the floor go; a /28 the floor needs stays
        (PFX, PoolState(total=32, assigned=3, free_prefixes=1), 0, 29, 1, 0),
        (PFX_MIN, PoolState(total=32, assigned=3, free_prefixes=1), 0, 12, 0, 0),
        (PFX, PoolState(total=33, assigned=3, free_prefixes=1, free_singles=1), 0, 30, 1, 1),
        (PFX, PoolState(total=16, assigned=16, pending=5), 5, 0, 0, 0),
    ],
)
def test_lean_keeps_the_floor_serves_pending_and_offers_the_rest(
    cfg: PoolConfig, state: PoolState, short: int, over: int, over_units: int, over_singles: int
) -> None:
    d = compute(replace(cfg, lean=True), state, M5L)
    assert (d.short, d.over, d.over_units, d.over_singles, d.over_enis) == (
        short,
        over,
        over_units,
        over_singles,
        0,
    )
    assert not d.whole_enis


def test_not_lean_the_warm_targets_hold() -> None:
    assert compute(IP, PoolState(total=10, assigned=0), M5L).over == 0
    assert compute(PFX, PoolState(total=32, assigned=3, free_prefixes=1), M5L).over_units == 0
    assert compute(IP, PoolState(total=3, assigned=0), M5L).short == 7


def _report(**extra: object) -> PoolReport:
    body = {
        "schema": "warmpool.report/v1",
        "cluster": "demo",
        "node": "n",
        "instance_id": ID.instance_id,
        "instance_type": "m5.large",
        "availability_zone": "us-east-1a",
        "seq": 5,
        "sent_at": 1000.0,
        "targets": {"warm_ip": 10, "minimum_ip": 3},
        "enis": [
            {
                "eni_id": "eni-00000000",
                "device_index": 0,
                "subnet_id": "subnet-a",
                "primary_ip": "10.0.0.10",
                "ips": [f"10.0.0.{i}" for i in range(100, 110)],
            }
        ],
        **extra,
    }
    return PoolReport.model_validate(body)


def test_both_sides_read_lean_from_the_report() -> None:
    assert PoolConfig.from_report(_report()).lean is False
    assert PoolConfig.from_report(_report(lean=False)).lean is False
    assert PoolConfig.from_report(_report(lean=True)).lean is True


# --- the wire ----------------------------------------------------------------------------------


def test_lean_is_left_out_unless_set_and_round_trips() -> None:
    assert "lean" not in json.loads(_report().to_json())
    assert json.loads(_report(lean=False).to_json())["lean"] is False
    assert parse_report(_report(lean=True).to_json()).lean is True
    assert parse_report(_report().to_json()).lean is None


def _result(**extra: object) -> AllocationResult:
    return AllocationResult(cluster="demo", node="n", instance_id=ID.instance_id, in_reply_to=5, **extra)  # type: ignore[arg-type]


def test_scarce_is_left_out_unless_said_and_only_true() -> None:
    assert "scarce" not in json.loads(_result().to_json())
    assert json.loads(_result(scarce=True).to_json())["scarce"] is True
    assert parse_result(_result(scarce=True).to_json()).scarce is True
    body = json.loads(_result().to_json())
    with pytest.raises(MessageError):
        parse_result({**body, "scarce": False})


# --- the allocator's rule ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "lean", "said"),
    [
        (63, False, True),
        (64, False, False),
        (100, False, False),
        (128, True, True),  # hysteresis: a lean node stays scarce up to twice the threshold
        (129, True, False),
        (0, False, True),
        (None, False, False),  # no candidate subnet: nothing to share
    ],
)
def test_scarce_below_the_threshold_with_hysteresis(free: int | None, lean: bool, said: bool) -> None:
    assert scarce(free, 64, lean=lean) is said
    assert scarce(free, 0, lean=lean) is False  # off


SUBNETS = [
    Subnet("subnet-a", "us-east-1a", "10.0.0.0/24", 30),
    Subnet("subnet-b", "us-east-1a", "10.0.1.0/24", 20),
    Subnet("subnet-z", "us-east-1b", "10.0.2.0/24", 1),
    Subnet("subnet-c", "us-east-1a", "100.64.0.0/24", 500),
]
CUSTOM = CustomNetwork({"us-east-1a": ZoneNetwork(("subnet-c",))})


def test_the_zone_counts_the_nodes_candidates_only() -> None:
    site = Site("demo", "us-east-1a", "", "subnet-a")
    assert zone_free(SUBNETS, site, SubnetRule.LISTED, CustomNetwork(), custom_node=False) == 550
    # custom networking: the map's subnets are a custom node's alone, and its only ones
    assert zone_free(SUBNETS, site, SubnetRule.LISTED, CUSTOM, custom_node=False) == 50
    assert zone_free(SUBNETS, site, SubnetRule.LISTED, CUSTOM, custom_node=True) == 500
    assert zone_free(SUBNETS, Site("demo", "us-east-1c"), SubnetRule.LISTED, CUSTOM, custom_node=False) is None


def test_never_said_to_an_agent_from_before_the_field() -> None:
    kw = {"cluster": "demo", "threshold": 64, "rule": SubnetRule.LISTED, "custom": CUSTOM}
    assert node_scarce(_report(lean=False), SUBNETS, **kw) is True  # type: ignore[arg-type]
    assert node_scarce(_report(), SUBNETS, **kw) is False  # type: ignore[arg-type]
    assert node_scarce(_report(lean=False), [], **kw) is False  # type: ignore[arg-type]  # none read
    assert node_scarce(_report(lean=False, custom_networking=True), SUBNETS, **kw) is False  # type: ignore[arg-type]


# --- the agent ---------------------------------------------------------------------------------

FREE = [f"10.0.0.{i}" for i in range(100, 110)]


def _scarce_result(seq: int) -> AllocationResult:
    return AllocationResult(cluster="demo", node="node-1", instance_id=ID.instance_id, in_reply_to=seq, scarce=True)


def test_the_agent_goes_lean_offers_above_its_floor_and_leaves_lean() -> None:
    ds, ctl = make(PoolConfig(warm_ip=10, minimum_ip=3), FREE)
    assert ds.assign("c1", "eth0", "ns", 1.0) is not None  # a pod: never touched
    (r,) = ctl.tick(100.0)
    assert r.lean is False and not r.release
    ctl.apply_result(_scarce_result(r.seq), 101.0)
    assert ctl.lean(101.0) and ctl.stats.lean_entered == 1
    # the surplus (9 free, floor 3 in all: 7) waits the release delay, then is offered
    assert ctl.delta(102.0).over == 7
    ctl.tick(102.0)
    reports = ctl.tick(102.0 + TIMING.release_delay_s + 1)
    (offer,) = reports
    assert offer.lean is True
    offered = {ip for o in offer.release for ip in o.ips}
    assert len(offered) == 7
    held_by_pod = ds.counts(200.0).assigned
    assert held_by_pod == 1
    pod_ip = next(a for e in ds.enis() for a, rec in e.addrs.items() if rec.in_use)
    assert pod_ip not in offered
    # renewed by each scarce answer; the warm targets come back once none came for the hold
    ctl.apply_result(_scarce_result(offer.seq), 170.0)
    assert ctl.lean(170.0 + TIMING.lean_hold_s - 1)
    assert not ctl.lean(170.0 + TIMING.lean_hold_s)
    after = 170.0 + TIMING.lean_hold_s
    assert ctl.delta(after).low  # short of its warm target again: it reports (offers answered by the allocator)
    (back,) = ctl.tick(after)
    assert back.lean is False


def test_a_result_without_scarce_does_not_make_it_lean() -> None:
    _, ctl = make(PoolConfig(warm_ip=10, minimum_ip=3), FREE)
    (r,) = ctl.tick(100.0)
    ctl.apply_result(
        AllocationResult(cluster="demo", node="node-1", instance_id=ID.instance_id, in_reply_to=r.seq), 101.0
    )
    assert not ctl.lean(101.0) and ctl.delta(101.0).over == 0


def test_off_on_the_agent_leaves_lean_out_and_ignores_scarce() -> None:
    _, ctl = make(PoolConfig(warm_ip=10, minimum_ip=3), FREE)
    ctl.timing = replace(TIMING, lean_hold_s=0)
    (r,) = ctl.tick(100.0)
    assert r.lean is None and "lean" not in json.loads(r.to_json())
    ctl.apply_result(_scarce_result(r.seq), 101.0)
    assert not ctl.lean(101.0)


def test_the_hold_is_read_from_the_environment() -> None:
    env = {"CLUSTER_NAME": "demo"}
    assert load(env).timing.lean_hold_s == 180.0
    assert load({**env, "WARMPOOL_LEAN_HOLD_S": "0"}).timing.lean_hold_s == 0.0
    assert Timing().lean_hold_s == 180.0
