"""Fault injection, latency, attach/detach delays, counters and termination, on every way in."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.ec2.http import serve
from tests.helpers.ec2_backends import EMULATED, Backend, error_of, open_backend, world


@pytest.fixture(params=EMULATED)
def emulated(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from open_backend(request.param, Ec2Config(attach_delay_s=5.0, detach_delay_s=2.0))


def _new(b: Backend) -> tuple[Any, str]:
    w = world(b.ec2)
    eid = b.ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    return w, eid


def test_fail_next_n_calls_with_a_code(emulated: Backend) -> None:
    assert emulated.emu is not None
    w, eid = _new(emulated)
    emulated.emu.fail_next("AttachNetworkInterface", "InternalError", n=2)
    for _ in range(2):
        with pytest.raises(ClientError) as e:
            emulated.ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)
        assert error_of(e) == ("InternalError", 500)
    emulated.ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)
    assert emulated.emu.stats()["ec2"]["AttachNetworkInterface"] == {"calls": 3, "throttled": 0, "errors": 2}


def test_attach_becomes_visible_after_the_delay(emulated: Backend) -> None:
    assert emulated.emu is not None and emulated.clock is not None
    seen: list[tuple[str, str]] = []
    emulated.emu.on_attach(lambda iid, eni: seen.append((iid, eni["NetworkInterfaceId"])))
    w, eid = _new(emulated)
    emulated.ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)
    eni = emulated.ec2.describe_network_interfaces(NetworkInterfaceIds=[eid])["NetworkInterfaces"][0]
    assert eni["Attachment"]["Status"] == "attaching"
    macs = emulated.emu.instance_metadata(w.instance)["network"]["interfaces"]["macs"]
    assert eni["MacAddress"] not in macs and seen == []
    emulated.clock.advance(5.0)
    eni = emulated.ec2.describe_network_interfaces(NetworkInterfaceIds=[eid])["NetworkInterfaces"][0]
    assert eni["Attachment"]["Status"] == "attached"
    macs = emulated.emu.instance_metadata(w.instance)["network"]["interfaces"]["macs"]
    assert macs[eni["MacAddress"]]["device-number"] == "1"
    assert seen == [(w.instance, eid)]


def test_detaching_eni_cannot_be_deleted_until_detached(emulated: Backend) -> None:
    assert emulated.clock is not None
    w, eid = _new(emulated)
    aid = emulated.ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)[
        "AttachmentId"
    ]
    emulated.ec2.detach_network_interface(AttachmentId=aid)
    with pytest.raises(ClientError) as e:
        emulated.ec2.delete_network_interface(NetworkInterfaceId=eid)
    assert error_of(e) == ("InvalidNetworkInterface.InUse", 400)
    emulated.clock.advance(2.0)
    emulated.ec2.delete_network_interface(NetworkInterfaceId=eid)


def test_subnet_exhausted_fault(emulated: Backend) -> None:
    assert emulated.emu is not None
    w, eid = _new(emulated)
    emulated.emu.set_subnet_exhausted(w.subnet)
    with pytest.raises(ClientError) as e:
        emulated.ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)
    assert error_of(e) == ("InsufficientFreeAddressesInSubnet", 400)
    emulated.emu.set_subnet_exhausted(w.subnet, exhausted=False)
    emulated.ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)


def test_terminate_deletes_eni_marked_delete_on_termination(emulated: Backend) -> None:
    w, eid = _new(emulated)
    keep = emulated.ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    aid = emulated.ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)[
        "AttachmentId"
    ]
    emulated.ec2.attach_network_interface(NetworkInterfaceId=keep, InstanceId=w.instance, DeviceIndex=2)
    emulated.ec2.modify_network_interface_attribute(
        NetworkInterfaceId=eid, Attachment={"AttachmentId": aid, "DeleteOnTermination": True}
    )
    emulated.ec2.terminate_instances(InstanceIds=[w.instance])
    left = emulated.ec2.describe_network_interfaces(Filters=[{"Name": "subnet-id", "Values": [w.subnet]}])
    assert [(n["NetworkInterfaceId"], n["Status"]) for n in left["NetworkInterfaces"]] == [(keep, "available")]
    inst = emulated.ec2.describe_instances(InstanceIds=[w.instance])["Reservations"][0]["Instances"][0]
    assert inst["State"]["Name"] == "terminated"


def test_detach_primary_is_not_permitted(emulated: Backend) -> None:
    w, _ = _new(emulated)
    inst = emulated.ec2.describe_instances(InstanceIds=[w.instance])["Reservations"][0]["Instances"][0]
    aid = inst["NetworkInterfaces"][0]["Attachment"]["AttachmentId"]
    with pytest.raises(ClientError) as e:
        emulated.ec2.detach_network_interface(AttachmentId=aid)
    assert error_of(e) == ("OperationNotPermitted", 400)


def test_describe_instance_types_serves_the_limits(emulated: Backend) -> None:
    r = emulated.ec2.describe_instance_types(InstanceTypes=["m5.4xlarge"])["InstanceTypes"][0]["NetworkInfo"]
    assert (r["MaximumNetworkInterfaces"], r["Ipv4AddressesPerInterface"]) == (8, 30)
    with pytest.raises(ClientError) as e:
        emulated.ec2.describe_instance_types(InstanceTypes=["x9.nope"])
    assert error_of(e) == ("InvalidInstanceType", 400)


def test_latency_is_reported_per_action() -> None:
    emu = Ec2Emulator(VirtualClock(), Ec2Config(api_latency_s=0.05))
    emu.add_latency("CreateNetworkInterface", 0.2)
    assert emu.latency_for("CreateNetworkInterface") == pytest.approx(0.25)
    assert emu.latency_for("AssignPrivateIpAddresses") == pytest.approx(0.05)


def test_fail_rate_is_seeded() -> None:
    def run() -> list[bool]:
        emu = Ec2Emulator(VirtualClock(), Ec2Config(throttling=False), seed=3)
        emu.fail_rate("DescribeSubnets", "Unavailable", 0.5)
        out = []
        for _ in range(40):
            try:
                emu.client().describe_subnets()
                out.append(True)
            except ClientError as e:
                assert error_of_resp(e.response) == ("Unavailable", 503)
                out.append(False)
        return out

    a, b = run(), run()
    assert a == b and 5 < a.count(False) < 35


def error_of_resp(r: Any) -> tuple[str, int]:
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def test_http_error_document_is_ec2s() -> None:
    emu = Ec2Emulator(VirtualClock())
    with serve(emu) as srv:
        req = urllib.request.Request(
            srv.url,
            data=b"Action=DeleteNetworkInterface&Version=2016-11-15&NetworkInterfaceId=eni-0000000000000dead",
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req)
        body = e.value.read().decode()
        assert e.value.code == 400
        assert (
            body.split("?>", 1)[1]
            .lstrip()
            .startswith("<Response><Errors><Error><Code>InvalidNetworkInterfaceID.NotFound</Code><Message>")
        )
        assert "<RequestID>" in body


def test_attach_and_detach_hooks_fire_when_visible() -> None:
    clock = VirtualClock()
    emu = Ec2Emulator(clock, Ec2Config(throttling=False, attach_delay_s=2.0))
    seen: list[tuple[str, str, str]] = []
    emu.on_attach(lambda iid, eni: seen.append(("attach", iid, eni["NetworkInterfaceId"])))
    emu.on_detach(lambda iid, eni: seen.append(("detach", iid, eni["NetworkInterfaceId"])))
    ec2 = emu.client()
    w = world(ec2)
    eni = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    att = ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=w.instance, DeviceIndex=1)
    assert seen == []
    clock.advance(2.5)
    emu.settle()
    assert seen == [("attach", w.instance, eni)]
    ec2.detach_network_interface(AttachmentId=att["AttachmentId"])
    assert seen[-1] == ("detach", w.instance, eni)


@pytest.fixture(params=EMULATED)
def lagging(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from open_backend(request.param, Ec2Config(describe_lag_min_s=30.0, describe_lag_max_s=30.0))


def _secondaries(b: Backend, eid: str) -> list[str]:
    eni = b.ec2.describe_network_interfaces(NetworkInterfaceIds=[eid])["NetworkInterfaces"][0]
    return [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"] if not a["Primary"]]


def test_an_opted_in_describe_lag_answers_from_the_past(lagging: Backend) -> None:
    """Issue 21: EC2's API is eventually consistent, with no documented bound."""
    assert lagging.emu is not None and lagging.clock is not None
    _, eid = _new(lagging)
    with pytest.raises(ClientError) as e:  # just made: not described yet
        lagging.ec2.describe_network_interfaces(NetworkInterfaceIds=[eid])
    assert error_of(e)[0] == "InvalidNetworkInterfaceID.NotFound"
    lagging.clock.advance(31.0)
    got = lagging.ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=2)
    ips = [a["PrivateIpAddress"] for a in got["AssignedPrivateIpAddresses"]]
    assert _secondaries(lagging, eid) == []  # the call answered; Describe does not show it yet
    lagging.ec2.unassign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=ips[:1])  # mutations: now
    lagging.clock.advance(29.0)
    assert _secondaries(lagging, eid) == []
    lagging.clock.advance(2.0)
    assert _secondaries(lagging, eid) == ips[1:]
    assert lagging.emu.describe_lag is not None and set(lagging.emu.describe_lag.lags) == {30.0}


