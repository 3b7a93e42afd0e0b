"""Smoke tests of the EC2 backends (tests/helpers/ec2_backends.py)."""

from __future__ import annotations

import pytest

from tests.helpers.ec2_backends import Backend, open_backend, world


def test_world_has_primary_eni_at_device_zero(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    inst = ec2.describe_instances(InstanceIds=[w.instance])["Reservations"][0]["Instances"][0]
    assert [n["Attachment"]["DeviceIndex"] for n in inst["NetworkInterfaces"]] == [0]
    assert inst["InstanceType"] == "m5.large"
    assert inst["Placement"]["AvailabilityZone"] == "us-east-1a"


def test_boto3_paths_validate_parameters_like_boto3() -> None:
    for b in open_backend("boto3"):
        with pytest.raises(Exception, match="Parameter validation failed"):
            b.ec2.attach_network_interface(NetworkInterfaceId="eni-1", InstanceId="i-1", DeviceIndex="x")
