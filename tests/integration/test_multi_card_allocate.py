"""ENIs on network cards above 0 through the allocator on emulated EC2 (issue 24,
``WARMPOOL_MULTI_CARD``): a p5.48xlarge whose default card is full gets its next ENI at
device 0 of card 1, the agent-facing result says so, and that ENI is deleted like any other
once it is empty; with the setting off (the default) nothing goes above card 0."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.helpers.allocate_world import AllocatorWorld
from warmpool.messages import Attached


def _full_default_card(w: AllocatorWorld) -> None:
    w.add_node("n1", "p5.48xlarge")  # 2 ENIs per card, 32 cards, 49 secondary addresses each
    w.tag_primary("n1")
    out = w.deliver([w.report("n1", warm_ip=98, warm_eni=0)])
    assert out.served == 1
    assert [(e.attachment.card, e.attachment.device_index) for e in w.enis("n1")] == [(0, 0), (0, 1)]
    w.pods["n1"] = w.addresses("n1")
    w.results("n1")


WIRES = {"multi_card": True}
"""What an agent with WARMPOOL_MULTI_CARD on says in every report."""


def test_a_full_default_card_gets_the_next_eni_on_card_1() -> None:
    w = AllocatorWorld(multi_card=True)
    _full_default_card(w)
    out = w.deliver([w.report("n1", warm_ip=10, warm_eni=0, extra=WIRES)])
    assert (out.served, out.invalid, out.rejected) == (1, 0, 0)
    new = [e for e in w.enis("n1") if e.attachment.card == 1]
    assert [(e.attachment.card, e.attachment.device_index) for e in new] == [(1, 0)]
    assert len(new[0].secondary) >= 10
    (res,) = w.results("n1")
    (att,) = [a for a in res.actions if isinstance(a, Attached)]
    assert (att.eni_id, att.network_card, att.device_index) == (new[0].id, 1, 0)
    assert att.ips == list(new[0].secondary)


def test_off_by_default_nothing_goes_above_card_0() -> None:
    w = AllocatorWorld()
    _full_default_card(w)
    w.deliver([w.report("n1", warm_ip=10, warm_eni=0)])
    assert {e.attachment.card for e in w.enis("n1")} == {0}


def test_an_agent_that_does_not_say_it_wires_cards_gets_nothing_above_card_0() -> None:
    w = AllocatorWorld(multi_card=True)  # the allocator's setting on, the agent's off (or older)
    _full_default_card(w)
    w.deliver([w.report("n1", warm_ip=10, warm_eni=0)])
    assert {e.attachment.card for e in w.enis("n1")} == {0}


def test_an_empty_eni_at_device_0_of_card_1_is_deleted() -> None:
    w = AllocatorWorld(multi_card=True, min_eni_age_s=0.0, release_delay_s=0.0)
    _full_default_card(w)
    w.deliver([w.report("n1", warm_ip=10, warm_eni=0, extra=WIRES)])
    (new,) = [e for e in w.enis("n1") if e.attachment.card == 1]
    w.results("n1")
    w.clock.advance(120.0)
    offer = {"eni_id": new.id, "ips": list(new.secondary)}
    out = w.deliver([w.report("n1", warm_ip=1, warm_eni=0, assigned=10, release=[offer], extra=WIRES)])
    assert out.served == 1
    assert all(e.attachment.card == 0 for e in w.enis("n1"))


def test_emulated_ec2_refuses_a_card_the_type_lacks_and_a_full_card() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.add_node("n2", "p5.48xlarge")
    c = w.emu.client()

    def eni() -> str:
        return str(c.create_network_interface(SubnetId=w.subnets[0])["NetworkInterface"]["NetworkInterfaceId"])

    def attach(node: str, dev: int, card: int) -> None:
        c.attach_network_interface(
            InstanceId=w.nodes[node], NetworkInterfaceId=eni(), DeviceIndex=dev, NetworkCardIndex=card
        )

    for node, card in (("n1", 1), ("n2", 32)):
        with pytest.raises(ClientError) as e:
            attach(node, 0, card)
        assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
    attach("n2", 0, 3)
    attach("n2", 1, 3)
    with pytest.raises(ClientError) as e:
        attach("n2", 2, 3)
    assert e.value.response["Error"]["Code"] == "AttachmentLimitExceeded"
