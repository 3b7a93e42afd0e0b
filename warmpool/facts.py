"""EC2's answers as the core reads them: a node and its ENIs, typed.

The EC2 port (:class:`warmpool.ports.Ec2`) returns these; the adapter in
``functions/ec2.py`` builds them from the Describe responses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from warmpool.eni_scope import permissions
from warmpool.planner import Eni, Inventory


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
    attachment_status: str = ""
    """``attaching``, ``attached``, ``detaching`` or ``detached`` (empty when not attached)."""


@dataclass(frozen=True)
class NodeFacts:
    instance_id: str
    instance_type: str
    availability_zone: str
    state: str
    vpc_id: str
    tags: dict[str, str]
    enis: tuple[EniFacts, ...] = ()
    launched_at: float | None = None
    """DescribeInstances' ``LaunchTime`` (epoch seconds; None: not shown). Only a first start's
    confirmation reads it (``warmpool.scheduling.first_start_confirmed``)."""

    def with_enis(self, enis: tuple[EniFacts, ...]) -> NodeFacts:
        return replace(self, enis=enis)

    def keys_by_eni(self) -> dict[str, tuple[str, ...]]:
        """The secondary addresses and prefixes these facts show, per ENI id."""
        return {e.eni.eni_id: (*e.eni.ips, *e.eni.prefixes) for e in self.enis}

    def inventory(self, cluster: str) -> Inventory:
        """The planner's view, each ENI marked with what warmpool may do to it
        (``warmpool/eni_scope.py``, the same decision as the IAM policy)."""
        return Inventory(
            self.instance_id,
            self.instance_type,
            self.availability_zone,
            tuple(
                self._scoped(e, cluster)
                for e in sorted(self.enis, key=lambda e: (e.eni.network_card, e.eni.device_index))
            ),
            vpc_id=self.vpc_id,
        )

    def _scoped(self, e: EniFacts, cluster: str) -> Eni:
        p = permissions(
            e.tags,
            cluster,
            in_cluster_vpc=not e.vpc_id or e.vpc_id == self.vpc_id,
            device_index=e.eni.device_index,
            network_card=e.eni.network_card,
        )
        return replace(e.eni, assignable=p.assign, lifecycle=p.lifecycle, claim_primary=p.tag_as_primary)
