"""Two processes of one node that take the same ``seq-floor`` (review 16): each starts after a
lost checkpoint, sends a stale report, is answered the floor and reports three times more."""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds, one, result
from warmpool.limits import known
from warmpool.pool import PoolConfig


def lost_start(imds: FakeImds, at: float) -> PoolController:
    """A process started at ``at`` after its checkpoint was lost."""
    ds = Datastore(cooldown_s=0.0, checkpoint=MemoryCheckpoint())
    ds.restore()
    ds.add_eni(PRIMARY, 0.0)
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING, metadata=imds)
    ctl.start(at, checkpoint_lost=True)
    return ctl


def seqs_after_floor(ctl: PoolController, floor: int, at: float) -> list[int]:
    """Its stale report at ``at`` answered ``floor``; the seqs of its next three reports."""
    stale = one(ctl.tick(at))
    assert stale.seq < floor
    ctl.apply_result(result(stale.seq, {"kind": "seq-floor", "floor": floor}), at + 0.5)
    seqs = []
    for t in (at + 1.5, at + 3.0, at + 4.5):
        ctl.retry_soon()
        seqs.append(one(ctl.tick(t)).seq)
    return seqs


def two_processes(floor: int, first_at: float, second_at: float) -> tuple[list[int], list[int]]:
    """The seqs of two successive processes, each answered ``floor`` (the ledger not moved
    between: none of the first's later reports recorded yet)."""
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    return seqs_after_floor(lost_start(imds, first_at), floor, first_at), seqs_after_floor(
        lost_start(imds, second_at), floor, second_at
    )
