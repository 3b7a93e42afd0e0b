"""Issue 11, defect 4: the allocator's failure modes.

* a throttled DescribeInstances / DescribeNetworkInterfaces never escapes
  ``handle_batch``: the batch is deferred unread, with the AIMD cut recorded;
* the invocation's deadline (the Lambda's remaining time) stops new work a
  margin before it, and what was not started is deferred;
* the lease outlives the function timeout;
* ledger rows DynamoDB left in ``UnprocessedKeys`` defer their reports, never
  read as "no row" (seq -1).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws
from pydantic import ValidationError

from functions.settings import LEASE_TTL_MARGIN_S, Settings
from functions.stores import DynamoLedger
from tests.helpers.allocate_world import AllocatorWorld, moto_dynamo

# --- Describe throttles -----------------------------------------------------------


@pytest.mark.parametrize("action", ["DescribeInstances", "DescribeNetworkInterfaces"])
def test_a_throttled_describe_defers_the_batch_with_the_aimd_cut(action: str) -> None:
    w = AllocatorWorld()
    for i in range(3):
        w.add_node(f"n{i}", "m5.large")
    w.emu.fail_next(action, "RequestLimitExceeded")
    out = w.deliver([w.report(f"n{i}", warm_ip=2, pending=2) for i in range(3)])  # must not raise
    assert out.deferred == 3 and out.served == 0 and out.failed_message_ids == []
    assert all(o.reason == f"{action} throttled" for o in out.nodes.values())
    assert w.mutating_calls() == 0
    assert w.buckets.load(action, w.clock.now()).rate_factor < 1.0  # the AIMD cut
    # Each report comes back (unread, delayed) and is served then.
    w.drain()
    assert all(w.addresses(f"n{i}") >= 4 for i in range(3))
    ids = [w.nodes[n] for n in ("n0", "n1", "n2")]
    assert w.ledger.last_seqs("demo", ids) == dict.fromkeys(ids, 1)


def test_a_throttled_describe_on_re_read_defers_the_moved_nodes() -> None:
    # After the claim, a node served meanwhile by another invocation is re-read;
    # a throttle there defers it too (and releases its lease).
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    first = w.report("n1", warm_ip=2, pending=1)
    second = w.report("n1", warm_ip=4, pending=3)

    class _ServedMeanwhile:
        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self.reads = 0

        def last_seqs(self, cluster: str, nodes: list[str]) -> dict[str, int]:
            self.reads += 1
            out: dict[str, int] = self._inner.last_seqs(cluster, nodes)
            if self.reads == 1:
                assert self._inner.record(cluster, "n1", first.seq, {"instance_id": w.nodes["n1"]}, w.clock.now())
                w.emu.fail_next("DescribeInstances", "RequestLimitExceeded")
            return out

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    alloc = w.allocator(ledger=_ServedMeanwhile(w.ledger))
    out = w.deliver([second], alloc=alloc)
    assert out.nodes[w.nodes["n1"]].status == "deferred" and out.failed_message_ids == []
    assert w.mutating_calls() == 0
    assert w.buckets.load("DescribeInstances", w.clock.now()).rate_factor < 1.0
    assert w.leases.claim("demo", w.nodes["n1"], "someone-else", w.clock.now(), 10)  # lease released
    w.leases.release("demo", "n1", "someone-else")
    w.drain()
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == second.seq


# --- the invocation's deadline ----------------------------------------------------


def test_nothing_starts_inside_the_deadline_margin() -> None:
    w = AllocatorWorld()
    for i in range(2):
        w.add_node(f"n{i}", "m5.large")
    before = w.ec2_stats().get("DescribeInstances", {}).get("calls", 0)
    recs = w.records([w.report(f"n{i}", warm_ip=2, pending=2) for i in range(2)])
    out = w.alloc.handle_batch(recs, deadline=w.clock.now() + w.settings.deadline_margin_s - 1)
    assert out.deferred == 2 and out.failed_message_ids == []
    assert w.ec2_stats().get("DescribeInstances", {}).get("calls", 0) == before
    assert len(w.queued(w.reports_url, wait_s=60)) == 2  # re-sent, nothing lost


class _SlowCalls:
    """EC2 whose mutating calls each take ``delay_s`` of virtual time."""

    def __init__(self, inner: Any, clock: Any, delay_s: float) -> None:
        self._inner = inner
        self._clock = clock
        self.delay_s = delay_s
        self.started: list[float] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._inner, name)
        if name.startswith("describe"):
            return fn

        def slow(**kw: Any) -> Any:
            self.started.append(self._clock.now())
            self._clock.advance(self.delay_s)
            return fn(**kw)

        return slow


def test_work_stops_a_margin_before_the_deadline_and_the_rest_is_deferred() -> None:
    w = AllocatorWorld()
    for i in range(4):
        w.add_node(f"n{i}", "m5.large")
        w.tag_primary(f"n{i}")  # as the launch template would: no first-contact CreateTags in the timing
    slow = _SlowCalls(w.ec2_client, w.clock, delay_s=4.0)
    alloc = w.allocator(ec2=slow)
    start = w.clock.now()
    deadline = start + 20.0
    out = alloc.handle_batch(w.records([w.report(f"n{i}", warm_ip=8, pending=8) for i in range(4)]), deadline=deadline)
    assert out.failed_message_ids == []
    assert slow.started and max(slow.started) < deadline - w.settings.deadline_margin_s
    assert out.served >= 1 and out.deferred >= 1
    for node, res in out.nodes.items():
        assert res.status in ("served", "deferred"), node
    # Every node not fully served gets its report back (or reports again after
    # the partial result it was sent); all of them end up served.
    w.drain()
    for i in range(4):
        assert w.addresses(f"n{i}") >= 8, i


# --- the lease outlives the function ----------------------------------------------


def test_the_lease_ttl_is_derived_from_the_function_timeout() -> None:
    s = Settings(cluster="c", allocate_timeout_s=900)
    assert s.lease_ttl_s >= 900 + LEASE_TTL_MARGIN_S
    assert Settings(cluster="c").lease_ttl_s >= Settings(cluster="c").allocate_timeout_s + LEASE_TTL_MARGIN_S
    with pytest.raises(ValidationError, match="WARMPOOL_LEASE_TTL_S"):
        Settings(cluster="c", allocate_timeout_s=900, lease_ttl_s=60)


def test_the_lease_outlives_the_invocation() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    ttls: list[float] = []

    class _Spy:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def claim(self, cluster: str, node: str, owner: str, now: float, ttl_s: float) -> bool:
            ttls.append(now + ttl_s)
            return bool(self._inner.claim(cluster, node, owner, now, ttl_s))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    w.alloc = w.allocator(leases=_Spy(w.leases))
    deadline = w.clock.now() + 3 * w.settings.lease_ttl_s  # a longer run than the configured TTL
    out = w.alloc.handle_batch(w.records([w.report("n1", warm_ip=2, pending=2)]), deadline=deadline)
    assert out.served == 1
    assert ttls and min(ttls) > deadline


# --- UnprocessedKeys --------------------------------------------------------------


class _Unprocessed:
    """DynamoDB that never returns the rows whose key contains ``needle``
    (left in UnprocessedKeys, as under throughput limits)."""

    def __init__(self, inner: Any, needle: str) -> None:
        self._inner = inner
        self.needle = needle
        self.calls = 0

    def batch_get_item(self, **kw: Any) -> Any:
        self.calls += 1
        req = kw["RequestItems"]
        table, spec = next(iter(req.items()))
        keep = [k for k in spec["Keys"] if self.needle not in str(k)]
        held = [k for k in spec["Keys"] if self.needle in str(k)]
        resp: dict[str, Any] = {"Responses": {table: []}, "UnprocessedKeys": {}}
        if keep:
            resp = self._inner.batch_get_item(RequestItems={table: {**spec, "Keys": keep}})
            resp.setdefault("UnprocessedKeys", {})
        if held:
            resp["UnprocessedKeys"] = {table: {**spec, "Keys": held}}
        return resp

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def dynamo() -> Iterator[Any]:
    with mock_aws():
        yield moto_dynamo()


def test_unprocessed_ledger_rows_are_never_read_as_no_row(dynamo: Any) -> None:
    w = AllocatorWorld(dynamo=dynamo)
    led = DynamoLedger(_Unprocessed(dynamo, "#n1"), w.settings.ledger_table)
    w.ledger.record("demo", "n1", 5, {"instance_id": "i-1"}, 1.0)
    w.ledger.record("demo", "n2", 3, {"instance_id": "i-2"}, 1.0)
    from warmpool.ports import LedgerUnread

    with pytest.raises(LedgerUnread) as err:
        led.last_seqs("demo", ["n1", "n2", "n3"])
    assert err.value.unread == frozenset({"n1"})
    assert err.value.seqs == {"n2": 3, "n3": -1}


def test_a_report_whose_ledger_row_went_unread_is_deferred_not_served_as_fresh(dynamo: Any) -> None:
    w = AllocatorWorld(dynamo=dynamo)
    w.add_node("n1", "m5.large")
    w.add_node("n2", "m5.large")
    w.deliver([w.report("n1", warm_ip=2, seq=5)])
    served = w.addresses("n1")
    # A stale report (seq 3 <= 5) of n1 arrives while its row cannot be read.
    alloc = w.allocator(
        ledger=DynamoLedger(_Unprocessed(dynamo, f"node#demo#{w.nodes['n1']}{chr(39)}"), w.settings.ledger_table)
    )
    stale = w.report("n1", warm_ip=9, pending=9, seq=3)
    out = w.deliver([stale, w.report("n2", warm_ip=2, pending=2)], alloc=alloc)
    assert out.failed_message_ids == []
    assert out.nodes[w.nodes["n1"]].status == "deferred"
    assert w.addresses("n1") == served  # nothing done on a stale view
    assert out.nodes[w.nodes["n2"]].status == "served" and w.addresses("n2") >= 2
    msgs = w.queued(w.reports_url, wait_s=60)
    assert [m["Body"] for m in msgs] == [stale.to_json()]
    # Read properly, it is stale and dropped.
    out = w.deliver([stale])
    assert out.stale == 1 and w.addresses("n1") == served


def test_the_settings_margin_is_below_the_function_timeout() -> None:
    with pytest.raises(ValidationError, match="WARMPOOL_DEADLINE_MARGIN_S"):
        Settings(cluster="c", allocate_timeout_s=10, deadline_margin_s=10)


def test_the_in_memory_ledger_fails_unread_rows_like_dynamodb() -> None:
    # The fake's fault knob gives the same answer as DynamoDB's UnprocessedKeys
    # through DynamoLedger (test above): the unread nodes, and the rest read.
    from emulated.memstores import MemLedger
    from warmpool.ports import LedgerUnread

    led = MemLedger()
    led.record("demo", "n1", 5, {"instance_id": "i-1"}, 1.0)
    led.record("demo", "n2", 3, {"instance_id": "i-2"}, 1.0)
    led.unread = {"n1"}
    with pytest.raises(LedgerUnread) as err:
        led.last_seqs("demo", ["n1", "n2", "n3"])
    assert err.value.unread == frozenset({"n1"})
    assert err.value.seqs == {"n2": 3, "n3": -1}


def test_a_report_whose_ledger_row_went_unread_is_deferred_in_memory_too() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=2, seq=5)])
    served = w.addresses("n1")
    w.ledger.unread = {w.nodes["n1"]}
    stale = w.report("n1", warm_ip=9, pending=9, seq=3)
    out = w.deliver([stale])
    assert out.nodes[w.nodes["n1"]].status == "deferred" and out.failed_message_ids == []
    assert w.addresses("n1") == served
    w.ledger.unread = set()
    assert [m["Body"] for m in w.queued(w.reports_url, wait_s=60)] == [stale.to_json()]
