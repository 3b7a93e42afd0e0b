"""Issue 11, defect 6: the reconciler's bookkeeping of terminated nodes is
conditional (a reused node name keeps the new instance's entry) and ordered
(a result queue that could not be deleted keeps its ledger entry, so the next
run tries again instead of orphaning the queue)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from functions.reconciler import Reconciler
from tests.helpers.allocate_world import AllocatorWorld, moto_dynamo
from warmpool import names


def _rec(w: AllocatorWorld, *, ledger: Any = None, sqs: Any = None) -> Reconciler:
    return w.reconciler(ledger=ledger or w.ledger, sqs=sqs or w.sqs.client())


class _NameReusedAfterRead:
    """The ledger, with a new instance taking the node's name right after the
    reconciler has read the entries (a report served by a concurrent invocation)."""

    def __init__(self, inner: Any, node: str, instance_id: str, seq: int, now: float) -> None:
        self._inner = inner
        self._new = (node, instance_id, seq, now)

    def entries(self, cluster: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = self._inner.entries(cluster)
        node, iid, seq, now = self._new
        assert self._inner.record(cluster, node, seq, {"instance_id": iid, "status": "served", "actions": []}, now)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _reused(w: AllocatorWorld) -> None:
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=1)])
    old = w.nodes["n1"]
    w.emu.terminate_instance(old)
    # A new instance takes the name: rows are keyed by instance, so it has its own.
    new = w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=1)])
    out = _rec(w).run()
    assert out.forgotten_nodes == [old]
    assert w.ledger.last_seq("demo", new) == 1 and w.ledger.entries("demo")[new]["instance_id"] == new
    assert w.ledger.last_seq("demo", old) == -1
    # An entry served right after the reconciler read it (a concurrent invocation) is kept.
    w.emu.terminate_instance(new)
    out = _rec(w, ledger=_NameReusedAfterRead(w.ledger, new, new, 9, w.clock.now())).run()
    assert out.forgotten_nodes == []
    assert w.ledger.last_seq("demo", new) == 9


def test_a_node_name_reused_by_a_new_instance_keeps_its_entry() -> None:
    _reused(AllocatorWorld())


def test_a_node_name_reused_by_a_new_instance_keeps_its_entry_dynamodb() -> None:
    from moto import mock_aws

    with mock_aws():
        _reused(AllocatorWorld(dynamo=moto_dynamo()))


class _DeleteQueueFails:
    def __init__(self, inner: Any, times: int) -> None:
        self._inner = inner
        self.left = times

    def delete_queue(self, **kw: Any) -> Any:
        if self.left > 0:
            self.left -= 1
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not now"}}, "DeleteQueue")
        return self._inner.delete_queue(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_queue_that_could_not_be_deleted_keeps_the_entry_and_is_retried() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.add_node("n2")
    w.deliver([w.report("n1", warm_ip=1), w.report("n2", warm_ip=1)])
    for n in ("n1", "n2"):
        w.emu.terminate_instance(w.nodes[n])
    sqs = _DeleteQueueFails(w.sqs.client(), times=1)
    out = _rec(w, sqs=sqs).run()  # must not raise: one node's failure stops nothing else
    assert out.forgotten_nodes == [w.nodes["n2"]] and out.queues_deleted == [w.nodes["n2"]]
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1  # still known: the queue is not orphaned
    queue = names.result_queue("demo", w.nodes["n1"])
    assert w.sqs.client().get_queue_url(QueueName=queue)["QueueUrl"]
    again = _rec(w, sqs=sqs).run()
    assert again.forgotten_nodes == [w.nodes["n1"]] and again.queues_deleted == [w.nodes["n1"]]
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == -1
