"""A hostile review of the resync fix (released addresses ignored until a grant names them
again, c47944e) found two more ways an address EC2 took could reach a pod; each test failed
on that commit.

* A quarantined address taken off at the release timeout because IMDS no longer listed it
  was recorded as released by a result of unknown seq (-1). After a restart (which forgets
  which reports offered what), a hand-back of an older offer arriving late, with IMDS
  answering from before the unassign, was taken into the pool free. It is now recorded as
  released by the newest report sent (``node_agent/controller.py``, the take-back).
* ``MAX_RELEASED`` forgot released keys IMDS still listed when too few had been seen
  absent, and resync took them back free. Only keys seen absent are forgotten now
  (``node_agent/recent_results.py``).
"""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import RECENT_S, PoolController
from node_agent.datastore import Datastore
from node_agent.recent_results import MAX_RELEASED
from tests.helpers.agent_findings import X, boot, holders, listed, offered_x, released_x
from tests.helpers.controller import PRIMARY, SECOND, FakeImds, never_free, result
from warmpool.messages import AllocationResult


def offered_handed_back_then_taken_off(
    cp: MemoryCheckpoint, imds: FakeImds, t0: float
) -> tuple[Datastore, PoolController, AllocationResult]:
    """X quarantined and offered (report S1); the allocator answers S1 with a hand-back H
    (pods were waiting), delayed in SQS; the agent goes on offering X and the answer to a
    later report unassigns it, lost; IMDS catches up; at the release timeout X, no longer
    listed, is taken off as released (as of the newest report) and seen absent. Returns H."""
    ds, ctl, s1 = offered_x(cp, imds, t0)
    handback = result(s1.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]})
    later = [r for t in range(62, 130) for r in ctl.tick(t0 + t)]
    assert later and all(X in r.release[0].ips for r in later)
    listed(imds, "10.0.0.11")
    for t in range(130, 200, 5):
        ctl.tick(t0 + t)
    assert ds.eni_of(X) is None and ds.seen_absent(X)
    return ds, ctl, handback


def test_a_late_handback_after_a_take_back_removal_and_a_restart_is_not_taken_from_a_regressed_read() -> None:
    cp, imds, t0 = MemoryCheckpoint(), FakeImds(), 1000.0
    _, _, handback = offered_handed_back_then_taken_off(cp, imds, t0)
    # kill -9 and restart (checkpoint kept): the offer memory (_offered_upto) is gone
    ds, ctl = boot(cp, imds, t0 + 210)
    # IMDS answers from before the unassign (docs/safety.md row 6) and H finally arrives
    listed(imds, "10.0.0.11", X)
    ctl.apply_result(handback, t0 + 211)
    for i in range(2):
        ds.assign(f"pod-{i}", "eth0", "ns", t0 + 212)
    assert X not in holders(ds), "a pod holds an address EC2 unassigned (H older than the unassign)"


def test_without_the_restart_the_late_handback_is_refused_too() -> None:
    cp, imds, t0 = MemoryCheckpoint(), FakeImds(), 1000.0
    ds, ctl, handback = offered_handed_back_then_taken_off(cp, imds, t0)
    listed(imds, "10.0.0.11", X)
    ctl.apply_result(handback, t0 + 211)
    assert ds.eni_of(X) is None


def test_the_bound_never_forgets_a_released_address_imds_still_lists() -> None:
    cp, imds, t0 = MemoryCheckpoint(), FakeImds(), 1000.0
    ds, ctl = released_x(cp, imds, t0)
    seq = ctl.last_seq
    # IMDS stuck (row 4: no bound; listed "until stop/start"). The node goes on releasing:
    # MAX_RELEASED more released keys, none ever seen absent (the stuck IMDS lists them too,
    # here on a second ENI; or reads are incomplete while an ENI is held unseen).
    fillers = [f"10.0.{4 + i // 250}.{i % 250 + 1}" for i in range(MAX_RELEASED)]
    imds.add(SECOND, fillers)
    for n, i in enumerate(range(0, MAX_RELEASED, 64)):
        ds.mark_gone(t0 + 100 + n, t0 + 100 + n + RECENT_S, seq + 1 + n, released=fillers[i : i + 64])
        ctl.resync(t0 + 100 + n)
    ctl.resync(t0 + 500)
    assert never_free(ds, ctl, X), "the stuck IMDS listing brought a released address back free"


def test_a_released_redelivered_long_after_a_later_grant_leaves_the_address_granted() -> None:
    """L1 of the same review: ``granted`` entries expired after 2 min, so a ``released``
    redelivered later (SQS bounds no redelivery) dropped an address EC2 had granted to the
    node again since, for good (resync never takes a released address without a grant)."""
    imds = FakeImds()
    cp = MemoryCheckpoint()
    t0 = 1000.0
    ds, ctl, s1 = offered_x(cp, imds, t0)
    first = result(s1.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]})
    ctl.apply_result(first, t0 + 62)
    listed(imds, "10.0.0.11")
    ctl.resync(t0 + 70)  # seen without X
    listed(imds, "10.0.0.11", X)  # EC2 assigned X to the node again
    ctl.retry_soon()
    (s2,) = ctl.tick(t0 + 80)
    ctl.apply_result(result(s2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), t0 + 81)
    assert ds.eni_of(X) is not None
    ds, ctl = boot(cp, imds, t0 + 300)  # a restart between: the entry is checkpointed
    ctl.apply_result(first, t0 + RECENT_S + 900)  # the first answer again, 15 min later
    assert ds.eni_of(X) is not None and ctl.stats.stale_releases == 1
    ctl.resync(t0 + RECENT_S + 901)
    assert ds.eni_of(X) is not None
