"""The allocator's side of the fault suite, in a closed loop with the real agent
logic, in virtual time (see ``cluster.py``). Each test injects faults, lets
the system run, then checks every invariant (``invariants.py``)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from functions.allocator import Record, ThreadMapper
from functions.ec2 import Ec2
from tests.helpers.crashing import CrashingEc2, CrashingLedger, CrashingSqs, DeadLeases
from tests.helpers.reliability_cluster import ReliabilityCluster
from warmpool.buckets import MUTATING_ENI_ACTIONS
from warmpool.pool import PoolConfig


def _crash_type() -> type[BaseException]:
    from tests.helpers.crashing import Crash

    return Crash


Crash = _crash_type()


def _survived(c: ReliabilityCluster, request: pytest.FixtureRequest) -> None:
    c.faults.survived(request.node.nodeid)


# --- throttling -------------------------------------------------------------------------


def test_throttle_storm_from_other_callers_for_minutes(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(6)
    # Other callers in the account drain every ENI bucket faster than it refills, for 5 minutes.
    for action in MUTATING_ENI_ACTIONS:
        c.w.emu.set_background_load(action, 12.0)
    c.faults.inject("throttle-storm", len(MUTATING_ENI_ACTIONS))
    c.run(30)  # the buckets are empty now
    for n in c.nodes:
        c.scale(n, 25)
    c.run(270)
    throttled_during = c.w.throttled()
    assert throttled_during > 0  # the storm was felt...
    # ...and the shared buckets were cut (AIMD): the allocator backs off instead of
    # hammering an empty bucket (at most one throttled call every 2 s, all nodes together).
    assert throttled_during <= 300 / 2, throttled_during
    cut = c.w.buckets.load("AssignPrivateIpAddresses", c.clock.now()).rate_factor
    assert cut < 1, cut
    waiting = sum(n.wanted - len(n.ds.pods()) for n in c.nodes.values())
    for action in MUTATING_ENI_ACTIONS:
        c.w.emu.set_background_load(action, 0)
    c.settle()
    assert waiting > 0
    c.check()
    _survived(c, request)


# --- crashes and redelivery ---------------------------------------------------------------

UP_STEPS = {
    "create": ("ec2", "create_network_interface"),
    "attach": ("ec2", "attach_network_interface"),
    "modify": ("ec2", "modify_network_interface_attribute"),
    "assign": ("ec2", "assign_private_ip_addresses"),
    "ledger": ("ledger", ""),
    "push": ("sqs", ""),
}
DOWN_STEPS = {
    "unassign": ("ec2", "unassign_private_ip_addresses"),
    "detach": ("ec2", "detach_network_interface"),
    "delete": ("ec2", "delete_network_interface"),
    "ledger": ("ledger", ""),
    "push": ("sqs", ""),
}


def _crashing(c: ReliabilityCluster, kind: str, method: str) -> Any:
    swap: dict[str, Any] = {"leases": DeadLeases(c.w.leases)}  # a dead invocation never releases its leases
    if kind == "ec2":
        swap["ec2"] = CrashingEc2(c.w.ec2_client, method)
    elif kind == "ledger":
        swap["ledger"] = CrashingLedger(c.w.ledger)
    else:
        swap["sqs"] = CrashingSqs(c.w.sqs.client())
    return c.w.allocator(**swap)


def _crash_once(c: ReliabilityCluster, kind: str, method: str, until: float = 120) -> list[Record]:
    """Run until one batch crashes the allocator; returns that batch. SQS keeps
    its records in flight and redelivers them after the visibility timeout."""
    crashing = _crashing(c, kind, method)
    c.allocators = [crashing]
    seen: list[list[Record]] = []
    c.before_batch = seen.append
    end = c.clock.now() + until
    crashed: list[Record] = []
    while c.clock.now() < end and not crashed:
        try:
            c.step()
        except Crash:
            crashed = seen[-1]
            c.clock.advance(1)
    c.allocators = [c.w.alloc]
    c.before_batch = None
    assert crashed, f"the {method or kind} step never ran"
    c.faults.inject(f"allocate-crash-after-{method or kind}")
    return crashed


def _redeliver(c: ReliabilityCluster, batch: list[Record], times: int) -> None:
    before = c.w.mutating_calls()
    for _ in range(times):
        c.w.alloc.handle_batch(batch)
    c.faults.inject(f"batch-redelivered-x{times}")
    assert c.w.mutating_calls() == before, "a redelivered batch made an EC2 call"


@pytest.mark.parametrize("times", [2, 3])
@pytest.mark.parametrize("step", list(UP_STEPS))
def test_allocate_crashes_after_a_scale_up_step_then_batch_redelivered(
    step: str, times: int, request: pytest.FixtureRequest
) -> None:
    c = ReliabilityCluster(3)
    for n in c.nodes:
        c.scale(n, 22)  # past the primary ENI: create, attach, modify and assign all happen
    batch = _crash_once(c, *UP_STEPS[step])
    c.settle()
    _redeliver(c, batch, times)
    c.run(30)
    c.check()
    _survived(c, request)


@pytest.mark.parametrize("times", [2, 3])
@pytest.mark.parametrize("step", list(DOWN_STEPS))
def test_allocate_crashes_after_a_release_step_then_batch_redelivered(
    step: str, times: int, request: pytest.FixtureRequest
) -> None:
    c = ReliabilityCluster(3)
    for n in c.nodes:
        c.scale(n, 22)
    c.settle()
    for n in c.nodes:
        c.scale(n, 1)  # surplus ENIs and addresses are offered back after the release delay
    batch = _crash_once(c, *DOWN_STEPS[step], until=400)
    c.run(400)  # quarantine times out, resyncs run, offers are made again
    _redeliver(c, batch, times)
    c.run(30)
    c.check()
    assert all(len(c.w.enis(n)) == 1 for n in c.nodes), "surplus ENIs were not given back"
    _survived(c, request)


# --- concurrency ------------------------------------------------------------------------------


def test_concurrent_invocations_racing_on_the_same_nodes(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(8)
    racers = [c.w.allocator(ThreadMapper(4)) for _ in range(3)]

    def race(recs: list[Record]) -> None:
        # Every invocation gets the whole batch at the same instant (duplicate delivery + overlap).
        barrier = threading.Barrier(len(racers))
        errors: list[BaseException] = []

        def go(a: Any) -> None:
            barrier.wait()
            try:
                a.handle_batch(recs)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        ts = [threading.Thread(target=go, args=(a,)) for a in racers]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        c.faults.inject("concurrent-invocations", len(racers))

    c.before_batch = race
    for n in c.nodes:
        c.scale(n, 30)
    c.run(20)
    c.before_batch = None
    c.settle()
    c.check()
    assert c.w.throttled() == 0
    _survived(c, request)


# --- EC2 failures ----------------------------------------------------------------------------


def test_attach_failures(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(4)
    c.w.emu.fail_rate("AttachNetworkInterface", "InternalError", 0.4)
    for n in c.nodes:
        c.scale(n, 25)
    c.run(240)
    errors = c.w.ec2_stats()["AttachNetworkInterface"]["errors"]
    assert errors > 0
    c.faults.inject("attach-failure", errors)
    c.w.emu.fail_rate("AttachNetworkInterface", "InternalError", 0)
    c.settle()
    c.check()
    _survived(c, request)


def test_subnet_exhaustion_moves_on_then_fails_cleanly_then_recovers(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(3, subnet_cidrs=("10.0.0.0/24", "10.0.1.0/24"))
    emu = c.w.emu
    emu.set_subnet_exhausted(c.w.subnets[0])
    c.faults.inject("subnet-exhausted")
    for n in c.nodes:
        c.scale(n, 18)  # the primary ENI sits in the full subnet: two new ENIs x 9 addresses
    c.settle()
    c.check()  # served from the second subnet
    assert all(e.subnet_id == c.w.subnets[1] for n in c.nodes for e in c.w.enis(n)[1:])
    emu.set_subnet_exhausted(c.w.subnets[1])
    c.faults.inject("subnet-exhausted")
    for n in c.nodes:
        c.scale(n, 27)
    c.run(120)
    c.check(short_ok=tuple(c.nodes))  # nothing to be had: failed cleanly, nothing leaked or doubled
    assert all(len(n.ds.pods()) == 18 for n in c.nodes.values())
    emu.set_subnet_exhausted(c.w.subnets[0], exhausted=False)
    emu.set_subnet_exhausted(c.w.subnets[1], exhausted=False)
    c.settle()
    c.check()
    _survived(c, request)


def test_prefix_fragmentation_falls_back_to_single_addresses(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(2, pool=PoolConfig(warm_prefix=1, prefix_mode=True), subnet_cidrs=("10.0.0.0/22",))
    pool = c.w.emu.subnets[c.w.subnets[0]].pool
    # One address taken in every /28: no aligned block is free, yet hundreds of addresses are.
    for block in range(pool.size // 16):
        pool.take_ip(pool.ip(block * 16 + 7))
    assert pool.free_blocks() == 0 and pool.available > 500
    for n in c.nodes:
        c.scale(n, 12)
    c.settle()
    errors = c.w.ec2_stats()["AssignPrivateIpAddresses"]["errors"]
    assert errors >= 1  # InsufficientCidrBlocks, then the fallback
    c.faults.inject("prefix-fragmentation", errors)
    assert all(not e.prefixes for e in c.w.emu.enis.values())
    c.check()
    _survived(c, request)


class StaleInventory:
    """Another caller assigns addresses to the ENI between our Describe and our Assign."""

    def __init__(self, inner: Any, emu: Any) -> None:
        self.inner, self.emu, self.done = inner, emu, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def assign_private_ip_addresses(self, **kw: Any) -> Any:
        if not self.done:
            self.done += 1
            eni = self.emu.enis[kw["NetworkInterfaceId"]]
            room = 10 - 1 - len(eni.secondary)  # m5.large: 10 addresses per ENI
            self.emu.client().assign_private_ip_addresses(
                NetworkInterfaceId=eni.id, SecondaryPrivateIpAddressCount=room
            )
        return self.inner.assign_private_ip_addresses(**kw)


def test_private_ip_address_limit_exceeded_from_stale_inventory(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(2)
    stale = StaleInventory(c.w.ec2_client, c.w.emu)
    assert isinstance(c.w.alloc.ec2, Ec2)
    c.w.alloc.ec2.api = stale
    c.w.alloc.executor.ec2 = c.w.alloc.ec2
    for n in c.nodes:
        c.scale(n, 5)
    c.settle()
    assert c.w.ec2_stats()["AssignPrivateIpAddresses"]["errors"] >= 1
    c.faults.inject("private-ip-address-limit-exceeded")
    c.check()
    _survived(c, request)


class TerminateMidway:
    """The node's instance is terminated right after its new ENI is created."""

    def __init__(self, inner: Any, emu: Any, victim: str) -> None:
        self.inner, self.emu, self.victim, self.hit = inner, emu, victim, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_network_interface(self, **kw: Any) -> Any:
        out = self.inner.create_network_interface(**kw)
        tags = {t["Key"]: t["Value"] for s in kw.get("TagSpecifications", []) for t in s["Tags"]}
        if not self.hit and tags.get("node.k8s.amazonaws.com/instance_id") == self.victim:
            self.hit += 1
            self.emu.terminate_instance(self.victim)
        return out


def test_instance_terminated_in_the_middle_of_an_allocation(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(3)
    victim = c.nodes["n1"].instance_id
    mid = TerminateMidway(c.w.ec2_client, c.w.emu, victim)
    assert isinstance(c.w.alloc.ec2, Ec2)
    c.w.alloc.ec2.api = mid
    c.w.alloc.executor.ec2 = c.w.alloc.ec2
    for n in c.nodes:
        c.scale(n, 22)
    c.settle()
    assert mid.hit == 1
    c.faults.inject("instance-terminated-mid-allocation")
    # A report the dead node sent before it died is rejected, not retried (it is no longer valid).
    reasons = Counter(m["MessageAttributes"]["reason"]["StringValue"] for m in c.w.queued(c.w.dlq_url))
    assert set(reasons) <= {"instance-not-running", "instance-not-found"}, reasons
    c.check()
    _survived(c, request)
