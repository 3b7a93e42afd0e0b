"""The agent's side of L1 (docs/safety.md): a ``seq-floor`` answer moves its seq above the
instance's ledger seq, and every seq up to it counts as another process's
(``PoolController._take_seq_floor``)."""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import SEQ_FLOOR_GAP_MS, SEQ_OFFSET_META, SEQ_TOP, SEQ_TOP_HEADROOM_MS, PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds, one, result
from warmpool.limits import known
from warmpool.pool import PoolConfig

POOL = PoolConfig(warm_ip=1)


def _floor(seq: int) -> dict[str, object]:
    return {"kind": "seq-floor", "floor": seq}


def _ctl(cp: MemoryCheckpoint, imds: FakeImds | None = None) -> tuple[Datastore, PoolController]:
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.restore()
    if not ds.enis():
        ds.add_eni(PRIMARY, 0.0)
    return ds, PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)


def test_a_seq_floor_above_the_agents_seq_numbers_its_next_reports_above_it_on_disk() -> None:
    cp = MemoryCheckpoint()
    _, ctl = _ctl(cp)
    first = one(ctl.tick(100.0))
    assert first.seq == 100_000
    ctl.apply_result(result(first.seq, _floor(700_000)), 100.5)
    assert ctl.stats.seq_floors_taken == 1
    above = 700_000 + SEQ_FLOOR_GAP_MS
    nxt = one(ctl.tick(101.5))  # reported again at once (the next pass after the interval)
    # the gap added to the clock's whole reading (review 16), so at its pace
    assert nxt.seq == above + 101_500, "above the floor's gap, at the clock's pace"
    _, again = _ctl(MemoryCheckpoint(cp.data))  # a restart numbers above it too, at that pace
    assert one(again.tick(110.0)).seq == above + 110_000


def test_a_seq_floor_the_agent_has_passed_changes_nothing() -> None:
    """A late or repeated answer, or one to a report of this agent delivered again behind its
    newer one (the ledger at this agent's own seq)."""
    _, ctl = _ctl(MemoryCheckpoint())
    first = one(ctl.tick(100.0))
    ctl.retry_soon()
    second = one(ctl.tick(102.0))
    ctl.apply_result(result(first.seq, _floor(second.seq)), 102.5)
    ctl.apply_result(result(first.seq, _floor(first.seq)), 102.5)
    assert ctl.last_seq == second.seq and ctl.stats.seq_floors_taken == 0
    ctl.retry_soon()
    assert one(ctl.tick(104.0)).seq == 104_000


def test_after_a_loss_a_hand_back_replying_to_the_previous_processs_seq_below_the_floor_is_not_taken() -> None:
    """The previous process's clock ran 10 min ahead; the checkpoint is lost. Its results (seqs
    up to the floor) are accepted once the floor is taken, as after any loss, but none is this
    process's: a hand-back of an address held as of unknown origin, replying to one, frees
    nothing (the previous process's offers are forgotten: a report of it may yet be answered
    with its unassign)."""
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    ds, ctl = _ctl(MemoryCheckpoint(), imds)
    ctl.start(100.0, checkpoint_lost=True)
    report = one(ctl.tick(100.0))
    assert report.seq < 700_000 and report.release and report.release[0].unknown
    ctl.apply_result(result(report.seq, _floor(700_000)), 101.0)
    back = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11"]}
    notes = ctl.apply_result(result(650_000, back), 102.0)
    assert not any("never sent" in n for n in notes), notes
    assert ds.assign("p1", "eth0", "ns", 102.0) is None, "the previous process's hand-back freed an address"
    nxt = one(ctl.tick(103.0))
    assert nxt.seq > 700_000 + SEQ_FLOOR_GAP_MS and nxt.release[0].ips == ["10.0.0.11"], "still offered, by this one"


def test_a_hand_back_replying_to_a_seq_below_the_floor_is_not_taken_for_an_address_this_agent_offered() -> None:
    """The node itself sent seqs up to the floor (a report this agent never sent: hostile, or a
    copy of its checkpoint running elsewhere): any of them may have offered what this agent
    offers, and be answered with its unassign. A hand-back replying to one is not taken, though
    it replies to a seq above this agent's own offer."""
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    ds, ctl = _ctl(MemoryCheckpoint(), imds)
    ctl.start(100.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"])
    assert ds.quarantine(PRIMARY.eni_id, ["10.0.0.12"], [], 100.0) == 1
    offer = one(ctl.tick(101.0))
    assert offer.release[0].ips == ["10.0.0.12"] and not offer.release[0].unknown
    ctl.apply_result(result(offer.seq, _floor(offer.seq + 50_000)), 102.0)
    back = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]}
    ctl.apply_result(result(offer.seq + 40_000, back), 103.0)
    assert ds.quarantined() == {PRIMARY.eni_id: (["10.0.0.12"], [])}, "taken back on a hand-back of another process"
    # this agent's own next offer, handed back, is taken as before
    mine = one(ctl.tick(104.0))
    assert mine.seq > offer.seq + 50_000 + SEQ_FLOOR_GAP_MS
    ctl.apply_result(result(mine.seq, back), 105.0)
    assert ds.quarantined() == {}


