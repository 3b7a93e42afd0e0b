"""Outside review of the fair-sharing change (merge fdfcc67), on emulated EC2 and SQS: what needs
the allocator's caches and queues. See tests/unit/test_review_fair.py for the rest."""

from __future__ import annotations

from tests.helpers.allocate_world import AllocatorWorld


def _offers(w: AllocatorWorld, node: str, keep: int, age: float) -> list[dict[str, object]]:
    by_eni: dict[str, list[str]] = {}
    held = [(e.id, ip) for e in w.enis(node) for ip in e.secondary]
    for e, ip in held[keep:]:
        by_eni.setdefault(e, []).append(ip)
    return [{"eni_id": e, "ips": ips, "quarantined_at": w.clock.now() - age} for e, ips in by_eni.items()]


# Fixed (was a strict xfail of the review):
def test_a_quiet_report_is_not_told_scarce_after_the_zone_has_free_addresses_again() -> None:
    # a /26: 59 addresses; scarce below 10 free, a lean node's up to 20
    w = AllocatorWorld(subnet_cidrs=("10.0.0.0/26",), scarce_free=10, allocator_release_delay_s=10)
    a, b = w.alloc, w.allocator()  # two Lambda containers, each with its own subnet cache
    w.add_node("idle", "m5.large")
    w.add_node("hog", "m5.4xlarge")
    w.tag_primary("idle")
    w.tag_primary("hog")
    # the hog's pods take nearly all of the zone (not scarce yet when it is planned)
    for pending in (29, 20):  # fills its primary ENI, then a new ENI
        w.pods["hog"] = w.addresses("hog")
        w.deliver([w.report("hog", pending=pending, warm_ip=1, extra={"lean": False})], alloc=a)
        w.results("hog")
        w.clock.advance(31)
    assert w.addresses("hog") >= 45
    # container b serves the idle node's pod and reads the zone scarce; the next report settles
    w.deliver([w.report("idle", pending=1, extra={"lean": False})], alloc=b)
    assert any(r.scarce for r in w.results("idle"))
    w.pods["idle"] = w.addresses("idle")
    w.deliver([w.report("idle", extra={"lean": True})], alloc=b)
    w.results("idle")
    # container a: the hog's pods end, it offers everything back, a unassigns and deletes it all
    w.clock.advance(31)
    w.pods["hog"] = 0
    w.deliver([w.report("hog", warm_ip=1, release=_offers(w, "hog", 0, 15), extra={"lean": True})], alloc=a)
    w.results("hog")
    assert w.addresses("hog") == 0
    w.clock.advance(31)
    w.deliver([w.report("hog", warm_ip=1, extra={"lean": True})], alloc=a)  # settles its book
    w.results("hog")
    free = sum(s.free for s in a.ec2.known_subnets().values())
    assert free > 2 * 10, free  # the zone is not scarce, not even for a lean node
    # minutes later, the cluster quiet: the idle node's heartbeats reach container b
    for _ in range(5):
        w.clock.advance(60)
        w.deliver([w.report("idle", extra={"lean": True})], alloc=b)
        said = [r for r in w.results("idle") if r.scarce]
        assert not said, f"told scarce from a subnet read that predates the give-back ({free} free)"
