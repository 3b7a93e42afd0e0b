"""The ``add-cut`` draws: the agent killed in the middle of a CNI ADD, after the pod's veth pair is
made and before its ``/32`` route and pod rule (``simulation.node.SimPods.setup``), with the
assignment on disk (``written``: the agent's order, ``Datastore.assign`` writing before
``setup_pod``) or not (``unwritten``); the agent starts again and the runtime retries the ADD of the
same container with no DEL between (tests/integration/test_agent_crash.py::
test_kill_9_mid_add_loses_and_doubles_nothing, which failed about half the time so).

The start finds a pod veth with no route that no record names and holds every free address for it
(``node_agent.agent.hold_doubtful``; the hold's reason, ``HOLD_REASON``, names that veth), which
only the pod's DEL ends (``CniService._end_holds_of``). The retried ADD gets an address (its own
record's, or one the allocator grants after: a start's hold does not take grants), its set-up
routes the veth, and the node holds its free addresses for a pod whose address it knows, until
that pod's DEL; where no address can come, the node's pods wait (the integration test's
deadlock, where nothing grants more).

* Seed 18, only its ``add-cut`` (``--keep 19``: n1, ``written``): n1's first pod's ADD cut, its
  record on disk; the retried ADD answered with the record's address at once. ``hold-unfounded``
  at the end: 10.0.0.10 and 10.0.0.11 held by ``?`` for a veth routed since.
* Seed 32, only its ``add-cut`` (``--keep 16``: n2, ``unwritten``): the retried ADD waits for a
  grant, then runs; ``hold-unfounded``: four addresses held by ``?``.
"""

from __future__ import annotations

from typing import Any

import pytest

from node_agent.hostnet import host_veth_name
from simulation.base import AgentKilled
from simulation.kinds import AddCut
from simulation.node import SimPods
from simulation.runner import plan_for, run_seed
from simulation.schedule import CUT_KINDS, FAULT_KINDS, draw

pytestmark = pytest.mark.sim


def test_seed_18_an_add_cut_after_its_assignment_was_written_holds_nothing_for_good() -> None:
    r = run_seed(18, [19], shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("add-cut:written") == 1


def test_seed_32_an_add_cut_before_its_assignment_reached_the_disk_holds_nothing_for_good() -> None:
    r = run_seed(32, [16], shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("add-cut:unwritten:lost") == 1


class _World:
    version = 0

    def violation(self, invariant: str, detail: str) -> None:
        raise AssertionError(f"{invariant}: {detail}")


def test_a_cut_set_up_leaves_the_veth_with_no_route_rule_or_address_and_the_retry_reuses_it() -> None:
    pods = SimPods(_World(), "n0")  # type: ignore[arg-type]
    cut: list[tuple[str, str]] = []

    def kill(cid: str, ifname: str) -> Any:
        cut.append((cid, ifname))
        raise AgentKilled("cut")

    pods.cut = kill
    with pytest.raises(AgentKilled):
        pods.setup("/var/run/netns/c1", "eth0", "c1", "10.0.0.5", 2, 9001)
    veth = host_veth_name("c1", "eth0", pods.prefix)
    assert cut == [("c1", "eth0")] and pods.cut is None
    assert pods.veth_of == {("c1", "eth0"): veth}
    assert not pods.routes and not pods.rules and not pods.wired
    seen = pods.host_wiring()
    assert veth in seen.veths and not seen.pods and not seen.stale
    # the retried ADD: the pair is there, set up as setup_pod sets a half-made one up
    pods.setup("/var/run/netns/c1", "eth0", "c1", "10.0.0.5", 2, 9001)
    assert pods.routes == {"10.0.0.5": veth} and pods.rules == {"10.0.0.5"}
    assert pods.host_wiring().pods == {"10.0.0.5": veth}


def test_a_cut_is_armed_for_an_attachment_with_no_veth_only() -> None:
    """A set-up of an attachment whose veth is there (a second ADD of a running pod) makes no pair:
    the cut waits for the next that does."""
    pods = SimPods(_World(), "n0")  # type: ignore[arg-type]
    pods.setup("/var/run/netns/c1", "eth0", "c1", "10.0.0.5", 2, 9001)

    def kill(cid: str, ifname: str) -> Any:
        raise AgentKilled(cid)

    pods.cut = kill
    pods.setup("/var/run/netns/c1", "eth0", "c1", "10.0.0.5", 2, 9001)
    assert pods.cut is kill
    with pytest.raises(AgentKilled, match="c2"):
        pods.setup("/var/run/netns/c2", "eth0", "c2", "10.0.0.6", 2, 9001)


@pytest.mark.parametrize("seed", range(0, 40))
def test_add_cut_is_drawn_last_so_every_earlier_event_keeps_its_index(seed: int) -> None:
    whole = plan_for(seed).events
    without = plan_for(seed, without=frozenset(CUT_KINDS)).events
    assert whole[: len(without)] == without
    assert all(e.kind == "add-cut" for e in whole[len(without) :])
    assert FAULT_KINDS[-1] == "add-cut"


def test_add_cut_is_drawn_in_about_one_seed_in_four_with_both_disks() -> None:
    cuts = [[e for e in draw(s).events if isinstance(e, AddCut)] for s in range(400)]
    assert 70 <= sum(bool(c) for c in cuts) <= 130
    every = [e for c in cuts for e in c]
    assert {e.written for e in every} == {True, False}
    assert all(30 <= e.at < 420 and 0.5 <= e.down <= 30 for e in every)
