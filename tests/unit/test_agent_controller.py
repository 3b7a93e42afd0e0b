"""The pool controller in virtual time: when it reports, what it quarantines,
how it applies (and verifies) results."""

from __future__ import annotations

from collections.abc import Collection

from node_agent.controller import AttachedEni, PoolController
from node_agent.records import EniInfo
from tests.helpers.controller import (
    ID,
    PRIMARY,
    SECOND,
    TIMING,
    FakeImds,
    RecordingHost,
    attached_second,
    make,
    one,
    result,
)
from warmpool.limits import known
from warmpool.messages import AllocationResult
from warmpool.pool import PoolConfig


def test_first_tick_reports_and_heartbeat_follows() -> None:
    _, ctl = make(PoolConfig(warm_ip=2), ["10.0.0.11", "10.0.0.12"])
    r = one(ctl.tick(0.0))
    assert r.enis[0].ips == ["10.0.0.11", "10.0.0.12"] and r.targets.warm_ip == 2
    assert ctl.tick(30.0) == []
    assert one(ctl.tick(60.0)).seq > r.seq


def test_seq_increases_and_survives_restart() -> None:
    ds, ctl = make(PoolConfig(warm_ip=2))
    a = one(ctl.tick(0.0)).seq
    b = one(ctl.tick(100.0)).seq
    assert b > a
    again = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=2), ds, TIMING)
    assert one(again.tick(0.0)).seq > b  # even with the clock behind


def test_unmet_add_reports_at_once_as_pending_demand() -> None:
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11"])
    ctl.tick(0.0)
    assert ds.assign("c1", "eth0", "ns", 0.2) is not None
    assert ds.assign("c2", "eth0", "ns", 0.3) is None
    r = one(ctl.tick(0.3))
    assert r.pending_demand == 1 and r.assigned_ips == 1


def test_short_pool_retries_with_backoff_and_deferred_is_honoured() -> None:
    _, ctl = make(PoolConfig(warm_ip=3))
    first = one(ctl.tick(0.0))
    assert ctl.tick(4.0) == []
    assert one(ctl.tick(5.0))  # retry
    assert ctl.tick(14.0) == []  # backoff 10 s
    r = one(ctl.tick(15.0))
    ctl.apply_result(result(r.seq, {"kind": "deferred", "retry_after_s": 30, "reason": "tokens"}), 15.0)
    assert ctl.tick(40.0) == []
    assert one(ctl.tick(45.1)).seq > first.seq


def test_assigned_result_is_verified_against_imds() -> None:
    imds = FakeImds()
    ds, ctl = make(PoolConfig(warm_ip=2), imds=imds)
    r = one(ctl.tick(0.0))
    imds.add(PRIMARY, ["10.0.0.11"])
    res = result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11", "10.0.0.12"]})
    ctl.apply_result(res, 1.0)
    assert ds.counts(1.0).total == 1  # .12 not visible yet
    imds.add(PRIMARY, ["10.0.0.12"])
    ctl.tick(2.0)
    assert ds.counts(2.0).total == 2


def test_claims_never_seen_in_imds_are_dropped() -> None:
    imds = FakeImds()
    ds, ctl = make(PoolConfig(warm_ip=2), imds=imds)
    r = one(ctl.tick(0.0))
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.99"]}), 1.0)
    ctl.tick(100.0)
    assert ds.counts(100.0).total == 0 and ctl.stats.verify_dropped == 1


