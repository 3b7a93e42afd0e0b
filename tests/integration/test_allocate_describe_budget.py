"""Issue 21, defects 8 and 9: the Describe budget is the account's (Karpenter, the
cluster autoscaler and other clusters read from it too). Every Describe the allocator
makes for a batch is paid from the Describe buckets, and one node's stream of reports
cannot keep those buckets empty for every other node."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from functions.allocator import Record
from tests.helpers.allocate_world import AllocatorWorld
from warmpool.buckets import refill
from warmpool.messages import PoolReport

DNI = "DescribeNetworkInterfaces"
SMALL_DESCRIBE: dict[str, Any] = {
    "bucket_capacity": {"DescribeInstances": 2, DNI: 2},
    "bucket_refill": {"DescribeInstances": 1, DNI: 1},
}
"""Describe buckets of 1.6 tokens refilled at 0.8/s (the default budget fraction)."""


def _tokens(w: AllocatorWorld, action: str) -> float:
    now = w.clock.now()
    return refill(w.buckets.load(action, now), w.settings.bucket_spec(action), now).tokens


def _calls(w: AllocatorWorld, action: str) -> int:
    return int(w.ec2_stats().get(action, {}).get("calls", 0))


def _with_made_up_eni(r: PoolReport) -> str:
    body = json.loads(r.to_json())
    body["enis"].append(
        {
            "eni_id": "eni-0badc0ffee0000001",
            "device_index": 5,
            "subnet_id": body["enis"][0]["subnet_id"],
            "primary_ip": "10.0.63.250",
            "ips": [],
            "prefixes": [],
            "assigned": 0,
        }
    )
    return json.dumps(body)


def test_the_foreign_eni_check_is_paid_from_the_describe_bucket() -> None:
    """Defect 8: a report naming an ENI EC2 does not show on the instance (made up, or
    just deleted) made one more DescribeNetworkInterfaces outside the buckets."""
    w = AllocatorWorld()
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=1)])
    calls, tokens = _calls(w, DNI), _tokens(w, DNI)
    out = w.deliver([_with_made_up_eni(w.report("n1", warm_ip=1, pending=40))])
    assert out.served == 1 and out.rejected == 0  # gone is fine; only another instance's ENI is refused
    made = _calls(w, DNI) - calls
    assert made == 2  # the batch's round and the foreign-ENI check
    assert tokens - _tokens(w, DNI) == made, "a Describe was made that no token paid for"


def test_a_made_up_eni_in_every_report_spends_the_nodes_own_describe_share() -> None:
    """The check counts against the fair share of the node that asked for it: a node naming a
    made-up ENI in each report is deferred, not another node."""
    w = AllocatorWorld(**SMALL_DESCRIBE)
    w.add_node("noisy")
    w.add_node("h")
    w.deliver([w.report("noisy", warm_ip=1), w.report("h", warm_ip=1)])
    w.clock.advance(10)
    served = _flood(w, lambda: _with_made_up_eni(w.report("noisy", warm_ip=1, pending=1)), honest="h")
    assert served is not None and served <= 10.0, served


def _flood(w: AllocatorWorld, noisy: Callable[[], str], *, honest: str, seconds: float = 30.0) -> float | None:
    """Every 0.2 s a batch of the noisy node's report alone; then, in a batch of their own
    (another invocation), the reports re-sent to the queue, the first time with the honest
    node's report asking for addresses. When (seconds after its report) the honest node
    was served, or None; the flood goes on to the end either way."""
    c = w.sqs.client()
    start = w.clock.now()
    want = w.addresses(honest) + 3
    pending: list[str] = [w.report(honest, warm_ip=1, pending=want).to_json()]
    served: float | None = None
    while w.clock.now() - start < seconds:
        w.clock.advance(0.2)
        w.deliver([noisy()])
        bodies = pending
        pending = []
        while msgs := c.receive_message(QueueUrl=w.reports_url, MaxNumberOfMessages=10).get("Messages", []):
            for m in msgs:
                bodies.append(m["Body"])
                c.delete_message(QueueUrl=w.reports_url, ReceiptHandle=m["ReceiptHandle"])
        if bodies:
            w.alloc.handle_batch([Record(f"r-{i}", b) for i, b in enumerate(bodies)])
        if served is None and w.addresses(honest) >= want:
            served = w.clock.now() - start
    return served


def test_a_stream_of_no_op_reports_does_not_starve_other_nodes_of_describe() -> None:
    """Defect 9: every report paid a Describe round, so one node's stream of valid no-op
    reports kept the Describe buckets empty and every other node was deferred. A report
    that cannot lead to a call is recorded without one."""
    w = AllocatorWorld(**SMALL_DESCRIBE)
    w.add_node("noisy")
    w.add_node("h")
    w.deliver([w.report("noisy", warm_ip=1), w.report("h", warm_ip=1)])
    w.clock.advance(10)
    calls = _calls(w, "DescribeInstances")
    served = _flood(w, lambda: w.report("noisy", warm_ip=1).to_json(), honest="h")
    assert served is not None and served <= 2.0, served
    assert w.tally.get("ReportsQuiet") >= 140  # the noisy node's reports over 30 s
    assert _calls(w, "DescribeInstances") - calls <= 3  # the honest node's reads, not one per no-op


def test_a_stream_of_reports_that_need_reading_gets_a_fair_share_of_describe() -> None:
    """Defect 9 with reports that must be read (a pod waiting, which free addresses
    already serve): the noisy node's reads are bounded by its fair share of the Describe
    buckets while another node waits for them."""
    w = AllocatorWorld(**SMALL_DESCRIBE)
    w.add_node("noisy")
    w.add_node("h")
    w.deliver([w.report("noisy", warm_ip=1), w.report("h", warm_ip=1)])
    w.clock.advance(10)
    served = _flood(w, lambda: w.report("noisy", warm_ip=1, pending=1).to_json(), honest="h")
    assert served is not None and served <= 10.0, served
    assert w.tally.get("FairShareDeferred") > 0
