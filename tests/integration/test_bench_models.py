"""Each modelled behaviour of the baselines (and each cost warmpool pays), on
scripted inputs or the smallest run that shows it. docs/bench.md cites the
source each one follows."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from bench.proc import StandardRetryer, ec2_call, spawn
from bench.runner import run_bench
from bench.scenario import Scenario
from bench.strategies.cilium import Cilium, backoff_s
from bench.strategies.vpc_cni import IMDS_WAIT_TRIES, VpcCni
from bench.strategies.warmpool import COLD_START_S, Warmpool
from bench.workload import expand
from bench.world import BenchWorld
from tests.helpers.bench import small


def scenario(
    strategies: list[str], env: dict[str, Any] | None = None, nodes: int = 1, pods: int = 5, **extra: Any
) -> Scenario:
    """The helpers' small scenario under this module's own name and seed."""
    return small(strategies, env, nodes, pods, **{"name": "model", "seed": 5, **extra})


# --- aws-sdk-go-v2 standard retryer ------------------------------------------


class FixedRng(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def throttle() -> ClientError:
    return ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, "X")


class ScriptedClient:
    """Raises the scripted errors in order, then answers."""

    def __init__(self, errors: int) -> None:
        self.errors = errors
        self.calls = 0

    def assign_private_ip_addresses(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.errors:
            raise throttle()
        return {"ok": True}


def drive(proc: Iterator[float]) -> tuple[list[float], Any]:
    """Run a process to its end; the waits it yielded and its result (or the error)."""
    waits: list[float] = []
    try:
        while True:
            waits.append(next(proc))
    except StopIteration as stop:
        return waits, stop.value
    except ClientError as exc:
        return waits, exc


def test_retryer_backoff_doubles_then_is_capped_at_twenty_seconds() -> None:
    r = StandardRetryer(10)
    rng = FixedRng(0.5)
    assert [r.delay(i, rng) for i in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 20.0, 20.0, 20.0]
    assert all(0 <= r.delay(3, random.Random(s)) < 8 for s in range(50))


def test_retryer_gives_up_after_max_attempts_on_a_throttle_sequence() -> None:
    r = StandardRetryer(10)
    client = ScriptedClient(errors=12)
    waits, out = drive(
        ec2_call(client, "assign_private_ip_addresses", {}, latency=lambda: 0.1, retry=r, rng=FixedRng(0.5))
    )
    assert isinstance(out, ClientError)
    assert client.calls == 10
    backoffs = [w for w in waits if w != 0.1]
    assert backoffs == [1.0, 2.0, 4.0, 8.0, 20.0, 20.0, 20.0, 20.0, 20.0]
    assert r.quota == 500 - 9 * 5


def test_retryer_success_after_retries_returns_their_cost() -> None:
    r = StandardRetryer(10)
    client = ScriptedClient(errors=3)
    _, out = drive(ec2_call(client, "assign_private_ip_addresses", {}, latency=lambda: 0.1, retry=r, rng=FixedRng(0.0)))
    assert out == {"ok": True} and client.calls == 4
    assert r.quota == 500 - 3 * 5 + 5  # the successful retry gives its token back
    r.quota = 400
    drive(
        ec2_call(ScriptedClient(0), "assign_private_ip_addresses", {}, latency=lambda: 0.1, retry=r, rng=FixedRng(0.0))
    )
    assert r.quota == 401  # a first-attempt success adds one
    r.quota = 500
    drive(
        ec2_call(ScriptedClient(0), "assign_private_ip_addresses", {}, latency=lambda: 0.1, retry=r, rng=FixedRng(0.0))
    )
    assert r.quota == 500  # never above its size


def test_retries_stop_while_the_quota_is_empty() -> None:
    r = StandardRetryer(10)
    r.quota = 12  # two retries' worth
    client = ScriptedClient(errors=100)
    _, out = drive(ec2_call(client, "assign_private_ip_addresses", {}, latency=lambda: 0.1, retry=r, rng=FixedRng(0.0)))
    assert isinstance(out, ClientError)
    assert client.calls == 3 and r.quota == 2 and r.quota_refusals == 1


# --- vpc-cni --------------------------------------------------------------------


def test_ipamd_retries_one_address_at_once_after_a_failed_multi_address_assign() -> None:
    # A /27 (27 usable, one taken by the node): WARM_ENI_TARGET=1 asks the whole
    # primary ENI (29) in one call, which fails; tryAssignIPs then asks for one.
    sc = scenario(
        ["vpc-cni"],
        env={"WARM_ENI_TARGET": 1},
        pods=0,
        workload=[],
        subnets=[{"id": "subnet-a", "az": "us-east-1a", "cidr": "10.0.0.0/27"}],
        duration_s=60,
    )
    _, series = run_bench(sc)
    log = [(t, o) for t, a, o in series["vpc-cni"].call_log if a == "AssignPrivateIpAddresses"]
    first_fail = next(i for i, (_, o) in enumerate(log) if o != "ok")
    t_fail, _ = log[first_fail]
    t_next, o_next = log[first_fail + 1]
    assert o_next == "ok" and t_next - t_fail < 0.5  # at once, not a loop (5 s) later


def test_ipamd_eni_path_describes_subnets_and_instance() -> None:
    res, _ = run_bench(scenario(["vpc-cni"], env={"WARM_ENI_TARGET": 1}, pods=5))
    calls = res.strategies["vpc-cni"].ec2_calls
    assert calls.get("CreateNetworkInterface") == 1
    assert calls.get("DescribeSubnets") == 1  # subnet discovery before the create
    assert calls.get("DescribeInstances") == 2  # init, then the free device index before the attach


def test_ipamd_waits_for_imds_with_doubling_backoff() -> None:
    sc = scenario(["vpc-cni"], pods=0, workload=[])
    w = BenchWorld(sc, expand(sc), "vpc-cni")
    strat = VpcCni(w)
    strat.start()
    w.loop.run_until(1.0)
    ipamd = next(iter(strat.ipamds.values()))
    w.eni_visible = lambda eni_id: False  # type: ignore[method-assign]
    waits, seen = drive(ipamd.wait_imds("eni-never"))
    assert seen is False and len(waits) == IMDS_WAIT_TRIES - 1
    for k, d in enumerate(waits):
        base = min(60.0, 0.1 * 2**k)
        assert base <= d <= base * 1.15 + 1e-9, (k, d)


def test_a_failed_add_is_retried_by_the_kubelet_ten_to_fifteen_seconds_later() -> None:
    # WARM_IP_TARGET=1, five pods at once: the first takes the warm address, the
    # other four fail their ADD; ipamd tops the pool up within a loop, but a pod
    # gets an address only when the kubelet retries it (10–15 s after its failure).
    res, series = run_bench(scenario(["vpc-cni"], pods=5))
    r = res.strategies["vpc-cni"]
    assert r.pods_ready == 5
    assert r.time_to_ip_s.max is not None and r.time_to_ip_s.max >= 10.0
    assert r.time_to_ip_s.p50 is not None and r.time_to_ip_s.p50 >= 10.0
    assigns = [t for t, a, o in series["vpc-cni"].call_log if a == "AssignPrivateIpAddresses" and o == "ok"]
    assert len([t for t in assigns if t >= 30]) == 5  # still one address per action at WARM_IP_TARGET=1


# --- Cilium ---------------------------------------------------------------------


def test_cilium_resyncs_the_instance_after_each_mutation_before_allocating_again() -> None:
    _, series = run_bench(scenario(["cilium"], pods=20))
    log = [(a, o) for _, a, o in series["cilium"].call_log]
    mutations = 0
    synced = True
    for a, o in log:
        if a in ("AssignPrivateIpAddresses", "CreateNetworkInterface") and o == "ok":
            assert synced, "allocated again before a resync"
            synced = False
            mutations += 1
        elif a == "DescribeNetworkInterfaces" and o == "ok":
            synced = True
    assert mutations >= 3


def _operator_with_one_node() -> tuple[BenchWorld, Any, Any]:
    sc = scenario(["cilium"], workload=[{"at_s": 800, "node_group": "ng", "add_pods_per_node": 1}])
    w = BenchWorld(sc, expand(sc), "cilium")
    strat = Cilium(w)
    strat.start()
    w.loop.run_until(25.0)  # joined, registered, warm address in place
    op = next(iter(strat.operators.values()))
    return w, op, next(iter(op.nodes.values()))


def test_cilium_does_not_react_to_pod_creation() -> None:
    w, op, node = _operator_with_one_node()
    assert node.pool.total - node.pool.assigned == 1
    node.status_used = 0
    node.last_push = w.now()  # the agent wrote its status just now
    before = len(w.ec2.log)
    for i in range(3):
        op.pod_add(node.rt, f"p{i}")
    assert not op.dirty and not node.running  # nothing triggered by the pods themselves
    assert len(w.ec2.log) == before
    w.loop.run_until(w.now() + 16.0)  # the agent's next status write (15 s) reports the need
    assert any(a == "AssignPrivateIpAddresses" for t, a, _ in w.ec2.log[before:])


def test_cilium_surges_only_when_needed_is_positive() -> None:
    _, _, node = _operator_with_one_node()
    node.pool.pending.extend(["a", "b", "c", "d", "e"])
    node.status_used = node.pool.total  # all in use: needed = pre_allocate = 1
    assert node.needed() == 1 and node.to_allocate() == 5
    node.pre_allocate = 0
    assert node.needed() == 0 and node.to_allocate() == 0


def test_cilium_failure_backoff_scales_with_ln_of_the_node_count() -> None:
    assert backoff_s(1, 200, 0.0) == pytest.approx(math.log1p(200))
    assert backoff_s(1, 200, 1.0) == pytest.approx(2 * math.log1p(200))
    assert backoff_s(3, 200, 1.0) == pytest.approx(8 * math.log1p(200))
    assert backoff_s(12, 200, 1.0) == 300.0
    assert backoff_s(1, 0, 0.0) == 1.0


# --- warmpool pays the same costs ------------------------------------------------


def _first_wait(latency: float) -> float:
    sc = scenario(
        ["warmpool"],
        pods=1,
        workload=[{"at_s": 0, "node_group": "ng", "add_pods_per_node": 1}],
        ec2={"api_latency_s": latency},
    )
    res, _ = run_bench(sc)
    t = res.strategies["warmpool"].time_to_ip_s.max
    assert t is not None
    return t


def test_warmpool_results_wait_for_ec2_latency_and_the_cold_start() -> None:
    slow, fast = _first_wait(2.0), _first_wait(0.1)
    assert slow - fast >= 1.9 - 1e-6  # one AssignPrivateIpAddresses, 1.9 s slower
    assert fast >= COLD_START_S  # the first invocation starts an execution environment


def test_warmpool_counts_cold_starts_and_pollers_scale_up() -> None:
    sc = scenario(["warmpool"], nodes=2, pods=3)
    w = BenchWorld(sc, expand(sc), "warmpool")
    strat = Warmpool(w)
    cluster = next(iter(strat.clusters.values()))
    assert cluster.pollers(0.0) == 5
    cluster._active_since = 10.0
    assert cluster.pollers(10.0) == 5 and cluster.pollers(10.5) == 7 and cluster.pollers(12.0) == 10
    strat.start()
    spawn(w.loop, iter(()))  # type: ignore[arg-type]
    w.run(busy=strat.busy)
    assert strat.counts["cold_starts"] >= 1


def test_warmpool_is_not_told_the_accounts_real_quotas() -> None:
    sc = scenario(["warmpool"], account={"buckets": {"AttachNetworkInterface": {"capacity": 10, "refill_per_s": 1}}})
    w = BenchWorld(sc, expand(sc), "warmpool")
    strat = Warmpool(w)
    cluster = next(iter(strat.clusters.values()))
    assumed = cluster.settings.bucket_spec("AttachNetworkInterface")
    assert assumed.capacity == pytest.approx(50 * 0.8)
    assert w.emu.config.buckets["AttachNetworkInterface"].capacity == 10  # what EC2 enforces
