"""The node datastore: assignment, cooldown, quarantine, pending demand, checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from node_agent.checkpoint import CheckpointError, FileCheckpoint, MemoryCheckpoint
from node_agent.datastore import Datastore
from node_agent.records import EniInfo

PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
SECOND = EniInfo("eni-00000001", 1, "0a:00:00:00:00:01", "10.0.0.20", "subnet-a", "10.0.0.0/24")


def ds_with(ips: list[str], cooldown: float = 30.0, store: MemoryCheckpoint | None = None) -> Datastore:
    ds = Datastore(cooldown_s=cooldown, pending_ttl_s=60.0, checkpoint=store)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ips)
    return ds


def test_assign_is_idempotent_per_container_and_interface() -> None:
    ds = ds_with(["10.0.0.11", "10.0.0.12"])
    a = ds.assign("c1", "eth0", "/run/netns/a", 1.0)
    assert a == ("10.0.0.11", PRIMARY.eni_id)
    assert ds.assign("c1", "eth0", "/run/netns/a", 2.0) == a
    b = ds.assign("c2", "eth0", "/run/netns/b", 2.0)
    assert b is not None and b.ip == "10.0.0.12"
    assert ds.counts(2.0).assigned == 2


def test_no_free_address_counts_as_pending_until_served_or_stale() -> None:
    ds = ds_with(["10.0.0.11"])
    assert ds.assign("c1", "eth0", "ns", 0.0) is not None
    assert ds.assign("c2", "eth0", "ns", 1.0) is None
    assert ds.counts(1.0).pending == 1
    assert ds.counts(70.0).pending == 0  # stale after the TTL
    assert ds.assign("c3", "eth0", "ns", 71.0) is None
    ds.release("c3", "eth0", 72.0)  # DEL of a pod that never got an address
    assert ds.counts(72.0).pending == 0


def test_released_address_waits_for_cooldown() -> None:
    ds = ds_with(["10.0.0.11"], cooldown=30.0)
    ds.assign("c1", "eth0", "ns", 0.0)
    assert ds.release("c1", "eth0", 10.0) == ("10.0.0.11", PRIMARY.eni_id)
    assert ds.release("c1", "eth0", 10.0) is None  # DEL is idempotent
    c = ds.counts(11.0)
    assert (c.total, c.assigned, c.available, c.cooldown) == (1, 0, 1, 1)
    assert ds.assign("c2", "eth0", "ns", 39.0) is None
    assert ds.assign("c2", "eth0", "ns", 40.0) == ("10.0.0.11", PRIMARY.eni_id)


def test_not_ready_eni_addresses_are_not_handed_out() -> None:
    ds = ds_with([])
    ds.add_eni(SECOND, 0.0, ready=False)
    ds.add_addresses(SECOND.eni_id, ["10.0.0.21"])
    assert ds.assign("c1", "eth0", "ns", 0.0) is None
    ds.set_ready(SECOND.eni_id, ready=True)
    assert ds.assign("c1", "eth0", "ns", 0.0) == ("10.0.0.21", SECOND.eni_id)


def test_quarantined_addresses_leave_the_pool_and_come_back_on_timeout() -> None:
    ds = ds_with(["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    ds.assign("c1", "eth0", "ns", 0.0)
    cands = ds.releasable_ips(0.0)
    assert ("10.0.0.11" not in [ip for _, ip in cands]) and len(cands) == 2
    assert ds.quarantine(PRIMARY.eni_id, ["10.0.0.13", "10.0.0.11"], [], 5.0) == 1  # in-use one refused
    c = ds.counts(5.0)
    assert (c.total, c.quarantined) == (2, 1)
    assert ds.quarantined() == {PRIMARY.eni_id: (["10.0.0.13"], [])}
    assert ds.unquarantine(before=5.0) == 0
    assert ds.unquarantine(before=6.0) == 1
    assert ds.counts(6.0).quarantined == 0


def test_remove_addresses_never_takes_an_address_from_a_pod() -> None:
    ds = ds_with(["10.0.0.11", "10.0.0.12"])
    ds.assign("c1", "eth0", "ns", 0.0)
    assert ds.remove_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"]) == ["10.0.0.12"]
    assert ds.lookup("c1", "eth0") == ("10.0.0.11", PRIMARY.eni_id)
    assert ds.remove_eni(PRIMARY.eni_id) is False


def test_prefix_mode_fills_used_prefixes_first_and_releases_whole_free_ones() -> None:
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    assert ds.add_addresses(PRIMARY.eni_id, [], ["10.0.1.0/28", "10.0.1.16/28"]) == 32
    first = ds.assign("c1", "eth0", "ns", 0.0)
    second = ds.assign("c2", "eth0", "ns", 0.0)
    assert first is not None and second is not None
    assert first.ip.startswith("10.0.1.") and second.ip.startswith("10.0.1.")
    assert int(first.ip.rsplit(".", 1)[1]) < 16 and int(second.ip.rsplit(".", 1)[1]) < 16
    c = ds.counts(0.0)
    assert (c.total, c.assigned, c.free_prefixes) == (32, 2, 1)
    assert ds.releasable_prefixes(0.0) == [(PRIMARY.eni_id, "10.0.1.16/28")]
    ds.quarantine(PRIMARY.eni_id, [], ["10.0.1.16/28"], 1.0)
    assert ds.quarantined() == {PRIMARY.eni_id: ([], ["10.0.1.16/28"])}
    assert len(ds.remove_addresses(PRIMARY.eni_id, [], ["10.0.1.16/28"])) == 16
    assert ds.counts(1.0).total == 16


def test_releasable_enis_skip_primary_young_busy_and_cooling() -> None:
    ds = ds_with(["10.0.0.11"], cooldown=30.0)
    ds.add_eni(SECOND, 0.0)
    ds.add_addresses(SECOND.eni_id, ["10.0.0.21"])
    assert ds.releasable_enis(30.0, min_age_s=60.0) == []
    assert ds.releasable_enis(60.0, min_age_s=60.0) == [SECOND.eni_id]
    ds.assign("a", "eth0", "ns", 60.0)
    ds.assign("b", "eth0", "ns", 60.0)
    assert ds.releasable_enis(61.0, min_age_s=60.0) == []
    ds.release("b", "eth0", 61.0)
    assert ds.releasable_enis(62.0, min_age_s=60.0) == []  # cooldown
    assert ds.releasable_enis(91.0, min_age_s=60.0) == [SECOND.eni_id]


def test_every_change_is_checkpointed_and_restores_exactly() -> None:
    store = MemoryCheckpoint()
    ds = ds_with(["10.0.0.11", "10.0.0.12", "10.0.0.13"], store=store)
    ds.assign("c1", "eth0", "/run/netns/x", 1.0)
    ds.assign("c2", "eth0", "/run/netns/y", 1.0)
    ds.release("c2", "eth0", 2.0)
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.13"], [], 3.0)
    ds.set_meta("last_seq", 42)
    again = Datastore(cooldown_s=30.0, checkpoint=store)
    assert again.restore()
    assert again.lookup("c1", "eth0") == ("10.0.0.11", PRIMARY.eni_id)
    assert again.lookup("c2", "eth0") is None
    assert again.counts(3.0) == ds.counts(3.0)
    assert again.meta["last_seq"] == 42
    assert again.assign("c3", "eth0", "ns", 4.0) is None  # .12 cools down, .13 quarantined
    assert [p.container_id for p in again.pods()] == ["c1"]


def test_times_at_zero_survive_the_checkpoint() -> None:
    # Virtual clocks start at 0: an address quarantined or freed at 0.0 must stay so
    # across a restart (0.0 was dropped from the snapshot as if it were "unset").
    store = MemoryCheckpoint()
    ds = ds_with(["10.0.0.11", "10.0.0.12"], store=store)
    ds.assign("c1", "eth0", "ns", 0.0)
    ds.release("c1", "eth0", 0.0)
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.12"], [], 0.0)
    again = Datastore(cooldown_s=30.0, pending_ttl_s=60.0, checkpoint=store)
    assert again.restore()
    assert again.counts(1.0) == ds.counts(1.0)
    assert again.quarantined_since() == {PRIMARY.eni_id: 0.0}
    assert again.assign("c2", "eth0", "ns", 1.0) is None  # .11 cools down, .12 quarantined


def test_restore_does_not_rewrite_the_checkpoint_half_way() -> None:
    store = MemoryCheckpoint()
    ds = ds_with(["10.0.0.11"], store=store)
    ds.assign("c1", "eth0", "ns", 1.0)
    saves = store.saves
    Datastore(checkpoint=store).restore()
    assert store.saves == saves


def test_file_checkpoint_is_atomic_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "state" / "checkpoint.json"
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    ds.assign("c1", "eth0", "ns", 1.0)
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert os.listdir(path.parent) == ["checkpoint.json"]  # no temp files left
    data["version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="version 99"):
        Datastore(checkpoint=FileCheckpoint(str(path))).restore()
    path.write_text("{not json")
    with pytest.raises(CheckpointError):
        Datastore(checkpoint=FileCheckpoint(str(path))).restore()


def test_reconcile_imds_wins_for_attached_checkpoint_for_pods() -> None:
    ds = ds_with(["10.0.0.11", "10.0.0.12"])
    ds.add_eni(SECOND, 0.0)
    ds.add_addresses(SECOND.eni_id, ["10.0.0.21"])
    ds.assign("keep", "eth0", "ns", 1.0)  # .11
    ds.assign("lost", "eth0", "ns", 1.0)  # .12
    notes = ds.reconcile([(PRIMARY, ["10.0.0.11", "10.0.0.14"], [])], 2.0)
    assert ds.lookup("keep", "eth0") == ("10.0.0.11", PRIMARY.eni_id)
    assert ds.eni(SECOND.eni_id) is None
    # A pod's address IMDS no longer lists stays the pod's (IMDS may lag behind a
    # re-assignment; if EC2 truly took it, handing it to another pod makes two
    # holders): kept, raised as an alarm, never handed out again.
    assert ds.lookup("lost", "eth0") == ("10.0.0.12", PRIMARY.eni_id)
    assert any("10.0.0.12" in n and "alarm" in n for n in notes)
    assert ds.unlisted() == ["10.0.0.12"]
    ds.release("lost", "eth0", 3.0)
    assert ds.assign("next", "eth0", "ns", 100.0) == ("10.0.0.14", PRIMARY.eni_id)
    assert ds.assign("other", "eth0", "ns", 100.0) is None  # not .12
    # The first resync after the pod is gone drops it.
    ds.reconcile([(PRIMARY, ["10.0.0.11", "10.0.0.14"], [])], 101.0)
    assert ds.unlisted() == [] and ds.eni_of("10.0.0.12") is None
    assert ds.counts(101.0).total == 2
