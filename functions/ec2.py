"""The EC2 adapter: every call counted and its errors classified, Describe
results turned into the planner's types, subnets and instance types cached.

Reads are filtered and paginated (the cheap throttling bucket), and made once
per batch for all its nodes, never once per report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from botocore.exceptions import ClientError

from functions.eni_scope import permissions
from functions.errors import AwsError, Throttled, classify
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.clock import Clock
from warmpool.limits import KNOWN_TYPES, InstanceLimits
from warmpool.planner import Eni, Inventory, Subnet
from warmpool.ports import Ec2Api

FILTER_CHUNK = 100
"""Values per filter (EC2 allows up to 200)."""


def _snake(action: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower()


def tags_of(obj: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in obj.get("TagSet", obj.get("Tags", [])) or []}


@dataclass(frozen=True)
class EniFacts:
    """An ENI as EC2 describes it: the planner's view plus what executing needs."""

    eni: Eni
    instance_id: str
    attachment_id: str
    mac: str
    delete_on_termination: bool
    status: str
    tags: dict[str, str] = field(default_factory=dict)
    groups: tuple[str, ...] = ()
    vpc_id: str = ""


@dataclass(frozen=True)
class NodeFacts:
    instance_id: str
    instance_type: str
    availability_zone: str
    state: str
    vpc_id: str
    tags: dict[str, str]
    enis: tuple[EniFacts, ...] = ()

    def inventory(self, cluster: str) -> Inventory:
        """The planner's view, each ENI marked with what warmpool may do to it
        (``functions/eni_scope.py``, the same decision as the IAM policy)."""
        return Inventory(
            self.instance_id,
            self.instance_type,
            self.availability_zone,
            tuple(self._scoped(e, cluster) for e in sorted(self.enis, key=lambda e: (e.eni.network_card, e.eni.device_index))),
        )

    def _scoped(self, e: EniFacts, cluster: str) -> Eni:
        p = permissions(e.tags, cluster, in_cluster_vpc=not e.vpc_id or e.vpc_id == self.vpc_id,
                        device_index=e.eni.device_index)
        return replace(e.eni, assignable=p.assign, lifecycle=p.lifecycle, claim_primary=p.tag_as_primary)


def eni_facts(item: dict[str, Any]) -> EniFacts:
    att = item.get("Attachment") or {}
    primary = item.get("PrivateIpAddress", "")
    ips = tuple(
        a["PrivateIpAddress"] for a in item.get("PrivateIpAddresses", []) if not a.get("Primary", False)
    )
    prefixes = tuple(p["Ipv4Prefix"] for p in item.get("Ipv4Prefixes", []) or [])
    return EniFacts(
        eni=Eni(
            eni_id=item["NetworkInterfaceId"],
            device_index=int(att.get("DeviceIndex", -1)),
            network_card=int(att.get("NetworkCardIndex", 0)),
            subnet_id=item.get("SubnetId", ""),
            primary_ip=primary,
            ips=ips,
            prefixes=prefixes,
        ),
        instance_id=att.get("InstanceId", ""),
        attachment_id=att.get("AttachmentId", ""),
        mac=item.get("MacAddress", ""),
        delete_on_termination=bool(att.get("DeleteOnTermination", False)),
        status=item.get("Status", ""),
        tags=tags_of(item),
        groups=tuple(g["GroupId"] for g in item.get("Groups", []) or []),
        vpc_id=item.get("VpcId", ""),
    )


