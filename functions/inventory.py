"""The allocator's EC2 round trips made for a whole batch at once, not per node:
one round of filtered Describe calls that shows every node of the batch
(instances, reported ENIs, subnets, instance types), paid from the Describe
buckets, and one CreateTags for
every new primary ENI.

Each function takes the ports it calls; a throttled read raises
:class:`functions.errors.Throttled` before anything was decided.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from functions.ec2 import FILTER_CHUNK
from functions.errors import AwsError, Throttled
from functions.execute import NodeJob
from functions.reasons import Rejection
from functions.telemetry import Tally
from warmpool import names
from warmpool.calls import TagPrimaryEni
from warmpool.clock import Clock
from warmpool.eni_scope import primary_eni_tag
from warmpool.facts import NodeFacts
from warmpool.limits import InstanceLimits
from warmpool.messages import PoolReport
from warmpool.names import M_PRIMARY_ENIS_TAGGED
from warmpool.planner import Inventory
from warmpool.ports import BucketStore, Ec2Port
from warmpool.subnets import Subnet

log = logging.getLogger(__name__)

TAG_BATCH = 1000
"""CreateTags takes up to 1,000 resources a call: one call tags a batch's new primary ENIs."""


def describe_tokens(reports: Sequence[PoolReport]) -> dict[str, int]:
    """Tokens for the batch's one inventory round: a filtered, paginated
    DescribeInstances and DescribeNetworkInterfaces per 100 instances."""
    rounds = math.ceil(len({r.instance_id for r in reports}) / FILTER_CHUNK)
    return {"DescribeInstances": rounds, "DescribeNetworkInterfaces": rounds}


READ_SHARE = {"DescribeInstances": 1, "DescribeNetworkInterfaces": 1}
"""What one instance's place in a Describe round counts against its fair share of the
Describe buckets (a round reads up to 100 instances for these tokens: each is counted
the whole round, so an instance alone in its batches spends as much as it costs)."""


def foreign_check_tokens(missing: Mapping[str, set[str]]) -> dict[str, int]:
    """Tokens for the foreign-ENI check: a filtered DescribeNetworkInterfaces per 100 ENIs."""
    return {"DescribeNetworkInterfaces": math.ceil(len(set().union(*missing.values())) / FILTER_CHUNK)}


PayCheck = Callable[[Mapping[str, set[str]]], bool]
"""Pays the foreign-ENI check of these instances (their reported ENIs EC2 does not show
on them) from the Describe bucket; False when the bucket cannot pay now."""


def instance_problem(cluster: str, f: NodeFacts | None) -> Rejection | None:
    """Why the instance EC2 shows (or not) cannot be served; None when it can."""
    if f is None:
        return Rejection.INSTANCE_NOT_FOUND
    if f.tags.get(names.cluster_tag_key(cluster)) not in ("owned", "shared"):
        return Rejection.FOREIGN_INSTANCE
    if f.state != "running":
        return Rejection.INSTANCE_NOT_RUNNING
    return None


@dataclass(frozen=True)
class BatchView:
    """What one Describe round shows of a batch's instances."""

    facts: dict[str, NodeFacts]
    """By instance id; an instance EC2 does not show is absent."""
    foreign_enis: dict[str, list[str]]
    """By instance id: reported ENIs EC2 shows attached to another instance (sorted)."""
    subnets: list[Subnet]
    limits: dict[str, InstanceLimits | AwsError]
    """By instance type of each instance that can be served; an error when the type is unknown."""
    unchecked: frozenset[str] = frozenset()
    """Instances whose reported ENIs EC2 does not show on them, left unchecked: the
    Describe bucket could not pay the check (they wait, unplanned)."""

    def servable(self, cluster: str, reports: Sequence[PoolReport]) -> list[NodeFacts]:
        """The facts of the reported instances that exist, are the cluster's and run."""
        return [
            f for r in reports if (f := self.facts.get(r.instance_id)) is not None and not instance_problem(cluster, f)
        ]


