"""The allocator on a big batch, redelivery and concurrency (emulated EC2, fast SQS)."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from functions.allocator import ThreadMapper
from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names
from warmpool.limits import known
from warmpool.messages import Attached

SLOTS = known("m5.4xlarge").slots_per_eni  # AllocatorWorld.add_node's default type


def surged(demand: int) -> int:
    """Addresses a node holds after one allocation while its pods wait: the
    assign on the primary ENI fills it (one call whatever the count); new ENIs
    hold exactly the rest. A second, doubled allocation would show as more."""
    return max(demand, SLOTS)


def _burst(w: AllocatorWorld, nodes: int = 200) -> list:
    """500 reports from ``nodes`` nodes: two or three per node, seq rising, the last asks most."""
    for i in range(nodes):
        w.add_node(f"n{i:03d}")
    reports = []
    for rnd in range(3):
        for i in range(nodes):
            if rnd == 2 and i % 2:
                continue
            reports.append(w.report(f"n{i:03d}", warm_ip=5, pending=10 * (rnd + 1) + (i % 3) * 5))
    return reports[:500]


def test_500_reports_from_200_nodes_one_call_per_eni_no_throttle() -> None:
    w = AllocatorWorld()
    reports = _burst(w)
    assert len(reports) == 500
    first = w.deliver(reports)
    assert first.superseded == 300 and first.invalid == 0 and first.rejected == 0
    assert first.served + first.deferred == 200
    assert first.deferred > 0  # 200 nodes need more tokens than the budget holds at once
    outs = w.drain()
    stats = w.ec2_stats()
    assert w.throttled() == 0
    # One Describe round per batch (100 instances per filter), never one per report.
    batches = 1 + len(outs)
    assert stats["DescribeInstances"]["calls"] <= 2 * batches
    assert stats["DescribeNetworkInterfaces"]["calls"] <= 2 * batches
    newest = {}
    for r in reports:
        newest[r.node] = r
    want = {n: surged(r.pending_demand + 5) for n, r in newest.items()}
    for node, addrs in want.items():
        assert w.addresses(node) == addrs, node
    # One call per ENI touched: one Assign on the primary, one Create (+attach, modify) per new ENI.
    new_enis = sum(len(w.enis(n)) - 1 for n in want)
    assert stats["AssignPrivateIpAddresses"]["calls"] == 200
    assert stats["CreateNetworkInterface"]["calls"] == new_enis
    assert stats["AttachNetworkInterface"]["calls"] == new_enis
    assert len(set(w.all_addresses())) == len(w.all_addresses())
    assert w.detached_enis() == []


def test_redelivery_of_the_same_batch_makes_no_mutating_call() -> None:
    w = AllocatorWorld()
    for i in range(20):
        w.add_node(f"n{i}")
    batch = [w.report(f"n{i}", warm_ip=3, pending=4) for i in range(20)]
    w.deliver(batch)
    w.drain()
    before = w.mutating_calls()
    again = w.deliver(batch)
    assert again.stale == 20 and again.served == 0
    assert w.mutating_calls() == before


@pytest.mark.parametrize("overlap_same_seq", [True, False])
def test_concurrent_invocations_on_overlapping_nodes_never_double_allocate(overlap_same_seq: bool) -> None:
    w = AllocatorWorld()
    for i in range(30):
        w.add_node(f"n{i:02d}")
    a_reports = [w.report(f"n{i:02d}", warm_ip=2, pending=8) for i in range(0, 20)]
    if overlap_same_seq:
        b_reports = [*a_reports[10:], *(w.report(f"n{i:02d}", warm_ip=2, pending=8) for i in range(20, 30))]
    else:
        b_reports = [w.report(f"n{i:02d}", warm_ip=2, pending=8) for i in range(10, 30)]
    a, b = w.allocator(ThreadMapper(4)), w.allocator(ThreadMapper(4))
    barrier = threading.Barrier(2)

    def run(alloc, reps):  # type: ignore[no-untyped-def]
        barrier.wait()
        alloc.handle_batch(w.records(reps))

    threads = [threading.Thread(target=run, args=(a, a_reports)), threading.Thread(target=run, args=(b, b_reports))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.drain()
    for i in range(30):
        assert w.addresses(f"n{i:02d}") == surged(10), f"n{i:02d}"
    assert len(set(w.all_addresses())) == len(w.all_addresses())
    assert w.throttled() == 0


def test_results_reach_each_node_queue_with_what_was_done() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=2, pending=40)])
    (res,) = w.results("n1")
    assert res.in_reply_to == 1 and res.instance_id == w.nodes["n1"]
    kinds = Counter(a.kind for a in res.actions)
    assert kinds == {"assigned": 1, "attached": 1}
    att = next(a for a in res.actions if isinstance(a, Attached))
    assert att.device_index == 1 and att.subnet_cidr == "10.0.0.0/18" and len(att.ips) == 13


def test_the_allocator_creates_a_verified_nodes_result_queue_at_first_contact() -> None:
    w = AllocatorWorld()
    iid = w.add_node("n1", queue=False)
    out = w.deliver([w.report("n1", warm_ip=2, pending=3)])
    assert out.served == 1 and w.tally.get("ResultQueuesCreated") == 1
    (res,) = w.results("n1")  # the queue exists and holds the reply
    assert res.instance_id == iid and w.tally.get("ResultQueueMissing") == 0


def test_a_result_queue_the_allocator_creates_refuses_plain_http() -> None:
    """Issue 12: the queues the allocator creates carry the same deny-without-TLS policy as the
    stack's own two (``enforce_ssl``), naming the queue's own ARN."""
    w = AllocatorWorld()
    iid = w.add_node("n1", queue=False)
    w.deliver([w.report("n1", warm_ip=2, pending=3)])
    c = w.sqs.client()
    url = c.get_queue_url(QueueName=names.result_queue("demo", iid))["QueueUrl"]
    policy = json.loads(c.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    (st,) = policy["Statement"]
    account = w.alloc.settings.reports_queue_url.rstrip("/").split("/")[-2]
    assert st["Effect"] == "Deny" and st["Action"] == "sqs:*" and st["Principal"] == {"AWS": "*"}
    assert st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert st["Resource"] == f"arn:aws:sqs:{w.alloc.settings.region}:{account}:{names.result_queue('demo', iid)}"


def test_a_result_queue_made_before_the_policy_still_counts_as_there() -> None:
    """A queue an earlier allocator made without the policy: CreateQueue now answers
    QueueAlreadyExists (other attributes); the reply is still delivered, nothing logged as lost."""
    w = AllocatorWorld()
    iid = w.add_node("n1", queue=False)
    w.sqs.client().create_queue(QueueName=names.result_queue("demo", iid))
    out = w.deliver([w.report("n1", warm_ip=2, pending=3)])
    assert out.served == 1 and w.tally.get("ResultQueueMissing") == 0
    (res,) = w.results("n1")
    assert res.instance_id == iid


def test_missing_result_queue_does_not_fail_the_batch() -> None:
    w = AllocatorWorld()
    w.add_node("n1", queue=False)
    w.deliver([w.report("n1", warm_ip=2, pending=3)])  # first contact creates the queue
    c = w.sqs.client()
    c.delete_queue(QueueUrl=c.get_queue_url(QueueName=names.result_queue("demo", w.nodes["n1"]))["QueueUrl"])
    out = w.deliver([w.report("n1", warm_ip=2, pending=20)])
    assert out.served == 1 and out.failed_message_ids == []
    assert w.tally.get("ResultQueueMissing") == 1
    assert w.tally.get("ResultQueuesCreated") == 1  # only at first contact


def test_through_a_real_boto3_client_on_the_emulator() -> None:
    w = AllocatorWorld(boto=True)
    for i in range(5):
        w.add_node(f"n{i}")
    out = w.deliver([w.report(f"n{i}", warm_ip=2, pending=35) for i in range(5)])
    assert out.served == 5 and out.failed_message_ids == []
    assert all(w.addresses(f"n{i}") == 37 for i in range(5))
    assert w.detached_enis() == [] and w.throttled() == 0


def test_two_instances_under_one_node_name_each_get_their_own_outcome() -> None:
    """The instance is the key (docs/allocator.md, "One batch" 2): two instances that
    report the same ``node`` label in one batch, one deferred (its lease is held
    elsewhere) and one served, are each sent their own outcome, never the other's."""
    w = AllocatorWorld()
    a = w.add_node("a")
    b = w.add_node("b")
    w.leases.claim(w.cluster, a, "another-invocation", w.clock.now(), 60.0)
    ra = w.report("a", pending=3, extra={"node": "shared"})
    rb = w.report("b", pending=3, extra={"node": "shared"})
    out = w.deliver([ra, rb])
    got_a, got_b = w.results("a"), w.results("b")
    assert [(r.instance_id, r.in_reply_to) for r in got_a] == [(a, ra.seq)]
    assert [x.kind for x in got_a[0].actions] == ["deferred"], "instance a was sent another instance's actions"
    assert [(r.instance_id, r.in_reply_to) for r in got_b] == [(b, rb.seq)]
    assert "assigned" in [x.kind for x in got_b[0].actions]
    assert w.addresses("a") == 0 and w.addresses("b") >= 3
    assert (out.served, out.deferred) == (1, 1)
    assert out.nodes[a].status == "deferred" and out.nodes[b].status == "served"
