"""The reconciler and an eventually consistent DescribeInstances (issue 21): a running
instance missing from one read keeps its result queue and its ledger entry (before the fix
both went, and the allocator dead-lettered the instance's next reports: simulation seed 1,
``warmpool sim --seed 1``, its ``instance-unlisted`` event). Being missing is proof of an
end only once the instance was last seen alive longer ago than EC2 lists terminated ones."""

from __future__ import annotations

from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names

ABSENT_GRACE_S = 3600.0
"""About how long DescribeInstances lists a terminated instance (functions.reconciler.ABSENT_GRACE_S)."""


def _queue_exists(w: AllocatorWorld, iid: str) -> bool:
    urls = w.sqs.client().list_queues(QueueNamePrefix=names.result_queue("demo", iid)).get("QueueUrls", [])
    return bool(urls)


def test_a_running_instance_missing_from_describe_keeps_its_queue_and_entry() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=1)])
    iid = w.nodes["n1"]
    assert w.ledger.last_seq("demo", iid) == 1
    w.emu.unlist_instance(iid, w.clock.now() + 600)  # the view has not caught up (or lost it a while)
    out = w.reconciler().run()
    assert out.queues_deleted == [] and out.forgotten_nodes == []
    assert iid in out.absent_kept
    assert _queue_exists(w, iid)
    assert w.ledger.last_seq("demo", iid) == 1
    # once listed again, the node goes on being served: its next result reaches its queue
    w.clock.advance(601)
    w.deliver([w.report("n1", seq=2, warm_ip=2)])
    assert w.ledger.last_seq("demo", iid) == 2
    assert w.results("n1")


def test_a_new_instance_missing_from_describe_keeps_its_queue_before_its_first_entry() -> None:
    """The orphan sweep: a queue whose instance has no entry yet (made at its first report)
    and is missing from DescribeInstances is young, so it stays."""
    w = AllocatorWorld()
    w.add_node("n1")  # its result queue made, no report served yet: no ledger entry
    iid = w.nodes["n1"]
    assert w.ledger.last_seq("demo", iid) == -1 and _queue_exists(w, iid)
    w.emu.unlist_instance(iid, w.clock.now() + 600)
    out = w.reconciler().run()
    assert out.orphan_queues_deleted == [] and iid in out.absent_kept
    assert _queue_exists(w, iid)


def test_an_instance_missing_long_after_it_was_last_seen_alive_is_retired() -> None:
    """What the fix keeps: missing and last seen alive longer ago than EC2 lists terminated
    instances, the entry and the queue go (and a terminated one goes at once, as before)."""
    w = AllocatorWorld()
    w.add_node("n1")
    w.add_node("n2")
    w.deliver([w.report("n1", warm_ip=1), w.report("n2", warm_ip=1)])
    old, ended = w.nodes["n1"], w.nodes["n2"]
    w.emu.terminate_instance(ended)
    w.emu.unlist_instance(old, w.clock.now() + 10 * ABSENT_GRACE_S)
    out = w.reconciler().run()
    assert out.forgotten_nodes == [ended] and ended in out.queues_deleted
    assert _queue_exists(w, old) and w.ledger.last_seq("demo", old) == 1
    w.clock.advance(ABSENT_GRACE_S + 1)
    out = w.reconciler().run()
    assert out.forgotten_nodes == [old] and old in out.queues_deleted
    assert not _queue_exists(w, old)
