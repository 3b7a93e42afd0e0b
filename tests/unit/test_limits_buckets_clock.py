"""Instance limits, token-bucket arithmetic with AIMD, and the clocks."""

from __future__ import annotations

import math

import pytest

from emulated.clock import EventLoop, VirtualClock
from warmpool import buckets as tb
from warmpool.limits import KNOWN_TYPES, InstanceLimits, known


@pytest.mark.parametrize(
    ("itype", "max_pods"),
    [("t3.medium", 17), ("m5.large", 29), ("m5.xlarge", 58), ("m5.4xlarge", 234), ("c5.18xlarge", 737)],
)
def test_max_pods_matches_the_reference_table(itype, max_pods):
    assert known(itype).max_pods() == max_pods


def test_from_describe_instance_types():
    item = {
        "InstanceType": "m5.xlarge",
        "Hypervisor": "nitro",
        "VCpuInfo": {"DefaultVCpus": 4},
        "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15, "MaximumNetworkCards": 1},
    }
    lim = InstanceLimits.from_describe(item)
    assert lim == KNOWN_TYPES["m5.xlarge"]
    assert lim.max_pods(max_eni=2) == 2 * 14 + 2
    xen = InstanceLimits.from_describe({**item, "Hypervisor": "xen"})
    assert not xen.prefix_capable


def test_unknown_type_names_it():
    with pytest.raises(KeyError, match=r"x9\.huge"):
        known("x9.huge")


SPEC = tb.BucketSpec(capacity=10, refill_per_s=5)


def test_take_until_empty_then_refill():
    s = tb.full(SPEC, 0.0)
    for _ in range(10):
        ok, s = tb.try_take(s, SPEC, 1, 0.0)
        assert ok
    ok, s2 = tb.try_take(s, SPEC, 1, 0.0)
    assert not ok and s2.tokens == pytest.approx(0)
    assert tb.time_until(s, SPEC, 3, 0.0) == pytest.approx(0.6)
    ok, s = tb.try_take(s, SPEC, 3, 0.6)
    assert ok and s.tokens == pytest.approx(0)


def test_refill_caps_at_capacity_and_too_many_is_inf():
    s = tb.BucketState(tokens=0, updated_at=0)
    assert tb.refill(s, SPEC, 100).tokens == 10
    assert tb.time_until(s, SPEC, 11, 0) == math.inf


def test_refused_take_takes_nothing():
    s = tb.BucketState(tokens=2, updated_at=0)
    ok, s2 = tb.try_take(s, SPEC, 3, 0)
    assert not ok and s2.tokens == 2


def test_aimd_cut_and_additive_recovery():
    s = tb.full(SPEC, 0)
    s = tb.on_throttled(s, SPEC, 0)
    assert s.tokens == 0 and s.rate_factor == pytest.approx(0.5)
    s = tb.on_throttled(s, SPEC, 0)
    assert s.rate_factor == pytest.approx(0.25)
    for _ in range(10):
        s = tb.on_throttled(s, SPEC, 0)
    assert s.rate_factor == pytest.approx(tb.AIMD_FLOOR)
    later = tb.refill(s, SPEC, 10)
    assert later.rate_factor == pytest.approx(tb.AIMD_FLOOR + 10 * tb.AIMD_RECOVERY_PER_S)
    # Refill over the ramp is the integral of the rate: 5/s x mean factor x 10 s.
    assert later.tokens == pytest.approx(5 * 10 * (tb.AIMD_FLOOR + later.rate_factor) / 2)
    assert tb.refill(s, SPEC, 1000).rate_factor == 1.0


def test_budget_fraction_and_defaults():
    spec = tb.spec_for("AssignPrivateIpAddresses").scaled(0.8)
    assert (spec.capacity, spec.refill_per_s) == (80, 4)
    assert tb.spec_for("AttachNetworkInterface").capacity == 50
    assert tb.spec_for("DescribeSomething").refill_per_s == 20
    with pytest.raises(ValueError):
        tb.DEFAULT_SPECS["CreateTags"].scaled(1.5)


def test_virtual_clock_never_goes_back():
    c = VirtualClock(5)
    c.advance(1)
    assert c.now() == 6
    with pytest.raises(ValueError):
        c.set(1)


def test_event_loop_orders_by_time_then_insertion():
    loop = EventLoop()
    seen: list[tuple[float, str]] = []
    loop.call_at(2, lambda: seen.append((loop.now(), "b")))
    loop.call_at(1, lambda: seen.append((loop.now(), "a")))
    loop.call_at(2, lambda: seen.append((loop.now(), "c")))
    ev = loop.call_at(1.5, lambda: seen.append((loop.now(), "x")))
    loop.cancel(ev)
    ticks: list[float] = []
    loop.every(1.0, lambda: ticks.append(loop.now()), start=0.5)
    loop.run_until(3.0)
    assert seen == [(1, "a"), (2, "b"), (2, "c")]
    assert ticks == [0.5, 1.5, 2.5]
    assert loop.now() == 3.0
