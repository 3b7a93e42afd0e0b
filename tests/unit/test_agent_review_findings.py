"""Two-holder paths a hostile review of the merged agent found (issue 21, the review after
the fixes), each as the short sequence of world events that gave an address two holders:
the real :class:`PoolController`, :class:`Datastore` and :class:`SkipUnmanaged` in virtual
time, IMDS and Describe as fakes that lag as long as a seed says.

1. a released address is ignored in IMDS until IMDS was seen without it, however long it
   lags (before: a fixed 2 min), and across a restart (the checkpoint keeps it);
2. the take-back of quarantined addresses measures the release timeout on a monotonic
   clock (before: the wall clock, so a forward step re-pooled an address still offered);
3. an IMDS read that omits an ENI does not forget its pods (before: dropped, and the next
   read brought it back with every address free);
4. an ENI a lagging Describe does not list is unknown, not managed.
"""

from __future__ import annotations

from dataclasses import replace
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from emulated.clock import VirtualClock
from node_agent.agent import AwsClockCheck
from node_agent.checkpoint import CHECKSUM_KEY, MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.unmanaged import NO_MANAGE_TAG, SkipUnmanaged
from tests.helpers.agent_findings import POOL, X, boot, holders, listed, released_x
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, never_free, one, result
from warmpool.limits import known


def second_with(*ips: str) -> tuple[VirtualClock, FakeImds]:
    """A clock at 1000 s and an IMDS listing the primary ENI and SECOND with ``ips``."""
    imds = FakeImds()
    imds.add(SECOND, list(ips))
    return VirtualClock(1000.0), imds


# --- 4. an ENI a lagging Describe does not list ---------------------------------------------


class LaggingDescribe:
    """DescribeNetworkInterfaces by instance, showing only the ENIs in ``listed``."""

    def __init__(self, tags: dict[str, dict[str, str]]) -> None:
        self.tags = tags
        self.listed: set[str] = set()
        self.calls = 0

    def describe_network_interfaces(self, **kw: Any) -> dict[str, Any]:
        self.calls += 1
        return {
            "NetworkInterfaces": [
                {"NetworkInterfaceId": k, "TagSet": [{"Key": a, "Value": b} for a, b in v.items()]}
                for k, v in self.tags.items()
                if k in self.listed
            ]
        }


def test_an_eni_describe_does_not_list_yet_is_not_used_until_its_tags_are_read() -> None:
    # Before: ``SkipUnmanaged._lookup`` read an ENI missing from Describe as managed, so a
    # no_manage ENI (another controller's addresses) attached a moment ago was used for pods.
    clock, imds = second_with("10.0.0.21", "10.0.0.22")
    ec2 = LaggingDescribe({SECOND.eni_id: {NO_MANAGE_TAG: "true"}})
    ds, ctl = boot(MemoryCheckpoint(), SkipUnmanaged(imds, ec2, ID.instance_id, clock=clock), clock.now())
    assert ds.eni(SECOND.eni_id) is None, "an ENI whose tags are unknown is not taken"
    assert ds.assign("p1", "eth0", "ns", clock.now()) is None
    for _ in range(6):  # retried with a backoff, never read as managed meanwhile
        clock.advance(60)
        ctl.resync(clock.now())
        assert ds.eni(SECOND.eni_id) is None
    assert ec2.calls >= 3
    ec2.listed.add(SECOND.eni_id)  # Describe catches up: tagged no_manage
    clock.advance(130)
    ctl.resync(clock.now())
    assert ds.eni(SECOND.eni_id) is None
    assert ds.assign("p1", "eth0", "ns", clock.now()) is None


def test_an_eni_describe_lists_later_untagged_is_used_then() -> None:
    clock, imds = second_with("10.0.0.21")
    ec2 = LaggingDescribe({SECOND.eni_id: {}})
    ds, ctl = boot(MemoryCheckpoint(), SkipUnmanaged(imds, ec2, ID.instance_id, clock=clock), clock.now())
    assert ds.eni(SECOND.eni_id) is None
    ec2.listed.add(SECOND.eni_id)
    clock.advance(130)
    ctl.resync(clock.now())
    assert ds.eni(SECOND.eni_id) is not None
    assert ds.assign("p1", "eth0", "ns", clock.now()) is not None


