"""An offered address IMDS no longer lists on its ENI is dropped a release timeout after the
first resync that found it so, whatever its offer's date (``PoolController._unlisted_since``).

The simulation's seed 1060384: EC2 had moved two offered addresses to the node's other ENI (an
answer the agent never got); held quarantined on the first ENI, they stayed unknown on the second
for as long as joins kept dating that offer anew (review 32's D1), each date restarting their
release timeout. A first fix moved such an address to the other ENI's record and was taken out
(review 37: its two steps could be split by a failed write, a restart or one regressed read, and
the address came back free while its offer could be answered); review 37's cases are kept here,
each a pin that the address never goes to a pod. Dropped, the address is marked released: a read
listing it anywhere on the node holds it as offered, of unknown origin (``PoolController._relisted``),
never free."""

from __future__ import annotations

import json
from typing import Any

import pytest

from node_agent.checkpoint import CheckpointWriteError, MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, result
from tests.helpers.restore import restore_answer
from warmpool.limits import known

X, Y = "10.0.0.40", "10.0.0.41"
T0 = 1000.0


class FailingOnce(MemoryCheckpoint):
    """A checkpoint whose next write fails once ``failing`` is set (a full disk, an I/O error)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def save(self, data: dict[str, Any]) -> None:
        if self.failing:
            self.failing = False
            raise OSError("disk full")
        super().save(data)


def _offered_on_second(cp: MemoryCheckpoint) -> tuple[FakeImds, Datastore, PoolController]:
    """A node that never lost its checkpoint, X offered (an ordinary offer) on the second ENI."""
    imds = FakeImds()
    imds.add(SECOND, [X, Y])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    return imds, ds, ctl


def _where(ds: Datastore, ip: str) -> list[str]:
    return [e.info.eni_id for e in ds.enis() if ip in e.addrs]


def _no_pod_gets(ds: Datastore, ip: str, now: float) -> None:
    got = [ds.assign(f"pod{i}", "eth0", f"/var/run/netns/pod{i}", now) for i in range(3)]
    assert all(a is None or a.ip != ip for a in got), f"{ip}, on offer, went to a pod"


def _moved_to_primary(imds: FakeImds) -> None:
    """EC2 moved X to the primary ENI (or a torn or regressed read shows it so)."""
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [])
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [X], [])


def test_an_unlisted_offer_is_dropped_a_release_timeout_after_its_first_unlisted_read_whatever_its_date() -> None:
    imds, ds, ctl = _offered_on_second(MemoryCheckpoint())
    ctl.tick(T0 + 2)
    _moved_to_primary(imds)
    ctl.resync(T0 + 10)  # the first read without X on the second ENI
    assert _where(ds, X) == [SECOND.eni_id], "kept quarantined: the offer's answer decides"
    for dt in range(30, int(TIMING.release_timeout_s), 20):
        t = T0 + dt
        ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")  # what joins do (review 32, D1)
        ctl.resync(t)
        ctl.tick(t + 1)
        assert _where(ds, X) == [SECOND.eni_id], f"dropped before its timeout, at {t - T0:g}"
        _no_pod_gets(ds, X, t + 1)
    ctl.tick(T0 + 10 + TIMING.release_timeout_s + 1)
    assert _where(ds, X) == [], "still held on the ENI EC2 took it from"
    ctl.resync(T0 + 10 + TIMING.release_timeout_s + 5)
    assert _where(ds, X) == [PRIMARY.eni_id], "the address EC2 has on the node stays unknown"
    assert X in ds.quarantined()[PRIMARY.eni_id][0], "held as offered, of unknown origin"
    _no_pod_gets(ds, X, T0 + 10 + TIMING.release_timeout_s + 6)


def test_a_read_listing_the_address_between_does_not_restart_its_clock_the_take_backs_read_decides() -> None:
    imds, ds, ctl = _offered_on_second(MemoryCheckpoint())
    ctl.tick(T0 + 2)
    _moved_to_primary(imds)
    ctl.resync(T0 + 10)
    imds.add(SECOND, [X])  # listed again on its ENI (a regressed read), once (review 38, F3)
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [], [])
    ctl.resync(T0 + 60)
    ctl.tick(T0 + 10 + TIMING.release_timeout_s + 1)  # the take-back's own read lists it
    assert _where(ds, X) == [SECOND.eni_id], "dropped while the take-back's read listed it"
    _moved_to_primary(imds)
    ctl.resync(T0 + 150)  # the clock starts again here
    ctl._date_anew(SECOND.eni_id, T0 + 150, "an address joined the offer")
    ctl.tick(T0 + 150 + TIMING.release_timeout_s - 1)
    assert _where(ds, X) == [SECOND.eni_id], "dropped before a release timeout from the read that lacked it"
    ctl.tick(T0 + 150 + TIMING.release_timeout_s + 1)
    assert _where(ds, X) == [], "not dropped a release timeout after the read that lacked it again"


def test_an_address_a_pod_holds_is_never_dropped_so() -> None:
    imds = FakeImds()
    imds.add(SECOND, [X])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    pod = ds.assign("pod", "eth0", "/var/run/netns/pod", T0 + 1)
    assert pod is not None and pod.ip == X
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [], [])
    for t in range(10, 400, 30):
        ctl.resync(T0 + t)
        ctl.tick(T0 + t + 1)
    assert ds.lookup("pod", "eth0") is not None and _where(ds, X) == [SECOND.eni_id]


# --- review 37's cases (of the move taken out), kept as pins ---------------------


def test_a_failed_write_during_the_resync_never_frees_the_offered_address() -> None:
    cp = FailingOnce()
    imds, ds, ctl = _offered_on_second(cp)
    _moved_to_primary(imds)
    cp.failing = True
    with pytest.raises(CheckpointWriteError):
        ctl.resync(T0 + 5)  # the agent's loop logs it and goes on (NodeAgent: resync failed)
    ctl.resync(T0 + 35)
    _no_pod_gets(ds, X, T0 + 36)
    for t in (65, 95, 125, 155, 185):
        ctl.resync(T0 + t)
        ctl.tick(T0 + t + 1)
        _no_pod_gets(ds, X, T0 + t + 2)


class CrashAfterFirstWrite(MemoryCheckpoint):
    """Keeps a copy of what was on disk right after the first write once ``armed``: the process
    dies there (killed, the node's power lost), before any later write."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.on_disk: dict[str, Any] | None = None

    def save(self, data: dict[str, Any]) -> None:
        super().save(data)
        if self.armed:
            self.armed = False
            self.on_disk = json.loads(json.dumps(data))


@pytest.mark.parametrize("dies_at", ["resync", "drop"])
def test_a_restart_after_any_write_never_frees_the_offered_address(dies_at: str) -> None:
    cp = CrashAfterFirstWrite()
    imds, _ds, ctl = _offered_on_second(cp)
    (r1,) = ctl.tick(T0 + 2)
    assert any(X in o.ips for o in r1.release), "setup: X offered to the allocator"
    _moved_to_primary(imds)
    if dies_at == "resync":
        cp.armed = True
        ctl.resync(T0 + 5)
    else:
        ctl.resync(T0 + 5)
        cp.armed = True  # dies right after the take-back's first write (marking X released)
        ctl.tick(T0 + 5 + TIMING.release_timeout_s + 1)
    assert cp.on_disk is not None
    ds2 = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint(cp.on_disk))
    assert ds2.restore()
    ctl2 = PoolController(ID, known("m5.large"), POOL, ds2, TIMING, metadata=imds)
    at = T0 + 200 if dies_at == "drop" else T0 + 10
    ctl2.start(at, restored=True)
    (r2,) = ctl2.tick(at + 1)
    ctl2.apply_result(restore_answer(r2, r1.seq, current=True), at + 2)
    _no_pod_gets(ds2, X, at + 3)


