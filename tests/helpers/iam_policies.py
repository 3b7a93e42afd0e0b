"""The IAM policies the CDK app synthesizes, as principals of emulated EC2 (:mod:`emulated.ec2.authz`).

A :class:`PolicyPrincipal` decides each authorization request with the project's evaluator
(:mod:`emulated.iam`) over one role's synthesized statements, concretized for the
emulator's region and account; ``Ec2Emulator.client(principal=...)`` then refuses what the
role may not do with ``UnauthorizedOperation``, as EC2 does.
"""

from __future__ import annotations

from emulated.ec2 import Ec2Emulator
from emulated.iam import PolicyPrincipal, concretize, pseudo_parameters
from tests.helpers.cdk_synth import BASE_CONTEXT, Synthesized

__all__ = ["ROLES", "PolicyPrincipal", "principals", "stack_network"]

ROLES = {"allocate": "AllocateRole", "reconcile": "ReconcileRole"}
"""The functions' roles, by the prefix of their logical id in the template."""


def principals(s: Synthesized, emu: Ec2Emulator) -> dict[str, PolicyPrincipal]:
    """The allocate and reconcile roles of a synthesized stack, for ``emu``'s region and account."""
    subs = pseudo_parameters(partition="aws", region=emu.config.region, account=emu.owner)
    return {fn: PolicyPrincipal(fn, concretize(s.role_statements(role), subs)) for fn, role in ROLES.items()}


def stack_network(emu: Ec2Emulator) -> tuple[str, list[str]]:
    """The VPC and subnets the synthesized stack names (``BASE_CONTEXT``), made in ``emu``:
    its policies allow ENIs only there."""
    vpc = emu.add_vpc("10.0.0.0/16", vpc_id=str(BASE_CONTEXT["vpc_id"]))
    ids = str(BASE_CONTEXT["subnet_ids"]).split(",")
    cidrs = ("10.0.0.0/18", "10.0.64.0/18")
    return vpc, [
        emu.add_subnet(az="us-east-1a", cidr=c, vpc_id=vpc, subnet_id=i) for i, c in zip(ids, cidrs, strict=True)
    ]