# --- 1. a released address IMDS lists for minutes ---------------------------------------------
# (X, listed, offered_x and released_x: tests/helpers/agent_findings.py)


def test_a_released_address_imds_lists_for_minutes_is_never_taken_back() -> None:
    # Before: ``RecentResults.expire`` dropped the released entry after 2 min, and the next
    # resync, IMDS still lagging (no bound is documented), added .12 again as free: a pod
    # got an address EC2 had given to another node.
    imds = FakeImds()
    cp = MemoryCheckpoint()
    t0 = 1000.0
    ds, ctl = released_x(cp, imds, t0)
    for dt in range(120, 1200, 60):  # IMDS lags for 20 minutes; a restart in the middle
        t = t0 + dt
        if dt == 600:
            ds, ctl = boot(cp, imds, t)
        ctl.resync(t)
        ctl.tick(t)
        assert never_free(ds, ctl, X), (
            dt
        )  # (released, listed again: held as an offer of unknown origin, never the pool's)
        for i in range(2):
            ds.assign(f"pod-{dt}-{i}", "eth0", "ns", t)
        assert X not in holders(ds), dt
        for p in ds.pods():
            ds.release(p.container_id, p.ifname, t)
    # IMDS catches up (seen without it), then lists it again: without a grant that is no
    # evidence (IMDS may answer from before the release, docs/safety.md row 6; before, the
    # entry expired once seen absent and its time was up, and resync took .12 back free).
    listed(imds, "10.0.0.11")
    t = t0 + 1300
    ctl.resync(t)
    listed(imds, "10.0.0.11", X)
    ctl.resync(t + 200)
    assert never_free(ds, ctl, X)  # (released, listed again: held as an offer of unknown origin, never the pool's)
    # EC2 assigns it to us again: taken, and kept. (Offered of unknown origin, a grant of it
    # in reply to a report offering it is a hand-back, refused; the allocator unassigns it and
    # grants again, here X itself, in one answer: EC2's own assignment, taken after its wait.)
    assert ds.assign("pod-late", "eth0", "ns", t + 201) is not None
    r = one(ctl.tick(t + 202))
    assert r.release and r.release[0].unknown and X in r.release[0].ips
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), t + 203)
    assert never_free(ds, ctl, X), "a hand-back of an offer of unknown origin"
    again = (
        {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]},
        {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]},
    )
    ctl.apply_result(result(r.seq, *again), t + 203)
    ctl.tick(t + 203 + 61)
    ctl.resync(t + 204 + 61)
    assert ds.eni_of(X) is not None and not ds.quarantined()


def test_seen_absent_survives_a_restart_and_an_old_checkpoint_restores_as_not_seen() -> None:
    imds = FakeImds()
    cp = MemoryCheckpoint()
    t0 = 1000.0
    ds, ctl = released_x(cp, imds, t0)
    listed(imds, "10.0.0.11")
    ctl.resync(t0 + 70)
    assert ds.seen_absent(X)
    assert cp.data is not None and cp.data["recent"]["released_absent"] == [X]
    ds2, _ = boot(MemoryCheckpoint(cp.data), imds, t0 + 80)
    assert ds2.seen_absent(X), "the checkpoint keeps what IMDS was seen without"
    # an older agent's checkpoint (no ``released_absent``): restored as not yet seen absent,
    # so the address stays ignored until the next read without it
    old = {**cp.data, "recent": {k: v for k, v in cp.data["recent"].items() if k != "released_absent"}}
    del old[CHECKSUM_KEY]  # nor a checksum
    listed(imds, "10.0.0.11", X)  # still lagging at this restart
    ds3, ctl3 = boot(MemoryCheckpoint(old), imds, t0 + 400)
    assert not ds3.seen_absent(X) and never_free(
        ds3, ctl3, X
    )  # (released, listed again: held as an offer of unknown origin, never the pool's)
    ctl3.resync(t0 + 1000)
    assert never_free(ds3, ctl3, X), "never seen absent since: still ignored"


# --- 2. the take-back on a stepped wall clock -------------------------------------------------