THIRD = EniInfo("eni-00000003", 2, "0a:00:00:00:00:03", "10.0.0.30", "subnet-a", "10.0.0.0/24")
OLD = EniInfo("eni-000000ff", 2, "0a:00:00:00:00:ff", "10.0.0.90", "subnet-a", "10.0.0.0/24")
Z = "10.0.0.42"


def test_a_regressed_read_showing_an_old_eni_in_a_pods_slot_never_frees_the_offered_address() -> None:
    imds = FakeImds()
    imds.add(SECOND, [X])
    imds.add(THIRD, [Z])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    for e in (SECOND, THIRD):
        ds.set_ready(e.eni_id, ready=True)
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1  # offered
    pod = ds.assign("pod", "eth0", "/var/run/netns/pod", T0 + 1)
    assert pod is not None and pod.ip == Z, "setup: a pod on the third ENI"
    (r1,) = ctl.tick(T0 + 2)
    assert any(X in o.ips for o in r1.release), "setup: X offered to the allocator"
    true_state = dict(imds.enis)
    # One read from an older state (docs/safety.md row 6): the ENI that had device 2 before the
    # third, with X; the second ENI without X; the third not attached yet.
    imds.enis = {
        PRIMARY.eni_id: true_state[PRIMARY.eni_id],
        SECOND.eni_id: AttachedEni(SECOND, [], []),
        OLD.eni_id: AttachedEni(OLD, [X], []),
    }
    ctl.resync(T0 + 5)
    imds.enis = true_state  # the next read: the true state, X on the second ENI, still offered
    ctl.resync(T0 + 35)
    _no_pod_gets(ds, X, T0 + 36)
    ctl.tick(T0 + 5 + TIMING.release_timeout_s + 1)
    assert _where(ds, X) == [SECOND.eni_id], "dropped on a clock the listing read had stopped"


