"""Scarce addresses shared fairly (docs/allocator.md, "Scarce addresses shared fairly"): whether a
node's zone is short of free addresses, as a pure function of the subnets the allocator read.

A zone is scarce for a node when its candidate pod subnets (:func:`warmpool.subnets.pod_subnets`,
after custom networking gave a custom node its zone's mapped subnets:
:func:`warmpool.subnets.node_subnets`) have fewer free addresses in all than the threshold
(``WARMPOOL_SCARCE_FREE``). Hysteresis without state: a node already lean (its report says
``lean``) stays scarce until the free count exceeds twice the threshold. A threshold of 0 turns
fair sharing off; a node with no candidate subnet is never scarce (there is nothing to share).
"""

from __future__ import annotations

from collections.abc import Sequence

from warmpool.limits import is_primary_slot
from warmpool.messages import PoolReport
from warmpool.subnets import CustomNetwork, Site, Subnet, SubnetRule, node_subnets, pod_subnets


def zone_free(
    subnets: Sequence[Subnet], site: Site, rule: SubnetRule, custom: CustomNetwork, *, custom_node: bool
) -> int | None:
    """Free addresses in all of the node's candidate pod subnets; None when it has none."""
    mine, rule = node_subnets(subnets, site.zone, rule, custom, custom_node=custom_node)
    candidates = pod_subnets(mine, site, rule)
    if not candidates:
        return None
    return sum(max(0, s.free) for s in candidates)


def scarce(free: int | None, threshold: int, *, lean: bool) -> bool:
    """Below ``threshold`` free addresses (a lean node: at most twice it). Off at 0."""
    if threshold <= 0 or free is None:
        return False
    return free <= 2 * threshold if lean else free < threshold


def report_site(report: PoolReport, cluster: str, vpc_id: str = "", own_subnet: str = "") -> Site:
    """The node's site as the rule needs it; the own subnet from the report's primary ENI when
    EC2's is not given (a quiet report is not read)."""
    if not own_subnet:
        own_subnet = next(
            (e.subnet_id for e in report.enis if is_primary_slot(e.network_card, e.device_index)),
            "",
        )
    return Site(cluster, report.availability_zone, vpc_id, own_subnet)


def node_scarce(
    report: PoolReport,
    subnets: Sequence[Subnet],
    *,
    cluster: str,
    threshold: int,
    rule: SubnetRule,
    custom: CustomNetwork,
    vpc_id: str = "",
    own_subnet: str = "",
) -> bool:
    """Whether the allocator says ``scarce`` to ``report``: never to an agent from before the
    field (``lean`` absent), which would refuse the result."""
    if report.lean is None or threshold <= 0 or not subnets:
        return False
    site = report_site(report, cluster, vpc_id, own_subnet)
    free = zone_free(subnets, site, rule, custom, custom_node=bool(report.custom_networking))
    return scarce(free, threshold, lean=report.lean)


__all__ = ["node_scarce", "report_site", "scarce", "zone_free"]
