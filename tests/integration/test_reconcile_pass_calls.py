"""The reconciler's pass in calls, not time (issue 25): its Describe round grows with the
cluster's pages, not a call per hundred instances twice over, and it sees every result queue
(the fast SQS pages ``ListQueues`` as SQS does; it answered the first 1,000 before)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names


def _world(nodes: int) -> AllocatorWorld:
    w = AllocatorWorld()
    for i in range(nodes):
        iid = w.add_node(f"n{i:04d}")
        w.ledger.record("demo", iid, 1, {"instance_id": iid}, w.clock.now())
    w.emu.reset_stats()
    return w


def _describes(w: AllocatorWorld) -> dict[str, int]:
    return {a: v["calls"] for a, v in w.ec2_stats().items() if a.startswith("Describe") and v["calls"]}


def test_a_pass_lists_the_cluster_s_instances_in_pages_and_asks_none_again() -> None:
    w = _world(1_050)
    out = w.reconciler().run()
    assert out.forgotten_nodes == [] and out.queues_deleted == [] and out.absent_kept == []
    # two pages of the cluster's instances (1,000 a page), one of its ENIs; before, 11
    # DescribeInstances and 11 DescribeNetworkInterfaces for the ledger, about as many again for the queues
    assert _describes(w) == {"DescribeInstances": 2, "DescribeNetworkInterfaces": 1}


def test_an_untagged_or_ended_instance_is_still_read_by_id_and_retired() -> None:
    w = _world(5)
    untagged, ended = w.nodes["n0001"], w.nodes["n0002"]
    del w.emu.instances[untagged].tags[names.cluster_tag_key("demo")]
    w.emu.terminate_instance(ended)
    out = w.reconciler().run()
    assert sorted(out.forgotten_nodes) == sorted([untagged, ended])
    assert sorted(out.queues_deleted) == sorted([untagged, ended])
    # the listing (the terminated one still carries the tag) and one read by id for the untagged one
    assert _describes(w)["DescribeInstances"] == 2


def test_an_orphan_queue_beyond_the_first_thousand_is_found() -> None:
    w = _world(1_200)
    gone = w.nodes["n1199"]
    w.ledger.forget("demo", gone, instance_id=gone, last_seq=1)  # a queue without an entry
    w.emu.terminate_instance(gone)
    out = w.reconciler().run()
    assert out.orphan_queues_deleted == [gone]


def test_list_queues_pages_with_a_token() -> None:
    w = AllocatorWorld()
    c = w.sqs.client()
    made = sorted(c.create_queue(QueueName=f"q-{i:04d}")["QueueUrl"] for i in range(2_345))
    got: list[str] = []
    token = ""
    pages = 0
    while True:
        resp = c.list_queues(QueueNamePrefix="q-", MaxResults=1000, **({"NextToken": token} if token else {}))
        got += resp.get("QueueUrls", [])
        pages += 1
        token = resp.get("NextToken", "")
        if not token:
            break
    assert got == made and pages == 3
    assert len(c.list_queues(QueueNamePrefix="q-")["QueueUrls"]) == 1000  # no MaxResults: 1,000, no token
    with pytest.raises(ClientError):
        c.list_queues(QueueNamePrefix="q-", MaxResults=0)
