"""One semantic suite, four backends: moto's EC2 and the emulator's three ways in.

Tests that moto passes pin behaviour moto and AWS share; the emulator must
match. Tests marked ``moto_lacks`` are AWS rules moto does not implement (the
deviations measured in issue 3); they are strict xfails on moto, so if moto
ever gains the rule the marker has to go.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from botocore.exceptions import ClientError

from emulated.ec2 import Ec2Config
from tests.helpers.ec2_backends import EMULATED, Backend, error_of, open_backend, world

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def moto_lacks(request: pytest.FixtureRequest, backend: Backend, why: str) -> None:
    """The test must fail on moto (strict xfail: the body still runs there)."""
    if backend.name == "moto":
        request.applymarker(pytest.mark.xfail(reason=f"moto deviates from AWS: {why}", strict=True))


def _eni(ec2: Any, eid: str) -> dict[str, Any]:
    out: dict[str, Any] = ec2.describe_network_interfaces(NetworkInterfaceIds=[eid])["NetworkInterfaces"][0]
    return out


def _ips(eni: dict[str, Any]) -> list[str]:
    return [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"]]


# --- behaviour moto and AWS share ----------------------------------------------


def test_created_eni_is_available_in_its_subnet(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    eni = ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=2)["NetworkInterface"]
    got = _eni(ec2, eni["NetworkInterfaceId"])
    assert got["Status"] == "available"
    assert got["SubnetId"] == w.subnet and got["VpcId"] == w.vpc
    assert len(got["PrivateIpAddresses"]) == 3
    assert sum(1 for a in got["PrivateIpAddresses"] if a["Primary"]) == 1
    net = ipaddress.IPv4Network("10.0.0.0/24")
    assert all(ipaddress.IPv4Address(ip) in net for ip in _ips(got))


def test_unknown_eni_is_not_found(any_backend: Backend) -> None:
    with pytest.raises(ClientError) as e:
        any_backend.ec2.delete_network_interface(NetworkInterfaceId="eni-0123456789abcdef0")
    assert error_of(e) == ("InvalidNetworkInterfaceID.NotFound", 400)


def test_attach_shows_attachment_and_filters_by_instance(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    aid = ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)["AttachmentId"]
    got = _eni(ec2, eid)
    assert got["Status"] == "in-use"
    assert got["Attachment"]["AttachmentId"] == aid
    assert got["Attachment"]["InstanceId"] == w.instance and got["Attachment"]["DeviceIndex"] == 1
    on = ec2.describe_network_interfaces(Filters=[{"Name": "attachment.instance-id", "Values": [w.instance]}])
    assert {n["NetworkInterfaceId"] for n in on["NetworkInterfaces"]} >= {eid}
    assert len(on["NetworkInterfaces"]) == 2


def test_tags_are_filterable(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    a = ec2.create_network_interface(
        SubnetId=w.subnet,
        TagSpecifications=[{"ResourceType": "network-interface", "Tags": [{"Key": "cluster", "Value": "demo"}]}],
    )["NetworkInterface"]["NetworkInterfaceId"]
    b = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    ec2.create_tags(Resources=[b], Tags=[{"Key": "warmpool.io/managed", "Value": "true"}])
    by_tag = ec2.describe_network_interfaces(Filters=[{"Name": "tag:cluster", "Values": ["demo"]}])
    assert [n["NetworkInterfaceId"] for n in by_tag["NetworkInterfaces"]] == [a]
    by_key = ec2.describe_network_interfaces(Filters=[{"Name": "tag-key", "Values": ["warmpool.io/managed"]}])
    assert [n["NetworkInterfaceId"] for n in by_key["NetworkInterfaces"]] == [b]
    by_status = ec2.describe_network_interfaces(
        Filters=[{"Name": "status", "Values": ["available"]}, {"Name": "subnet-id", "Values": [w.subnet]}]
    )
    assert {n["NetworkInterfaceId"] for n in by_status["NetworkInterfaces"]} == {a, b}


def test_delete_tags_by_key_or_by_key_and_value(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    tags = [{"Key": "warmpool.io/primary-eni-of", "Value": "demo"}, {"Key": "keep", "Value": "x"}]
    ec2.create_tags(Resources=[eid], Tags=[*tags, {"Key": "other", "Value": "y"}])
    ec2.delete_tags(Resources=[eid], Tags=[{"Key": "keep", "Value": "not-x"}])  # value differs: kept
    ec2.delete_tags(Resources=[eid], Tags=[{"Key": "warmpool.io/primary-eni-of"}, {"Key": "absent"}])
    ec2.delete_tags(Resources=[eid], Tags=[{"Key": "other", "Value": "y"}])
    assert {t["Key"]: t["Value"] for t in _eni(ec2, eid).get("TagSet", [])} == {"keep": "x"}


def _subnet_ids(ec2: Any, filters: list[dict[str, Any]]) -> set[str]:
    return {x["SubnetId"] for x in ec2.describe_subnets(Filters=filters)["Subnets"]}


def test_subnets_are_filtered_by_vpc_zone_and_tags_as_discovery_reads_them(any_backend: Backend) -> None:
    """What subnet discovery asks of DescribeSubnets (issue 24): tags made at creation and
    later are returned and filterable; filters are ANDed, a filter's values ORed; a tag
    filter matches values exactly (``1`` is not ``0``, nor the empty string)."""
    ec2 = any_backend.ec2
    w = world(ec2)
    other_vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    role = "kubernetes.io/role/cni"

    def made(vpc: str, cidr: str, az: str, tags: dict[str, str] | None = None) -> str:
        spec = [{"ResourceType": "subnet", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
        kw: dict[str, Any] = {"VpcId": vpc, "CidrBlock": cidr, "AvailabilityZone": az}
        if spec:
            kw["TagSpecifications"] = spec
        return str(ec2.create_subnet(**kw)["Subnet"]["SubnetId"])

    pods = made(w.vpc, "10.0.16.0/20", "us-east-1a", {role: "1"})
    never = made(w.vpc, "10.0.32.0/20", "us-east-1a", {role: "0"})
    empty = made(w.vpc, "10.0.48.0/20", "us-east-1a", {role: ""})
    zone_b = made(w.vpc, "10.0.64.0/20", "us-east-1b", {role: "1"})
    far = made(other_vpc, "10.1.0.0/20", "us-east-1a", {role: "1"})
    ec2.create_tags(Resources=[w.subnet], Tags=[{"Key": "cni.networking.k8s.aws/cluster/demo", "Value": ""}])

    in_vpc = _subnet_ids(ec2, [{"Name": "vpc-id", "Values": [w.vpc]}])
    assert in_vpc == {w.subnet, pods, never, empty, zone_b}
    got = {x["SubnetId"]: x for x in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [w.vpc]}])["Subnets"]}
    assert {t["Key"]: t["Value"] for t in got[pods]["Tags"]} == {role: "1"}
    assert {t["Key"]: t["Value"] for t in got[w.subnet]["Tags"]} == {"cni.networking.k8s.aws/cluster/demo": ""}
    assert got[pods]["VpcId"] == w.vpc and got[pods]["AvailabilityZone"] == "us-east-1a"
    here = [{"Name": "vpc-id", "Values": [w.vpc]}, {"Name": "availability-zone", "Values": ["us-east-1a"]}]
    assert _subnet_ids(ec2, here) == {w.subnet, pods, never, empty}
    assert _subnet_ids(ec2, [*here, {"Name": f"tag:{role}", "Values": ["1"]}]) == {pods}
    assert _subnet_ids(ec2, [*here, {"Name": f"tag:{role}", "Values": ["1", "0"]}]) == {pods, never}
    assert _subnet_ids(ec2, [*here, {"Name": "tag-key", "Values": [role]}]) == {pods, never, empty}
    assert _subnet_ids(ec2, [{"Name": f"tag:{role}", "Values": ["1"]}]) == {pods, zone_b, far}
    # a tag changed later is what the next Describe filters on
    ec2.create_tags(Resources=[never], Tags=[{"Key": role, "Value": "1"}])
    ec2.delete_tags(Resources=[pods], Tags=[{"Key": role}])
    assert _subnet_ids(ec2, [*here, {"Name": f"tag:{role}", "Values": ["1"]}]) == {never}


def test_subnet_pages_return_every_subnet_once(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    made = {
        ec2.create_subnet(VpcId=w.vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
        for i in range(1, 8)
    }
    seen: list[str] = []
    token = None
    while True:
        kw: dict[str, Any] = {"Filters": [{"Name": "vpc-id", "Values": [w.vpc]}], "MaxResults": 5}
        if token:
            kw["NextToken"] = token
        page = ec2.describe_subnets(**kw)
        seen += [x["SubnetId"] for x in page["Subnets"]]
        token = page.get("NextToken")
        if not token:
            break
    assert sorted(seen) == sorted(made | {w.subnet})


def test_assign_then_unassign_addresses(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=3)
    ips = _ips(_eni(ec2, eid))
    assert len(ips) == 4 and len(set(ips)) == 4
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=ips[1:3])
    assert _ips(_eni(ec2, eid)) == [ips[0], ips[3]]


def test_subnet_free_count_follows_allocations(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    before = ec2.describe_subnets(SubnetIds=[w.subnet])["Subnets"][0]["AvailableIpAddressCount"]
    ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=4)
    after = ec2.describe_subnets(SubnetIds=[w.subnet])["Subnets"][0]["AvailableIpAddressCount"]
    assert before - after == 5
    assert before == 256 - 5 - 1  # AWS reserves 5; the instance holds one


def test_detach_then_delete(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    aid = ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)["AttachmentId"]
    ec2.detach_network_interface(AttachmentId=aid)
    assert _eni(ec2, eid)["Status"] == "available"
    ec2.delete_network_interface(NetworkInterfaceId=eid)
    with pytest.raises(ClientError) as e:
        _eni(ec2, eid)
    assert error_of(e) == ("InvalidNetworkInterfaceID.NotFound", 400)


def test_describe_instances_by_filters(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    ec2.create_tags(Resources=[w.instance], Tags=[{"Key": "kubernetes.io/cluster/demo", "Value": "owned"}])
    r = ec2.describe_instances(
        Filters=[
            {"Name": "tag:kubernetes.io/cluster/demo", "Values": ["owned", "shared"]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]
    )
    assert [i["InstanceId"] for res in r["Reservations"] for i in res["Instances"]] == [w.instance]
    r = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": ["i-0000000000000dead"]}])
    assert r["Reservations"] == []


# --- AWS rules moto lacks --------------------------------------------------------


def test_attachment_limit_exceeded(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "no per-instance ENI limit")
    ec2 = any_backend.ec2
    w = world(ec2)  # m5.large: 3 ENIs
    for dev in (1, 2):
        eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
        ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=dev)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    with pytest.raises(ClientError) as e:
        ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=3)
    assert error_of(e) == ("AttachmentLimitExceeded", 400)


def test_private_ip_address_limit_exceeded(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "no per-ENI address limit")
    ec2 = any_backend.ec2
    w = world(ec2)  # m5.large: 10 addresses per ENI, the primary included
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=8)
    with pytest.raises(ClientError) as e:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=2)
    assert error_of(e) == ("PrivateIpAddressLimitExceeded", 400)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)
    assert len(_ips(_eni(ec2, eid))) == 10


def test_device_index_in_use(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "duplicate device indexes accepted")
    ec2 = any_backend.ec2
    w = world(ec2)
    a = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    b = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=a, InstanceId=w.instance, DeviceIndex=1)
    with pytest.raises(ClientError) as e:
        ec2.attach_network_interface(NetworkInterfaceId=b, InstanceId=w.instance, DeviceIndex=1)
    assert error_of(e) == ("InvalidParameterValue", 400)


def test_delete_attached_eni_is_refused(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "an attached ENI can be deleted")
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)
    with pytest.raises(ClientError) as e:
        ec2.delete_network_interface(NetworkInterfaceId=eid)
    assert error_of(e) == ("InvalidNetworkInterface.InUse", 400)
    assert _eni(ec2, eid)["Status"] == "in-use"


def test_assigned_addresses_are_only_the_new_ones(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "AssignedPrivateIpAddresses lists every address on the ENI")
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=2)["NetworkInterface"][
        "NetworkInterfaceId"
    ]
    before = set(_ips(_eni(ec2, eid)))
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=3)
    new = [a["PrivateIpAddress"] for a in r["AssignedPrivateIpAddresses"]]
    assert len(new) == 3 and not set(new) & before
    assert set(_ips(_eni(ec2, eid))) == before | set(new)


def test_prefixes_are_aligned_28s_without_overlap(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "Ipv4PrefixCount ignored")
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet, Ipv4PrefixCount=1)["NetworkInterface"]["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=w.instance, DeviceIndex=1)
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=2)
    new = [p["Ipv4Prefix"] for p in r["AssignedIpv4Prefixes"]]
    assert len(new) == 2
    eni = _eni(ec2, eid)
    prefixes = [ipaddress.IPv4Network(p["Ipv4Prefix"]) for p in eni["Ipv4Prefixes"]]
    assert len(prefixes) == 3 and all(p.prefixlen == 28 for p in prefixes)
    assert {str(p) for p in prefixes} >= set(new)
    singles = {ipaddress.IPv4Address(ip) for ip in _ips(eni)}
    for i, p in enumerate(prefixes):
        assert p.subnet_of(ipaddress.IPv4Network("10.0.0.0/24"))
        assert not any(ip in p for ip in singles)
        assert not any(p.overlaps(q) for q in prefixes[i + 1 :])


def test_insufficient_cidr_blocks(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "Ipv4PrefixCount ignored")
    ec2 = any_backend.ec2
    w = world(ec2, cidr="10.0.0.0/26")  # 4 blocks; the first and last hold reserved addresses
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=1)
    assert len(r["AssignedIpv4Prefixes"]) == 1
    with pytest.raises(ClientError) as e:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=2)
    assert error_of(e) == ("InsufficientCidrBlocks", 400)
    with pytest.raises(ClientError) as e:
        ec2.create_network_interface(SubnetId=w.subnet, Ipv4PrefixCount=2)
    assert error_of(e) == ("InsufficientCidrBlocks", 400)


def test_insufficient_free_addresses_in_subnet(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "subnet capacity not enforced")
    ec2 = any_backend.ec2
    w = world(ec2, cidr="10.0.0.0/28")  # 16 - 5 reserved - 1 instance = 10 free
    ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=8)
    with pytest.raises(ClientError) as e:
        ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=1)
    assert error_of(e) == ("InsufficientFreeAddressesInSubnet", 400)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    with pytest.raises(ClientError) as e:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, SecondaryPrivateIpAddressCount=1)
    assert error_of(e) == ("InsufficientFreeAddressesInSubnet", 400)
    assert ec2.describe_subnets(SubnetIds=[w.subnet])["Subnets"][0]["AvailableIpAddressCount"] == 0


def test_client_token_makes_create_idempotent(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "ClientToken ignored")
    ec2 = any_backend.ec2
    w = world(ec2)
    a = ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=2, ClientToken="node-1-7")
    b = ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=2, ClientToken="node-1-7")
    assert a["NetworkInterface"]["NetworkInterfaceId"] == b["NetworkInterface"]["NetworkInterfaceId"]
    assert b["ClientToken"] == "node-1-7"
    enis = ec2.describe_network_interfaces(Filters=[{"Name": "status", "Values": ["available"]}])
    assert len(enis["NetworkInterfaces"]) == 1
    with pytest.raises(ClientError) as e:
        ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=3, ClientToken="node-1-7")
    assert error_of(e) == ("IdempotentParameterMismatch", 400)


def test_pagination_returns_every_item_once(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "DescribeNetworkInterfaces ignores MaxResults")
    ec2 = any_backend.ec2
    w = world(ec2)
    made = {
        ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"] for _ in range(12)
    }
    seen: list[str] = []
    kwargs: dict[str, Any] = {"MaxResults": 5, "Filters": [{"Name": "status", "Values": ["available"]}]}
    pages = 0
    while True:
        r = ec2.describe_network_interfaces(**kwargs)
        pages += 1
        seen += [n["NetworkInterfaceId"] for n in r["NetworkInterfaces"]]
        if not r.get("NextToken"):
            break
        kwargs["NextToken"] = r["NextToken"]
    assert pages == 3 and sorted(seen) == sorted(made)


def test_throttled_call_answers_request_limit_exceeded_503(
    request: pytest.FixtureRequest, any_backend: Backend
) -> None:
    moto_lacks(request, any_backend, "no throttling")
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = ec2.create_network_interface(SubnetId=w.subnet)["NetworkInterface"]["NetworkInterfaceId"]
    with pytest.raises(ClientError) as e:
        for _ in range(101):  # capacity 100 at one instant of virtual time
            ec2.create_tags(Resources=[eid], Tags=[{"Key": "k", "Value": "v"}])
    assert error_of(e) == ("RequestLimitExceeded", 503)


# --- explicit placement on AssignPrivateIpAddresses (issue 24) ---------------------


def _new_eni(ec2: Any, subnet: str) -> str:
    eid: str = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    return eid


def test_assign_specific_addresses_places_exactly_those(any_backend: Backend) -> None:
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = _new_eni(ec2, w.subnet)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=["10.0.0.200", "10.0.0.201"])
    assert {"10.0.0.200", "10.0.0.201"} <= set(_ips(_eni(ec2, eid)))


def test_assign_specific_addresses_answers_only_those(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "AssignedPrivateIpAddresses lists every address on the ENI")
    ec2 = any_backend.ec2
    w = world(ec2)
    # The primary is named so it can never be one of the two assigned (moto draws it at random:
    # a primary of 10.0.0.200 made moto's answer right by chance, about one run in 250).
    eid = ec2.create_network_interface(SubnetId=w.subnet, PrivateIpAddress="10.0.0.150")["NetworkInterface"][
        "NetworkInterfaceId"
    ]
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=["10.0.0.200", "10.0.0.201"])
    assert [a["PrivateIpAddress"] for a in r["AssignedPrivateIpAddresses"]] == ["10.0.0.200", "10.0.0.201"]


def test_assign_an_address_another_eni_holds_is_in_use(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "a specific address already in use is assigned again")
    ec2 = any_backend.ec2
    w = world(ec2)
    a, b = _new_eni(ec2, w.subnet), _new_eni(ec2, w.subnet)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=a, PrivateIpAddresses=["10.0.0.200"])
    with pytest.raises(ClientError) as e:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=b, PrivateIpAddresses=["10.0.0.201", "10.0.0.200"])
    assert error_of(e) == ("InvalidIPAddress.InUse", 400)
    assert "10.0.0.201" not in _ips(_eni(ec2, b))  # all or nothing
    assert "10.0.0.200" in _ips(_eni(ec2, a))


def test_assign_specific_prefix_places_exactly_it(request: pytest.FixtureRequest, any_backend: Backend) -> None:
    moto_lacks(request, any_backend, "Ipv4Prefixes ignored")
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = _new_eni(ec2, w.subnet)
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4Prefixes=["10.0.0.64/28", "10.0.0.128/28"])
    assert [p["Ipv4Prefix"] for p in r["AssignedIpv4Prefixes"]] == ["10.0.0.64/28", "10.0.0.128/28"]
    assert {p["Ipv4Prefix"] for p in _eni(ec2, eid)["Ipv4Prefixes"]} == {"10.0.0.64/28", "10.0.0.128/28"}
    with pytest.raises(ClientError) as e:  # an address inside a delegated prefix is in use
        ec2.assign_private_ip_addresses(NetworkInterfaceId=_new_eni(ec2, w.subnet), PrivateIpAddresses=["10.0.0.70"])
    assert error_of(e) == ("InvalidIPAddress.InUse", 400)


@pytest.mark.parametrize(
    "prefix",
    [
        "10.0.0.72/28",  # not aligned on 16
        "10.0.0.64/27",  # not a /28
        "10.0.1.0/28",  # outside the subnet
        "10.0.0.192/28",  # overlaps an address in use
    ],
)
def test_assign_a_prefix_not_aligned_or_overlapping_is_invalid(
    request: pytest.FixtureRequest, any_backend: Backend, prefix: str
) -> None:
    moto_lacks(request, any_backend, "Ipv4Prefixes ignored")
    ec2 = any_backend.ec2
    w = world(ec2)
    eid = _new_eni(ec2, w.subnet)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=["10.0.0.200"])
    with pytest.raises(ClientError) as e:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4Prefixes=[prefix])
    assert error_of(e) == ("InvalidParameterValue", 400)
    assert not _eni(ec2, eid).get("Ipv4Prefixes")


@pytest.mark.parametrize("name", EMULATED)
def test_scattered_singles_fragment_the_subnet_until_only_explicit_prefixes_fit(name: str) -> None:
    """With singles placed anywhere, a prefix by count fails once no aligned /28 is whole,
    though most addresses are free; the one whole block left is still assignable by name."""
    for b in open_backend(name, Ec2Config(single_placement="scattered", placement_seed=11)):
        ec2 = b.ec2
        w = world(ec2, cidr="10.0.0.0/24")
        eid = _new_eni(ec2, w.subnet)
        assert b.emu is not None
        pool = b.emu.subnets[w.subnet].pool
        while pool.free_blocks() > 1:
            ec2.assign_private_ip_addresses(
                NetworkInterfaceId=_new_eni(ec2, w.subnet), SecondaryPrivateIpAddressCount=1
            )
        assert pool.free > 150
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=1)
        with pytest.raises(ClientError) as e:
            ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=1)
        assert error_of(e) == ("InsufficientCidrBlocks", 400)
        free = ec2.describe_subnets(SubnetIds=[w.subnet])["Subnets"][0]["AvailableIpAddressCount"]
        assert free == pool.free > 130


# --- subnet CIDR reservations (named placement reads them: docs/allocator.md, issue 24) --------


def test_cidr_reservations_are_made_listed_and_deleted(any_backend: Backend) -> None:
    """CreateSubnetCidrReservation / GetSubnetCidrReservations / DeleteSubnetCidrReservation, as
    moto and AWS answer them: IPv4 ones listed with their type, overlaps and CIDRs outside the
    subnet refused as InvalidParameterValue, a deleted one gone from the list."""
    ec2 = any_backend.ec2
    w = world(ec2)
    ex = ec2.create_subnet_cidr_reservation(SubnetId=w.subnet, Cidr="10.0.0.0/27", ReservationType="explicit")
    pf = ec2.create_subnet_cidr_reservation(SubnetId=w.subnet, Cidr="10.0.0.64/27", ReservationType="prefix")
    ex_id = ex["SubnetCidrReservation"]["SubnetCidrReservationId"]
    assert ex["SubnetCidrReservation"]["Cidr"] == "10.0.0.0/27" and ex_id.startswith("scr-")
    got = ec2.get_subnet_cidr_reservations(SubnetId=w.subnet)
    listed = {(r["Cidr"], r["ReservationType"], r["SubnetId"]) for r in got["SubnetIpv4CidrReservations"]}
    assert listed == {("10.0.0.0/27", "explicit", w.subnet), ("10.0.0.64/27", "prefix", w.subnet)}
    assert got["SubnetIpv6CidrReservations"] == []
    for cidr in ("10.0.0.16/28", "10.0.1.0/28"):  # overlaps the explicit one; outside the subnet
        with pytest.raises(ClientError) as e:
            ec2.create_subnet_cidr_reservation(SubnetId=w.subnet, Cidr=cidr, ReservationType="explicit")
        assert error_of(e) == ("InvalidParameterValue", 400)
    gone = ec2.delete_subnet_cidr_reservation(SubnetCidrReservationId=ex_id)
    assert gone["DeletedSubnetCidrReservation"]["SubnetCidrReservationId"] == ex_id
    left = ec2.get_subnet_cidr_reservations(SubnetId=w.subnet)["SubnetIpv4CidrReservations"]
    assert [r["SubnetCidrReservationId"] for r in left] == [pf["SubnetCidrReservation"]["SubnetCidrReservationId"]]


def test_addresses_by_count_never_land_in_a_cidr_reservation(
    request: pytest.FixtureRequest, any_backend: Backend
) -> None:
    """EC2 assigns an explicit reservation only to whoever names its addresses, and a prefix
    reservation only to prefixes: singles by count land outside both (moto places them anywhere)."""
    moto_lacks(request, any_backend, "singles by count land in CIDR reservations")
    ec2 = any_backend.ec2
    w = world(ec2, cidr="10.0.0.0/26")
    ec2.create_subnet_cidr_reservation(SubnetId=w.subnet, Cidr="10.0.0.0/28", ReservationType="explicit")
    ec2.create_subnet_cidr_reservation(SubnetId=w.subnet, Cidr="10.0.0.16/28", ReservationType="prefix")
    reserved = ipaddress.IPv4Network("10.0.0.0/27")
    eid = ec2.create_network_interface(SubnetId=w.subnet, SecondaryPrivateIpAddressCount=9)["NetworkInterface"][
        "NetworkInterfaceId"
    ]
    ips = _ips(_eni(ec2, eid))
    assert len(ips) == 10 and not [ip for ip in ips if ipaddress.IPv4Address(ip) in reserved]
    # named, an address of the explicit reservation is assigned (it is there to be named)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, PrivateIpAddresses=["10.0.0.9"])
    assert "10.0.0.9" in _ips(_eni(ec2, eid))


@pytest.mark.parametrize("name", EMULATED)
def test_prefixes_by_count_go_to_prefix_reservations_first_and_never_to_explicit_ones(name: str) -> None:
    """A prefix by count takes a whole block of a prefix reservation while one is left, then any
    whole block outside the explicit reservations (moto ignores Ipv4PrefixCount)."""
    for b in open_backend(name):
        ec2 = b.ec2
        w = world(ec2, cidr="10.0.0.0/25")  # by count the highest whole block first: .96/28
        ec2.create_subnet_cidr_reservation(SubnetId=w.subnet, Cidr="10.0.0.16/28", ReservationType="prefix")
        ec2.create_subnet_cidr_reservation(SubnetId=w.subnet, Cidr="10.0.0.96/28", ReservationType="explicit")
        eid = _new_eni(ec2, w.subnet)
        got = [
            p["Ipv4Prefix"]
            for _ in range(5)
            for p in ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=1)["AssignedIpv4Prefixes"]
        ]
        assert got == ["10.0.0.16/28", "10.0.0.80/28", "10.0.0.64/28", "10.0.0.48/28", "10.0.0.32/28"]
        with pytest.raises(ClientError) as e:  # the explicit one is never taken by count
            ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=1)
        assert "10.0.0.96/28" not in {p["Ipv4Prefix"] for p in _eni(ec2, eid)["Ipv4Prefixes"]}
        assert error_of(e) == ("InsufficientCidrBlocks", 400)
