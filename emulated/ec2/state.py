"""The emulated EC2 resources and how Describe* renders them.

Plain dataclasses; the rules that change them live in :mod:`emulated.ec2.emulator`.
Rendered dicts use boto3's member names and types (timestamps are aware
``datetime`` objects), so the fast client, the boto3 hook and the XML renderer
all serve the same shapes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from warmpool.limits import InstanceLimits

from .cidr import SubnetPool

STATE_CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}


def ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


@dataclass
class Vpc:
    id: str
    cidr: str
    tags: dict[str, str] = field(default_factory=dict)

    def render(self, owner: str) -> dict[str, Any]:
        return {
            "VpcId": self.id,
            "CidrBlock": self.cidr,
            "State": "available",
            "OwnerId": owner,
            "InstanceTenancy": "default",
            "IsDefault": False,
            "DhcpOptionsId": "dopt-00000000",
            "CidrBlockAssociationSet": [
                {
                    "AssociationId": f"vpc-cidr-assoc-{self.id[4:]}",
                    "CidrBlock": self.cidr,
                    "CidrBlockState": {"State": "associated"},
                }
            ],
            "Tags": tag_list(self.tags),
        }


@dataclass
class EmulatedSubnet:
    id: str
    vpc_id: str
    az: str
    cidr: str
    pool: SubnetPool
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def gateway(self) -> str:
        return self.pool.ip(1)

    def render(self, owner: str, region: str) -> dict[str, Any]:
        return {
            "SubnetId": self.id,
            "VpcId": self.vpc_id,
            "AvailabilityZone": self.az,
            "AvailabilityZoneId": f"use1-az{ord(self.az[-1]) - ord('a') + 1}",
            "CidrBlock": self.cidr,
            "AvailableIpAddressCount": self.pool.available,
            "State": "available",
            "DefaultForAz": False,
            "MapPublicIpOnLaunch": False,
            "OwnerId": owner,
            "SubnetArn": f"arn:aws:ec2:{region}:{owner}:subnet/{self.id}",
            "Tags": tag_list(self.tags),
        }


@dataclass
class Attachment:
    id: str
    instance_id: str
    device_index: int
    card: int
    attach_time: float
    visible_at: float
    delete_on_termination: bool = False
    status: str = "attaching"  # attaching | attached | detaching

    def render(self, owner: str, *, with_instance: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "AttachTime": ts(self.attach_time),
            "AttachmentId": self.id,
            "DeleteOnTermination": self.delete_on_termination,
            "DeviceIndex": self.device_index,
            "NetworkCardIndex": self.card,
            "Status": self.status,
        }
        if with_instance:
            d["InstanceId"] = self.instance_id
            d["InstanceOwnerId"] = owner
        return d


@dataclass
class EmulatedEni:
    id: str
    subnet_id: str
    vpc_id: str
    az: str
    mac: str
    primary_ip: str
    created_at: float
    secondary: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    description: str = ""
    groups: list[str] = field(default_factory=list)
    attachment: Attachment | None = None
    source_dest_check: bool = True
    interface_type: str = "interface"

    @property
    def status(self) -> str:
        return "available" if self.attachment is None else "in-use"

    @property
    def slots_used(self) -> int:
        """Address slots taken: the primary, the secondaries and one per prefix."""
        return (1 if self.primary_ip else 0) + len(self.secondary) + len(self.prefixes)

    @property
    def efa_only(self) -> bool:
        """An EFA-only interface: no IP address at all (EC2 refuses any), so IMDS serves no
        ``local-ipv4s`` for it and Describe no ``PrivateIpAddress``."""
        return self.interface_type == "efa-only"

    def private_ips(self) -> list[dict[str, Any]]:
        if not self.primary_ip:
            return []
        out: list[dict[str, Any]] = [
            {"Primary": True, "PrivateIpAddress": self.primary_ip, "PrivateDnsName": dns(self.primary_ip)}
        ]
        out.extend({"Primary": False, "PrivateIpAddress": ip, "PrivateDnsName": dns(ip)} for ip in self.secondary)
        return out

    def _addresses(self, owner: str) -> dict[str, Any]:
        """The members the two renderings share, in their order (an EFA-only interface has
        neither ``PrivateDnsName`` nor ``PrivateIpAddress``)."""
        primary = (
            {"PrivateDnsName": dns(self.primary_ip), "PrivateIpAddress": self.primary_ip} if self.primary_ip else {}
        )
        return {
            "Ipv6Addresses": [],
            "MacAddress": self.mac,
            "NetworkInterfaceId": self.id,
            "OwnerId": owner,
            **primary,
            "PrivateIpAddresses": self.private_ips(),
            "Ipv4Prefixes": [{"Ipv4Prefix": p} for p in self.prefixes],
        }

    def render(self, owner: str) -> dict[str, Any]:
        d: dict[str, Any] = {
            "AvailabilityZone": self.az,
            "Description": self.description,
            "Groups": [{"GroupId": g, "GroupName": g} for g in self.groups],
            "InterfaceType": self.interface_type,
            **self._addresses(owner),
            "RequesterId": owner,
            "RequesterManaged": False,
            "SourceDestCheck": self.source_dest_check,
            "Status": self.status,
            "SubnetId": self.subnet_id,
            "TagSet": tag_list(self.tags),
            "VpcId": self.vpc_id,
        }
        if self.attachment is not None:
            d["Attachment"] = self.attachment.render(owner)
        return d

    def render_for_instance(self, owner: str) -> dict[str, Any]:
        """The ``Instances[].NetworkInterfaces[]`` entry (InstanceNetworkInterface)."""
        assert self.attachment is not None
        return {
            "Attachment": self.attachment.render(owner, with_instance=False),
            "Description": self.description,
            "Groups": [{"GroupId": g, "GroupName": g} for g in self.groups],
            **self._addresses(owner),
            "SourceDestCheck": self.source_dest_check,
            "Status": self.status,
            "SubnetId": self.subnet_id,
            "VpcId": self.vpc_id,
            "InterfaceType": self.interface_type,
        }


@dataclass
class Instance:
    id: str
    instance_type: str
    limits: InstanceLimits
    subnet_id: str
    vpc_id: str
    az: str
    launch_time: float
    reservation_id: str
    image_id: str
    primary_eni: str
    tags: dict[str, str] = field(default_factory=dict)
    state: str = "running"
    slots: dict[tuple[int, int], str] = field(default_factory=dict)
    """(network card, device index) → ENI id, for every attachment in any state."""


@functools.lru_cache(maxsize=1 << 18)
def dns(ip: str) -> str:
    """The private DNS name of ``ip`` (cached: every Describe renders it again for each address)."""
    return "ip-" + ip.replace(".", "-") + ".ec2.internal"