def read_batch(ec2: Ec2Port, cluster: str, reports: Sequence[PoolReport], pay_check: PayCheck) -> BatchView:
    """Every read of a batch (one report per instance), before any decision.
    The foreign-ENI check is a Describe of its own: made only once ``pay_check``
    paid for it."""
    facts = ec2.describe_nodes(r.instance_id for r in reports)
    missing_enis: dict[str, set[str]] = {}
    for r in reports:
        f = facts.get(r.instance_id)
        if f is not None and not instance_problem(cluster, f):
            gone = {e.eni_id for e in r.enis} - {e.eni.eni_id for e in f.enis}
            if gone:
                missing_enis[r.instance_id] = gone
    # Reported ENIs EC2 does not show on the instance: gone (released,
    # GC'd) is fine; attached to another instance is someone else's.
    unchecked: frozenset[str] = frozenset()
    if missing_enis and not pay_check(missing_enis):
        unchecked, missing_enis = frozenset(missing_enis), {}
    seen = ec2.describe_enis(set().union(*missing_enis.values())) if missing_enis else {}
    foreign = {
        iid: [e for e in sorted(gone) if e in seen and seen[e].instance_id and seen[e].instance_id != iid]
        for iid, gone in missing_enis.items()
    }
    view = BatchView(facts, foreign, [], {}, unchecked)
    found = view.servable(cluster, reports)
    subnets = list(ec2.subnets(f.vpc_id for f in found).values()) if found else []
    limits: dict[str, InstanceLimits | AwsError] = {}
    for f in found:
        if f.instance_type not in limits:
            try:
                limits[f.instance_type] = ec2.limits(f.instance_type)
            except Throttled:
                raise
            except AwsError as err:
                limits[f.instance_type] = err
    return replace(view, subnets=subnets, limits=limits)


def tag_primaries(
    ec2: Ec2Port, buckets: BucketStore, clock: Clock, tally: Tally, cluster: str, granted: list[NodeJob]
) -> list[NodeJob]:
    """First-contact tags of every untagged primary ENI in the batch, in one
    CreateTags per ``TAG_BATCH`` ENIs instead of one per node (a burst of new
    nodes would otherwise spend a call each). Each node paid for its own tag;
    the batch spends fewer. If the batched call fails, every node keeps its
    own ``TagPrimaryEni`` and tags as before."""
    wanted = [c.eni_id for j in granted for c in j.plan.calls if isinstance(c, TagPrimaryEni)]
    if len(wanted) < 2:
        return granted
    tagged: set[str] = set()
    for i in range(0, len(wanted), TAG_BATCH):
        chunk = wanted[i : i + TAG_BATCH]
        try:
            ec2.create_tags(chunk, primary_eni_tag(cluster))
        except Throttled as err:
            buckets.throttled(err.action, clock.now())  # the AIMD cut, as for any call
            log.warning("batched first-contact tag throttled; nodes tag their own", extra={"error": str(err)})
            continue
        except AwsError as err:
            log.warning("batched first-contact tag failed; nodes tag their own", extra={"error": str(err)})
            continue
        tagged.update(chunk)
        tally.add(M_PRIMARY_ENIS_TAGGED, len(chunk))
    if not tagged:
        return granted
    return [
        replace(
            j,
            plan=replace(
                j.plan,
                calls=tuple(c for c in j.plan.calls if not (isinstance(c, TagPrimaryEni) and c.eni_id in tagged)),
            ),
        )
        for j in granted
    ]


def note_pod_ceiling(r: PoolReport, inv: Inventory, ceiling: int, tally: Tally) -> None:
    """Pods wait on a node that already holds its max-pods ceiling: no address may serve them, so
        the agent's and the allocator's ceilings disagree (the kubelet's ``--max-pods`` and
        ``WARMPOOL_MAX_PODS`` on the agents and the stack must agree; the report's ``kubelet_max_pods``,
    when it carries one, lowers both alike). Counted and logged."""
    if ceiling and r.pending_demand and sum(e.addresses for e in inv.enis if e.usable) >= ceiling:
        tally.add(names.M_NODES_AT_POD_CEILING)
        log.warning(
            "pods wait on a node at its max-pods ceiling: the kubelet's --max-pods and WARMPOOL_MAX_PODS "
            "(agents and stack) must agree",
            extra={
                "node": r.node,
                "instance_id": r.instance_id,
                "ceiling": ceiling,
                "kubelet_max_pods": r.kubelet_max_pods,
            },
        )
