"""Review 16 (attack on the L1 fix): a ``seq-floor`` whose floor lies within
``SEQ_FLOOR_GAP_MS`` of the seq schema's top (2^62) moves the agent's seq past the top for good.

Since L1 the intake lets a seq be 2^47 ms ahead of its row (``functions/intake.py``
``SEQ_AHEAD_LIMIT``): some 2^15 served reports of the node's own bring its row near 2^62 (a
compromised agent, or any process of the node that numbers that way). The docs call that
harming only itself. But the agent's answer to the floor (``PoolController._take_seq_floor``)
sets ``last_seq`` and the checkpointed ``seq_offset_ms`` to ``floor + 2^31`` unchecked, so every
later report fails ``PoolReport``'s ``seq <= 2^62`` (``build_report`` logs "cannot build a valid
report" and sends nothing), and since both values are checkpointed a restart of a clean agent
(the compromise removed, the ledger row since retired or expired) still cannot report: the node
is never served again until someone deletes its checkpoint by hand. Before L1 the agent never
jumped; its reports stayed valid (stale until the row went)."""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, one, result
from warmpool.limits import known
from warmpool.pool import PoolConfig

TOP = 2**62


def _ctl(cp: MemoryCheckpoint) -> tuple[Datastore, PoolController]:
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.restore()
    if not ds.enis():
        ds.add_eni(PRIMARY, 0.0)
    return ds, PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING)


def test_a_floor_near_the_seq_top_never_leaves_the_agent_unable_to_report() -> None:
    cp = MemoryCheckpoint()
    ds, ctl = _ctl(cp)
    first = one(ctl.tick(100.0))
    ctl.apply_result(result(first.seq, {"kind": "seq-floor", "floor": TOP - 10}), 100.5)
    ctl.retry_soon()
    assert ctl.tick(101.5), f"no report built after the floor (the agent's seq {ctl.last_seq}, the top {TOP})"
    ds.flush()
    # a restart of the agent (say, the compromise cleaned up; the row since retired)
    _, again = _ctl(MemoryCheckpoint(cp.data))
    again.start(200.0)
    reports = again.tick(200.0)
    assert reports and reports[0].seq <= TOP, "a restarted agent cannot build a report: never served again"