def test_foreign_or_future_results_are_ignored() -> None:
    ds, ctl = make(PoolConfig(warm_ip=2))
    r = one(ctl.tick(0.0))
    bad = result(r.seq + 1, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11"]})
    assert "never sent" in ctl.apply_result(bad, 1.0)[0]
    other = AllocationResult.model_validate({**result(r.seq).model_dump(by_alias=True), "node": "node-2"})
    assert "not ours" in ctl.apply_result(other, 1.0)[0]
    assert ds.counts(1.0).total == 0


def test_attached_eni_is_set_up_on_the_host_and_retried_until_the_link_shows() -> None:
    imds, host = FakeImds(), RecordingHost()
    ds, ctl = make(PoolConfig(warm_ip=2), imds=imds, host=host)
    r = one(ctl.tick(0.0))
    imds.add(SECOND, ["10.0.0.21", "10.0.0.22"])
    host.missing.add(SECOND.mac)
    ctl.apply_result(result(r.seq, attached_second(["10.0.0.21", "10.0.0.22"])), 1.0)
    assert ds.counts(1.0).total == 2
    assert ds.assign("c1", "eth0", "ns", 1.0) is None  # link not there yet
    host.missing.clear()
    ctl.tick(2.0)
    assert host.calls == [("setup", SECOND.eni_id)]
    assert ds.assign("c1", "eth0", "ns", 2.0) == ("10.0.0.21", SECOND.eni_id)


def test_surplus_is_quarantined_after_the_delay_offered_and_released() -> None:
    ips = [f"10.0.0.{i}" for i in range(11, 16)]
    ds, ctl = make(PoolConfig(warm_ip=2), ips)
    ctl.tick(0.0)
    assert ctl.tick(30.0) == []  # surplus seen, delay running
    r = one(ctl.tick(90.0))
    assert sum(len(o.ips) for o in r.release) == 3
    offered = r.release[0].ips
    assert not set(offered) & set(r.enis[0].ips)
    assert ds.counts(90.0).total == 2
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": offered}), 91.0)
    c = ds.counts(91.0)
    assert (c.total, c.quarantined) == (2, 0)
    assert ctl.delta(91.0).high is False


def test_surplus_that_disappears_within_the_delay_is_kept() -> None:
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11", "10.0.0.12"])
    ctl.tick(0.0)
    ctl.tick(10.0)
    ds.assign("c1", "eth0", "ns", 20.0)
    ctl.tick(30.0)
    ds.release("c1", "eth0", 40.0)
    ctl.tick(75.0)  # surplus again (cooldown counts as available), clock restarts
    assert ds.counts(75.0).quarantined == 0
    ctl.tick(136.0)
    assert ds.counts(136.0).quarantined == 1


def test_unconfirmed_release_returns_to_the_pool() -> None:
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11", "10.0.0.12"])
    ctl.tick(0.0)
    ctl.tick(1.0)
    r = one(ctl.tick(61.0))
    assert r.release
    one_more = ctl.tick(182.0)
    assert ds.counts(182.0).quarantined == 0
    assert one_more and not one_more[0].release


def test_warm_eni_mode_offers_whole_idle_enis_never_the_primary() -> None:
    ds, ctl = make(PoolConfig(warm_eni=1), [f"10.0.0.{i}" for i in range(11, 20)])
    ds.add_eni(SECOND, 0.0)
    ds.add_addresses(SECOND.eni_id, [f"10.0.0.{i}" for i in range(21, 30)])
    third = EniInfo("eni-00000002", 2, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")
    ds.add_eni(third, 0.0)
    ds.add_addresses(third.eni_id, [f"10.0.0.{i}" for i in range(31, 40)])
    ctl.tick(0.0)
    ctl.tick(60.0)
    r = one(ctl.tick(120.0))
    # 27 available, target one ENI (9): two whole ENIs are surplus, the primary stays.
    assert [o.eni_id for o in r.release] == [SECOND.eni_id, third.eni_id]
    assert all(len(o.ips) == 9 for o in r.release)
    assert ds.counts(120.0).total == 9
    ctl.apply_result(
        result(
            r.seq,
            {"kind": "released", "eni_id": third.eni_id, "ips": r.release[1].ips},
            {"kind": "deleted", "eni_id": third.eni_id},
        ),
        121.0,
    )
    assert ds.eni(third.eni_id) is None


def test_resync_ignores_imds_lag_on_released_addresses() -> None:
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    assert ds.counts(0.0).total == 2
    ctl.tick(0.0)
    ctl.tick(1.0)
    r = one(ctl.tick(61.0))
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": r.release[0].ips}), 62.0)
    ctl.resync(63.0)  # IMDS still lists it
    assert ds.counts(63.0).total == 1


def test_declined_offer_puts_quarantined_addresses_back_at_once() -> None:
    # Surplus quarantined and offered; pods arrive; the allocator answers the
    # next report with ``assigned`` for the offered addresses (a Reclaim).
    ips = [f"10.0.0.{i}" for i in range(11, 16)]
    ds, ctl = make(PoolConfig(warm_ip=2), ips)
    ctl.tick(0.0)
    ctl.tick(30.0)
    r = one(ctl.tick(90.0))
    offered = r.release[0].ips
    assert ds.counts(90.0).quarantined == 3
    for i in range(4):  # 4 pods: 2 get the live addresses, 2 wait
        ds.assign(f"c{i}", "eth0", "ns", 91.0)
    assert ds.counts(91.0).pending == 2
    r2 = one(ctl.tick(91.0))
    assert r2.pending_demand == 2 and r2.release
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": offered}), 92.0)
    c = ds.counts(92.0)
    assert c.quarantined == 0 and c.total == 5
    assert ctl.stats.addresses_reclaimed == 3
    assert ds.assign("c2", "eth0", "ns", 92.0) is not None
    assert ds.assign("c3", "eth0", "ns", 92.0) is not None


def test_two_parked_results_for_one_eni_are_both_applied() -> None:
    # An ENI still attaching (not in IMDS yet) gets its ``attached`` result and,
    # from the next report, an ``assigned`` one: both wait for IMDS. The second
    # must not replace the first, or the ENI's first addresses are never used
    # (found in the bench: pods waited for minutes while EC2 held their addresses).
    imds = FakeImds()
    ds, ctl = make(PoolConfig(warm_ip=2), imds=imds)
    r1 = one(ctl.tick(0.0))
    first = ["10.0.0.21", "10.0.0.22", "10.0.0.23"]
    attached = {
        "kind": "attached",
        "eni_id": SECOND.eni_id,
        "device_index": 1,
        "network_card": 0,
        "mac": SECOND.mac,
        "subnet_id": "subnet-a",
        "subnet_cidr": "10.0.0.0/24",
        "primary_ip": SECOND.primary_ip,
        "ips": first,
    }
    ctl.apply_result(result(r1.seq, attached), 1.0)
    assert ds.counts(1.0).total == 0  # not visible yet: parked
    ctl.apply_result(result(r1.seq, {"kind": "assigned", "eni_id": SECOND.eni_id, "ips": ["10.0.0.24"]}), 2.5)
    imds.add(SECOND, [*first, "10.0.0.24"])
    ctl.tick(3.0)
    assert sorted(next(e for e in ds.enis() if e.info.eni_id == SECOND.eni_id).ips) == [*first, "10.0.0.24"]
    assert ds.counts(3.0).total == 4


def test_parked_claims_expire_from_their_first_arrival() -> None:
    imds = FakeImds()
    ds, ctl = make(PoolConfig(warm_ip=2), imds=imds)
    r = one(ctl.tick(0.0))
    claim = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.99"]}
    ctl.apply_result(result(r.seq, claim), 1.0)
    ctl.apply_result(result(r.seq, claim), 40.0)  # delivered again: same claim, same clock
    ctl.tick(62.0)
    imds.add(PRIMARY, ["10.0.0.99"])
    ctl.tick(63.0)
    assert ds.counts(63.0).total == 0 and ctl.stats.verify_dropped == 1


def test_empty_reply_while_pods_wait_reads_imds_at_once() -> None:
    # The allocator assigned 3 addresses, then died before its result went
    # out; the next report gets an empty reply (EC2 already holds them).
    imds = FakeImds()
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    ds.assign("c1", "eth0", "ns", 1.0)
    r = one(ctl.tick(1.0))
    assert r.pending_demand == 1
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    ctl.apply_result(result(r.seq), 2.0)
    assert ds.counts(2.0).total == 3
    assert ctl.stats.resync_on_empty_result == 1
    assert ds.assign("c1", "eth0", "ns", 2.0) is not None


def test_empty_reply_with_nothing_waiting_does_not_resync() -> None:
    imds = FakeImds()
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    r = one(ctl.tick(1.0))
    imds.add(PRIMARY, ["10.0.0.11"])
    ctl.apply_result(result(r.seq), 2.0)
    assert ds.counts(2.0).total == 0 and ctl.stats.resync_on_empty_result == 0


def test_empty_reply_with_imds_down_is_not_an_error() -> None:
    class DownImds(FakeImds):
        down = False

        def interfaces(self) -> list[AttachedEni]:
            if self.down:
                raise OSError("IMDS: connection refused")
            return super().interfaces()

    imds = DownImds()
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(0.0)
    ds.assign("c1", "eth0", "ns", 1.0)
    r = one(ctl.tick(1.0))
    imds.down = True
    ctl.apply_result(result(r.seq), 2.0)  # does not raise
    assert ctl.stats.results_applied == 1


def test_an_address_released_then_assigned_again_survives_resync() -> None:
    # EC2 may hand back the same address within the "just released" window;
    # resync must not force-remove it from the pod holding it (and later hand
    # it out a second time).
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.12", "10.0.0.11"])
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds)
    ctl.start(1000.0)
    r = one(ctl.tick(1000.0))
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.12"], [])
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11"]}), 1001.0)
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.12", "10.0.0.11"], [])
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11"]}), 1030.0)
    a = ds.assign("podA", "eth0", "ns", 1031.0)
    b = ds.assign("podB", "eth0", "ns", 1031.0)
    assert a is not None and b is not None
    ctl.resync(1040.0)
    assert ds.lookup("podB", "eth0") == b
    ctl.resync(1200.0)
    assert ds.assign("podC", "eth0", "ns", 1201.0) is None  # nothing handed out twice


def test_resync_never_hands_out_a_new_eni_before_its_host_set_up() -> None:
    got = []

    class SlowHost(RecordingHost):
        def setup_eni(self, eni: EniInfo, mtu: int, pods: Collection[str] = ()) -> None:
            got.append(ds.assign("pod", "eth0", "ns", 2.0))  # a concurrent ADD in the window
            raise LookupError("link not visible yet")

    imds = FakeImds()
    ds, ctl = make(PoolConfig(warm_ip=1), imds=imds, host=SlowHost())
    ctl.start(1.0)
    imds.add(SECOND, ["10.0.0.21"])  # IMDS shows the ENI before its result arrives
    ctl.resync(2.0)
    assert got == [None]
    assert [e.ready for e in ds.enis() if e.info.eni_id == SECOND.eni_id] == [False]


def test_forced_reports_never_come_faster_than_one_an_interval() -> None:
    # A loop that forces report after report (the sim's honest report-flood: fresh seed
    # 1000250 sent 27 a second and starved the other nodes) gets one report an interval;
    # the forced one is not lost, it goes at the first pass after the interval.
    _, ctl = make(PoolConfig(warm_ip=2), ["10.0.0.11", "10.0.0.12"])
    first = one(ctl.tick(0.0))
    sent = []
    for i in range(1, 50):
        ctl.retry_soon()
        sent += ctl.tick(i * 0.02)  # 49 forced passes within 0.98 s
    assert sent == []
    assert one(ctl.tick(1.0)).seq > first.seq
    assert ctl.tick(1.5) == []  # nothing forced, nothing changed: quiet again


def test_demand_still_reports_at_once_and_a_clock_stepped_back_does_not_hold_reports() -> None:
    ds, ctl = make(PoolConfig(warm_ip=1), ["10.0.0.11"])
    ctl.tick(10.0)
    assert ds.assign("c1", "eth0", "ns", 10.1) is not None
    assert ds.assign("c2", "eth0", "ns", 10.2) is None
    assert one(ctl.tick(10.2)).pending_demand == 1  # 0.2 s after the last: demand is not held
    ctl.retry_soon()
    assert one(ctl.tick(5.0))  # the wall clock stepped back 5 s: the forced report goes


def test_the_report_interval_runs_on_the_monotonic_clock() -> None:
    # A wall clock stepped on every pass does not let forced reports through faster; one
    # stepped back an hour does not hold them (hostile review of the interval, finding 5).
    steady = [100.0]
    ds, _ = make(PoolConfig(warm_ip=2), ["10.0.0.11", "10.0.0.12"])
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=2), ds, TIMING, monotonic=lambda: steady[0])
    one(ctl.tick(100_000.0))
    for i in range(1, 10):
        ctl.retry_soon()
        steady[0] += 0.05
        assert ctl.tick(100_000.0 + i * 30.0) == []  # the wall clock jumps 30 s a pass, 0.05 s pass
    steady[0] += 1.0
    ctl.retry_soon()
    assert one(ctl.tick(100_000.0 - 3600.0))  # the wall clock an hour back: the report goes
