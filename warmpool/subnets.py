"""Which subnets a node's new ENIs may go in: the selection rule, as a pure function.

Subnet discovery follows the VPC CNI's (``ENABLE_SUBNET_DISCOVERY``, 1.18 and later, and the
cluster scope of 1.21: aws/amazon-vpc-cni-k8s ``pkg/awsutils/awsutils.go``,
``isSubnetValidForENICreation`` and ``ValidSubnetTagsMatchingClusterName``), read for its
meaning, with warmpool's one difference, the fallback when no subnet is tagged:

- only subnets in the node's VPC and availability zone;
- ``kubernetes.io/role/cni`` = ``0`` excludes a subnet, the node's own included;
- a subnet carrying ``cni.networking.k8s.aws/cluster/*`` keys is only for the clusters they
  name; a subnet with none is for every cluster;
- a subnet tagged ``kubernetes.io/role/cni`` with any other value (``1``) is a candidate, and so
  is the node's own subnet untagged (as the VPC CNI keeps it, whatever its cluster keys);
- when no subnet of the zone is a tagged candidate, the subnets before discovery are: those
  tagged ``kubernetes.io/cluster/C`` if any, else every subnet of the zone (the VPC CNI would
  use the node's own subnet alone), still without the excluded ones.

An explicit list of subnets (``WARMPOOL_ALLOWED_SUBNETS``), or discovery turned off, is
:attr:`SubnetRule.LISTED`: every given subnet in the node's zone, tags unread.

Custom networking (:class:`CustomNetwork`, the allocator's ``WARMPOOL_CUSTOM_NETWORK``) names, per
zone, the subnets and security groups of the ENIs of nodes that report ``custom_networking`` (the
VPC CNI's ``ENIConfig``, one per zone: ``pkg/eniconfig``): such a node's new ENIs go only in its
zone's listed subnets, tags unread, and a node whose zone the map lacks gets no new ENI (the VPC
CNI's ipamd, finding no ENIConfig, creates none). The map's subnets are for those nodes alone: any
other node's candidates leave them out (:func:`node_subnets`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from warmpool import names


@dataclass(frozen=True)
class Subnet:
    subnet_id: str
    availability_zone: str
    cidr: str
    free: int
    """Free addresses in the subnet."""
    vpc_id: str = ""
    """Empty when not known (then the node's VPC is not checked)."""
    tags: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)


class SubnetRule(StrEnum):
    LISTED = "listed"
    """Every given subnet in the node's zone: an explicit list, or discovery off."""
    DISCOVER = "discover"
    """The VPC CNI's subnet tags (this module's docstring)."""


class Verdict(StrEnum):
    """What a subnet's tags say about it, for one cluster and node."""

    TAGGED = "tagged"
    """``kubernetes.io/role/cni`` set (not ``0``) and the cluster scope allows it."""
    OWN = "own"
    """The node's own subnet, not tagged with the role: kept, as the VPC CNI keeps it."""
    UNTAGGED = "untagged"
    """No role tag: used only when the zone has no tagged candidate."""
    EXCLUDED = "excluded"
    """``kubernetes.io/role/cni=0``, or scoped to other clusters."""


@dataclass(frozen=True)
class Site:
    """Where a node is: what the rule needs of it."""

    cluster: str
    zone: str
    vpc_id: str = ""
    own_subnet: str = ""
    """The subnet of the node's primary ENI (empty when not known)."""


def scoped_elsewhere(tags: Mapping[str, str], cluster: str) -> bool:
    """True when the subnet names clusters (``cni.networking.k8s.aws/cluster/*``) and not this one.
    A cluster without a name checks no scope (as the VPC CNI with ``CLUSTER_NAME`` unset)."""
    if not cluster:
        return False
    scoped = [k for k in tags if k.startswith(names.TAG_SUBNET_CLUSTER_PREFIX)]
    return bool(scoped) and names.subnet_cluster_tag_key(cluster) not in scoped


def verdict(subnet: Subnet, site: Site) -> Verdict:
    role = subnet.tags.get(names.TAG_SUBNET_ROLE)
    if role == "0":
        return Verdict.EXCLUDED
    if role is None and subnet.subnet_id == site.own_subnet:
        return Verdict.OWN
    if scoped_elsewhere(subnet.tags, site.cluster):
        return Verdict.EXCLUDED
    return Verdict.UNTAGGED if role is None else Verdict.TAGGED


def in_site(subnet: Subnet, site: Site) -> bool:
    return subnet.availability_zone == site.zone and (
        not site.vpc_id or not subnet.vpc_id or subnet.vpc_id == site.vpc_id
    )


@dataclass(frozen=True)
class ZoneNetwork:
    """One zone's entry of a custom-networking map: an ``ENIConfig``'s ``subnet`` and
    ``securityGroups`` (empty: the stack's groups, else the node's primary ENI's, as the VPC
    CNI uses them)."""

    subnets: tuple[str, ...]
    security_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class CustomNetwork:
    """Zone name -> :class:`ZoneNetwork`: where custom-networking nodes' pods go."""

    zones: Mapping[str, ZoneNetwork] = field(default_factory=dict, hash=False)

    def subnet_ids(self) -> frozenset[str]:
        return frozenset(sid for z in self.zones.values() for sid in z.subnets)

    def groups(self, zone: str) -> tuple[str, ...]:
        z = self.zones.get(zone)
        return z.security_groups if z is not None else ()


NO_CUSTOM_NETWORK = CustomNetwork()
"""No zone mapped: custom networking off."""


def node_subnets(
    subnets: Sequence[Subnet], zone: str, rule: SubnetRule, custom: CustomNetwork, *, custom_node: bool
) -> tuple[tuple[Subnet, ...], SubnetRule]:
    """The subnets a node's candidates are picked from, and by which rule: a custom-networking
    node's are its zone's subnets in ``custom`` (listed: tags unread; none when the map lacks the
    zone); any other node's are ``subnets`` less every subnet ``custom`` names."""
    if custom_node:
        z = custom.zones.get(zone)
        wanted = set(z.subnets) if z is not None else set()
        return tuple(s for s in subnets if s.subnet_id in wanted), SubnetRule.LISTED
    taken = custom.subnet_ids()
    return tuple(s for s in subnets if s.subnet_id not in taken), rule


def pod_subnets(subnets: Sequence[Subnet], site: Site, rule: SubnetRule = SubnetRule.LISTED) -> tuple[Subnet, ...]:
    """The subnets the node's new ENIs may be created in, in the order given."""
    here = [s for s in subnets if in_site(s, site)]
    if rule is SubnetRule.LISTED:
        return tuple(here)
    judged = [(s, verdict(s, site)) for s in here]
    if any(v is Verdict.TAGGED for _, v in judged):
        return tuple(s for s, v in judged if v in (Verdict.TAGGED, Verdict.OWN))
    usable = [s for s, v in judged if v is not Verdict.EXCLUDED]
    owned = [s for s in usable if names.cluster_tag_key(site.cluster) in s.tags]
    # Nothing tagged for pods in the zone: the cluster's subnets, else the node's own alone, as
    # the VPC CNI then does (never any untagged subnet of the zone: another cluster's, a public
    # or a database subnet; a hostile review's finding)
    return tuple(owned or [s for s in usable if s.subnet_id == site.own_subnet])


__all__ = [
    "NO_CUSTOM_NETWORK",
    "CustomNetwork",
    "Site",
    "Subnet",
    "SubnetRule",
    "Verdict",
    "ZoneNetwork",
    "node_subnets",
    "pod_subnets",
    "scoped_elsewhere",
    "verdict",
]
