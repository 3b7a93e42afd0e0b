"""Nodes with many network cards, end to end through emulated EC2 (issue 21, defect 11).

Every multi-card type of the limits table, another tool's interface (EFA, say) attached to
each of its non-default cards: the agent's report names them all, the allocator serves it
and fills the default card up to that card's own ENI limit."""

from __future__ import annotations

import pytest

from tests.helpers.allocate_world import AllocatorWorld
from warmpool.limits import KNOWN_TYPES, InstanceLimits

MANY_CARDS = sorted(t for t, lim in KNOWN_TYPES.items() if lim.network_cards > 1)


def _other_tools_interfaces(w: AllocatorWorld, node: str, lim: InstanceLimits) -> list[str]:
    c = w.emu.client()
    out = []
    for card in range(1, lim.network_cards):
        eni = c.create_network_interface(SubnetId=w.subnets[0])["NetworkInterface"]["NetworkInterfaceId"]
        c.attach_network_interface(
            InstanceId=w.nodes[node], NetworkInterfaceId=eni, DeviceIndex=1, NetworkCardIndex=card
        )
        out.append(eni)
    return out


def test_every_multi_card_type_is_in_the_table() -> None:
    assert "p5.48xlarge" in MANY_CARDS and len(MANY_CARDS) >= 30


@pytest.mark.parametrize("itype", MANY_CARDS)
def test_a_node_with_an_interface_on_every_card_is_served(itype: str) -> None:
    lim = KNOWN_TYPES[itype]
    w = AllocatorWorld()
    w.add_node("n1", itype)
    theirs = _other_tools_interfaces(w, "n1", lim)
    report = w.report("n1", warm_ip=10_000, warm_eni=0, pending=5)
    assert max(e.network_card for e in report.enis) == lim.network_cards - 1
    out = w.deliver([report])
    assert (out.invalid, out.rejected) == (0, 0)
    on_default = [e for e in w.enis("n1") if e.attachment.card == 0]
    assert len(on_default) == lim.max_enis
    assert all(not w.emu.enis[e].secondary for e in theirs)
    assert w.addresses("n1") == lim.max_enis * lim.slots_per_eni


def test_the_emulator_limits_enis_per_card_as_describe_instance_types_says() -> None:
    from botocore.exceptions import ClientError

    w = AllocatorWorld()
    w.add_node("n1", "p5.48xlarge")
    c = w.emu.client()
    item = c.describe_instance_types(InstanceTypes=["p5.48xlarge"])["InstanceTypes"][0]
    net = item["NetworkInfo"]
    assert (net["MaximumNetworkInterfaces"], net["MaximumNetworkCards"]) == (64, 32)
    assert {card["MaximumNetworkInterfaces"] for card in net["NetworkCards"]} == {2}
    assert InstanceLimits.from_describe(item).total_enis == 64
    _other_tools_interfaces(w, "n1", KNOWN_TYPES["p5.48xlarge"])
    extra = c.create_network_interface(SubnetId=w.subnets[0])["NetworkInterface"]["NetworkInterfaceId"]
    c.attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=extra, DeviceIndex=2, NetworkCardIndex=5)
    more = c.create_network_interface(SubnetId=w.subnets[0])["NetworkInterface"]["NetworkInterfaceId"]
    with pytest.raises(ClientError, match="AttachmentLimitExceeded"):
        c.attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=more, DeviceIndex=3, NetworkCardIndex=5)