def test_after_a_restart_a_hand_back_replying_below_the_floor_is_not_taken_for_an_address_offered_before_it() -> None:
    """An address the process before this one quarantined (restored from the checkpoint, not yet
    offered by this process): a hand-back replying to a seq between the checkpoint's and the
    floor answers a report this agent never sent, which may have offered it (``_seq_at_start``)."""
    cp = MemoryCheckpoint()
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    ds, ctl = _ctl(cp, imds)
    ctl.start(100.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"])
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.12"], [], 100.0)
    offer = one(ctl.tick(101.0))
    ds.flush()
    ds, ctl = _ctl(MemoryCheckpoint(cp.data), imds)  # a restart, the checkpoint kept
    ctl.start(200.0)
    assert ctl.last_seq == offer.seq
    ctl.apply_result(result(offer.seq, _floor(offer.seq + 50_000)), 200.5)
    back = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]}
    ctl.apply_result(result(offer.seq + 40_000, back), 201.0)
    assert ds.quarantined() == {PRIMARY.eni_id: (["10.0.0.12"], [])}, "taken back on a hand-back of another process"


def test_after_a_loss_a_grant_replying_below_the_floor_is_no_grant_since_the_loss() -> None:
    """A claim replying to the previous process's report may be the hand-back of one of its
    forgotten offers: once IMDS lists the address it is held as of unknown origin, not added
    free (``_rebuilt_seq`` raised to the floor)."""
    imds = FakeImds()
    ds, ctl = _ctl(MemoryCheckpoint(), imds)
    ctl.start(100.0, checkpoint_lost=True)
    report = one(ctl.tick(100.0))
    ctl.apply_result(result(report.seq, _floor(700_000)), 101.0)
    claim = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.13"]}
    ctl.apply_result(result(650_000, claim), 102.0)  # IMDS does not list it yet: it waits
    imds.add(PRIMARY, ["10.0.0.13"])
    ctl.resync(103.0)
    assert ds.assign("p1", "eth0", "ns", 103.0) is None, "a claim of the previous process counted as a grant"


def test_a_claim_replying_below_the_floor_is_not_taken_on_ec2s_word_for_an_address_released_before() -> None:
    """An address released in answer to this agent's report, which a lagging IMDS still lists:
    a claim naming it again waits for IMDS to be seen without it, or is taken after its wait on
    EC2's word only if it is EC2's own assignment. One replying to a seq up to the floor answers
    a report of another process, which may have offered it: not EC2's own (``_offer_floor``)."""
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    ds, ctl = _ctl(MemoryCheckpoint(), imds)
    ctl.start(100.0)
    mine = one(ctl.tick(101.0))
    released = {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11"]}
    ctl.apply_result(result(mine.seq, released), 102.0)
    assert "10.0.0.11" not in {ip for e in ds.enis() for ip in e.ips}
    ctl.apply_result(result(mine.seq, _floor(700_000)), 103.0)
    ctl.apply_result(result(650_000, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11"]}), 104.0)
    for t in range(105, 200, 5):  # IMDS lists it all along (never seen without it): the wait ends
        ctl.tick(float(t))
    assert "10.0.0.11" not in {ip for e in ds.enis() for ip in e.ips}, "taken on a claim of another process"


def test_a_floor_leaving_too_little_below_the_seq_top_is_refused_and_changes_nothing() -> None:
    """Review 16: the agent stays stale (its seq, offset and checkpoint as they were)."""
    cp = MemoryCheckpoint()
    _, ctl = _ctl(cp)
    first = one(ctl.tick(100.0))
    ctl.apply_result(result(first.seq, _floor(SEQ_TOP - SEQ_TOP_HEADROOM_MS - SEQ_FLOOR_GAP_MS)), 100.5)
    assert ctl.stats.seq_floors_taken == 0 and ctl.stats.seq_floors_refused == 1
    assert ctl.last_seq == first.seq
    ctl.retry_soon()
    assert one(ctl.tick(101.5)).seq == 101_500


def test_a_checkpointed_seq_offset_past_what_a_report_may_carry_is_not_used() -> None:
    """An offset no floor this agent takes gives (written before the refusal above): the restart
    can still build reports."""
    cp = MemoryCheckpoint()
    ds, _ = _ctl(cp)
    ds.set_meta(SEQ_OFFSET_META, SEQ_TOP)
    ds.flush()
    _, again = _ctl(MemoryCheckpoint(cp.data))
    assert one(again.tick(110.0)).seq == 110_000
