"""What an EC2 instance type allows: ENIs, addresses per ENI, network cards.

Built from ``DescribeInstanceTypes`` data (:meth:`InstanceLimits.from_describe`);
a small built-in table (:data:`KNOWN_TYPES`) covers the types the docs, the
tests and the bench use, so the core never needs a network call to plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PREFIX_SIZE = 16
"""Addresses in one delegated IPv4 prefix (a /28)."""


class InstanceLimits(BaseModel):
    """Networking limits of one instance type."""

    model_config = ConfigDict(frozen=True)

    instance_type: str
    max_enis: int = Field(ge=1)
    ipv4_per_eni: int = Field(ge=1, description="addresses per ENI, the primary included")
    network_cards: int = Field(default=1, ge=1)
    prefix_capable: bool = Field(default=True, description="Nitro: can hold /28 prefixes")

    @property
    def slots_per_eni(self) -> int:
        """Secondary slots on one ENI: addresses, or /28 prefixes in prefix mode."""
        return self.ipv4_per_eni - 1

    def max_pods(self, max_eni: int | None = None) -> int:
        """Max pods by the VPC CNI formula: ENIs × (addresses per ENI − 1) + 2."""
        return self.enis(max_eni) * self.slots_per_eni + 2

    def enis(self, max_eni: int | None = None) -> int:
        """ENIs usable on this type, capped by ``MAX_ENI`` when that is set."""
        if max_eni is None or max_eni <= 0:
            return self.max_enis
        return min(self.max_enis, max_eni)

    def capacity(self, prefix_mode: bool, max_eni: int | None = None) -> int:
        """Addresses the instance can hold for pods (primary addresses excluded)."""
        per_slot = PREFIX_SIZE if prefix_mode else 1
        return self.enis(max_eni) * self.slots_per_eni * per_slot

    @classmethod
    def from_describe(cls, item: Mapping[str, Any]) -> InstanceLimits:
        """Build from one ``InstanceTypes[]`` entry of ``DescribeInstanceTypes``."""
        net = item["NetworkInfo"]
        return cls(
            instance_type=str(item["InstanceType"]),
            max_enis=int(net["MaximumNetworkInterfaces"]),
            ipv4_per_eni=int(net["Ipv4AddressesPerInterface"]),
            network_cards=int(net.get("MaximumNetworkCards", len(net.get("NetworkCards", [])) or 1)),
            prefix_capable=str(item.get("Hypervisor", "nitro")) == "nitro",
        )


def _t(name: str, enis: int, ips: int, cards: int = 1, nitro: bool = True) -> InstanceLimits:
    return InstanceLimits(
        instance_type=name, max_enis=enis, ipv4_per_eni=ips, network_cards=cards, prefix_capable=nitro
    )


KNOWN_TYPES: dict[str, InstanceLimits] = {
    t.instance_type: t
    for t in (
        _t("t3.small", 3, 4),
        _t("t3.medium", 3, 6),
        _t("t3.large", 3, 12),
        _t("m5.large", 3, 10),
        _t("m5.xlarge", 4, 15),
        _t("m5.2xlarge", 4, 15),
        _t("m5.4xlarge", 8, 30),
        _t("m5.8xlarge", 8, 30),
        _t("m5.12xlarge", 8, 30),
        _t("m5.24xlarge", 15, 50),
        _t("c5.large", 3, 10),
        _t("c5.xlarge", 4, 15),
        _t("c5.4xlarge", 8, 30),
        _t("c5.9xlarge", 8, 30),
        _t("c5.18xlarge", 15, 50),
        _t("r5.large", 3, 10),
        _t("r5.4xlarge", 8, 30),
        _t("m4.large", 2, 10, nitro=False),
    )
}


def known(instance_type: str) -> InstanceLimits:
    """Limits from the built-in table; ``KeyError`` naming the type if unknown."""
    try:
        return KNOWN_TYPES[instance_type]
    except KeyError:
        raise KeyError(f"unknown instance type {instance_type!r}; known: {sorted(KNOWN_TYPES)}") from None