def test_a_wall_clock_stepped_forward_does_not_shorten_the_release_timeout() -> None:
    # Before: the take-back compared the wall clock with the wall-clock quarantine time, so a
    # +200 s step (NTP, an operator) re-pooled an address the allocator could still unassign.
    clock = VirtualClock(1000.0)
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds, ctl = boot(MemoryCheckpoint(), imds, clock.now(), monotonic=clock.monotonic)
    ctl.tick(clock.now())
    clock.advance(1)
    ctl.tick(clock.now())
    clock.advance(60)
    r = one(ctl.tick(clock.now()))
    assert r.release[0].ips == [X]
    clock.advance(5)
    clock.step(+200)  # wall clock only: 205 s "later"
    ctl.tick(clock.now())
    ds.assign("p1", "eth0", "ns", clock.now())
    got = ds.assign("p2", "eth0", "ns", clock.now())
    assert got is None, "the offered address went back to a pod 5 s after its offer"
    assert X in {ip for ips, _ in ds.quarantined().values() for ip in ips}
    assert ctl.stats.offers_renewed == 0
    clock.advance(TIMING.release_timeout_s - 10)  # 5 s before the timeout, on the steady clock
    ctl.tick(clock.now())
    assert ctl.stats.offers_renewed == 0
    clock.advance(10)  # the real timeout, measured on the steady clock: offered again, dated now
    r = one(ctl.tick(clock.now()))
    assert ctl.stats.offers_renewed == 1 and r.release[0].quarantined_at == pytest.approx(clock.now())
    assert ds.assign("p2", "eth0", "ns", clock.now()) is None, "taken back on IMDS's word (step 6)"


def test_after_a_restart_the_release_timeout_runs_again_from_the_start() -> None:
    # The steady clock does not survive a restart (a reboot resets it); the checkpoint's
    # quarantine time is the wall clock's. So a new process counts the whole timeout again
    # from its own start: later, never sooner.
    clock = VirtualClock(1000.0)
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    cp = MemoryCheckpoint()
    ds, ctl = boot(cp, imds, clock.now(), monotonic=clock.monotonic)
    ctl.tick(clock.now())
    clock.advance(1)
    ctl.tick(clock.now())
    clock.advance(60)
    one(ctl.tick(clock.now()))
    clock.advance(10)
    clock.step(+300)  # the node reboots with its clock far ahead
    ds, ctl = boot(cp, imds, clock.now(), monotonic=clock.monotonic)
    ctl.tick(clock.now())
    ds.assign("p1", "eth0", "ns", clock.now())
    assert ds.assign("p2", "eth0", "ns", clock.now()) is None
    clock.advance(TIMING.release_timeout_s - 1)
    ctl.tick(clock.now())
    assert ds.assign("p2", "eth0", "ns", clock.now()) is None
    assert ctl.stats.offers_renewed == 0
    clock.advance(2)
    ctl.tick(clock.now())
    # the timeout, counted in full from the restart: offered again (the allocator decides)
    assert ctl.stats.offers_renewed == 1
    assert ds.assign("p2", "eth0", "ns", clock.now()) is None


def test_addresses_held_after_a_checkpoint_loss_outlast_a_clock_step_soon_after() -> None:
    # Seed 478 of ``warmpool sim``: the agent starts from a damaged checkpoint and holds its
    # free addresses as offered; 13 s later its clock steps 236 s ahead, while a report of
    # before the step, its offer young enough, waits in SQS. The simulation's agent had no
    # monotonic clock and took them back 14 s after the start; on the monotonic clock the
    # release timeout runs in full, and the reports after the step date the offer earlier.
    clock = VirtualClock(1000.0)
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    check = AwsClockCheck(clock, clock.monotonic)
    check.observe({"ResponseMetadata": {"HTTPHeaders": {"date": formatdate(clock.now(), usegmt=True)}}}, clock.now())
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(
        ID, known("m5.large"), POOL, ds, TIMING, metadata=imds, monotonic=clock.monotonic, clock_ahead=check.offset
    )
    ctl.start(clock.now(), checkpoint_lost=True)
    r = one(ctl.tick(clock.now()))
    assert sorted(r.release[0].ips) == ["10.0.0.11", X]
    offered_at = r.release[0].quarantined_at
    assert offered_at is not None
    clock.advance(13)
    clock.step(+236.3)
    clock.advance(1)
    ctl.retry_soon()
    r = one(ctl.tick(clock.now()))
    dates = [o.quarantined_at for o in r.release]
    assert dates and all(d is not None and d <= offered_at for d in dates), "an offer dated younger than it is"
    assert ds.assign("p1", "eth0", "ns", clock.now()) is None, "an offered address back 14 s after the offer"
    clock.advance(TIMING.release_timeout_s - 16)  # 1 s before the timeout, on the monotonic clock
    ctl.tick(clock.now())
    assert ds.assign("p1", "eth0", "ns", clock.now()) is None
    assert ctl.stats.offers_renewed == 0
    clock.advance(2)
    ctl.tick(clock.now())
    assert ctl.stats.offers_renewed == 2  # both held addresses offered again at the timeout
    assert ds.assign("p1", "eth0", "ns", clock.now()) is None


