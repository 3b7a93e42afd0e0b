"""Scarce addresses shared fairly through the allocator on emulated EC2 (issue 24,
docs/allocator.md "Scarce addresses shared fairly"): in a nearly full zone the allocator says
``scarce`` (to a busy node's report and, with no action, to an idle node's quiet one), the idle
node's lean offer above its floor is unassigned, and the busy node gets the address. An agent
from before the field is never told ``scarce``."""

from __future__ import annotations

import json

from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names

FLOOR = 2


def _world() -> AllocatorWorld:
    # a /27: 27 addresses for the two primaries and the pods; scarce below 20 free
    return AllocatorWorld(subnet_cidrs=("10.0.0.0/27",), scarce_free=20, allocator_release_delay_s=10)


def _held(w: AllocatorWorld, node: str) -> list[tuple[str, str]]:
    return [(e.id, ip) for e in w.enis(node) for ip in e.secondary]


def test_a_nearly_full_zone_makes_the_idle_node_offer_back_and_the_busy_node_gets_it() -> None:
    w = _world()
    w.add_node("idle", "m5.large")
    w.add_node("busy", "m5.large")
    w.tag_primary("idle")
    w.tag_primary("busy")
    # the idle node fills its warm target while the zone still has room (25 free: not scarce)
    w.deliver([w.report("idle", warm_ip=10, minimum_ip=FLOOR, extra={"lean": False})])
    assert w.addresses("idle") == 10
    assert all(r.scarce is None for r in w.results("idle"))
    # the busy node's pods wait for more than the zone has: it is served what is free, told scarce
    w.clock.advance(31)  # the subnets' cached free count read again (15 free)
    w.pods["busy"] = 0
    w.deliver([w.report("busy", pending=20, warm_ip=10, minimum_ip=FLOOR, extra={"lean": False})])
    got = w.addresses("busy")
    assert 0 < got < 20
    busy_results = w.results("busy")
    assert busy_results and all(r.scarce is True for r in busy_results)
    # the idle node's quiet heartbeat is answered, with no action, saying scarce
    w.clock.advance(5)
    w.deliver([w.report("idle", warm_ip=10, minimum_ip=FLOOR, extra={"lean": False})])
    (quiet,) = w.results("idle")
    assert quiet.scarce is True and quiet.actions == []
    # lean now, it offers what is above its floor (dated past the allocator's release delay)
    offer = _held(w, "idle")[FLOOR:]
    by_eni: dict[str, list[str]] = {}
    for e, ip in offer:
        by_eni.setdefault(e, []).append(ip)
    w.clock.advance(30)  # an ENI whose every address is offered is deleted once 60 s old
    w.deliver(
        [
            w.report(
                "idle",
                warm_ip=10,
                minimum_ip=FLOOR,
                release=[{"eni_id": e, "ips": ips, "quarantined_at": w.clock.now() - 15} for e, ips in by_eni.items()],
                extra={"lean": True},
            )
        ]
    )
    assert w.addresses("idle") == FLOOR  # the floor is kept
    (answer,) = w.results("idle")
    assert answer.scarce is True
    released = {ip for a in answer.actions if a.kind == "released" for ip in a.ips}
    deleted = {a.eni_id for a in answer.actions if a.kind == "deleted"}
    assert released | {ip for e, ip in offer if e in deleted} == {ip for _, ip in offer}
    # the busy node's pods still waiting are served from what the idle node gave back
    w.clock.advance(31)  # the subnets' cached free count read again
    w.pods["busy"] = got
    w.deliver([w.report("busy", pending=20 - got, warm_ip=10, minimum_ip=FLOOR, extra={"lean": True})])
    assert w.addresses("busy") >= 20
    assert len(w.all_addresses()) == len(set(w.all_addresses()))


def test_an_agent_from_before_the_field_is_never_told_scarce() -> None:
    w = _world()
    w.add_node("old", "m5.large")
    w.tag_primary("old")
    w.pods["old"] = 0
    w.deliver([w.report("old", pending=30, warm_ip=10)])  # no ``lean``: an older agent
    assert w.addresses("old") > 0
    results = w.results("old")
    assert results and all(r.scarce is None for r in results)
    assert all("scarce" not in json.loads(r.to_json()) for r in results)
    # its quiet reports get no reply either
    w.clock.advance(40)
    w.pods["old"] = w.addresses("old") - 2
    w.deliver([w.report("old", warm_ip=1, warm_eni=0)])
    assert w.results("old") == []


def test_off_at_zero() -> None:
    w = AllocatorWorld(subnet_cidrs=("10.0.0.0/27",), scarce_free=0)
    w.add_node("n", "m5.large")
    w.tag_primary("n")
    w.deliver([w.report("n", pending=30, warm_ip=10, extra={"lean": False})])
    assert all(r.scarce is None for r in w.results("n"))


def test_a_quiet_report_is_not_told_scarce_by_a_container_that_read_no_subnets() -> None:
    w = _world()
    w.add_node("n", "m5.large")
    w.tag_primary("n")
    w.pods["n"] = 0
    w.deliver([w.report("n", pending=30, warm_ip=10, extra={"lean": False})])  # the zone fills
    w.clock.advance(31)
    w.pods["n"] = w.addresses("n")
    w.deliver([w.report("n", pending=1, warm_ip=10, extra={"lean": False})])  # subnets read again
    assert any(r.scarce for r in w.results("n"))
    w.pods["n"] = w.addresses("n") - 2
    w.deliver([w.report("n", warm_ip=1, warm_eni=0, extra={"lean": False})])  # settles the book
    w.results("n")
    quiet_before = w.tally.get(names.M_REPORTS_QUIET)
    fresh = w.allocator()  # a new container: no DescribeSubnets paid for a quiet report
    reads = w.ec2_stats().get("DescribeSubnets", {}).get("calls", 0)
    w.deliver([w.report("n", warm_ip=1, warm_eni=0, extra={"lean": False})], alloc=fresh)
    assert w.tally.get(names.M_REPORTS_QUIET) == quiet_before + 1
    assert w.results("n") == []
    assert w.ec2_stats().get("DescribeSubnets", {}).get("calls", 0) == reads
    # the container that read them says it, to the quiet report too, with no action
    w.deliver([w.report("n", warm_ip=1, warm_eni=0, extra={"lean": False})])
    assert w.tally.get(names.M_REPORTS_QUIET) == quiet_before + 2
    (said,) = w.results("n")
    assert said.scarce is True and said.actions == []
