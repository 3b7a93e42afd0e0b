"""Review 24, H4: a ``HELD_OFFERS`` entry for an address no longer held by ``?`` comes back to life.

``HELD_OFFERS`` is meta, and the checkpoint keeps meta free-form: an agent from before the change
(a rollback: docs/agent.md, "an older agent ignores the key, so a rollback still reads the file")
loads it, ends the hold (the grace, or ``lift_unfounded_holds``) without pruning the note, and
writes it back. Nothing prunes it at the next load (``Datastore._load``), and ``hold_all`` adds
the offered addresses to what was "noted before" without asking whether those are still held.
So the next start's hold of every address makes a free address, never on offer, a held offer,
and EC2 taking it is counted as an answered offer, not the alarm."""

from __future__ import annotations

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import HELD_OFFERS, Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, result
from warmpool.limits import known
from warmpool.pool import PoolConfig

E = PRIMARY.eni_id
X = "10.0.0.11"


def _written_by_an_agent_before_the_change() -> MemoryCheckpoint:
    """X was a held offer of a start's hold; an agent that does not know the key let the hold go
    (X back to the pool, free) and wrote its checkpoint, the note carried along."""
    store = MemoryCheckpoint()
    ds = Datastore(cooldown_s=TIMING.cooldown_s, checkpoint=store)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(E, [X])
    ds.set_meta(HELD_OFFERS, [X])  # the key, carried verbatim (``dict(cp.meta)``)
    return store


def test_a_free_address_a_start_holds_is_no_held_offer(caplog: pytest.LogCaptureFixture) -> None:
    store = _written_by_an_agent_before_the_change()
    ds = Datastore(cooldown_s=TIMING.cooldown_s, checkpoint=store)
    assert ds.restore()
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING)
    ctl.start(0.0)
    assert ctl.tick(0.0), "setup: a report to reply to"
    assert ds.quarantined() == {}, "setup: X is on no offer"
    ds.hold_all(1.0)  # a start's hold (hold_doubtful: a pod veth with no route)
    ctl.apply_result(result(ctl.last_seq, {"kind": "released", "eni_id": E, "ips": [X]}), 2.0)
    assert X not in (ds.meta.get(HELD_OFFERS) or ()) or ctl.stats.released_in_use == 1, (
        f"X was free, on no offer, when the hold took it: counted as an answered offer "
        f"(held_offers_taken={ctl.stats.held_offers_taken}), not the alarm"
    )
    assert any("two holders possible" in r.message for r in caplog.records)