def test_describe_lag_is_off_unless_asked_and_a_window_starts_from_the_present(emulated: Backend) -> None:
    assert emulated.emu is not None and emulated.clock is not None
    assert emulated.emu.describe_lag is None
    _, eid = _new(emulated)
    assert _secondaries(emulated, eid) == []  # seen at once
    emulated.emu.set_describe_lag(10.0, 10.0)
    assert _secondaries(emulated, eid) == []  # never older than when the window opened
    emulated.ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)
    assert _secondaries(emulated, eid) == []
    emulated.clock.advance(10.0)
    assert len(_secondaries(emulated, eid)) == 1
    emulated.ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)
    emulated.emu.set_describe_lag(0.0, 0.0)
    assert len(_secondaries(emulated, eid)) == 2


# --- issue 21's harsh world (docs/emulated-ec2.md) --------------------------------------


def _attached(b: Backend) -> tuple[Any, str, str]:
    w, eid = _new(b)
    att = b.ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)
    assert b.clock is not None
    b.clock.advance(10)
    return w, eid, att["AttachmentId"]


def _status(b: Backend, eid: str) -> str:
    e = b.ec2.describe_network_interfaces(NetworkInterfaceIds=[eid])["NetworkInterfaces"][0]
    return str(e["Status"])


def test_a_stuck_detach_answers_success_and_stays_in_use_until_its_retry(emulated: Backend) -> None:
    assert emulated.emu is not None and emulated.clock is not None
    _, eid, att = _attached(emulated)
    emulated.emu.set_stuck_detach(1.0)
    emulated.ec2.detach_network_interface(AttachmentId=att)
    emulated.clock.advance(60)
    assert _status(emulated, eid) == "in-use"
    emulated.ec2.detach_network_interface(AttachmentId=att)  # the retry detaches
    emulated.clock.advance(60)
    assert _status(emulated, eid) == "available"


