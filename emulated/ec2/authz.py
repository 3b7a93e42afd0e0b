"""IAM for emulated EC2: a call made by a principal is authorized before it is served.

A way in made with a principal (``Ec2Emulator.client(principal=...)``,
``Ec2Emulator.boto3_client(principal=...)``) has each of its calls authorized
as EC2 does it: every resource the action touches is one authorization request
``(action, resource ARN, request context)``, and each must be allowed (a
multi-resource call such as AttachNetworkInterface needs the ENI *and* the
instance). Anything but ``Allow`` fails the whole call with
``UnauthorizedOperation`` (HTTP 403) and changes nothing. A way in without a
principal (the default) is not checked: set-up and the emulated agents act as
an administrator.

The principal only decides; it holds the policies. The tests give it the
statements the CDK app synthesizes and the project's evaluator
(:class:`emulated.iam.PolicyPrincipal`, via ``tests/helpers/iam_policies.py``); the
simulation gives the allocator, the reconciler and the agents their roles from a
committed snapshot of those statements (``simulation/iam_policies.json``).

The request context carries the keys the Service Authorization Reference lists
for these actions and warmpool's policies use: ``aws:ResourceTag/*`` and
``ec2:ResourceTag/*`` (the resource's tags), ``aws:RequestTag/*`` and
``aws:TagKeys`` (tags in the request), ``ec2:Vpc`` and ``ec2:Subnet`` (ARNs),
``ec2:AvailabilityZone``, ``ec2:Region``, ``ec2:NetworkInterfaceID``,
``ec2:Attribute`` (the attribute ModifyNetworkInterfaceAttribute changes) and
``ec2:CreateAction`` (tags given at creation are a ``CreateTags`` on the new
resource). What this model assumes, not documented by AWS:

* ModifyNetworkInterfaceAttribute with ``Attachment`` is authorized on the ENI
  and on the instance it is attached to (as the stack's policies are written);
* security groups are not modelled: a group named in CreateNetworkInterface is
  taken to be in the subnet's VPC;
* a call on an ENI, instance or attachment that does not exist is answered
  ``...NotFound`` by the action, not refused here;
* GetSubnetCidrReservations is authorized on the subnet it names (the stack's
  policy grants it on ``subnet/*``);
* an action this module does not describe is authorized on ``*`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .errors import Ec2Error
from .registry import ResourceState, id_list, tags_for

if TYPE_CHECKING:
    from .state import EmulatedEni, Instance

ContextValue = str | list[str]
DESCRIBED = (
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
    "AttachNetworkInterface",
    "DetachNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "DeleteNetworkInterface",
    "CreateNetworkInterface",
    "CreateTags",
    "GetSubnetCidrReservations",
)
"""The actions whose resources are modelled (every mutating call the functions make, and the
one read authorized on a resource: GetSubnetCidrReservations, on its subnet)."""
_MODIFIABLE = ("Attachment", "SourceDestCheck", "Groups", "Description", "EnaSrdSpecification")


class Principal(Protocol):
    """Who makes the calls: decides one authorization request at a time."""

    name: str

    def decide(self, action: str, resource: str, context: Mapping[str, ContextValue]) -> str:
        """``Allow``, ``Deny`` (explicit) or ``ImplicitDeny``."""
        ...


@dataclass(frozen=True)
class Request:
    action: str
    """``ec2:<Action>``."""
    resource: str
    context: dict[str, ContextValue]


@dataclass(frozen=True)
class Denial:
    principal: str
    action: str
    resource: str
    decision: str


def _arn(emu: ResourceState, kind: str, ident: str) -> str:
    return f"arn:aws:ec2:{emu.config.region}:{emu.owner}:{kind}/{ident}"


def _tags(tags: Mapping[str, str]) -> dict[str, ContextValue]:
    out: dict[str, ContextValue] = {}
    for k, v in tags.items():
        out[f"aws:ResourceTag/{k}"] = v
        out[f"ec2:ResourceTag/{k}"] = v
    return out


def _request_tags(tags: Mapping[str, str]) -> dict[str, ContextValue]:
    out: dict[str, ContextValue] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
    out["aws:TagKeys"] = list(tags)
    return out


def _eni(emu: ResourceState, eni: EmulatedEni, **extra: ContextValue) -> Request:
    ctx: dict[str, ContextValue] = {
        "ec2:Vpc": _arn(emu, "vpc", eni.vpc_id),
        "ec2:Subnet": _arn(emu, "subnet", eni.subnet_id),
        "ec2:AvailabilityZone": eni.az,
        "ec2:NetworkInterfaceID": eni.id,
        "ec2:Region": emu.config.region,
        **_tags(eni.tags),
        **extra,
    }
    return Request("", _arn(emu, "network-interface", eni.id), ctx)


def _instance(emu: ResourceState, inst: Instance) -> Request:
    ctx: dict[str, ContextValue] = {
        "ec2:Region": emu.config.region,
        "ec2:InstanceType": inst.instance_type,
        "ec2:AvailabilityZone": inst.az,
        **_tags(inst.tags),
    }
    return Request("", _arn(emu, "instance", inst.id), ctx)


def _existing(emu: ResourceState, ident: str, **extra: ContextValue) -> Request | None:
    """The resource named by an id (for CreateTags), or None when it does not exist."""
    region = emu.config.region
    if ident in emu.enis:
        return _eni(emu, emu.enis[ident], **extra)
    if ident in emu.instances:
        r = _instance(emu, emu.instances[ident])
        return Request("", r.resource, {**r.context, **extra})
    if ident in emu.subnets:
        s = emu.subnets[ident]
        ctx = {"ec2:Vpc": _arn(emu, "vpc", s.vpc_id), "ec2:Region": region, **_tags(s.tags), **extra}
        return Request("", _arn(emu, "subnet", s.id), ctx)
    if ident in emu.vpcs:
        return Request("", _arn(emu, "vpc", ident), {"ec2:Region": region, **_tags(emu.vpcs[ident].tags), **extra})
    return None


def _create_eni(emu: ResourceState, p: Mapping[str, Any]) -> list[Request]:
    subnet = emu.subnets.get(str(p.get("SubnetId", "")))
    if subnet is None:
        return []
    vpc = _arn(emu, "vpc", subnet.vpc_id)
    region = emu.config.region
    tags = tags_for(p, "network-interface")
    new_eni = {
        "ec2:Vpc": vpc,
        "ec2:Subnet": _arn(emu, "subnet", subnet.id),
        "ec2:AvailabilityZone": subnet.az,
        "ec2:Region": region,
        **_request_tags(tags),
    }
    wildcard = _arn(emu, "network-interface", "*")
    out = [
        Request("ec2:CreateNetworkInterface", wildcard, new_eni),
        Request(
            "ec2:CreateNetworkInterface",
            _arn(emu, "subnet", subnet.id),
            {"ec2:Vpc": vpc, "ec2:AvailabilityZone": subnet.az, "ec2:Region": region, **_tags(subnet.tags)},
        ),
    ]
    for group in p.get("Groups") or []:
        out.append(
            Request(
                "ec2:CreateNetworkInterface",
                _arn(emu, "security-group", str(group)),
                {"ec2:Vpc": vpc, "ec2:Region": region},
            )
        )
    if tags:
        ctx: dict[str, ContextValue] = {
            "ec2:CreateAction": "CreateNetworkInterface",
            "ec2:Region": region,
            **_request_tags(tags),
        }
        out.append(Request("ec2:CreateTags", wildcard, ctx))
    return out


def _on_eni(
    emu: ResourceState, action: str, eni: EmulatedEni, *, with_instance: bool, **extra: ContextValue
) -> list[Request]:
    r = _eni(emu, eni, **extra)
    out = [Request(f"ec2:{action}", r.resource, r.context)]
    inst = emu.instances.get(eni.attachment.instance_id) if eni.attachment is not None and with_instance else None
    if inst is not None:
        i = _instance(emu, inst)
        out.append(Request(f"ec2:{action}", i.resource, i.context))
    return out


def requests(emu: ResourceState, action: str, p: Mapping[str, Any]) -> list[Request]:
    """The authorization requests EC2 makes for one call (none for a resource that does not exist)."""
    if action not in DESCRIBED:
        return [Request(f"ec2:{action}", "*", {"ec2:Region": emu.config.region})]
    if action == "CreateNetworkInterface":
        return _create_eni(emu, p)
    if action == "GetSubnetCidrReservations":
        sub = _existing(emu, str(p.get("SubnetId", "")))
        return [Request(f"ec2:{action}", sub.resource, sub.context)] if sub is not None else []
    if action == "CreateTags":
        tags = {t["Key"]: t.get("Value", "") for t in p.get("Tags") or []}
        found = [_existing(emu, i, **_request_tags(tags)) for i in id_list(p, "Resources")]
        return [Request("ec2:CreateTags", r.resource, r.context) for r in found if r is not None]
    if action == "DetachNetworkInterface":
        eni_id = emu._attachments.get(str(p.get("AttachmentId", "")))
        eni = emu.enis.get(eni_id) if eni_id else None
        return _on_eni(emu, action, eni, with_instance=True) if eni is not None else []
    eni = emu.enis.get(str(p.get("NetworkInterfaceId", "")))
    if eni is None:
        return []
    if action == "AttachNetworkInterface":
        inst = emu.instances.get(str(p.get("InstanceId", "")))
        out = _on_eni(emu, action, eni, with_instance=False)
        if inst is not None:
            i = _instance(emu, inst)
            out.append(Request(f"ec2:{action}", i.resource, i.context))
        return out
    if action == "ModifyNetworkInterfaceAttribute":
        attribute = next((a for a in _MODIFIABLE if p.get(a) is not None), "")
        extra: dict[str, ContextValue] = {"ec2:Attribute": attribute} if attribute else {}
        return _on_eni(emu, action, eni, with_instance=attribute == "Attachment", **extra)
    return _on_eni(emu, action, eni, with_instance=False)


def authorize(
    emu: ResourceState, principal: Principal, action: str, p: Mapping[str, Any], denials: list[Denial]
) -> None:
    """Raise ``UnauthorizedOperation`` unless the principal is allowed every request of the call
    (each refusal also appended to ``denials``)."""
    for r in requests(emu, action, p):
        decision = principal.decide(r.action, r.resource, r.context)
        if decision != "Allow":
            denials.append(Denial(principal.name, r.action, r.resource, decision))
            why = "an explicit deny" if decision == "Deny" else "no policy that allows it"
            raise Ec2Error(
                "UnauthorizedOperation",
                f"You are not authorized to perform this operation. {principal.name}: {r.action} on {r.resource} "
                f"({why}).",
            )
