"""An agent restarted (kill -9) while IMDS lags behind EC2 (issue 11, defect 2).

A ``released`` or ``deleted`` result is EC2's answer; IMDS may keep listing
the addresses (or the ENI) for a while. The filters that ignore such a lagging
IMDS are checkpointed with their expiry, so a restarted agent never re-adds
what EC2 took away and hands it to a new pod. The other direction: an
``assigned``/``attached`` claim waiting for IMDS to show it is checkpointed
too, so a restart does not forget addresses EC2 gave the node. And a result
received but not yet applied when the agent died comes back (SQS redelivery):
quarantined addresses are held until it can."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from node_agent.checkpoint import CHECKPOINT_VERSION, MemoryCheckpoint
from node_agent.controller import RECENT_S, AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, never_free, one, result
from warmpool.limits import known
from warmpool.pool import PoolConfig

POOL = PoolConfig(warm_ip=1)


class RecordingCheckpoint(MemoryCheckpoint):
    """Keeps every snapshot written, to restart from any of them (kill -9 after that write)."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        super().__init__(data)
        self.history: list[dict[str, Any]] = []

    def save(self, data: dict[str, Any]) -> None:
        super().save(data)
        self.history.append(copy.deepcopy(data))


def boot(cp: MemoryCheckpoint, imds: FakeImds, now: float, pool: PoolConfig = POOL, **kw: Any):  # type: ignore[no-untyped-def]
    """The agent process starts: checkpoint, then IMDS."""
    ds = Datastore(cooldown_s=TIMING.cooldown_s, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ds.restore()
    ctl = PoolController(ID, known("m5.large"), pool, ds, TIMING, metadata=imds, **kw)
    ctl.start(now)
    return ds, ctl


def released_with_imds_lagging(cp: MemoryCheckpoint) -> tuple[FakeImds, list[str], float]:
    """Two addresses, one surplus quarantined, offered and released by EC2; IMDS still lists it."""
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    ds, ctl = boot(cp, imds, 0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r = one(ctl.tick(61.0))
    offered = r.release[0].ips
    assert len(offered) == 1
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": offered}), 62.0)
    assert ds.counts(62.0).total == 1
    return imds, offered, 62.0


def test_restart_after_released_while_imds_lags_never_readds_the_addresses() -> None:
    cp = MemoryCheckpoint()
    imds, offered, t = released_with_imds_lagging(cp)
    ds, ctl = boot(cp, imds, t + 5)  # kill -9, restart; IMDS still lists the released address
    assert never_free(
        ds, ctl, offered[0]
    )  # (released, listed again: held as an offer of unknown origin, never the pool's)
    assert ds.assign("pod-a", "eth0", "ns", t + 6) is not None
    assert ds.assign("pod-b", "eth0", "ns", t + 6) is None  # the released one is never handed out
    ctl.resync(t + 30)  # still lagging: still ignored
    assert ds.assign("pod-b", "eth0", "ns", t + 31) is None


def test_restart_after_deleted_while_imds_lags_never_readds_the_eni() -> None:
    cp = MemoryCheckpoint()
    imds = FakeImds()
    imds.add(SECOND, ["10.0.0.21"])
    ds, ctl = boot(cp, imds, 0.0)
    assert ds.eni(SECOND.eni_id) is not None
    r = one(ctl.tick(0.0))
    ctl.apply_result(
        result(
            r.seq,
            {"kind": "released", "eni_id": SECOND.eni_id, "ips": ["10.0.0.21"]},
            {"kind": "deleted", "eni_id": SECOND.eni_id},
        ),
        1.0,
    )
    assert ds.eni(SECOND.eni_id) is None
    ds, ctl = boot(cp, imds, 10.0)  # IMDS still shows the deleted ENI
    assert ds.eni(SECOND.eni_id) is None
    assert ds.assign("pod-a", "eth0", "ns", 11.0) is None


def test_a_released_address_listed_again_comes_back_only_with_a_grant_across_a_restart() -> None:
    cp = MemoryCheckpoint()
    imds, offered, t = released_with_imds_lagging(cp)
    # IMDS still lists the address after the filter's time: no evidence that EC2 gave it back
    # (IMDS's lag has no bound), so it stays ignored (before: re-added as free at once).
    ds, ctl = boot(cp, imds, t + RECENT_S + 1)
    assert never_free(
        ds, ctl, offered[0]
    )  # (released, listed again: held as an offer of unknown origin, never the pool's)
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11"], [])  # IMDS caught up
    boot(cp, imds, t + RECENT_S + 2)  # ... and the checkpoint keeps that it was seen
    # Listed again with no grant: an IMDS answering from before the release looks just like
    # this (docs/safety.md row 6), so it stays ignored, however long after (before: taken
    # back free once it had been seen absent and 2 min had passed; seed 5877).
    imds.add(PRIMARY, offered)
    ds, ctl = boot(cp, imds, t + RECENT_S + 3)
    assert never_free(
        ds, ctl, offered[0]
    )  # (released, listed again: held as an offer of unknown origin, never the pool's)
    ctl.resync(t + 3600)
    assert never_free(ds, ctl, offered[0])
    # EC2's word that it is ours again, with IMDS having been seen without it since the release
    # (kept across the restart): taken. Offered of unknown origin now, a grant of it replying to
    # a report offering it would be a hand-back (refused); the allocator unassigns it and EC2
    # assigns it again in the same answer (its own assignment).
    assert ds.assign("pod-a", "eth0", "ns", t + 3601) is not None
    r = one(ctl.tick(t + 3602))
    again = (
        {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": offered},
        {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": offered},
    )
    ctl.apply_result(result(r.seq, *again), t + 3603)
    ctl.tick(t + 3603 + 61)
    assert offered[0] in {ip for e in ds.enis() for ip in e.ips} and not ds.quarantined()
    ctl.resync(t + 3604)  # and resync keeps it now
    assert offered[0] in {ip for e in ds.enis() for ip in e.ips}


def test_every_checkpoint_write_while_applying_a_released_result_is_safe_to_restart_from() -> None:
    # Killed after any write of applying the result: the address is either still
    # quarantined (the result, not acknowledged, comes back) or gone and filtered;
    # never a free address IMDS re-added.
    cp = RecordingCheckpoint()
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    _, ctl = boot(cp, imds, 0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r = one(ctl.tick(61.0))
    ip = r.release[0].ips[0]
    first = len(cp.history)
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [ip]}), 62.0)
    writes = cp.history[first:]
    assert writes
    for i, snap in enumerate(writes):
        ds2, _ = boot(MemoryCheckpoint(copy.deepcopy(snap)), imds, 70.0)
        addr = next((e.addrs[ip] for e in ds2.enis() if ip in e.addrs), None)
        assert addr is None or addr.quarantined_at is not None, f"write {i}: {ip} back in the pool"


def test_a_checkpoint_written_by_todays_agents_still_loads() -> None:
    # Today's format: no filters, no parked claims.
    old = {
        "version": CHECKPOINT_VERSION,
        "meta": {"last_seq": 1_700_000_000_000},
        "enis": [
            {
                "info": {
                    "eni_id": PRIMARY.eni_id,
                    "device_index": 0,
                    "mac": PRIMARY.mac,
                    "primary_ip": PRIMARY.primary_ip,
                    "subnet_id": "subnet-a",
                    "subnet_cidr": "10.0.0.0/24",
                    "network_card": 0,
                },
                "added_at": 1.0,
                "ready": True,
                "ips": ["10.0.0.11", "10.0.0.12", "10.0.0.13"],
                "prefixes": [],
                "addrs": [
                    {
                        "ip": "10.0.0.11",
                        "container_id": "c1",
                        "ifname": "eth0",
                        "netns": "/run/netns/c1",
                        "assigned_at": 2.0,
                    },
                    {"ip": "10.0.0.13", "quarantined_at": 3.0},
                ],
            }
        ],
    }
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    ds, ctl = boot(MemoryCheckpoint(old), imds, 10.0)
    assert ds.lookup("c1", "eth0") == ("10.0.0.11", PRIMARY.eni_id)
    assert ds.counts(10.0).quarantined == 1
    assert ds.assign("c2", "eth0", "ns", 11.0) == ("10.0.0.12", PRIMARY.eni_id)
    assert ctl.last_seq == 1_700_000_000_000
    # ... and what it writes next carries the new fields and loads again.
    ctl.apply_result(result(ctl.last_seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.13"]}), 12.0)
    ds3, ctl3 = boot(MemoryCheckpoint(ds.snapshot()), imds, 13.0)
    assert never_free(
        ds3, ctl3, "10.0.0.13"
    )  # (released, listed again: held as an offer of unknown origin, never the pool's)


def test_a_claim_waiting_for_imds_survives_a_restart() -> None:
    # EC2 assigned three addresses; the result came before IMDS showed them and
    # was parked (and acknowledged). The agent restarts while IMDS still lags;
    # when IMDS catches up, the claim is applied at the next tick, not at the
    # next periodic resync.
    cp = MemoryCheckpoint()
    imds = FakeImds()
    ds, ctl = boot(cp, imds, 0.0)
    ds.assign("pod-a", "eth0", "ns", 0.5)
    r = one(ctl.tick(1.0))
    new = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": new}), 2.0)
    assert ds.counts(2.0).total == 0
    ds, ctl = boot(cp, imds, 5.0)
    imds.add(PRIMARY, new)
    ctl.tick(6.0)
    assert ds.counts(6.0).total == 3
    assert ds.assign("pod-a", "eth0", "ns", 6.0) is not None


def test_a_parked_claim_restored_still_expires_from_its_first_arrival() -> None:
    cp = MemoryCheckpoint()
    imds = FakeImds()
    _, ctl = boot(cp, imds, 0.0)
    r = one(ctl.tick(1.0))
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.99"]}), 2.0)
    ds, ctl = boot(cp, imds, 30.0)
    ctl.tick(63.0)  # 61 s after it first arrived: dropped
    imds.add(PRIMARY, ["10.0.0.99"])
    ctl.tick(64.0)
    assert ds.counts(64.0).total == 0 and ctl.stats.verify_dropped == 1


def test_quarantine_is_held_after_a_restart_until_a_lost_result_can_come_back() -> None:
    # The agent received a ``released`` result and died before applying it; SQS
    # redelivers it only after the visibility timeout. Until then the restarted
    # agent must not give the quarantined address to a pod (EC2 took it).
    cp = MemoryCheckpoint()
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    ds, ctl = boot(cp, imds, 0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    assert one(ctl.tick(61.0)).release  # quarantined at 61: taken back at 181
    ds, ctl = boot(cp, imds, 178.0, restart_hold_s=15.0)
    ctl.tick(182.0)
    assert ds.counts(182.0).quarantined == 1
    # The release timeout runs again from the restart: the previous process's steady clock
    # is gone and its wall clock may have been stepped (before: taken back at 178 + 15 s).
    ctl.tick(193.1)
    assert ds.counts(193.1).quarantined == 1
    ctl.tick(178.0 + TIMING.release_timeout_s - 1)
    assert ds.counts(178.0 + TIMING.release_timeout_s - 1).quarantined == 1
    assert ctl.stats.offers_renewed == 0
    # At the timeout an address IMDS lists is offered again, dated now, never taken back on
    # IMDS's word (docs/safety.md, step 6): the allocator's answer decides.
    t = 178.0 + TIMING.release_timeout_s + 0.1
    report = one(ctl.tick(t))
    assert ds.counts(t).quarantined == 1 and ctl.stats.offers_renewed == 1
    assert [o.quarantined_at for o in report.release] == [pytest.approx(t)]
    # A fresh start (nothing to redeliver to a dead process) holds nothing extra.
    ds, ctl = boot(MemoryCheckpoint(), imds, 0.0, restart_hold_s=15.0)
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.11"], [], 0.0)
    ctl.tick(119.0)
    assert ctl.stats.offers_renewed == 0
    ctl.tick(121.0)
    assert ctl.stats.offers_renewed == 1


def test_released_is_acted_on_before_imds_catches_up_and_within_one_write_order() -> None:
    # The filter reaches the checkpoint no later than the removal: a write
    # with the address gone and no filter would let a restart re-add it.
    cp = RecordingCheckpoint()
    _, offered, _ = released_with_imds_lagging(cp)
    seen = gone = False
    for snap in cp.history:
        present = offered[0] in {ip for e in snap["enis"] for ip in e["ips"]}
        seen = seen or present
        if seen and not present:
            gone = True
            assert offered[0] in snap.get("recent", {}).get("released", {}), snap
    assert gone


def test_a_stale_assigned_result_redelivered_after_released_never_readds_the_address() -> None:
    # SQS redelivers an old ``assigned`` (its delete failed, or the agent died before
    # deleting it) after a newer ``released`` for the same address; IMDS still lists
    # the address. EC2's latest answer wins, also across a restart.
    cp = MemoryCheckpoint()
    imds = FakeImds()
    ds, ctl = boot(cp, imds, 0.0)
    r1 = one(ctl.tick(1.0))
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    stale = result(r1.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11", "10.0.0.12"]})
    ctl.apply_result(stale, 2.0)
    assert ds.counts(2.0).total == 2
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.12"], [], 3.0)
    r2 = one(ctl.tick(4.0))
    ctl.apply_result(result(r2.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]}), 5.0)
    ctl.apply_result(stale, 6.0)  # redelivered; IMDS still lists .12
    assert "10.0.0.12" not in {ip for e in ds.enis() for ip in e.ips}
    ds, ctl = boot(cp, imds, 7.0)
    ctl.apply_result(stale, 8.0)
    assert never_free(
        ds, ctl, "10.0.0.12"
    )  # (released, listed again: held as an offer of unknown origin, never the pool's)
    assert ds.assign("pod-a", "eth0", "ns", 9.0) is not None
    assert ds.assign("pod-b", "eth0", "ns", 9.0) is None
    # A newer claim for the address (EC2 gave it back) is applied once IMDS shows it
    # again: IMDS still listing it from before the release is no evidence (finding A).
    # (Offered of unknown origin, .12 is released and assigned again in one answer: a grant of
    # it alone, replying to a report offering it, would be a hand-back, refused.)
    r3 = one(ctl.tick(10.0))
    claim = result(
        r3.seq,
        {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]},
        {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]},
    )
    ctl.apply_result(claim, 11.0)
    assert ds.assign("pod-b", "eth0", "ns", 12.0) is None
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11"], [])  # IMDS catches up with the release...
    ctl.tick(13.0)
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11", "10.0.0.12"], [])  # ...then the new assignment
    ctl.tick(14.0)
    assert ds.assign("pod-b", "eth0", "ns", 15.0) == ("10.0.0.12", PRIMARY.eni_id)


def test_a_stale_attached_result_redelivered_after_deleted_never_readds_the_eni() -> None:
    cp = MemoryCheckpoint()
    imds = FakeImds()
    ds, ctl = boot(cp, imds, 0.0)
    r1 = one(ctl.tick(1.0))
    imds.add(SECOND, ["10.0.0.21"])
    stale = result(
        r1.seq,
        {
            "kind": "attached",
            "eni_id": SECOND.eni_id,
            "device_index": 1,
            "network_card": 0,
            "mac": SECOND.mac,
            "subnet_id": "subnet-a",
            "subnet_cidr": "10.0.0.0/24",
            "primary_ip": SECOND.primary_ip,
            "ips": ["10.0.0.21"],
        },
    )
    ctl.apply_result(stale, 2.0)
    assert ds.eni(SECOND.eni_id) is not None
    r2 = one(ctl.tick(3.0))
    ctl.apply_result(
        result(
            r2.seq,
            {"kind": "released", "eni_id": SECOND.eni_id, "ips": ["10.0.0.21"]},
            {"kind": "deleted", "eni_id": SECOND.eni_id},
        ),
        4.0,
    )
    ctl.apply_result(stale, 5.0)  # IMDS still shows the ENI
    assert ds.eni(SECOND.eni_id) is None
    assert ds.assign("pod-a", "eth0", "ns", 6.0) is None


def test_damaged_lag_filters_fail_the_checkpoint_clearly() -> None:
    import pytest

    from node_agent.checkpoint import CheckpointError

    cp = MemoryCheckpoint()
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    _, ctl = boot(cp, imds, 0.0)
    r = one(ctl.tick(0.0))
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]}), 1.0)
    good = cp.load()
    assert good is not None and good["recent"]["released"] == {"10.0.0.12": [121.0, r.seq]}
    # -1 is the take-back's "no report" (test_a_checkpoint_written_after_a_take_back_restores)
    for bad in ([float("nan"), 1], [float("inf"), 1], [5.0, -2], [5.0], "x", None):
        d = copy.deepcopy(good)
        d["recent"]["released"]["10.0.0.12"] = bad
        with pytest.raises(CheckpointError):
            Datastore(checkpoint=MemoryCheckpoint(d)).restore()
    d = copy.deepcopy(good)
    d["recent"]["released"] = {"not-an-address": [5.0, 1]}
    with pytest.raises(CheckpointError):
        Datastore(checkpoint=MemoryCheckpoint(d)).restore()


