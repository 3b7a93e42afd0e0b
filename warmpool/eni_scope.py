"""Which ENIs warmpool may change, decided from tags exactly as its IAM policy does.

The allocator's IAM (``infra/policies.py``) allows address (un)assignment only on
ENIs warmpool created (cluster + ``warmpool.io/managed`` tags) or on a primary
ENI tagged ``warmpool.io/primary-eni-of = <cluster>``; attach, detach, modify and
delete only on ENIs warmpool created; and nothing at all on an ENI tagged
``node.k8s.amazonaws.com/no_manage = true`` (the VPC CNI skips such ENIs too:
``pkg/ipamd/ipamd.go::filterUnmanagedENIs``). The planner and executor ask this
module first, so a plan never contains a call IAM would refuse
(``tests/infra/test_iam_least_privilege.py`` checks the two agree, ENI by ENI).
The reconciler asks the same question (:func:`lifecycle_permitted`) before it
marks, unmarks, deletes or repairs an ENI: one rule for both functions, never
the cluster tag alone (the VPC CNI tags its own ENIs with it too).
Pure: tags in, decisions out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from warmpool import names
from warmpool.limits import is_primary_slot


@dataclass(frozen=True)
class EniPermissions:
    assign: bool
    """Assign/UnassignPrivateIpAddresses."""
    lifecycle: bool
    """Attach, Detach, ModifyNetworkInterfaceAttribute (the attachment), Delete."""
    tag_as_primary: bool
    """The allocator may (and should, before assigning) tag it as this cluster's primary ENI."""


def unmanaged(tags: Mapping[str, str]) -> bool:
    """Tagged ``no_manage = true`` (any case, as the IAM Deny matches it)."""
    return tags.get(names.TAG_NO_MANAGE, "").lower() == "true"


def created_by_warmpool(tags: Mapping[str, str], cluster: str) -> bool:
    return tags.get(names.TAG_CLUSTER_NAME) == cluster and tags.get(names.TAG_MANAGED) == "true"


def lifecycle_permitted(tags: Mapping[str, str], cluster: str) -> bool:
    """Warmpool may attach, detach, modify the attachment of, delete, and GC-mark this ENI:
    it created it for ``cluster`` and nobody has since marked it ``no_manage``. The
    allocator's plans and the reconciler's GC and DeleteOnTermination repair all decide
    with this one predicate (IAM: ``MutateWarmpoolCreatedEni``, ``GcMarkClusterTaggedEni``,
    ``GcDeleteClusterTaggedEni``, ``RepairDeleteOnTermination``, and the ``no_manage`` Deny)."""
    return not unmanaged(tags) and created_by_warmpool(tags, cluster)


def tagged_primary(tags: Mapping[str, str], cluster: str) -> bool:
    return tags.get(names.TAG_PRIMARY_ENI_OF) == cluster


def permissions(
    tags: Mapping[str, str], cluster: str, *, in_cluster_vpc: bool, device_index: int, network_card: int = 0
) -> EniPermissions:
    """What warmpool may do to an ENI with these tags, attached at ``device_index`` of
    ``network_card`` (device -1 when detached), in the cluster's VPC or not. Only the primary
    slot (device 0 of card 0) may be claimed as the node's primary ENI: device 0 of another
    card (an EFA or another tool's interface, or warmpool's own) never is."""
    if unmanaged(tags):
        return EniPermissions(assign=False, lifecycle=False, tag_as_primary=False)
    ours = lifecycle_permitted(tags, cluster)
    # The primary tag counts only at the primary slot: before the slot check, any untagged
    # device 0 was claimed, another card's among them (an EFA's or another tool's interface);
    # its tag alone must not keep it assignable (review of the multi-card change, F5).
    primary = tagged_primary(tags, cluster) and in_cluster_vpc and is_primary_slot(network_card, device_index)
    claimable = (
        is_primary_slot(network_card, device_index)
        and in_cluster_vpc
        and not primary
        and names.TAG_PRIMARY_ENI_OF not in tags
        and names.TAG_CLUSTER_NAME not in tags
        and names.TAG_MANAGED not in tags
    )
    return EniPermissions(assign=ours or primary, lifecycle=ours, tag_as_primary=claimable)


def primary_eni_tag(cluster: str) -> dict[str, str]:
    """The tags of the first-contact CreateTags on a node's primary ENI."""
    return {names.TAG_PRIMARY_ENI_OF: cluster}