def test_after_the_clock_steps_back_no_report_dates_an_offer_younger_than_it_is() -> None:
    # Found reading seed 478 (its clock-skew kind steps a running agent's clock): an offer is
    # dated min(quarantined, now) less the clock's offset, so after a step back of more than
    # the offer's age each report dated it ``now``, 0 s old to the allocator, until the agent's
    # release timeout (on the monotonic clock) took it back while the last report's offer was
    # still actionable for 60 s. The date is capped by the monotonic age too.
    aws = VirtualClock(1000.0)
    node = VirtualClock(1000.0)
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    check = AwsClockCheck(node, node.monotonic)

    def observe() -> None:
        check.observe({"ResponseMetadata": {"HTTPHeaders": {"date": formatdate(aws.now(), usegmt=True)}}}, node.now())

    observe()
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(
        ID, known("m5.large"), POOL, ds, TIMING, metadata=imds, monotonic=node.monotonic, clock_ahead=check.offset
    )
    ctl.start(node.now(), checkpoint_lost=True)
    r = one(ctl.tick(node.now()))
    quarantined_aws = aws.now()  # the offer is this old, in AWS's time, from here on
    offered_steady = node.monotonic()
    assert r.release and r.release[0].quarantined_at is not None
    node.step(-250.0)
    youngest = float("inf")
    renewed_at: float | None = None
    for _ in range(int(TIMING.release_timeout_s // 10) + 2):
        aws.advance(10)
        node.advance(10)
        observe()  # the agent's AWS calls keep its view of the offset fresh
        ctl.retry_soon()
        before = ctl.stats.offers_renewed
        for rep in ctl.tick(node.now()):
            if ctl.stats.offers_renewed > before:  # offered again at the timeout: a new offer
                quarantined_aws = aws.now()
                renewed_at = node.monotonic()
            for o in rep.release:
                assert o.quarantined_at is not None
                youngest = min(youngest, aws.now() - o.quarantined_at)
                real = aws.now() - quarantined_aws
                assert aws.now() - o.quarantined_at >= real - 1.0, (real, aws.now() - o.quarantined_at)
    assert youngest < float("inf")  # reports with the offer went out after the step
    # the timeout ran on the monotonic clock (the wall clock stepped back 250 s): offered again
    assert renewed_at is not None and renewed_at - offered_steady >= TIMING.release_timeout_s
    assert ds.assign("p1", "eth0", "ns", node.now()) is None


def test_after_the_clock_steps_back_the_heartbeat_and_retries_keep_their_pace() -> None:
    # The report's heartbeat, back-off and the allocator's retry-after are timed on the
    # monotonic clock: before, a step back of 250 s held every report but forced ones for
    # 250 s plus the heartbeat.
    clock = VirtualClock(1000.0)
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds, monotonic=clock.monotonic)
    ctl.start(clock.now())
    assert ctl.tick(clock.now())
    clock.step(-250.0)
    sent_at: list[float] = []
    for _ in range(int(2 * TIMING.heartbeat_s) + 1):
        clock.advance(1)
        if ctl.tick(clock.now()):
            sent_at.append(clock.monotonic())
    assert sent_at and sent_at[0] - 1000.0 <= TIMING.heartbeat_s + 1, sent_at


# --- 3. one IMDS read that omits an ENI ----------------------------------------------------------


def test_an_imds_read_that_omits_an_eni_keeps_its_pods_and_hands_nothing_out_from_it() -> None:
    # Before: ``Datastore.reconcile`` forgot an ENI missing from one read together with its
    # pods (``remove_eni(force=True)``); the next read brought it back with every address
    # free, and a new pod got an address a running pod held.
    imds = FakeImds()
    imds.add(SECOND, ["10.0.0.21", "10.0.0.22"])
    cp = MemoryCheckpoint()
    ds, ctl = boot(cp, imds, 0.0)
    a = ds.assign("pod-a", "eth0", "ns", 1.0)
    assert a is not None and a.eni_id == SECOND.eni_id
    whole = imds.enis.pop(SECOND.eni_id)  # one read omits it (torn, or lagging)
    ctl.resync(60.0)
    assert ds.lookup("pod-a", "eth0") == a, "the pod keeps its address"
    assert ds.unseen() == [SECOND.eni_id]
    assert ds.assign("pod-b", "eth0", "ns", 61.0) is None, "nothing new from an ENI not seen"
    for r in ctl.tick(62.0):
        assert all(o.eni_id != SECOND.eni_id for o in r.release)
    ds2, _ = boot(MemoryCheckpoint(cp.data), imds, 63.0)  # a restart meanwhile: the same
    assert ds2.lookup("pod-a", "eth0") == a and ds2.assign("pod-b", "eth0", "ns", 64.0) is None
    imds.enis[SECOND.eni_id] = whole  # the next read lists it again
    ctl.resync(120.0)
    assert ds.unseen() == []
    b = ds.assign("pod-b", "eth0", "ns", 121.0)
    assert b is not None and b.ip != a.ip
    assert all(len(h) == 1 for h in holders(ds).values())


def test_an_unseen_eni_goes_once_its_pods_are_gone_not_when_another_is_shown_in_its_slot() -> None:
    imds = FakeImds()
    imds.add(SECOND, ["10.0.0.21"])
    ds, ctl = boot(MemoryCheckpoint(), imds, 0.0)
    assert ds.assign("pod-a", "eth0", "ns", 1.0) is not None
    del imds.enis[SECOND.eni_id]
    ctl.resync(60.0)
    assert ds.eni(SECOND.eni_id) is not None
    ds.release("pod-a", "eth0", 61.0)
    ctl.resync(120.0)
    assert ds.eni(SECOND.eni_id) is None, "no pod left: forgotten"
    # pods on it, and IMDS shows another ENI in its slot: EC2 never has two, but a read may answer
    # from an older state (an ENI deleted earlier in that slot: review 10, D1), so the pods' ENI is
    # kept, held, and the other not taken until its pods are gone (before: removed at once)
    imds.add(SECOND, ["10.0.0.21"])
    ctl.resync(180.0)
    assert ds.assign("pod-c", "eth0", "ns", 181.0) is not None
    del imds.enis[SECOND.eni_id]
    other = replace(SECOND, eni_id="eni-00000009", mac="0a:00:00:00:00:09", primary_ip="10.0.0.29")
    imds.add(other, ["10.0.0.31"])
    ctl.resync(240.0)
    assert ds.eni(SECOND.eni_id) is not None and ds.eni(other.eni_id) is None
    assert ds.lookup("pod-c", "eth0") is not None
    ds.release("pod-c", "eth0", 241.0)
    ctl.resync(300.0)
    assert ds.eni(SECOND.eni_id) is None and ds.eni(other.eni_id) is not None


# --- 6. a whole ENI offered, its result lost, its detach slow -----------------------------------


def test_a_whole_eni_offer_with_no_answer_is_offered_again_never_taken_back() -> None:
    # The allocator deletes the offered ENI (Detach, then Delete once detached) and its
    # ``deleted`` result is lost; the detach takes minutes, and IMDS lists the ENI and its
    # addresses all along. Before: the take-back after the release timeout found them listed
    # and put them back in the pool; a pod got one, then EC2 deleted the ENI and gave the
    # address to another node.
    clock, imds = second_with("10.0.0.21", "10.0.0.22")
    ds, ctl = boot(MemoryCheckpoint(), imds, clock.now(), monotonic=clock.monotonic)
    ds.quarantine(SECOND.eni_id, ["10.0.0.21", "10.0.0.22"], [], clock.now())
    ctl.retry_soon()
    first = one(ctl.tick(clock.now()))
    assert [o.eni_id for o in first.release] == [SECOND.eni_id]
    reports = []
    for _ in range(3 * int(TIMING.release_timeout_s) // 10):  # 3 release timeouts, no answer
        clock.advance(10)
        reports += ctl.tick(clock.now())
        assert ds.assign("p", "eth0", "ns", clock.now()) is None, "an address of an ENI maybe deleted"
    assert ctl.stats.whole_eni_offers_renewed >= 2
    renewed = [o for r in reports for o in r.release if o.eni_id == SECOND.eni_id]
    assert renewed and max(o.quarantined_at or 0 for o in renewed) > (first.release[0].quarantined_at or 0)
    # the answer to a renewed offer: the allocator's book says the ENI is deleted
    last = reports[-1]
    ctl.apply_result(result(last.seq, {"kind": "deleted", "eni_id": SECOND.eni_id}), clock.now())
    assert ds.eni(SECOND.eni_id) is None
    assert ds.assign("p", "eth0", "ns", clock.now()) is None


def test_a_whole_eni_offer_is_handed_back_on_the_allocators_word() -> None:
    clock, imds = second_with("10.0.0.21")
    ds, ctl = boot(MemoryCheckpoint(), imds, clock.now(), monotonic=clock.monotonic)
    ds.quarantine(SECOND.eni_id, ["10.0.0.21"], [], clock.now())
    ctl.retry_soon()
    one(ctl.tick(clock.now()))
    clock.advance(TIMING.release_timeout_s + 1)
    ctl.tick(clock.now())
    assert ds.assign("p", "eth0", "ns", clock.now()) is None
    ctl.retry_soon()
    r = one(ctl.tick(clock.now()))  # pods wait: the allocator hands the renewed offer back
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": SECOND.eni_id, "ips": ["10.0.0.21"]}), clock.now())
    assert ds.assign("p", "eth0", "ns", clock.now()) is not None


# --- 1 (its cost): released, assigned again, IMDS never showing the gap ----------------------


def test_ec2s_own_reassignment_is_taken_after_its_wait_even_if_imds_never_showed_the_gap() -> None:
    # With no time limit on the released filter, an address EC2 gave back to the node while
    # IMDS lagged (never seen without it) was never used again, while the allocator counted
    # it as the node's (tests/reliability: pods stuck). A grant is EC2's word: taken once it
    # waited its full time for the gap, IMDS listing it.
    imds = FakeImds()
    ds, ctl = released_x(MemoryCheckpoint(), imds, 0.0)  # IMDS goes on listing .12 throughout
    assert ds.assign("p1", "eth0", "ns", 63.0) is not None  # .11
    r2 = one(ctl.tick(64.0))  # short: pods wait; r2 offers nothing
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 65.0)
    for t in (70.0, 100.0, 125.0):
        ctl.tick(t)
        assert ds.assign("p2", "eth0", "ns", t) is None, "waits for IMDS to show the gap"
    ctl.tick(126.0)  # the claim's 60 s are over: taken on EC2's word
    assert ds.assign("p2", "eth0", "ns", 127.0) == (X, PRIMARY.eni_id)


def x_offered() -> tuple[Datastore, PoolController, Any]:
    """.11 and .12 attached and listed by IMDS throughout; .12 surplus, offered in the report returned."""
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds, ctl = boot(MemoryCheckpoint(), imds, 0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    return ds, ctl, one(ctl.tick(61.0))


def test_a_hand_back_of_a_released_address_is_never_taken_on_its_word() -> None:
    # The same, but the `assigned` replies to a report that still offered .12 (its release
    # applied after that report was sent): the allocator may have planned it from a Describe
    # older than the unassignment. It stays out.
    ds, ctl, r1 = x_offered()
    ctl.retry_soon()
    r2 = one(ctl.tick(62.0))
    assert r2.release[0].ips == [X]
    ctl.apply_result(result(r1.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), 63.0)
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 64.0)
    assert ds.assign("p1", "eth0", "ns", 64.0) is not None  # .11
    for t in range(70, 400, 10):
        ctl.tick(float(t))
        assert ds.assign("p2", "eth0", "ns", float(t)) is None, t


def test_an_address_released_and_assigned_again_in_one_result_is_taken_after_its_wait() -> None:
    # One invocation unassigns the offered .12, then an Assign gets it back (EC2 hands out the
    # lowest free address): ``released`` then ``assigned`` in one result, replying to the
    # report that offered it. IMDS never shows the gap. EC2's word, not a hand-back (the
    # release book refuses to hand back what it booked): taken after the claim's wait.
    ds, ctl, r1 = x_offered()
    assert ds.assign("p1", "eth0", "ns", 61.5) is not None  # .11
    both = result(
        r1.seq,
        {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]},
        {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]},
    )
    ctl.apply_result(both, 62.0)
    assert ds.assign("p2", "eth0", "ns", 63.0) is None
    ctl.tick(100.0)
    assert ds.assign("p2", "eth0", "ns", 100.0) is None
    ctl.tick(123.0)
    assert ds.assign("p2", "eth0", "ns", 123.0) == (X, PRIMARY.eni_id)


