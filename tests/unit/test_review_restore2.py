"""Hostile review 5 of the restore check, the agent's side (after R1-R6 were fixed). Each test is
a finding, strict xfail on the code under review. The node is tests/unit/test_restore_check.py's,
:class:`tests.helpers.first_start.Node` (an agent in-process, restartable on a state directory
that outlives it); "the copy" is the checkpoint file as it was at one moment, put back before a
restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node_agent.checkpoint import CheckpointWriteError
from node_agent.datastore import RELEASED_UNKNOWN
from tests.helpers.agent_world import cni, give
from tests.helpers.agent_world import cni_add as _add
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, Node
from tests.helpers.restore import restore_answer as _verdict


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = Node(tmp_path, adopt_launch_pool=False)
    n.start()
    try:
        ds = n.agent.ds
        for ip in IPS:
            ds.reclaim(PRIMARY.eni_id, [ip])
        assert _add(n.agent, "c1") is not None  # a running pod
        n.step()
        yield n
    finally:
        n.stop()


def _copy(node: Node) -> bytes:
    return (node.state / "checkpoint.json").read_bytes()


def _restart_from(node: Node, copy: bytes | None = None) -> tuple[Any, Any]:
    node.stop()
    if copy is not None:
        (node.state / "checkpoint.json").write_bytes(copy)
    node.clock.advance(5)
    agent = node.start()
    report = node.step()
    assert report is not None
    return agent, report


# review 5 V5, fixed: answers are bound to a wait id drawn at every start (RESTORE_WAIT_META).
def test_a_copy_taken_during_the_wait_does_not_take_the_first_wait_s_answer(node: Node) -> None:
    """P1 restores, sends its first restored report F1 (``restore_asked_from`` = F1 written before
    the send), and the disk is copied now (or loses every write after this one). The allocator
    answers F1 current; P1 uses its pool, a pod takes a free address and goes, the address is
    offered and unassigned (the ledger and the book move past the copy). The copy is put back: P2
    keeps waiting on the same checkpoint and, since the copy names F1 as this wait's first report,
    keeps F1 (``_await_restore_check``: ``waiting and isinstance(first, int)``). The answer to F1
    delivered again (SQS at least once; P1 died before deleting it) passes R3's check and P2 hands
    out what the copy has free. Asked, the allocator would say not current (its epoch is past the
    copy's)."""
    agent, first = _restart_from(node)
    r = first.restored_from
    assert r is not None
    copy = _copy(node)  # mid-wait: restore_unconfirmed and P1's wait id on disk
    assert b'"restore_wait"' in copy
    answer = _verdict(first, r, current=True)
    give(agent, answer)
    node.step()
    assert _add(agent, "p0") in IPS  # P1 uses the pool: the node's state moves past the copy
    node.step(30)
    assert cni(agent, "DEL", "p0").get("ok")
    node.step(30)
    agent, again = _restart_from(node, copy)
    assert again.restored_from == r and again.seq > first.seq
    assert again.restore_wait != first.restore_wait  # a new wait id at every start
    give(agent, answer)  # the answer to P1's report, delivered again
    node.step()
    assert _add(agent, "p1") is None, "a free address of the copy went to a pod on P1's answer"


# review 5 V6, fixed: the keys leave the datastore list in the write that marks them unknown.
def test_released_unknown_keys_survive_a_failed_checkpoint_write(node: Node) -> None:
    """After 'not current', c1's address a1 is marked ``unknown_on_release``. c1 goes (a DEL):
    ``Datastore.release`` quarantines a1 and lists it in ``released_unknown``. At the next pass
    ``_adopt_released_unknown`` calls ``take_released_unknown``, which sets the meta key to None in
    memory and then writes: the write fails (ENOSPC), CheckpointWriteError propagates before the
    keys reach ``PoolController._unknown``, and memory already says there are none. The flush
    later writes that. a1 is offered as an ordinary offer from then on: the allocator may hand it
    back (F1's backstop gone for it)."""
    agent = node.agent
    held = agent.ds.lookup("c1", "eth0")
    assert held is not None
    a1 = held.ip
    agent, report = _restart_from(node)
    give(agent, _verdict(report, report.restored_from, current=False))
    node.step()
    assert cni(agent, "DEL", "c1").get("ok")
    assert a1 in (agent.ds.meta.get(RELEASED_UNKNOWN) or [])
    store = agent.ds._store
    save = store.save

    def enospc(_snapshot: Any) -> None:
        raise OSError(28, "No space left on device")

    # the pass's own writes before it work; this one fails (the disk full at that moment)
    store.save = enospc
    try:
        with pytest.raises(CheckpointWriteError):
            agent.controller._adopt_released_unknown()
    finally:
        store.save = save
    node.step()
    node.step()
    assert a1 in agent.controller._unknown, f"{a1} released as of unknown origin, no longer marked so"


# review 5 V8, fixed: the wait id, not seqs, binds an answer to its wait.
def test_another_process_s_answer_is_refused_after_a_clock_set_back(node: Node) -> None:
    """The copy (seq R) is restored by P1 while the node's clock runs 90 s ahead: P1's first
    report has seq F1 (90 s ahead), the allocator answers it current, P1 uses its pool (a pod
    takes a free address and goes; it is offered and unassigned later). The clock is set right and
    the copy put back about a minute after F1: P2's seqs restart just above the real time, below
    F1, and pass it while P2 still waits. The answer to F1, delivered again then, replies to a seq
    P2 has sent (``in_reply_to <= last_seq``) at or after P2's first report, so
    ``_restore_checked`` takes it and P2 hands out what the copy has free."""
    copy = _copy(node)
    node.clock.step(90)  # P1's wall clock 90 s ahead
    agent, first = _restart_from(node)
    r = first.restored_from
    assert r is not None
    answer = _verdict(first, r, current=True)
    give(agent, answer)
    node.step()
    assert _add(agent, "p0") in IPS
    node.step(30)
    assert cni(agent, "DEL", "p0").get("ok")
    node.step(30)
    node.clock.step(-90)  # set right across the restart
    agent, again = _restart_from(node, copy)
    assert again.restored_from == r and again.seq < first.seq
    while agent.controller.last_seq < first.seq:  # P2 still waiting, its seqs pass F1
        node.step(2)
    assert agent.controller._restored_from == r
    give(agent, answer)  # P1's answer, delivered again
    node.step()
    assert _add(agent, "p1") is None, "a free address of the copy went to a pod on P1's answer"
