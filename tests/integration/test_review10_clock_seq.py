"""Review 10, finding L1 (liveness), fixed: the agent's report seq follows its wall clock
(``PoolController._report``: ``max(last_seq + 1, int(now * 1000))``) and the allocator refused a
seq more than 2^20 ms (17.5 min) ahead of ``max(ledger seq, its own now)`` (``seq-too-far-ahead``,
meant against a poisoned seq). An honest node whose clock was that far ahead was never served;
and once its clock was set right, ``last_seq + 1`` kept it refused for as long as the clock had
been ahead (row 10 assumes no bound on a node's clock; the simulation's ``clock-skew`` draws at
most 300 s). The mirror case: after a checkpoint loss (``last_seq`` -1) on a node whose clock is
behind its previous process's seqs, every report was stale until the clock passed them, and a
stale report was dropped unanswered.

Now the bound is above every clock a valid report can carry (``SEQ_AHEAD_LIMIT``), and a report
below its instance's ledger seq is answered ``seq-floor`` with that seq, which the agent numbers
above (``Allocator._say_floors``, ``PoolController._take_seq_floor``)."""

from __future__ import annotations

from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from node_agent.records import NodeIdentity
from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.controller import ID, PRIMARY, TIMING
from warmpool.limits import known
from warmpool.pool import PoolConfig


def _controller(identity: NodeIdentity = ID, last_seq: int = -1) -> PoolController:
    """The production controller, its checkpoint holding ``last_seq`` (-1: none)."""
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    if last_seq >= 0:
        ds.set_meta("last_seq", last_seq)
    return PoolController(identity, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING)


def _seq(ctl: PoolController, node_now: float) -> int:
    """The seq the controller puts on the report it sends at its wall clock ``node_now``."""
    reports = ctl.tick(node_now)
    assert reports, "the controller sent no report"
    return reports[0].seq


def _agent_seq(node_now: float, last_seq: int = -1) -> int:
    """The seq the production controller puts on a report at its wall clock ``node_now``."""
    return _seq(_controller(last_seq=last_seq), node_now)


def test_a_node_whose_clock_is_20_minutes_ahead_is_served() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    seq = _agent_seq(w.clock.now() + 1200.0)
    out = w.deliver([w.report("n1", seq=seq, warm_ip=2, pending=2)])
    assert out.served == 1 and w.addresses("n1") >= 2, (
        f"an honest node 20 min ahead refused ({out}): its pods never get addresses"
    )


def test_a_node_whose_clock_was_set_back_after_a_checkpoint_loss_is_served() -> None:
    """No seq a fresh process computes from its own clock alone can be above what a process
    whose clock was further ahead sent: the rebuilt agent learns the ledger's seq from the
    allocator's answer to its first (stale) report, and its next report is served."""
    w = AllocatorWorld()
    iid = w.add_node("n1")
    now = w.clock.now()
    # the previous process ran 10 min ahead; the ledger has its seq
    out = w.deliver([w.report("n1", seq=_agent_seq(now + 600.0), warm_ip=1)])
    assert out.served == 1
    w.results("n1")
    w.clock.advance(30)
    # the checkpoint is lost and the node's clock set right (NTP at the reboot)
    agent = _controller(NodeIdentity(w.cluster, "n1", iid, "m5.large", "us-east-1a"))
    out = w.deliver([w.report("n1", seq=_seq(agent, w.clock.now()), warm_ip=3, pending=3)])
    assert out.stale == 1 and out.served == 0
    answers = w.results("n1")
    assert [a.kind for r in answers for a in r.actions] == ["seq-floor"]
    for r in answers:
        assert agent.apply_result(r, w.clock.now())
    w.clock.advance(2)
    seq = _seq(agent, w.clock.now())
    out = w.deliver([w.report("n1", seq=seq, warm_ip=3, pending=3)])
    assert out.served == 1, f"the rebuilt agent's report is stale ({out}): unserved for ~10 min"
    assert w.addresses("n1") >= 3


def test_a_node_whose_clock_was_ahead_and_set_right_with_its_checkpoint_is_served() -> None:
    """The other half of (a): the checkpoint kept, ``last_seq + 1`` goes on above the seqs the
    clock ahead gave, and is served (before: refused as long as the clock had been ahead)."""
    w = AllocatorWorld()
    iid = w.add_node("n1")
    agent = _controller(NodeIdentity(w.cluster, "n1", iid, "m5.large", "us-east-1a"))
    out = w.deliver([w.report("n1", seq=_seq(agent, w.clock.now() + 3600.0), warm_ip=1)])
    assert out.served == 1
    w.clock.advance(5)
    agent.retry_soon()  # virtual time is the controller's steady clock too: it went back
    seq = _seq(agent, w.clock.now())  # set right: seq follows the checkpoint's last_seq
    out = w.deliver([w.report("n1", seq=seq, warm_ip=3, pending=3)])
    assert out.served == 1 and w.addresses("n1") >= 3
