"""A restored checkpoint waits for the allocator's word that it is the node's newest state
(docs/safety.md, row 12; hostile review 1, finding C1): every report says which checkpoint
(``restored_from``), no free address goes to a pod until a ``restore-checked`` answer says it
is current, and "not current" (or no answer in time) is handled as a lost checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from node_agent.controller import RESTORE_META, RESTORE_WAIT_S
from tests.helpers.agent_world import cni, give
from tests.helpers.agent_world import cni_add as _add
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, T0, Node
from tests.helpers.restore import restore_answer as _verdict
from warmpool.messages import AllocationResult, PoolReport, RestoreChecked, parse_report

REPORT_BODY: dict[str, Any] = {
    "schema": "warmpool.report/v1",
    "cluster": "demo",
    "node": "n1",
    "instance_id": "i-0123456789abcdef0",
    "instance_type": "m5.large",
    "availability_zone": "us-east-1a",
    "seq": 10,
    "sent_at": T0,
}


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


def _restart(node: Node) -> tuple[Any, PoolReport, int]:
    seq = node.last_seq_on_disk()
    node.stop()
    node.clock.advance(5)
    agent = node.start()
    report = node.step()
    assert report is not None
    return agent, report, seq


def test_a_first_start_asks_nothing_by_default(tmp_path: Path) -> None:
    """``WARMPOOL_ADOPT_LAUNCH_POOL`` off (the default): no checkpoint, and no ask of any kind;
    what IMDS alone shows stays held as offered, of unknown origin."""
    n = Node(tmp_path, adopt_launch_pool=False)
    n.start()
    try:
        report = n.step()
        assert report is not None and report.first_start is None and report.restored_from is None
        assert report.release, "the addresses it booted with are offered, of unknown origin"
    finally:
        n.stop()


def test_a_first_start_asks_about_a_first_start_not_a_checkpoint(tmp_path: Path) -> None:
    """No checkpoint to restore, ``WARMPOOL_ADOPT_LAUNCH_POOL`` on: the ask is a first start's
    (tests/unit/test_first_start.py), and once answered, reports carry neither (an older
    allocator takes them)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    n.start(WARMPOOL_ADOPT_LAUNCH_POOL="true")
    try:
        report = n.step()
        assert report is not None and report.first_start is True and report.restored_from == 0
        give(n.agent, _verdict(report, 0, current=False))
        later = n.step()
        assert later is not None and later.restored_from is None
        assert "restored_from" not in json.loads(later.to_json())
    finally:
        n.stop()


def test_a_restart_withholds_free_addresses_until_the_allocator_says_current(node: Node) -> None:
    agent, report, seq = _restart(node)
    assert report.restored_from == seq
    assert _add(agent, "c1") is not None  # the running pod's repeated ADD: its own address
    assert _add(agent, "p1") is None  # nothing free goes to a new pod meanwhile
    assert node.agent.ds.pending(node.clock.now()) == 1  # counted as waiting demand
    give(agent, _verdict(report, seq, current=True))
    nxt = node.step()
    assert _add(agent, "p1") in IPS
    assert agent.controller.stats.restores_current == 1
    later = nxt if nxt is not None else node.step(60)
    assert later is not None and later.restored_from is None
    assert json.loads((node.state / "checkpoint.json").read_text())["meta"].get(RESTORE_META) is None


def test_every_report_names_the_checkpoint_until_the_answer(node: Node) -> None:
    _, _, seq = _restart(node)
    again = [r for r in (node.step(s) for s in (3, 6, 12, 20)) if r is not None]
    assert again, "an unanswered restore is asked again (the retry back-off)"
    assert all(r.restored_from == seq for r in again)


def test_not_current_offers_every_free_address_back_as_of_unknown_origin(node: Node) -> None:
    agent, report, seq = _restart(node)
    free = {a.ip for e in agent.ds.enis() for a in e.addrs.values() if not a.in_use}
    assert free
    give(agent, _verdict(report, seq, current=False))
    sent = node.step()
    assert sent is not None and sent.restored_from is None
    offered = {ip for o in sent.release if o.unknown for ip in o.ips}
    assert offered == free, (offered, free)
    assert _add(agent, "c1") is not None  # the running pod keeps its address
    assert _add(agent, "p1") is None  # and nothing the copy had free goes to a pod
    assert agent.controller.stats.restores_stale == 1


def test_no_answer_in_time_is_not_current(node: Node) -> None:
    agent, _, _ = _restart(node)
    node.step(RESTORE_WAIT_S / 2)
    assert _add(agent, "p1") is None
    sent = [r for r in (node.step(RESTORE_WAIT_S / 2 + 1), node.step()) if r is not None]
    assert agent.controller.stats.restores_stale == 1
    assert sent and sent[-1].restored_from is None
    assert any(o.unknown for o in sent[-1].release)
    assert _add(agent, "p1") is None  # still nothing the copy had free


def test_a_restart_before_the_answer_asks_about_the_first_checkpoint_again(node: Node) -> None:
    _, _, seq = _restart(node)
    node.step(3)  # more reports, last_seq on disk moves on
    assert node.last_seq_on_disk() > seq
    agent, report, _ = _restart(node)
    assert report.restored_from == seq, "its later seq says nothing of the checkpoint it restored"
    give(agent, _verdict(report, report.seq - 1, current=True))  # about another checkpoint
    node.step()
    assert _add(agent, "p1") is None
    give(agent, _verdict(report, seq, current=True))
    node.step()
    assert _add(agent, "p1") in IPS


