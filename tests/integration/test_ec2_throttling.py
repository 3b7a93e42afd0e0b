"""Server-side throttling in virtual time, on every way in (fast, boto3 hooks, HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from emulated.ec2 import Ec2Config
from tests.helpers.ec2_backends import EMULATED, Backend, error_of, open_backend, world
from warmpool.buckets import BucketSpec

SMALL = {
    "AssignPrivateIpAddresses": BucketSpec(capacity=5, refill_per_s=1),
    "DescribeNetworkInterfaces:unfiltered": BucketSpec(capacity=3, refill_per_s=1),
}


@pytest.fixture(params=EMULATED)
def small(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from open_backend(request.param, Ec2Config(buckets=SMALL))


def _assign(b: Backend, eid: str) -> None:
    b.ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)


def _eni(b: Backend) -> str:
    w = world(b.ec2, cidr="10.0.0.0/20", instance_type="c5.18xlarge")
    eid: str = b.ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    return eid


def test_drain_refuse_then_refill(small: Backend) -> None:
    assert small.emu is not None and small.clock is not None
    eid = _eni(small)
    for _ in range(5):
        _assign(small, eid)
    for _ in range(3):  # refused calls take no token
        with pytest.raises(ClientError) as e:
            _assign(small, eid)
        assert error_of(e) == ("RequestLimitExceeded", 503)
    small.clock.advance(1.0)
    _assign(small, eid)
    with pytest.raises(ClientError):
        _assign(small, eid)
    small.clock.advance(100.0)  # refill caps at capacity
    for _ in range(5):
        _assign(small, eid)
    with pytest.raises(ClientError):
        _assign(small, eid)
    s = small.emu.stats()["ec2"]["AssignPrivateIpAddresses"]
    assert s == {"calls": 16, "throttled": 5, "errors": 0}


def test_unfiltered_describe_uses_the_smaller_bucket(small: Backend) -> None:
    _eni(small)
    for _ in range(3):
        small.ec2.describe_network_interfaces()
    with pytest.raises(ClientError) as e:
        small.ec2.describe_network_interfaces()
    assert error_of(e) == ("RequestLimitExceeded", 503)
    # Filtered calls draw from the general Describe bucket, untouched.
    small.ec2.describe_network_interfaces(Filters=[{"Name": "status", "Values": ["available"]}])


def test_background_load_drains_the_bucket(small: Backend) -> None:
    assert small.emu is not None and small.clock is not None
    eid = _eni(small)
    small.emu.set_background_load("AssignPrivateIpAddresses", 2.0)  # net -1 token/s
    small.clock.advance(5.0)
    assert small.emu.tokens("AssignPrivateIpAddresses") == pytest.approx(0.0)
    with pytest.raises(ClientError) as e:
        _assign(small, eid)
    assert error_of(e) == ("RequestLimitExceeded", 503)
    small.emu.set_background_load("AssignPrivateIpAddresses", 0.5)  # net +0.5 token/s
    small.clock.advance(2.0)
    _assign(small, eid)
    assert small.emu.tokens("AssignPrivateIpAddresses") == pytest.approx(0.0)


def test_throttling_can_be_switched_off() -> None:
    for b in open_backend("fast", Ec2Config(buckets=SMALL, throttling=False)):
        eid = _eni(b)
        for _ in range(20):
            _assign(b, eid)
