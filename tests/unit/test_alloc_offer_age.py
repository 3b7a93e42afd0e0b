"""Issue 11, defect 1 (allocator side): a release offer's age is measured from
its own ``quarantined_at``, never from the report's ``sent_at``; an offer
without it is never acted on; the age is checked again right before the
Unassign call; the allocator's age limit cannot exceed the core ceiling."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from functions.settings import Settings
from tests.helpers.allocate_world import AllocatorWorld
from warmpool.messages import OFFER_MAX_AGE_CEILING_S


def _warm(w: AllocatorWorld, node: str = "n1") -> Any:
    w.add_node(node, "m5.large")
    w.deliver([w.report(node, warm_ip=5)])
    return w.enis(node)[0]


def test_an_offer_re_sent_in_a_later_report_is_aged_from_its_quarantine() -> None:
    # Quarantined at q, repeated in a report sent at q+75, served at q+125: the
    # report is 50 s old, the offer 125 s. The agent took it back at q+120.
    w = AllocatorWorld()
    eni = _warm(w)
    offered = list(eni.secondary)[-3:]
    q = w.clock.now()
    w.clock.advance(75)
    report = w.report("n1", warm_ip=1, release=[{"eni_id": eni.id, "ips": offered, "quarantined_at": q}])
    w.clock.advance(50)
    out = w.deliver([report])
    assert [a.kind for a in out.nodes[w.nodes["n1"]].actions] == []
    assert set(offered) <= set(w.enis("n1")[0].secondary)
    assert w.ec2_stats().get("UnassignPrivateIpAddresses", {}).get("calls", 0) == 0
    assert w.tally.as_dict().get("ReleaseOffersExpired") == 3


def test_only_the_old_offer_of_a_report_is_dropped() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.4xlarge")
    w.deliver([w.report("n1", warm_ip=2, pending=40)])
    first, second = w.enis("n1")
    w.pods["n1"] = 4
    now = w.clock.now()
    old = {"eni_id": first.id, "ips": list(first.secondary)[-2:], "quarantined_at": now - 90}
    fresh = {"eni_id": second.id, "ips": list(second.secondary)[:2], "quarantined_at": now - 10}
    out = w.deliver([w.report("n1", warm_ip=2, release=[old, fresh])])
    released = [a for a in out.nodes[w.nodes["n1"]].actions if a.kind == "released"]
    assert [(a.eni_id, sorted(a.ips)) for a in released] == [(second.id, sorted(fresh["ips"]))]
    assert set(old["ips"]) <= set(w.enis("n1")[0].secondary)


def test_an_undated_offer_is_never_acted_on_but_the_demand_is_served() -> None:
    w = AllocatorWorld()
    eni = _warm(w)
    offered = list(eni.secondary)[-3:]
    out = w.deliver(
        [w.report("n1", warm_ip=1, pending=0, release=[{"eni_id": eni.id, "ips": offered, "quarantined_at": None}])]
    )
    assert [a.kind for a in out.nodes[w.nodes["n1"]].actions] == []
    assert set(offered) <= set(w.enis("n1")[0].secondary)
    assert w.tally.as_dict().get("ReleaseOffersUndated") == 3
    # Its demand still is: pods waiting get addresses.
    w.pods["n1"] = 5
    before = w.addresses("n1")
    out = w.deliver(
        [w.report("n1", warm_ip=5, pending=4, release=[{"eni_id": eni.id, "ips": offered, "quarantined_at": None}])]
    )
    assert out.nodes[w.nodes["n1"]].status == "served"
    assert w.addresses("n1") > before
    assert set(offered) <= set(w.enis("n1")[0].secondary)


class _SlowDescribe:
    """An EC2 client whose DescribeNetworkInterfaces takes ``delay_s`` of virtual time."""

    def __init__(self, inner: Any, clock: Any, delay_s: float) -> None:
        self._inner = inner
        self._clock = clock
        self.delay_s = delay_s

    def describe_network_interfaces(self, **kw: Any) -> Any:
        self._clock.advance(self.delay_s)
        return self._inner.describe_network_interfaces(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_an_offer_that_ages_out_during_the_invocation_is_not_unassigned() -> None:
    w = AllocatorWorld()
    eni = _warm(w)
    offered = list(eni.secondary)[-3:]
    q = w.clock.now()
    w.clock.advance(40)  # 40 s old when the batch starts: fresh enough then
    report = w.report("n1", warm_ip=1, release=[{"eni_id": eni.id, "ips": offered, "quarantined_at": q}])
    alloc = w.allocator(ec2=_SlowDescribe(w.ec2_client, w.clock, delay_s=30.0))
    out = w.deliver([report], alloc=alloc)
    assert w.clock.now() - q > w.settings.release_offer_max_age_s
    assert [a.kind for a in out.nodes[w.nodes["n1"]].actions] == []
    assert set(offered) <= set(w.enis("n1")[0].secondary)
    assert w.ec2_stats().get("UnassignPrivateIpAddresses", {}).get("calls", 0) == 0
    assert w.tally.as_dict().get("ReleaseOffersExpired") == 3


def test_an_empty_eni_offered_too_late_is_not_deleted() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.4xlarge")
    w.deliver([w.report("n1", warm_ip=2, pending=40)])
    _first, second = w.enis("n1")
    w.pods["n1"] = 20
    q = w.clock.now()
    w.clock.advance(45)
    report = w.report(
        "n1", warm_ip=2, release=[{"eni_id": second.id, "ips": list(second.secondary), "quarantined_at": q}]
    )
    out = w.deliver([report], alloc=w.allocator(ec2=_SlowDescribe(w.ec2_client, w.clock, delay_s=20.0)))
    assert [a.kind for a in out.nodes[w.nodes["n1"]].actions] == []
    assert second.id in w.emu.enis and w.emu.enis[second.id].attachment is not None
    assert w.ec2_stats().get("DetachNetworkInterface", {}).get("calls", 0) == 0


def test_the_offer_age_limit_cannot_exceed_the_core_ceiling() -> None:
    Settings(cluster="c", release_offer_max_age_s=OFFER_MAX_AGE_CEILING_S)
    with pytest.raises(ValidationError, match="WARMPOOL_RELEASE_OFFER_MAX_AGE_S"):
        Settings(cluster="c", release_offer_max_age_s=OFFER_MAX_AGE_CEILING_S + 1)
