"""Hostile review of f75a5ca (a restored checkpoint waits for the allocator's word, C1): the
agent's side. Each test is a finding, strict xfail on the code under review.

The node is tests/unit/test_restore_check.py's, :class:`tests.helpers.first_start.Node` (an
agent in-process, restartable on a state directory that outlives it); "the copy" is the
checkpoint file as it was at one moment, put back before a restart (a backup restored, a disk
that lost its last writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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


def _copy(node: Node) -> tuple[bytes, int]:
    """The checkpoint as it is now, and its last seq."""
    return (node.state / "checkpoint.json").read_bytes(), node.last_seq_on_disk()


def _restart_from(node: Node, copy: bytes | None = None) -> tuple[Any, Any]:
    """Stop the agent, put ``copy`` back (None: the disk as the agent left it), start again;
    the agent and its first report."""
    node.stop()
    if copy is not None:
        (node.state / "checkpoint.json").write_bytes(copy)
    node.clock.advance(5)
    agent = node.start()
    report = node.step()
    assert report is not None
    return agent, report


# review R3, fixed: an answer counts only if it replies to this wait's first report or a later one
# (node_agent/controller.py::RESTORE_ASKED_META).
def test_a_current_answer_to_a_report_this_restore_never_sent_is_not_taken(node: Node) -> None:
    """The copy (seq R) is restored once: P1 asks, the allocator answers "current" to P1's report,
    P1 uses its pool, offers addresses, has them unassigned (the ledger moves past R). The same
    copy is put back again (the backup restored twice, the disk rolled back again) and P2 asks
    about R too. The answer P1 got, delivered again (SQS delivers at least once; P1 died before
    deleting it, or a copy of the message is late), replies to a seq below P2's first report, so
    the agent's in_reply_to check lets it through, and its restored_from is R: P2 takes it as its
    own answer and hands out what the copy has free. The allocator would have said not current."""
    copy, r = _copy(node)
    agent, first = _restart_from(node)
    assert first.restored_from == r
    answer = _verdict(first, r, current=True)
    give(agent, answer)
    node.step()
    assert _add(agent, "p0") in IPS  # P1's pool is in use: the node's state moves on past R
    node.step(30)
    assert cni(agent, "DEL", "p0").get("ok")  # gone again (so the copy lacks no running pod)
    node.step(30)
    agent, again = _restart_from(node, copy)
    assert again.restored_from == r and again.seq > first.seq
    give(agent, answer)  # the answer to P1's report, delivered again
    node.step()
    assert _add(agent, "p1") is None, "a free address of the copy went to a pod on another process's answer"


# review R4, fixed: 'not current' marks what pods hold; each address goes to the offers, as of
# unknown origin, when its pod lets it go (node_agent/controller.py::UNKNOWN_ON_RELEASE_META).
def test_not_current_also_covers_an_address_held_in_the_copy_by_a_pod_gone_since(node: Node) -> None:
    """The copy has pod c1 holding a1. After the copy, c1 was deleted, a1 freed and offered in a
    later report (unassigned, or about to be: the very C1 case). The copy passes the wiring check
    (it lacks no running pod: c1 is not running). The allocator says not current: the free
    addresses are offered as of unknown origin, but a1 is still "held" by c1, so it is not among
    them. CNI GC (the runtime does not list c1) releases it, and a1 is free for the next ADD while
    IMDS still lists it."""
    agent = node.agent
    held = agent.ds.lookup("c1", "eth0")
    assert held is not None
    a1 = held.ip
    copy, r = _copy(node)
    assert cni(agent, "DEL", "c1").get("ok")  # after the copy: c1 goes, a1 is freed (then offered)
    node.step()
    agent, report = _restart_from(node, copy)
    assert report.restored_from == r
    # the copy's c1, wired nowhere on the host: released at the start (simulation seed 3619;
    # before, kept until a GC or DEL that no runtime sends), a1 free in the copy and withheld
    # until the restore check's answer
    assert agent.ds.lookup("c1", "eth0") is None
    give(agent, _verdict(report, r, current=False))
    node.step()
    node.clock.advance(120)
    gc = agent.cni.handle(
        {
            "command": "GC",
            "config": {
                "cniVersion": "1.1.0",
                "name": "warmpool",
                "type": "warmpool-cni",
                "cni.dev/valid-attachments": [],
            },
        }
    )
    assert gc.get("ok"), gc
    node.step()
    got = _add(agent, "p1")
    assert got != a1, f"{a1}, offered after the copy, went to a new pod after 'not current'"
