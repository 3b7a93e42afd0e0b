"""What an EC2 instance type allows: ENIs, addresses per ENI, network cards.

Built from ``DescribeInstanceTypes`` data (:meth:`InstanceLimits.from_describe`);
the built-in table (:data:`KNOWN_TYPES`, from :mod:`warmpool.limits_data`) covers
every current instance type, so the core never needs a network call to plan.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from warmpool.argtypes import closest
from warmpool.limits_data import TABLE

PREFIX_SIZE = 16
"""Addresses in one delegated IPv4 prefix (a /28)."""


def is_primary_slot(network_card: int, device_index: int) -> bool:
    """The attachment slot of an instance's primary ENI: device index 0 on network card 0. EC2
    requires the primary interface on card 0 (``AttachNetworkInterface``: "The primary network
    interface must be assigned to network card index 0"); every other card numbers its own
    devices from 0 too, and its device 0 is an ordinary secondary ENI."""
    return device_index == 0 and network_card == 0


class InstanceLimits(BaseModel):
    """Networking limits of one instance type."""

    model_config = ConfigDict(frozen=True)

    instance_type: str
    max_enis: int = Field(ge=1)
    ipv4_per_eni: int = Field(ge=1, description="addresses per ENI, the primary included")
    network_cards: int = Field(default=1, ge=1)
    prefix_capable: bool = Field(default=True, description="Nitro: can hold /28 prefixes")
    vcpus: int | None = Field(default=None, ge=1, description="default vCPUs (the max-pods ceiling needs it)")

    @property
    def total_enis(self) -> int:
        """ENIs the instance takes on all its network cards: ``max_enis`` (the default card's)
        on each card. Every card of every multi-card type in the VPC CNI's generated table
        takes as many as the default card (p5.48xlarge: 32 cards of 2), which is what this
        counts; the reports' bound (:mod:`warmpool.messages`) follows it."""
        return self.max_enis * self.network_cards

    @property
    def slots_per_eni(self) -> int:
        """Secondary slots on one ENI: addresses, or /28 prefixes in prefix mode."""
        return self.ipv4_per_eni - 1

    @property
    def per_card_enis(self) -> int:
        """ENIs one network card takes: ``max_enis`` (the default card's), on every card (see
        :attr:`total_enis`)."""
        return self.max_enis

    def max_pods(self, max_eni: int | None = None, *, multi_card: bool = False) -> int:
        """Max pods by the VPC CNI formula: ENIs × (addresses per ENI − 1) + 2."""
        return self.enis(max_eni, multi_card=multi_card) * self.slots_per_eni + 2

    def enis(self, max_eni: int | None = None, *, multi_card: bool = False) -> int:
        """ENIs usable on this type, capped by ``MAX_ENI`` when that is set: the default card's,
        or with ``multi_card`` (``WARMPOOL_MULTI_CARD``, issue 24) every card's."""
        most = self.total_enis if multi_card else self.max_enis
        if max_eni is None or max_eni <= 0:
            return most
        return min(most, max_eni)

    def capacity(
        self,
        *,
        prefix_mode: bool,
        max_eni: int | None = None,
        custom_networking: bool = False,
        multi_card: bool = False,
    ) -> int:
        """Addresses the instance can hold for pods (primary addresses excluded); with custom
        networking the primary ENI holds none (one ENI fewer, after ``MAX_ENI``); with
        ``multi_card`` the ENIs of every network card count."""
        per_slot = PREFIX_SIZE if prefix_mode else 1
        enis = self.enis(max_eni, multi_card=multi_card)
        return max(0, enis - (1 if custom_networking else 0)) * self.slots_per_eni * per_slot

    @classmethod
    def from_describe(cls, item: Mapping[str, Any]) -> InstanceLimits:
        """Build from one ``InstanceTypes[]`` entry of ``DescribeInstanceTypes``."""
        net = item["NetworkInfo"]
        enis = int(net["MaximumNetworkInterfaces"])
        default = int(net.get("DefaultNetworkCardIndex", 0) or 0)
        for card in net.get("NetworkCards") or []:
            # ENIs go on the default card: its own maximum, as the VPC CNI's table records it
            if int(card.get("NetworkCardIndex", 0)) == default and card.get("MaximumNetworkInterfaces"):
                enis = int(card["MaximumNetworkInterfaces"])
        return cls(
            instance_type=str(item["InstanceType"]),
            max_enis=enis,
            ipv4_per_eni=int(net["Ipv4AddressesPerInterface"]),
            network_cards=int(net.get("MaximumNetworkCards", len(net.get("NetworkCards", [])) or 1)),
            prefix_capable=str(item.get("Hypervisor", "nitro")) == "nitro" or bool(item.get("BareMetal")),
            vcpus=int(item["VCpuInfo"]["DefaultVCpus"]) if item.get("VCpuInfo") else None,
        )


def parse_table(text: str) -> dict[str, InstanceLimits]:
    """The rows of :data:`warmpool.limits_data.TABLE` (see that module for the columns and sources).
    Prefix delegation is possible on Nitro and bare-metal types (the VPC CNI's ``IsNitroInstance``)."""
    out: dict[str, InstanceLimits] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        name, enis, ips, cards, hypervisor, metal, vcpus = parts
        out[name] = InstanceLimits(
            instance_type=name,
            max_enis=int(enis),
            ipv4_per_eni=int(ips),
            network_cards=int(cards),
            prefix_capable=hypervisor == "nitro" or metal == "true",
            vcpus=None if vcpus == "-" else int(vcpus),
        )
    return out


KNOWN_TYPES: dict[str, InstanceLimits] = parse_table(TABLE)
"""Every instance type of the data table (:mod:`warmpool.limits_data`)."""


def known(instance_type: str) -> InstanceLimits:
    """Limits from the built-in table; ``KeyError`` naming the type if unknown."""
    try:
        return KNOWN_TYPES[instance_type]
    except KeyError:
        family = instance_type.split(".", 1)[0]
        sizes = sorted(t for t in KNOWN_TYPES if t.split(".", 1)[0] == family)
        near = closest(instance_type, sizes or KNOWN_TYPES, n=5)
        hint = f"; closest known: {', '.join(near)}" if near else ""
        raise KeyError(f"unknown instance type {instance_type!r}{hint} ({len(KNOWN_TYPES)} types known)") from None


LOW_CPU_POD_CEILING = 110
HIGH_CPU_POD_CEILING = 250
CEILING_CPU_THRESHOLD = 30
"""More vCPUs than this get the high ceiling (``max-pods-calculator.sh``: ``CPU_COUNT -gt 30``)."""


class MaxPodsSource(enum.Enum):
    """Whose figure :func:`max_pods` gives for secondary-address (non-prefix) nodes."""

    TABLE = "table"
    """The VPC CNI's published table (amazon-vpc-cni-k8s ``misc/eni-max-pods.txt``):
    ``ENIs × (IPv4 per ENI − 1) + 2`` with no ceiling (m5.4xlarge: 234). The default."""
    CALCULATOR = "calculator"
    """The EKS AMI's ``max-pods-calculator.sh`` (awslabs/amazon-eks-ami) as EKS runs it
    (without ``--show-max-allowed``): the same formula, then at most 110 pods, or 250 with
    more than 30 vCPUs, in every mode (m5.4xlarge: 110)."""


def max_pods(
    limits: InstanceLimits,
    *,
    prefix: bool = False,
    max_eni: int | None = None,
    source: MaxPodsSource = MaxPodsSource.TABLE,
    custom_networking: bool = False,
    multi_card: bool = False,
) -> int:
    """The kubelet's ``--max-pods`` for a node, by the VPC CNI's formulas.

    Secondary addresses: ``ENIs × (IPv4 per ENI − 1) + 2``: the VPC CNI's
    ``misc/eni-max-pods.txt`` (no ceiling) by default, capped as below with
    ``source=CALCULATOR``. Prefix delegation, Nitro only (the published table has
    no prefix column, so both sources follow the calculator):
    ``ENIs × ((IPv4 per ENI − 1) × 16) + 2``, then at most 110 pods, or 250 with
    more than 30 vCPUs (awslabs/amazon-eks-ami ``max-pods-calculator.sh``). A
    non-Nitro type in prefix mode uses the first formula, as the calculator does.
    ``max_eni`` caps the ENIs (``MAX_ENI``; the calculator's ``--cni-max-eni``).
    ``custom_networking`` (pods in other subnets than the node's, the primary ENI left out of
    pod use): one ENI fewer, after that cap, as the calculator's
    ``--cni-custom-networking-enabled`` counts it (the published table has no such column, so
    both sources take the calculator's ENI count; only ``CALCULATOR`` caps).
    ``multi_card`` (``WARMPOOL_MULTI_CARD``, warmpool's own: the published formulas count the
    default card alone): the ENIs of every network card, each card's as many as the default's.
    """
    enis = max(0, limits.enis(max_eni, multi_card=multi_card) - (1 if custom_networking else 0))
    prefixed = prefix and limits.prefix_capable
    if not prefixed and source is MaxPodsSource.TABLE:
        return enis * limits.slots_per_eni + 2
    value = enis * limits.slots_per_eni * (PREFIX_SIZE if prefixed else 1) + 2
    if limits.vcpus is None:
        raise ValueError(f"{limits.instance_type}: vCPU count unknown, needed for the calculator's ceiling")
    ceiling = HIGH_CPU_POD_CEILING if limits.vcpus > CEILING_CPU_THRESHOLD else LOW_CPU_POD_CEILING
    return min(value, ceiling)


def pod_ceiling(
    limits: InstanceLimits,
    *,
    prefix: bool,
    max_eni: int | None = None,
    override: int = 0,
    kubelet: int | None = None,
    custom_networking: bool = False,
    multi_card: bool = False,
) -> int:
    """The most addresses a node's pods can use: ``override`` (the cluster's kubelet ``--max-pods``)
    when set, else :func:`max_pods` for its type and mode. The agent's pool and the allocator's plans
    both stop there (issue 12, finding D: a node cannot take a subnet's /28s beyond what its kubelet
    could run). 0 (no cap) only when the formula needs a vCPU count the table lacks.

    ``kubelet`` (the node's own kubelet's configured ``maxPods``, as its agent read it and reported
    it; ``None`` or 0: not known) can only lower that ceiling, never raise it (:func:`lowered`).
    ``custom_networking``: the primary ENI serves no pod; ``multi_card``: every network card's
    ENIs count (:func:`max_pods`)."""
    if override > 0:
        ceiling = override
    else:
        try:
            ceiling = max_pods(
                limits,
                prefix=prefix,
                max_eni=max_eni or None,
                custom_networking=custom_networking,
                multi_card=multi_card,
            )
        except ValueError:
            ceiling = 0
    return lowered(ceiling, kubelet)


def lowered(ceiling: int, kubelet: int | None) -> int:
    """``ceiling`` (0 = no cap) lowered to the kubelet's own max pods when that is known and lower;
    a kubelet value above the ceiling changes nothing (a report can only lower its node's ceiling)."""
    if kubelet is None or kubelet <= 0:
        return ceiling
    return kubelet if ceiling <= 0 else min(ceiling, kubelet)
