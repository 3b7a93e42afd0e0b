"""Hostile review 33 of 1df6757..h21d, finding Y2 (cost), and R1 under it (older than the change).

R1: once an offer's first reports went unanswered (lost, or the allocator's EC2 budget spent and
the node deferred past the offer age), a quiet node reports it only at its renewal (dated then, 1 s
old when read) and a heartbeat later (61 s old): the report backoff stays at its cap (the offers'
signature names only their ENIs, unchanged by a renewal, so the retries are not reset). The
allocator acts on an offer between its release delay (10 s, ``hold_releases``) and the offer age
(60 s, ``fresh_offers``): never, renewal after renewal. The address is held from the subnet for
as long as the node stays quiet (no pod stuck: a node short of addresses gets it handed back).

Y2 (the change): before it, a surplus address joining such an offer between 10 s and 60 s after its
renewal went out in a forced report dated by the renewal (19 s old here): the allocator could act
on the whole offer. ``PoolController._date_joined_offers`` dates it anew, so that report says 1 s
and the offer falls into R1's cadence: never actionable again.

Fixed: what a report says that, changed, resets the back-off names the offers' dates too
(``PoolController._signature``): after a renewal or an offer dated anew the reports go 1, 6, 16
and 36 s after it, two of them inside the window. The joining address of Y2 waits out of the
renewed offer (review 33, Y1's fix), which keeps its date."""

from __future__ import annotations

import pytest

from emulated.clock import VirtualClock
from functions.releases import fresh_offers
from functions.settings import Settings
from functions.telemetry import Tally
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import (
    ID,
    PRIMARY,
    TIMING,
    FakeImds,
    offers_dated_by_their_oldest,
    offers_signed_by_their_enis,
)
from warmpool.limits import known
from warmpool.messages import OFFER_MAX_AGE_CEILING_S, PoolReport

IPS = [f"10.0.0.{i}" for i in range(11, 16)]
RELEASE_DELAY_S = float(Settings.model_fields["release_delay_s"].default)
LATENCY = 1.0
"""From the report's sending to the allocator's reading of it."""
UNANSWERED_UNTIL = 170.0
"""The offer made at 90 s goes unanswered until then (its reports at 1, 6, 16, 36 and 76 s old)."""
RENEWED = 210.0
"""Its renewal: 90 s + the release timeout (120 s in these tests' timing)."""


def _actionable(r: PoolReport, at: float) -> bool:
    fresh = fresh_offers(r, VirtualClock(at), OFFER_MAX_AGE_CEILING_S, Tally())
    return any(o.quarantined_at is not None and at - o.quarantined_at >= RELEASE_DELAY_S for o in fresh.release)


def _actionable_after(pod_deleted_at: float | None) -> list[tuple[float, list[float]]]:
    """A quiet node: five addresses, three pods, a warm target of one; the surplus address is
    offered at 90 s. ``pod_deleted_at``: a pod is deleted then (its address joins the offer 60 s
    later, the agent's release delay). The reports after :data:`UNANSWERED_UNTIL` the allocator
    could act on, with every report's offer ages then."""
    imds = FakeImds()
    imds.add(PRIMARY, IPS)
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(0.0)
    for i in range(3):
        assert ds.assign(f"p{i}", "eth0", "ns", 1.0) is not None
    out: list[tuple[float, list[float]]] = []
    seen: list[tuple[float, list[float]]] = []
    t = 1.0
    while t < 900.0:
        t += 1.0
        if t == pod_deleted_at:
            ds.release("p0", "eth0", t)
        for r in ctl.tick(t):
            ages = [t + LATENCY - (o.quarantined_at or 0.0) for o in r.release]
            seen.append((t, ages))
            if t > UNANSWERED_UNTIL and _actionable(r, t + LATENCY):
                out.append((t, ages))
    assert [a for t, a in seen if t == RENEWED + 1] == [[LATENCY]], ("setup: renewed at 210 s", seen)
    return out


def test_a_renewed_offer_is_actionable_in_some_report_of_a_quiet_node() -> None:
    assert _actionable_after(None)


def test_an_address_joining_a_renewed_offer_leaves_it_actionable() -> None:
    assert _actionable_after(RENEWED - 41.0)  # joins at 229 s, the renewal 19 s old


def test_before_the_change_the_join_went_out_dated_by_the_renewal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before review 32's D1 change, with the report cadence then (R1 not fixed)."""
    offers_dated_by_their_oldest(monkeypatch)
    offers_signed_by_their_enis(monkeypatch)
    got = _actionable_after(RENEWED - 41.0)
    assert got and got[0][0] == RENEWED + 19.0, got