def test_a_late_answer_naming_the_first_eni_never_frees_the_address() -> None:
    for answer in ("assigned", "released"):
        imds, ds, ctl = _offered_on_second(MemoryCheckpoint())
        (r1,) = ctl.tick(T0 + 2)
        assert any(X in o.ips for o in r1.release), "setup: X offered to the allocator"
        _moved_to_primary(imds)
        ctl.resync(T0 + 5)
        ctl.apply_result(result(r1.seq, {"kind": answer, "eni_id": SECOND.eni_id, "ips": [X]}), T0 + 6)
        for t in (35, 65, 95, 125, 155):
            ctl.resync(T0 + t)
            ctl.tick(T0 + t + 1)
            _no_pod_gets(ds, X, T0 + t + 2)


def _flapping(flap: bool) -> Datastore:
    """Z offered on the primary and unassigned by EC2 (the ``released`` lost: IMDS no longer lists
    it); X offered on the second ENI; for ten minutes, reads show X on one ENI, then the other
    (torn or regressed reads, docs/safety.md rows 4-6) if ``flap``, else on the second."""
    z = "10.0.0.43"
    imds = FakeImds()
    imds.add(PRIMARY, [z])
    imds.add(SECOND, [X, Y])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    assert ds.quarantine(PRIMARY.eni_id, [z], [], T0 + 1) == 1
    assert ds.quarantine(SECOND.eni_id, [X], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    for i in range(20):
        on_primary = flap and i % 2 == 0
        imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [X] if on_primary else [], [])
        imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y] if on_primary else [X, Y], [])
        ctl.resync(T0 + 30 * (i + 1))
        ctl.tick(T0 + 30 * (i + 1) + 1)
        _no_pod_gets(ds, X, T0 + 30 * (i + 1) + 2)
    return ds


def test_an_address_flapping_between_two_enis_never_keeps_another_offer_from_its_timeout() -> None:
    assert _flapping(flap=False).eni_of("10.0.0.43") is None, "setup"
    assert _flapping(flap=True).eni_of("10.0.0.43") is None, "Z still held after ten minutes"
