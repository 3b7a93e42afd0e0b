"""The EC2 adapter, :class:`warmpool.ports.Ec2Port` over a boto3-shaped client:
typed calls in, the client's keyword arguments out (in this one place); every
call counted and its errors classified, Describe results turned into the
core's types, subnets and instance types cached.

Reads are filtered and paginated (the cheap throttling bucket), and made once
per batch for all its nodes, never once per report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from functions.errors import AwsError, Throttled, classify
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.calls import AssignAddresses, CreateEni, UnassignAddresses
from warmpool.clock import Clock
from warmpool.facts import EniFacts, NodeFacts
from warmpool.limits import KNOWN_TYPES, InstanceLimits
from warmpool.messages import Assigned
from warmpool.placement import Usage
from warmpool.planner import Eni
from warmpool.ports import Ec2Api
from warmpool.subnets import Subnet

log = logging.getLogger(__name__)

FILTER_CHUNK = 100
"""Values per filter (EC2 allows up to 200)."""

Pay = Callable[[Mapping[str, int]], float]
"""Draws these tokens from the account's buckets; the wait until they exist (0: paid)."""

Held = Callable[[], "frozenset[str] | None"]
"""The addresses and prefixes of a subnet the release books unassigned within the hold (None:
not known now)."""


class SubnetsUnpaid(Exception):
    """No subnets were read yet and the DescribeSubnets bucket cannot pay now."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"DescribeSubnets unpaid: tokens in {wait:.1f} s")
        self.wait = wait


def subnet_of(item: Mapping[str, Any]) -> Subnet:
    """A DescribeSubnets item as the core reads it, tags included."""
    return Subnet(
        subnet_id=item["SubnetId"],
        availability_zone=item.get("AvailabilityZone", ""),
        cidr=item.get("CidrBlock", ""),
        free=int(item.get("AvailableIpAddressCount", 0)),
        vpc_id=item.get("VpcId", ""),
        tags=tags_of(dict(item)),
    )


def tags_of(obj: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in obj.get("TagSet", obj.get("Tags", [])) or []}


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def eni_facts(item: dict[str, Any]) -> EniFacts:
    att = item.get("Attachment") or {}
    primary = item.get("PrivateIpAddress", "")
    ips = tuple(a["PrivateIpAddress"] for a in item.get("PrivateIpAddresses", []) if not a.get("Primary", False))
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
        attachment_status=att.get("Status", ""),
    )


class Ec2:
    """The :class:`warmpool.ports.Ec2Port` over a boto3-shaped client: every
    call counted per action, its errors classified once."""

    def __init__(self, api: Ec2Api, settings: Settings, clock: Clock, tally: Tally, *, pay: Pay | None = None) -> None:
        """``pay`` draws tokens from the account's buckets and answers the wait (0: paid);
        None pays nothing (tests, tools)."""
        self.api = api
        self.settings = settings
        self.clock = clock
        self.tally = tally
        self.pay = pay
        self._subnets: dict[str, Subnet] = {}
        self._subnets_at = -1e18
        self._subnets_read = False
        self._subnet_vpcs: frozenset[str] = frozenset()
        self._limits: dict[str, InstanceLimits] = dict(KNOWN_TYPES)
        self._usage: dict[str, tuple[float, Usage]] = {}

    # --- calls ---------------------------------------------------------------

    def _call(self, action: str, fn: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """``fn`` is the client's method for ``action`` (``self.api.assign_private_ip_addresses``
        for ``AssignPrivateIpAddresses``): named by the caller, so mypy checks it exists."""
        self.tally.add(names.M_EC2_CALLS, Action=action)
        try:
            return fn(**kwargs)
        except ClientError as exc:
            err = classify(exc, action)
            if isinstance(err, Throttled):
                self.tally.add(names.M_EC2_THROTTLES, Action=action)
            else:
                self.tally.add(names.M_EC2_ERRORS, Action=action)
            raise err from None

    def _pages(
        self, action: str, fn: Callable[..., dict[str, Any]], key: str, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            req = dict(kwargs)
            if token:
                req["NextToken"] = token
            resp = self._call(action, fn, **req)
            yield from resp.get(key, [])
            token = resp.get("NextToken")
            if not token:
                return

    # --- reads ---------------------------------------------------------------

    def describe_nodes(self, instance_ids: Iterable[str]) -> dict[str, NodeFacts]:
        """Instances and their attached ENIs: two filtered, paginated rounds for all."""
        nodes = self.describe_instances(instance_ids)
        enis = self.describe_attached(list(nodes))
        return {iid: n.with_enis(tuple(enis.get(iid, ()))) for iid, n in nodes.items()}

    def describe_instances(self, instance_ids: Iterable[str]) -> dict[str, NodeFacts]:
        """Instances without their ENIs (``enis`` empty): one filtered, paginated round for all."""
        nodes: dict[str, NodeFacts] = {}
        for chunk in _chunks(sorted(set(instance_ids))):
            nodes.update(self._instances([{"Name": "instance-id", "Values": chunk}]))
        return nodes

    def describe_cluster_instances(self, cluster: str) -> dict[str, NodeFacts]:
        """Every instance tagged for the cluster (``owned`` or ``shared``), without ENIs: pages
        of 1,000 (the reconciler's pass; by id it is a call per :data:`FILTER_CHUNK`)."""
        tag = names.cluster_tag_key(cluster)
        return self._instances([{"Name": f"tag:{tag}", "Values": ["owned", "shared"]}])

    def _instances(self, filters: list[dict[str, Any]]) -> dict[str, NodeFacts]:
        nodes: dict[str, NodeFacts] = {}
        for res in self._pages(
            "DescribeInstances", self.api.describe_instances, "Reservations", Filters=filters, MaxResults=1000
        ):
            for inst in res.get("Instances", []):
                nodes[inst["InstanceId"]] = NodeFacts(
                    instance_id=inst["InstanceId"],
                    instance_type=inst.get("InstanceType", ""),
                    availability_zone=(inst.get("Placement") or {}).get("AvailabilityZone", ""),
                    state=(inst.get("State") or {}).get("Name", ""),
                    vpc_id=inst.get("VpcId", ""),
                    tags=tags_of(inst),
                    launched_at=_epoch_s(inst.get("LaunchTime")),
                )
        return nodes

    def describe_attached(self, instance_ids: Sequence[str]) -> dict[str, list[EniFacts]]:
        out: dict[str, list[EniFacts]] = {}
        for chunk in _chunks(sorted(instance_ids)):
            for item in self._pages(
                "DescribeNetworkInterfaces",
                self.api.describe_network_interfaces,
                "NetworkInterfaces",
                Filters=[{"Name": "attachment.instance-id", "Values": chunk}],
                MaxResults=1000,
            ):
                f = eni_facts(item)
                out.setdefault(f.instance_id, []).append(f)
        return out

    def describe_enis(self, eni_ids: Iterable[str]) -> dict[str, EniFacts]:
        out: dict[str, EniFacts] = {}
        for chunk in _chunks(sorted(set(eni_ids))):
            for item in self._pages(
                "DescribeNetworkInterfaces",
                self.api.describe_network_interfaces,
                "NetworkInterfaces",
                Filters=[{"Name": "network-interface-id", "Values": chunk}],
                MaxResults=1000,
            ):
                f = eni_facts(item)
                out[f.eni.eni_id] = f
        return out

    def describe_cluster_enis(self, cluster: str) -> list[EniFacts]:
        """Every ENI tagged for the cluster (reconcile)."""
        return [
            eni_facts(i)
            for i in self._pages(
                "DescribeNetworkInterfaces",
                self.api.describe_network_interfaces,
                "NetworkInterfaces",
                Filters=[{"Name": f"tag:{names.TAG_CLUSTER_NAME}", "Values": [cluster]}],
                MaxResults=1000,
            )
        ]

    def subnets(self, vpc_ids: Iterable[str] = ()) -> dict[str, Subnet]:
        """The subnets warmpool may use, with their tags, cached per container for
        ``subnet_cache_ttl_s`` (and read again for a VPC not read yet); the planner picks
        each node's among them (``Settings.subnet_rule``, :mod:`warmpool.subnets`).

        Read: ``settings.allowed_subnets`` if set; else those ``settings.subnet_tag`` marks
        if set (the stack's ``subnet_tag``: IAM allows no other); else, with discovery, every subnet of
        the nodes' VPCs (one filtered, paginated DescribeSubnets); else, as before
        discovery, those tagged for the cluster, else every subnet of the nodes' VPCs; and, by id,
        those of the custom-networking map (``settings.custom_network``) not read already.
        Each DescribeSubnets is paid from the account's bucket first (``pay``): when it
        cannot be paid now, the subnets read before are kept until the next try; with
        none read yet, :class:`SubnetsUnpaid` says how long to wait.
        """
        asked = frozenset(v for v in vpc_ids if v)
        now = self.clock.now()
        fresh = now - self._subnets_at < self.settings.subnet_cache_ttl_s
        if fresh and asked <= self._subnet_vpcs:
            return self._subnets
        vpcs = asked | self._subnet_vpcs
        try:
            items = self._read_subnets(vpcs)
        except SubnetsUnpaid:
            if not self._subnets_read:
                raise
            self.tally.add(names.M_SUBNET_READS_DEFERRED)
            return self._subnets
        self._subnets = {i["SubnetId"]: subnet_of(i) for i in items}
        self._subnets_at = now
        self._subnets_read = True
        self._subnet_vpcs = vpcs
        return self._subnets

    def _read_subnets(self, vpcs: frozenset[str]) -> list[dict[str, Any]]:
        items = self._read_pod_subnets(vpcs)
        mapped = self.settings.custom.subnet_ids() - {i["SubnetId"] for i in items}
        if mapped:  # custom networking's, by id (the planner gives them to its nodes alone)
            items += self._describe_subnets([{"Name": "subnet-id", "Values": sorted(mapped)}])
        return items

    def _read_pod_subnets(self, vpcs: frozenset[str]) -> list[dict[str, Any]]:
        s = self.settings
        if s.allowed_subnets:
            return self._describe_subnets([{"Name": "subnet-id", "Values": list(s.allowed_subnets)}])
        if s.subnet_tag:
            key, _, value = s.subnet_tag.partition("=")
            return self._describe_subnets([{"Name": f"tag:{key}", "Values": [value]}])
        by_vpc = [{"Name": "vpc-id", "Values": sorted(vpcs)}]
        if s.subnet_discovery:
            return self._describe_subnets(by_vpc) if vpcs else []
        items = self._describe_subnets([{"Name": "tag-key", "Values": [names.cluster_tag_key(s.cluster)]}])
        if not items and vpcs:
            items = self._describe_subnets(by_vpc)
        return items

    def _describe_subnets(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every page of one filtered DescribeSubnets, each page paid for before it is asked."""
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            self._pay({"DescribeSubnets": 1})
            req: dict[str, Any] = {"Filters": filters, "MaxResults": 1000}
            if token:
                req["NextToken"] = token
            resp = self._call("DescribeSubnets", self.api.describe_subnets, **req)
            out += resp.get("Subnets", [])
            token = resp.get("NextToken")
            if not token:
                return out

    def _pay(self, cost: Mapping[str, int]) -> None:
        wait = self.pay(cost) if self.pay is not None else 0.0
        if wait > 0:
            raise SubnetsUnpaid(wait)

    def known_subnets(self) -> dict[str, Subnet]:
        """The subnets read last, while younger than ``subnet_cache_ttl_s`` (else empty, as when
        none was read yet): no DescribeSubnets, paid or not (fair sharing's answer to a quiet
        report, docs/allocator.md). Older counts only ever went down between reads (what the
        allocator gave out is spent, what it unassigned is not given back): a container that
        served only quiet reports since would call a zone scarce long after it was not (review
        of fair sharing, F3)."""
        fresh = self.clock.now() - self._subnets_at < self.settings.subnet_cache_ttl_s
        return dict(self._subnets) if self._subnets_read and fresh else {}

    def spend_subnet(self, subnet_id: str, addresses: int) -> None:
        """Keep the cached free count roughly right between refreshes."""
        sub = self._subnets.get(subnet_id)
        if sub is not None:
            self._subnets[subnet_id] = replace(sub, free=max(0, sub.free - addresses))

    def forget_subnets(self) -> None:
        self._subnets_at = -1e18

    def subnet_usage(self, subnet_id: str, held: Held | None = None) -> Usage | None:
        """What ``subnet_id``'s ENIs hold, and what must not be named there, for named placement:
        one DescribeNetworkInterfaces by ``subnet-id`` and one GetSubnetCidrReservations (its
        ``explicit`` reservations are never named, its ``prefix`` ones take prefixes only), both
        paginated, each page paid from the account's bucket first; then ``held`` (what the
        release books unassigned within the hold, read after the Describe, so an address the
        Describe shows free because of an unassign is among them). Cached for
        ``placement_cache_ttl_s``. Unpaid, refused (an error other than a throttle, which is
        raised), or ``held`` unknown (None): the usage read before (however old), else None
        (counted ``PlacementReadsDeferred``); None too for a subnet not among those read."""
        sub = self._subnets.get(subnet_id)
        if sub is None or not sub.cidr:
            return None
        now = self.clock.now()
        cached = self._usage.get(subnet_id)
        if cached is not None and now - cached[0] < self.settings.placement_cache_ttl_s:
            return cached[1]
        ips: set[str] = set()
        prefixes: set[str] = set()
        try:
            for item in self._paid_pages(
                "DescribeNetworkInterfaces",
                self.api.describe_network_interfaces,
                "NetworkInterfaces",
                Filters=[{"Name": "subnet-id", "Values": [subnet_id]}],
                MaxResults=1000,
            ):
                ips.update(a["PrivateIpAddress"] for a in item.get("PrivateIpAddresses", []) or [])
                if item.get("PrivateIpAddress"):
                    ips.add(item["PrivateIpAddress"])
                prefixes.update(p["Ipv4Prefix"] for p in item.get("Ipv4Prefixes", []) or [])
            explicit, prefix_only = self._cidr_reservations(subnet_id)
        except SubnetsUnpaid:
            kept = None
        except Throttled:
            raise
        except AwsError as err:  # refused (IAM, an old stack) or failed: no view, so by count
            log.warning("subnet usage not read", extra={"subnet_id": subnet_id, "error": str(err)[:200]})
            kept = None
        else:
            kept = held() if held is not None else frozenset()
        if kept is None:
            self.tally.add(names.M_PLACEMENT_READS_DEFERRED)
            return cached[1] if cached is not None else None
        usage = Usage(
            sub.cidr,
            frozenset(ips),
            frozenset(prefixes),
            held=frozenset(kept),
            explicit=explicit,
            prefix_only=prefix_only,
        )
        self._usage[subnet_id] = (now, usage)
        return usage

    def _cidr_reservations(self, subnet_id: str) -> tuple[frozenset[str], frozenset[str]]:
        """The subnet's IPv4 CIDR reservations: (``explicit`` CIDRs, ``prefix`` CIDRs). A type
        EC2 may add later is taken as explicit (never named)."""
        explicit: set[str] = set()
        prefix_only: set[str] = set()
        for r in self._paid_pages(
            "GetSubnetCidrReservations",
            self.api.get_subnet_cidr_reservations,
            "SubnetIpv4CidrReservations",
            SubnetId=subnet_id,
            MaxResults=1000,
        ):
            cidr = str(r.get("Cidr", ""))
            if cidr:
                (prefix_only if r.get("ReservationType") == "prefix" else explicit).add(cidr)
        return frozenset(explicit), frozenset(prefix_only)

    def _paid_pages(
        self, action: str, fn: Callable[..., dict[str, Any]], key: str, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """Every page of one read, each paid from ``action``'s bucket before it is asked
        (:class:`SubnetsUnpaid` when it cannot be)."""
        token: str | None = None
        while True:
            self._pay({action: 1})
            req = dict(kwargs)
            if token:
                req["NextToken"] = token
            resp = self._call(action, fn, **req)
            yield from resp.get(key, []) or []
            token = resp.get("NextToken")
            if not token:
                return

    def note_placed(self, subnet_id: str, ips: Sequence[str], prefixes: Sequence[str]) -> None:
        cached = self._usage.get(subnet_id)
        if cached is not None and (ips or prefixes):
            at, u = cached
            self._usage[subnet_id] = (at, replace(u, ips=u.ips | set(ips), prefixes=u.prefixes | set(prefixes)))

    def forget_usage(self, subnet_id: str) -> None:
        self._usage.pop(subnet_id, None)

    def limits(self, instance_type: str) -> InstanceLimits:
        """Limits from the built-in table, else DescribeInstanceTypes (cached)."""
        lim = self._limits.get(instance_type)
        if lim is None:
            resp = self._call("DescribeInstanceTypes", self.api.describe_instance_types, InstanceTypes=[instance_type])
            items = resp.get("InstanceTypes", [])
            if not items:
                raise AwsError("InvalidInstanceType", instance_type, "DescribeInstanceTypes")
            lim = InstanceLimits.from_describe(items[0])
            self._limits[instance_type] = lim
        return lim

    # --- writes --------------------------------------------------------------

    def assign(self, call: AssignAddresses) -> Assigned:
        kw: dict[str, Any] = {"NetworkInterfaceId": call.eni_id}
        if call.at_prefixes:
            kw["Ipv4Prefixes"] = list(call.at_prefixes)
        elif call.prefixes:
            kw["Ipv4PrefixCount"] = call.prefixes
        elif call.at_ips:
            kw["PrivateIpAddresses"] = list(call.at_ips)
        else:
            kw["SecondaryPrivateIpAddressCount"] = call.ips
        resp = self._call("AssignPrivateIpAddresses", self.api.assign_private_ip_addresses, **kw)
        return Assigned(
            eni_id=call.eni_id,
            ips=[a["PrivateIpAddress"] for a in resp.get("AssignedPrivateIpAddresses", [])],
            prefixes=[p["Ipv4Prefix"] for p in resp.get("AssignedIpv4Prefixes", [])],
        )

    def unassign(self, call: UnassignAddresses) -> None:
        kw: dict[str, Any] = {"NetworkInterfaceId": call.eni_id}
        if call.ips:
            kw["PrivateIpAddresses"] = list(call.ips)
        if call.prefixes:
            kw["Ipv4Prefixes"] = list(call.prefixes)
        self._call("UnassignPrivateIpAddresses", self.api.unassign_private_ip_addresses, **kw)

    def create_eni(
        self, call: CreateEni, *, description: str, groups: Sequence[str], tags: Mapping[str, str]
    ) -> EniFacts:
        kw: dict[str, Any] = {
            "SubnetId": call.subnet_id,
            "Description": description,
            "TagSpecifications": [{"ResourceType": "network-interface", "Tags": _tag_list(tags)}],
            "ClientToken": call.client_token,
        }
        if groups:
            kw["Groups"] = list(groups)
        if call.at_ips:
            kw["PrivateIpAddresses"] = [{"PrivateIpAddress": ip, "Primary": i == 0} for i, ip in enumerate(call.at_ips)]
        if call.at_prefixes:
            kw["Ipv4Prefixes"] = [{"Ipv4Prefix": p} for p in call.at_prefixes]
        elif call.prefixes:
            kw["Ipv4PrefixCount"] = call.prefixes
        elif call.ips and not call.at_ips:
            kw["SecondaryPrivateIpAddressCount"] = call.ips
        resp = self._call("CreateNetworkInterface", self.api.create_network_interface, **kw)
        return eni_facts(resp["NetworkInterface"])

    def attach(self, *, instance_id: str, eni_id: str, device_index: int, network_card: int) -> str:
        resp = self._call(
            "AttachNetworkInterface",
            self.api.attach_network_interface,
            InstanceId=instance_id,
            NetworkInterfaceId=eni_id,
            DeviceIndex=device_index,
            NetworkCardIndex=network_card,
        )
        return str(resp.get("AttachmentId", ""))

    def detach(self, attachment_id: str) -> None:
        self._call("DetachNetworkInterface", self.api.detach_network_interface, AttachmentId=attachment_id)

    def delete_eni(self, eni_id: str) -> None:
        self._call("DeleteNetworkInterface", self.api.delete_network_interface, NetworkInterfaceId=eni_id)

    def set_delete_on_termination(self, eni_id: str, attachment_id: str) -> None:
        self._call(
            "ModifyNetworkInterfaceAttribute",
            self.api.modify_network_interface_attribute,
            NetworkInterfaceId=eni_id,
            Attachment={"AttachmentId": attachment_id, "DeleteOnTermination": True},
        )

    def create_tags(self, resources: Sequence[str], tags: Mapping[str, str]) -> None:
        self._call("CreateTags", self.api.create_tags, Resources=list(resources), Tags=_tag_list(tags))


def _epoch_s(value: object) -> float | None:
    """A Describe timestamp as epoch seconds (botocore gives a ``datetime``; a string is ISO 8601);
    None when absent or not readable."""
    if isinstance(value, datetime):
        return value.timestamp() if value.tzinfo is not None else value.replace(tzinfo=UTC).timestamp()
    if isinstance(value, str):
        try:
            return _epoch_s(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(ids), FILTER_CHUNK):
        yield list(ids[i : i + FILTER_CHUNK])