def test_a_pod_deleted_while_waiting_frees_its_address_for_later(node: Node) -> None:
    agent, report, seq = _restart(node)
    assert cni(agent, "DEL", "c1").get("ok")
    assert _add(agent, "p1") is None
    give(agent, _verdict(report, seq, current=True))
    node.step()
    assert _add(agent, "p1") in IPS


def test_the_report_contract() -> None:
    body = REPORT_BODY
    wait = "0123456789abcdef" * 2
    assert parse_report({**body, "restored_from": 9, "restore_wait": wait}).restored_from == 9
    for bad in (10, 11, -1, "9", 9.0):
        with pytest.raises(Exception) as err:
            parse_report({**body, "restored_from": bad, "restore_wait": wait})
        assert "restored_from" in str(err.value), bad
    for alone in ({"restored_from": 9}, {"restore_wait": wait}, {"restored_from": 9, "restore_wait": "XYZ"}):
        with pytest.raises(Exception) as err:
            parse_report({**body, **alone})
        assert "restore" in str(err.value), alone
    with pytest.raises(ValidationError):
        RestoreChecked(restored_from=-1, wait=wait, current=True, epoch=1)


def test_the_answer_s_epoch_is_carried_by_every_report_after_it_and_kept_across_a_restart(node: Node) -> None:
    agent, report, seq = _restart(node)
    assert report.epoch is None
    give(agent, _verdict(report, seq, current=True))  # epoch 1
    sent = [r for r in (node.step(), node.step(60)) if r is not None]
    assert sent and all(r.epoch == 1 for r in sent)
    agent, again, seq2 = _restart(node)
    assert again.epoch == 1 and again.restored_from == seq2


def test_release_book_epoch_round_trip_and_fence() -> None:
    from warmpool.release_book import ReleaseBook, Taken

    base = REPORT_BODY
    for book in (
        ReleaseBook(),
        ReleaseBook(epoch=3, fenced_until=T0),
        ReleaseBook(taken=(Taken("eni-1", "10.0.0.9", 4),), epoch=2, fenced_until=T0 + 0.5),
        ReleaseBook(epoch=2, fenced_until=T0, raised_for="f" * 32, raised_current=True),
    ):
        assert ReleaseBook.loads(book.dumps(), 0) == book
    assert ReleaseBook().dumps() == "[]"  # an older reader still reads a book with no epoch
    for bad in (
        '{"taken":[],"given":[],"epoch":-1,"fenced_until":0}',
        '{"taken":[],"given":[],"epoch":true,"fenced_until":0}',
        '{"taken":[],"given":[],"epoch":1,"fenced_until":-5}',
        '{"taken":[],"given":[],"epoch":1}',
        '{"taken":[],"given":[],"epoch":1,"fenced_until":0,"raised_for":"","raised_current":1}',
    ):
        with pytest.raises(ValueError):
            ReleaseBook.loads(bad, 0)
    cases = [  # (book epoch, report epoch, restored_from, seconds before the fence lapses, fenced)
        (0, None, None, 10, False),
        (1, None, None, 10, True),
        (2, 1, None, 10, True),
        (2, 2, None, 10, False),
        (2, 3, None, 10, False),
        (2, None, 9, 10, False),  # a restored report is answered, not fenced
        (1, None, None, 0, False),  # lapsed: no offer of the process before can be acted on now
        (2, 1, None, -5, False),
    ]
    for book_epoch, epoch, restored, left, fenced in cases:
        extra: dict[str, Any] = {k: v for k, v in (("epoch", epoch), ("restored_from", restored)) if v is not None}
        if restored is not None:
            extra["restore_wait"] = "f" * 32
        book = ReleaseBook(epoch=book_epoch, fenced_until=T0 + left)
        assert book.fences(parse_report({**base, **extra}), T0) is fenced, (book_epoch, epoch, left)


def test_an_agent_that_missed_the_answer_takes_the_epoch_from_a_fenced_reply(node: Node) -> None:
    """The answer was lost (the invocation died before pushing it): the wait ends the lost way,
    and the reports after it, without the epoch the answer raised, are dropped by the allocator
    and answered ``fenced``; the agent carries that epoch from then on."""
    from warmpool.messages import Fenced

    agent, _, _ = _restart(node)
    reports = [r for r in (node.step(RESTORE_WAIT_S + 1), node.step()) if r is not None]
    sent = reports[-1]
    assert sent.restored_from is None and sent.epoch is None
    give(
        agent,
        AllocationResult(
            cluster=sent.cluster,
            node=sent.node,
            instance_id=sent.instance_id,
            in_reply_to=sent.seq,
            actions=[Fenced(epoch=3)],
        ),
    )
    after = node.step()
    assert after is not None and after.epoch == 3  # and reported again at once


def test_the_verdict_is_said_again_only_to_the_wait_that_raised_the_epoch_while_the_fence_holds() -> None:
    from warmpool.release_book import ReleaseBook

    wait = {"restored_from": 9, "restore_wait": "f" * 32}
    book = ReleaseBook(epoch=2, fenced_until=T0 + 10, raised_for="f" * 32, raised_current=True)
    assert book.verdict_for(parse_report({**REPORT_BODY, **wait}), T0) is True
    assert book.verdict_for(parse_report({**REPORT_BODY, **wait, "restore_wait": "e" * 32}), T0) is None
    assert book.verdict_for(parse_report({**REPORT_BODY, **wait}), T0 + 10) is None
    assert ReleaseBook(epoch=2, fenced_until=T0 + 10).verdict_for(parse_report({**REPORT_BODY, **wait}), T0) is None
