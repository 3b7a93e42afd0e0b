"""After a checkpoint loss (a first start is one), an address IMDS shows first later in the window
is held as offered, of unknown origin, and dated when the agent learns it, not at the start
(``PoolController._hold_unknown``). Dated at the start, an address IMDS showed more than
``WARMPOOL_RELEASE_OFFER_MAX_AGE_S`` (60 s) after it was offered already too old for the
allocator to act on: dropped (``functions.releases.fresh_offers``), and the planner counted
what EC2 shows of it as the node's free pool, so a node whose pods waited was not short and got
nothing until the agent renewed the offer at its release timeout (the simulation's seed 1008551:
an ENI created with a /28 at the start, shown by a lagging IMDS 113 s later, its node's pods
waiting 476 s; tests/sim/test_seed_1008551.py)."""

from __future__ import annotations

from emulated.clock import VirtualClock
from functions.releases import fresh_offers
from functions.telemetry import Tally
from tests.helpers.agent_findings import lost
from tests.helpers.controller import ID, PRIMARY, SECOND, FakeImds, one
from warmpool import names
from warmpool.calls import AssignAddresses, UnassignAddresses
from warmpool.facts import EniFacts, NodeFacts
from warmpool.limits import known
from warmpool.messages import OFFER_MAX_AGE_CEILING_S
from warmpool.planner import Eni, plan_node
from warmpool.subnets import Subnet

Y = "10.0.0.21"
T0 = 1000.0
LEARNT = T0 + 90.0
"""Inside the window (``TIMING.release_timeout_s``: 120 s), later than the offers' max age."""


def _facts() -> NodeFacts:
    tags = {names.TAG_CLUSTER_NAME: "demo", names.TAG_MANAGED: "true"}

    def facts(eni: Eni, mac: str, n: int) -> EniFacts:
        return EniFacts(eni, ID.instance_id, f"att-{n}", mac, True, "in-use", tags, attachment_status="attached")

    primary = facts(Eni(PRIMARY.eni_id, 0, 0, "subnet-a", PRIMARY.primary_ip), PRIMARY.mac, 0)
    second = facts(Eni(SECOND.eni_id, 1, 0, "subnet-a", SECOND.primary_ip, (Y,)), SECOND.mac, 1)
    return NodeFacts(ID.instance_id, "m5.large", "us-east-1a", "running", "vpc-1", {}, (primary, second))


def test_an_address_imds_shows_late_in_the_window_is_offered_young_enough_to_be_acted_on() -> None:
    imds = FakeImds()  # the primary ENI alone: a lagging IMDS does not show the second one yet
    ds, ctl = lost(imds, T0)
    assert ds.assign("p0", "eth0", "ns", T0 + 1) is None  # a pod waits: nothing free
    imds.add(SECOND, [Y])  # the ENI the allocator made for it, shown 90 s into the window
    ctl.resync(LEARNT)
    assert ds.quarantined().get(SECOND.eni_id) == ([Y], []), "held as offered, of unknown origin"
    assert ds.assign("p0", "eth0", "ns", LEARNT + 0.5) is None  # still no pod gets it
    r = one(ctl.tick(LEARNT + 1))
    (offer,) = r.release
    assert offer.unknown and offer.ips == [Y] and r.pending_demand == 1
    assert offer.quarantined_at is not None and offer.quarantined_at >= LEARNT - 1, (
        "dated when learnt, not at the start"
    )
    # The allocator (its intake keeps the offers young enough to act on) unassigns Y and meets
    # the pod's need with a fresh address. Before: the offer was dropped as 91 s old, Y counted
    # as the node's free address, and nothing planned.
    fresh = fresh_offers(r, VirtualClock(LEARNT + 2), OFFER_MAX_AGE_CEILING_S, Tally())
    assert fresh.release == r.release
    subnets = (Subnet("subnet-a", "us-east-1a", "10.0.0.0/24", 100),)
    plan = plan_node(fresh, _facts().inventory("demo"), known("m5.large"), subnets, cluster="demo")
    drop = [c for c in plan.calls if isinstance(c, UnassignAddresses)]
    assert drop and drop[0].eni_id == SECOND.eni_id and drop[0].ips == (Y,), plan
    assert any(isinstance(c, AssignAddresses) for c in plan.calls), plan


def test_an_address_shown_at_the_start_is_still_dated_at_the_start() -> None:
    imds = FakeImds()
    imds.add(SECOND, [Y])
    ds, ctl = lost(imds, T0)
    assert ds.quarantined().get(SECOND.eni_id) == ([Y], [])
    r = one(ctl.tick(T0 + 1))
    (offer,) = r.release
    assert offer.unknown and offer.ips == [Y] and offer.quarantined_at is not None and offer.quarantined_at <= T0
