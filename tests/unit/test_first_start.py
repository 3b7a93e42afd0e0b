"""A start with no checkpoint and no pod wired on the host asks the allocator to confirm the
instance's first start (docs/safety.md, row 30; docs/agent.md, "A first start asks the
allocator"): until it is confirmed, what IMDS alone shows is held as offered, of unknown origin,
as after a lost checkpoint; confirmed, it is the node's pool. Only an answer to this start's own
wait counts, so a confirmation said to an earlier process never makes a later lost checkpoint
look like a first start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from node_agent.cniserver import RecordedPods
from node_agent.controller import FIRST_START_WAIT_S
from tests.helpers.agent_world import cni_add as _add
from tests.helpers.agent_world import give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, T0, Node, started_node
from tests.helpers.first_start import answer as _answer
from warmpool.messages import AllocationResult, PoolReport, Released, parse_report


@pytest.fixture
def node(tmp_path: Path) -> Any:
    yield from started_node(tmp_path)


def _unknown(report: PoolReport) -> set[str]:
    return {ip for o in report.release if o.unknown for ip in o.ips}


def _first(node: Node) -> tuple[Any, PoolReport]:
    agent = node.start()
    report = node.step()
    assert report is not None
    return agent, report


def test_a_first_start_asks_and_holds_what_imds_shows_as_offered(node: Node) -> None:
    agent, report = _first(node)
    assert report.first_start is True and report.restored_from == 0 and report.restore_wait
    assert json.loads(report.to_json())["first_start"] is True
    assert _unknown(report) == set(IPS)
    assert _add(agent, "p1") is None, "an address IMDS alone shows went to a pod before the confirmation"


def test_confirmed_what_the_node_booted_with_is_its_pool(node: Node) -> None:
    agent, report = _first(node)
    give(agent, _answer(report, confirmed=True))
    nxt = node.step()
    assert _add(agent, "p1") in IPS
    assert agent.controller.stats.first_starts_confirmed == 1
    later = nxt if nxt is not None else node.step(60)
    assert later is not None and later.restored_from is None and later.first_start is None
    assert later.epoch == 1
    assert not any(o.unknown for o in later.release)
    meta = node.meta()
    assert meta.get("offers_unknown") is None and meta.get("rebuilt_seq") is None


def test_not_confirmed_is_the_lost_checkpoint_way(node: Node) -> None:
    agent, report = _first(node)
    give(agent, _answer(report, confirmed=False))
    sent = node.step()
    assert sent is not None and sent.first_start is None and sent.restored_from is None
    assert _unknown(sent) == set(IPS)
    assert _add(agent, "p1") is None
    assert agent.controller.stats.first_starts_unconfirmed == 1


def test_no_answer_in_time_is_not_confirmed(node: Node) -> None:
    agent, _ = _first(node)
    node.step(FIRST_START_WAIT_S / 2)
    sent = [r for r in (node.step(FIRST_START_WAIT_S / 2 + 1), node.step(), node.step(30)) if r is not None]
    assert agent.controller.stats.first_starts_unconfirmed == 1
    assert sent and sent[-1].first_start is None
    assert _add(agent, "p1") is None


def test_a_confirmation_said_to_an_earlier_start_is_not_taken_after_a_lost_checkpoint(node: Node) -> None:
    """The danger: the first process was confirmed, offered x and had it unassigned; its
    checkpoint is lost; IMDS still lists x (it lags). The next process asks, and the earlier
    confirmation, delivered again (SQS), names another wait: x stays offered, never a pod's."""
    agent, report = _first(node)
    confirmed = _answer(report, confirmed=True)
    give(agent, confirmed)
    node.step()
    x = IPS[-1]
    released = AllocationResult(
        cluster=report.cluster,
        node=report.node,
        instance_id=report.instance_id,
        in_reply_to=agent.controller.last_seq,
        actions=[Released(eni_id=PRIMARY.eni_id, ips=[x])],
    )
    agent.ds.quarantine(PRIMARY.eni_id, [x], [], node.clock.now())
    give(agent, released)
    node.step()
    node.lose_checkpoint()  # IMDS still lists x
    agent, again = _first(node)
    assert again.first_start is True and again.restore_wait != report.restore_wait
    give(agent, confirmed)  # the earlier process's confirmation, delivered again
    node.step()
    for i in range(len(IPS)):
        assert _add(agent, f"p{i}") is None
    assert agent.controller.stats.first_starts_confirmed == 0


def test_a_restart_while_waiting_asks_as_a_restored_checkpoint(node: Node) -> None:
    """The wait is not checkpointed: the restart restores what the first start wrote (everything
    held as offered, of unknown origin) and asks whether that copy is current; the allocator has
    no row, or the fence this wait's answer raised, so it is not: the lost way, never an adoption."""
    _first(node)
    node.stop()
    node.clock.advance(5)
    _, report = _first(node)
    assert report.first_start is None and report.restored_from is not None
    assert _unknown(report) == set(IPS)


def test_pods_wired_on_the_host_or_a_recorded_pod_network_never_ask(tmp_path: Path) -> None:
    n = Node(tmp_path)
    n.pods.wired[("c0", "eth0")] = IPS[0]  # a pod of a process whose checkpoint is lost
    try:
        _, report = _first(n)
        assert report.first_start is None
    finally:
        n.stop()
    m = Node(tmp_path / "recorded")
    m.pods = RecordedPods("wp")  # type: ignore[assignment]  # no wiring to read: None
    try:
        m.start(WARMPOOL_POD_NETWORK="recorded")
        sent = m.step()
        assert sent is not None and sent.first_start is None
    finally:
        m.stop()


def test_the_report_contract() -> None:
    body: dict[str, Any] = {
        "schema": "warmpool.report/v1",
        "cluster": "demo",
        "node": "n1",
        "instance_id": "i-0123456789abcdef0",
        "instance_type": "m5.large",
        "availability_zone": "us-east-1a",
        "seq": 10,
        "sent_at": T0,
    }
    wait = "0123456789abcdef" * 2
    assert parse_report({**body, "restored_from": 0, "restore_wait": wait, "first_start": True}).first_start
    for bad in ({"restored_from": 3, "restore_wait": wait, "first_start": True}, {"first_start": True}):
        with pytest.raises(Exception) as err:
            parse_report({**body, **bad})
        assert "first start" in str(err.value) or "restored_from" in str(err.value), bad
    assert "first_start" not in json.loads(parse_report(body).to_json())
