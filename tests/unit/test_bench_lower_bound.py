"""Lower-bound arithmetic on small cases checked by hand (docs/bench.md)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.lower_bound import (
    bucket_finish,
    bucket_finish_varying,
    lower_bound,
    online_lower_bound,
    pod_counts,
    settled_pool,
)
from bench.scenario import Env, parse_scenario
from bench.workload import expand
from warmpool.buckets import BucketSpec
from warmpool.limits import known
from warmpool.pool import PoolConfig, PoolState, compute


def scenario(env: dict[str, Any], count: int, pods: int, delete: int = 0, **extra: Any) -> Any:
    workload: list[dict[str, Any]] = [{"at_s": 10, "node_group": "ng", "add_pods_per_node": pods}] if pods else []
    if delete:
        workload.append({"at_s": 100, "node_group": "ng", "delete_pods_per_node": delete})
    return parse_scenario(
        {
            "name": "lb",
            "duration_s": 600,
            "cluster": {"name": "c", "env": env},
            "subnets": [{"id": "subnet-a", "az": "us-east-1a", "cidr": "10.0.0.0/16"}],
            "node_groups": [{"name": "ng", "instance_type": "m5.large", "count": count}],
            "workload": workload,
            **extra,
        }
    )


def test_warm_ip_one_node_five_pods_is_one_assign() -> None:
    # m5.large: 9 slots per ENI; 5 pods + 1 warm = 6 addresses on the primary ENI: 1 call.
    lb = lower_bound(scenario({"WARM_IP_TARGET": 1}, 1, 5))
    assert lb.mutating_calls == 1
    assert lb.calls_by_action == {"AssignPrivateIpAddresses": 1}
    assert lb.makespan_s == 10.0  # the pods' creation; one token is there at once


def test_second_eni_costs_create_attach_modify() -> None:
    # 12 pods + 1 warm = 13 > 9: primary filled (1 assign) + 1 new ENI (3 calls).
    lb = lower_bound(scenario({"WARM_IP_TARGET": 1}, 1, 12))
    assert lb.mutating_calls == 4
    assert lb.calls_by_action == {
        "AssignPrivateIpAddresses": 1,
        "AttachNetworkInterface": 1,
        "CreateNetworkInterface": 1,
        "ModifyNetworkInterfaceAttribute": 1,
    }


def test_warm_eni_counts_the_warm_eni_and_releases_whole_enis() -> None:
    # WARM_ENI_TARGET=1, 12 pods on m5.large: ceil(12/9)+1 = 3 ENIs -> 1 + 2*3 = 7 calls.
    # Down to 2 pods: ceil(2/9)+1 = 2 ENIs -> one ENI detached + deleted.
    lb = lower_bound(scenario({"WARM_ENI_TARGET": 1}, 1, 12, delete=10))
    assert lb.calls_by_action["CreateNetworkInterface"] == 2
    assert lb.calls_by_action["DetachNetworkInterface"] == 1
    assert lb.calls_by_action["DeleteNetworkInterface"] == 1
    assert lb.mutating_calls == 7 + 2


def test_ip_mode_release_is_one_unassign_per_eni_touched() -> None:
    # 12 pods + 1 warm = 13 at peak; 2 pods + 1 = 3 at the end: 10 surplus over 9 slots -> 2 calls.
    lb = lower_bound(scenario({"WARM_IP_TARGET": 1}, 1, 12, delete=10))
    assert lb.calls_by_action["UnassignPrivateIpAddresses"] == 2


def test_prefix_mode_counts_prefixes() -> None:
    env = Env(ENABLE_PREFIX_DELEGATION=True, WARM_PREFIX_TARGET=1)
    s = settled_pool(env, known("m5.large"), 40)  # ceil(40/16)+1 = 4 prefixes on one ENI
    assert (s.units, s.enis, s.addresses) == (4, 1, 64)


def test_bucket_formula_when_all_calls_are_released_together() -> None:
    # 500 calls, capacity 100*0.8 = 80 at once, then 5*0.8 - 1 = 3 per second: 420/3 = 140 s.
    spec = BucketSpec(capacity=100, refill_per_s=5)
    assert bucket_finish([0.0] * 500, spec, 0.8, 1.0) == pytest.approx(140.0)
    assert bucket_finish([20.0] * 500, spec, 0.8, 1.0) == pytest.approx(160.0)
    assert bucket_finish([0.0] * 80, spec, 0.8, 0.0) == 0.0
    assert bucket_finish([], spec, 0.8, 0.0) == 0.0


def test_bucket_refills_between_spread_releases() -> None:
    spec = BucketSpec(capacity=10, refill_per_s=1)
    # 10 at t=0 drain it; 10 more at t=100 find it full again.
    assert bucket_finish([0.0] * 10 + [100.0] * 10, spec, 1.0, 0.0) == pytest.approx(100.0)


def test_makespan_bound_from_the_attach_bucket() -> None:
    # 100 nodes x 12 pods at WARM_IP=1: 100 attaches; Attach capacity 50*0.8=40, refill 4/s:
    # (100-40)/4 = 15 s after every node joined at t=0.
    lb = lower_bound(scenario({"WARM_IP_TARGET": 1}, 100, 12))
    assert lb.makespan_s == pytest.approx(15.0)
    bg = lower_bound(
        scenario(
            {"WARM_IP_TARGET": 1},
            100,
            12,
            account={"budget_fraction": 0.8, "background_load": {"AttachNetworkInterface": 2.0}},
        )
    )
    assert bg.makespan_s == pytest.approx(30.0)  # (100-40)/(4-2)


def test_pod_counts_peak_and_final() -> None:
    assert pod_counts([(1, "add"), (2, "add"), (3, "del"), (4, "add")]) == (2, 2)
    assert pod_counts([(1, "add"), (1, "del"), (1, "add")]) == (1, 1)


@pytest.mark.parametrize("pods", [0, 1, 5, 9, 10, 30, 100, 233])
@pytest.mark.parametrize(
    "env",
    [
        Env(WARM_IP_TARGET=1),
        Env(WARM_IP_TARGET=3, MINIMUM_IP_TARGET=10),
        Env(WARM_ENI_TARGET=1),
        Env(WARM_ENI_TARGET=2),
        Env(ENABLE_PREFIX_DELEGATION=True, WARM_PREFIX_TARGET=1),
        Env(ENABLE_PREFIX_DELEGATION=True, WARM_IP_TARGET=5),
    ],
)
def test_settled_pool_is_neither_low_nor_high_by_the_core(env: Env, pods: int) -> None:
    limits = known("m5.4xlarge")
    s = settled_pool(env, limits, pods)
    cfg = PoolConfig(
        warm_ip=env.WARM_IP_TARGET,
        minimum_ip=env.MINIMUM_IP_TARGET,
        warm_eni=env.WARM_ENI_TARGET,
        warm_prefix=env.WARM_PREFIX_TARGET,
        prefix_mode=env.ENABLE_PREFIX_DELEGATION,
    )
    assigned = min(pods, s.addresses)
    delta = compute(
        cfg,
        PoolState(
            total=s.addresses,
            assigned=assigned,
            enis=s.enis,
            free_prefixes=s.units - -(-assigned // 16) if env.ENABLE_PREFIX_DELEGATION else 0,
        ),
        limits,
    )
    assert not delta.low
    assert delta.over_units == 0 and delta.over_enis == 0


# --- the online bound: demand known only when each pod arrives ----------------


def test_online_bound_pays_the_join_time_warm_assign_then_tops_up() -> None:
    # m5.large (9 slots): the join-time pool is 1 address (WARM_IP_TARGET=1); 5 pods
    # need 6 on the primary ENI: online, the join assign and a top-up (2 calls), where
    # the clairvoyant bound fills the primary ENI once (1 call).
    sc = scenario({"WARM_IP_TARGET": 1}, 1, 5)
    assert lower_bound(sc).mutating_calls == 1
    olb = online_lower_bound(sc)
    assert olb.mutating_calls == 2
    assert olb.calls_by_action == {"AssignPrivateIpAddresses": 2}
    assert olb.makespan_s == 10.0


def test_online_bound_releases_a_second_eni_only_when_the_pods_ask_for_it() -> None:
    # 12 pods over 100 s on an m5.large: the second ENI is asked for when the 9th pod
    # (9 + 1 warm > 9 slots) is there; 40 nodes' attaches then queue in the bucket.
    sc = scenario(
        {"WARM_IP_TARGET": 1},
        40,
        0,
        workload=[{"at_s": 10, "node_group": "ng", "add_pods_per_node": 12, "spread_s": 100}],
    )
    lb, olb = lower_bound(sc), online_lower_bound(sc)
    assert lb.mutating_calls == 40 * 4 and olb.mutating_calls == 40 * 5
    assert olb.makespan_s >= lb.makespan_s
    ex = expand(sc)
    ninth = []
    for evs in ex.by_node().values():
        adds = sorted(e.at for e in evs if e.kind == "add")
        ninth.append(adds[8])
    # attach bucket (C=50·0.8, r=5·0.8): 40 calls fit in the burst, so each is made at its release
    assert olb.makespan_s == pytest.approx(max(max(ninth), ex.last_add_at), abs=1e-3)


def test_online_bound_equals_clairvoyant_in_warm_eni_mode_when_known_at_join() -> None:
    sc = scenario({"WARM_ENI_TARGET": 1}, 3, 5)
    assert online_lower_bound(sc).mutating_calls == lower_bound(sc).mutating_calls


def test_varying_bucket_matches_the_constant_one_and_counts_storms_and_exhaustion() -> None:
    spec = BucketSpec(capacity=50, refill_per_s=5)
    times = [0.0] * 60 + [30.0] * 10
    assert bucket_finish_varying([(t, ()) for t in times], spec, 0.8, 1.0) == pytest.approx(
        bucket_finish(times, spec, 0.8, 1.0)
    )
    # 60 calls at 0 through a full bucket of 50 refilled at 5/s: the last at 2 s;
    # a storm of 4 calls/s from 0 to 100 s leaves 1/s: the last at 10 s
    calls: list[tuple[float, tuple[tuple[float, float], ...]]] = [(0.0, ())] * 60
    assert bucket_finish_varying(calls, spec, 1.0, 0.0) == pytest.approx(2.0)
    assert bucket_finish_varying(calls, spec, 1.0, 0.0, ((0.0, 100.0, 4.0),)) == pytest.approx(10.0)
    # a call that cannot succeed while its subnet is exhausted (5 s to 20 s) waits for the end
    assert bucket_finish_varying([(6.0, ((5.0, 20.0),))], spec, 1.0, 0.0) == pytest.approx(20.0)


def test_online_bound_counts_the_faults_no_allocator_avoids() -> None:
    base = scenario({"WARM_IP_TARGET": 1}, 20, 12)
    storm = scenario(
        {"WARM_IP_TARGET": 1},
        20,
        12,
        faults=[{"at_s": 0, "duration_s": 600, "kind": "subnet-exhausted", "subnet": "subnet-a", "rate": 1.0}],
    )
    assert online_lower_bound(base).makespan_s < 600 <= online_lower_bound(storm).makespan_s


def test_online_bound_merges_the_join_time_assign_when_pods_come_first() -> None:
    # Pods created at the node's join: no join-time assign can come before them,
    # so one assign may hold both; the online calls equal the clairvoyant ones.
    sc = scenario({"WARM_IP_TARGET": 1}, 1, 0, workload=[{"at_s": 0, "node_group": "ng", "add_pods_per_node": 5}])
    assert online_lower_bound(sc).mutating_calls == lower_bound(sc).mutating_calls == 1
