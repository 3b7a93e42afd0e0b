"""Review 10, finding L1 (liveness): the agent's report seq follows its wall clock
(``PoolController._report``: ``max(last_seq + 1, int(now * 1000))``) and the allocator refuses a
seq more than ``SEQ_AHEAD_LIMIT`` = 2^20 ms (17.5 min) ahead of ``max(ledger seq, its own now)``
(``seq-too-far-ahead``, meant against a poisoned seq). An honest node whose clock is that far ahead
is never served; and once its clock is set right, ``last_seq + 1`` keeps it refused for as long
as the clock was ahead (row 10 assumes no bound on a node's clock; the simulation's
``clock-skew`` draws at most 300 s). The mirror case: after a checkpoint loss (``last_seq`` -1)
on a node whose clock is behind its previous process's seqs, every report is stale until the
clock passes them, and a stale report is dropped unanswered."""

from __future__ import annotations

import pytest

from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.controller import ID, PRIMARY, TIMING
from warmpool.limits import known
from warmpool.pool import PoolConfig


def _agent_seq(node_now: float, last_seq: int = -1) -> int:
    """The seq the production controller puts on a report at its wall clock ``node_now``."""
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    if last_seq >= 0:
        ds.set_meta("last_seq", last_seq)
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING)
    reports = ctl.tick(node_now)
    assert reports, "the controller sent no report"
    return reports[0].seq


@pytest.mark.xfail(
    strict=True,
    reason="L1 open (liveness, never a second holder): a report's seq follows the node's wall clock "
    "and the intake refuses one 2^20 ms ahead; docs/safety.md, the tenth review",
)
def test_a_node_whose_clock_is_20_minutes_ahead_is_served() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    seq = _agent_seq(w.clock.now() + 1200.0)
    out = w.deliver([w.report("n1", seq=seq, warm_ip=2, pending=2)])
    assert out.served == 1 and w.addresses("n1") >= 2, (
        f"an honest node 20 min ahead refused ({out}): its pods never get addresses"
    )


@pytest.mark.xfail(
    strict=True,
    reason="L1 open (liveness, never a second holder): a report's seq follows the node's wall clock "
    "and the intake refuses one 2^20 ms ahead; docs/safety.md, the tenth review",
)
def test_a_node_whose_clock_was_set_back_after_a_checkpoint_loss_is_served() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    now = w.clock.now()
    # the previous process ran 10 min ahead; the ledger has its seq
    out = w.deliver([w.report("n1", seq=_agent_seq(now + 600.0), warm_ip=1)])
    assert out.served == 1
    w.clock.advance(30)
    # the checkpoint is lost and the node's clock set right (NTP at the reboot)
    seq = _agent_seq(w.clock.now())
    out = w.deliver([w.report("n1", seq=seq, warm_ip=3, pending=3)])
    assert out.served == 1, f"the rebuilt agent's report is stale ({out}): unserved for ~10 min"