def test_a_call_that_took_effect_may_answer_internal_error(emulated: Backend) -> None:
    from emulated.ec2.config import AmbiguousOutcome

    assert emulated.emu is not None
    _, eid = _new(emulated)
    emulated.emu.set_ambiguous("AssignPrivateIpAddresses", AmbiguousOutcome.INTERNAL_ERROR, 1.0)
    with pytest.raises(ClientError) as e:
        emulated.ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=2)
    assert error_of(e) == ("InternalError", 500)
    ips = emulated.ec2.describe_network_interfaces(NetworkInterfaceIds=[eid])["NetworkInterfaces"][0]
    assert len(ips["PrivateIpAddresses"]) == 3  # it took effect


def test_a_dropped_answer_is_sent_again_by_the_sdk_and_a_client_token_makes_it_one_eni(emulated: Backend) -> None:
    from emulated.ec2.config import AmbiguousOutcome

    assert emulated.emu is not None
    w = world(emulated.ec2)

    def in_subnet() -> set[str]:
        got = emulated.ec2.describe_network_interfaces(Filters=[{"Name": "subnet-id", "Values": [w.subnet]}])
        return {e["NetworkInterfaceId"] for e in got["NetworkInterfaces"]}

    before = in_subnet()
    emulated.emu.set_ambiguous("CreateNetworkInterface", AmbiguousOutcome.SDK_RETRY, 1.0)
    made = emulated.ec2.create_network_interface(SubnetId=w.subnet, ClientToken="t-1")["NetworkInterface"]
    assert in_subnet() - before == {made["NetworkInterfaceId"]}  # the resent Create found the same ENI
    assert emulated.emu.stats()["ec2"]["CreateNetworkInterface"]["calls"] == 2
    emulated.emu.set_ambiguous("AssignPrivateIpAddresses", AmbiguousOutcome.SDK_RETRY, 1.0)
    emulated.ec2.assign_private_ip_addresses(
        NetworkInterfaceId=made["NetworkInterfaceId"], SecondaryPrivateIpAddressCount=1
    )
    again = emulated.ec2.describe_network_interfaces(NetworkInterfaceIds=[made["NetworkInterfaceId"]])
    assert len(again["NetworkInterfaces"][0]["PrivateIpAddresses"]) == 3  # no token: assigned twice


def test_an_unlisted_instance_is_missing_from_describe_instances_until_its_time(emulated: Backend) -> None:
    assert emulated.emu is not None and emulated.clock is not None
    w = world(emulated.ec2)
    emulated.emu.unlist_instance(w.instance, emulated.clock.now() + 30)
    listed = emulated.ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": [w.instance]}])
    assert listed["Reservations"] == []
    with pytest.raises(ClientError) as e:
        emulated.ec2.describe_instances(InstanceIds=[w.instance])
    assert error_of(e)[0] == "InvalidInstanceID.NotFound"
    emulated.clock.advance(31)
    assert emulated.ec2.describe_instances(InstanceIds=[w.instance])["Reservations"]
