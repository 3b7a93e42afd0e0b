"""Seed 6069 (a sweep of seeds 4000-9999): an agent's tick raised ``ValueError: min() arg is an
empty sequence`` in :func:`node_agent.offers.quarantined_since`, every tick, so the node sent no
report again. A /28 (10.0.1.224/28) was offered and unassigned from one ENI, its ``released``
lost, so the agent kept that copy quarantined; EC2 then put the same /28 on another ENI of the
node, and ``Datastore.add_addresses`` listed the prefix there but skipped its 16 addresses, still
recorded against the first ENI (the final hostile review traced it; the datastore now fills the
members in once that copy is gone: tests/unit/test_review_final_prefix_moved_eni.py). The second
ENI's record listed a /28 with no member, and :func:`node_agent.offers.quarantined` took
``all(())`` of no members for "every address of the /28 is quarantined" and offered it, an offer
with no quarantine time.

Offering a /28 no quarantined address stands for would ask the allocator to unassign addresses
the agent has not set aside: a prefix is offered only when it has addresses and every one of them
is quarantined. The first test fails on the code before the fix."""

from __future__ import annotations

from node_agent import offers
from node_agent.records import Addr, EniRecord
from tests.helpers.controller import PRIMARY

PFX = "10.0.1.224/28"


def record(*, members: bool, quarantined: bool) -> EniRecord:
    e = EniRecord(PRIMARY, 0.0)
    e.prefixes = [PFX]
    if members:
        for i in range(16):
            ip = f"10.0.1.{224 + i}"
            e.addrs[ip] = Addr(ip, prefix=PFX, quarantined_at=5.0 if quarantined else None)
    # the /28's addresses held as single addresses for pods (none of them quarantined)
    for i in range(16):
        ip = f"10.0.1.{224 + i}"
        if not members:
            e.addrs[ip] = Addr(ip, container_id=f"c{i}", ifname="eth0")
            e.ips.append(ip)
    return e


def test_a_prefix_with_no_addresses_is_never_offered() -> None:
    e = record(members=False, quarantined=False)
    assert offers.quarantined([e]) == {}
    assert offers.quarantined_since([e]) == {}


def test_a_prefix_is_offered_when_all_its_addresses_are_quarantined() -> None:
    assert offers.quarantined([record(members=True, quarantined=True)]) == {PRIMARY.eni_id: ([], [PFX])}
    assert offers.quarantined_since([record(members=True, quarantined=True)]) == {PRIMARY.eni_id: 5.0}
    assert offers.quarantined([record(members=True, quarantined=False)]) == {}