def test_a_resync_during_the_wait_of_a_grant_leaves_the_address_to_the_grant() -> None:
    # Seed 5365 (a fragmented subnet, few free addresses): the same, with a resync before the
    # claim's wait ends. IMDS lists .12, released: held as offered, of unknown origin, it was
    # unassigned and granted afresh, EC2 gave .12 again, the next resync came before that
    # grant's wait ended, and so on for ever, .12 never used (``address-leaked``). The grant
    # waiting for it is the grant that names it again: the resync leaves it out (neither free
    # nor offered), and the grant's wait takes it on EC2's word.
    ds, ctl, r1 = x_offered()
    assert ds.assign("p1", "eth0", "ns", 61.5) is not None  # .11
    both = result(
        r1.seq,
        {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]},
        {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]},
    )
    ctl.apply_result(both, 62.0)
    ctl.resync(100.0)
    assert X not in ds.quarantined().get(PRIMARY.eni_id, ([], []))[0], "not offered again"
    assert ds.assign("p2", "eth0", "ns", 100.0) is None, "nor free on IMDS's word"
    for r in ctl.tick(101.0):
        assert all(X not in o.ips for o in r.release)
    ctl.tick(123.0)
    assert ds.assign("p2", "eth0", "ns", 123.0) == (X, PRIMARY.eni_id)


