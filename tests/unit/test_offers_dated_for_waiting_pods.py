"""While pods wait, offers of one report that the allocator would take apart (one too old to act
on, another young) are dated anew, together (``PoolController._date_for_waiting_pods``; the
simulation's seed 1121572).

The allocator counts what EC2 shows of an offer too old to act on as the node's free pool. Two
ENIs' offers renewed at their own release timeouts were never young together: the allocator
always saw one's addresses as free, handed nothing back, and the node's pending pod waited for
good (its ENIs full: no grant could help)."""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import OFFER_DATE_KEPT_S, PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds
from warmpool.limits import known

T0 = 1000.0
A = ["10.0.0.11", "10.0.0.12"]
B = ["10.0.0.21", "10.0.0.22"]


def _node() -> tuple[Datastore, PoolController]:
    imds = FakeImds()
    imds.add(PRIMARY, A)
    imds.add(SECOND, B)
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    assert ds.quarantine(PRIMARY.eni_id, A, [], T0 + 1) == 2
    ctl.tick(T0 + 1)
    assert ds.quarantine(SECOND.eni_id, B, [], T0 + 40) == 2  # the other ENI's offer, later
    ctl.tick(T0 + 40)
    return ds, ctl


def _ages(ctl: PoolController, now: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in ctl.tick(now):
        out.update({o.eni_id: r.sent_at - (o.quarantined_at or 0.0) for o in r.release})
    return out


def test_with_a_pod_waiting_every_offer_is_dated_anew_together_once_one_is_too_old() -> None:
    ds, ctl = _node()
    assert ds.assign("pod", "eth0", "ns", T0 + 50) is None, "setup: nothing free, the pod waits"
    sent = 0
    for t in range(51, 400):
        if t % 10 == 0:  # the kubelet retries the ADD
            assert ds.assign("pod", "eth0", "ns", T0 + t) is None
        got = _ages(ctl, T0 + t)
        if got and t > 62:  # the first offer was 60 s old at 61: both dated anew then, together
            sent += 1
            assert set(got) == {PRIMARY.eni_id, SECOND.eni_id}
            assert abs(got[PRIMARY.eni_id] - got[SECOND.eni_id]) < 1.0, (t, got)  # young, or old, together
    assert sent > 3
    assert ctl.stats.offers_dated_for_waiting_pods == 4, "once, both offers' addresses"


def test_with_no_pod_waiting_the_offers_keep_their_dates() -> None:
    _ds, ctl = _node()
    seen: dict[str, float] = {}
    for t in range(51, 110):
        seen.update(_ages(ctl, T0 + t))
    assert seen.get(PRIMARY.eni_id, 0.0) >= OFFER_DATE_KEPT_S, seen  # not renewed before its timeout