def test_a_new_eni_in_the_slot_of_one_whose_deletion_was_lost_replaces_it() -> None:
    # The ``deleted`` result for SECOND was lost; EC2 attached a new ENI at the same
    # device index and IMDS shows only the new one. Applying its ``attached`` result
    # drops the old one: two ENIs in one slot would make every later report invalid.
    from node_agent.records import EniInfo

    imds = FakeImds()
    imds.add(SECOND, ["10.0.0.21"])
    ds, ctl = boot(MemoryCheckpoint(), imds, 0.0)
    r = one(ctl.tick(0.0))
    del imds.enis[SECOND.eni_id]
    third = EniInfo("eni-00000003", 1, "0a:00:00:00:00:03", "10.0.0.30", "subnet-a", "10.0.0.0/24")
    imds.add(third, ["10.0.0.31"])
    ctl.apply_result(
        result(
            r.seq,
            {
                "kind": "attached",
                "eni_id": third.eni_id,
                "device_index": 1,
                "network_card": 0,
                "mac": third.mac,
                "subnet_id": "subnet-a",
                "subnet_cidr": "10.0.0.0/24",
                "primary_ip": third.primary_ip,
                "ips": ["10.0.0.31"],
            },
        ),
        1.0,
    )
    assert ds.eni(SECOND.eni_id) is None and ds.eni(third.eni_id) is not None
    report = one(ctl.tick(70.0))  # valid: one ENI per device slot
    assert sorted(e.eni_id for e in report.enis) == [PRIMARY.eni_id, third.eni_id]


def test_a_checkpoint_written_after_a_take_back_restores() -> None:
    """A take-back with no ``released`` result (IMDS no longer lists the address: it was
    released, its result late or lost) records the address as gone with ``in_reply_to`` -1
    (no report). The restore refused that as damage, so a restart within RECENT_S rebuilt
    the datastore from scratch (every address then held for recovered pods)."""
    cp = MemoryCheckpoint()
    ds = Datastore(checkpoint=cp)
    ds.mark_gone(5.0, 5.0 + RECENT_S, -1, released=["10.0.0.12"])
    saved = cp.load()
    assert saved is not None and saved["recent"]["released"] == {"10.0.0.12": [5.0 + RECENT_S, -1]}
    again = Datastore(checkpoint=MemoryCheckpoint(copy.deepcopy(saved)))
    again.restore()
    assert "10.0.0.12" in again.recently_gone(6.0)[0]