def test_a_resync_holds_a_released_address_as_offered_when_no_grant_waits_for_it() -> None:
    # What the rule above does not change: released, no grant naming it, listed by IMDS: held as
    # offered, of unknown origin (docs/safety.md, row 6).
    ds, ctl, r1 = x_offered()
    assert ds.assign("p1", "eth0", "ns", 61.5) is not None  # .11
    ctl.apply_result(result(r1.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), 62.0)
    ctl.resync(100.0)
    assert X in ds.quarantined()[PRIMARY.eni_id][0]
    assert ds.assign("p2", "eth0", "ns", 100.0) is None


def test_a_parked_grant_keeps_its_word_across_a_restart_and_an_old_entry_waits() -> None:
    # The claim's grant status is known only when it comes (which reports offered what is in
    # memory): it is checkpointed with the parked claim (``grants``; sim seed 40 lost it at a
    # restart and the address was never used again). An entry without it, an older agent's,
    # waits for IMDS's evidence.
    imds = FakeImds()
    cp = MemoryCheckpoint()
    ds, ctl = released_x(cp, imds, 0.0)
    assert ds.assign("p1", "eth0", "ns", 63.0) is not None
    r2 = one(ctl.tick(64.0))
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 65.0)
    assert cp.data is not None and cp.data["parked"][0]["grants"] == [X]
    old = {**cp.data, "parked": [{k: v for k, v in e.items() if k != "grants"} for e in cp.data["parked"]]}
    del old[CHECKSUM_KEY]  # nor a checksum
    ds, ctl = boot(cp, imds, 100.0)  # restarted while the claim waits
    ctl.tick(126.0)
    assert ds.lookup("p1", "eth0") is not None and ds.assign("p2", "eth0", "ns", 127.0) == (X, PRIMARY.eni_id)
    ds, ctl = boot(MemoryCheckpoint(old), imds, 100.0)
    ctl.tick(126.0)
    assert ds.assign("p2", "eth0", "ns", 127.0) is None


