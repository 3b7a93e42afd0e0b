"""The window after a checkpoint loss across restarts: a third hostile review's tests. A start
without a checkpoint writes what opens the window in one save (before, five saves, the first
alone leaving a usable checkpoint that opened no window at the next start: a second holder),
and a monotonic reading offset at a restart is backed by the wall clock."""

from __future__ import annotations

from typing import Any

import pytest

from emulated.clock import VirtualClock
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds
from warmpool.limits import known
from warmpool.pool import PoolConfig

POOL = PoolConfig(warm_ip=1)


class FailingAfter(MemoryCheckpoint):
    """Saves ``ok`` times, then every save fails (ENOSPC), keeping what it last held."""

    def __init__(self, ok: int) -> None:
        super().__init__()
        self.ok = ok

    def save(self, data: dict[str, Any]) -> None:
        if self.saves >= self.ok:
            raise OSError(28, "No space left on device")
        super().save(data)


def _ctl(
    cp: MemoryCheckpoint, clock: VirtualClock, imds: FakeImds, boot: str | None
) -> tuple[PoolController, Datastore]:
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ds.restore()  # before the controller: it reads the meta in __init__
    ctl = PoolController(
        ID, known("m5.large"), POOL, ds, TIMING, metadata=imds, monotonic=clock.monotonic, boot_id=boot
    )
    return ctl, ds


@pytest.mark.parametrize("ok", [1, 2], ids=["last_seq written", "rebuilt_seq written"])
def test_a_start_without_checkpoint_whose_second_write_fails_leaves_no_window(ok: int) -> None:
    # Agent._rebuild's "empty" path (first start, or a lost state directory with no pod wired)
    # calls controller.start(checkpoint_lost=True) outside ds.batch(): _forget_offers writes the
    # checkpoint once per set_meta. The first write (last_seq) lands, the second fails
    # (ENOSPC; or SIGKILL between them): the start raises, the agent exits, kubelet restarts it.
    clock = VirtualClock(1000.0)
    imds = FakeImds()
    cp = FailingAfter(ok=ok)
    ctl, _ds = _ctl(cp, clock, imds, "boot-1")
    try:
        ctl.start(clock.now(), checkpoint_lost=True)
    except OSError:
        pass  # node_agent/agent.py::_run_agent: "cannot start", exit 1
    # restart 5 s later, disk fine again; IMDS now shows an address the lost process may have offered
    clock.advance(5)
    cp.ok = 10**9
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11"], [])
    ctl, ds = _ctl(cp, clock, imds, "boot-1")
    assert cp.data is not None
    ctl.start(clock.now())
    ctl.tick(clock.now())
    got = ds.assign("p1", "eth0", "ns", clock.now())
    assert got is None, f"{got} handed to a pod 5 s after a start without a checkpoint"


def test_a_monotonic_reading_offset_at_the_restart_is_backed_by_the_wall_clock() -> None:
    # sound: a time namespace (or anything) that puts the new process's CLOCK_MONOTONIC ahead
    # on the same boot id ends the monotonic term early; the wall-clock term keeps the window
    clock = VirtualClock(1000.0)
    imds, cp = FakeImds(), MemoryCheckpoint()
    ctl, _ds = _ctl(cp, clock, imds, "boot-1")
    ctl.start(clock.now(), checkpoint_lost=True)
    ctl.tick(clock.now())
    clock.advance(10)
    ahead = VirtualClock(clock.now())
    ahead.step(-10_000)  # monotonic 10 000 s ahead of the wall's frame
    ahead._now += 10_000  # wall back to the truth
    assert ahead.now() == clock.now() and ahead.monotonic() == clock.monotonic() + 10_000
    ds2 = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ds2.restore()
    ctl2 = PoolController(
        ID, known("m5.large"), POOL, ds2, TIMING, metadata=imds, monotonic=ahead.monotonic, boot_id="boot-1"
    )
    ctl2.start(ahead.now())
    assert ctl2._in_rebuild_window(ahead.now())
    assert ctl2._window_until is not None
    assert abs(ctl2._window_until - ahead.monotonic() - (TIMING.release_timeout_s - 10)) < 1e-6
