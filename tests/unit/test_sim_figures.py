"""The figures the bench, the demo and the simulation share (emulated/figures.py), defined once."""

from __future__ import annotations

import random

import numpy as np
import pytest

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.figures import leaked_enis, percentile


def test_percentile_interpolates_between_closest_ranks() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert percentile(xs, 50) == 50.5
    assert percentile(xs, 99) == pytest.approx(99.01)
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None
    assert percentile(reversed(xs), 50) == 50.5  # any order, any iterable


def test_percentile_is_numpys_default_method() -> None:
    r = random.Random(7)
    for n in (1, 2, 3, 10, 57, 200):
        xs = [r.expovariate(0.1) for _ in range(n)]
        for q in (0, 1, 50, 90, 99, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12, abs=1e-12)


def test_percentile_refuses_a_fraction_out_of_range() -> None:
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0], 101)


def test_leaked_enis_are_the_ones_left_detached_once_pending_detaches_land() -> None:
    clock = VirtualClock(0.0)
    emu = Ec2Emulator(clock, Ec2Config(attach_delay_s=0.0, detach_delay_s=2.0))
    vpc = emu.add_vpc("10.0.0.0/16")
    subnet = emu.add_subnet(az="us-east-1a", cidr="10.0.0.0/24", vpc_id=vpc)
    iid = emu.run_instance("m5.large", subnet)
    ec2 = emu.client()
    assert leaked_enis(emu) == 0  # the primary ENI is attached
    loose = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    assert leaked_enis(emu) == 1
    kept = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    att = ec2.attach_network_interface(NetworkInterfaceId=kept, InstanceId=iid, DeviceIndex=1)["AttachmentId"]
    assert leaked_enis(emu) == 1
    ec2.detach_network_interface(AttachmentId=att)
    assert leaked_enis(emu) == 1  # still detaching
    clock.advance(2.5)
    assert leaked_enis(emu) == 2
    ec2.delete_network_interface(NetworkInterfaceId=loose)
    assert leaked_enis(emu) == 1