@pytest.mark.parametrize("boot", [None, "boot-1"], ids=["boot unknown: in full", "same boot: resumed"])
def test_a_restart_inside_the_rebuild_window_after_a_forward_step_keeps_the_window(boot: str | None) -> None:
    # A hostile review's finding: the window after a checkpoint loss was resumed at a restart
    # from the wall-clock ``rebuilt_at`` in the checkpoint, so a step ahead before the restart
    # ended it at once, and an address IMDS showed late came in free while a report of the
    # process before the loss could still offer it. A window no process saw end opens in full,
    # or, within the boot that opened it, lasts until both clocks say it is over.
    clock = VirtualClock(1000.0)
    imds = FakeImds()
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11"], [])  # IMDS lags: X not yet
    cp = MemoryCheckpoint()
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ctl = PoolController(
        ID, known("m5.large"), POOL, ds, TIMING, metadata=imds, monotonic=clock.monotonic, boot_id=boot
    )
    ctl.start(clock.now(), checkpoint_lost=True)  # the checkpoint was lost: the window opens
    ctl.tick(clock.now())
    clock.advance(10)
    clock.step(+TIMING.release_timeout_s)  # the wall clock steps ahead (NTP), 10 s into the window
    # the agent is restarted (killed, OOM): its checkpoint is whole this time
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ds.restore()
    ctl = PoolController(
        ID, known("m5.large"), POOL, ds, TIMING, metadata=imds, monotonic=clock.monotonic, boot_id=boot
    )
    ctl.start(clock.now())
    ctl.tick(clock.now())
    assert ds.quarantined()[PRIMARY.eni_id][0] == ["10.0.0.11"]
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11", X], [])  # IMDS catches up
    clock.advance(1)
    ctl.resync(clock.now())
    got = ds.assign("p1", "eth0", "ns", clock.now())  # 10.0.0.11 is held as offered
    # 11 s after the loss on the monotonic clock: X may sit in an offer of the lost process
    assert got is None, f"{got} handed to a pod 11 s into the window after a checkpoint loss"


