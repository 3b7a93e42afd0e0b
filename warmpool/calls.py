"""The calls a plan is made of, and the one table that says what each one takes.

The planner (:mod:`warmpool.planner`) plans these; the allocator's executor carries
them out (``functions/execute.py``: ``EXECUTORS``, one entry per call). For every call,
:data:`CALLS` names the rest of what it needs:

* the mutating EC2 actions it makes, in order: each costs one token of that action's
  shared bucket (:func:`warmpool.buckets.spec_for`), so :attr:`CallSpec.cost` is what
  the allocator pays before the first call;
* the :class:`warmpool.ports.Ec2Port` methods the executor calls for it, which the
  adapter (``functions/ec2.py``, ``Ec2``) implements over the boto3-shaped client
  (:class:`warmpool.ports.Ec2Api`, one method per action in snake case);
* the IAM actions the allocate role must allow for it (``infra/policies.py``).

The emulated EC2 serves each action by the same name (``emulated/ec2``: the handler
tables its ``Ec2Emulator.dispatch`` reads, and ``authz.DESCRIBED`` for the mutating
ones). ``tests/unit/test_calls_registry.py`` holds all of them to this table, so a call
added here and missing elsewhere fails there; docs/design.md ("Adding an EC2 call")
lists the steps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class AssignAddresses:
    eni_id: str
    ips: int = 0
    prefixes: int = 0
    at_ips: tuple[str, ...] = ()
    """Named placement (:mod:`warmpool.placement`): the addresses to ask for by name
    (``PrivateIpAddresses``) instead of ``ips`` by count; empty: EC2 places them."""
    at_prefixes: tuple[str, ...] = ()
    """The /28s to ask for by name (``Ipv4Prefixes``) instead of ``prefixes`` by count."""


@dataclass(frozen=True)
class CreateEni:
    """Create with addresses, attach at ``device_index``, DeleteOnTermination."""

    subnet_id: str
    device_index: int
    network_card: int
    ips: int
    prefixes: int
    client_token: str
    at_ips: tuple[str, ...] = ()
    """Named placement: the primary address, then the ``ips`` secondaries, asked for by name
    (``PrivateIpAddresses``); empty: EC2 places them."""
    at_prefixes: tuple[str, ...] = ()
    """The /28s asked for by name (``Ipv4Prefixes``) instead of ``prefixes`` by count."""


@dataclass(frozen=True)
class UnassignAddresses:
    eni_id: str
    ips: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TagPrimaryEni:
    """CreateTags ``warmpool.io/primary-eni-of = <cluster>`` on the node's primary
    ENI (first contact), so the allocator's IAM lets it (un)assign there."""

    eni_id: str


@dataclass(frozen=True)
class DeleteEni:
    """Detach (when attached), then delete."""

    eni_id: str


@dataclass(frozen=True)
class Reclaim:
    """Decline a release offer: the node needs those addresses again.

    No EC2 call: the addresses never left the ENI. The result tells the agent
    (an ``assigned`` action) to put them back in its pool.
    """

    eni_id: str
    ips: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RepeatRelease:
    """Tell the node again what the allocator already took from it: these addresses
    unassigned, or (``deleted``) the ENI deleted. No EC2 call. Planned from the
    allocator's release book (``warmpool/release_book.py``), never from Describe."""

    eni_id: str
    ips: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    deleted: bool = False


@dataclass(frozen=True)
class RepeatGrant:
    """Tell the node again what EC2 gave it in answer to the allocator's own call, while its
    reports do not name it. No EC2 call. Planned from the release book's ``given`` entries
    (``warmpool/release_book.py``), never from Describe: the agent may have refused the
    first ``assigned`` (a claim older than a later offer of the address) or never got it,
    and no one else would ever tell it again."""

    eni_id: str
    ips: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()


Call = (
    AssignAddresses | CreateEni | UnassignAddresses | DeleteEni | Reclaim | TagPrimaryEni | RepeatRelease | RepeatGrant
)


@dataclass(frozen=True)
class CallSpec:
    """What one kind of planned call takes from EC2, the port and IAM."""

    ec2: tuple[str, ...]
    """The mutating EC2 actions it makes, in order (one token each)."""
    port: tuple[str, ...]
    """The :class:`warmpool.ports.Ec2Port` methods the executor calls for it."""
    iam: tuple[str, ...]
    """The IAM actions the allocate role must allow for it (``ec2:<Action>``)."""

    @property
    def cost(self) -> dict[str, int]:
        """Tokens per EC2 action, taken before the first call."""
        return dict(Counter(self.ec2))


CALLS: dict[type[Call], CallSpec] = {
    AssignAddresses: CallSpec(
        ec2=("AssignPrivateIpAddresses",),
        # subnet_usage: named placement reads what the ENI's subnet holds and its CIDR
        # reservations (paid reads)
        port=("assign", "subnet_usage", "note_placed", "forget_usage"),
        iam=("ec2:AssignPrivateIpAddresses", "ec2:DescribeNetworkInterfaces", "ec2:GetSubnetCidrReservations"),
    ),
    CreateEni: CallSpec(
        ec2=("CreateNetworkInterface", "AttachNetworkInterface", "ModifyNetworkInterfaceAttribute"),
        # delete_eni: the ENI just made is deleted if its attach fails; subnet_usage: named placement
        port=(
            "create_eni",
            "attach",
            "set_delete_on_termination",
            "delete_eni",
            "subnet_usage",
            "note_placed",
            "forget_usage",
        ),
        iam=(
            "ec2:CreateNetworkInterface",
            "ec2:CreateTags",  # the tags given at creation
            "ec2:AttachNetworkInterface",
            "ec2:ModifyNetworkInterfaceAttribute",
            "ec2:DeleteNetworkInterface",
            "ec2:DescribeNetworkInterfaces",  # named placement: the subnet's usage
            "ec2:GetSubnetCidrReservations",  # ... and its CIDR reservations
        ),
    ),
    UnassignAddresses: CallSpec(
        ec2=("UnassignPrivateIpAddresses",),
        port=("unassign",),
        iam=("ec2:UnassignPrivateIpAddresses",),
    ),
    DeleteEni: CallSpec(
        ec2=("DetachNetworkInterface", "DeleteNetworkInterface"),
        # describe_enis: is the detach over before the delete
        port=("detach", "describe_enis", "delete_eni"),
        iam=("ec2:DetachNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DeleteNetworkInterface"),
    ),
    Reclaim: CallSpec(ec2=(), port=(), iam=()),
    TagPrimaryEni: CallSpec(ec2=("CreateTags",), port=("create_tags",), iam=("ec2:CreateTags",)),
    RepeatRelease: CallSpec(ec2=(), port=(), iam=()),
    RepeatGrant: CallSpec(ec2=(), port=(), iam=()),
}
"""Every planned call, and what it takes."""
