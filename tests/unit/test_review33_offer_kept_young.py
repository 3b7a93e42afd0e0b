"""Hostile review 33 of 1df6757..h21d, finding Y1 (cost): review 32's D1 fix
(``PoolController._date_joined_offers``) dates a whole ENI's offer anew whenever an address joins
it. The allocator acts on an offer only once it is ``release_delay_s`` old (10 s by default,
``functions.releases.hold_releases``) and no more than the offer age (60 s,
``functions.releases.fresh_offers``). Addresses joining one ENI's offer less than the release
delay apart therefore keep every report's offer younger than the allocator acts on: none of its
addresses, the oldest included, is unassigned for as long as the joins go on. Before the fix the
offer was dated by its oldest address and acted on once that was 10 s old.

The sequence: the checkpoint is lost; IMDS shows X on the second ENI at the start (held as
offered, of unknown origin: never handed back, only the allocator's unassign ends it); a lagging
IMDS then shows one more address of the ENI every 8 s (addresses the node had before the loss,
shown late; the same stream comes from pods DELeted one by one after a restore found not current,
each address offered as of unknown origin at its DEL: ``UNKNOWN_ON_RELEASE``). Each joins the
offer and dates it anew. X, offered at the start, is never actionable while the stream lasts (here
about 90 s; as long as the ENI has addresses to show, or the node pods to drain).

Bounded by the stream (an ENI's addresses, a node's pods), so a cost (addresses of unknown origin
kept from the subnet and from the node's ceiling meanwhile), not a stuck pod: once the joins stop,
the offer ages into the window and is acted on (pinned below, with the agent as found).

Fixed: an address joining an offer younger than the offer age (``OFFER_DATE_KEPT_S``, 60 s) waits
out of it, still quarantined, until the offer is that old, nothing older is left on offer, or a pod
waits, and then joins it dated anew (``PoolController._date_joined_offers``, ``_offer_joined``): X's date
stands, and the report 16 s after it (the back-off's) is read inside the allocator's window."""

from __future__ import annotations

import pytest

from emulated.clock import VirtualClock
from functions.releases import fresh_offers
from functions.settings import Settings
from functions.telemetry import Tally
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import (
    ID,
    SECOND,
    TIMING,
    FakeImds,
    offers_dated_anew_at_every_join,
    offers_dated_by_their_oldest,
    offers_signed_by_their_enis,
)
from warmpool.limits import known
from warmpool.messages import OFFER_MAX_AGE_CEILING_S, PoolReport

X = "10.0.0.40"
LATE = [f"10.0.0.{41 + i}" for i in range(12)]
"""Shown by IMDS one at a time after the start, :data:`EVERY` seconds apart."""
T0 = 1000.0
EVERY = 8.0
"""Less than the allocator's release delay between two joins."""
RELEASE_DELAY_S = float(Settings.model_fields["release_delay_s"].default)
LATENCY = 1.0
"""From the report's sending to the allocator's reading of it."""


def _actionable(r: PoolReport, at: float) -> bool:
    """Whether the allocator, reading ``r`` at ``at``, may unassign X: the offer naming it is
    fresh enough (``fresh_offers``) and old enough (``hold_releases``'s release delay)."""
    fresh = fresh_offers(r, VirtualClock(at), OFFER_MAX_AGE_CEILING_S, Tally())
    return any(
        X in o.ips and o.quarantined_at is not None and at - o.quarantined_at >= RELEASE_DELAY_S for o in fresh.release
    )


def _first_actionable() -> tuple[float | None, float]:
    """When X is first actionable in a report, and when the last address joined."""
    imds = FakeImds()
    imds.add(SECOND, [X])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.4xlarge"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0, checkpoint_lost=True)
    assert ds.quarantined().get(SECOND.eni_id) == ([X], [])
    shown = [X]
    last_join = T0
    t = T0
    while t < T0 + 300:
        t += 1.0
        if LATE[len(shown) - 1 :] and t - last_join >= EVERY:
            shown.append(LATE[len(shown) - 1])
            imds.enis[SECOND.eni_id] = AttachedEni(SECOND, list(shown), [])
            ctl.resync(t)
            assert shown[-1] in ds.quarantined()[SECOND.eni_id][0], "held as offered, of unknown origin"
            last_join = t
        for r in ctl.tick(t):
            if _actionable(r, t + LATENCY):
                return t, last_join
    return None, last_join


def test_an_offered_address_is_actionable_within_the_offer_age_while_others_join_its_offer() -> None:
    at, last_join = _first_actionable()
    assert at is not None
    # Before the fix: X was first actionable only after the last join (T0 + 96 s), ~10 s later.
    # Fixed: the joining addresses are left out of X's offer until it is 60 s old
    # (``PoolController._date_joined_offers``), so its date stands.
    assert at <= T0 + OFFER_MAX_AGE_CEILING_S, (at - T0, last_join - T0)


def test_before_the_fix_the_offer_dated_by_x_was_actionable_early(monkeypatch: pytest.MonkeyPatch) -> None:
    offers_dated_by_their_oldest(monkeypatch)
    at, _ = _first_actionable()
    assert at is not None and at <= T0 + OFFER_MAX_AGE_CEILING_S, at


def test_once_the_joins_stop_the_offer_is_actionable_within_the_release_delay_and_a_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Why Y1 was a cost and not a stuck offer (the agent as review 33 found it): the stream ends,
    and the offer then ages into the allocator's window (the report backoff caps at the
    heartbeat)."""
    offers_dated_anew_at_every_join(monkeypatch)
    offers_signed_by_their_enis(monkeypatch)
    at, last_join = _first_actionable()
    assert at is not None
    assert last_join == T0 + EVERY * len(LATE), last_join
    assert at <= last_join + RELEASE_DELAY_S + TIMING.heartbeat_s, at - last_join
