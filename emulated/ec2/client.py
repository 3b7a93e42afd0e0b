"""The fast way in: a boto3-shaped object over :class:`Ec2Emulator`.

Same method names and keyword arguments as boto3's ``ec2`` client, dicts in and
out, ``botocore.exceptions.ClientError`` out on errors — but no serialization,
so the bench can make ~10^5 calls in seconds. Satisfies
:class:`warmpool.ports.Ec2Api`. Parameters are not validated against the
botocore model here (the boto3 path does that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import Ec2Error
from .ports import Dispatcher

if TYPE_CHECKING:
    from .authz import Principal


def snake_to_action(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class FastEc2Client:
    """boto3-shaped EC2 client served directly by an :class:`Ec2Emulator`."""

    def __init__(self, emu: Dispatcher, principal: Principal | None = None) -> None:
        self.emulator = emu
        self.principal = principal
        """Whose policies every call is authorized against (None: not checked)."""

    def _call(self, action: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.emulator.dispatch(action, kwargs, self.principal)
        except Ec2Error as e:
            raise e.client_error(action) from None

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("DescribeInstances", kwargs)

    def describe_network_interfaces(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("DescribeNetworkInterfaces", kwargs)

    def describe_subnets(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("DescribeSubnets", kwargs)

    def get_subnet_cidr_reservations(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("GetSubnetCidrReservations", kwargs)

    def describe_instance_types(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("DescribeInstanceTypes", kwargs)

    def create_network_interface(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("CreateNetworkInterface", kwargs)

    def attach_network_interface(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("AttachNetworkInterface", kwargs)

    def modify_network_interface_attribute(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("ModifyNetworkInterfaceAttribute", kwargs)

    def assign_private_ip_addresses(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("AssignPrivateIpAddresses", kwargs)

    def unassign_private_ip_addresses(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("UnassignPrivateIpAddresses", kwargs)

    def detach_network_interface(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("DetachNetworkInterface", kwargs)

    def delete_network_interface(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("DeleteNetworkInterface", kwargs)

    def create_tags(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("CreateTags", kwargs)

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        """Every other supported action (``run_instances``, ``describe_vpcs`` …)."""
        if name.startswith("_"):
            raise AttributeError(name)
        action = snake_to_action(name)
        if action not in self.emulator.actions():
            raise AttributeError(f"emulated EC2 does not serve {action}")

        def call(**kwargs: Any) -> dict[str, Any]:
            return self._call(action, kwargs)

        return call