def _restarted(
    cp: MemoryCheckpoint, clock: VirtualClock, imds: FakeImds, boot: str | None, *, lost: bool
) -> PoolController:
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    if not lost:
        ds.restore()
    ctl = PoolController(
        ID, known("m5.large"), POOL, ds, TIMING, metadata=imds, monotonic=clock.monotonic, boot_id=boot
    )
    ctl.start(clock.now(), checkpoint_lost=lost)
    return ctl


def test_a_restart_loop_of_one_boot_ends_the_window_on_time() -> None:
    # A second hostile review's finding (and seed 109's not-settled): with the window opened
    # in full at every start, an agent restarted more often than the release timeout (a
    # CrashLoopBackOff at node bring-up) held it open for ever, and addresses learnt meanwhile
    # stayed held. Within one boot the monotonic clock is one clock: the window is resumed.
    clock = VirtualClock(1000.0)
    imds, cp = FakeImds(), MemoryCheckpoint()
    ctl = _restarted(cp, clock, imds, "boot-1", lost=True)
    for _ in range(int(TIMING.release_timeout_s // 100) + 2):
        ctl.tick(clock.now())
        clock.advance(100)
        ctl = _restarted(cp, clock, imds, "boot-1", lost=False)
        assert ctl._in_rebuild_window(clock.now()) == (clock.monotonic() - 1000.0 < TIMING.release_timeout_s)
    assert not ctl._in_rebuild_window(clock.now())


def test_a_restart_on_another_boot_opens_the_window_in_full() -> None:
    # Another boot's monotonic reading says nothing of this one's: the window opens in full.
    clock = VirtualClock(1000.0)
    imds, cp = FakeImds(), MemoryCheckpoint()
    ctl = _restarted(cp, clock, imds, "boot-1", lost=True)
    ctl.tick(clock.now())
    clock.advance(TIMING.release_timeout_s - 10)
    ctl = _restarted(cp, clock, imds, "boot-2", lost=False)
    clock.advance(20)  # past the first window's end on either clock
    assert ctl._in_rebuild_window(clock.now())
    clock.advance(TIMING.release_timeout_s)
    assert not ctl._in_rebuild_window(clock.now())


def test_the_boot_id_is_read_from_the_kernel_and_none_when_it_cannot_be(tmp_path: Path) -> None:
    from node_agent.agent import BOOT_ID_FILE, boot_id

    f = tmp_path / "boot_id"
    f.write_text("4b1c2f3e-0000-4000-8000-000000000001\n")
    assert boot_id(str(f)) == "4b1c2f3e-0000-4000-8000-000000000001"
    assert boot_id(str(tmp_path / "missing")) is None
    (tmp_path / "empty").write_text("")
    assert boot_id(str(tmp_path / "empty")) is None
    assert BOOT_ID_FILE == "/proc/sys/kernel/random/boot_id"
