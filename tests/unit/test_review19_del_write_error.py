"""Review 19, W1 (liveness): a DEL is answered success while its checkpoint write fails
(``CniService._delete``: "Safe to answer DEL: until the write works the disk only says the address
is still held"). That is safe for the pod's own address: a later start finds the pod gone from the
host and releases its record (``release_unwired``), and memory writes the release at the next
flush. It is not so for the start's hold reason (``HOLD_REASON``), which the DEL alone may end
(``CniService._end_holds_of``) and which nothing on the host can end after it (a veth gone is not a
pod gone: seed 732; a restart unites the old reason with the routeless links it reads,
``note_hold_reason``). Two ways the DEL's end of the reason is lost while the DEL is answered:

* **W1a**: ``ds.release`` (a restored pod's record) or ``ds.release_recovered`` raises
  ``CheckpointWriteError`` before ``_end_holds_of`` runs: it never runs (the ``try`` around the
  three catches the error and answers), so the reason keeps the pod's veth even in memory;
* **W1b**: ``_end_holds_of``'s own write fails (memory holds the change), and the agent stops before
  a pass's flush writes it (a crash, an OOM kill, a node drain): the disk's reason still names the
  DELeted pod's veth, and the restart unites it with the host's routeless links.

Either way the runtime never DELs that attachment again (its DEL was answered), so the hold of every
address (``HELD_ALL_META``) never ends: on a node at its ENI limit new pods wait for as long as the
checkpoint lasts, the state these commits were made to end. The contrast (the same DEL, the write
working) is ``tests/unit/test_hold_lifted.py``'s first test.

Suggested fix: call ``_end_holds_of`` whatever the release's write did (its own ``try``, or first),
and answer a DEL that changed the reason only once it is on disk (``ds.flush()`` at the DEL's end, a
write error failing the DEL with code 11 as an ADD's does: the runtime retries it, and the retry
must flush even when it finds nothing left to change).

Fixed so: ``_end_holds_of`` runs whatever the release's write did, and a DEL that ended a hold (or
follows one whose write failed) is answered only once the checkpoint is written; else code 11 and
the runtime's retry (on this process or the next) writes it."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest

from node_agent.controller import HELD_ALL_META
from node_agent.datastore import HOLD_REASON
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, writes_fail

X, Y = "10.0.0.50", "10.0.0.51"
VETH1 = host_veth_name("pod1", "eth0")


def _passes(n: Node, k: int) -> None:
    for _ in range(k):
        n.step(30)


@pytest.mark.parametrize(
    "writes",
    [
        "work",  # the contrast: passes
        "fail",  # fixed: _end_holds_of runs whatever the release's write did
    ],
)
def test_a_restored_routeless_pods_del_whose_release_write_fails_still_ends_the_hold(
    tmp_path: Path, writes: str
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        host.flush_routes()  # pod1 runs on: its veth pair, X in its namespace; no route, no rule
        host.flush_rules()
        agent = answered_start(n, True)  # its own checkpoint, current
        assert agent.ds.meta.get(HELD_ALL_META) is not None, "setup: the restore holds every address"
        assert agent.ds.meta.get(HOLD_REASON) == [VETH1], "setup: pod1's routeless veth is the reason"
        with writes_fail(agent) if writes == "fail" else nullcontext():
            answered = cni(agent, "DEL", "pod1")["ok"]
        # Fixed: a DEL that ended a hold is answered only once that is on disk; refused (code 11),
        # the runtime sends it again, the writes working
        assert answered == (writes == "work"), "a DEL answered before the end of the hold is on disk"
        if not answered:
            assert cni(agent, "DEL", "pod1")["ok"], "the runtime's retry, the writes working"
        assert host.holders(X) == [], "setup: pod1 is gone, and the runtime never DELs it again"
        _passes(n, 8)  # the writes work again: the flush writes what memory holds
        assert not agent.ds.dirty
        assert agent.ds.meta.get(HELD_ALL_META) is None, (
            f"every address still held for the reason {agent.ds.meta.get(HOLD_REASON)}: pod1's DEL was "
            f"answered, no pod of that veth runs, and nothing will take it out"
        )
    finally:
        n.stop()


def test_a_rebuilds_routeless_pods_del_answered_before_its_write_still_ends_the_hold_after_a_restart(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "pod1") == X
        n.step(30)
        host.flush_routes()
        host.flush_rules()
        n.lose_checkpoint()
        agent = n.start()  # the rebuild: every address held, for pod1's routeless veth
        assert agent.ds.recovered_holder(X) == "?", "setup: the rebuild holds every address"
        assert agent.ds.meta.get(HOLD_REASON) == [VETH1]
        with writes_fail(agent):
            assert not cni(agent, "DEL", "pod1")["ok"], "answered before the end of the hold is on disk"
        assert agent.ds.meta.get(HOLD_REASON) == [], "setup: memory holds the DEL's end of the reason"
        assert host.holders(X) == []
        agent = answered_start(n, True)  # stopped before a pass flushed it (a crash), started again
        assert cni(agent, "DEL", "pod1")["ok"], "the runtime's retry of the unanswered DEL"
        _passes(n, 8)
        assert agent.ds.meta.get(HELD_ALL_META) is None, (
            f"every address still held for the reason {agent.ds.meta.get(HOLD_REASON)}: pod1's DEL was "
            f"answered before its write, and no DEL will name {VETH1} again"
        )
    finally:
        n.stop()