class Ec2:
    """EC2 through the port, counted per action, errors classified once."""

    def __init__(self, api: Ec2Api, settings: Settings, clock: Clock, tally: Tally) -> None:
        self.api = api
        self.settings = settings
        self.clock = clock
        self.tally = tally
        self._subnets: dict[str, Subnet] = {}
        self._subnets_at = -1e18
        self._subnet_vpcs: frozenset[str] = frozenset()
        self._limits: dict[str, InstanceLimits] = dict(KNOWN_TYPES)

    # --- calls ---------------------------------------------------------------

    def call(self, action: str, **kwargs: Any) -> dict[str, Any]:
        self.tally.add(names.M_EC2_CALLS, Action=action)
        try:
            return getattr(self.api, _snake(action))(**kwargs)  # type: ignore[no-any-return]
        except ClientError as exc:
            err = classify(exc, action)
            if isinstance(err, Throttled):
                self.tally.add(names.M_EC2_THROTTLES, Action=action)
            else:
                self.tally.add(names.M_EC2_ERRORS, Action=action)
            raise err from None

    def _pages(self, action: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            req = dict(kwargs)
            if token:
                req["NextToken"] = token
            resp = self.call(action, **req)
            yield from resp.get(key, [])
            token = resp.get("NextToken")
            if not token:
                return

    # --- reads ---------------------------------------------------------------

    def describe_nodes(self, instance_ids: Iterable[str]) -> dict[str, NodeFacts]:
        """Instances and their attached ENIs: two filtered, paginated rounds for all."""
        ids = sorted(set(instance_ids))
        nodes: dict[str, NodeFacts] = {}
        for chunk in _chunks(ids):
            for res in self._pages(
                "DescribeInstances", "Reservations",
                Filters=[{"Name": "instance-id", "Values": chunk}], MaxResults=1000,
            ):
                for inst in res.get("Instances", []):
                    nodes[inst["InstanceId"]] = NodeFacts(
                        instance_id=inst["InstanceId"],
                        instance_type=inst.get("InstanceType", ""),
                        availability_zone=(inst.get("Placement") or {}).get("AvailabilityZone", ""),
                        state=(inst.get("State") or {}).get("Name", ""),
                        vpc_id=inst.get("VpcId", ""),
                        tags=tags_of(inst),
                    )
        enis = self.describe_attached(list(nodes))
        return {
            iid: NodeFacts(**{**n.__dict__, "enis": tuple(enis.get(iid, ()))}) for iid, n in nodes.items()
        }

    def describe_attached(self, instance_ids: Sequence[str]) -> dict[str, list[EniFacts]]:
        out: dict[str, list[EniFacts]] = {}
        for chunk in _chunks(sorted(instance_ids)):
            for item in self._pages(
                "DescribeNetworkInterfaces", "NetworkInterfaces",
                Filters=[{"Name": "attachment.instance-id", "Values": chunk}], MaxResults=1000,
            ):
                f = eni_facts(item)
                out.setdefault(f.instance_id, []).append(f)
        return out

    def describe_enis(self, eni_ids: Iterable[str]) -> dict[str, EniFacts]:
        out: dict[str, EniFacts] = {}
        for chunk in _chunks(sorted(set(eni_ids))):
            for item in self._pages(
                "DescribeNetworkInterfaces", "NetworkInterfaces",
                Filters=[{"Name": "network-interface-id", "Values": chunk}], MaxResults=1000,
            ):
                f = eni_facts(item)
                out[f.eni.eni_id] = f
        return out

    def describe_cluster_enis(self, cluster: str) -> list[EniFacts]:
        """Every ENI tagged for the cluster (reconcile)."""
        return [
            eni_facts(i)
            for i in self._pages(
                "DescribeNetworkInterfaces", "NetworkInterfaces",
                Filters=[{"Name": f"tag:{names.TAG_CLUSTER_NAME}", "Values": [cluster]}], MaxResults=1000,
            )
        ]

    def subnets(self, vpc_ids: Iterable[str] = ()) -> dict[str, Subnet]:
        """The subnets warmpool may use, cached per container for ``subnet_cache_ttl_s``.

        Allowed: ``settings.allowed_subnets`` if set; else those tagged for the
        cluster; else every subnet of the nodes' VPCs.
        """
        asked = frozenset(v for v in vpc_ids if v)
        now = self.clock.now()
        fresh = now - self._subnets_at < self.settings.subnet_cache_ttl_s
        if fresh and asked <= self._subnet_vpcs:
            return self._subnets
        vpcs = asked | self._subnet_vpcs
        s = self.settings
        if s.allowed_subnets:
            items = list(self._pages(
                "DescribeSubnets", "Subnets", Filters=[{"Name": "subnet-id", "Values": list(s.allowed_subnets)}]
            ))
        else:
            items = list(self._pages(
                "DescribeSubnets", "Subnets", Filters=[{"Name": "tag-key", "Values": [names.cluster_tag_key(s.cluster)]}]
            ))
            if not items and vpcs:
                items = list(self._pages(
                    "DescribeSubnets", "Subnets", Filters=[{"Name": "vpc-id", "Values": sorted(vpcs)}]
                ))
        self._subnets = {
            i["SubnetId"]: Subnet(
                subnet_id=i["SubnetId"],
                availability_zone=i.get("AvailabilityZone", ""),
                cidr=i.get("CidrBlock", ""),
                free=int(i.get("AvailableIpAddressCount", 0)),
            )
            for i in items
        }
        self._subnets_at = now
        self._subnet_vpcs = vpcs
        return self._subnets

    def spend_subnet(self, subnet_id: str, addresses: int) -> None:
        """Keep the cached free count roughly right between refreshes."""
        sub = self._subnets.get(subnet_id)
        if sub is not None:
            self._subnets[subnet_id] = Subnet(sub.subnet_id, sub.availability_zone, sub.cidr, max(0, sub.free - addresses))

    def forget_subnets(self) -> None:
        self._subnets_at = -1e18

    def limits(self, instance_type: str) -> InstanceLimits:
        """Limits from the built-in table, else DescribeInstanceTypes (cached)."""
        lim = self._limits.get(instance_type)
        if lim is None:
            resp = self.call("DescribeInstanceTypes", InstanceTypes=[instance_type])
            items = resp.get("InstanceTypes", [])
            if not items:
                raise AwsError("InvalidInstanceType", instance_type, "DescribeInstanceTypes")
            lim = InstanceLimits.from_describe(items[0])
            self._limits[instance_type] = lim
        return lim


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(ids), FILTER_CHUNK):
        yield list(ids[i : i + FILTER_CHUNK])
